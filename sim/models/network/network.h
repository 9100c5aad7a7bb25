// The seam between the simulator's execution (the numerics World, the timing-mode
// replay) and its network models: given who takes part in a collective, when each member
// arrived and how many bytes move, when does each member finish, and with which
// algorithm. Implementations are pure functions of their inputs (no state across calls,
// no host timing), so the same query always gives the same answer on every host and
// thread (NOTE [Determinism] in sim/engine/world.h), and many threads may query one model at once.
//
// Implementations:
//  - make_alpha_beta_ring: the first model — congestion-unaware α–β with ring collectives
//    (sim/models/device/cost_model.h), one α and β for every pair; the World's default.
//  - make_network(NetworkSpec): a topology (sim/models/network/topology.h) with a collective algorithm
//    (sim/models/network/collectives.h) under one of two models:
//      alpha_beta  congestion-unaware: a message costs its route's latency plus bytes over
//                  its route's bottleneck bandwidth, whatever else is in flight.
//      contention  per-link max–min fair sharing: the messages of one round of a collective
//                  (one ring step — every step of a ring uses the same links —, one
//                  exchange round, one direct phase, over every sub-group of the phase at
//                  once) share each link they cross; each gets its max–min fair rate
//                  (progressive filling), fixed for the message. Scope: contention
//                  within one collective, and between the groups of one split that run
//                  it at once (NOTE [Concurrent groups]). A pure per-query model cannot
//                  see other collectives in flight at the same time (an all-gather
//                  overlapping a reduce-scatter): that needs a stateful network
//                  simulation and is out of scope here. With unequal arrivals the round's
//                  messages are assumed concurrent (exact for equal arrivals, pessimistic
//                  when stragglers spread them out).
//    Link faults (NOTE [Link faults] below) apply in both models.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/comm/communicator.h"
#include "runtime/core/clock.h"
#include "runtime/core/status.h"
#include "sim/models/device/cost_model.h"
#include "sim/models/network/collectives.h"
#include "sim/models/network/topology.h"

