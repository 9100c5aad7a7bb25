// Tests for Status, Result<T>, the propagation macros and SHARDLAB_CHECK.
#include "runtime/core/status.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/core/check.h"

namespace shardlab {
namespace {

using ::testing::HasSubstr;

const std::vector<StatusCode> kErrorCodes = {
    StatusCode::kInvalidArgument,    StatusCode::kOutOfMemory, StatusCode::kTimeout,  StatusCode::kUnavailable,
    StatusCode::kFailedPrecondition, StatusCode::kDataLoss,    StatusCode::kInternal,
};

TEST(StatusTest, DefaultIsOk) {
  const Status s;
  EXPECT_TRUE(s.is_ok());
  EXPECT_EQ(s.code(), StatusCode::kOk);
  EXPECT_EQ(s.message(), "");
  EXPECT_EQ(s.to_string(), "OK");
  EXPECT_EQ(s.exit_code(), 0);
  EXPECT_TRUE(Status::ok().is_ok());
}

TEST(StatusTest, FactoriesSetCodeAndMessage) {
  struct Case {
    Status status;
    StatusCode code;
    const char* name;
  };
  const Case cases[] = {
      {Status::invalid_argument("m"), StatusCode::kInvalidArgument, "INVALID_ARGUMENT"},
      {Status::out_of_memory("m"), StatusCode::kOutOfMemory, "OUT_OF_MEMORY"},
      {Status::timeout("m"), StatusCode::kTimeout, "TIMEOUT"},
      {Status::unavailable("m"), StatusCode::kUnavailable, "UNAVAILABLE"},
      {Status::failed_precondition("m"), StatusCode::kFailedPrecondition, "FAILED_PRECONDITION"},
      {Status::data_loss("m"), StatusCode::kDataLoss, "DATA_LOSS"},
      {Status::internal("m"), StatusCode::kInternal, "INTERNAL"},
  };
  for (const Case& c : cases) {
    EXPECT_FALSE(c.status.is_ok()) << c.name;
    EXPECT_EQ(c.status.code(), c.code) << c.name;
    EXPECT_EQ(c.status.message(), "m") << c.name;
    EXPECT_STREQ(status_code_name(c.code), c.name);
    EXPECT_EQ(c.status.to_string(), std::string(c.name) + ": m");
  }
  EXPECT_STREQ(status_code_name(StatusCode::kOk), "OK");
}

TEST(StatusTest, ExitCodeIsTwoForBadInputAndThreeForRuntimeFailures) {
  EXPECT_EQ(Status::ok().exit_code(), 0);
  for (StatusCode code : kErrorCodes) {
    const Status s(code, "x");
    EXPECT_EQ(s.exit_code(), code == StatusCode::kInvalidArgument ? 2 : 3) << status_code_name(code);
  }
}

TEST(StatusTest, WithContextPrefixesMessageAndKeepsCode) {
  const Status s = Status::timeout("all_gather did not finish").with_context("rank 3 step 7");
  EXPECT_EQ(s.code(), StatusCode::kTimeout);
  EXPECT_EQ(s.message(), "rank 3 step 7: all_gather did not finish");
  EXPECT_EQ(s.to_string(), "TIMEOUT: rank 3 step 7: all_gather did not finish");
  // Nested contexts read outermost first.
  EXPECT_EQ(s.with_context("run").message(), "run: rank 3 step 7: all_gather did not finish");
}

TEST(StatusTest, WithContextOnOkStaysOk) {
  const Status s = Status::ok().with_context("ignored");
  EXPECT_TRUE(s.is_ok());
  EXPECT_EQ(s.message(), "");
}

TEST(ResultTest, HoldsValue) {
  Result<int> r = 42;
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r.value(), 42);
  EXPECT_EQ(*r, 42);
  EXPECT_TRUE(r.status().is_ok());
  *r = 7;
  EXPECT_EQ(r.value(), 7);
}

TEST(ResultTest, HoldsError) {
  Result<std::string> r = Status::unavailable("peer 2 is gone");
  EXPECT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(r.status().message(), "peer 2 is gone");
}

TEST(ResultTest, OkStatusWithoutValueBecomesInternalError) {
  Result<int> r = Status::ok();
  EXPECT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
  EXPECT_THAT(r.status().message(), HasSubstr("without a value"));
}

TEST(ResultTest, ArrowAndMoveOnlyValues) {
  Result<std::string> r = std::string("abc");
  EXPECT_EQ(r->size(), 3u);
  Result<std::unique_ptr<int>> p = std::make_unique<int>(5);
  std::unique_ptr<int> taken = std::move(p).value();
  ASSERT_NE(taken, nullptr);
  EXPECT_EQ(*taken, 5);
}

TEST(ResultDeathTest, ValueOfErrorAbortsWithTheStatus) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const Result<int> r = Status::invalid_argument("boom");
  EXPECT_DEATH((void)r.value(), "value\\(\\) called on an error Result: INVALID_ARGUMENT: boom");
}

// ---- SHARDLAB_RETURN_IF_ERROR / SHARDLAB_ASSIGN_OR_RETURN -----------------------------

Status step(bool fail, int* calls) {
  ++*calls;
  return fail ? Status::data_loss("step " + std::to_string(*calls) + " failed") : Status::ok();
}

Status two_steps(bool fail_first, bool fail_second, int* calls) {
  SHARDLAB_RETURN_IF_ERROR(step(fail_first, calls));
  SHARDLAB_RETURN_IF_ERROR(step(fail_second, calls));
  return Status::ok();
}

