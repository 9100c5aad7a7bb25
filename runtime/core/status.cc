#include "runtime/core/status.h"

#include <cstdio>

namespace shardlab {

const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kInvalidArgument: return "INVALID_ARGUMENT";
    case StatusCode::kOutOfMemory: return "OUT_OF_MEMORY";
    case StatusCode::kTimeout: return "TIMEOUT";
    case StatusCode::kUnavailable: return "UNAVAILABLE";
    case StatusCode::kFailedPrecondition: return "FAILED_PRECONDITION";
    case StatusCode::kDataLoss: return "DATA_LOSS";
    case StatusCode::kInternal: return "INTERNAL";
  }
  return "UNKNOWN";
}

Status Status::with_context(const std::string& context) const {
  if (is_ok()) return *this;
  return Status(code_, context + ": " + message_);
}

std::string Status::to_string() const {
  if (is_ok()) return "OK";
  return std::string(status_code_name(code_)) + ": " + message_;
}

int Status::exit_code() const {
  if (is_ok()) return 0;
  return code_ == StatusCode::kInvalidArgument ? 2 : 3;
}

namespace detail {
void result_value_of_error(const Status& s) {
  std::fprintf(stderr, "shardlab: value() called on an error Result: %s\n", s.to_string().c_str());
  std::abort();
}
}  // namespace detail

}  // namespace shardlab
