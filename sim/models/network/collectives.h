// Collective algorithms as message schedules, and two ways to time them.
//
// A collective on a group becomes a Schedule: phases, each a primitive run on sub-groups
// of the group at once (every intra-node group, every rail …). A member enters a phase
// when it has finished the previous one (its own sends and receives), so phases chain
// per rank, not through a global barrier. Primitives and their message-level rules (r_i:
// when member i entered the phase; m: the message's cost; a message never starts before
// both ends have entered the phase — a rendezvous):
//   ring(S steps, c bytes)   member k sends step s to k+1 once it received step s-1 from
//                            k-1; done_k = its last send and receive.
//   direct(c)                every ordered pair, all at once.
//   direct_from_root(c)      the first member sends to every other, all at once.
//   exchange(distances)      round j: v and v XOR d_j swap (recursive halving/doubling).
//   dissemination            round j: v sends to v + 2^j (mod q).
//   binomial_tree            round j: v < 2^j sends to v + 2^j (first member = root).
//   binomial_reduce          the same tree towards the root: round j, v + 2^j sends to v
//                            for v a multiple of 2^(j+1) (a sender leaves the phase).
//   binomial_eager           the broadcast tree with every member sending to all its
//                            children at once as soon as it has the data: round j, each v
//                            with j bits set sends to every v + 2^i with 2^i > v.
//
// Algorithms (Algorithm), with their textbook cost for equal arrivals under the
// congestion-unaware model with one α and β (n = one rank's chunk, N = the whole buffer,
// p = group size; tests pin every one of them):
//   ring               all_gather/reduce_scatter (p-1)(α + nβ) = (p-1)α + ((p-1)/p)·pn·β;
//                      all_reduce 2(p-1)(α + ⌈N/p⌉β); broadcast binomial tree ⌈log2 p⌉(α + Nβ);
//                      barrier dissemination ⌈log2 p⌉α.
//   direct             all_gather/reduce_scatter α + nβ; all_reduce 2(α + ⌈N/p⌉β) (direct
//                      reduce-scatter + all-gather); broadcast α + Nβ; barrier α.
//   halving_doubling   (p a power of two) all_gather (doubling) and reduce_scatter (halving)
//                      log2(p)·α + (p-1)nβ; all_reduce (Rabenseifner) 2·log2(p)·α + 2((p-1)/p)Nβ
//                      with n = ⌈N/p⌉; broadcast binomial tree; barrier dissemination.
//   hierarchical       (L members on each of K nodes) all_gather: ring across nodes per rail
//                      (the members with the same index in their node), then direct inside
//                      the node: (K-1)(α₂ + nβ₂) + α₁ + Knβ₁; reduce_scatter the mirror image;
//                      all_reduce: direct reduce-scatter inside (c₁ = ⌈N/L⌉), ring
//                      all-reduce per rail (c₂ = ⌈c₁/K⌉), direct all-gather inside:
//                      2(α₁ + c₁β₁) + 2(K-1)(α₂ + c₂β₂); broadcast: binomial tree on the
//                      root's rail, then direct inside each node: ⌈log2 K⌉(α₂ + Nβ₂) + α₁ + Nβ₁;
//                      barrier: direct inside, dissemination per rail: α₁ + ⌈log2 K⌉α₂.
//   libnbc             NOTE [Open MPI's nonblocking schedules] below: what the runtime's
//                      MpiCommunicator runs. all_gather: recursive doubling (p a power of
//                      two: log2(p)·α + (p-1)nβ), else direct (α + nβ on a clique);
//                      reduce_scatter: binomial reduce of the whole buffer to member 0, then
//                      member 0 sends each member its chunk: ⌈log2 p⌉(α + pnβ) + α + nβ
//                      (a switch port serializes the p-1 chunks: (p-1)nβ); all_reduce:
//                      binomial reduce, then the eager binomial broadcast of N: on a clique
//                      (⌈log2 p⌉ + D)(α + Nβ), D the most bits set in a member index < p
//                      (a switch port shares member 0's sends: p = 4
//                      takes 2(α + Nβ) + (α + 2Nβ) + (α + Nβ)); broadcast binomial tree;
//                      barrier dissemination.
// Fallbacks (reported through Schedule::algorithm, which names what actually ran):
// halving_doubling on a group that is not a power of two runs ring; direct on more than
// kMaxDirectMembers members runs ring; hierarchical on uneven nodes runs ring.
//
// NOTE [Open MPI's nonblocking schedules]
// Open MPI 4.1 runs MPI_Iallgather, MPI_Ireduce_scatter_block and MPI_Iallreduce through
// its libnbc component (the `tuned` component that picks ring or recursive algorithms by
// size serves only the blocking calls), whose schedules do not depend on the size:
// iallgather by recursive doubling (what the runtime asks for, NOTE [libnbc's
// all-gather] in runtime/comm/mpi/communicator.cc; linear, every pair at once, on a group
// that is not a power of two); ireduce_scatter_block reduces the whole buffer up a
// binomial tree to rank 0 and scatters the chunks from there; iallreduce with MPI_IN_PLACE
// (the runtime's call) always takes the binomial reduce, then a broadcast down the same
// tree in which a member posts the sends to all its children at once after its receive
// (ompi/mca/coll/libnbc/nbc_iallgather.c, nbc_ireduce_scatter_block.c, nbc_iallreduce.c).
// Measured over 200 Mbit/s links between namespaces (scripts/netns-cluster), chunks of 4
// MB: 4 ranks' reduce_scatter 1.842 s against 1.84 s from this schedule, all_reduce of 16
// MB 3.37 s against 3.35 s, all_gather 0.526 s against 0.51 s.
// On shared memory the difference hardly shows; on a network it does: a 2-member
// reduce_scatter moves 1.5 buffers over the link one way after the other, a ring 0.5 each
// way at once. `auto` never picks it: a scenario asks for it (world.collective_algorithm).
// The reduction (γ) is charged as for every algorithm (NOTE [Reduction cost]), though the
// tree's root reduces ⌈log2 p⌉ whole buffers: where the reduction matters against the
// link, this under-charges the root.
//
// `auto`: direct inside one node of a clique topology (hls, fully_connected);
// hierarchical across nodes of an hls topology when every node holds the same number
// (≥ 2) of members; otherwise halving_doubling for small payloads (≤ 256 KiB in all,
// power-of-two groups) and ring for the rest (and always ring on a ring topology).
//
// Timing: evaluate_schedule computes every member's completion in O(messages of one
// round) per phase — O(p) for ring, O(p log p) for halving-doubling, O(members²) for
// direct (hence kMaxDirectMembers) — using closed recurrences (a sliding-window maximum for
// the ring). simulate_schedule runs the same rules message by message on an Engine: the
// test oracle, and the path for time-dependent costs (link faults).
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/comm/communicator.h"
#include "runtime/core/clock.h"
#include "runtime/core/status.h"
#include "sim/models/network/topology.h"

