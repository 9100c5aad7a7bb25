#include "sim/engine/engine.h"

#include <gtest/gtest.h>

#include <vector>

#include "runtime/core/check.h"

namespace shardlab::sim {
namespace {

TEST(Engine, RunsEventsInTimeThenInsertionOrder) {
  Engine e;
  std::vector<int> order;
  e.schedule_at(30, [&] { order.push_back(3); });
  e.schedule_at(10, [&] { order.push_back(1); });
  e.schedule_at(10, [&] { order.push_back(2); });  // same time: after the earlier insertion
  e.schedule_at(20, [&] {
    order.push_back(4);
    e.schedule_after(0, [&] { order.push_back(5); });  // same time, scheduled later
  });
  EXPECT_EQ(e.run(), 5u);
  EXPECT_EQ(order, (std::vector<int>{1, 2, 4, 5, 3}));
  EXPECT_EQ(e.now(), 30);
  EXPECT_EQ(e.events_run(), 5u);
  EXPECT_FALSE(e.next_time().has_value());
}

TEST(Engine, SchedulingInThePastIsABug) {
  Engine e;
  e.schedule_at(100, [] {});
  ASSERT_TRUE(e.step());
  EXPECT_THROW(e.schedule_at(99, [] {}), CheckFailure);
}

}  // namespace
}  // namespace shardlab::sim
