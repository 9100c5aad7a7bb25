// `shardlab run` in timing mode: the RunRecord it fills writes the usual output folder;
// a dumped op graph replays to the same step times; OOM ends the run with the breakdown.
#include "cli/run_timing.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/scenario_to_run_args.h"
#include "runtime/model/bert.h"
#include "sim/models/device/profiles.h"
#include "sim/models/device/stack.h"
#include "sim/timing/capture.h"
#include "testing/status_matchers.h"

using shardlab::testlib::IsOk;

namespace shardlab::cli {
namespace {

// A seed whose data masks a different number of tokens on rank 0 and rank 71 of
// ALargeWorldWhoseRanksDifferInMemoryIsApproximateAndSaysSo (most seeds do).
constexpr std::uint64_t kMemoryDifferingSeed = 0;

RunArgs tiny_args(int world) {
  RunArgs a;
  a.backend = "sim";
  a.world_size = world;
  a.model_name = "bert-tiny";
  a.scenario = "timing_test";
  auto& o = a.train;
  o.model_kind = runtime::train::ModelKind::kBert;
  o.bert.config = *runtime::model::bert_preset("bert-tiny");
  o.bert.head = runtime::model::BertHead::kMaskedLM;
  o.bert.seq_len = 16;
  o.global_batch = 2 * world;
  o.steps = 2;
  o.wrap = runtime::train::WrapPolicy::kByClass;
  o.optimizer.kind = runtime::optim::OptimizerConfig::Kind::kAdamW;
  o.optimizer.lr = 1e-3f;
  return a;
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("shardlab_run_timing_test_" + name)).string();
}

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// NOTE [Traced ranks]: a chosen set of ranks is traced, and trace.json says which.
TEST(TimingRun, TracesTheChosenRanksAndSaysWhich) {
  TimingRunOptions opts;
  opts.trace_ranks = {1, 3};
  RunRecord record;
  ASSERT_TRUE(run_timing(tiny_args(4), opts, record).is_ok()) << record.status;
  EXPECT_EQ(record.traced_ranks, (std::vector<int>{1, 3}));
  ASSERT_EQ(record.traces.size(), 2u);
  EXPECT_FALSE(record.traces[1].empty());
  const std::string dir = temp_path("chosen");
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(write_run_outputs(dir, record).is_ok());
  const auto trace = nlohmann::json::parse(slurp(dir + "/trace.json"));
  std::set<int> pids;
  for (const auto& e : trace["traceEvents"]) pids.insert(e["pid"].get<int>());
  EXPECT_EQ(pids, (std::set<int>{1, 3}));
  EXPECT_EQ(trace["otherData"]["traced_ranks"], "1, 3");
  EXPECT_EQ(trace["otherData"]["world_size"], 4);
  EXPECT_NE(slurp(dir + "/summary.txt").find("trace: ranks 1, 3 of 4"), std::string::npos);
  std::filesystem::remove_all(dir);
  opts.trace_ranks = {4};
  RunRecord outside;
  EXPECT_EQ(run_timing(tiny_args(4), opts, outside).code(), StatusCode::kInvalidArgument);
}

TEST(TimingRun, FillsARecordThatWritesTheUsualOutputFolder) {
  TimingRunOptions opts;
  opts.traced_ranks = 2;
  RunRecord record;
  ASSERT_TRUE(run_timing(tiny_args(4), opts, record).is_ok()) << record.status;
  EXPECT_EQ(record.mode, "timing");
  EXPECT_EQ(record.status, "ok");
  ASSERT_EQ(record.ranks.size(), 4u);
  ASSERT_EQ(record.traces.size(), 2u);
  EXPECT_FALSE(record.traces[0].empty());
  for (const auto& r : record.ranks) {
    ASSERT_EQ(r.step_times.size(), 2u);
    EXPECT_GT(r.step_times[0], 0);
    EXPECT_TRUE(std::isnan(r.losses[0]));
    EXPECT_GT(r.memory.peak_total, 0);
  }
  EXPECT_FALSE(record.ranks[0].memory_timeline.empty());
  EXPECT_TRUE(record.ranks[3].memory_timeline.empty());  // not traced
  const std::string dir = temp_path("out");
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(write_run_outputs(dir, record).is_ok());
  const auto metrics = nlohmann::json::parse(slurp(dir + "/metrics.json"));
  EXPECT_EQ(metrics["mode"], "timing");
  ASSERT_EQ(metrics["loss"].size(), 2u);
  EXPECT_TRUE(metrics["loss"][0].is_null());
  EXPECT_GT(metrics["step_time_s"]["median"].get<double>(), 0.0);
  EXPECT_EQ(metrics["peak_memory_bytes"].size(), 4u);
  EXPECT_FALSE(metrics.contains("approximation"));  // every rank ran its own program
  EXPECT_NE(slurp(dir + "/trace.json").find("all_gather"), std::string::npos);
  std::filesystem::remove_all(dir);
}

// Beyond kMaxPerRankCaptureWorld ranks, one row of 16 tokens per rank: a masked-LM batch
// that masks more than ⌈0.15·16⌉ = 3 tokens decodes more rows (NOTE [Static masked-LM
// shape]), so rank 0's and the last rank's activations differ. The run replays rank 0's
// program for the ranks between and says so — in the header, in metrics.json, naming the
// memory difference — instead of refusing or hiding it.
TEST(TimingRun, ALargeWorldWhoseRanksDifferInMemoryIsApproximateAndSaysSo) {
  RunArgs a = tiny_args(sim::timing::kMaxPerRankCaptureWorld + 8);
  a.train.global_batch = a.world_size;
  a.train.seed = kMemoryDifferingSeed;
  TimingRunOptions opts;
  RunRecord record;
  ASSERT_TRUE(run_timing(a, opts, record).is_ok()) << record.status;
  EXPECT_NE(record.approximation.find("replay rank 0's program"), std::string::npos) << record.approximation;
  EXPECT_NE(record.approximation.find("their memory differs as well (rank 0 vs rank 71: peak activations "),
            std::string::npos)
      << record.approximation;
  EXPECT_NE(record.header.find("(approximate: " + record.approximation + ")"), std::string::npos);
  EXPECT_EQ(metrics_json(record)["approximation"], record.approximation);
}

// NOTE [The oracle by default] (cli/run_command.h): a run whose oracle was turned off says
// so, and by what, in summary.txt and metrics.json; one that ran it says its verdict.
TEST(RunOutputs, SayWhetherTheOracleRan) {
  RunRecord off;
  off.oracle_not_run = "turned off by --no-oracle";
  EXPECT_NE(summary_text(off).find("oracle: not run (turned off by --no-oracle)\n"), std::string::npos)
      << summary_text(off);
  const auto m = metrics_json(off);
  ASSERT_TRUE(m.contains("oracle"));
  EXPECT_EQ(m["oracle"]["ran"], false);
  EXPECT_EQ(m["oracle"]["why"], "turned off by --no-oracle");
  RunRecord on;
  on.check = runtime::train::Comparison{};
  on.check->bitwise = true;
  EXPECT_EQ(metrics_json(on)["oracle"]["ran"], true);
  EXPECT_EQ(summary_text(on).find("oracle: not run"), std::string::npos);
}

// An expectation the run could not check (the oracle turned off) is skipped, says why, and
// does not count as failed; with the oracle's check it is ok or FAILED as the check says.
TEST(RunOutputs, AnExpectationWithoutItsOracleIsSkipped) {
  auto sc = parse_scenario("s.yaml", "name: t\nexpect: {grads_match_unsharded: true}\n");
  ASSERT_THAT(sc, IsOk());
  RunRecord off;
  off.ranks.resize(1);  // a run's metrics carry its expectations
  off.oracle_not_run = "turned off by --no-oracle";
  off.expects = check_expectations(*sc, metrics_json(off));
  ASSERT_EQ(off.expects.size(), 1u);
  EXPECT_TRUE(off.expects[0].skipped);
  EXPECT_FALSE(off.expects[0].ok);
  EXPECT_NE(off.expects[0].detail.find("turned off by --no-oracle"), std::string::npos) << off.expects[0].detail;
  EXPECT_NE(summary_text(off).find("expect grads_match_unsharded: skipped — not checked"), std::string::npos)
      << summary_text(off);
  const auto m = metrics_json(off);
  ASSERT_TRUE(m.contains("expect")) << m.dump();
  EXPECT_EQ(m["expect"][0]["skipped"], true);
  EXPECT_EQ(m["expect"][0]["ok"], false);
  RunRecord failed;
  failed.ranks.resize(1);
  failed.check = runtime::train::Comparison{};
  failed.check->max_grad_diff = 1.0;
  failed.expects = check_expectations(*sc, metrics_json(failed));
  ASSERT_EQ(failed.expects.size(), 1u);
  EXPECT_FALSE(failed.expects[0].skipped);
  EXPECT_FALSE(failed.expects[0].ok);
  EXPECT_FALSE(metrics_json(failed)["expect"][0].contains("skipped"));
  EXPECT_NE(summary_text(failed).find("expect grads_match_unsharded: FAILED"), std::string::npos);
}

TEST(TimingRun, DumpedGraphReplaysToTheSameTimeline) {
  TimingRunOptions opts;
  opts.dump_graph = temp_path("graph.json");
  RunRecord direct;
  ASSERT_TRUE(run_timing(tiny_args(4), opts, direct).is_ok()) << direct.status;
  RunRecord replayed;
  ASSERT_TRUE(replay_graph_file(opts.dump_graph, opts, replayed).is_ok()) << replayed.status;
  std::filesystem::remove(opts.dump_graph);
  ASSERT_EQ(replayed.ranks.size(), direct.ranks.size());
  for (std::size_t r = 0; r < direct.ranks.size(); ++r) {
    EXPECT_EQ(replayed.ranks[r].step_times, direct.ranks[r].step_times);
    EXPECT_EQ(replayed.ranks[r].step_starts, direct.ranks[r].step_starts);
    EXPECT_EQ(replayed.ranks[r].memory.peak, direct.ranks[r].memory.peak);
  }
  ASSERT_EQ(replayed.traces.size(), direct.traces.size());
  EXPECT_EQ(replayed.traces[0].size(), direct.traces[0].size());
}

TEST(TimingRun, OutOfMemoryEndsTheRunWithThePerCategoryBreakdown) {
  TimingRunOptions opts;
  opts.device.capacity_bytes = 4 << 20;
  RunRecord record;
  const Status s = run_timing(tiny_args(4), opts, record);
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.code(), StatusCode::kOutOfMemory);
  EXPECT_EQ(s.exit_code(), 3);
  EXPECT_NE(record.status.find("parameters"), std::string::npos) << record.status;
}

