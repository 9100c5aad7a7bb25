// The checking decorator, driven by the sim backend.
#include "runtime/comm/checking_communicator.h"

#include <gtest/gtest.h>

#include "sim/engine/world.h"
#include "testing/status_matchers.h"

using shardlab::testlib::IsOk;

namespace shardlab::runtime::comm {
namespace {

using sim::RankContext;
using sim::World;
using sim::WorldOptions;

std::vector<sim::RankResult> run(int world_size, const std::function<Status(RankContext&, Communicator&)>& body) {
  WorldOptions o;
  o.world_size = world_size;
  World world(o);
  return world.run([&](RankContext& ctx) {
    CheckingCommunicator checked(&ctx.comm, kNanosPerSecond);
    return body(ctx, checked);
  });
}

TEST(CheckingCommunicator, AgreeingRanksPassThroughWithCorrectResults) {
  const auto results = run(4, [](RankContext& ctx, Communicator& c) -> Status {
    SHARDLAB_ASSIGN_OR_RETURN(Tensor t, ctx.device.zeros({3}, DType::kF32, MemoryCategory::kOther, "t"));
    t.data<float>()[0] = static_cast<float>(ctx.rank);
    SHARDLAB_RETURN_IF_ERROR(c.all_reduce(t, ReduceOp::kSum)->wait(kNanosPerSecond));
    if (t.data<float>()[0] != 6.0f) return Status::internal("wrong sum");
    SHARDLAB_ASSIGN_OR_RETURN(auto sub, c.split(ctx.rank / 2, ctx.rank));
    SHARDLAB_RETURN_IF_ERROR(sub->barrier()->wait(kNanosPerSecond));
    return c.barrier()->wait(kNanosPerSecond);
  });
  for (const auto& r : results) EXPECT_THAT(r.status, IsOk());
}

TEST(CheckingCommunicator, DivergentCallsAreReportedWithBothRanksCalls) {
  const auto results = run(4, [](RankContext& ctx, Communicator& c) -> Status {
    SHARDLAB_ASSIGN_OR_RETURN(Tensor t, ctx.device.zeros({4096}, DType::kF32, MemoryCategory::kOther, "t"));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor out, ctx.device.zeros({4096 * 4}, DType::kF32, MemoryCategory::kOther, "o"));
    SHARDLAB_RETURN_IF_ERROR(c.barrier()->wait(kNanosPerSecond));
    // Rank 3 takes a different branch: the classic "hang on rank 3 of 4".
    if (ctx.rank == 3) return c.all_gather_into(out, t)->wait(kNanosPerSecond);
    return c.all_reduce(t, ReduceOp::kSum)->wait(kNanosPerSecond);
  });
  for (int r = 0; r < 4; ++r) {
    const Status& s = results[static_cast<std::size_t>(r)].status;
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.to_string();
    EXPECT_NE(s.message().find("collective #1 in group 'world' diverged"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("all_reduce(fp32 × 4096, sum)"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("rank 3 called all_gather(fp32 × 4096)"), std::string::npos) << s.message();
  }
}

TEST(CheckingCommunicator, DifferentCountsDiverge) {
  const auto results = run(2, [](RankContext& ctx, Communicator& c) -> Status {
    SHARDLAB_ASSIGN_OR_RETURN(Tensor t,
                              ctx.device.zeros({ctx.rank == 0 ? 8 : 9}, DType::kBF16, MemoryCategory::kOther, "t"));
    return c.broadcast(t, 0)->wait(kNanosPerSecond);
  });
  EXPECT_NE(results[0].status.message().find(
                "rank 0 called broadcast(bf16 × 8, root 0) but rank 1 called broadcast(bf16 × 9, root 0)"),
            std::string::npos)
      << results[0].status.message();
}

TEST(CheckingCommunicator, AMissingRankIsATimeoutNamingTheWaitingCall) {
  const auto results = run(3, [](RankContext& ctx, Communicator& c) -> Status {
    if (ctx.rank == 2) return Status::ok();
    SHARDLAB_ASSIGN_OR_RETURN(Tensor t, ctx.device.zeros({5}, DType::kF32, MemoryCategory::kOther, "t"));
    return c.all_reduce(t, ReduceOp::kMax)->wait(kNanosPerSecond);
  });
  for (int r = 0; r < 2; ++r) {
    const Status& s = results[static_cast<std::size_t>(r)].status;
    EXPECT_EQ(s.code(), StatusCode::kTimeout) << s.to_string();
    EXPECT_NE(s.message().find("collective #0 all_reduce(fp32 × 5, max)"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("never arrived (group ranks): 2"), std::string::npos) << s.message();
  }
}

}  // namespace
}  // namespace shardlab::runtime::comm
