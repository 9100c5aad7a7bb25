#include "sim/engine/world.h"

#include <gtest/gtest.h>

#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "runtime/core/rng.h"
#include "testing/status_matchers.h"

using shardlab::testlib::IsOk;

namespace shardlab::sim {
namespace {

using runtime::comm::ReduceOp;

struct Outcome {
  std::vector<Nanos> end_times;
  std::vector<std::vector<std::uint32_t>> bits;  // per rank, the final buffer's bit patterns
  bool operator==(const Outcome&) const = default;
};

// A workload whose numbers depend on reduction order (random fp32 values) and whose
// timing depends on uneven compute per rank.
Outcome run_workload(int world_size, std::uint64_t perturb_seed) {
  WorldOptions o;
  o.world_size = world_size;
  o.perturb_seed = perturb_seed;
  World world(o);
  Outcome out;
  out.bits.resize(static_cast<std::size_t>(world_size));
  const auto results = world.run([&](RankContext& ctx) -> Status {
    Rng rng = Rng(42).split(static_cast<std::uint64_t>(ctx.rank));
    const std::int64_t n = 64;
    SHARDLAB_ASSIGN_OR_RETURN(Tensor buf,
                              ctx.device.empty({n * ctx.world_size}, DType::kF32, MemoryCategory::kOther, "buf"));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor a,
                              ctx.device.empty({16 * (ctx.rank + 1), 32}, DType::kF32, MemoryCategory::kOther, "a"));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor c, ctx.device.empty({16 * (ctx.rank + 1), 16 * (ctx.rank + 1)}, DType::kF32,
                                                         MemoryCategory::kOther, "c"));
    for (std::int64_t i = 0; i < buf.numel(); ++i) buf.data<float>()[i] = rng.uniform(-1, 1);
    for (std::int64_t i = 0; i < a.numel(); ++i) a.data<float>()[i] = rng.uniform(-1, 1);
    Tensor mine = *buf.narrow(n * ctx.rank, n);
    for (int step = 0; step < 5; ++step) {
      SHARDLAB_RETURN_IF_ERROR(ctx.device.gemm(a, false, a, true, c, 1.0f, 0.0f));  // uneven compute
      SHARDLAB_RETURN_IF_ERROR(ctx.comm.all_reduce(buf, ReduceOp::kSum)->wait(kNanosPerSecond));
      SHARDLAB_RETURN_IF_ERROR(ctx.device.scale(buf, 0.25f));
      auto w1 = ctx.comm.reduce_scatter(mine, buf, ReduceOp::kAvg);
      SHARDLAB_RETURN_IF_ERROR(w1->wait(kNanosPerSecond));
      SHARDLAB_RETURN_IF_ERROR(ctx.comm.all_gather_into(buf, mine)->wait(kNanosPerSecond));
    }
    auto& bits = out.bits[static_cast<std::size_t>(ctx.rank)];
    bits.resize(static_cast<std::size_t>(buf.numel()));
    std::memcpy(bits.data(), buf.bytes(), static_cast<std::size_t>(buf.nbytes()));
    return Status::ok();
  });
  for (const auto& r : results) {
    EXPECT_THAT(r.status, IsOk());
    out.end_times.push_back(r.end_time);
  }
  return out;
}

TEST(WorldDeterminism, SameResultsAndTimesUnderRandomHostInterleavings) {
  const Outcome reference = run_workload(5, 0);
  for (Nanos t : reference.end_times) EXPECT_GT(t, 0);
  for (std::uint64_t seed : {1, 2, 3, 4}) {
    const Outcome o = run_workload(5, seed);
    EXPECT_EQ(o.end_times, reference.end_times) << "perturb seed " << seed;
    EXPECT_TRUE(o.bits == reference.bits) << "perturb seed " << seed;
  }
}

