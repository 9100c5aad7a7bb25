// The seam between the simulator's execution (the numerics World, the timing-mode
// replay) and its network models: given who takes part in a collective, when each member
// arrived and how many bytes move, when does each member finish, and with which
// algorithm. Implementations are pure functions of their inputs (no state across calls,
// no host timing), so the same query always gives the same answer on every host and
// thread (NOTE [Determinism] in sim/world.h), and many threads may query one model at once.
//
// The first implementation (make_alpha_beta_ring) is the congestion-unaware α–β model with
// ring collectives of sim/cost_model.h; topologies, contention and other algorithms
// plug in behind the same interface.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/comm/communicator.h"
#include "runtime/core/clock.h"
#include "sim/cost_model.h"

namespace shardlab::sim {

struct CollectiveQuery {
  runtime::comm::OpKind kind = runtime::comm::OpKind::kBarrier;
  std::span<const int> world_ranks;  // group rank -> world rank
  std::span<const Nanos> arrivals;   // per group rank: when the member issued the operation
  // Bytes as in collective_completion_times: one rank's chunk for all_gather and
  // reduce_scatter, the whole buffer for all_reduce and broadcast.
  std::int64_t bytes = 0;
  int root = 0;  // broadcast: the group rank that sends
};

struct CollectiveTiming {
  std::vector<Nanos> done;  // per group rank: when the member's Work completes
  std::string algorithm;    // "ring", "direct", "hierarchical", … (for trace.json)
};

class NetworkCostModel {
 public:
  virtual ~NetworkCostModel() = default;
  virtual CollectiveTiming collective(const CollectiveQuery& q) const = 0;
  // A point-to-point message that can start at `start` (both sides ready): when it arrives.
  virtual Nanos message(int src_world_rank, int dst_world_rank, std::int64_t bytes, Nanos start) const = 0;
  // One line for summaries ("alpha-beta ring, 5 us, 25 GB/s").
  virtual std::string describe() const = 0;
};

// The congestion-unaware α–β model with ring collectives (sim/cost_model.h).
std::shared_ptr<const NetworkCostModel> make_alpha_beta_ring(NetworkModel net);

}  // namespace shardlab::sim
