#include "runtime/core/check.h"

namespace shardlab::detail {

void check_failed(const char* file, int line, const std::string& what) {
  throw CheckFailure(std::string(file) + ":" + std::to_string(line) + ": CHECK failed: " + what);
}

}  // namespace shardlab::detail
