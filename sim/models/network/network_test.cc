// Topologies, collective algorithms and the network models: every algorithm reproduces
// its textbook closed form under the congestion-unaware model; the fast recurrences equal
// the message-by-message Engine schedule for unequal arrivals; contention and link faults
// change times the way hand calculations say.
#include "sim/models/network/network.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "runtime/core/rng.h"
#include "sim/models/network/collectives.h"
#include "sim/models/network/topology.h"
#include "testing/status_matchers.h"

using shardlab::testlib::IsOk;

namespace shardlab::sim {
namespace {

using runtime::comm::OpKind;

int ceil_log2(int p) {
  int r = 0;
  while ((1 << r) < p) ++r;
  return r;
}
std::int64_t cdiv(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// β = 1 ns per byte (8 Gbit/s), α = 3 µs: closed forms in integers.
TopologySpec clique_spec() {
  TopologySpec t;
  t.name = "test-clique";
  t.kind = TopologyKind::kFullyConnected;
  t.peer = {8, 3000};
  return t;
}
// Two levels: inside a node α₁ = 1 µs, β₁ = 0.5 ns/B; across nodes α₂ = 3 µs (1.5 per
// port), β₂ = 1 ns/B; one leaf.
TopologySpec two_level_spec() {
  TopologySpec t;
  t.name = "test-hls";
  t.kind = TopologyKind::kHls;
  t.max_devices_per_node = 8;
  t.peer = {16, 1000};
  t.port = {8, 1500};
  return t;
}

std::shared_ptr<const NetworkCostModel> model(TopologySpec t, int nodes, int dpn, Algorithm a,
                                              NetworkModelKind m = NetworkModelKind::kAlphaBeta,
                                              std::vector<LinkFault> faults = {}) {
  NetworkSpec s;
  s.nodes = nodes;
  s.devices_per_node = dpn;
  s.algorithm = a;
  s.model = m;
  s.link_faults = std::move(faults);
  auto r = make_network(s, std::move(t));
  SHARDLAB_CHECK(r.is_ok());
  return *r;
}

CollectiveTiming run(const NetworkCostModel& net, OpKind kind, int p, std::int64_t bytes, Nanos t0 = 500, int root = 0,
                     std::vector<int> ranks = {}) {
  if (ranks.empty()) {
    for (int i = 0; i < p; ++i) ranks.push_back(i);
  }
  const std::vector<Nanos> arrivals(static_cast<std::size_t>(p), t0);
  CollectiveQuery q;
  q.kind = kind;
  q.world_ranks = ranks;
  q.arrivals = arrivals;
  q.bytes = bytes;
  q.root = root;
  return net.collective(q);
}

void expect_all(const CollectiveTiming& t, Nanos want, const std::string& what) {
  for (std::size_t i = 0; i < t.done.size(); ++i) EXPECT_EQ(t.done[i], want) << what << " rank " << i;
}

const Nanos kA = 3000;  // α of clique_spec

TEST(ClosedForms, Ring) {
  for (int p : {1, 2, 3, 5, 8, 13}) {
    auto net = model(clique_spec(), 1, p, Algorithm::kRing);
    const std::int64_t n = 1000, N = 8000;
    const std::string at = "p=" + std::to_string(p);
    // (p-1)α + ((p-1)/p)·(p·n)·β
    expect_all(run(*net, OpKind::kAllGather, p, n), 500 + (p - 1) * kA + (p - 1) * n, "ring all_gather " + at);
    expect_all(run(*net, OpKind::kReduceScatter, p, n), 500 + (p - 1) * kA + (p - 1) * n, "ring reduce_scatter " + at);
    expect_all(run(*net, OpKind::kAllReduce, p, N), 500 + 2 * (p - 1) * (kA + cdiv(N, p)), "ring all_reduce " + at);
    const auto bc = run(*net, OpKind::kBroadcast, p, N, 500, p / 2);
    EXPECT_EQ(bc.done[static_cast<std::size_t>(p / 2)], 500 + ceil_log2(p) * (kA + N)) << at;  // the root
    EXPECT_EQ(*std::max_element(bc.done.begin(), bc.done.end()), 500 + ceil_log2(p) * (kA + N)) << at;
    expect_all(run(*net, OpKind::kBarrier, p, 0), 500 + ceil_log2(p) * kA, "ring barrier " + at);
    EXPECT_EQ(run(*net, OpKind::kAllGather, p, n).algorithm, "ring");
  }
}

TEST(ClosedForms, Direct) {
  for (int p : {2, 3, 5, 8, 13}) {
    auto net = model(clique_spec(), 1, p, Algorithm::kDirect);
    const std::int64_t n = 1000, N = 8000;
    const std::string at = "p=" + std::to_string(p);
    expect_all(run(*net, OpKind::kAllGather, p, n), 500 + kA + n, "direct all_gather " + at);
    expect_all(run(*net, OpKind::kReduceScatter, p, n), 500 + kA + n, "direct reduce_scatter " + at);
    expect_all(run(*net, OpKind::kAllReduce, p, N), 500 + 2 * (kA + cdiv(N, p)), "direct all_reduce " + at);
    expect_all(run(*net, OpKind::kBroadcast, p, N, 500, 1), 500 + kA + N, "direct broadcast " + at);
    expect_all(run(*net, OpKind::kBarrier, p, 0), 500 + kA, "direct barrier " + at);
    EXPECT_EQ(run(*net, OpKind::kAllGather, p, n).algorithm, "direct");
  }
}

// NOTE [Open MPI's nonblocking schedules]: libnbc's fixed schedules, on a clique where
// every message has its own link.
TEST(ClosedForms, Libnbc) {
  for (int p : {2, 3, 4, 5, 8}) {
    auto net = model(clique_spec(), 1, p, Algorithm::kLibnbc);
    const std::int64_t n = 1000, N = 8000;
    const int L = ceil_log2(p);
    const std::string at = "p=" + std::to_string(p);
    // Recursive doubling on a power of two (NOTE [libnbc's all-gather]), else every pair at once.
    const bool pow2 = (p & (p - 1)) == 0;
    expect_all(run(*net, OpKind::kAllGather, p, n), pow2 ? 500 + L * kA + (p - 1) * n : 500 + kA + n,
               "libnbc all_gather " + at);
    // The whole buffer (p·n) up the tree to member 0, then one chunk to each member.
    expect_all(run(*net, OpKind::kReduceScatter, p, n), 500 + L * (kA + p * n) + kA + n, "libnbc reduce_scatter " + at);
    // Binomial reduce, then the eager broadcast of the whole buffer: member 0 sends to all
    // its children at once; member v is popcount(v) hops down, the deepest receives last.
    int depth = 0;
    for (int v = 0; v < p; ++v) depth = std::max(depth, __builtin_popcount(static_cast<unsigned>(v)));
    const auto ar = run(*net, OpKind::kAllReduce, p, N);
    EXPECT_EQ(ar.done[0], 500 + (L + 1) * (kA + N)) << at;
    EXPECT_EQ(*std::max_element(ar.done.begin(), ar.done.end()), 500 + (L + depth) * (kA + N)) << at;
    EXPECT_EQ(ar.algorithm, "libnbc");
    expect_all(run(*net, OpKind::kBarrier, p, 0), 500 + L * kA, "libnbc barrier " + at);
  }
  // One member: nothing moves, and libnbc builds no schedule, so the per-call overhead
  // calibrated on larger groups is not charged (other algorithms charge it).
  TopologySpec with_overhead = clique_spec();
  with_overhead.collective_overhead_ns = 25000;
  EXPECT_EQ(run(*model(with_overhead, 1, 1, Algorithm::kLibnbc), OpKind::kAllGather, 1, 1000).done[0], 500);
  EXPECT_EQ(run(*model(with_overhead, 1, 1, Algorithm::kRing), OpKind::kAllGather, 1, 1000).done[0], 500 + 25000);
  EXPECT_EQ(run(*model(with_overhead, 1, 2, Algorithm::kLibnbc), OpKind::kAllGather, 2, 1000).done[0],
            500 + kA + 1000 + 25000);
}

// A switch port carries the p-1 chunks member 0 scatters one after the other (under
// contention), and with ports shared by a node (a host's one NIC) every rank of the node
// shares it: 2 nodes x 2 ranks, libnbc all_gather's second round sends 2 × 2n through each.
TEST(Contention, LibnbcOnSharedNodePorts) {
  const std::int64_t n = 100000;
  TopologySpec sw;
  sw.name = "test-switch";
  sw.kind = TopologyKind::kSwitch;
  sw.port = {8, 1500};  // 1 ns/B per port, 3 µs end to end
  for (int p : {2, 4}) {
    auto net = model(sw, 1, p, Algorithm::kLibnbc, NetworkModelKind::kContention);
    // Tree rounds: one message per port; the scatter: p-1 chunks through member 0's port.
    expect_all(run(*net, OpKind::kReduceScatter, p, n), 500 + ceil_log2(p) * (3000 + p * n) + 3000 + (p - 1) * n,
               "switch reduce_scatter p=" + std::to_string(p));
  }
  // all_reduce of 4: two tree rounds up; then member 0 sends to 1 and 2 at once through its
  // one port (2N), and 1 forwards to 3.
  auto net4 = model(sw, 1, 4, Algorithm::kLibnbc, NetworkModelKind::kContention);
  const auto ar = run(*net4, OpKind::kAllReduce, 4, n);
  EXPECT_EQ(*std::max_element(ar.done.begin(), ar.done.end()), 500 + 2 * (3000 + n) + (3000 + 2 * n) + (3000 + n));
  EXPECT_EQ(ar.done[3], 500 + 2 * (3000 + n) + (3000 + 2 * n) + (3000 + n));
  TopologySpec nic = two_level_spec();  // peer 0.5 ns/B, 1 µs; port 1 ns/B, 1.5 µs
  auto per_device = model(nic, 2, 2, Algorithm::kLibnbc, NetworkModelKind::kContention);
  nic.port_per_node = true;
  auto per_node = model(nic, 2, 2, Algorithm::kLibnbc, NetworkModelKind::kContention);
  // Recursive doubling: round 1 pairs 0-1 and 2-3 inside the nodes (0.5 ns/B, 1 µs); round 2
  // sends 2n across from every device: one message per device port, two per node port.
  const Nanos inside = 1000 + n / 2;
  expect_all(run(*per_device, OpKind::kAllGather, 4, n), 500 + inside + 3000 + 2 * n, "per-device ports");
  expect_all(run(*per_node, OpKind::kAllGather, 4, n), 500 + inside + 3000 + 4 * n, "per-node ports");
  // Link names: every device of node 1 names node 1's one port.
  auto topo = Topology::create(nic, 2, 2);
  ASSERT_TRUE(topo.is_ok());
  EXPECT_EQ(topo->parse_link("3-net").value(), topo->parse_link("2-net").value());
  EXPECT_NE(topo->parse_link("1-net").value(), topo->parse_link("2-net").value());
  EXPECT_EQ(topo->link_name(topo->parse_link("3-net").value()[0]), "2-net");
  // And the profile keeps it.
  auto back = parse_topology(topology_to_json(nic), "round trip");
  ASSERT_THAT(back, IsOk());
  EXPECT_TRUE(back->port_per_node);
}

// NOTE [Concurrent groups]: HYBRID_SHARD's replica groups {0, 2} and {1, 3} on 2 nodes × 2
// ranks all-reduce at once. With one port per node both cross the same two ports, and
// each message gets half its rate; with a port per device they share nothing; the
// alpha_beta model ignores them; the query's own group is not counted twice.
TEST(Contention, ConcurrentGroupsOfOneSplitShareNodePorts) {
  const std::int64_t n = 100000;
  const std::vector<std::vector<int>> replicas{{0, 2}, {1, 3}};
  const std::vector<int> mine{1, 3};
  const std::vector<Nanos> arrivals(2, 500);
  auto all_reduce = [&](const NetworkCostModel& net, const SplitGroups* split) {
    CollectiveQuery q;
    q.kind = OpKind::kAllReduce;
    q.world_ranks = mine;
    q.arrivals = arrivals;
    q.bytes = n;
    q.split = split;
    return net.collective(q);
  };
  const SplitGroups split = SplitGroups::of(replicas);
  EXPECT_EQ(split.group_of, (std::vector<int>{0, 1, 0, 1}));
  const SplitGroups alone_in_split = SplitGroups::of({{1, 3}});
  TopologySpec nic = two_level_spec();  // port 1 ns/B and 1.5 µs each side
  auto per_device = model(nic, 2, 2, Algorithm::kLibnbc, NetworkModelKind::kContention);
  nic.port_per_node = true;
  auto per_node = model(nic, 2, 2, Algorithm::kLibnbc, NetworkModelKind::kContention);
  auto per_node_ab = model(nic, 2, 2, Algorithm::kLibnbc, NetworkModelKind::kAlphaBeta);
  EXPECT_TRUE(per_node->prices_concurrent_groups());
  EXPECT_FALSE(per_node_ab->prices_concurrent_groups());
  // libnbc's all_reduce of 2: member 1 sends N up the tree, member 0 sends it back down.
  const Nanos alone = 500 + 2 * (3000 + n);
  expect_all(all_reduce(*per_node, nullptr), alone, "one group alone");
  expect_all(all_reduce(*per_node, &alone_in_split), alone, "the split's other group absent");
  expect_all(all_reduce(*per_node, &split), 500 + 2 * (3000 + 2 * n),
             "two groups through each node port (its own counted once)");
  expect_all(all_reduce(*per_device, &split), alone, "a port per device: nothing shared");
  expect_all(all_reduce(*per_node_ab, &split), alone, "alpha_beta ignores them");
  // A group of another size is not this collective's sibling.
  const SplitGroups uneven = SplitGroups::of({{0, 2, 1}, {3}});
  const std::vector<int> three{0, 2, 1};
  const std::vector<Nanos> arrivals3(3, 500);
  CollectiveQuery q;
  q.kind = OpKind::kAllGather;
  q.world_ranks = three;
  q.arrivals = arrivals3;
  q.bytes = n;
  const CollectiveTiming plain = per_node->collective(q);
  q.split = &uneven;
  EXPECT_EQ(per_node->collective(q).done, plain.done);
}

TEST(ClosedForms, HalvingDoubling) {
  for (int p : {1, 2, 4, 8, 16}) {
    auto net = model(clique_spec(), 1, p, Algorithm::kHalvingDoubling);
    const std::int64_t n = 1000, N = 8000;
    const int lg = ceil_log2(p);
    const std::string at = "p=" + std::to_string(p);
    // log2(p)·α + ((p-1)/p)·(p·n)·β
    expect_all(run(*net, OpKind::kAllGather, p, n), 500 + lg * kA + (p - 1) * n, "hd all_gather " + at);
    expect_all(run(*net, OpKind::kReduceScatter, p, n), 500 + lg * kA + (p - 1) * n, "hd reduce_scatter " + at);
    // Rabenseifner: 2·log2(p)·α + 2((p-1)/p)·N·β
    expect_all(run(*net, OpKind::kAllReduce, p, N), 500 + 2 * lg * kA + 2 * (p - 1) * cdiv(N, p),
               "hd all_reduce " + at);
    const auto bc = run(*net, OpKind::kBroadcast, p, N);
    EXPECT_EQ(bc.done[0], 500 + lg * (kA + N)) << at;
    expect_all(run(*net, OpKind::kBarrier, p, 0), 500 + lg * kA, "hd barrier " + at);
    if (p > 1) {
      EXPECT_EQ(run(*net, OpKind::kAllReduce, p, N).algorithm, "halving_doubling");
    }
  }
  // Not a power of two: runs (and reports) ring.
  auto net = model(clique_spec(), 1, 6, Algorithm::kHalvingDoubling);
  const auto t = run(*net, OpKind::kAllGather, 6, 1000);
  EXPECT_EQ(t.algorithm, "ring");
  expect_all(t, 500 + 5 * (kA + 1000), "hd fallback");
}

TEST(ClosedForms, Hierarchical) {
  const Nanos a1 = 1000, a2 = 3000;
  const auto b1 = [](std::int64_t bytes) { return static_cast<Nanos>(std::llround(static_cast<double>(bytes) * 0.5)); };
  for (auto [K, L] : std::vector<std::pair<int, int>>{{2, 2}, {3, 4}, {4, 8}, {5, 3}, {1, 4}, {4, 1}}) {
    auto net = model(two_level_spec(), K, L, Algorithm::kHierarchical);
    const int p = K * L;
    const std::int64_t n = 1000, N = 24000;
    const std::string at = "K=" + std::to_string(K) + " L=" + std::to_string(L);
    // Inter first for all-gather: (K-1)(α₂ + nβ₂) + α₁ + K·n·β₁ (no intra phase when L = 1).
    const Nanos intra_ag = L > 1 ? a1 + b1(K * n) : 0;
    expect_all(run(*net, OpKind::kAllGather, p, n), 500 + (K - 1) * (a2 + n) + intra_ag, "hier all_gather " + at);
    expect_all(run(*net, OpKind::kReduceScatter, p, n), 500 + (K - 1) * (a2 + n) + intra_ag,
               "hier reduce_scatter " + at);
    const std::int64_t c1 = cdiv(N, L), c2 = cdiv(c1, K);
    const Nanos intra_ar = L > 1 ? 2 * (a1 + b1(c1)) : 0;
    expect_all(run(*net, OpKind::kAllReduce, p, N), 500 + intra_ar + 2 * (K - 1) * (a2 + c2), "hier all_reduce " + at);
    const auto bc = run(*net, OpKind::kBroadcast, p, N, 500, p - 1);
    EXPECT_EQ(*std::max_element(bc.done.begin(), bc.done.end()),
              500 + ceil_log2(K) * (a2 + N) + (L > 1 ? a1 + b1(N) : 0))
        << at;
    expect_all(run(*net, OpKind::kBarrier, p, 0), 500 + (L > 1 ? a1 : 0) + ceil_log2(K) * a2, "hier barrier " + at);
    if (K > 1 && L > 1) {
      EXPECT_EQ(run(*net, OpKind::kAllGather, p, n).algorithm, "hierarchical");
    }
  }
}

TEST(ClosedForms, SwitchRingEqualsTheOriginalAlphaBetaModel) {
  // The built-in `switch` profile is NetworkModel's defaults end to end: a ring on it
  // times exactly like make_alpha_beta_ring, for unequal arrivals too.
  auto spec = load_topology("switch");
  ASSERT_THAT(spec, IsOk());
  auto net = model(*spec, 1, 13, Algorithm::kRing);
  auto reference = make_alpha_beta_ring(NetworkModel{});
  Rng rng(7);
  for (int trial = 0; trial < 40; ++trial) {
    const int p = 1 + static_cast<int>(rng.uniform_int(13));
    std::vector<int> ranks;
    std::vector<Nanos> arrivals;
    for (int i = 0; i < p; ++i) {
      ranks.push_back(i);
      arrivals.push_back(static_cast<Nanos>(rng.uniform_int(50000)));
    }
    for (OpKind kind : {OpKind::kAllGather, OpKind::kReduceScatter, OpKind::kAllReduce}) {
      CollectiveQuery q{kind, ranks, arrivals, static_cast<std::int64_t>(rng.uniform_int(100000)), 0, nullptr};
      EXPECT_EQ(net->collective(q).done, reference->collective(q).done) << "trial " << trial;
    }
  }
}

// ---- fast recurrences vs the Engine ---------------------------------------------------------

TEST(FastPath, EqualsTheEngineScheduleForUnequalArrivals) {
  Rng rng(20261202);
  const std::vector<Algorithm> algorithms = {
      Algorithm::kAuto,  Algorithm::kRing, Algorithm::kDirect, Algorithm::kHierarchical, Algorithm::kHalvingDoubling,
      Algorithm::kLibnbc};
  const std::vector<OpKind> kinds = {OpKind::kAllGather, OpKind::kReduceScatter, OpKind::kAllReduce, OpKind::kBroadcast,
                                     OpKind::kBarrier};
  int checked = 0;
  for (int trial = 0; trial < 300; ++trial) {
    TopologySpec spec = trial % 3 == 0 ? two_level_spec() : (trial % 3 == 1 ? clique_spec() : *load_topology("ring"));
    const int nodes = 1 + static_cast<int>(rng.uniform_int(3)), dpn = 1 + static_cast<int>(rng.uniform_int(5));
    auto topo = Topology::create(spec, nodes, dpn);
    ASSERT_TRUE(topo.is_ok());
    // A group: a random subset of the world in random order (or the whole world).
    std::vector<int> ranks;
    for (int r = 0; r < topo->devices(); ++r) ranks.push_back(r);
    for (std::size_t i = ranks.size(); i > 1; --i) std::swap(ranks[i - 1], ranks[rng.uniform_int(i)]);
    if (rng.uniform_int(2) == 0) ranks.resize(1 + rng.uniform_int(ranks.size()));
    if (rng.uniform_int(2) == 0) std::sort(ranks.begin(), ranks.end());
    std::vector<Nanos> arrivals;
    for (std::size_t i = 0; i < ranks.size(); ++i) arrivals.push_back(static_cast<Nanos>(rng.uniform_int(40000)));
    const OpKind kind = kinds[rng.uniform_int(kinds.size())];
    const Algorithm alg = algorithms[rng.uniform_int(algorithms.size())];
    const std::int64_t bytes = static_cast<std::int64_t>(rng.uniform_int(200000));
    const int root = static_cast<int>(rng.uniform_int(ranks.size()));
    const Schedule s = plan_collective(kind, ranks, bytes, root, alg, *topo);
    // Heterogeneous per-message costs stress the recurrences beyond the topology's.
    const bool skewed = rng.uniform_int(2) == 0;
    const PriceRound price = [&](std::span<const Transfer> round, std::span<Priced> out) {
      for (std::size_t i = 0; i < round.size(); ++i) {
        topo->route_cost(round[i].src, round[i].dst, &out[i].latency_ns, &out[i].bytes_per_s);
        if (skewed) out[i].latency_ns += (round[i].src * 7919 + round[i].dst * 104729) % 5000;
      }
    };
    const auto fast = evaluate_schedule(s, ranks, arrivals, price);
    const auto engine = simulate_schedule(s, ranks, arrivals, price);
    ASSERT_EQ(fast, engine) << "trial " << trial << " " << runtime::comm::op_kind_name(kind) << " " << s.algorithm
                            << " p=" << ranks.size() << " bytes=" << bytes;
    for (std::size_t i = 0; i < ranks.size(); ++i) EXPECT_GE(fast[i], arrivals[i]);
    ++checked;
  }
  EXPECT_EQ(checked, 300);
}

TEST(FastPath, OriginalEngineRingIsTheOracleToo) {
  // collective_completion_times (sim/models/device/cost_model.cc) is an independent Engine ring.
  Rng rng(99);
  const NetworkModel nm{3000, 1e9};
  auto topo = Topology::create(clique_spec(), 1, 9);
  ASSERT_TRUE(topo.is_ok());
  for (int trial = 0; trial < 50; ++trial) {
    const int p = 2 + static_cast<int>(rng.uniform_int(8));
    std::vector<int> ranks;
    std::vector<Nanos> arrivals;
    for (int i = 0; i < p; ++i) {
      ranks.push_back(i);
      arrivals.push_back(static_cast<Nanos>(rng.uniform_int(30000)));
    }
    const OpKind kind = trial % 2 == 0 ? OpKind::kAllGather : OpKind::kAllReduce;
    const Schedule s = plan_collective(kind, ranks, 777, 0, Algorithm::kRing, *topo);
    const PriceRound price = [&](std::span<const Transfer> round, std::span<Priced> out) {
      for (std::size_t i = 0; i < round.size(); ++i)
        topo->route_cost(round[i].src, round[i].dst, &out[i].latency_ns, &out[i].bytes_per_s);
    };
    EXPECT_EQ(evaluate_schedule(s, ranks, arrivals, price), collective_completion_times(kind, arrivals, 777, nm));
  }
}

TEST(FastPath, SixtyFiveThousandRanksInLinearTime) {
  // A 65,536-rank world: the recurrences make this instant (an O(p²) model would not
  // finish within the test timeout). Closed forms still hold at this size.
  const int nodes = 8192, dpn = 8, p = nodes * dpn;
  auto hls = load_topology("hls2");
  ASSERT_TRUE(hls.is_ok());
  TopologySpec sw = *load_topology("switch");
  auto ring = model(sw, nodes, dpn, Algorithm::kRing);
  const Nanos alpha = 5000;
  const std::int64_t n = 25000;  // 1 µs at 25 GB/s
  expect_all(run(*ring, OpKind::kAllGather, p, n, 0), (p - 1) * (alpha + 1000), "65536 ring all_gather");
  auto hd = model(sw, nodes, dpn, Algorithm::kHalvingDoubling);
  expect_all(run(*hd, OpKind::kBarrier, p, 0, 0), 16 * alpha, "65536 barrier");
  const auto ar = run(*hd, OpKind::kAllReduce, p, std::int64_t{1} << 30, 0);
  EXPECT_EQ(ar.algorithm, "halving_doubling");
  // hls2 across 2048 leaves; the rails cross the spine between some nodes only, so ranks
  // finish at slightly different times. Fair sharing of a non-blocking fabric costs nothing.
  std::vector<Nanos> last;
  for (NetworkModelKind m : {NetworkModelKind::kAlphaBeta, NetworkModelKind::kContention}) {
    auto net = model(*hls, nodes, dpn, Algorithm::kAuto, m);
    const auto t = run(*net, OpKind::kAllReduce, p, std::int64_t{1} << 30, 0);
    EXPECT_EQ(t.algorithm, "hierarchical");
    EXPECT_GT(*std::min_element(t.done.begin(), t.done.end()), 0);
    if (!last.empty()) {
      EXPECT_EQ(t.done, last);
    }
    last = t.done;
  }
}

// ---- auto -----------------------------------------------------------------------------------

TEST(Auto, PicksByTopologyAndSize) {
  auto hls = *load_topology("hls2");
  auto net = model(hls, 2, 8, Algorithm::kAuto);
  EXPECT_EQ(run(*net, OpKind::kAllGather, 8, 1 << 20).algorithm, "direct");                     // one node
  EXPECT_EQ(run(*net, OpKind::kAllGather, 16, 1 << 20).algorithm, "hierarchical");              // two full nodes
  EXPECT_EQ(run(*net, OpKind::kAllGather, 2, 1 << 20, 0, 0, {0, 8}).algorithm, "ring");         // a rail, large
  EXPECT_EQ(run(*net, OpKind::kAllGather, 2, 64, 0, 0, {0, 8}).algorithm, "halving_doubling");  // a rail, small
  auto ring = model(*load_topology("ring"), 1, 8, Algorithm::kAuto);
  EXPECT_EQ(run(*ring, OpKind::kAllReduce, 8, 64).algorithm, "ring");
}

TEST(Auto, HierarchicalBeatsFlatRingAcrossHlsNodes) {
  auto hls = *load_topology("hls2");
  auto fast = model(hls, 4, 8, Algorithm::kAuto);
  auto flat = model(hls, 4, 8, Algorithm::kRing);
  const std::int64_t N = std::int64_t{256} << 20;
  EXPECT_LT(run(*fast, OpKind::kAllReduce, 32, N).done[0], run(*flat, OpKind::kAllReduce, 32, N).done[0]);
}

// ---- contention -----------------------------------------------------------------------------

TEST(Contention, DirectOnASwitchSharesEachPort) {
  // 8 devices, direct all-gather: 7 flows leave every port, so each gets 1/7 of it.
  auto sw = *load_topology("switch");
  auto ab = model(sw, 1, 8, Algorithm::kDirect);
  auto ct = model(sw, 1, 8, Algorithm::kDirect, NetworkModelKind::kContention);
  const std::int64_t n = 250000;  // 10 µs at 25 GB/s
  expect_all(run(*ab, OpKind::kAllGather, 8, n, 0), 5000 + 10000, "alpha-beta direct");
  expect_all(run(*ct, OpKind::kAllGather, 8, n, 0), 5000 + 70000, "contention direct");
  // A ring uses each port once per step: no contention.
  auto ring_ct = model(sw, 1, 8, Algorithm::kRing, NetworkModelKind::kContention);
  expect_all(run(*ring_ct, OpKind::kAllGather, 8, n, 0), 7 * (5000 + 10000), "contention ring");
}

TEST(Contention, OversubscribedSpineSlowsTheRails) {
  // One node per leaf, leaf uplinks at 8 ports / 4 = 2 ports: the 8 rails of a
  // hierarchical all-gather share them, 1/4 port each.
  TopologySpec t = two_level_spec();
  t.nodes_per_leaf = 1;
  t.oversubscription = 4;
  t.spine_latency_ns = 500;
  const std::int64_t n = 1000;
  auto ab = model(t, 2, 8, Algorithm::kHierarchical);
  auto ct = model(t, 2, 8, Algorithm::kHierarchical, NetworkModelKind::kContention);
  const Nanos intra = 1000 + 2 * n / 2;  // α₁ + K·n·β₁ (K = 2)
  expect_all(run(*ab, OpKind::kAllGather, 16, n, 0), (3000 + 500 + n) + intra, "alpha-beta");
  expect_all(run(*ct, OpKind::kAllGather, 16, n, 0), (3000 + 500 + 4 * n) + intra, "contention");
}

// ---- link faults ----------------------------------------------------------------------------

TEST(LinkFaults, DegradedWindowSlowsTheBytesInsideIt) {
  auto sw = *load_topology("switch");  // 25 GB/s: 25 bytes per ns
  const std::int64_t bytes = 250000;   // 10 µs
  // Half bandwidth for the whole transfer: 20 µs.
  auto half = model(sw, 1, 4, Algorithm::kRing, NetworkModelKind::kAlphaBeta, {{"1-net", 0, kNever, 0.5}});
  EXPECT_EQ(half->message(1, 2, bytes, 1000), 1000 + 5000 + 20000);
  EXPECT_EQ(half->message(2, 3, bytes, 1000), 1000 + 5000 + 10000);  // another port
  // Down during [3000, 7000): the transfer pauses 4 µs.
  auto pause = model(sw, 1, 4, Algorithm::kRing, NetworkModelKind::kAlphaBeta, {{"2-net", 3000, 7000, 0.0}});
  EXPECT_EQ(pause->message(1, 2, bytes, 1000), 1000 + 5000 + 10000 + 4000);
  // Half speed from 6000 on: 5 µs at full speed, the remaining 5 µs of bytes take 10.
  auto late = model(sw, 1, 4, Algorithm::kRing, NetworkModelKind::kAlphaBeta, {{"2-net", 6000, kNever, 0.5}});
  EXPECT_EQ(late->message(1, 2, bytes, 1000), 1000 + 5000 + 5000 + 10000);
  // A window that ended before the collective started changes nothing.
  auto past = model(sw, 1, 4, Algorithm::kRing, NetworkModelKind::kAlphaBeta, {{"2-net", 0, 100, 0.0}});
  auto clean = model(sw, 1, 4, Algorithm::kRing);
  EXPECT_EQ(run(*past, OpKind::kAllReduce, 4, bytes, 1000).done, run(*clean, OpKind::kAllReduce, 4, bytes, 1000).done);
}

TEST(LinkFaults, DegradedLinkSlowsTheRingThatCrossesIt) {
  auto hls = *load_topology("hls2");
  auto clean = model(hls, 1, 8, Algorithm::kRing);
  auto slow = model(hls, 1, 8, Algorithm::kRing, NetworkModelKind::kContention, {{"3-4", 0, kNever, 0.25}});
  const auto a = run(*clean, OpKind::kAllGather, 8, 1 << 20);
  const auto b = run(*slow, OpKind::kAllGather, 8, 1 << 20);
  EXPECT_TRUE(b.status.is_ok());
  for (std::size_t i = 0; i < 8; ++i) EXPECT_GT(b.done[i], a.done[i]);
}

TEST(LinkFaults, ALinkDownForGoodFailsTheCollectiveNamingIt) {
  auto hls = *load_topology("hls2");
  auto net = model(hls, 2, 8, Algorithm::kRing, NetworkModelKind::kAlphaBeta, {{"3-4", 100, kNever, 0.0}});
  const auto t = run(*net, OpKind::kAllGather, 8, 4096);
  EXPECT_EQ(t.status.code(), StatusCode::kUnavailable);
  EXPECT_NE(t.status.message().find("link 3-4 is down"), std::string::npos) << t.status.message();
  for (Nanos d : t.done) EXPECT_EQ(d, kNever);
  EXPECT_EQ(net->message(3, 4, 10, 200), kNever);
  EXPECT_NE(net->message(3, 4, 10, 0), kNever);  // done before the link went down
  EXPECT_NE(net->message(4, 5, 10, 200), kNever);
  // A group that does not use the link is unaffected.
  const auto other = run(*net, OpKind::kAllGather, 8, 4096, 500, 0, {8, 9, 10, 11, 12, 13, 14, 15});
  EXPECT_TRUE(other.status.is_ok());
}

// NOTE [Reduction cost]: γ adds ((p-1)/p)·N·γ to every member of reduce_scatter and
// all_reduce, whatever the algorithm — here γ = 2 ns per byte (0.5 GB/s) on top of β = 1;
// a one-member reduce_scatter copies its chunk (n·γ), a one-member all_reduce costs nothing.
TEST(ClosedForms, ReductionCostIsTheAlphaBetaGammaTerm) {
  for (Algorithm a : {Algorithm::kRing, Algorithm::kDirect, Algorithm::kHalvingDoubling}) {
    for (int p : {1, 2, 4, 8}) {
      TopologySpec t = clique_spec();
      t.reduce_bytes_per_s = 0.5e9;
      auto with = model(t, 1, p, a), without = model(clique_spec(), 1, p, a);
      const std::int64_t n = 1000, N = 8000;
      const std::string at = std::string(algorithm_name(a)) + " p=" + std::to_string(p);
      const auto rs = run(*with, OpKind::kReduceScatter, p, n), rs0 = run(*without, OpKind::kReduceScatter, p, n);
      const auto ar = run(*with, OpKind::kAllReduce, p, N), ar0 = run(*without, OpKind::kAllReduce, p, N);
      for (int i = 0; i < p; ++i) {
        const auto u = static_cast<std::size_t>(i);
        // One member reduces nothing but copies its chunk: n bytes.
        EXPECT_EQ(rs.done[u], rs0.done[u] + 2 * (p > 1 ? (p - 1) * n : n)) << "reduce_scatter " << at;
        EXPECT_EQ(ar.done[u], ar0.done[u] + 2 * (p - 1) * cdiv(N, p)) << "all_reduce " << at;
      }
      // Nothing is reduced by the other collectives.
      EXPECT_EQ(run(*with, OpKind::kAllGather, p, n).done, run(*without, OpKind::kAllGather, p, n).done) << at;
      EXPECT_EQ(run(*with, OpKind::kBroadcast, p, N).done, run(*without, OpKind::kBroadcast, p, N).done) << at;
    }
  }
  // Ring reduce_scatter in full: (p-1)α + ((p-1)/p)·pn·(β + γ).
  TopologySpec t = clique_spec();
  t.reduce_bytes_per_s = 0.5e9;
  expect_all(run(*model(t, 1, 4, Algorithm::kRing), OpKind::kReduceScatter, 4, 1000), 500 + 3 * kA + 3 * 1000 * 3,
             "ring reduce_scatter with gamma");
}

TEST(Topology, ReductionRateIsReadWrittenAndChecked) {
  const std::string base = R"({"name": "t", "kind": "switch", "port": {"gbit_per_s": 100, "latency_ns": 1000})";
  auto ok = parse_topology(base + R"(, "reduce_gbyte_per_s": 2.5})", "t.json");
  ASSERT_THAT(ok, IsOk());
  EXPECT_EQ(ok->reduce_bytes_per_s, 2.5e9);
  auto back = parse_topology(topology_to_json(*ok), "back.json");
  ASSERT_THAT(back, IsOk());
  EXPECT_EQ(back->reduce_bytes_per_s, 2.5e9);
  EXPECT_EQ(parse_topology(base + "}", "t.json")->reduce_bytes_per_s, 0.0);  // absent: free
  EXPECT_EQ(topology_to_json(*parse_topology(base + "}", "t.json")).find("reduce"), std::string::npos);
  for (const char* bad : {R"(0)", R"(-1)", R"("fast")", R"(1e10)"}) {
    auto r = parse_topology(base + R"(, "reduce_gbyte_per_s": )" + bad + "}", "t.json");
    ASSERT_FALSE(r.is_ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("reduce_gbyte_per_s"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("t.json"), std::string::npos) << r.status().message();
  }
  for (const std::string& name : list_topologies()) {
    EXPECT_EQ(load_topology(name)->reduce_bytes_per_s, 0.0) << name << ": HCCL reduces on the device";
    EXPECT_EQ(load_topology(name)->collective_overhead_ns, 0) << name << ": part of the latencies";
  }
}

TEST(LinkFaults, BadFaultsAreRefusedNamingWhatIsAllowed) {
  NetworkSpec s;
  s.topology = "hls2";
  s.nodes = 2;
  s.devices_per_node = 8;
  s.link_faults = {{"0-9", 0, kNever, 0.0}};
  auto r = make_network(s);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("no direct link"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("'a-net'"), std::string::npos) << r.status().message();
  s.link_faults = {{"0-1", 0, kNever, 1.5}};
  EXPECT_NE(make_network(s).status().message().find("factor"), std::string::npos);
  s.link_faults = {{"0-1", 50, 50, 0.5}};
  EXPECT_NE(make_network(s).status().message().find("window"), std::string::npos);
  s.link_faults = {{"leaf9-spine", 0, kNever, 0.5}};
  EXPECT_FALSE(make_network(s).is_ok());
  s.link_faults = {{"0-net", 0, kNever, 0.5}, {"leaf0-spine", 0, 10, 0.5}};
  EXPECT_TRUE(make_network(s).is_ok()) << make_network(s).status().to_string();
}

// ---- factory and topologies -----------------------------------------------------------------

TEST(Factory, BuildsEveryBuiltInTopologyAndRefusesBadWorlds) {
  for (const auto& name : list_topologies()) {
    NetworkSpec s;
    s.topology = name;
    s.nodes = 2;
    s.devices_per_node = 8;
    for (NetworkModelKind m : {NetworkModelKind::kAlphaBeta, NetworkModelKind::kContention}) {
      s.model = m;
      auto net = make_network(s);
      ASSERT_THAT(net, IsOk()) << name;
      EXPECT_NE((*net)->describe().find(name), std::string::npos) << (*net)->describe();
      const auto t = run(**net, OpKind::kAllReduce, 16, 1 << 20);
      EXPECT_TRUE(t.status.is_ok());
      EXPECT_GT(t.done[0], 500);
    }
  }
  NetworkSpec s;
  s.topology = "hls3";
  s.devices_per_node = 16;
  EXPECT_NE(make_network(s).status().message().find("does not fit"), std::string::npos);
  s.topology = "torus";
  EXPECT_NE(make_network(s).status().message().find("built-in"), std::string::npos);
  EXPECT_EQ(parse_algorithm("halving_doubling").value(), Algorithm::kHalvingDoubling);
  EXPECT_EQ(parse_algorithm("libnbc").value(), Algorithm::kLibnbc);
  EXPECT_NE(parse_algorithm("tree").status().message().find("allowed"), std::string::npos);
  EXPECT_EQ(parse_network_model("contention").value(), NetworkModelKind::kContention);
  EXPECT_FALSE(parse_network_model("fluid").is_ok());
}

TEST(Topology, HlsRoutesFollowTheReferenceWiring) {
  auto spec = load_topology("hls2");
  ASSERT_TRUE(spec.is_ok());
  auto topo = Topology::create(*spec, 8, 8);
  ASSERT_TRUE(topo.is_ok());
  // 3 × 100 GbE per peer = 37.5 GB/s line rate, 95% payload.
  Route in = topo->route(0, 5);
  EXPECT_EQ(in.links.size(), 1u);
  EXPECT_DOUBLE_EQ(in.bytes_per_s, 37.5e9 * 0.95);
  EXPECT_EQ(topo->link_name(in.links[0]), "0-5");
  Route same_leaf = topo->route(0, 8);  // node 0 → node 1, same leaf (4 nodes per leaf)
  EXPECT_EQ(same_leaf.links.size(), 2u);
  Route cross = topo->route(0, 40);  // node 0 → node 5, another leaf
  EXPECT_EQ(cross.links.size(), 4u);
  EXPECT_EQ(cross.latency_ns, same_leaf.latency_ns + spec->spine_latency_ns);
  EXPECT_EQ(topo->link_name(cross.links[1]), "leaf0-spine");
  auto ring = Topology::create(*load_topology("ring"), 1, 10);
  EXPECT_EQ(ring->route(1, 8).links.size(), 3u);  // the short way round
}

// NOTE [Virtual time limit]: a port far slower than the loader accepts (built directly)
// saturates at the limit and the collective fails naming the topology's keys — never a
// wrapped, negative duration predicting a faster step than the default switch.
TEST(Factory, ALinkTooSlowForTheRunFailsTheCollectiveAndIsNeverFaster) {
  TopologySpec fast;
  fast.name = "switch";
  fast.kind = TopologyKind::kSwitch;
  fast.port = {200, 2500};
  TopologySpec slow = fast;
  slow.name = "tiny-port";
  slow.port.gbit_per_s = 1e-20;
  for (Algorithm a : {Algorithm::kRing, Algorithm::kDirect, Algorithm::kHalvingDoubling}) {
    for (NetworkModelKind m : {NetworkModelKind::kAlphaBeta, NetworkModelKind::kContention}) {
      const std::vector<int> ranks = {0, 1, 2, 3, 4, 5, 6, 7};
      const std::vector<Nanos> arrivals(8, 1000);
      CollectiveQuery q;
      q.kind = OpKind::kAllGather;
      q.world_ranks = ranks;
      q.arrivals = arrivals;
      q.bytes = 1 << 20;
      const CollectiveTiming f = model(fast, 1, 8, a, m)->collective(q);
      const CollectiveTiming t = model(slow, 1, 8, a, m)->collective(q);
      ASSERT_TRUE(f.status.is_ok());
      ASSERT_FALSE(t.status.is_ok()) << algorithm_name(a);
      EXPECT_EQ(t.status.code(), StatusCode::kInvalidArgument);
      EXPECT_NE(t.status.message().find("topology profile 'tiny-port'"), std::string::npos) << t.status.message();
      EXPECT_NE(t.status.message().find("port.gbit_per_s = 1e-20"), std::string::npos) << t.status.message();
      for (std::size_t r = 0; r < 8; ++r) {
        EXPECT_GE(t.done[r], f.done[r]);
        EXPECT_EQ(t.done[r], kTimeLimit);
      }
      EXPECT_GE(model(slow, 1, 8, a, m)->message(0, 1, 1 << 20, 0), kTimeLimit);
    }
  }
}

}  // namespace
}  // namespace shardlab::sim
