#include "cli/run_timing.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "cli/backends.h"
#include "sim/faults/faults.h"
#include "sim/timing/capture.h"
#include "sim/timing/replay.h"

namespace shardlab::cli {

namespace {

using runtime::train::FsdpTrainResult;

// describe_run's record, as timing mode reports it.
void describe_timing_run(const RunArgs& a, RunRecord& r) {
  describe_run(a, a.world_size, "sim", r);  // timing mode is the simulator's
  r.mode = std::string(run_mode_name(RunMode::kTiming));
  r.fsdp["async_reduction"] = a.train.fsdp.async_reduction;
}

std::shared_ptr<const sim::NetworkCostModel> network_of(const TimingRunOptions& o) {
  return o.network ? o.network : sim::make_alpha_beta_ring(o.net);
}

}  // namespace

Status check_timing_faults(const sim::FaultPlan& plan) {
  for (const sim::Fault& f : plan.faults) {
    if (f.kind == sim::FaultKind::kCorrupt && !f.integrity_check) {
      return Status::invalid_argument(
          (f.origin.empty() ? "" : f.origin + ": ") +
          "a corrupt fault without the integrity check changes values only, and timing mode has none (phantom "
          "tensors); allowed in timing mode: corrupt with integrity_check: true, crash, hang, straggler, link_down, "
          "link_degrade — or run this scenario with world.mode: numerics");
    }
    if (f.kind == sim::FaultKind::kViewOffset) {
      return Status::invalid_argument(
          (f.origin.empty() ? "" : f.origin + ": ") +
          "a view_offset fault is carried out in numerics mode only (timing mode captures one program per kind of "
          "rank and has no faulty-view program); allowed in timing mode: crash, hang, straggler, corrupt with "
          "integrity_check: true, link_down, link_degrade — or run this scenario with world.mode: numerics");
    }
  }
  return Status::ok();
}

Status fill_timing_record(const sim::timing::OpGraph& g, const TimingRunOptions& options, RunRecord& record) {
  record.approximation = g.approximation;
  sim::timing::ReplayOptions ro;
  ro.network = network_of(options);
  ro.faults = options.faults;
  ro.collective_timeout = options.collective_timeout;
  ro.stack = options.stack;
  if (options.trace_ranks.empty()) {
    for (int r = 0; r < std::clamp(options.traced_ranks, 0, g.world_size); ++r) ro.traced_ranks.push_back(r);
  } else {
    for (int r : options.trace_ranks) {
      if (r < 0 || r >= g.world_size) {
        return Status::invalid_argument("trace rank " + std::to_string(r) + " is not a rank of the world (size " +
                                        std::to_string(g.world_size) + ")");
      }
      ro.traced_ranks.push_back(r);
    }
  }
  SHARDLAB_ASSIGN_OR_RETURN(sim::timing::ReplayResult rep, sim::timing::replay(g, ro));
  record.mode = std::string(run_mode_name(RunMode::kTiming));
  if (!record.stack.empty()) record.stack["network"] = ro.network->describe();  // as replayed
  record.world_size = g.world_size;
  record.device_peak_flops = options.device.matrix_flops_per_s;
  record.ranks.assign(static_cast<std::size_t>(g.world_size), FsdpTrainResult{});
  for (int r = 0; r < g.world_size; ++r) {
    const auto ur = static_cast<std::size_t>(r);
    const sim::timing::RankProgram& p = g.program(r);
    FsdpTrainResult& out = record.ranks[ur];
    sim::timing::RankTiming& t = rep.ranks[ur];
    out.losses.assign(t.step_times.size(), std::nan(""));
    out.step_times = std::move(t.step_times);
    out.step_starts = std::move(t.step_starts);
    out.memory = p.memory;
    out.num_units = p.num_units;
    out.num_trainable_units = p.num_trainable_units;
    out.max_live_unsharded = p.max_live_unsharded;
    out.counts = p.counts;
    if (auto it = rep.memory_timelines.find(r); it != rep.memory_timelines.end())
      out.memory_timeline = std::move(it->second);
  }
  record.traces.clear();
  record.traced_ranks = ro.traced_ranks;
  if (!ro.stack.ideal() && !ro.traced_ranks.empty()) {
    record.host_bound = rep.ranks[static_cast<std::size_t>(ro.traced_ranks.front())].host_bound;
    record.host_stack = ro.stack.name;
  }
  for (int r : ro.traced_ranks) record.traces.push_back(std::move(rep.traces[r]));
  // A failed replay still fills the record: the steps each rank completed, its memory and
  // trace up to the failure (the outputs keep what the run had).
  if (!rep.errors.empty()) {
    // As numerics mode reports a failed run: every failed rank, the faulty ones first, one
    // line each (the caller groups them, NOTE [Grouped failures] in cli/run_outputs.h).
    const sim::timing::RankError& first = rep.errors.front();
    std::string all = first.status.message();
    for (std::size_t i = 1; i < rep.errors.size(); ++i) all += "\n" + rep.errors[i].status.to_string();
    return Status(first.status.code(), all);
  }
  return Status::ok();
}

Status run_timing(const RunArgs& a, const TimingRunOptions& options, RunRecord& record) {
  describe_timing_run(a, record);
  Status s = [&]() -> Status {
    if (!backend(a.backend).simulated) {
      return Status::invalid_argument("timing mode runs on the simulator (backend sim), not '" + a.backend + "'");
    }
    SHARDLAB_RETURN_IF_ERROR(runtime::train::validate(a.train, a.world_size));
    sim::timing::CaptureOptions capture;
    capture.cpu_offload = a.cpu_offload;
    capture.offload_host = a.offload_host;
    capture.stack = a.stack;
    TimingRunOptions with_faults = options;
    with_faults.stack = a.stack;
    if (a.faults) {
      SHARDLAB_RETURN_IF_ERROR(check_timing_faults(*a.faults));
      for (int r = 0; r < a.world_size; ++r) capture.slowdown.push_back(a.faults->slowdown(r));
      with_faults.faults = a.faults->faults;
    }
    with_faults.collective_timeout = a.train.fsdp.collective_timeout;
    SHARDLAB_ASSIGN_OR_RETURN(sim::timing::OpGraph g,
                              sim::timing::capture_graph(a.train, a.world_size, options.device, capture));
    char line[256];
    std::snprintf(
        line, sizeof line,
        "shardlab run (timing mode): %s · FSDP%s %s · %d simulated ranks · %d unit%s · global batch %lld · %d "
        "steps · seed %llu",
        a.model_name.c_str(), a.train.fsdp.version == 2 ? "2" : "",
        std::string(runtime::fsdp::strategy_name(a.train.fsdp.strategy)).c_str(), a.world_size,
        g.programs.front().num_units, g.programs.front().num_units == 1 ? "" : "s",
        static_cast<long long>(a.train.global_batch), a.train.steps, static_cast<unsigned long long>(a.train.seed));
    record.header = line;
    if (!g.approximation.empty()) record.header += " (approximate: " + g.approximation + ")";
    g.description = record.header;
    // NOTE [Replaying a graph]: what it was captured for.
    g.device = options.device.name;
    g.stack = a.stack;
    if (a.network_spec) {
      g.network = sim::timing::CapturedNetwork{a.network_spec->topology, a.network_spec->nodes,
                                               a.network_spec->devices_per_node,
                                               std::string(sim::network_model_name(a.network_spec->model)),
                                               std::string(sim::algorithm_name(a.network_spec->algorithm))};
    }
    if (!options.dump_graph.empty()) SHARDLAB_RETURN_IF_ERROR(sim::timing::write_graph_json(g, options.dump_graph));
    Status filled = fill_timing_record(g, with_faults, record);
    record.device_peak_flops = mfu_peak_flops(a.train, options.device);  // as in numerics mode
    return filled;
  }();
  if (!s.is_ok()) record.status = s.to_string();
  return s;
}

Status replay_graph_file(const std::string& path, const TimingRunOptions& options, RunRecord& record) {
  Status s = [&]() -> Status {
    SHARDLAB_ASSIGN_OR_RETURN(sim::timing::OpGraph g, sim::timing::read_graph_json(path));
    record.scenario = path;
    record.backend = "sim";
    record.header =
        g.description.empty() ? "shardlab replay of " + path : g.description + " (replayed from " + path + ")";
    TimingRunOptions with_stack = options;
    with_stack.stack = g.stack;  // the host the graph was captured for
    return fill_timing_record(g, with_stack, record);
  }();
  if (!s.is_ok()) record.status = s.to_string();
  return s;
}

}  // namespace shardlab::cli
