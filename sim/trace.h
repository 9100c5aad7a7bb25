// TraceRecorder: one rank's timeline for trace.json (reports/FORMATS.md) — compute ops
// from SimDevice and collectives from SimCommunicator, in virtual time.
//
// Thread safety: compute events are appended by the rank's own thread only; collective
// events may be appended by whichever rank completes a collective, so that list is
// guarded by its own mutex. events() merges both, ordered by (start, stream, name): the
// order does not depend on host scheduling.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/core/clock.h"

namespace shardlab::sim {

// Trace streams (the trace's tid).
enum TraceStream : int { kTraceCompute = 0, kTraceAllGather = 1, kTraceReduceScatter = 2, kTraceAllReduce = 3,
                         kTraceOtherComm = 4 };
const char* trace_stream_name(int stream);

struct TraceEvent {
  std::string name;      // op ("gemm") or collective ("all_gather")
  int stream = kTraceCompute;
  Nanos start = 0, duration = 0;
  std::int64_t bytes = -1;  // collectives: payload bytes per rank
  std::string group;        // collectives: the group's name
  std::string algorithm;    // collectives: the network model's algorithm ("ring", …)
};

class TraceRecorder {
 public:
  void add_compute(TraceEvent e) { compute_.push_back(std::move(e)); }
  void add_comm(TraceEvent e) {
    std::lock_guard<std::mutex> lock(mu_);
    comm_.push_back(std::move(e));
  }
  std::vector<TraceEvent> events() const;

 private:
  std::vector<TraceEvent> compute_;
  mutable std::mutex mu_;
  std::vector<TraceEvent> comm_;
};

}  // namespace shardlab::sim