TEST(WorldDeterminism, RanksEndAtDifferentTimesBecauseComputeIsUneven) {
  const Outcome o = run_workload(3, 0);
  // All ranks leave the last all_gather at the same virtual time or later than rank 0.
  EXPECT_GE(o.end_times[2], o.end_times[0]);
}

TEST(World, MissingPeerTimesOutAtItsVirtualDeadlineNamingTheRank) {
  WorldOptions o;
  o.world_size = 3;
  World world(o);
  Status seen[3];
  Nanos when[3] = {};
  const auto results = world.run([&](RankContext& ctx) -> Status {
    if (ctx.rank == 1) return Status::ok();  // never joins
    SHARDLAB_ASSIGN_OR_RETURN(Tensor t, ctx.device.zeros({4}, DType::kF32, MemoryCategory::kOther, "t"));
    const Nanos before = ctx.clock.now();
    seen[ctx.rank] = ctx.comm.all_reduce(t, ReduceOp::kSum)->wait(2 * kNanosPerSecond);
    when[ctx.rank] = ctx.clock.now() - before;
    return Status::ok();
  });
  for (int r : {0, 2}) {
    EXPECT_EQ(seen[r].code(), StatusCode::kTimeout) << seen[r].to_string();
    EXPECT_NE(seen[r].message().find("never arrived (group ranks): 1"), std::string::npos) << seen[r].message();
    EXPECT_NE(seen[r].message().find("all_reduce #0"), std::string::npos) << seen[r].message();
    EXPECT_EQ(when[r], 2 * kNanosPerSecond);
  }
}

TEST(World, ArrivalAfterTheDeadlineIsATimeoutEvenIfTheHostWasFast) {
  WorldOptions o;
  o.world_size = 2;
  o.device.matrix_flops_per_s = 1e6;  // make rank 1's GEMM take ~ seconds of virtual time
  World world(o);
  Status first, second;
  const auto results = world.run([&](RankContext& ctx) -> Status {
    SHARDLAB_ASSIGN_OR_RETURN(Tensor t, ctx.device.zeros({4}, DType::kF32, MemoryCategory::kOther, "t"));
    if (ctx.rank == 1) {
      SHARDLAB_ASSIGN_OR_RETURN(Tensor a, ctx.device.zeros({64, 64}, DType::kF32, MemoryCategory::kOther, "a"));
      SHARDLAB_ASSIGN_OR_RETURN(Tensor c, ctx.device.zeros({64, 64}, DType::kF32, MemoryCategory::kOther, "c"));
      SHARDLAB_RETURN_IF_ERROR(ctx.device.gemm(a, false, a, false, c, 1, 0));  // 2·64³ flops = 0.52 s
      return ctx.comm.all_reduce(t, ReduceOp::kSum)->wait(10 * kNanosPerSecond);
    }
    auto w = ctx.comm.all_reduce(t, ReduceOp::kSum);
    first = w->wait(100 * kNanosPerMilli);
    second = w->wait(10 * kNanosPerSecond);
    return Status::ok();
  });
  EXPECT_EQ(first.code(), StatusCode::kTimeout) << first.to_string();
  EXPECT_NE(first.message().find("completed only at"), std::string::npos) << first.message();
  EXPECT_THAT(second, IsOk());
  EXPECT_THAT(results[1].status, IsOk());
}

TEST(World, MismatchedCollectivesFailOnEveryRankNamingBothCalls) {
  WorldOptions o;
  o.world_size = 2;
  World world(o);
  Status seen[2];
  world.run([&](RankContext& ctx) -> Status {
    SHARDLAB_ASSIGN_OR_RETURN(Tensor t, ctx.device.zeros({4}, DType::kF32, MemoryCategory::kOther, "t"));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor big, ctx.device.zeros({8}, DType::kF32, MemoryCategory::kOther, "big"));
    seen[ctx.rank] = ctx.rank == 0 ? ctx.comm.all_reduce(t, ReduceOp::kSum)->wait(kNanosPerSecond)
                                   : ctx.comm.all_gather_into(big, t)->wait(kNanosPerSecond);
    return Status::ok();
  });
  for (const Status& s : seen) {
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.to_string();
    EXPECT_NE(s.message().find("all_reduce #0"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("all_gather #0"), std::string::npos) << s.message();
  }
}

