// The congestion-unaware models must reproduce their textbook closed forms exactly.
#include "sim/cost_model.h"

#include <gtest/gtest.h>

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
    EXPECT_GE(t, 100000 + 4000);                 // nobody finishes before the last arrival + one message
    EXPECT_LE(t, 100000 + (p - 1) * 4000);       // nor later than a full ring after it
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
  EXPECT_EQ(d.op_time(2e9, 1e6, true), 1000 + 2'000'000);  // compute bound: 2 ms
  EXPECT_EQ(d.op_time(1e3, 1e9, true), 1000 + 10'000'000);  // memory bound: 10 ms
}

}  // namespace
}  // namespace shardlab::sim
