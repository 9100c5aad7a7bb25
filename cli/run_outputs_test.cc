// The output folder: only the files a record has content for, listed; a folder replaced
// as a whole (never a mix of two runs), other files in it kept; grouped failures; the
// provenance every run records.
#include "cli/run_outputs.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/trace_backends.h"
#include "runtime/device/cpu/device.h"
#include "testing/status_matchers.h"

using shardlab::testlib::IsOk;

namespace shardlab::cli {
namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("shardlab_run_outputs_test_" + name);
  fs::remove_all(dir);
  return dir;
}

// A finished run of two ranks with one traced event per rank.
RunRecord finished_run() {
  RunRecord r;
  r.scenario = "outputs_test";
  r.world_size = 2;
  r.global_batch = 4;
  for (int k = 0; k < 2; ++k) {
    runtime::train::FsdpTrainResult res;
    res.losses = {1.5, 1.25};
    res.step_times = {1000, 1000};
    res.step_starts = {0, 1000};
    res.final_params = {1.0f, 2.0f};
    r.ranks.push_back(res);
    sim::TraceEvent e("gemm", sim::kTraceCompute, 10, 20);
    e.shapes = {{4, 8}, {8, 2}, {4, 2}};
    sim::TraceEvent f("unshard", sim::kTraceFsdp, 5, 40);
    f.unit = 1;
    f.step = 1;
    f.phase = "forward";
    f.collective = "all_gather";
    r.traces.push_back({e, f});
  }
  r.stack = {{"device", "gaudi2 (simulated)"}, {"network", "switch"}, {"cpu_offload", false}};
  r.version = "v0-test";
  r.host = "testhost";
  return r;
}

