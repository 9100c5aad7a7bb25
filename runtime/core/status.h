// Status and Result<T>: how expected failures travel through shardlab.
//
// Every fallible operation returns a Status (or a Result<T> holding a value or a
// Status). Both are [[nodiscard]]. Broken invariants are not Statuses: they use
// SHARDLAB_CHECK (check.h). Messages name the thing, the value and what was expected.
//
// Codes map onto the CLI's exit codes (CONTRIBUTING.md, "Errors and exit codes"): bad input (kInvalidArgument)
// is exit 2, every runtime failure (OOM, timeout, peer loss, corruption) is exit 3.
//
// Thread safety: values; safe to copy between threads.
#pragma once

#include <cstdlib>
#include <string>
#include <utility>
#include <variant>

namespace shardlab {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // bad input: scenario, flags, shapes, files (exit 2)
  kOutOfMemory,         // a device ran out of capacity (exit 3)
  kTimeout,             // a Work or wait exceeded its deadline on the injected Clock (exit 3)
  kUnavailable,         // a peer or device is gone / not present (exit 3)
  kFailedPrecondition,  // the system is not in a state where the call makes sense (exit 3)
  kDataLoss,            // corruption detected (exit 3)
  kInternal,            // a backend reported something unexpected (exit 3)
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // ok
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return Status(); }
  static Status invalid_argument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
  static Status out_of_memory(std::string m) { return {StatusCode::kOutOfMemory, std::move(m)}; }
  static Status timeout(std::string m) { return {StatusCode::kTimeout, std::move(m)}; }
  static Status unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
  static Status failed_precondition(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
  static Status data_loss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
  static Status internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

  bool is_ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // Returns a copy whose message is "<context>: <message>" (no-op when ok).
  Status with_context(const std::string& context) const;

  // "TIMEOUT: <message>", or "OK".
  std::string to_string() const;

  // The CLI exit code for this status: 0 ok, 2 bad input, 3 runtime failure.
  int exit_code() const;

  // Explicitly drop a status (documents that ignoring it is intended).
  void ignore() const {}

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// Result<T>: a T or a non-ok Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  using value_type = T;
  Result(T value) : v_(std::move(value)) {}        // NOLINT(implicit)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(implicit)
    if (std::get<Status>(v_).is_ok()) v_ = Status::internal("Result constructed from an ok Status without a value");
  }

  bool is_ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return is_ok() ? kOk : std::get<Status>(v_);
  }
  // Precondition: is_ok(). Accessing the value of an error aborts with the status.
  T& value() & {
    assert_ok();
    return std::get<T>(v_);
  }
  const T& value() const& {
    assert_ok();
    return std::get<T>(v_);
  }
  T&& value() && {
    assert_ok();
    return std::get<T>(std::move(v_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  void assert_ok() const;
  std::variant<T, Status> v_;
};

namespace detail {
[[noreturn]] void result_value_of_error(const Status& s);
}

template <typename T>
void Result<T>::assert_ok() const {
  if (!is_ok()) detail::result_value_of_error(std::get<Status>(v_));
}

}  // namespace shardlab

#define SHARDLAB_CONCAT_INNER(a, b) a##b
#define SHARDLAB_CONCAT(a, b) SHARDLAB_CONCAT_INNER(a, b)

// Returns the status from the enclosing function when `expr` is not ok.
#define SHARDLAB_RETURN_IF_ERROR(expr)                      \
  do {                                                      \
    ::shardlab::Status shardlab_status_ = (expr);           \
    if (!shardlab_status_.is_ok()) return shardlab_status_; \
  } while (0)

// `lhs` = value of the Result `expr`, or return its status.
#define SHARDLAB_ASSIGN_OR_RETURN(lhs, expr) \
  SHARDLAB_ASSIGN_OR_RETURN_IMPL(SHARDLAB_CONCAT(shardlab_result_, __LINE__), lhs, expr)
#define SHARDLAB_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                   \
  if (!tmp.is_ok()) return tmp.status();               \
  lhs = std::move(tmp).value()
