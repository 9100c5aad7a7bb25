// The simulated-world harness: every rank's value in rank order, the failing rank named,
// and FSDP training gathered per rank.
#include "testing/sim_world.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "testing/status_matchers.h"

namespace shardlab {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testlib::IsOk;
using testlib::StatusIs;

TEST(SimWorld, GathersEveryRanksValueInRankOrder) {
  auto got = testlib::on_sim_ranks(3, [](sim::RankContext& ctx) -> Result<int> {
    EXPECT_EQ(ctx.world_size, 3);
    return ctx.rank * 10;
  });
  ASSERT_THAT(got, IsOk());
  EXPECT_THAT(*got, ElementsAre(0, 10, 20));
}

TEST(SimWorld, NamesTheLowestFailingRankAndKeepsItsCode) {
  auto got = testlib::on_sim_ranks(4, [](sim::RankContext& ctx) -> Result<int> {
    if (ctx.rank >= 2) return Status::data_loss("shard " + std::to_string(ctx.rank) + " missing");
    return ctx.rank;
  });
  EXPECT_THAT(got.status(), StatusIs(StatusCode::kDataLoss, HasSubstr("rank 2: shard 2 missing")));
}

TEST(SimWorld, AllRanksOkIsOkOnlyWhenEveryRankIs) {
  std::vector<sim::RankResult> results(3);
  EXPECT_THAT(testlib::all_ranks_ok(results), IsOk());
  results[1].status = Status::internal("boom");
  EXPECT_THAT(testlib::all_ranks_ok(results), StatusIs(StatusCode::kInternal, HasSubstr("rank 1: boom")));
}

TEST(SimWorld, TrainsFsdpOnEveryRank) {
  runtime::train::FsdpTrainOptions o;
  o.steps = 2;
  o.global_batch = 4;
  sim::WorldOptions w;
  w.world_size = 2;
  auto ranks = testlib::train_fsdp_on_sim(o, w);
  ASSERT_THAT(ranks, IsOk());
  ASSERT_EQ(ranks->size(), 2u);
  // Every rank reports the same global loss per step.
  EXPECT_EQ((*ranks)[0].losses, (*ranks)[1].losses);
  EXPECT_EQ((*ranks)[0].losses.size(), 2u);
}

}  // namespace
}  // namespace shardlab
