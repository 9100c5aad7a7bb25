#include "sim/engine/trace.h"

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
  all.reserve(all.size() + ops_.size());
  for (std::size_t i = 0; i < ops_.size(); ++i) {
    const Op& op = ops_[i];
    TraceEvent e{op.name, kTraceCompute, op.start, op.duration};
    const std::size_t last_shape = i + 1 < ops_.size() ? ops_[i + 1].first_shape : shape_ends_.size();
    for (std::size_t s = op.first_shape; s < last_shape; ++s) {
      const std::size_t begin = s == 0 ? 0 : shape_ends_[s - 1];
      e.shapes.emplace_back(dims_.begin() + static_cast<std::ptrdiff_t>(begin),
                            dims_.begin() + static_cast<std::ptrdiff_t>(shape_ends_[s]));
    }
    all.push_back(std::move(e));
  }
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