// `fsdp.cpu_offload: true` reaches the capture: the optimizer state leaves the device, and
// the host's AdamW and the PCIe copies lengthen the step (gaudi2 has a host link).
TEST(TimingRun, CpuOffloadMovesTheOptimizerStateToTheHost) {
  TimingRunOptions opts;
  opts.device = *sim::load_device_profile("gaudi2");
  RunRecord plain, offloaded;
  ASSERT_TRUE(run_timing(tiny_args(4), opts, plain).is_ok()) << plain.status;
  RunArgs a = tiny_args(4);
  a.cpu_offload = true;
  ASSERT_TRUE(run_timing(a, opts, offloaded).is_ok()) << offloaded.status;
  const auto optimizer = [](const RunRecord& r) {
    return r.ranks[0].memory.peak[static_cast<int>(MemoryCategory::kOptimizerState)];
  };
  EXPECT_GT(optimizer(plain), 0);
  EXPECT_EQ(optimizer(offloaded), 0);
  EXPECT_GT(offloaded.ranks[0].step_times.back(), plain.ranks[0].step_times.back());
}

// NOTE [Host and device timelines]: bert-tiny on gaudi2 under pytorch_eager — microsecond
// device ops, 15 µs of dispatch each — is host-bound: its step is the host stream's time
// (the host is busy for nearly all of it and the device waits for it most of the step);
// under the ideal stack the same graph runs several times faster. The summary says so.
TEST(TimingRun, AHostBoundToyStepIsTheHostStreamsTime) {
  TimingRunOptions opts;
  opts.device = *sim::load_device_profile("gaudi2");
  opts.traced_ranks = 1;
  RunArgs a = tiny_args(1);
  a.stack = *sim::load_stack("pytorch_eager");
  RunRecord eager, ideal;
  ASSERT_TRUE(run_timing(a, opts, eager).is_ok()) << eager.status;
  ASSERT_TRUE(run_timing(tiny_args(1), opts, ideal).is_ok()) << ideal.status;
  const runtime::train::FsdpTrainResult& r0 = eager.ranks[0];
  ASSERT_EQ(r0.step_times.size(), 2u);
  ASSERT_EQ(eager.host_bound.size(), 2u);
  EXPECT_TRUE(ideal.host_bound.empty());
  const Nanos begin = r0.step_starts.back(), step = r0.step_times.back(), end = begin + step;
  Nanos host_busy = 0;
  for (const sim::TraceEvent& e : eager.traces.front()) {
    if (e.stream != sim::kTraceHost) continue;
    host_busy += std::max<Nanos>(0, std::min(end, e.start + e.duration) - std::max(begin, e.start));
  }
  EXPECT_GE(static_cast<double>(host_busy), 0.9 * static_cast<double>(step)) << host_busy << " of " << step;
  EXPECT_LE(host_busy, step);
  EXPECT_GT(static_cast<double>(eager.host_bound.back()), 0.5 * static_cast<double>(step));
  EXPECT_GT(step, 2 * ideal.ranks[0].step_times.back());
  // The breakdown and the summary name the host-bound share.
  const std::string out = temp_path("host_bound");
  std::filesystem::remove_all(out);
  ASSERT_TRUE(write_run_outputs(out, eager).is_ok());
  const std::string summary = slurp(out + "/summary.txt");
  EXPECT_NE(summary.find("software pytorch_eager"), std::string::npos) << summary;
  EXPECT_NE(summary.find("host: pytorch_eager stack · host-bound "), std::string::npos) << summary;
  const auto m = nlohmann::json::parse(slurp(out + "/metrics.json"));
  EXPECT_GT(m["step_breakdown_s"]["host_bound"].get<double>(), 0.0);
  const std::string trace = slurp(out + "/trace.json");
  EXPECT_NE(trace.find("\"name\":\"host\""), std::string::npos);  // the host stream's track
  std::filesystem::remove_all(out);
}

