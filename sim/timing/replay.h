// Replay (NOTE [Timing mode] in op_graph.h): all W ranks of an OpGraph, one event-driven
// single-threaded simulation, timed by a NetworkCostModel.
//
// Each rank walks its program: a compute node advances its host time by the node's
// duration; an issue enqueues the collective on the rank's stream for its kind (NOTE
// [Comm streams] in sim/communicator.cc) with ready time max(host time, the rank's
// previous operation on that stream done); a wait blocks the rank until the collective
// is timed, then advances its host time to the rank's completion time. A collective is
// timed by the model once every member issued it and every member's previous operation
// on the stream is timed — the rule of SimCommunicator, so numerics and timing mode give
// the same timeline. Blocked ranks wait in FIFO order; the result is a pure function of
// the graph and the model (no host timing, no threads).
//
// Cost: O(W · nodes) events plus the model's cost per collective (O(p) for a closed-form
// model; the α–β ring's message-by-message Engine is O(p²) and is meant for small worlds).
// Memory: O(W) per collective in flight, O(W · steps) for per-rank step times.
//
// Thread safety: replay() is reentrant; the model must allow concurrent queries.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "runtime/train/fsdp_train.h"
#include "sim/network.h"
#include "sim/timing/op_graph.h"
#include "sim/trace.h"

namespace shardlab::sim::timing {

struct ReplayOptions {
  std::shared_ptr<const NetworkCostModel> network;  // required
  // Ranks whose timeline (trace.json events) and memory samples are kept.
  std::vector<int> traced_ranks;
};

struct RankTiming {
  std::vector<Nanos> step_starts, step_times;  // from the program's step markers
  Nanos end_time = 0;                           // host time after the last node
};

struct ReplayResult {
  std::vector<RankTiming> ranks;  // per rank
  // For each traced rank: its events ordered as TraceRecorder::events() orders them, and
  // its memory samples with replayed times.
  std::map<int, std::vector<TraceEvent>> traces;
  std::map<int, std::vector<runtime::train::MemorySample>> memory_timelines;
  std::int64_t events = 0;       // program nodes executed over all ranks + collectives timed
  std::int64_t collectives = 0;  // collectives timed
};

// FAILED_PRECONDITION when ranks disagree on a collective (naming both) or block forever
// (naming the first blocked rank and the collective it waits for).
Result<ReplayResult> replay(const OpGraph& graph, const ReplayOptions& options);

}  // namespace shardlab::sim::timing
