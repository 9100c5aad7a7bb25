// OpGraph: what one rank's training program does, as the simulator's timing mode
// replays it — compute segments, collectives issued and waited for, and markers —
// without any model code. Written and read as JSON (`shardlab run --dump-graph FILE`).
//
// NOTE [Timing mode]
// Numerics mode (sim/engine/world.h) runs the real runtime with real math on every rank, one
// host thread each: tens of ranks. Timing mode reaches tens of thousands:
//  1. Capture (capture.h): the real trainer (runtime/train train_fsdp) runs once, on one
//     rank's view of a W-rank world: a SimDevice in timing mode (phantom tensors, NOTE
//     [Phantom storage] in runtime/core/tensor.h — every op charged its roofline cost,
//     every allocation charged to the device's MemoryTracker, no math) and a capturing
//     Communicator whose collectives complete at once and are recorded (kind, group,
//     bytes). Consecutive device ops between two communicator calls form one compute
//     segment (their durations kept for trace.json). Under FSDP ranks are symmetric
//     (padding makes every shard the same size), so rank 0 and rank W-1 are captured and
//     compared; when they differ, small worlds capture every rank and keep each distinct
//     program once. Programs do differ in practice, in their compute only: a rank copies
//     and zeroes its shard piece by piece (how many pieces depends on where parameter
//     boundaries fall in its range) and some ops depend on its data (BERT's masked-LM
//     decoder does not: NOTE [Static masked-LM shape] in runtime/model/bert.h). Larger
//     worlds, when rank 0 and rank W-1 agree on everything but compute and memory (the
//     same collectives in the same order, the same markers), are replayed
//     *approximately*: rank W-1 runs its own program and every other rank rank 0's, and
//     the graph says so, naming a difference in memory when there is one
//     (OpGraph::approximation, also in the run's header and metrics.json). Otherwise
//     they are refused, naming the first difference.
//  2. Replay (replay.h): a single-threaded event-driven simulation of all W ranks over
//     their programs — per rank a host/compute timeline and the communication streams of
//     NOTE [Comm streams] (sim/engine/communicator.cc); a collective is timed by the
//     NetworkCostModel once all its members issued it and their previous operations on
//     the same stream are timed, from the members' ready times, exactly as SimCommunicator
//     does. So for the same scenario both modes give the same timeline: per-rank op and
//     collective start/end times, step times, and (taken from the capture) memory peaks
//     per category. Single-threaded and a pure function of the graph and the model:
//     byte-identical on every run (NOTE [Determinism] in sim/engine/world.h).
// What timing mode cannot reproduce: values (losses and grad norms are NaN), and host
// decisions made on values — FullyShardedModel::clip_grad_norm scales gradients only when
// the norm exceeds the limit, which timing mode never sees (its norm reads 0), so a
// numerics run that clips charges a few scale ops more. HYBRID_SHARD's groups are
// captured (NOTE [Groups in timing mode]); other communicator splits, point-to-point
// messages and checkpoints are not. CPU offload is: the rank's host is a second timing-mode SimDevice on the
// capture clock, and its ops (the optimizer's, the host side of PCIe copies) join the
// compute segments, as in numerics mode where the host shares the rank's clock. Faults:
// a straggler is captured at its own speed as its own program, link faults are the
// network model's, and the replay stops a crashed, hung or corrupt-detecting rank (NOTE
// [Faults in timing mode] in replay.h); a corruption nobody detects changes values only
// and is refused (cli/run_timing.h check_timing_faults).
//
// Thread safety: plain values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/comm/communicator.h"
#include "runtime/core/clock.h"
#include "runtime/core/dtype.h"
#include "runtime/core/memory.h"
#include "runtime/core/status.h"
#include "runtime/fsdp/fully_sharded.h"
#include "runtime/train/fsdp_train.h"
#include "sim/models/device/stack.h"

