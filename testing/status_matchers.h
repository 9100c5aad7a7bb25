// gMock matchers for Status and Result<T>, so a failing check prints the status it got:
//
//   EXPECT_THAT(load(path), IsOk());
//   EXPECT_THAT(parse(text), StatusIs(StatusCode::kInvalidArgument, HasSubstr("line 3")));
//
// Both take a Status or any Result<T>; a Result that holds a value is an ok Status. They
// live in shardlab::testlib (a test says `using shardlab::testlib::IsOk;`), not in a
// namespace named testing, which would hide gtest's ::testing inside namespace shardlab.
#pragma once

#include <gmock/gmock.h>

#include <ostream>
#include <string>

#include "runtime/core/status.h"

namespace shardlab {

// How gtest prints a Status or Result the matchers below rejected.
inline void PrintTo(const Status& s, std::ostream* os) { *os << s.to_string(); }
template <typename T>
void PrintTo(const Result<T>& r, std::ostream* os) {
  *os << (r.is_ok() ? std::string("a value") : r.status().to_string());
}

namespace testlib {

inline const Status& status_of(const Status& s) { return s; }
template <typename T>
Status status_of(const Result<T>& r) {
  return r.status();
}

// Matches an ok Status or a Result holding a value.
MATCHER(IsOk, negation ? "is not ok" : "is ok") {
  const Status s = status_of(arg);
  if (!s.is_ok()) *result_listener << "whose status is " << s.to_string();
  return s.is_ok();
}

// Matches a Status (or Result) with `code` whose message matches `message` (a string
// matcher: HasSubstr(...), StartsWith(...), Eq(...); any message when left out).
MATCHER_P2(StatusIs, code, message,
           std::string(negation ? "is not " : "is ") + status_code_name(code) + " with a message that " +
               ::testing::DescribeMatcher<std::string>(message, negation)) {
  const Status s = status_of(arg);
  *result_listener << "whose status is " << s.to_string();
  return s.code() == code && ::testing::Matches(message)(s.message());
}

MATCHER_P(StatusIs, code, std::string(negation ? "is not " : "is ") + status_code_name(code)) {
  const Status s = status_of(arg);
  *result_listener << "whose status is " << s.to_string();
  return s.code() == code;
}

}  // namespace testlib
}  // namespace shardlab