// world.offload_host: a faster host shortens an offloaded step; its profile's host link is
// dropped (the host is the host), and timing mode uses it as numerics mode does.
TEST(TimingRun, TheOffloadHostProfileSetsTheHostsCosts) {
  const std::string host_file = temp_path("fast_host.json");
  sim::DeviceProfile fast = sim::offload_host_profile();
  fast.name = "fast-host";
  fast.vector_flops_per_s *= 8;
  fast.memory_bytes_per_s *= 8;
  fast.capacity_bytes = std::int64_t{64} << 30;
  fast.host_link_bytes_per_s = 1e6;  // would make every host op a slow transfer if kept
  ASSERT_TRUE(sim::write_device_profile(fast, host_file).is_ok());
  const auto args = [&](const std::string& host) {
    auto sc = parse_scenario("s.yaml",
                             "name: t\nmodel: {preset: bert-tiny, head: mlm}\ndata: {seq_len: 16}\n"
                             "train: {steps: 2}\nfsdp: {cpu_offload: true}\n"
                             "world: {mode: timing, devices_per_node: 4, device: gaudi2, offload_host: " +
                                 host + "}\n");
    EXPECT_THAT(sc, IsOk());
    RunArgs a;
    EXPECT_TRUE(scenario_to_run_args(*sc, a).is_ok());
    return a;
  };
  const RunArgs plain = args("host"), faster = args(host_file);
  EXPECT_EQ(plain.offload_host.name, sim::offload_host_profile().name);
  EXPECT_EQ(plain.offload_host.vector_flops_per_s, sim::offload_host_profile().vector_flops_per_s);
  EXPECT_EQ(faster.offload_host.name, "fast-host");
  EXPECT_EQ(faster.offload_host.host_link_bytes_per_s, 0.0);
  EXPECT_EQ(faster.offload_host.vector_flops_per_s, fast.vector_flops_per_s);
  TimingRunOptions opts;
  opts.device = plain.device;
  RunRecord a, b;
  ASSERT_TRUE(run_timing(plain, opts, a).is_ok()) << a.status;
  ASSERT_TRUE(run_timing(faster, opts, b).is_ok()) << b.status;
  EXPECT_LT(b.ranks[0].step_times.back(), a.ranks[0].step_times.back());
  std::filesystem::remove(host_file);
}

