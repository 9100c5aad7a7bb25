// Capture (NOTE [Timing mode] in op_graph.h): runs the real trainer on one rank's view of
// a W-rank world with phantom tensors, and records what it does as a RankProgram.
//
// Thread safety: each call is self-contained (its own device, clock and communicator).
#pragma once

#include <vector>

#include "runtime/train/fsdp_train.h"
#include "sim/models/device/cost_model.h"
#include "sim/models/device/profiles.h"
#include "sim/models/device/stack.h"
#include "sim/timing/op_graph.h"

namespace shardlab::sim::timing {

// What the capture adds to the trainer's options: the parts of a simulated world that
// numerics mode builds around train_fsdp (cli/run_command.cc, sim/engine/world.h).
struct CaptureOptions {
  // CPU offload: shards, gradient shards and optimizer state live on the rank's host, a
  // timing-mode SimDevice named "host:<rank>" with `offload_host`'s costs on the
  // rank's clock, as numerics mode makes it (the trainer's fsdp.offload_device must then
  // be null: the capture makes the host).
  bool cpu_offload = false;
  DeviceProfile offload_host = offload_host_profile();  // the host's costs and capacity
  // Straggler faults: rank r's device runs `slowdown[r]` times slower
  // (DeviceProfile::slowed_by, as World does); missing entries and 1 are full speed.
  std::vector<double> slowdown;
  double slowdown_of(int rank) const;
  // What the stack's graph compiler changes on the device (SimDevice::set_graph_compiler;
  // NOTE [Software stack] in sim/models/device/stack.h); its host side is the replay's.
  SoftwareStack stack;
};

// Rank `rank`'s program of train_fsdp(options) in a world of `world_size` ranks, on a
// timing-mode SimDevice with `device`'s costs and capacity (slowed by the rank's
// slowdown). Errors are the trainer's: OUT_OF_MEMORY with the per-category breakdown at
// the failing allocation (as numerics mode reports it), INVALID_ARGUMENT for options
// timing mode cannot capture (checkpoints, communicator splits other than split_strided).
Result<RankProgram> capture_rank(const runtime::train::FsdpTrainOptions& options, int world_size, int rank,
                                 const DeviceProfile& device, const CaptureOptions& capture = {});

// The whole world's graph: rank 0 and rank W-1 are captured; when their programs agree
// every rank runs that one program. Otherwise worlds of at most kMaxPerRankCaptureWorld
// ranks capture every rank and keep each distinct program once (exact); larger ones are
// approximated when the two programs differ only in compute and memory (NOTE [Timing
// mode] in op_graph.h; OpGraph::approximation says so, naming a memory difference), else
// FAILED_PRECONDITION naming the first difference. All of that is at full speed; then
// every straggler rank (slowdown ≠ 1) is captured at its own speed and runs its own
// program (exact, in worlds of any size).
constexpr int kMaxPerRankCaptureWorld = 64;
Result<OpGraph> capture_graph(const runtime::train::FsdpTrainOptions& options, int world_size,
                              const DeviceProfile& device, const CaptureOptions& capture = {});

}  // namespace shardlab::sim::timing
