#include "testing/sim_world.h"

#include <string>

namespace shardlab::testlib {

Status all_ranks_ok(const std::vector<sim::RankResult>& results) {
  for (std::size_t r = 0; r < results.size(); ++r) {
    if (!results[r].status.is_ok()) return results[r].status.with_context("rank " + std::to_string(r));
  }
  return Status::ok();
}

Result<std::vector<runtime::train::FsdpTrainResult>> train_fsdp_on_sim(const runtime::train::FsdpTrainOptions& options,
                                                                       const sim::WorldOptions& world) {
  return on_sim_ranks(world, [&](sim::RankContext& ctx) {
    return runtime::train::train_fsdp(ctx.comm, ctx.device, ctx.clock, options);
  });
}

}  // namespace shardlab::testlib
