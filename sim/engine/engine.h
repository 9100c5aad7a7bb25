// Engine: a discrete-event engine. It knows only events and time (SimGrid's split):
// models schedule callbacks, the engine runs them in (time, insertion sequence) order.
//
// Time is integer nanoseconds and never goes backwards; two events at the same time run
// in the order they were scheduled, so a run is a pure function of what was scheduled.
//
// Thread safety: none; one engine is driven by one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <queue>
#include <vector>

#include "runtime/core/clock.h"

namespace shardlab::sim {

class Engine {
 public:
  using Callback = std::function<void()>;

  // Schedules `fn` at absolute time `t` (>= now(); a CHECK otherwise).
  void schedule_at(Nanos t, Callback fn);
  void schedule_after(Nanos delay, Callback fn) { schedule_at(now_ + delay, std::move(fn)); }

  // Runs the earliest event; false when none is pending.
  bool step();
  // Runs events until none is pending. Returns the number of events run.
  std::uint64_t run();

  Nanos now() const { return now_; }
  std::size_t pending() const { return queue_.size(); }
  std::optional<Nanos> next_time() const;
  std::uint64_t events_run() const { return events_run_; }

 private:
  struct Event {
    Nanos time;
    std::uint64_t seq;
    Callback fn;
  };
  struct Later {
    bool operator()(const Event& a, const Event& b) const { return a.time != b.time ? a.time > b.time : a.seq > b.seq; }
  };
  std::priority_queue<Event, std::vector<Event>, Later> queue_;
  Nanos now_ = 0;
  std::uint64_t next_seq_ = 0;
  std::uint64_t events_run_ = 0;
};

}  // namespace shardlab::sim
