#include "sim/faults/faults.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

#include "sim/engine/world.h"
#include "testing/status_matchers.h"

using shardlab::testlib::IsOk;

namespace shardlab::sim {
namespace {

using runtime::comm::ReduceOp;
using ::testing::HasSubstr;

constexpr int kWorld = 4;
constexpr int kSteps = 3;
constexpr std::int64_t kN = 64;

struct Outcome {
  std::vector<Status> status;
  std::vector<Nanos> end;
  std::vector<std::vector<float>> last;  // each rank's last all-gathered buffer
};

// Each "step": an all-gather of kN floats per rank (one compute op between steps), then
// an all-reduce; the rank's values are a function of (rank, step).
Outcome run(const FaultPlan& plan, std::uint64_t perturb = 0, int world = kWorld) {
  WorldOptions wo;
  wo.world_size = world;
  wo.perturb_seed = perturb;
  World w(wo);
  auto shared_plan = std::make_shared<const FaultPlan>(plan);
  Outcome out;
  out.last.resize(static_cast<std::size_t>(world));
  const auto results = w.run([&](RankContext& ctx) -> Status {
    FaultInjector comm(&ctx.comm, shared_plan, ctx.rank, &ctx.clock);
    SHARDLAB_ASSIGN_OR_RETURN(Tensor in, ctx.device.empty({kN}, DType::kF32, MemoryCategory::kOther, "in"));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor all, ctx.device.empty({kN * world}, DType::kF32, MemoryCategory::kOther, "all"));
    for (int step = 0; step < kSteps; ++step) {
      SHARDLAB_RETURN_IF_ERROR(comm.before_step(step));
      for (std::int64_t i = 0; i < kN; ++i) in.data<float>()[i] = static_cast<float>(ctx.rank * 1000 + step * 100 + i);
      SHARDLAB_RETURN_IF_ERROR(ctx.device.scale(in, 1.0f));  // some compute time
      SHARDLAB_RETURN_IF_ERROR(comm.all_gather_into(all, in)->wait(runtime::comm::kDefaultTimeout));
      out.last[static_cast<std::size_t>(ctx.rank)].assign(all.data<float>(), all.data<float>() + kN * world);
      SHARDLAB_RETURN_IF_ERROR(comm.all_reduce(in, ReduceOp::kSum)->wait(runtime::comm::kDefaultTimeout));
    }
    return Status::ok();
  });
  for (const auto& r : results) {
    out.status.push_back(r.status);
    out.end.push_back(r.end_time);
  }
  return out;
}

Fault crash_at_step(int rank, int step) {
  Fault f;
  f.kind = FaultKind::kCrash;
  f.rank = rank;
  f.step = step;
  f.origin = "s.yaml:9:5";
  return f;
}

TEST(Faults, KindsParseWithTheIssueNamesAndTheOldAlias) {
  EXPECT_EQ(*parse_fault_kind("crash"), FaultKind::kCrash);
  EXPECT_EQ(*parse_fault_kind("hang"), FaultKind::kHang);
  EXPECT_EQ(*parse_fault_kind("link_degrade"), FaultKind::kLinkDegrade);
  EXPECT_EQ(*parse_fault_kind("link_degraded"), FaultKind::kLinkDegrade);
  EXPECT_THAT(parse_fault_kind("meteor").status().message(), HasSubstr("allowed: crash, hang, straggler"));
}

TEST(Faults, NoFaultsChangeNothing) {
  const Outcome plain = run(FaultPlan{});
  for (const auto& s : plain.status) EXPECT_THAT(s, IsOk());
  for (int r = 0; r < kWorld; ++r) {
    for (int q = 0; q < kWorld; ++q)
      EXPECT_EQ(plain.last[static_cast<std::size_t>(r)][static_cast<std::size_t>(q * kN)], q * 1000 + 200);
  }
}

TEST(Faults, CrashAtAStepEndsEveryRankWithAnErrorNamingRankStepOperationAndFault) {
  FaultPlan plan;
  plan.faults.push_back(crash_at_step(2, 1));
  const Outcome o = run(plan);
  EXPECT_EQ(o.status[2].code(), StatusCode::kUnavailable);
  EXPECT_THAT(o.status[2].message(), HasSubstr("rank 2, step 2: crashed at the top of step 2"));
  EXPECT_THAT(o.status[2].message(), HasSubstr("crash of rank 2 at step 2 (s.yaml:9:5)"));
  for (int r : {0, 1, 3}) {
    const Status& s = o.status[static_cast<std::size_t>(r)];
    EXPECT_EQ(s.code(), StatusCode::kTimeout) << s.to_string();
    EXPECT_THAT(s.message(), HasSubstr("rank " + std::to_string(r) + ", step 2: all_gather in group 'world'"));
    EXPECT_THAT(s.message(), HasSubstr("never arrived (group ranks): 2"));
    EXPECT_THAT(s.message(), HasSubstr("[injected faults: crash of rank 2 at step 2 (s.yaml:9:5)]"));
    EXPECT_EQ(s.exit_code(), 3);
  }
  // The same faulty run replays identically whatever the host scheduling.
  for (std::uint64_t seed : {1u, 2u}) {
    const Outcome again = run(plan, seed);
    for (int r = 0; r < kWorld; ++r) {
      EXPECT_EQ(again.status[static_cast<std::size_t>(r)].to_string(),
                o.status[static_cast<std::size_t>(r)].to_string());
      EXPECT_EQ(again.end[static_cast<std::size_t>(r)], o.end[static_cast<std::size_t>(r)]);
    }
  }
}

TEST(Faults, CrashAtATimeHappensAtTheFirstCollectiveFromThen) {
  const Outcome plain = run(FaultPlan{});
  FaultPlan plan;
  Fault f;
  f.kind = FaultKind::kCrash;
  f.rank = 1;
  f.time = plain.end[1] / 2;  // somewhere in the middle of the run
  plan.faults.push_back(f);
  const Outcome o = run(plan);
  EXPECT_THAT(o.status[1].message(), HasSubstr("crashed at "));
  EXPECT_THAT(o.status[1].message(), HasSubstr(" before its "));
  for (int r : {0, 2, 3}) EXPECT_EQ(o.status[static_cast<std::size_t>(r)].code(), StatusCode::kTimeout);
}

TEST(Faults, AHungRankStopsAnsweringAndTheRunStillEnds) {
  FaultPlan plan;
  Fault f = crash_at_step(3, 2);
  f.kind = FaultKind::kHang;
  plan.faults.push_back(f);
  const Outcome o = run(plan);
  EXPECT_THAT(o.status[3].message(), HasSubstr("rank 3, step 3: hung at the top of step 3"));
  EXPECT_THAT(o.status[3].message(), HasSubstr("released when the other ranks were done"));
  for (int r : {0, 1, 2}) {
    EXPECT_EQ(o.status[static_cast<std::size_t>(r)].code(), StatusCode::kTimeout);
    EXPECT_THAT(o.status[static_cast<std::size_t>(r)].message(), HasSubstr("hang of rank 3 at step 3"));
  }
  // The survivors gave up one collective timeout after they blocked, not later.
  const Outcome plain = run(FaultPlan{});
  for (int r : {0, 1, 2})
    EXPECT_LE(o.end[static_cast<std::size_t>(r)],
              plain.end[static_cast<std::size_t>(r)] + runtime::comm::kDefaultTimeout);
}

TEST(Faults, CorruptFlipsTheTopExponentBitOfOneReceivedElementReproducibly) {
  const Outcome plain = run(FaultPlan{});
  FaultPlan plan;
  plan.seed = 11;
  Fault f;
  f.kind = FaultKind::kCorrupt;
  f.rank = 1;
  f.collective = 4;  // step 2's all-gather (collectives: ag, ar, ag, ar, ag, ar)
  plan.faults.push_back(f);
  const Outcome o = run(plan);
  for (const auto& s : o.status) EXPECT_THAT(s, IsOk());
  int differing = 0;
  for (std::size_t i = 0; i < plain.last[1].size(); ++i) {
    std::uint32_t a, b;
    std::memcpy(&a, &plain.last[1][i], 4);
    std::memcpy(&b, &o.last[1][i], 4);
    if (a != b) {
      ++differing;
      EXPECT_EQ(a ^ b, 1u << 30) << "element " << i;
      EXPECT_TRUE(i < kN || i >= 2 * kN) << "rank 1's own chunk must not be corrupted (element " << i << ")";
    }
  }
  EXPECT_EQ(differing, 1);
  for (int r : {0, 2, 3}) EXPECT_EQ(o.last[static_cast<std::size_t>(r)], plain.last[static_cast<std::size_t>(r)]);
  const Outcome again = run(plan, 5);
  EXPECT_EQ(0, std::memcmp(again.last[1].data(), o.last[1].data(), o.last[1].size() * sizeof(float)));
}

TEST(Faults, CorruptWithTheIntegrityCheckIsDetectedAndEndsTheRun) {
  FaultPlan plan;
  Fault f;
  f.kind = FaultKind::kCorrupt;
  f.rank = 0;
  f.collective = 1;
  f.integrity_check = true;
  f.origin = "s.yaml:4:3";
  plan.faults.push_back(f);
  const Outcome o = run(plan);
  EXPECT_EQ(o.status[0].code(), StatusCode::kDataLoss);
  EXPECT_THAT(o.status[0].message(),
              HasSubstr("rank 0, step 1: all_reduce in group 'world' (the rank's collective #1)"));
  EXPECT_THAT(o.status[0].message(), HasSubstr("failed its integrity check"));
  EXPECT_THAT(o.status[0].message(), HasSubstr("s.yaml:4:3"));
  for (int r : {1, 2, 3}) EXPECT_EQ(o.status[static_cast<std::size_t>(r)].code(), StatusCode::kTimeout);
}

TEST(Faults, StragglerSlowdownIsTheProductOfTheRanksFactors) {
  FaultPlan plan;
  Fault a;
  a.kind = FaultKind::kStraggler;
  a.rank = 2;
  a.factor = 1.5;
  Fault b = a;
  b.factor = 2.0;
  plan.faults = {a, b};
  EXPECT_DOUBLE_EQ(plan.slowdown(2), 3.0);
  EXPECT_DOUBLE_EQ(plan.slowdown(1), 1.0);
  EXPECT_FALSE(plan.has_rank_faults(2));
  EXPECT_THAT(plan.describe(), HasSubstr("straggler rank 2 (1.5× slower)"));
}

}  // namespace
}  // namespace shardlab::sim