namespace shardlab::sim::timing {

// NOTE [Groups in timing mode]
// A collective runs on the world group or on a group made by split_strided(stride, size)
// (NOTE [Strided groups] in runtime/comm/communicator.h): HYBRID_SHARD's node-local shard
// groups and cross-node replica groups. A CollectiveDesc names the layout (stride, size
// and which split of the world made it), not the group, so every rank's program reads
// the same and a large world still shares one program. A rank's own group follows from
// its rank: color strided_color(rank, stride, size), group rank strided_key(…), members
// (color / stride)·stride·size + color % stride + stride·k for k < size — and so does
// the name numerics mode gives it, "world/<color>" (with ".<split>" from the world's
// second split on; group_name_of). The split itself is recorded as a kSplit collective
// of the world group, which numerics mode times as a zero-byte exchange and does not
// trace. Splits of a split group are not captured.

// One collective a rank issues; its position in RankProgram::collectives is its sequence
// number in the rank's program (every rank issues the same sequence).
struct CollectiveDesc {
  runtime::comm::OpKind kind = runtime::comm::OpKind::kBarrier;
  // "world", or for a split group a label of its layout ("world/split1"); the group's
  // name on a given rank is group_name_of(desc, rank).
  std::string group = "world";
  int stride = 0;  // 0: the world group; else the group of split_strided(stride, size)
  int size = 0;
  int split = 0;  // which split of the world made the group: 1, 2, …
  // As CollectiveQuery::bytes: one rank's chunk for all_gather / reduce_scatter, the
  // whole buffer for all_reduce / broadcast.
  std::int64_t bytes = 0;
  int root = 0;
  DType dtype = DType::kF32;
  std::int64_t count = 0;
  runtime::comm::ReduceOp op = runtime::comm::ReduceOp::kSum;
  friend bool operator==(const CollectiveDesc&, const CollectiveDesc&) = default;
};

// The group of `d` that world rank `rank` belongs to (NOTE [Groups in timing mode]):
// its color (0 for the world), its size, the rank's place in it, the world rank of its
// member `k`, how many such groups the world has, and its name as numerics mode gives it.
// (Inline: the replay asks for every issue and wait.)
inline int group_color_of(const CollectiveDesc& d, int rank) {
  return d.stride == 0 ? 0 : runtime::comm::strided_color(rank, d.stride, d.size);
}
inline int group_size_of(const CollectiveDesc& d, int world_size) { return d.stride == 0 ? world_size : d.size; }
inline int group_rank_of(const CollectiveDesc& d, int rank) {
  return d.stride == 0 ? rank : runtime::comm::strided_key(rank, d.stride, d.size);
}
inline int group_member(const CollectiveDesc& d, int color, int k) {
  return d.stride == 0 ? k : color / d.stride * d.stride * d.size + color % d.stride + d.stride * k;
}
inline int group_count(const CollectiveDesc& d, int world_size) { return d.stride == 0 ? 1 : world_size / d.size; }
std::string group_name_of(const CollectiveDesc& d, int rank);
// Whether rank `rank` receives a payload in `d`, as FaultInjector counts its collectives
// (sim/faults/faults.h): every kind but barrier and split, and broadcast except at its root.
bool has_payload(const CollectiveDesc& d, int rank);

enum class NodeKind : std::uint8_t {
  kCompute,  // ops[first, first + count) back to back on the compute stream
  kIssue,    // collective `index` enqueued on its stream at the current host time
  kWait,     // the host blocks until collective `index` completes on this rank
  kMarker,   // markers[index] happens at the current host time
};

struct Node {
  NodeKind kind = NodeKind::kCompute;
  std::int32_t index = 0;  // compute: first op; issue / wait: collective; marker: marker
  std::int32_t count = 0;  // compute: number of ops
  Nanos duration = 0;      // compute: the sum of the ops' durations
  friend bool operator==(const Node&, const Node&) = default;
};

struct ComputeOp {
  std::string name;  // "gemm", "layer_norm", ...
  Nanos duration = 0;
  // The shapes of the op's tensors in argument order, as the capture's trace recorded them
  // (TraceEvent::shapes; trace.json of a timing run shows them as a numerics run's does):
  // an index into RankProgram::shapes, -1 for none.
  std::int32_t shapes = -1;
  friend bool operator==(const ComputeOp&, const ComputeOp&) = default;
};

struct Marker {
  runtime::train::TrainMarker kind = runtime::train::TrainMarker::kStepBegin;
  int step = 0;
  int sample = -1;  // kMemorySample: the index in RankProgram::memory_samples
  friend bool operator==(const Marker&, const Marker&) = default;
};

struct RankProgram {
  std::vector<Node> nodes;
  std::vector<ComputeOp> ops;
  // The distinct shape lists of the ops (a layer's ops repeat them every layer and step).
  std::vector<std::vector<std::vector<std::int64_t>>> shapes;
  std::vector<CollectiveDesc> collectives;
  std::vector<Marker> markers;
  // The trainer's memory samples (bytes per category; `time` is the capture clock's and is
  // replaced by the replayed time of its marker).
  std::vector<runtime::train::MemorySample> memory_samples;
  MemoryStats memory;  // at the end of the run: peaks per category, capacity
  int num_units = 0, num_trainable_units = 0, max_live_unsharded = 0;
  std::vector<runtime::fsdp::CollectiveCounts> counts;

