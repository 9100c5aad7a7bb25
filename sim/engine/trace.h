// TraceRecorder: one rank's timeline for trace.json (reports/FORMATS.md) — compute ops
// from SimDevice and collectives from SimCommunicator, in virtual time; on the real
// backends the same events from cli/trace_backends.h's decorators, in wall time. FSDP
// phases (unshard, reshard, gradient reduction, optimizer step) come from the FSDP
// runtime's on_fsdp_event hook on every backend.
//
// Thread safety: compute and FSDP events are appended by the rank's own thread only;
// collective events may be appended by whichever rank completes a collective, so that list
// is guarded by its own mutex. events() merges both, ordered by (start, stream, name): the
// order does not depend on host scheduling.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "runtime/core/clock.h"

namespace shardlab::sim {

// Trace streams (the trace's tid).
// kTraceHost: the host's own work under a software stack other than ideal (NOTE [Host
// and device timelines] in sim/timing/replay.h): dispatching ops, recording and launching
// graphs, FSDP hooks.
enum TraceStream : int {
  kTraceCompute = 0,
  kTraceAllGather = 1,
  kTraceReduceScatter = 2,
  kTraceAllReduce = 3,
  kTraceOtherComm = 4,
  kTraceFsdp = 5,
  kTraceHost = 6
};
constexpr int kNumTraceStreams = 7;
const char* trace_stream_name(int stream);

struct TraceEvent {
  TraceEvent() = default;
  TraceEvent(std::string name_, int stream_, Nanos start_, Nanos duration_, std::int64_t bytes_ = -1,
             std::string group_ = {}, std::string algorithm_ = {})
      : name(std::move(name_)),
        stream(stream_),
        start(start_),
        duration(duration_),
        bytes(bytes_),
        group(std::move(group_)),
        algorithm(std::move(algorithm_)) {}
  std::string name;  // op ("gemm") or collective ("all_gather")
  int stream = kTraceCompute;
  Nanos start = 0, duration = 0;
  std::int64_t bytes = -1;  // collectives: payload bytes per rank
  std::string group;        // collectives: the group's name
  std::string algorithm;    // collectives: the network model's algorithm ("ring", …)
  // Compute ops: the shapes of the op's tensors, in argument order (empty when unknown).
  std::vector<std::vector<std::int64_t>> shapes;
  // FSDP events (stream kTraceFsdp): the unit (-1: every unit, the optimizer step), the
  // 1-based step, the phase ("forward", "backward", "optimizer") and for a gradient
  // reduction its collective ("reduce_scatter", "all_reduce").
  int unit = -1, step = -1;
  std::string phase, collective;
  bool prefetch = false;  // FSDP unshard: issued ahead of use
};

class TraceRecorder {
 public:
  // Compute and FSDP events: the rank's own thread only.
  void add_compute(TraceEvent e) { compute_.push_back(std::move(e)); }
  // A compute op on a wall-clock trace's hot path (NOTE [Recording an op]): `name` must
  // outlive the recorder (a string literal); add_op_shape then appends the op's tensors'
  // shapes in argument order. The rank's own thread only; events() lists it as the
  // TraceEvent {name, kTraceCompute, start, duration} with those shapes.
  void add_op(const char* name, Nanos start, Nanos duration) {
    ops_.push_back({name, start, duration, shape_ends_.size()});
  }
  void add_op_shape(std::span<const std::int64_t> dims) {
    dims_.insert(dims_.end(), dims.begin(), dims.end());
    shape_ends_.push_back(dims_.size());
  }
  void add_comm(TraceEvent e) {
    std::lock_guard<std::mutex> lock(mu_);
    comm_.push_back(std::move(e));
  }
  std::vector<TraceEvent> events() const;

 private:
  // NOTE [Recording an op]
  // A real run records every op it runs, and the MLP's step is ~30 ops in ~30 µs: a
  // TraceEvent per op (its strings, a vector per shape) costs allocations and page faults
  // for a list of ~250-byte records. Ops are kept flat instead — a name pointer, two times
  // and where the op's shapes begin in one dims pool — and become TraceEvents only when
  // events() is asked for, after the run.
  struct Op {
    const char* name;
    Nanos start, duration;
    std::size_t first_shape;  // index into shape_ends_; the op's shapes run to the next op's
  };
  std::vector<Op> ops_;
  std::vector<std::size_t> shape_ends_;  // end of each shape in dims_
  std::vector<std::int64_t> dims_;
  std::vector<TraceEvent> compute_;
  mutable std::mutex mu_;
  std::vector<TraceEvent> comm_;
};

}  // namespace shardlab::sim
