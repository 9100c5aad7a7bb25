// Tests for MemoryTracker: per-category accounting, peaks, capacity and OOM reports.
#include "runtime/core/memory.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <array>
#include <thread>
#include <vector>

#include "runtime/core/check.h"
#include "runtime/core/tensor.h"

namespace shardlab {
namespace {

using ::testing::HasSubstr;

constexpr int cat(MemoryCategory c) { return static_cast<int>(c); }

TEST(MemoryTest, CategoryNames) {
  EXPECT_EQ(category_name(MemoryCategory::kParameters), "parameters");
  EXPECT_EQ(category_name(MemoryCategory::kGradients), "gradients");
  EXPECT_EQ(category_name(MemoryCategory::kOptimizerState), "optimizer_state");
  EXPECT_EQ(category_name(MemoryCategory::kActivations), "activations");
  EXPECT_EQ(category_name(MemoryCategory::kCommBuffers), "comm_buffers");
  EXPECT_EQ(category_name(MemoryCategory::kOther), "other");
}

TEST(MemoryTest, FormatBytes) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1024), "1.00 KiB");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(12ll << 20), "12.00 MiB");
  EXPECT_EQ(format_bytes(3ll << 30), "3.00 GiB");
  EXPECT_EQ(format_bytes(5ll << 40), "5.00 TiB");
  EXPECT_EQ(format_bytes(2048ll << 40), "2048.00 TiB");  // TiB is the largest unit
  EXPECT_EQ(format_bytes(-2048), "-2.00 KiB");
}

TEST(MemoryTest, TracksCurrentAndPeakPerCategory) {
  MemoryTracker t("hpu:0", 0);
  EXPECT_EQ(t.device_name(), "hpu:0");
  ASSERT_TRUE(t.reserve(100, MemoryCategory::kParameters, "w").is_ok());
  ASSERT_TRUE(t.reserve(50, MemoryCategory::kGradients, "g").is_ok());
  ASSERT_TRUE(t.reserve(30, MemoryCategory::kParameters, "b").is_ok());
  MemoryStats s = t.stats();
  EXPECT_EQ(s.current[cat(MemoryCategory::kParameters)], 130);
  EXPECT_EQ(s.current[cat(MemoryCategory::kGradients)], 50);
  EXPECT_EQ(s.current[cat(MemoryCategory::kActivations)], 0);
  EXPECT_EQ(s.current_total, 180);
  EXPECT_EQ(s.peak_total, 180);
  EXPECT_EQ(s.allocations, 3);

  t.release(100, MemoryCategory::kParameters);
  ASSERT_TRUE(t.reserve(20, MemoryCategory::kActivations, "a").is_ok());
  s = t.stats();
  EXPECT_EQ(s.current[cat(MemoryCategory::kParameters)], 30);
  EXPECT_EQ(s.peak[cat(MemoryCategory::kParameters)], 130);
  EXPECT_EQ(s.peak[cat(MemoryCategory::kActivations)], 20);
  EXPECT_EQ(s.current_total, 100);
  EXPECT_EQ(s.peak_total, 180);  // peaks survive releases
  EXPECT_EQ(s.allocations, 4);

  // The total peak is the peak of the sum, not the sum of category peaks.
  t.release(30, MemoryCategory::kParameters);
  t.release(50, MemoryCategory::kGradients);
  t.release(20, MemoryCategory::kActivations);
  s = t.stats();
  EXPECT_EQ(s.current_total, 0);
  for (std::int64_t c : s.current) EXPECT_EQ(c, 0);
  EXPECT_EQ(s.peak_total, 180);
}

TEST(MemoryTest, ResetPeaksRestartsThemFromTheCurrentBytes) {
  MemoryTracker t("sim:0", 0);
  ASSERT_TRUE(t.reserve(100, MemoryCategory::kParameters, "a").is_ok());
  ASSERT_TRUE(t.reserve(50, MemoryCategory::kActivations, "b").is_ok());
  t.release(80, MemoryCategory::kParameters);
  t.reset_peaks();
  MemoryStats s = t.stats();
  EXPECT_EQ(s.peak[static_cast<int>(MemoryCategory::kParameters)], 20);
  EXPECT_EQ(s.peak[static_cast<int>(MemoryCategory::kActivations)], 50);
  EXPECT_EQ(s.peak_total, 70);
  EXPECT_EQ(s.allocations, 2);  // counts are not peaks
  ASSERT_TRUE(t.reserve(30, MemoryCategory::kParameters, "c").is_ok());
  s = t.stats();
  EXPECT_EQ(s.peak[static_cast<int>(MemoryCategory::kParameters)], 50);
  EXPECT_EQ(s.peak_total, 100);
}

