// VirtualClock: a rank's simulated time, in integer nanoseconds.
//
// Owned by one rank; only that rank's thread advances it (its device ops and its
// Work::wait). Time never goes backwards. See NOTE [Determinism] in sim/engine/world.h.
#pragma once

#include <algorithm>

#include "runtime/core/check.h"
#include "runtime/core/clock.h"

namespace shardlab::sim {

class VirtualClock final : public Clock {
 public:
  Nanos now() const override { return now_; }
  void advance_to(Nanos t) { now_ = std::max(now_, t); }
  void advance_by(Nanos d) {
    SHARDLAB_CHECK_GE(d, 0);
    now_ += d;
  }

 private:
  Nanos now_ = 0;
};

}  // namespace shardlab::sim
