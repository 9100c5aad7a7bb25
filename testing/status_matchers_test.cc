// The Status matchers: what they accept, what they reject, and what a failure prints.
#include "testing/status_matchers.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace shardlab {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testlib::IsOk;
using testlib::StatusIs;

// What `matcher` says about `value` when it rejects it.
template <typename M, typename V>
std::string explain(const M& matcher, const V& value) {
  ::testing::StringMatchResultListener listener;
  EXPECT_FALSE(::testing::ExplainMatchResult(matcher, value, &listener));
  return listener.str();
}

TEST(StatusMatchersTest, IsOkTakesStatusesAndResults) {
  EXPECT_THAT(Status::ok(), IsOk());
  EXPECT_THAT(Result<int>(3), IsOk());
  EXPECT_THAT(Status::timeout("late"), Not(IsOk()));
  EXPECT_THAT(Result<int>(Status::data_loss("bad crc")), Not(IsOk()));
}

TEST(StatusMatchersTest, IsOkNamesTheStatusItGot) {
  EXPECT_THAT(explain(IsOk(), Status::invalid_argument("file.yaml:3:7: world.nodes: must be >= 1")),
              HasSubstr("file.yaml:3:7: world.nodes: must be >= 1"));
  EXPECT_THAT(explain(IsOk(), Result<int>(Status::unavailable("rank 4 is gone"))), HasSubstr("rank 4 is gone"));
}

TEST(StatusMatchersTest, StatusIsChecksTheCodeAndTheMessage) {
  const Status s = Status::invalid_argument("train.steps: must be >= 1");
  EXPECT_THAT(s, StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(s, StatusIs(StatusCode::kInvalidArgument, HasSubstr("train.steps")));
  EXPECT_THAT(s, Not(StatusIs(StatusCode::kTimeout)));
  EXPECT_THAT(s, Not(StatusIs(StatusCode::kInvalidArgument, HasSubstr("world"))));
  EXPECT_THAT(Result<int>(7), StatusIs(StatusCode::kOk));
  EXPECT_THAT(explain(StatusIs(StatusCode::kTimeout), s), HasSubstr("train.steps: must be >= 1"));
}

}  // namespace
}  // namespace shardlab