TEST(MemoryTest, BreakdownListsEveryCategory) {
  MemoryTracker t("cpu", 0);
  ASSERT_TRUE(t.reserve(8ll << 20, MemoryCategory::kParameters, "p").is_ok());
  ASSERT_TRUE(t.reserve(4ll << 20, MemoryCategory::kGradients, "g").is_ok());
  t.release(4ll << 20, MemoryCategory::kGradients);
  const MemoryStats s = t.stats();
  EXPECT_EQ(s.breakdown(),
            "parameters 8.00 MiB, gradients 0 B, optimizer_state 0 B, activations 0 B, comm_buffers 0 B, other 0 B");
  EXPECT_THAT(s.breakdown(MemoryStats::Of::kCategoryPeaks), HasSubstr("gradients 4.00 MiB"));
  EXPECT_EQ(
      s.breakdown(MemoryStats::Of::kAtPeak),
      "parameters 8.00 MiB, gradients 4.00 MiB, optimizer_state 0 B, activations 0 B, comm_buffers 0 B, other 0 B");
}

// The composition at the total peak sums to it; the category peaks, each taken at its own
// moment, need not (here parameters peak after the total did).
TEST(MemoryTest, AtPeakIsTheCompositionWhenTheTotalPeaked) {
  MemoryTracker t("sim:0", 0);
  ASSERT_TRUE(t.reserve(100, MemoryCategory::kParameters, "p").is_ok());
  ASSERT_TRUE(t.reserve(300, MemoryCategory::kActivations, "a").is_ok());
  t.release(300, MemoryCategory::kActivations);
  ASSERT_TRUE(t.reserve(200, MemoryCategory::kParameters, "q").is_ok());
  const MemoryStats s = t.stats();
  EXPECT_EQ(s.peak_total, 400);
  EXPECT_EQ(s.at_peak[cat(MemoryCategory::kParameters)], 100);
  EXPECT_EQ(s.at_peak[cat(MemoryCategory::kActivations)], 300);
  EXPECT_EQ(s.peak[cat(MemoryCategory::kParameters)], 300);
  std::int64_t sum = 0;
  for (std::int64_t b : s.at_peak) sum += b;
  EXPECT_EQ(sum, s.peak_total);
}

TEST(MemoryTest, CapacityOomNamesDeviceRequestLabelCategoryAndBreakdown) {
  MemoryTracker t("hpu:3", 1000);
  EXPECT_EQ(t.capacity(), 1000);
  ASSERT_TRUE(t.reserve(600, MemoryCategory::kParameters, "flat_param").is_ok());
  ASSERT_TRUE(t.reserve(300, MemoryCategory::kOptimizerState, "adam.m").is_ok());
  const MemoryStats before = t.stats();

  const Status s = t.reserve(101, MemoryCategory::kActivations, "layer7.mlp.out");
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.code(), StatusCode::kOutOfMemory);
  EXPECT_EQ(s.exit_code(), 3);
  const std::string& m = s.message();
  EXPECT_THAT(m, HasSubstr("hpu:3"));
  EXPECT_THAT(m, HasSubstr("requested 101 B"));
  EXPECT_THAT(m, HasSubstr("'layer7.mlp.out'"));
  EXPECT_THAT(m, HasSubstr("(activations)"));
  EXPECT_THAT(m, HasSubstr("capacity 1000 B"));
  EXPECT_THAT(m, HasSubstr("in use 900 B"));
  EXPECT_THAT(m, HasSubstr("parameters 600 B"));
  EXPECT_THAT(m, HasSubstr("optimizer_state 300 B"));

  // Nothing was reserved by the failed request.
  const MemoryStats after = t.stats();
  EXPECT_EQ(after.current, before.current);
  EXPECT_EQ(after.current_total, before.current_total);
  EXPECT_EQ(after.allocations, before.allocations);

  // Exactly filling the capacity is fine; one more byte is not.
  EXPECT_TRUE(t.reserve(100, MemoryCategory::kActivations, "fits").is_ok());
  EXPECT_EQ(t.reserve(1, MemoryCategory::kOther, "byte").code(), StatusCode::kOutOfMemory);
  EXPECT_TRUE(t.reserve(0, MemoryCategory::kOther, "nothing").is_ok());
}

TEST(MemoryTest, ReleaseRestoresRoom) {
  MemoryTracker t("sim:0", 256);
  ASSERT_TRUE(t.reserve(200, MemoryCategory::kCommBuffers, "gather").is_ok());
  EXPECT_FALSE(t.reserve(100, MemoryCategory::kCommBuffers, "gather2").is_ok());
  t.release(200, MemoryCategory::kCommBuffers);
  EXPECT_TRUE(t.reserve(256, MemoryCategory::kCommBuffers, "gather2").is_ok());
  EXPECT_EQ(t.stats().peak_total, 256);
}

