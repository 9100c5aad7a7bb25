// SHARDLAB_CHECK: invariant checks that are on in every build type.
//
// A failed check is a bug in shardlab, not bad input: it throws CheckFailure with a
// message "file:line: CHECK failed: a == b (lhs vs rhs)" that prints both operands.
// The CLI turns an escaped CheckFailure into "internal error" (exit 70); tests can
// EXPECT_THROW it. Bad input must be reported through Status instead (status.h).
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace shardlab {

class CheckFailure : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

namespace detail {
[[noreturn]] void check_failed(const char* file, int line, const std::string& what);

template <typename A, typename B>
[[noreturn]] void check_op_failed(const char* file, int line, const char* expr, const A& a, const B& b) {
  std::ostringstream os;
  os << expr << " (" << a << " vs " << b << ")";
  check_failed(file, line, os.str());
}
}  // namespace detail
}  // namespace shardlab

#define SHARDLAB_CHECK(cond)                                                  \
  do {                                                                        \
    if (!(cond)) ::shardlab::detail::check_failed(__FILE__, __LINE__, #cond); \
  } while (0)

#define SHARDLAB_CHECK_OP(op, a, b)                                                                         \
  do {                                                                                                      \
    const auto& shardlab_a_ = (a);                                                                          \
    const auto& shardlab_b_ = (b);                                                                          \
    if (!(shardlab_a_ op shardlab_b_))                                                                      \
      ::shardlab::detail::check_op_failed(__FILE__, __LINE__, #a " " #op " " #b, shardlab_a_, shardlab_b_); \
  } while (0)

#define SHARDLAB_CHECK_EQ(a, b) SHARDLAB_CHECK_OP(==, a, b)
#define SHARDLAB_CHECK_NE(a, b) SHARDLAB_CHECK_OP(!=, a, b)
#define SHARDLAB_CHECK_LT(a, b) SHARDLAB_CHECK_OP(<, a, b)
#define SHARDLAB_CHECK_LE(a, b) SHARDLAB_CHECK_OP(<=, a, b)
#define SHARDLAB_CHECK_GT(a, b) SHARDLAB_CHECK_OP(>, a, b)
#define SHARDLAB_CHECK_GE(a, b) SHARDLAB_CHECK_OP(>=, a, b)
// Checks that a Status is ok; prints it otherwise.
#define SHARDLAB_CHECK_OK(expr)                                                                                  \
  do {                                                                                                           \
    ::shardlab::Status shardlab_s_ = (expr);                                                                     \
    if (!shardlab_s_.is_ok())                                                                                    \
      ::shardlab::detail::check_failed(__FILE__, __LINE__, std::string(#expr " is ") + shardlab_s_.to_string()); \
  } while (0)
