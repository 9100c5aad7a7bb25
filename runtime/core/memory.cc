#include "runtime/core/memory.h"

#include <cstdio>

#include "runtime/core/check.h"

namespace shardlab {

std::string_view category_name(MemoryCategory c) {
  switch (c) {
    case MemoryCategory::kParameters: return "parameters";
    case MemoryCategory::kGradients: return "gradients";
    case MemoryCategory::kOptimizerState: return "optimizer_state";
    case MemoryCategory::kActivations: return "activations";
    case MemoryCategory::kCommBuffers: return "comm_buffers";
    case MemoryCategory::kOther: return "other";
  }
  return "?";
}

std::string format_bytes(std::int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while ((v >= 1024.0 || v <= -1024.0) && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[64];
  if (u == 0) {
    std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
  } else {
    std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  }
  return buf;
}

std::string MemoryStats::breakdown(Of of) const {
  const auto& bytes = of == Of::kCurrent ? current : of == Of::kAtPeak ? at_peak : peak;
  std::string out;
  for (int i = 0; i < kNumMemoryCategories; ++i) {
    if (!out.empty()) out += ", ";
    out += category_name(static_cast<MemoryCategory>(i));
    out += " ";
    out += format_bytes(bytes[static_cast<std::size_t>(i)]);
  }
  return out;
}

MemoryTracker::MemoryTracker(std::string device_name, std::int64_t capacity_bytes)
    : device_name_(std::move(device_name)) {
  stats_.capacity = capacity_bytes;
}

Status MemoryTracker::reserve(std::int64_t bytes, MemoryCategory category, std::string_view label) {
  if (bytes < 0) {
    return Status::invalid_argument("allocation of " + std::to_string(bytes) + " bytes for '" + std::string(label) +
                                    "' on " + device_name_ + ": size must be >= 0");
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (stats_.capacity > 0 && bytes > stats_.capacity - stats_.current_total) {
    return Status::out_of_memory("out of memory on " + device_name_ + ": requested " + format_bytes(bytes) + " for '" +
                                 std::string(label) + "' (" + std::string(category_name(category)) + "); capacity " +
                                 format_bytes(stats_.capacity) + ", in use " + format_bytes(stats_.current_total) +
                                 " (" + stats_.breakdown() + ")");
  }
  const int c = static_cast<int>(category);
  stats_.current[c] += bytes;
  stats_.current_total += bytes;
  if (stats_.current[c] > stats_.peak[c]) stats_.peak[c] = stats_.current[c];
  if (stats_.current_total > stats_.peak_total) {
    stats_.peak_total = stats_.current_total;
    stats_.at_peak = stats_.current;
  }
  ++stats_.allocations;
  return Status::ok();
}

void MemoryTracker::release(std::int64_t bytes, MemoryCategory category) {
  std::lock_guard<std::mutex> lock(mu_);
  const int c = static_cast<int>(category);
  SHARDLAB_CHECK_GE(stats_.current[c], bytes);
  stats_.current[c] -= bytes;
  stats_.current_total -= bytes;
}

void MemoryTracker::reset_peaks() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak = stats_.current;
  stats_.peak_total = stats_.current_total;
  stats_.at_peak = stats_.current;
}

MemoryStats MemoryTracker::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace shardlab
