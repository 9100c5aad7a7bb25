// The congestion-unaware models must reproduce their textbook closed forms exactly.
#include "sim/models/device/cost_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string_view>

namespace shardlab::sim {
namespace {

using runtime::comm::OpKind;

NetworkModel net() {
  NetworkModel n;
  n.latency_ns = 3000;
  n.bandwidth_bytes_per_s = 1e9;  // β = 1 ns per byte
  return n;
}

TEST(CostModel, RingAllGatherMatchesClosedForm) {
  for (int p : {1, 2, 3, 5, 8, 13}) {
    const std::int64_t n = 1000;  // bytes per rank
    const std::vector<Nanos> arrivals(static_cast<std::size_t>(p), 500);
    const auto done = collective_completion_times(OpKind::kAllGather, arrivals, n, net());
    // (p-1)α + ((p-1)/p)·(p·n)·β
    const Nanos expect = 500 + (p - 1) * 3000 + (p - 1) * n;
    for (Nanos t : done) EXPECT_EQ(t, expect) << "p=" << p;
  }
}

TEST(CostModel, RingAllReduceMatchesClosedForm) {
  for (int p : {2, 4, 8}) {
    const std::int64_t bytes = 8000;  // divisible by p
    const std::vector<Nanos> arrivals(static_cast<std::size_t>(p), 0);
    const auto done = collective_completion_times(OpKind::kAllReduce, arrivals, bytes, net());
    const Nanos expect = 2 * (p - 1) * 3000 + 2 * (p - 1) * bytes / p;
    for (Nanos t : done) EXPECT_EQ(t, expect) << "p=" << p;
  }
}

TEST(CostModel, LateArrivalDelaysEveryoneButNotByMoreThanTheSchedule) {
  const int p = 4;
  std::vector<Nanos> arrivals(p, 0);
  arrivals[2] = 100000;
  const auto done = collective_completion_times(OpKind::kReduceScatter, arrivals, 1000, net());
  for (Nanos t : done) {
    EXPECT_GE(t, 100000 + 4000);            // nobody finishes before the last arrival + one message
    EXPECT_LE(t, 100000 + (p - 1) * 4000);  // nor later than a full ring after it
  }
}

TEST(CostModel, BroadcastAndBarrierUseTreeDepth) {
  const std::vector<Nanos> arrivals = {0, 10, 20, 30, 40};  // p = 5 → depth 3
  EXPECT_EQ(collective_completion_times(OpKind::kBroadcast, arrivals, 100, net())[0], 40 + 3 * (3000 + 100));
  EXPECT_EQ(collective_completion_times(OpKind::kBarrier, arrivals, 0, net())[4], 40 + 3 * 3000);
}

TEST(CostModel, RooflineTakesTheSlowerOfComputeAndMemory) {
  DeviceProfile d;
  d.matrix_flops_per_s = 1e12;
  d.memory_bytes_per_s = 1e11;
  d.launch_ns = 1000;
  EXPECT_EQ(d.op_time(2e9, 1e6, true), 1000 + 2'000'000);   // compute bound: 2 ms
  EXPECT_EQ(d.op_time(1e3, 1e9, true), 1000 + 10'000'000);  // memory bound: 10 ms
}

// NOTE [Per-op compute factors]: rates of 1e9 make one flop and one byte 1 ns each, so the
// expected times below are read off the flop and byte counts.
DeviceProfile unit_rates() {
  DeviceProfile d;
  d.matrix_flops_per_s = 1e9;
  d.matrix_bf16_flops_per_s = 1e9;
  d.vector_flops_per_s = 1e9;
  d.vector_bf16_flops_per_s = 1e9;
  d.memory_bytes_per_s = 1e9;
  d.launch_ns = 1000;
  return d;
}

TEST(CostModel, ComputeFactorScalesOnlyTheComputeTerm) {
  DeviceProfile d = unit_rates();
  d.compute_factors = {{"activation_gelu", 3.0}, {"optimizer_step", 0.25}, {"gemm", 1.5}};
  const auto vec = [&](std::string_view key, double flops, double bytes) {
    return d.op_time(key, flops, bytes, ComputeUnit::kVector, DType::kF32);
  };
  // Compute bound (1e6 flops = 1 ms vs 1e5 bytes = 0.1 ms): the factor scales the time.
  EXPECT_EQ(vec("activation_gelu", 1e6, 1e5), 1000 + 3'000'000);
  // A factor > 1 on a memory-bound op (compute 3 × 0.1 ms < memory 0.5 ms): bandwidth decides.
  EXPECT_EQ(vec("activation_gelu", 1e5, 5e5), 1000 + 500'000);
  // A small factor turns a compute-bound op (1 ms vs 0.5 ms) memory bound: 0.25 ms < 0.5 ms,
  // and the memory term is not scaled.
  EXPECT_EQ(vec("optimizer_step", 1e6, 5e5), 1000 + 500'000);
  EXPECT_EQ(vec("optimizer_step", 4e6, 5e5), 1000 + 1'000'000);  // 0.25 × 4 ms = 1 ms > 0.5 ms
  // Ops without a factor, and the factor-less overload, are unchanged.
  EXPECT_EQ(vec("axpy", 1e6, 5e5), 1000 + 1'000'000);
  EXPECT_EQ(vec("", 1e6, 5e5), 1000 + 1'000'000);
  EXPECT_EQ(d.op_time(1e6, 5e5, ComputeUnit::kVector, DType::kF32), 1000 + 1'000'000);
  EXPECT_EQ(d.compute_factor("axpy"), 1.0);
  EXPECT_EQ(d.compute_factor("optimizer_step"), 0.25);
  // Matrix ops take their factor too: 2e6 flops × 1.5 = 3 ms.
  EXPECT_EQ(d.op_time("gemm", 2e6, 1e3, ComputeUnit::kMatrix, DType::kF32), 1000 + 3'000'000);
  EXPECT_EQ(d.op_time(2e6, 1e3, true), 1000 + 2'000'000);
}

TEST(CostModel, ComputeFactorOfOneIsBitForBitNoFactor) {
  DeviceProfile with, without;
  with.vector_flops_per_s = without.vector_flops_per_s = 7.3e9;  // times that do not land on whole ns
  with.matrix_flops_per_s = without.matrix_flops_per_s = 3.7e11;
  with.memory_bytes_per_s = without.memory_bytes_per_s = 1.9e10;
  with.compute_factors = {{"scale", 1.0}, {"gemm", 1.0}};
  for (double flops : {1.0, 12345.0, 123456789.0, 9.87654321e12}) {
    for (double bytes : {0.0, 3.3, 77777.0}) {
      EXPECT_EQ(with.op_time("scale", flops, bytes, ComputeUnit::kVector, DType::kF32),
                without.op_time("scale", flops, bytes, ComputeUnit::kVector, DType::kF32))
          << flops << " " << bytes;
      EXPECT_EQ(with.op_time("scale", flops, bytes, ComputeUnit::kVector, DType::kF32),
                without.op_time(flops, bytes, ComputeUnit::kVector, DType::kF32));
      EXPECT_EQ(with.op_time("gemm", flops, bytes, ComputeUnit::kMatrix, DType::kBF16),
                without.op_time(flops, bytes, ComputeUnit::kMatrix, DType::kBF16));
    }
  }
}

// NOTE [Matrix ops on a CPU]: linear in log2 of the dimension, clamped to the end entries.
// NOTE [Cache-resident bytes]: the first cache_bytes at the in-cache rate, the rest at
// the memory rate; without a cache every byte at the memory rate.
TEST(CostModel, CacheResidentBytesMoveAtTheCacheRate) {
  DeviceProfile p;
  p.memory_bytes_per_s = 1e10;  // 0.1 ns per byte
  p.vector_flops_per_s = 1e30;
  p.launch_ns = 0;
  EXPECT_EQ(p.op_time("copy", 0, 1e6, ComputeUnit::kVector, DType::kF32), 100'000);
  p.cache_bytes = 1'000'000;
  p.cache_bytes_per_s = 1e11;                                                       // 0.01 ns per byte
  EXPECT_EQ(p.op_time("copy", 0, 1e6, ComputeUnit::kVector, DType::kF32), 10'000);  // all in cache
  EXPECT_EQ(p.op_time("copy", 0, 5e5, ComputeUnit::kVector, DType::kF32), 5'000);
  EXPECT_EQ(p.op_time("copy", 0, 3e6, ComputeUnit::kVector, DType::kF32), 210'000);  // 1e6 cached + 2e6 from memory
  EXPECT_DOUBLE_EQ(p.memory_seconds(3e6), 1e6 / 1e11 + 2e6 / 1e10);
  // The efficiency scales both rates; the op's memory factor the whole term.
  p.memory_efficiency = 0.5;
  EXPECT_EQ(p.op_time("copy", 0, 3e6, ComputeUnit::kVector, DType::kF32), 420'000);
  p.memory_factors["fill"] = 2.0;
  EXPECT_EQ(p.op_time("fill", 0, 3e6, ComputeUnit::kVector, DType::kF32), 840'000);
  // A cache with no rate is no cache.
  p.cache_bytes_per_s = 0;
  EXPECT_EQ(p.op_time("copy", 0, 3e6, ComputeUnit::kVector, DType::kF32), 600'000);
}

TEST(CostModel, SmallDimFactorInterpolatesInLog2AndClamps) {
  DeviceProfile d;
  EXPECT_EQ(d.small_dim_factor(1), 1.0);  // empty table: factor 1 everywhere
  EXPECT_EQ(d.small_dim_factor(16), 1.0);
  EXPECT_EQ(d.small_dim_factor(std::int64_t{1} << 20), 1.0);
  d.small_dim_factors = {{16, 0.5}, {64, 1.0}};
  EXPECT_EQ(d.small_dim_factor(16), 0.5);  // at the entries
  EXPECT_EQ(d.small_dim_factor(64), 1.0);
  EXPECT_EQ(d.small_dim_factor(32), 0.75);  // log2: 5 is halfway between 4 and 6
  EXPECT_EQ(d.small_dim_factor(8), 0.5);    // below the first entry: clamped
  EXPECT_EQ(d.small_dim_factor(1), 0.5);
  EXPECT_EQ(d.small_dim_factor(65), 1.0);  // above the last: clamped
  EXPECT_EQ(d.small_dim_factor(100000), 1.0);
  EXPECT_EQ(d.small_dim_factor(0), 1.0);  // 0: no dimension given
  d.small_dim_factors = {{8, 4.0}, {16, 2.0}, {256, 1.0}};
  EXPECT_EQ(d.small_dim_factor(64), 1.5);  // log2 6 is halfway between 4 and 8: 2 + (1 - 2)/2
  EXPECT_EQ(d.small_dim_factor(16), 2.0);
  // 12: 4 + (2 - 4)·(log2 12 - 3) = 4 - 2·0.5849625007 = 2.8300749986 (not 3, the linear value).
  EXPECT_NEAR(d.small_dim_factor(12), 2.8300749986, 1e-9);
}

TEST(CostModel, SmallDimFactorScalesMatrixComputeOnly) {
  DeviceProfile d = unit_rates();
  d.small_dim_factors = {{8, 2.0}, {64, 1.0}};
  d.compute_factors = {{"batched_gemm", 1.5}};
  // min_dim 8: matrix compute 1 ms × 2.
  EXPECT_EQ(d.op_time("gemm", 1e6, 1e3, ComputeUnit::kMatrix, DType::kF32, 8), 1000 + 2'000'000);
  EXPECT_EQ(d.op_time("gemm", 1e6, 1e3, ComputeUnit::kMatrix, DType::kF32, 64), 1000 + 1'000'000);
  EXPECT_EQ(d.op_time("gemm", 1e6, 1e3, ComputeUnit::kMatrix, DType::kF32, 0), 1000 + 1'000'000);
  // Both factors multiply: 1 ms × 1.5 × 2.
  EXPECT_EQ(d.op_time("batched_gemm", 1e6, 1e3, ComputeUnit::kMatrix, DType::kF32, 8), 1000 + 3'000'000);
  // Not on the vector unit, and not on the memory term (memory bound: 1 ms × 2 < 5 ms).
  EXPECT_EQ(d.op_time("scale", 1e6, 1e3, ComputeUnit::kVector, DType::kF32, 8), 1000 + 1'000'000);
  EXPECT_EQ(d.op_time("gemm", 1e6, 5e6, ComputeUnit::kMatrix, DType::kF32, 8), 1000 + 5'000'000);
}

TEST(CostModel, MatrixMemoryOverlapOffAddsMemoryToCompute) {
  DeviceProfile d;
  d.matrix_flops_per_s = 1e12;
  d.vector_flops_per_s = 1e10;
  d.memory_bytes_per_s = 1e11;
  d.launch_ns = 1000;
  // 2e9 flops = 2 ms of matrix compute, 1e8 bytes = 1 ms of memory.
  EXPECT_TRUE(d.matrix_memory_overlap);                    // the default
  EXPECT_EQ(d.op_time(2e9, 1e8, true), 1000 + 2'000'000);  // max
  EXPECT_EQ(d.op_time("gemm", 2e9, 1e8, ComputeUnit::kMatrix, DType::kF32), 1000 + 2'000'000);
  d.matrix_memory_overlap = false;
  EXPECT_EQ(d.op_time(2e9, 1e8, true), 1000 + 3'000'000);  // sum
  EXPECT_EQ(d.op_time("gemm", 2e9, 1e8, ComputeUnit::kMatrix, DType::kF32), 1000 + 3'000'000);
  EXPECT_EQ(d.op_time(1e3, 1e9, true), 1000 + 10'000'001);  // 1 ns + 10 ms
  // With a small-dimension factor the doubled compute is added: 4 ms + 1 ms.
  d.small_dim_factors = {{8, 2.0}};
  EXPECT_EQ(d.op_time("gemm", 2e9, 1e8, ComputeUnit::kMatrix, DType::kF32, 8), 1000 + 5'000'000);
  // Vector ops keep the roofline max: 2e7 flops = 2 ms vs 1 ms.
  EXPECT_EQ(d.op_time(2e7, 1e8, false), 1000 + 2'000'000);
}

TEST(CostModel, SlowedByScalesAllocTimeAndKeepsTheNewFields) {
  DeviceProfile d;
  d.alloc_ns = 100;
  d.op_host_ns = 40;
  d.compute_factors = {{"gemm", 2.0}};
  d.matrix_memory_overlap = false;
  d.small_dim_factors = {{16, 3.0}};
  const DeviceProfile s = d.slowed_by(2.5);
  EXPECT_EQ(s.alloc_ns, 250);
  EXPECT_EQ(s.op_host_ns, 100);
  EXPECT_EQ(s.launch_ns, 5000);  // 2 µs × 2.5
  EXPECT_EQ(s.compute_factors, d.compute_factors);
  EXPECT_FALSE(s.matrix_memory_overlap);
  EXPECT_EQ(s.small_dim_factors, d.small_dim_factors);
}

// NOTE [Virtual time limit]: conversions and sums of times saturate at kTimeLimit; NaN
// and infinities too. They never wrap to a negative (or small) time.
TEST(CostModel, TimesSaturateAtTheLimitInsteadOfWrapping) {
  EXPECT_EQ(to_nanos(1.4), 1);
  EXPECT_EQ(to_nanos(-5.0), 0);
  EXPECT_EQ(to_nanos(1e30), kTimeLimit);
  EXPECT_EQ(to_nanos(std::nan("")), kTimeLimit);
  EXPECT_EQ(to_nanos(INFINITY), kTimeLimit);
  EXPECT_EQ(add_time(kTimeLimit, kTimeLimit), kTimeLimit);
  EXPECT_EQ(add_time(kTimeLimit - 1, 5), kTimeLimit);
  EXPECT_EQ(add_time(3, 4), 7);
  constexpr Nanos never = std::numeric_limits<Nanos>::max();
  EXPECT_EQ(add_time(never, 1), never);
  EXPECT_EQ(add_time(1, never), never);
  NetworkModel slow;
  slow.bandwidth_bytes_per_s = 1e-20;
  EXPECT_EQ(slow.message_time(1 << 20), kTimeLimit);
}

// A profile slower than anything the loader accepts (built directly): every op takes at
// least as long as on a faster one — never less, as a wrapped 64-bit time once did.
TEST(CostModel, ASlowerDeviceIsNeverFaster) {
  DeviceProfile fast, slow;
  slow.matrix_flops_per_s = slow.matrix_bf16_flops_per_s = 1e-3;
  slow.memory_bytes_per_s = 1e-6;
  slow.matrix_efficiency = 1e-300;
  slow.host_link_bytes_per_s = 1e-300;
  for (double flops : {1.0, 1e9, 1e15}) {
    const Nanos t = slow.op_time(flops, 4096, ComputeUnit::kMatrix, DType::kF32);
    EXPECT_GE(t, fast.op_time(flops, 4096, ComputeUnit::kMatrix, DType::kF32)) << flops;
    EXPECT_EQ(t, kTimeLimit) << flops;
  }
  EXPECT_EQ(slow.host_transfer_time(1e6), kTimeLimit);
  const std::string keys = slow.keys_of("gemm", ComputeUnit::kMatrix, DType::kF32);
  EXPECT_NE(keys.find("matrix_flops_per_s.fp32 = 0.001"), std::string::npos) << keys;
  EXPECT_NE(keys.find("efficiency.matrix = 1e-300"), std::string::npos) << keys;
  EXPECT_NE(slow.keys_of("", ComputeUnit::kVector, DType::kF32, true).find("host_link_bytes_per_s = 1e-300"),
            std::string::npos);
}

}  // namespace
}  // namespace shardlab::sim