// A timing-mode scenario asking for what timing mode cannot do — a check of values, or a
// corruption nobody detects (it changes values only) — exits 2 naming the line and what is
// allowed; every other fault runs.
TEST(TimingRun, ScenariosRefuseValueChecksAndSilentCorruptionNamingTheLine) {
  const std::string head =
      "name: t\nmodel: {preset: bert-tiny, head: mlm}\nworld: {mode: timing, devices_per_node: 4}\n";
  const struct {
    std::string yaml, where, what;
  } refused[] = {
      {"faults:\n  - {kind: corrupt, rank: 1, collective: 3}\n",
       "s.yaml:5:5:", "a corrupt fault without the integrity check changes values only"},
      {"expect: {grads_match_unsharded: true}\n", "s.yaml:4:", "expect.grads_match_unsharded: checks values"},
      {"expect: {final_loss_below: 11}\n", "s.yaml:4:", "expect.final_loss_below: checks values"},
  };
  for (const auto& c : refused) {
    auto sc = parse_scenario("s.yaml", head + c.yaml);
    ASSERT_THAT(sc, IsOk());
    RunArgs a;
    const Status s = scenario_to_run_args(*sc, a);
    EXPECT_EQ(s.exit_code(), 2) << c.yaml;
    EXPECT_EQ(s.message().rfind(c.where, 0), 0u) << s.message();
    EXPECT_NE(s.message().find(c.what), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("numerics"), std::string::npos) << s.message();
  }
  for (const std::string ok :
       {"faults:\n  - {kind: straggler, rank: 1, factor: 2}\n", "faults:\n  - {kind: crash, rank: 1, step: 2}\n",
        "faults:\n  - {kind: hang, rank: 1, time_ms: 5}\n",
        "faults:\n  - {kind: corrupt, rank: 1, collective: 3, integrity_check: true}\n",
        "expect: {max_step_time_s: 1, max_peak_memory_per_rank: 1 GiB}\n"}) {
    auto sc = parse_scenario("s.yaml", head + ok);
    ASSERT_THAT(sc, IsOk());
    RunArgs a;
    EXPECT_TRUE(scenario_to_run_args(*sc, a).is_ok()) << ok;
  }
  // The same fault given to run_timing directly (no scenario) is refused too.
  RunArgs a = tiny_args(4);
  auto plan = std::make_shared<sim::FaultPlan>();
  plan->faults.push_back({});
  plan->faults.back().kind = sim::FaultKind::kCorrupt;
  plan->faults.back().rank = 1;
  plan->faults.back().collective = 3;
  a.faults = plan;
  RunRecord record;
  const Status s = run_timing(a, {}, record);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("without the integrity check"), std::string::npos) << s.message();
}

