// Simulated worlds for tests: run a body on every rank of a sim::World and get one answer
// back — every rank's value, or the first failing rank's status naming the rank.
//
//   auto got = testlib::on_sim_ranks(4, [&](sim::RankContext& ctx) -> Result<float> { ... });
//   ASSERT_THAT(got, IsOk());   // (*got)[r] is rank r's value
//
// Thread safety: the body runs on every rank's thread at once; it must touch only its own
// RankContext and the slot of the rank it runs for (sim/engine/world.h).
#pragma once

#include <functional>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "runtime/core/status.h"
#include "runtime/train/fsdp_train.h"
#include "sim/engine/world.h"

namespace shardlab::testlib {

// OK when every rank returned OK; otherwise the lowest failing rank's status, prefixed
// "rank N: ".
Status all_ranks_ok(const std::vector<sim::RankResult>& results);

// Runs `body` (RankContext& → Result<T>) on options.world_size simulated ranks and gathers
// each rank's value (index = rank), or fails as all_ranks_ok says.
template <class Body>
auto on_sim_ranks(const sim::WorldOptions& options, Body body)
    -> Result<std::vector<typename std::invoke_result_t<Body&, sim::RankContext&>::value_type>> {
  using T = typename std::invoke_result_t<Body&, sim::RankContext&>::value_type;
  std::vector<std::optional<T>> slots(static_cast<std::size_t>(options.world_size));
  sim::World world(options);
  const auto results = world.run([&](sim::RankContext& ctx) -> Status {
    Result<T> r = body(ctx);
    if (!r.is_ok()) return r.status();
    slots[static_cast<std::size_t>(ctx.rank)].emplace(std::move(r).value());
    return Status::ok();
  });
  SHARDLAB_RETURN_IF_ERROR(all_ranks_ok(results));
  std::vector<T> out;
  out.reserve(slots.size());
  for (auto& s : slots) out.push_back(std::move(*s));
  return out;
}

// The same on `world_size` ranks with default options (the cpu-sim device, α–β network).
template <class Body>
auto on_sim_ranks(int world_size, Body body) {
  sim::WorldOptions options;
  options.world_size = world_size;
  return on_sim_ranks(options, std::move(body));
}

// runtime::train::train_fsdp on every rank of `world` (index = rank).
Result<std::vector<runtime::train::FsdpTrainResult>> train_fsdp_on_sim(const runtime::train::FsdpTrainOptions& options,
                                                                       const sim::WorldOptions& world);

}  // namespace shardlab::testlib
