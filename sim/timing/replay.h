// Replay (NOTE [Timing mode] in op_graph.h): all W ranks of an OpGraph, one event-driven
// single-threaded simulation, timed by a NetworkCostModel.
//
// Each rank walks its program: a compute node advances its host time by the node's
// duration; an issue enqueues the collective on the rank's stream for its kind (NOTE
// [Comm streams] in sim/engine/communicator.cc) with ready time max(host time, the rank's
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
#include "sim/engine/trace.h"
#include "sim/faults/faults.h"
#include "sim/models/device/stack.h"
#include "sim/models/network/network.h"
#include "sim/timing/op_graph.h"

namespace shardlab::sim::timing {

struct ReplayOptions {
  std::shared_ptr<const NetworkCostModel> network;  // required
  // Ranks whose timeline (trace.json events) and memory samples are kept.
  std::vector<int> traced_ranks;
  // Injected faults that make a rank fail (sim/faults/faults.h): crash and hang (by step or by
  // time), and corrupt with the integrity check. Carried out as the FaultInjector does in
  // numerics mode (NOTE [Faults in timing mode]); other kinds are not the replay's.
  std::vector<Fault> faults;
  // How long a rank waits for a collective before it times out (virtual time), as
  // FsdpOptions::collective_timeout.
  Nanos collective_timeout = runtime::comm::kDefaultTimeout;
  // How the framework drives the device (NOTE [Software stack] in sim/models/device/stack.h). Ideal: one
  // timeline per rank, as above. Otherwise NOTE [Host and device timelines].
  SoftwareStack stack;
};

// NOTE [Host and device timelines]
// With a stack other than ideal each rank has a host time h and a device time d (the
// compute stream's end). A compute node's ops are dispatched by the host — eager: each op
// costs op_dispatch_ns of host time and starts on the device at max(d, h); lazy and
// compiled: the node is one graph, recorded (op_dispatch_ns per op) and launched
// (graph_launch_ns), whose ops start at max(d, h) back to back. Where the device starts
// later than it could because the host had not dispatched yet (h > d), the gap counts as
// host-bound time of the step. An issue (but a split's, set-up rather than a hook) first
// runs its FSDP hook (fsdp_hook_ns of host time); a device idle before the host gets there waited for the host too
// (host-bound; d moves up to h, which delays nothing); the collective is ready at max(h, d) (its stream waits for the
// work dispatched before it). A wait is the device stream's: d = max(d, done), and the host runs on; without
// host_device_overlap the host waits for the device after every op or graph (h = d) and
// for every collective it waits on. Markers happen at max(h, d): a step ends when the
// later of its host and device work does. With the ideal stack this is the one-timeline
// replay (h = d always, no host cost), which numerics mode's timeline equals.

// A rank's error in a run that injected faults: the faulty ranks', then the others'.
struct RankError {
  int rank = 0;
  Status status;
};

struct RankTiming {
  std::vector<Nanos> step_starts, step_times;  // from the program's step markers
  // Per step: the device's idle time waiting for the host (NOTE [Host and device
  // timelines]); all 0 with the ideal stack.
  std::vector<Nanos> host_bound;
  Nanos end_time = 0;  // host time after the last node
};

struct ReplayResult {
  std::vector<RankTiming> ranks;  // per rank
  // For each traced rank: its events ordered as TraceRecorder::events() orders them, and
  // its memory samples with replayed times.
  std::map<int, std::vector<TraceEvent>> traces;
  std::map<int, std::vector<runtime::train::MemorySample>> memory_timelines;
  std::int64_t events = 0;       // program nodes executed over all ranks + collectives timed
  std::int64_t collectives = 0;  // collectives timed
  // Non-empty when injected faults (or a collective with no route) stopped ranks: every
  // rank that did not finish, the stopped ranks first (step times then cover the steps
  // each rank completed).
  std::vector<RankError> errors;
};

// NOTE [Faults in timing mode]
// A crash or hang stops its rank where the FaultInjector would (sim/faults/faults.h): at the step
// marker of its step, or before the first collective the rank issues at or after its time;
// a corrupt fault with the integrity check fails the rank when it waits for its
// collective number `collective` (counting those with a payload), which completed; a
// collective the network model cannot complete (link_down with no other route) fails each
// member in its wait, as SimCommunicator does. A stopped rank issues nothing more; every other rank then blocks in a
// wait that cannot complete and times out `collective_timeout` after it began waiting — the numerics run's virtual
// deadline — naming the collective, the ranks that never issued it and the faults. A wait for a collective that
// completes later than `collective_timeout` after the wait began times out too (a link degraded far enough), with "it
// completed only at …". The replay returns these as ReplayResult::errors, in the words numerics mode uses (fault_where,
// stopped_rank_status, …).
//
// FAILED_PRECONDITION when ranks disagree on a collective (naming both) or, with no rank
// stopped, block forever (naming the first blocked rank and the collective it waits for).
Result<ReplayResult> replay(const OpGraph& graph, const ReplayOptions& options);

}  // namespace shardlab::sim::timing
