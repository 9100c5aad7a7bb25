#include "sim/models/network/collectives.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <deque>
#include <map>

#include "runtime/core/check.h"
#include "sim/engine/engine.h"
#include "sim/models/device/cost_model.h"

namespace shardlab::sim {

using runtime::comm::OpKind;

std::string_view algorithm_name(Algorithm a) {
  switch (a) {
    case Algorithm::kAuto: return "auto";
    case Algorithm::kRing: return "ring";
    case Algorithm::kDirect: return "direct";
    case Algorithm::kHierarchical: return "hierarchical";
    case Algorithm::kHalvingDoubling: return "halving_doubling";
    case Algorithm::kLibnbc: return "libnbc";
  }
  return "?";
}

Result<Algorithm> parse_algorithm(std::string_view text) {
  for (Algorithm a : {Algorithm::kAuto, Algorithm::kRing, Algorithm::kDirect, Algorithm::kHierarchical,
                      Algorithm::kHalvingDoubling, Algorithm::kLibnbc}) {
    if (text == algorithm_name(a)) return a;
  }
  return Status::invalid_argument("unknown collective algorithm '" + std::string(text) +
                                  "'; allowed: auto, ring, direct, hierarchical, halving_doubling, libnbc");
}

int Phase::rounds() const {
  switch (primitive) {
    case Primitive::kRing:
    case Primitive::kDirect:
    case Primitive::kDirectFromRoot: return 1;
    default: return static_cast<int>(bytes.size());
  }
}

Nanos Priced::cost(std::int64_t nbytes) const {
  if (nbytes == 0 || bytes_per_s <= 0) return latency_ns;
  return add_time(latency_ns, to_nanos(static_cast<double>(nbytes) * 1e9 / bytes_per_s));
}

// ---- planning -----------------------------------------------------------------------------

namespace {

int ceil_log2(int p) {
  int r = 0;
  while ((1 << r) < p) ++r;
  return r;
}
bool is_pow2(int p) { return p > 0 && (p & (p - 1)) == 0; }
std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

std::vector<int> iota_members(int q) {
  std::vector<int> v(static_cast<std::size_t>(q));
  for (int i = 0; i < q; ++i) v[static_cast<std::size_t>(i)] = i;
  return v;
}
std::vector<int> rotated(std::vector<int> v, int first_index) {
  std::rotate(v.begin(), v.begin() + first_index, v.end());
  return v;
}

Phase ring(std::vector<std::vector<int>> groups, int steps, std::int64_t chunk) {
  Phase p;
  p.primitive = Primitive::kRing;
  p.groups = std::move(groups);
  p.steps = steps;
  p.bytes = {chunk};
  return p;
}
Phase direct(std::vector<std::vector<int>> groups, std::int64_t chunk, bool from_root = false) {
  Phase p;
  p.primitive = from_root ? Primitive::kDirectFromRoot : Primitive::kDirect;
  p.groups = std::move(groups);
  p.bytes = {chunk};
  return p;
}
// Rounds over groups that all have q members.
Phase dissemination(std::vector<std::vector<int>> groups, int q) {
  Phase p;
  p.primitive = Primitive::kDissemination;
  p.groups = std::move(groups);
  p.bytes.assign(static_cast<std::size_t>(ceil_log2(q)), 0);
  return p;
}
Phase binomial(std::vector<std::vector<int>> groups, int q, std::int64_t bytes,
               Primitive primitive = Primitive::kBinomialTree) {
  Phase p;
  p.primitive = primitive;
  p.groups = std::move(groups);
  p.bytes.assign(static_cast<std::size_t>(ceil_log2(q)), bytes);
  return p;
}
// Recursive doubling (all-gather) or halving (reduce-scatter) with chunk n, q a power of 2.
Phase exchange(std::vector<std::vector<int>> groups, int q, std::int64_t n, bool halving) {
  Phase p;
  p.primitive = Primitive::kExchange;
  p.groups = std::move(groups);
  for (int d = 1; d < q; d *= 2) {
    p.distances.push_back(d);
    p.bytes.push_back(n * d);
  }
  if (halving) {
    std::reverse(p.distances.begin(), p.distances.end());
    std::reverse(p.bytes.begin(), p.bytes.end());
  }
  return p;
}

Schedule plan_ring(OpKind kind, int q, std::int64_t bytes, int root) {
  Schedule s;
  const auto all = iota_members(q);
  switch (kind) {
    case OpKind::kAllGather:
    case OpKind::kReduceScatter:
      s.algorithm = "ring";
      s.phases.push_back(ring({all}, q - 1, bytes));
      break;
    case OpKind::kAllReduce:
      s.algorithm = "ring";
      s.phases.push_back(ring({all}, 2 * (q - 1), ceil_div(bytes, q)));
      break;
    case OpKind::kBroadcast:
      s.algorithm = "binomial_tree";
      s.phases.push_back(binomial({rotated(all, root)}, q, bytes));
      break;
    case OpKind::kBarrier:
    case OpKind::kSplit:
      s.algorithm = "dissemination";
      s.phases.push_back(dissemination({all}, q));
      break;
    case OpKind::kSend:
    case OpKind::kRecv:
      s.algorithm = "direct";
      s.phases.push_back(direct({rotated(all, root)}, bytes, /*from_root=*/true));
      break;
  }
  return s;
}

Schedule plan_direct(OpKind kind, int q, std::int64_t bytes, int root) {
  Schedule s;
  s.algorithm = "direct";
  const auto all = iota_members(q);
  switch (kind) {
    case OpKind::kAllGather:
    case OpKind::kReduceScatter: s.phases.push_back(direct({all}, bytes)); break;
    case OpKind::kAllReduce:
      s.phases.push_back(direct({all}, ceil_div(bytes, q)));
      s.phases.push_back(direct({all}, ceil_div(bytes, q)));
      break;
    case OpKind::kBroadcast:
    case OpKind::kSend:
    case OpKind::kRecv: s.phases.push_back(direct({rotated(all, root)}, bytes, /*from_root=*/true)); break;
    case OpKind::kBarrier:
    case OpKind::kSplit: s.phases.push_back(direct({all}, 0)); break;
  }
  return s;
}

Schedule plan_halving_doubling(OpKind kind, int q, std::int64_t bytes, int root) {
  Schedule s;
  const auto all = iota_members(q);
  switch (kind) {
    case OpKind::kAllGather: s.phases.push_back(exchange({all}, q, bytes, /*halving=*/false)); break;
    case OpKind::kReduceScatter: s.phases.push_back(exchange({all}, q, bytes, /*halving=*/true)); break;
    case OpKind::kAllReduce:
      s.phases.push_back(exchange({all}, q, ceil_div(bytes, q), /*halving=*/true));
      s.phases.push_back(exchange({all}, q, ceil_div(bytes, q), /*halving=*/false));
      break;
    default: return plan_ring(kind, q, bytes, root);  // broadcast: binomial tree; barrier: dissemination
  }
  s.algorithm = "halving_doubling";
  return s;
}

// NOTE [Open MPI's nonblocking schedules] in sim/models/network/collectives.h.
Schedule plan_libnbc(OpKind kind, int q, std::int64_t bytes, int root) {
  Schedule s;
  const auto all = iota_members(q);
  switch (kind) {
    case OpKind::kAllGather:
      s.phases.push_back(is_pow2(q) ? exchange({all}, q, bytes, /*halving=*/false) : direct({all}, bytes));
      break;
    case OpKind::kReduceScatter:
      s.phases.push_back(binomial({all}, q, bytes * q, Primitive::kBinomialReduce));
      s.phases.push_back(direct({all}, bytes, /*from_root=*/true));
      break;
    case OpKind::kAllReduce:
      s.phases.push_back(binomial({all}, q, bytes, Primitive::kBinomialReduce));
      s.phases.push_back(binomial({all}, q, bytes, Primitive::kBinomialEager));
      break;
    default: return plan_ring(kind, q, bytes, root);  // broadcast: binomial tree; barrier: dissemination
  }
  s.algorithm = "libnbc";
  return s;
}

// Members grouped by node: nodes[k] = the group ranks on the k-th node (in order of first
// appearance). False when the nodes hold different numbers of members.
bool by_node(std::span<const int> world_ranks, const Topology& topo, std::vector<std::vector<int>>* nodes) {
  std::map<int, std::size_t> index;
  for (int g = 0; g < static_cast<int>(world_ranks.size()); ++g) {
    const int node = topo.node_of(world_ranks[static_cast<std::size_t>(g)]);
    auto [it, fresh] = index.emplace(node, nodes->size());
    if (fresh) nodes->emplace_back();
    (*nodes)[it->second].push_back(g);
  }
  for (const auto& n : *nodes) {
    if (n.size() != nodes->front().size()) return false;
  }
  return true;
}

Schedule plan_hierarchical(OpKind kind, std::int64_t bytes, int root, const std::vector<std::vector<int>>& nodes) {
  const int K = static_cast<int>(nodes.size());
  const int L = static_cast<int>(nodes.front().size());
  std::vector<std::vector<int>> rails(static_cast<std::size_t>(L));
  for (int l = 0; l < L; ++l) {
    for (int k = 0; k < K; ++k)
      rails[static_cast<std::size_t>(l)].push_back(nodes[static_cast<std::size_t>(k)][static_cast<std::size_t>(l)]);
  }
  Schedule s;
  s.algorithm = "hierarchical";
  auto add = [&](Phase p, int members) {
    if (members > 1) s.phases.push_back(std::move(p));
  };
  switch (kind) {
    case OpKind::kAllGather:
      add(ring(rails, K - 1, bytes), K);
      add(direct(nodes, bytes * K), L);
      break;
    case OpKind::kReduceScatter:
      add(direct(nodes, bytes * K), L);
      add(ring(rails, K - 1, bytes), K);
      break;
    case OpKind::kAllReduce: {
      const std::int64_t c1 = ceil_div(bytes, L), c2 = ceil_div(c1, K);
      add(direct(nodes, c1), L);
      add(ring(rails, 2 * (K - 1), c2), K);
      add(direct(nodes, c1), L);
      break;
    }
    case OpKind::kBroadcast:
    case OpKind::kSend:
    case OpKind::kRecv: {
      int root_node = 0, root_local = 0;
      for (int k = 0; k < K; ++k) {
        for (int l = 0; l < L; ++l) {
          if (nodes[static_cast<std::size_t>(k)][static_cast<std::size_t>(l)] == root) root_node = k, root_local = l;
        }
      }
      add(binomial({rotated(rails[static_cast<std::size_t>(root_local)], root_node)}, K, bytes), K);
      std::vector<std::vector<int>> led;
      for (const auto& n : nodes) led.push_back(rotated(n, root_local));
      add(direct(led, bytes, /*from_root=*/true), L);
      break;
    }
    case OpKind::kBarrier:
    case OpKind::kSplit:
      add(direct(nodes, 0), L);
      add(dissemination(rails, K), K);
      break;
  }
  return s;
}

}  // namespace

Schedule plan_collective(OpKind kind, std::span<const int> world_ranks, std::int64_t bytes, int root,
                         Algorithm requested, const Topology& topo) {
  const int q = static_cast<int>(world_ranks.size());
  SHARDLAB_CHECK_GT(q, 0);
  SHARDLAB_CHECK(root >= 0 && root < q);
  std::vector<std::vector<int>> nodes;
  const bool even = by_node(world_ranks, topo, &nodes);
  Algorithm a = requested;
  if (a == Algorithm::kAuto) {
    const bool clique = topo.spec().kind == TopologyKind::kHls || topo.spec().kind == TopologyKind::kFullyConnected;
    const std::int64_t total = (kind == OpKind::kAllGather || kind == OpKind::kReduceScatter) ? bytes * q : bytes;
    if (q == 1) {
      a = Algorithm::kRing;
    } else if (topo.spec().kind == TopologyKind::kRing) {
      a = Algorithm::kRing;
    } else if (nodes.size() == 1 && clique && q <= kMaxDirectMembers) {
      a = Algorithm::kDirect;
    } else if (topo.spec().kind == TopologyKind::kHls && even && nodes.front().size() >= 2) {
      a = Algorithm::kHierarchical;
    } else if (total <= kSmallCollectiveBytes && is_pow2(q)) {
      a = Algorithm::kHalvingDoubling;
    } else {
      a = Algorithm::kRing;
    }
  }
  switch (a) {
    case Algorithm::kDirect:
      if (q <= kMaxDirectMembers) return plan_direct(kind, q, bytes, root);
      break;
    case Algorithm::kHalvingDoubling:
      if (is_pow2(q)) return plan_halving_doubling(kind, q, bytes, root);
      break;
    case Algorithm::kHierarchical:
      if (even) return plan_hierarchical(kind, bytes, root, nodes);
      break;
    case Algorithm::kLibnbc:
      if (q > 1) return plan_libnbc(kind, q, bytes, root);
      break;
    default: break;
  }
  return plan_ring(kind, q, bytes, root);
}

// ---- evaluation ---------------------------------------------------------------------------

namespace {

// The messages of one round of a phase, in group ranks.
struct Round {
  std::vector<int> src, dst;
  std::vector<std::int64_t> bytes;
  std::vector<Priced> priced;
  void add(int s, int d, std::int64_t b) {
    src.push_back(s);
    dst.push_back(d);
    bytes.push_back(b);
  }
  std::size_t size() const { return src.size(); }
};

void build_round(const Phase& ph, int j, Round* r) {
  const auto uj = static_cast<std::size_t>(j);
  for (const auto& g : ph.groups) {
    const int q = static_cast<int>(g.size());
    if (q < 2) continue;
    auto m = [&](int i) { return g[static_cast<std::size_t>(i)]; };
    switch (ph.primitive) {
      case Primitive::kRing:
        for (int k = 0; k < q; ++k) r->add(m(k), m((k + 1) % q), ph.bytes[0]);
        break;
      case Primitive::kDirect:
        for (int a = 0; a < q; ++a) {
          for (int b = 0; b < q; ++b) {
            if (a != b) r->add(m(a), m(b), ph.bytes[0]);
          }
        }
        break;
      case Primitive::kDirectFromRoot:
        for (int b = 1; b < q; ++b) r->add(m(0), m(b), ph.bytes[0]);
        break;
      case Primitive::kExchange: {
        const int d = ph.distances[uj];
        for (int v = 0; v < q; ++v) {
          const int u = v ^ d;
          if (u < q) r->add(m(v), m(u), ph.bytes[uj]);
        }
        break;
      }
      case Primitive::kDissemination: {
        const int d = 1 << j;
        for (int v = 0; v < q; ++v) r->add(m(v), m((v + d) % q), ph.bytes[uj]);
        break;
      }
      case Primitive::kBinomialTree: {
        const int d = 1 << j;
        for (int v = 0; v < d && v + d < q; ++v) r->add(m(v), m(v + d), ph.bytes[uj]);
        break;
      }
      case Primitive::kBinomialReduce: {
        const int d = 1 << j;
        for (int v = 0; v + d < q; v += 2 * d) r->add(m(v + d), m(v), ph.bytes[uj]);
        break;
      }
      case Primitive::kBinomialEager:
        for (int v = 0; v < q; ++v) {
          if (std::popcount(static_cast<unsigned>(v)) != j) continue;
          for (int d = 1; v + d < q; d *= 2) {
            if (d > v) r->add(m(v), m(v + d), ph.bytes[uj]);
          }
        }
        break;
    }
  }
}

void price(Round* r, std::span<const int> world_ranks, const PriceRound& pricer) {
  std::vector<Transfer> msgs(r->size());
  for (std::size_t i = 0; i < r->size(); ++i) {
    msgs[i] = {world_ranks[static_cast<std::size_t>(r->src[i])], world_ranks[static_cast<std::size_t>(r->dst[i])],
               r->bytes[i]};
  }
  r->priced.assign(r->size(), Priced{});
  if (!msgs.empty()) pricer(msgs, r->priced);
}

// The ring recurrence F(k, s) = m_k + max(b_k, F(k-1, s-1)), b_k = max(r_k, r_{k+1}),
// unrolled: F(k, S-1) = max_{t<S} (b_{k-t} + m_{k-t} + … + m_k). On the line unrolled
// S-1 places to the left (e ↔ member (e-S+1) mod q) with prefix sums P of m, that is
// P[e_k+1] + max_{e in (e_k-S, e_k]} (b_e - P[e]): a sliding-window maximum, O(q + S).
void ring_fast(const std::vector<int>& g, int S, const Nanos* m, std::vector<Nanos>& t) {
  const int q = static_cast<int>(g.size());
  if (q < 2 || S == 0) return;
  const auto r = [&](int k) { return t[static_cast<std::size_t>(g[static_cast<std::size_t>(k)])]; };
  const int len = q + S - 1;
  const auto member = [&](int e) { return (((e - (S - 1)) % q) + q) % q; };
  // 128-bit sums: q + S terms of at most kTimeLimit each cannot overflow them, so the
  // recurrence stays exact, and F is clamped to kTimeLimit (NOTE [Virtual time limit]).
  __extension__ typedef __int128 Wide;  // a GCC/Clang extension; __extension__ keeps -Wpedantic quiet
  std::vector<Wide> P(static_cast<std::size_t>(len) + 1, 0), C(static_cast<std::size_t>(len));
  for (int e = 0; e < len; ++e) {
    const int k = member(e);
    const Nanos b = std::max(r(k), r((k + 1) % q));
    C[static_cast<std::size_t>(e)] = b - P[static_cast<std::size_t>(e)];
    P[static_cast<std::size_t>(e) + 1] = P[static_cast<std::size_t>(e)] + m[k];
  }
  std::vector<Nanos> F(static_cast<std::size_t>(q));
  std::deque<int> window;  // indices with decreasing C
  for (int e = 0; e < len; ++e) {
    while (!window.empty() && C[static_cast<std::size_t>(window.back())] <= C[static_cast<std::size_t>(e)])
      window.pop_back();
    window.push_back(e);
    if (window.front() <= e - S) window.pop_front();
    if (e >= S - 1) {
      const Wide f = P[static_cast<std::size_t>(e) + 1] + C[static_cast<std::size_t>(window.front())];
      F[static_cast<std::size_t>(member(e))] = f >= kTimeLimit ? kTimeLimit : static_cast<Nanos>(f);
    }
  }
  std::vector<Nanos> done(static_cast<std::size_t>(q));
  for (int k = 0; k < q; ++k) {
    done[static_cast<std::size_t>(k)] =
        std::max({r(k), F[static_cast<std::size_t>(k)], F[static_cast<std::size_t>((k - 1 + q) % q)]});
  }
  for (int k = 0; k < q; ++k)
    t[static_cast<std::size_t>(g[static_cast<std::size_t>(k)])] = done[static_cast<std::size_t>(k)];
}

}  // namespace

std::vector<Nanos> evaluate_schedule(const Schedule& s, std::span<const int> world_ranks,
                                     std::span<const Nanos> arrivals, const PriceRound& pricer) {
  SHARDLAB_CHECK_EQ(world_ranks.size(), arrivals.size());
  std::vector<Nanos> t(arrivals.begin(), arrivals.end());
  for (const Phase& ph : s.phases) {
    for (int j = 0; j < ph.rounds(); ++j) {
      Round r;
      build_round(ph, j, &r);
      price(&r, world_ranks, pricer);
      if (ph.primitive == Primitive::kRing) {
        std::size_t offset = 0;
        std::vector<Nanos> m;
        for (const auto& g : ph.groups) {
          if (g.size() < 2) continue;
          m.clear();
          for (std::size_t k = 0; k < g.size(); ++k) m.push_back(r.priced[offset + k].cost(r.bytes[offset + k]));
          ring_fast(g, ph.steps, m.data(), t);
          offset += g.size();
        }
        continue;
      }
      // Every other primitive: the round's messages start when both ends are ready
      // (snapshot of the previous round) and each end is done at its latest message.
      std::vector<Nanos> next = t;
      for (std::size_t i = 0; i < r.size(); ++i) {
        const auto a = static_cast<std::size_t>(r.src[i]), b = static_cast<std::size_t>(r.dst[i]);
        const Nanos fin = add_time(std::max(t[a], t[b]), r.priced[i].cost(r.bytes[i]));
        next[a] = std::max(next[a], fin);
        next[b] = std::max(next[b], fin);
      }
      t = std::move(next);
    }
  }
  return t;
}

std::vector<Nanos> simulate_schedule(const Schedule& s, std::span<const int> world_ranks,
                                     std::span<const Nanos> arrivals, const PriceRound& pricer,
                                     const FinishTime& finish, Transfer* blocked) {
  SHARDLAB_CHECK_EQ(world_ranks.size(), arrivals.size());
  const std::size_t p = arrivals.size();
  std::vector<Nanos> t(arrivals.begin(), arrivals.end());
  struct Msg {
    int src, dst;
    std::int64_t bytes;
    Priced priced;
    Nanos ready = 0;  // latest dependency finish
    int pending = 0;
    std::vector<int> dependents;
    Nanos finished = kNever;
  };
  for (const Phase& ph : s.phases) {
    std::vector<Msg> msgs;
    // Round-based primitives: per member, the messages of its latest active round.
    std::vector<std::vector<int>> latest(p);
    for (int j = 0; j < ph.rounds(); ++j) {
      Round r;
      build_round(ph, j, &r);
      price(&r, world_ranks, pricer);
      if (ph.primitive == Primitive::kRing) {
        // Transfer (k, step) depends on (k-1, step-1): send step s once step s-1 arrived.
        std::size_t offset = 0;
        for (const auto& g : ph.groups) {
          const int q = static_cast<int>(g.size());
          if (q < 2) continue;
          const int base = static_cast<int>(msgs.size());
          for (int step = 0; step < ph.steps; ++step) {
            for (int k = 0; k < q; ++k) {
              const std::size_t ri = offset + static_cast<std::size_t>(k);
              msgs.push_back({r.src[ri], r.dst[ri], r.bytes[ri], r.priced[ri], 0, 0, {}, kNever});
              if (step > 0) {
                const int dep = base + (step - 1) * q + (k - 1 + q) % q;
                msgs[static_cast<std::size_t>(dep)].dependents.push_back(static_cast<int>(msgs.size()) - 1);
                msgs.back().pending = 1;
              }
            }
          }
          offset += static_cast<std::size_t>(q);
        }
        continue;
      }
      std::vector<std::vector<int>> now(p);
      for (std::size_t i = 0; i < r.size(); ++i) {
        const int id = static_cast<int>(msgs.size());
        msgs.push_back({r.src[i], r.dst[i], r.bytes[i], r.priced[i], 0, 0, {}, kNever});
        std::vector<int> deps = latest[static_cast<std::size_t>(r.src[i])];
        for (int d : latest[static_cast<std::size_t>(r.dst[i])]) deps.push_back(d);
        std::sort(deps.begin(), deps.end());
        deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
        for (int d : deps) msgs[static_cast<std::size_t>(d)].dependents.push_back(id);
        msgs.back().pending = static_cast<int>(deps.size());
        now[static_cast<std::size_t>(r.src[i])].push_back(id);
        now[static_cast<std::size_t>(r.dst[i])].push_back(id);
      }
      for (std::size_t x = 0; x < p; ++x) {
        if (!now[x].empty()) latest[x] = std::move(now[x]);
      }
    }
    Engine engine;
    std::function<void(int)> start;
    start = [&](int id) {
      Msg& m = msgs[static_cast<std::size_t>(id)];
      const Nanos gate = std::max(t[static_cast<std::size_t>(m.src)], t[static_cast<std::size_t>(m.dst)]);
      if (gate == kNever) return;
      const Nanos at = std::max(gate, m.ready);
      const Transfer wm{world_ranks[static_cast<std::size_t>(m.src)], world_ranks[static_cast<std::size_t>(m.dst)],
                        m.bytes};
      const Nanos fin = finish ? finish(wm, m.priced, at) : add_time(at, m.priced.cost(m.bytes));
      if (fin == kNever) {
        if (blocked != nullptr) *blocked = wm;
        return;
      }
      engine.schedule_at(fin, [&, id]() {
        Msg& done = msgs[static_cast<std::size_t>(id)];
        done.finished = engine.now();
        for (int d : done.dependents) {
          Msg& n = msgs[static_cast<std::size_t>(d)];
          n.ready = std::max(n.ready, engine.now());
          if (--n.pending == 0) start(d);
        }
      });
    };
    for (std::size_t i = 0; i < msgs.size(); ++i) {
      if (msgs[i].pending == 0) start(static_cast<int>(i));
    }
    engine.run();
    std::vector<Nanos> next = t;
    for (const Msg& m : msgs) {
      for (int x : {m.src, m.dst}) {
        auto& n = next[static_cast<std::size_t>(x)];
        n = m.finished == kNever ? kNever : (n == kNever ? kNever : std::max(n, m.finished));
      }
    }
    t = std::move(next);
  }
  return t;
}

}  // namespace shardlab::sim