TEST(World, ARankThatThrowsIsReportedAndTheOthersDoNotHang) {
  WorldOptions o;
  o.world_size = 3;
  World world(o);
  const auto results = world.run([&](RankContext& ctx) -> Status {
    if (ctx.rank == 2) SHARDLAB_CHECK_EQ(ctx.rank, 0);  // a bug on rank 2
    return ctx.comm.barrier()->wait(5 * kNanosPerSecond);
  });
  EXPECT_EQ(results[2].status.code(), StatusCode::kInternal);
  EXPECT_NE(results[2].status.message().find("ctx.rank == 0 (2 vs 0)"), std::string::npos)
      << results[2].status.message();
  EXPECT_EQ(results[0].status.code(), StatusCode::kTimeout);
  EXPECT_EQ(results[1].status.code(), StatusCode::kTimeout);
}

// Runs a kMaxNumericsRanks world under an address-space limit that fits ~15 thread stacks
// and exits 3 when no body ran and every rank reports UNAVAILABLE naming the failed thread.
[[noreturn]] void run_world_with_few_threads() {
  long pages = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld", &pages) != 1) pages = 0;
    std::fclose(f);
  }
  const rlim_t cap = static_cast<rlim_t>(pages) * static_cast<rlim_t>(sysconf(_SC_PAGE_SIZE)) + (rlim_t{128} << 20);
  rlimit limit;
  limit.rlim_cur = limit.rlim_max = cap;
  if (pages == 0 || setrlimit(RLIMIT_AS, &limit) != 0) std::_Exit(10);
  WorldOptions o;
  o.world_size = kMaxNumericsRanks;
  World world(o);
  std::atomic<int> bodies{0};
  const auto results = world.run([&](RankContext&) {
    ++bodies;
    return Status::ok();
  });
  int unavailable = 0;
  for (const auto& r : results) {
    unavailable += r.status.code() == StatusCode::kUnavailable &&
                   r.status.message().find("could not start a thread for simulated rank") != std::string::npos;
  }
  std::_Exit(bodies == 0 && unavailable == kMaxNumericsRanks ? 3 : 1);
}

// NOTE [Numerics world size]: when the host refuses a thread, no rank body runs — a
// partial world would wait forever for the missing ranks — and every rank reports
// UNAVAILABLE naming the rank whose thread failed, instead of std::terminate from the
// joinable threads left behind.
TEST(World, AThreadTheHostRefusesIsUnavailableOnEveryRankAndNoBodyRuns) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "an address-space limit breaks the sanitizers' shadow memory";
#else
  EXPECT_EXIT(run_world_with_few_threads(), ::testing::ExitedWithCode(3), "");
#endif
}

TEST(World, OutOfMemoryNamesTheSimDeviceAndTheBreakdown) {
  WorldOptions o;
  o.world_size = 1;
  o.device.capacity_bytes = 1 << 20;
  World world(o);
  const auto results = world.run([&](RankContext& ctx) -> Status {
    SHARDLAB_ASSIGN_OR_RETURN(Tensor p, ctx.device.empty({100000}, DType::kF32, MemoryCategory::kParameters, "w"));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor g, ctx.device.empty({200000}, DType::kF32, MemoryCategory::kGradients, "g"));
    return Status::ok();
  });
  const Status& s = results[0].status;
  EXPECT_EQ(s.code(), StatusCode::kOutOfMemory);
  EXPECT_NE(s.message().find("sim:0"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("parameters 390.62 KiB"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("'g' (gradients)"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace shardlab::sim