std::vector<std::string> files_in(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(RunOutputs, ListsExactlyTheFilesItWrote) {
  const fs::path dir = fresh_dir("list");
  std::vector<std::string> written;
  ASSERT_TRUE(write_run_outputs(dir.string(), finished_run(), &written).is_ok());
  EXPECT_EQ(written, (std::vector<std::string>{"summary.txt", "metrics.json", "loss.csv", "memory.csv", "trace.json"}));
  EXPECT_EQ(files_in(dir),
            (std::vector<std::string>{"loss.csv", "memory.csv", "metrics.json", "summary.txt", "trace.json"}));
  // A run that failed before any rank trained: the summary and the metrics only.
  RunRecord failed;
  failed.status = "INVALID_ARGUMENT: nothing ran";
  ASSERT_TRUE(write_run_outputs(dir.string(), failed, &written).is_ok());
  EXPECT_EQ(written, (std::vector<std::string>{"summary.txt", "metrics.json"}));
  // The folder was replaced as a whole: no trace or loss of the earlier run is left beside
  // the new summary, and nothing staged is left beside the folder.
  EXPECT_EQ(files_in(dir), (std::vector<std::string>{"metrics.json", "summary.txt"}));
  for (const auto& e : fs::directory_iterator(dir.parent_path())) {
    EXPECT_EQ(e.path().filename().string().find(".shardlab_run_outputs_test_list.staged"), std::string::npos);
  }
  fs::remove_all(dir);
}

// Each step's exposed communication (step time not covered by the traced rank's compute)
// and host<->device bytes reach metrics.json, and the summary's step table shows the former.
TEST(RunOutputs, ReportsExposedCommunicationAndHostTrafficPerStep) {
  RunRecord r = finished_run();
  r.ranks[0].host_transfer_bytes = {7, 9};
  const nlohmann::json m = metrics_json(r);
  // Step 1 holds the 20 ns gemm, step 2 no compute: 980 ns and 1000 ns exposed.
  EXPECT_EQ(m["exposed_comm_s_per_step"], (std::vector<double>{980e-9, 1000e-9}));
  EXPECT_EQ(m["host_transfer_bytes_per_step"], (std::vector<std::int64_t>{7, 9}));
  const std::string summary = summary_text(r);
  EXPECT_NE(summary.find("simulated step time  exposed comm (rank 0)\n"), std::string::npos) << summary;
  EXPECT_NE(summary.find("0.000001 s           0.000001 s\n"), std::string::npos) << summary;
  // Without a trace there is nothing to tell: no column.
  r.traces.clear();
  EXPECT_EQ(summary_text(r).find("exposed comm"), std::string::npos);
}

// An Open MPI run keeps rank 0's result only; with every rank's step times gathered
// (rank_steps) and every rank traced, metrics.json has every rank's breakdown and the
// summary says where the time went — a slow rank 1 computes longest, rank 0 waits.
TEST(RunOutputs, GivesEveryRanksBreakdownFromGatheredStepTimes) {
  RunRecord r = finished_run();
  r.backend = "mpi";
  r.ranks.resize(1);
  r.rank_steps = {{{0, 1000}, {1000, 1000}}, {{0, 1000}, {1000, 1000}}};
  r.traces[1].push_back(sim::TraceEvent("gemm", sim::kTraceCompute, 1100, 600));  // rank 1, step 2
  r.traces[1].push_back(sim::TraceEvent("gemm", sim::kTraceCompute, 200, 700));   // rank 1, step 1
  const nlohmann::json m = metrics_json(r);
  ASSERT_TRUE(m.contains("step_breakdown_s_per_rank")) << m.dump();
  const auto& per_rank = m["step_breakdown_s_per_rank"];
  ASSERT_EQ(per_rank.size(), 2u);
  // Rank 0: 20 ns of compute in step 1, none in step 2 (median 10 ns); rank 1: 720 and 600.
  EXPECT_DOUBLE_EQ(per_rank[0]["compute"].get<double>(), 10e-9);
  EXPECT_DOUBLE_EQ(per_rank[1]["compute"].get<double>(), 660e-9);
  EXPECT_DOUBLE_EQ(per_rank[1]["exposed_comm"].get<double>(), 340e-9);
  const std::string summary = summary_text(r);
  EXPECT_NE(summary.find("where the time went (median per step): compute 0.000001 s on rank 1 (most)"),
            std::string::npos)
      << summary;
  // Without the gathered step times only rank 0's breakdown can be told.
  r.rank_steps.clear();
  EXPECT_FALSE(metrics_json(r).contains("step_breakdown_s_per_rank"));
}

TEST(RunOutputs, KeepsOtherFilesInTheFolderAndRemovesStaleOutputs) {
  const fs::path dir = fresh_dir("foreign");
  ASSERT_TRUE(write_run_outputs(dir.string(), finished_run()).is_ok());
  fs::create_directories(dir / "ckpt");
  std::ofstream(dir / "ckpt" / "index.json") << "{}";
  RunRecord failed;
  failed.status = "UNAVAILABLE: crashed";
  ASSERT_TRUE(write_run_outputs((dir / "").string(), failed).is_ok());  // a trailing slash names the same folder
  EXPECT_EQ(files_in(dir), (std::vector<std::string>{"ckpt", "metrics.json", "summary.txt"}));
  EXPECT_EQ(slurp(dir / "ckpt" / "index.json"), "{}");
  EXPECT_NE(slurp(dir / "summary.txt").find("status: UNAVAILABLE: crashed"), std::string::npos);
  fs::remove_all(dir);
}

TEST(RunOutputs, TraceHasOpShapesAndFsdpContext) {
  const fs::path dir = fresh_dir("trace");
  ASSERT_TRUE(write_run_outputs(dir.string(), finished_run()).is_ok());
  const auto trace = nlohmann::json::parse(slurp(dir / "trace.json"));
  int gemms = 0, unshards = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    if (e["name"] == "gemm") {
      ++gemms;
      EXPECT_EQ(e["cat"], "compute");
      EXPECT_EQ(e["args"]["shapes"], nlohmann::json::parse("[[4,8],[8,2],[4,2]]"));
    }
    if (e["name"] == "unshard") {
      ++unshards;
      EXPECT_EQ(e["cat"], "fsdp");
      EXPECT_EQ(e["tid"], sim::kTraceFsdp);
      EXPECT_EQ(e["args"]["unit"], 1);
      EXPECT_EQ(e["args"]["step"], 1);
      EXPECT_EQ(e["args"]["phase"], "forward");
      EXPECT_EQ(e["args"]["collective"], "all_gather");
    }
  }
  EXPECT_EQ(gemms, 2);
  EXPECT_EQ(unshards, 2);
  fs::remove_all(dir);
}

TEST(RunOutputs, RecordsWhatRanAndWhere) {
  const RunRecord r = finished_run();
  const auto m = metrics_json(r);
  EXPECT_EQ(m["stack"]["device"], "gaudi2 (simulated)");
  EXPECT_EQ(m["stack"]["network"], "switch");
  EXPECT_EQ(m["provenance"]["shardlab_version"], "v0-test");
  EXPECT_EQ(m["provenance"]["host"], "testhost");
  const std::string summary = summary_text(r);
  EXPECT_NE(summary.find("stack: device gaudi2 (simulated) · network switch · cpu offload off\n"), std::string::npos);
  EXPECT_NE(summary.find("provenance: shardlab v0-test on testhost\n"), std::string::npos);
  EXPECT_FALSE(shardlab_version().empty());
}

