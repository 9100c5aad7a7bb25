// Device memory accounting: capacity, per-category current/peak bytes, OOM reports.
//
// Every Storage a Device hands out is reserved here first and released when the
// Storage dies, so peaks are exact. An allocation that would exceed the capacity fails
// with an OUT_OF_MEMORY Status naming the device, the request, its label and category,
// and the breakdown by category at that moment (CONTRIBUTING.md, "Errors and exit codes").
//
// Thread safety: all methods are thread-safe (one mutex).
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

#include "runtime/core/status.h"

namespace shardlab {

enum class MemoryCategory : std::uint8_t {
  kParameters = 0,
  kGradients,
  kOptimizerState,
  kActivations,
  kCommBuffers,
  kOther,
};
constexpr int kNumMemoryCategories = 6;

std::string_view category_name(MemoryCategory c);  // "parameters", "gradients", ...
// "12.00 MiB"-style rendering used by every memory message.
std::string format_bytes(std::int64_t bytes);

struct MemoryStats {
  std::int64_t capacity = 0;  // bytes; <= 0 means unlimited
  std::array<std::int64_t, kNumMemoryCategories> current{};
  std::array<std::int64_t, kNumMemoryCategories> peak{};
  std::int64_t current_total = 0;
  std::int64_t peak_total = 0;
  // Each category's bytes when peak_total was first reached: they sum to peak_total. The
  // category peaks above are each taken at their own moment, so they may sum to more.
  std::array<std::int64_t, kNumMemoryCategories> at_peak{};
  std::int64_t allocations = 0;
  enum class Of { kCurrent, kAtPeak, kCategoryPeaks };
  // "parameters 8.00 MiB, gradients 4.00 MiB, ..." of the current bytes, those at the
  // peak, or each category's own peak.
  std::string breakdown(Of of = Of::kCurrent) const;
};

class MemoryTracker {
 public:
  // capacity_bytes <= 0: unlimited (still tracked).
  MemoryTracker(std::string device_name, std::int64_t capacity_bytes);

  // Reserves `bytes` in `category`, or returns OUT_OF_MEMORY (nothing reserved).
  Status reserve(std::int64_t bytes, MemoryCategory category, std::string_view label);
  // Releases bytes previously reserved in `category`.
  void release(std::int64_t bytes, MemoryCategory category);

  // Peaks restart from the current bytes (torch.cuda.reset_peak_memory_stats): what a
  // phase allocates on top of what an earlier phase left.
  void reset_peaks();
  MemoryStats stats() const;
  const std::string& device_name() const { return device_name_; }
  std::int64_t capacity() const { return stats_.capacity; }

 private:
  std::string device_name_;
  mutable std::mutex mu_;
  MemoryStats stats_;
};

}  // namespace shardlab
