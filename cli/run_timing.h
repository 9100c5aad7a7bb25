// `shardlab run` in timing mode (world.mode: timing; NOTE [Timing mode] in
// sim/timing/op_graph.h): capture the rank program once with phantom tensors, replay it
// over the whole world, and fill the same RunRecord the numerics run fills, so
// write_run_outputs writes metrics.json / trace.json / memory.csv / summary.txt unchanged.
//
// What the record holds in timing mode: mode "timing"; per rank (all W) an
// FsdpTrainResult with step_starts / step_times from the replay, memory stats (peaks per
// category) from the capture, losses NaN per step (metrics.json writes null), no
// parameters or gradients; traces and memory timelines for the first `traced_ranks`
// ranks only. No oracle check (there are no values).
#pragma once

#include <memory>
#include <string>

#include "cli/run_command.h"
#include "cli/run_outputs.h"
#include "sim/faults/faults.h"
#include "sim/models/device/cost_model.h"
#include "sim/models/network/network.h"
#include "sim/timing/op_graph.h"

namespace shardlab::cli {

struct TimingRunOptions {
  // The network the collectives are timed with; null: the α–β ring of `net` (the
  // numerics World's default). Its cost per collective should be O(p) for large worlds.
  std::shared_ptr<const sim::NetworkCostModel> network;
  sim::NetworkModel net;
  sim::DeviceProfile device;  // the simulated device (costs, capacity)
  // Ranks 0 … traced_ranks-1 get trace.json events and memory.csv samples — or, when
  // trace_ranks is not empty, the ranks it names (sorted, distinct, each < the world).
  int traced_ranks = 8;
  std::vector<int> trace_ranks;
  // Non-empty: the op graph is also written here as JSON (--dump-graph FILE).
  std::string dump_graph;
  // For the replay (NOTE [Faults in timing mode] in sim/timing/replay.h); run_timing sets
  // both from its RunArgs (the scenario's faults, fsdp.collective_timeout).
  std::vector<sim::Fault> faults;
  Nanos collective_timeout = runtime::comm::kDefaultTimeout;
  // The software stack the replay keeps a host timeline for (run_timing sets it from its
  // RunArgs; NOTE [Software stack] in sim/models/device/stack.h).
  sim::SoftwareStack stack;
};

// Runs args (backend "sim"; world_size, train, scenario, model_name as for numerics) in
// timing mode and fills `record`. On failure returns the error (bad options: INVALID_ARGUMENT;
// OUT_OF_MEMORY with the per-category breakdown at the failing allocation; injected faults
// that stopped ranks: one line per failed rank, the faulty ones first, as numerics mode
// reports them, with the first line's code) and leaves
// `record` with the fields known so far and `status` set to the error, ready for
// write_run_outputs.
Status run_timing(const RunArgs& args, const TimingRunOptions& options, RunRecord& record);

// Timing mode models every fault but one: stragglers (each one's own slower rank program),
// link faults (the network model), crash, hang and corrupt with the integrity check (the
// replay stops the rank; NOTE [Faults in timing mode]). A corrupt fault without the check
// changes values only, and timing mode has none: INVALID_ARGUMENT naming the fault's
// origin (file:line:col) and what is allowed. run_timing checks it; scenario runs check it
// before anything is written.
Status check_timing_faults(const sim::FaultPlan& plan);

// Replays a graph written by --dump-graph (no model code needed) into `record` (header,
// world size and step times; model fields are unknown).
Status replay_graph_file(const std::string& path, const TimingRunOptions& options, RunRecord& record);

// Shared by both: the record's per-rank results and traces from a graph and its replay.
Status fill_timing_record(const sim::timing::OpGraph& graph, const TimingRunOptions& options, RunRecord& record);

}  // namespace shardlab::cli
