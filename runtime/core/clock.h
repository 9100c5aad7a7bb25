// Clock: the only source of time the runtime reads (timeouts included).
//
// Time is integer nanoseconds. The simulator injects a virtual clock (sim/engine/virtual_clock.h);
// real backends inject SteadyClock. Nothing outside steady_clock.cc reads a wall clock.
#pragma once

#include <cstdint>

namespace shardlab {

using Nanos = std::int64_t;
constexpr Nanos kNanosPerMicro = 1'000;
constexpr Nanos kNanosPerMilli = 1'000'000;
constexpr Nanos kNanosPerSecond = 1'000'000'000;

class Clock {
 public:
  virtual ~Clock() = default;
  // Monotonic time in nanoseconds since an arbitrary origin.
  virtual Nanos now() const = 0;
};

// std::chrono::steady_clock. Thread-safe.
class SteadyClock final : public Clock {
 public:
  Nanos now() const override;
};

}  // namespace shardlab