namespace shardlab::sim {

// NOTE [Concurrent groups]: the groups one split made (world ranks, group rank order;
// disjoint) and, per world rank, the index of its group (-1: in none).
struct SplitGroups {
  std::vector<std::vector<int>> groups;
  std::vector<int> group_of;
  static SplitGroups of(std::vector<std::vector<int>> groups);
};

struct CollectiveQuery {
  runtime::comm::OpKind kind = runtime::comm::OpKind::kBarrier;
  std::span<const int> world_ranks;  // group rank -> world rank
  std::span<const Nanos> arrivals;   // per group rank: when the member issued the operation
  // Bytes as in collective_completion_times: one rank's chunk for all_gather and
  // reduce_scatter, the whole buffer for all_reduce and broadcast.
  std::int64_t bytes = 0;
  int root = 0;  // broadcast: the group rank that sends
  // NOTE [Concurrent groups]: the split that made this group (it among them); null for
  // the world group or when unknown.
  const SplitGroups* split = nullptr;
};

// NOTE [Concurrent groups]
// An SPMD program drives every group of one split through the same collectives at the
// same point of its program: HYBRID_SHARD's replica groups all-reduce their shards' gradients
// at once, each through the same node ports when a node holds several ranks. Under the
// contention model each round of a collective is priced together with the same round of
// every other group of its split that has a member on one of its nodes (of the same size:
// the round's messages mapped member by member), so a port that two replica groups cross
// gives each half its rate; the alpha_beta model and measured collectives ignore them.
// The groups are assumed to run in lockstep (exact for symmetric programs and equal
// arrivals). Left out: groups on other nodes only — in the built-in topologies they could
// meet only on leaf–spine uplinks, and the runtime's splits (shard groups inside a node,
// replica groups across every node) never make such pairs. Finding the groups costs
// O(members × devices per node) per query; when they hold more than kMaxConcurrentRanks
// ranks in all, the collective is priced alone (the joint pricing would cost that many
// flows per round of every group's query).
constexpr std::int64_t kMaxConcurrentRanks = 65536;

// NOTE [Reduction cost] in sim/models/network/topology.h: the bytes each member of a `group_size` group
// reduces in a collective of `kind` with `bytes` as in CollectiveQuery — (p-1) chunks for
// reduce_scatter (chunk = bytes) and all_reduce (chunk = ⌈bytes/p⌉); a one-member
// reduce_scatter copies its chunk; 0 for every other kind.
std::int64_t reduced_bytes(runtime::comm::OpKind kind, std::int64_t group_size, std::int64_t bytes);

struct CollectiveTiming {
  std::vector<Nanos> done;  // per group rank: when the member's Work completes
  std::string algorithm;    // "ring", "direct", "hierarchical", … (for trace.json)
  // OK, or UNAVAILABLE when a message of the collective needs a link that is down for
  // good (a fault window with factor 0 and no end); the message names the link, the
  // window and the collective. Then every entry of `done` is kNever.
  Status status = Status::ok();
};

class NetworkCostModel {
 public:
  virtual ~NetworkCostModel() = default;
  virtual CollectiveTiming collective(const CollectiveQuery& q) const = 0;
  // A point-to-point message that can start at `start` (both sides ready): when it arrives
  // (kNever when its route is down for good, NOTE [Link faults]).
  virtual Nanos message(int src_world_rank, int dst_world_rank, std::int64_t bytes, Nanos start) const = 0;
  // One line for summaries ("alpha-beta ring, 5 us, 25 GB/s").
  virtual std::string describe() const = 0;
  // NOTE [Host-progressed collectives] in sim/models/network/topology.h: a member's wait lasts at least
  // the collective's own duration.
  virtual bool host_progress() const { return false; }
  // Whether collective() reads CollectiveQuery::split (NOTE [Concurrent groups]);
  // callers that would build it for the query may skip it when false.
  virtual bool prices_concurrent_groups() const { return false; }
};

// The congestion-unaware α–β model with ring collectives (sim/models/device/cost_model.h).
std::shared_ptr<const NetworkCostModel> make_alpha_beta_ring(NetworkModel net);

// NOTE [Link faults]
// A model may carry an immutable list of degradation windows. During [start, end) a link
// carries `factor` × its bandwidth (0: down); a message crossing it streams its bytes at
// its rate × the smallest factor in force on its route at each instant (piecewise over
// the window edges, rounded once), so a window that closes only delays the message. A
// message that meets a factor-0 window with no end never arrives: message() returns
// kNever and collective() reports UNAVAILABLE. Routes are static (no rerouting around a
// dead link): in every built-in topology a message has exactly one route. Overlapping
// windows on one link: the smallest factor wins. Latency is unaffected.
// Cost: without windows in force after the earliest arrival, collectives take the fast
// recurrences of sim/models/network/collectives.h; with one, the query runs message by message on an
// Engine (O(messages): O(p²) for a ring), so keep faulted groups to a few thousand ranks.
struct LinkFault {
  std::string link;  // a link name of the topology ("3-5", "3-net", "leaf1-spine")
  Nanos start = 0;
  Nanos end = kNever;   // kNever: until the end of the run
  double factor = 0.0;  // in [0, 1]
};

enum class NetworkModelKind { kAlphaBeta, kContention };
std::string_view network_model_name(NetworkModelKind k);  // "alpha_beta", "contention"
Result<NetworkModelKind> parse_network_model(std::string_view text);

struct NetworkSpec {
  std::string topology = "switch";  // a built-in topology profile or a path to one
  int nodes = 1;
  int devices_per_node = 8;
  NetworkModelKind model = NetworkModelKind::kAlphaBeta;
  Algorithm algorithm = Algorithm::kAuto;
  std::vector<LinkFault> link_faults;
};

// The model a scenario asks for. INVALID_ARGUMENT for an unknown or bad topology
// profile, a world that does not fit it, or a bad link fault (unknown link name, factor
// outside [0, 1], end <= start), naming what is allowed.
Result<std::shared_ptr<const NetworkCostModel>> make_network(const NetworkSpec& spec);
// The same with an already loaded topology profile (spec.topology is ignored).
Result<std::shared_ptr<const NetworkCostModel>> make_network(const NetworkSpec& spec, TopologySpec topology);

}  // namespace shardlab::sim
