#include "sim/engine/engine.h"

#include "runtime/core/check.h"

namespace shardlab::sim {

void Engine::schedule_at(Nanos t, Callback fn) {
  SHARDLAB_CHECK_GE(t, now_);
  queue_.push(Event{t, next_seq_++, std::move(fn)});
}

bool Engine::step() {
  if (queue_.empty()) return false;
  Event e = queue_.top();
  queue_.pop();
  now_ = e.time;
  ++events_run_;
  e.fn();
  return true;
}

std::uint64_t Engine::run() {
  std::uint64_t n = 0;
  while (step()) ++n;
  return n;
}

std::optional<Nanos> Engine::next_time() const {
  if (queue_.empty()) return std::nullopt;
  return queue_.top().time;
}

}  // namespace shardlab::sim
