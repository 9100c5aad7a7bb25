#include <chrono>

#include "runtime/core/clock.h"

namespace shardlab {

// The one place in the runtime that reads a real clock (CONTRIBUTING.md, "Seams").
Nanos SteadyClock::now() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace shardlab