// world.collective_timeout_s reaches the trainer's collective timeout (the survivors of a
// crash then time out after it) — 30 s when not given, as torch.distributed's default
// process-group timeout is a setting too.
TEST(TimingRun, TheScenariosCollectiveTimeoutReachesTheTrainer) {
  const auto timeout = [](const std::string& world) {
    auto sc = parse_scenario("s.yaml", "name: t\nworld: {" + world + "}\n");
    EXPECT_THAT(sc, IsOk());
    RunArgs a;
    EXPECT_TRUE(scenario_to_run_args(*sc, a).is_ok());
    return a.train.fsdp.collective_timeout;
  };
  EXPECT_EQ(timeout("collective_timeout_s: 2.5"), 2'500'000'000);
  EXPECT_EQ(timeout("collective_timeout_s: 1e-6"), 1'000);
  EXPECT_EQ(timeout("nodes: 1"), 30'000'000'000);
}

// A crash ends a timing-mode run as it ends a numerics one: exit 3, one line per failed
// rank (the crashed rank first), the survivors timing out after fsdp.collective_timeout.
TEST(TimingRun, ACrashEndsTheRunWithEveryRanksError) {
  RunArgs a = tiny_args(4);
  a.train.fsdp.collective_timeout = 2'000'000'000;
  auto plan = std::make_shared<sim::FaultPlan>();
  plan->faults.push_back({});  // a crash of rank 3 at the top of step 2
  plan->faults.back().rank = 3;
  plan->faults.back().step = 1;
  a.faults = plan;
  RunRecord record;
  const Status s = run_timing(a, {}, record);
  EXPECT_EQ(s.exit_code(), 3);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  const std::string all = s.to_string();
  EXPECT_EQ(all.rfind("UNAVAILABLE: rank 3, step 2: crashed at the top of step 2", 0), 0u) << all;
  for (const char* r : {"\nTIMEOUT: rank 0, step 2:", "\nTIMEOUT: rank 1, step 2:", "\nTIMEOUT: rank 2, step 2:"}) {
    EXPECT_NE(all.find(r), std::string::npos) << all;
  }
  EXPECT_NE(all.find("timed out after 2.000000 s (virtual)"), std::string::npos) << all;
  EXPECT_EQ(record.status, all);
}

TEST(TimingRun, RefusesWhatTimingModeCannotCapture) {
  RunArgs a = tiny_args(4);
  a.train.checkpoint.dir = "ck";
  RunRecord record;
  const Status s = run_timing(a, {}, record);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("checkpoints"), std::string::npos) << s.to_string();
}

// HYBRID_SHARD runs in timing mode: its communicator splits are captured and its node and
// replica groups replay (NOTE [Groups in timing mode] in sim/timing/op_graph.h).
TEST(TimingRun, HybridShardRunsInTimingMode) {
  RunArgs a = tiny_args(4);
  a.train.fsdp.strategy = runtime::fsdp::ShardingStrategy::kHybridShard;
  a.train.fsdp.devices_per_node = 2;
  TimingRunOptions opts;
  opts.traced_ranks = 4;
  RunRecord record;
  ASSERT_TRUE(run_timing(a, opts, record).is_ok()) << record.status;
  ASSERT_EQ(record.ranks.size(), 4u);
  for (const auto& r : record.ranks) {
    ASSERT_EQ(r.step_times.size(), 2u);
    EXPECT_GT(r.step_times[1], 0);
  }
  bool replica_all_reduce = false;
  for (const auto& e : record.traces[3]) replica_all_reduce |= e.name == "all_reduce" && e.group == "world/1.2";
  EXPECT_TRUE(replica_all_reduce) << "rank 3's gradients are averaged in replica group 1";
}

}  // namespace
}  // namespace shardlab::cli