TEST(MemoryTest, UnlimitedCapacityNeverOoms) {
  for (std::int64_t capacity : {0ll, -1ll}) {
    MemoryTracker t("cpu", capacity);
    EXPECT_TRUE(t.reserve(1ll << 50, MemoryCategory::kOther, "a").is_ok());
    EXPECT_TRUE(t.reserve(1ll << 50, MemoryCategory::kOther, "b").is_ok());
    EXPECT_EQ(t.stats().current_total, 1ll << 51);
  }
}

TEST(MemoryTest, NegativeRequestIsInvalidArgument) {
  MemoryTracker t("cpu", 0);
  const Status s = t.reserve(-8, MemoryCategory::kParameters, "w");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("-8"));
  EXPECT_THAT(s.message(), HasSubstr("'w'"));
  EXPECT_EQ(t.stats().allocations, 0);
}

TEST(MemoryTest, ReleasingMoreThanReservedIsACheckFailure) {
  MemoryTracker t("cpu", 0);
  ASSERT_TRUE(t.reserve(10, MemoryCategory::kGradients, "g").is_ok());
  EXPECT_THROW(t.release(11, MemoryCategory::kGradients), CheckFailure);
  EXPECT_THROW(t.release(1, MemoryCategory::kParameters), CheckFailure);  // wrong category
  EXPECT_EQ(t.stats().current_total, 10);
}

TEST(MemoryTest, StorageReleasesIntoTheTrackerOnDestruction) {
  MemoryTracker t("cpu", 0);
  {
    ASSERT_TRUE(t.reserve(64, MemoryCategory::kActivations, "act").is_ok());
    auto s = std::make_shared<Storage>(nullptr, 0, 64, MemoryCategory::kActivations, "act", "cpu",
                                       [&t](Storage& st) { t.release(st.nbytes(), st.category()); });
    EXPECT_EQ(t.stats().current_total, 64);
  }
  EXPECT_EQ(t.stats().current_total, 0);
  EXPECT_EQ(t.stats().peak[cat(MemoryCategory::kActivations)], 64);
}

TEST(MemoryTest, ConcurrentReserveAndReleaseBalance) {
  MemoryTracker t("cpu", 0);
  constexpr int kThreads = 4, kIters = 5000;
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&t, i] {
      const auto c = static_cast<MemoryCategory>(i % kNumMemoryCategories);
      for (int k = 0; k < kIters; ++k) {
        if (t.reserve(16, c, "x").is_ok()) t.release(16, c);
      }
    });
  }
  for (auto& th : threads) th.join();
  const MemoryStats s = t.stats();
  EXPECT_EQ(s.current_total, 0);
  EXPECT_EQ(s.allocations, kThreads * kIters);
  EXPECT_GE(s.peak_total, 16);
  EXPECT_LE(s.peak_total, 16 * kThreads);
}

// Random reserve/release/reset_peaks sequences against a plain model of the accounting.
RC_GTEST_PROP(MemoryProperty, MatchesModel, ()) {
  const std::int64_t capacity = *rc::gen::inRange<std::int64_t>(0, 2000);
  MemoryTracker t("sim:1", capacity);
  std::array<std::int64_t, kNumMemoryCategories> cur{}, peak{}, at_peak{};
  std::int64_t total = 0, peak_total = 0, allocations = 0;
  const int steps = *rc::gen::inRange(0, 60);
  for (int i = 0; i < steps; ++i) {
    const int c = *rc::gen::inRange(0, kNumMemoryCategories);
    const auto category = static_cast<MemoryCategory>(c);
    if (*rc::gen::inRange(0, 8) == 0) {
      t.reset_peaks();
      peak = cur;
      at_peak = cur;
      peak_total = total;
    } else if (*rc::gen::arbitrary<bool>() || cur[c] == 0) {
      const std::int64_t bytes = *rc::gen::inRange<std::int64_t>(0, 600);
      const bool fits = capacity <= 0 || total + bytes <= capacity;
      const Status s = t.reserve(bytes, category, "r");
      RC_ASSERT(s.is_ok() == fits);
      if (!fits) {
        RC_ASSERT(s.code() == StatusCode::kOutOfMemory);
        continue;
      }
      cur[c] += bytes;
      total += bytes;
      peak[c] = std::max(peak[c], cur[c]);
      if (total > peak_total) at_peak = cur;
      peak_total = std::max(peak_total, total);
      ++allocations;
    } else {
      const std::int64_t bytes = *rc::gen::inRange<std::int64_t>(0, cur[c] + 1);
      t.release(bytes, category);
      cur[c] -= bytes;
      total -= bytes;
    }
    const MemoryStats s = t.stats();
    RC_ASSERT(s.current == cur);
    RC_ASSERT(s.peak == peak);
    RC_ASSERT(s.current_total == total);
    RC_ASSERT(s.peak_total == peak_total);
    RC_ASSERT(s.at_peak == at_peak);
    RC_ASSERT(s.allocations == allocations);
  }
}

}  // namespace
}  // namespace shardlab
