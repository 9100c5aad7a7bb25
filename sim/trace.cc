#include "sim/trace.h"

#include <algorithm>
#include <tuple>

namespace shardlab::sim {

const char* trace_stream_name(int stream) {
  switch (stream) {
    case kTraceCompute: return "compute";
    case kTraceAllGather: return "all_gather";
    case kTraceReduceScatter: return "reduce_scatter";
    case kTraceAllReduce: return "all_reduce";
    case kTraceFsdp: return "fsdp";
    case kTraceHost: return "host";
    default: return "other";
  }
}

std::vector<TraceEvent> TraceRecorder::events() const {
  std::vector<TraceEvent> all = compute_;
  {
    std::lock_guard<std::mutex> lock(mu_);
    all.insert(all.end(), comm_.begin(), comm_.end());
  }
  std::stable_sort(all.begin(), all.end(), [](const TraceEvent& a, const TraceEvent& b) {
    return std::tie(a.start, a.stream, a.name, a.duration) < std::tie(b.start, b.stream, b.name, b.duration);
  });
  return all;
}

}  // namespace shardlab::sim