  // True when both drive the replay the same way and end with the same memory.
  bool same_program(const RankProgram& other) const;
  std::int64_t num_collectives() const { return static_cast<std::int64_t>(collectives.size()); }
};

// NOTE [Replaying a graph]
// `shardlab run --dump-graph FILE` (timing mode) writes the graph with what it was
// captured for: the device profile's name, the scenario's network (topology, nodes,
// devices per node, cost model, collective algorithm) and its software stack when not
// ideal (whose host timeline the replay keeps). `shardlab replay FILE` times it
// again without the model code — on that network, or on another one it is told
// (--topology, --network-model, --collective-algorithm): what would this run take on that
// fabric? Faults are not part of the graph (a straggler's slower program is), so a replay
// has none. A graph of another build's format version is refused, as is any field out of
// range, naming the field (INVALID_ARGUMENT, exit 2).
struct CapturedNetwork {
  std::string topology = "switch";  // a built-in topology profile or a path to one
  int nodes = 1, devices_per_node = 1;
  std::string model = "alpha_beta";  // sim::network_model_name
  std::string algorithm = "auto";    // sim::algorithm_name
  friend bool operator==(const CapturedNetwork&, const CapturedNetwork&) = default;
};

// The largest world a graph may describe (as a scenario's world).
inline constexpr int kMaxGraphWorldSize = 65536;

struct OpGraph {
  std::string device;                      // the device profile captured on; "": not recorded
  std::optional<CapturedNetwork> network;  // the network of the run; none: not recorded
  SoftwareStack stack;                     // the software stack captured under (NOTE [Software stack])
  int world_size = 1;
  int steps = 0;
  std::vector<RankProgram> programs;  // the distinct programs
  std::vector<int> program_of_rank;   // per rank an index into programs; empty: all run programs[0]
  std::string description;            // free text (the run's header line)
  // Empty when every rank runs its own captured program; else what was approximated.
  std::string approximation;

  const RankProgram& program(int rank) const { return programs[program_index(rank)]; }
  // The index in `programs` of the program `rank` runs.
  std::size_t program_index(int rank) const {
    return program_of_rank.empty() ? 0 : static_cast<std::size_t>(program_of_rank[static_cast<std::size_t>(rank)]);
  }
  // Structural checks (indices in range, one program per rank); INVALID_ARGUMENT naming
  // the first problem.
  Status validate() const;
};

// JSON (format "shardlab-op-graph", version 1), written atomically; the reader checks
// every field and reports INVALID_ARGUMENT naming the file and the field.
Status write_graph_json(const OpGraph& graph, const std::string& path);
Result<OpGraph> read_graph_json(const std::string& path);
std::string graph_to_json_string(const OpGraph& graph);
Result<OpGraph> graph_from_json_string(const std::string& text, const std::string& what = "op graph");

}  // namespace shardlab::sim::timing