// NOTE [Wall-clock traces]: the real backends' decorators record ops with their shapes and
// FSDP phases with unit, step and phase; the gathered form reads back equal.
TEST(WallClockTraces, RecordOpsWithShapesAndFsdpPhases) {
  runtime::device::cpu::CpuDevice cpu;
  SteadyClock clock;
  sim::TraceRecorder trace;
  const Nanos origin = clock.now();
  TracingDevice dev(&cpu, &clock, origin, &trace);
  auto a = dev.zeros({4, 8}, DType::kF32, MemoryCategory::kOther, "a");
  auto b = dev.zeros({8, 2}, DType::kF32, MemoryCategory::kOther, "b");
  auto c = dev.zeros({4, 2}, DType::kF32, MemoryCategory::kOther, "c");
  ASSERT_TRUE(a.is_ok() && b.is_ok() && c.is_ok());
  FsdpTraceSink phases(&clock, origin, &trace);
  const auto hook = phases.hook();
  phases.set_step(3);
  runtime::fsdp::FsdpEvent e{"reduce_grad", 2, "backward", "reduce_scatter"};
  hook(e);
  runtime::device::Device& as_device = dev;  // the interface's default stream
  ASSERT_TRUE(as_device.gemm(*a, false, *b, false, *c, 1.0f, 0.0f).is_ok());
  e.begin = false;
  hook(e);
  std::vector<sim::TraceEvent> events = trace.events();
  const auto gemm = std::find_if(events.begin(), events.end(), [](const auto& x) { return x.name == "gemm"; });
  ASSERT_NE(gemm, events.end());
  EXPECT_EQ(gemm->stream, sim::kTraceCompute);
  EXPECT_EQ(gemm->shapes, (std::vector<std::vector<std::int64_t>>{{4, 8}, {8, 2}, {4, 2}}));
  EXPECT_GE(gemm->start, 0);
  const auto phase = std::find_if(events.begin(), events.end(), [](const auto& x) { return x.name == "reduce_grad"; });
  ASSERT_NE(phase, events.end());
  EXPECT_EQ(phase->stream, sim::kTraceFsdp);
  EXPECT_EQ(phase->unit, 2);
  EXPECT_EQ(phase->step, 3);
  EXPECT_EQ(phase->phase, "backward");
  EXPECT_EQ(phase->collective, "reduce_scatter");
  EXPECT_LE(phase->start, gemm->start);  // the phase encloses the op
  EXPECT_GE(phase->start + phase->duration, gemm->start + gemm->duration);
  auto back = parse_trace_events(serialize_trace_events(events));
  ASSERT_THAT(back, IsOk());
  ASSERT_EQ(back->size(), events.size());
  for (std::size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ((*back)[i].name, events[i].name);
    EXPECT_EQ((*back)[i].start, events[i].start);
    EXPECT_EQ((*back)[i].shapes, events[i].shapes);
    EXPECT_EQ((*back)[i].unit, events[i].unit);
    EXPECT_EQ((*back)[i].phase, events[i].phase);
  }
  EXPECT_FALSE(parse_trace_events("[[\"gemm\"]]").is_ok());  // a rank's garbled text: an error, not a crash
}

TEST(GroupFailures, GroupsTheSameErrorAcrossRanksAndKeepsTheFaultyFirst) {
  const std::vector<std::string> lines = {
      "UNAVAILABLE: rank 2, step 2: crashed at the top of step 2",
      "TIMEOUT: rank 0, step 2: all_reduce #11 on rank 0 of group 'world' (size 5): timed out at 30.019560 s; never "
      "arrived (group ranks): 2",
      "TIMEOUT: rank 1, step 2: all_reduce #11 on rank 1 of group 'world' (size 5): timed out at 30.019561 s; never "
      "arrived (group ranks): 2",
      "TIMEOUT: rank 3, step 2: all_reduce #11 on rank 3 of group 'world' (size 5): timed out at 30.019560 s; never "
      "arrived (group ranks): 2",
      "TIMEOUT: rank 4, step 2: all_gather #12 on rank 4 of group 'world' (size 5): timed out at 30.019560 s; never "
      "arrived (group ranks): 2"};
  const auto grouped = group_failures(lines, 5);
  ASSERT_EQ(grouped.size(), 3u);
  EXPECT_EQ(grouped[0], lines[0]);
  EXPECT_EQ(grouped[1], "TIMEOUT: 3 of 5 ranks (0, 1, 3) failed the same way, e.g. " + lines[1].substr(9));
  EXPECT_EQ(grouped[2], lines[4]);  // another collective: its own line
}

TEST(GroupFailures, LargeWorldsReadAsRanges) {
  std::vector<std::string> lines = {"UNAVAILABLE: rank 3, step 1: crashed"};
  for (int r = 0; r < 4096; ++r) {
    if (r == 3) continue;
    lines.push_back("TIMEOUT: rank " + std::to_string(r) + ", step 1: all_gather #12 on rank " + std::to_string(r) +
                    " of group 'world': timed out waiting for rank 3");
  }
  const auto grouped = group_failures(lines, 4096);
  ASSERT_EQ(grouped.size(), 2u);
  EXPECT_EQ(grouped[1].rfind("TIMEOUT: 4095 of 4096 ranks (0-2, 4-4095) failed the same way, e.g. rank 0, step 1: "
                             "all_gather #12",
                             0),
            0u)
      << grouped[1];
  EXPECT_EQ(rank_ranges({0, 1, 3, 5, 6, 7}), "0, 1, 3, 5-7");
  EXPECT_EQ(rank_ranges({}), "");
}

}  // namespace
}  // namespace shardlab::cli