namespace shardlab::sim {

enum class Algorithm { kAuto, kRing, kDirect, kHierarchical, kHalvingDoubling, kLibnbc };
std::string_view algorithm_name(Algorithm a);  // "auto", "ring", "direct", "hierarchical", "halving_doubling", "libnbc"
Result<Algorithm> parse_algorithm(std::string_view text);

constexpr int kMaxDirectMembers = 512;
constexpr std::int64_t kSmallCollectiveBytes = 256 * 1024;  // `auto`'s latency-bound threshold

enum class Primitive {
  kRing,
  kDirect,
  kDirectFromRoot,
  kExchange,
  kDissemination,
  kBinomialTree,
  kBinomialReduce,
  kBinomialEager
};

struct Phase {
  Primitive primitive = Primitive::kRing;
  std::vector<std::vector<int>> groups;  // group ranks; the first is the root of rooted primitives
  int steps = 0;                         // ring: number of steps
  std::vector<std::int64_t> bytes;       // ring/direct: {chunk}; round-based: per round
  std::vector<int> distances;            // exchange: the partner distance of each round
  int rounds() const;                    // 1 for ring/direct; per-round count otherwise
};

struct Schedule {
  std::string algorithm;  // what ran ("ring", "direct", "hierarchical", "halving_doubling",
                          // "binomial_tree", "dissemination", "libnbc")
  std::vector<Phase> phases;
};

// The schedule of one collective. `world_ranks` maps group rank -> world rank (device);
// `bytes` as in CollectiveQuery (one rank's chunk for all_gather/reduce_scatter, the
// whole buffer for all_reduce/broadcast); `root` a group rank.
Schedule plan_collective(runtime::comm::OpKind kind, std::span<const int> world_ranks, std::int64_t bytes, int root,
                         Algorithm requested, const Topology& topology);

// One message of a round, in world ranks, and what the network makes of it.
struct Transfer {
  int src = 0, dst = 0;  // world ranks
  std::int64_t bytes = 0;
};
struct Priced {
  Nanos latency_ns = 0;
  double bytes_per_s = 0;  // the rate the message gets (its path's bottleneck or fair share)
  // latency + llround(bytes / rate) — the one rounding per message (NOTE in sim/models/device/cost_model.h).
  Nanos cost(std::int64_t bytes) const;
};
// Prices the messages of one round (they run concurrently).
using PriceRound = std::function<void(std::span<const Transfer> round, std::span<Priced> out)>;
// When a message that starts at `start` arrives (time-dependent costs); kNever: never.
using FinishTime = std::function<Nanos(const Transfer& m, const Priced& p, Nanos start)>;

constexpr Nanos kNever = INT64_MAX;

// Every member's completion time, from the closed recurrences (no Engine).
std::vector<Nanos> evaluate_schedule(const Schedule& s, std::span<const int> world_ranks,
                                     std::span<const Nanos> arrivals, const PriceRound& price);
// The same, message by message on an Engine. With `finish` null, a message takes its
// priced cost; otherwise `finish` decides. A message that never arrives leaves the
// members that depend on it at kNever and sets *blocked (when given) to it.
std::vector<Nanos> simulate_schedule(const Schedule& s, std::span<const int> world_ranks,
                                     std::span<const Nanos> arrivals, const PriceRound& price,
                                     const FinishTime& finish = nullptr, Transfer* blocked = nullptr);

}  // namespace shardlab::sim