TEST(MacroTest, ReturnIfErrorStopsAtFirstError) {
  int calls = 0;
  EXPECT_TRUE(two_steps(false, false, &calls).is_ok());
  EXPECT_EQ(calls, 2);

  calls = 0;
  const Status s = two_steps(true, false, &calls);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_EQ(s.message(), "step 1 failed");
  EXPECT_EQ(calls, 1);  // the second step never ran

  calls = 0;
  EXPECT_EQ(two_steps(false, true, &calls).message(), "step 2 failed");
  EXPECT_EQ(calls, 2);
}

Result<int> parse_positive(int v) {
  if (v <= 0) return Status::invalid_argument("value " + std::to_string(v) + " must be > 0");
  return v;
}

Result<int> sum_of_two(int a, int b, int* reached_end) {
  SHARDLAB_ASSIGN_OR_RETURN(int x, parse_positive(a));
  int y = 0;
  SHARDLAB_ASSIGN_OR_RETURN(y, parse_positive(b));  // assigns into an existing variable
  ++*reached_end;
  return x + y;
}

TEST(MacroTest, AssignOrReturnAssignsOrPropagates) {
  int reached = 0;
  Result<int> ok = sum_of_two(2, 3, &reached);
  ASSERT_TRUE(ok.is_ok());
  EXPECT_EQ(*ok, 5);
  EXPECT_EQ(reached, 1);

  Result<int> bad_first = sum_of_two(-1, 3, &reached);
  EXPECT_EQ(bad_first.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad_first.status().message(), "value -1 must be > 0");

  Result<int> bad_second = sum_of_two(1, 0, &reached);
  EXPECT_EQ(bad_second.status().message(), "value 0 must be > 0");
  EXPECT_EQ(reached, 1);  // neither error reached the end
}

Result<std::unique_ptr<int>> make_box(bool fail) {
  if (fail) return Status::out_of_memory("no box");
  return std::make_unique<int>(9);
}

Status unbox(bool fail, int* out) {
  SHARDLAB_ASSIGN_OR_RETURN(std::unique_ptr<int> box, make_box(fail));
  *out = *box;
  return Status::ok();
}

TEST(MacroTest, AssignOrReturnMovesMoveOnlyValues) {
  int out = 0;
  EXPECT_TRUE(unbox(false, &out).is_ok());
  EXPECT_EQ(out, 9);
  EXPECT_EQ(unbox(true, &out).code(), StatusCode::kOutOfMemory);
}

// ---- SHARDLAB_CHECK ------------------------------------------------------------------

std::string check_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const CheckFailure& e) {
    return e.what();
  }
  return "<no CheckFailure>";
}

TEST(CheckTest, PassingChecksDoNothing) {
  EXPECT_NO_THROW(SHARDLAB_CHECK(1 + 1 == 2));
  EXPECT_NO_THROW(SHARDLAB_CHECK_EQ(3, 3));
  EXPECT_NO_THROW(SHARDLAB_CHECK_NE(3, 4));
  EXPECT_NO_THROW(SHARDLAB_CHECK_LT(3, 4));
  EXPECT_NO_THROW(SHARDLAB_CHECK_LE(4, 4));
  EXPECT_NO_THROW(SHARDLAB_CHECK_GT(5, 4));
  EXPECT_NO_THROW(SHARDLAB_CHECK_GE(5, 5));
  EXPECT_NO_THROW(SHARDLAB_CHECK_OK(Status::ok()));
}

TEST(CheckTest, CheckEqThrowsWithBothOperands) {
  const long shard_size = 12345;
  const long expected = 67890;
  const std::string msg = check_message([&] { SHARDLAB_CHECK_EQ(shard_size, expected); });
  EXPECT_THAT(msg, HasSubstr("CHECK failed"));
  EXPECT_THAT(msg, HasSubstr("shard_size == expected"));
  EXPECT_THAT(msg, HasSubstr("12345"));
  EXPECT_THAT(msg, HasSubstr("67890"));
  EXPECT_THAT(msg, HasSubstr("status_test.cc:"));
  EXPECT_THROW(SHARDLAB_CHECK_EQ(1, 2), CheckFailure);
  // CheckFailure is a logic_error, so generic handlers can catch it.
  EXPECT_THROW(SHARDLAB_CHECK_EQ(1, 2), std::logic_error);
}

TEST(CheckTest, OtherComparisonsPrintOperands) {
  EXPECT_THAT(check_message([] { SHARDLAB_CHECK_LT(9, 4); }), HasSubstr("9 < 4 (9 vs 4)"));
  EXPECT_THAT(check_message([] { SHARDLAB_CHECK_GE(std::string("ab"), std::string("b")); }), HasSubstr("(ab vs b)"));
  EXPECT_THAT(check_message([] { SHARDLAB_CHECK(2 < 1); }), HasSubstr("CHECK failed: 2 < 1"));
}

TEST(CheckTest, OperandsAreEvaluatedOnce) {
  int evaluations = 0;
  auto next = [&] { return ++evaluations; };
  EXPECT_THROW(SHARDLAB_CHECK_EQ(next(), 100), CheckFailure);
  EXPECT_EQ(evaluations, 1);
}

TEST(CheckTest, CheckOkPrintsTheStatus) {
  const std::string msg = check_message([] { SHARDLAB_CHECK_OK(Status::timeout("barrier")); });
  EXPECT_THAT(msg, HasSubstr("TIMEOUT: barrier"));
}

}  // namespace
}  // namespace shardlab
