#include "sim/models/network/network.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <vector>

#include "runtime/core/check.h"

namespace shardlab::sim {

namespace {

class AlphaBetaRing final : public NetworkCostModel {
 public:
  explicit AlphaBetaRing(NetworkModel net) : net_(net) {}

  CollectiveTiming collective(const CollectiveQuery& q) const override {
    const std::vector<Nanos> arrivals(q.arrivals.begin(), q.arrivals.end());
    const bool ring = q.kind == runtime::comm::OpKind::kAllGather || q.kind == runtime::comm::OpKind::kReduceScatter ||
                      q.kind == runtime::comm::OpKind::kAllReduce;
    return {collective_completion_times(q.kind, arrivals, q.bytes, net_),
            ring ? "ring" : (q.kind == runtime::comm::OpKind::kBroadcast ? "binomial_tree" : "dissemination")};
  }

  Nanos message(int, int, std::int64_t bytes, Nanos start) const override {
    return add_time(start, net_.message_time(bytes));
  }

  std::string describe() const override {
    char buf[128];
    std::snprintf(buf, sizeof buf, "alpha-beta ring, %.3g us latency, %.3g GB/s per link",
                  static_cast<double>(net_.latency_ns) / 1e3, net_.bandwidth_bytes_per_s / 1e9);
    return buf;
  }

 private:
  NetworkModel net_;
};

}  // namespace

std::int64_t reduced_bytes(runtime::comm::OpKind kind, std::int64_t group_size, std::int64_t bytes) {
  const std::int64_t p = group_size;
  if (kind == runtime::comm::OpKind::kReduceScatter) return p > 1 ? (p - 1) * bytes : bytes;
  if (kind == runtime::comm::OpKind::kAllReduce) return (p - 1) * ((bytes + p - 1) / p);
  return 0;
}

SplitGroups SplitGroups::of(std::vector<std::vector<int>> groups) {
  SplitGroups s;
  int top = -1;
  for (const std::vector<int>& g : groups) {
    for (int r : g) top = std::max(top, r);
  }
  s.group_of.assign(static_cast<std::size_t>(top) + 1, -1);
  for (std::size_t i = 0; i < groups.size(); ++i) {
    for (int r : groups[i]) {
      SHARDLAB_CHECK(r >= 0 && s.group_of[static_cast<std::size_t>(r)] == -1);  // disjoint
      s.group_of[static_cast<std::size_t>(r)] = static_cast<int>(i);
    }
  }
  s.groups = std::move(groups);
  return s;
}

std::shared_ptr<const NetworkCostModel> make_alpha_beta_ring(NetworkModel net) {
  return std::make_shared<const AlphaBetaRing>(net);
}

std::string_view network_model_name(NetworkModelKind k) {
  return k == NetworkModelKind::kAlphaBeta ? "alpha_beta" : "contention";
}

Result<NetworkModelKind> parse_network_model(std::string_view text) {
  if (text == "alpha_beta") return NetworkModelKind::kAlphaBeta;
  if (text == "contention") return NetworkModelKind::kContention;
  return Status::invalid_argument("unknown network model '" + std::string(text) + "'; allowed: alpha_beta, contention");
}

namespace {

struct Window {
  LinkId link;
  Nanos start, end;
  double factor;
  std::string name;  // the fault's link name
};

// price_fair's working arrays (see there).
struct FairScratch {
  std::vector<LinkId> route_links;                    // every flow's links, flow after flow
  std::vector<std::size_t> route_first;               // CSR into route_links, per flow
  std::vector<int> flow_of;                           // per route position: its flow
  std::vector<std::pair<LinkId, std::int64_t>> uses;  // (link, route position), sorted
  std::vector<std::size_t> dense_of;                  // per route position: its link's dense index
  std::vector<LinkId> links;                          // the round's links, by id
  std::vector<std::size_t> first;                     // CSR into uses, per dense link
  std::vector<double> cap;                            // remaining capacity, per dense link
  std::vector<int> unfrozen;                          // flows not yet given a rate, per dense link
  std::vector<char> frozen;                           // per flow
  std::vector<int> freeze;                            // the flows frozen in one filling step
};

class TopologyNetwork final : public NetworkCostModel {
 public:
  TopologyNetwork(Topology topo, NetworkModelKind model, Algorithm algorithm, std::vector<Window> windows)
      : topo_(std::move(topo)), model_(model), algorithm_(algorithm), windows_(std::move(windows)) {
    std::sort(windows_.begin(), windows_.end(),
              [](const Window& a, const Window& b) { return a.link != b.link ? a.link < b.link : a.start < b.start; });
    for (const Window& w : windows_) last_end_ = std::max(last_end_, w.end);
  }

  CollectiveTiming collective(const CollectiveQuery& q) const override {
    SHARDLAB_CHECK_EQ(q.world_ranks.size(), q.arrivals.size());
    SHARDLAB_CHECK_GT(q.world_ranks.size(), 0u);
    for (int r : q.world_ranks) SHARDLAB_CHECK(r >= 0 && r < topo_.devices());
    const Schedule s = plan_collective(q.kind, q.world_ranks, q.bytes, q.root, algorithm_, topo_);
    const Concurrent others = concurrent_with(q);
    std::vector<Transfer> joint;
    std::vector<Priced> joint_out;
    const PriceRound pricer = [&](std::span<const Transfer> round, std::span<Priced> out) {
      if (model_ == NetworkModelKind::kContention && !others.groups.empty()) {
        // NOTE [Concurrent groups]: the same round of every other group, member by member.
        joint.assign(round.begin(), round.end());
        for (const std::vector<int>* g : others.groups) {
          for (const Transfer& m : round) {
            joint.push_back({(*g)[others.position(m.src)], (*g)[others.position(m.dst)], m.bytes});
          }
        }
        joint_out.resize(joint.size());
        price_fair(joint, joint_out);
        std::copy_n(joint_out.begin(), out.size(), out.begin());
      } else if (model_ == NetworkModelKind::kContention) {
        price_fair(round, out);
      } else {
        for (std::size_t i = 0; i < round.size(); ++i)
          topo_.route_cost(round[i].src, round[i].dst, &out[i].latency_ns, &out[i].bytes_per_s);
      }
    };
    CollectiveTiming t;
    t.algorithm = s.algorithm;
    const Nanos earliest = *std::min_element(q.arrivals.begin(), q.arrivals.end());
    if (!faults_after(earliest)) {
      // NOTE [Measured collectives] in sim/models/network/topology.h.
      if (const auto m = topo_.spec().measured.time(q.kind, static_cast<int>(q.world_ranks.size()), q.bytes)) {
        t.algorithm = "measured";
        t.done.assign(q.world_ranks.size(), add_time(*std::max_element(q.arrivals.begin(), q.arrivals.end()), *m));
        check_time_limit(q, t);
        return t;
      }
      t.done = evaluate_schedule(s, q.world_ranks, q.arrivals, pricer);
      add_host_costs(q, t.done);
      check_time_limit(q, t);
      return t;
    }
    Transfer blocked{-1, -1, 0};
    const FinishTime finish = [this](const Transfer& m, const Priced& p, Nanos start) {
      return finish_time(m, p, start);
    };
    t.done = simulate_schedule(s, q.world_ranks, q.arrivals, pricer, finish, &blocked);
    if (std::find(t.done.begin(), t.done.end(), kNever) != t.done.end()) {
      std::fill(t.done.begin(), t.done.end(), kNever);
      t.status = Status::unavailable(std::string(runtime::comm::op_kind_name(q.kind)) + " of " +
                                     std::to_string(q.world_ranks.size()) + " ranks (" + s.algorithm +
                                     ") cannot complete: " + down_reason(blocked));
    } else {
      add_host_costs(q, t.done);
      check_time_limit(q, t);
    }
    return t;
  }

  Nanos message(int src, int dst, std::int64_t bytes, Nanos start) const override {
    SHARDLAB_CHECK(src >= 0 && src < topo_.devices() && dst >= 0 && dst < topo_.devices());
    Priced p;
    topo_.route_cost(src, dst, &p.latency_ns, &p.bytes_per_s);
    if (!faults_after(start)) return add_time(start, p.cost(bytes));
    return finish_time({src, dst, bytes}, p, start);
  }

  std::string describe() const override {
    std::string d = topo_.describe() + "; " + std::string(network_model_name(model_)) + " model, " +
                    std::string(algorithm_name(algorithm_)) + " collectives";
    if (!windows_.empty()) d += ", " + std::to_string(windows_.size()) + " link fault window(s)";
    if (const int p = topo_.spec().measured.ranks; p > 0) {
      d += ", measured collectives for groups of " + std::to_string(p);
    }
    if (host_progress()) d += ", progressed by the host";
    return d;
  }
  bool host_progress() const override { return topo_.spec().host_progress; }
  bool prices_concurrent_groups() const override { return model_ == NetworkModelKind::kContention; }

 private:
  // NOTE [Concurrent groups]: the other groups of q's split of its size, and each world
  // rank's place in q's group.
  struct Concurrent {
    std::vector<const std::vector<int>*> groups;
    std::vector<std::pair<int, int>> place;  // (world rank, group rank), sorted
    std::size_t position(int world_rank) const {
      const auto it = std::lower_bound(place.begin(), place.end(), std::pair<int, int>{world_rank, -1});
      SHARDLAB_CHECK(it != place.end() && it->first == world_rank);
      return static_cast<std::size_t>(it->second);
    }
  };
  Concurrent concurrent_with(const CollectiveQuery& q) const {
    Concurrent c;
    if (model_ != NetworkModelKind::kContention || q.split == nullptr || q.split->groups.size() < 2) return c;
    // The split's groups with a member on one of q's nodes.
    const int dpn = topo_.devices_per_node();
    std::vector<int> nodes, found;
    for (int r : q.world_ranks) nodes.push_back(topo_.node_of(r));
    std::sort(nodes.begin(), nodes.end());
    nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
    const std::vector<int>& group_of = q.split->group_of;
    for (int n : nodes) {
      for (int d = n * dpn; d < (n + 1) * dpn && d < static_cast<int>(group_of.size()); ++d) {
        if (group_of[static_cast<std::size_t>(d)] >= 0) found.push_back(group_of[static_cast<std::size_t>(d)]);
      }
    }
    std::sort(found.begin(), found.end());
    found.erase(std::unique(found.begin(), found.end()), found.end());
    auto ranks = static_cast<std::int64_t>(q.world_ranks.size());
    for (int i : found) {
      const std::vector<int>& g = q.split->groups[static_cast<std::size_t>(i)];
      // Groups of one split are disjoint: the first member tells q's own group apart.
      if (g.size() != q.world_ranks.size() || g.front() == q.world_ranks.front()) continue;
      for (int r : g) SHARDLAB_CHECK(r >= 0 && r < topo_.devices());
      c.groups.push_back(&g);
      ranks += static_cast<std::int64_t>(g.size());
    }
    if (ranks > kMaxConcurrentRanks) c.groups.clear();
    if (c.groups.empty()) return c;
    for (std::size_t k = 0; k < q.world_ranks.size(); ++k) c.place.push_back({q.world_ranks[k], static_cast<int>(k)});
    std::sort(c.place.begin(), c.place.end());
    return c;
  }

  bool faults_after(Nanos t) const { return !windows_.empty() && last_end_ > t; }

  // NOTE [Virtual time limit]: a collective that would end there fails on every member,
  // naming the topology's rate keys.
  void check_time_limit(const CollectiveQuery& q, CollectiveTiming& t) const {
    if (std::none_of(t.done.begin(), t.done.end(), [](Nanos d) { return d >= kTimeLimit && d != kNever; })) return;
    const TopologySpec& spec = topo_.spec();
    char rates[256];
    std::snprintf(rates, sizeof rates, "%s%.4g, efficiency = %.4g, reduce_gbyte_per_s = %.4g%s",
                  spec.kind == TopologyKind::kSwitch ? "port.gbit_per_s = " : "peer.gbit_per_s = ",
                  spec.kind == TopologyKind::kSwitch ? spec.port.gbit_per_s : spec.peer.gbit_per_s, spec.efficiency,
                  spec.reduce_bytes_per_s / 1e9,
                  spec.kind == TopologyKind::kHls ? ", port.gbit_per_s, oversubscription" : "");
    t.status = Status::invalid_argument(
        "topology profile '" + spec.name + "': " + std::string(runtime::comm::op_kind_name(q.kind)) + " of " +
        std::to_string(q.world_ranks.size()) + " ranks (" + t.algorithm + ", " + std::to_string(q.bytes) +
        " bytes) would end past the simulator's virtual time limit of 2^62 ns, about 146 years (NOTE [Virtual time "
        "limit] in sim/models/device/cost_model.h): its rates are too slow for this run (" +
        rates + "); allowed: link rates that keep the run within the limit");
  }

  // NOTE [Reduction cost] in sim/models/network/topology.h: each member reduces (p-1) chunks of its result.
  // Also NOTE [Collective overhead]: every member, every kind, any group size — except a
  // one-member group under libnbc, which Open MPI completes without building a schedule (a
  // no-op request; reduce_scatter's copy is the reduction term), where the overhead
  // calibrated on p-member groups (~25 µs on 4 oversubscribed processes) would be charged
  // to calls that cost ~1 µs.
  void add_host_costs(const CollectiveQuery& q, std::vector<Nanos>& done) const {
    const bool schedule_free = algorithm_ == Algorithm::kLibnbc && q.world_ranks.size() == 1;
    if (const Nanos o = topo_.spec().collective_overhead_ns; o > 0 && !schedule_free) {
      for (Nanos& d : done) d = add_time(d, o);
    }
    const double rate = topo_.spec().reduce_bytes_per_s;
    if (!(rate > 0)) return;
    const std::int64_t reduced = reduced_bytes(q.kind, static_cast<std::int64_t>(q.world_ranks.size()), q.bytes);
    if (reduced == 0) return;
    const Nanos t = to_nanos(static_cast<double>(reduced) * 1e9 / rate);
    for (Nanos& d : done) d = add_time(d, t);
  }

  // The windows on a route's links.
  std::vector<const Window*> windows_on(const Route& r) const {
    std::vector<const Window*> out;
    for (LinkId l : r.links) {
      auto it =
          std::lower_bound(windows_.begin(), windows_.end(), l, [](const Window& w, LinkId id) { return w.link < id; });
      for (; it != windows_.end() && it->link == l; ++it) out.push_back(&*it);
    }
    return out;
  }

  // NOTE [Link faults]: stream the bytes piecewise between window edges; round once.
  Nanos finish_time(const Transfer& m, const Priced& p, Nanos start) const {
    if (m.bytes == 0 || m.src == m.dst) return add_time(start, p.cost(m.bytes));
    const auto ws = windows_on(topo_.route(m.src, m.dst));
    if (ws.empty()) return add_time(start, p.cost(m.bytes));
    std::vector<Nanos> edges;
    for (const Window* w : ws) {
      if (w->start > start) edges.push_back(w->start);
      if (w->end > start && w->end != kNever) edges.push_back(w->end);
    }
    std::sort(edges.begin(), edges.end());
    edges.erase(std::unique(edges.begin(), edges.end()), edges.end());
    double remaining = static_cast<double>(m.bytes), elapsed_ns = 0;
    Nanos at = start;
    for (std::size_t e = 0;; ++e) {
      const Nanos next = e < edges.size() ? edges[e] : kNever;
      double factor = 1.0;
      for (const Window* w : ws) {
        if (w->start <= at && at < w->end) factor = std::min(factor, w->factor);
      }
      const double rate = p.bytes_per_s * factor;
      if (rate > 0) {
        const double need_ns = remaining * 1e9 / rate;
        if (next == kNever || static_cast<double>(at) + need_ns <= static_cast<double>(next)) {
          elapsed_ns += need_ns;
          break;
        }
        remaining -= static_cast<double>(next - at) * rate / 1e9;
      } else if (next == kNever) {
        return kNever;
      }
      elapsed_ns += static_cast<double>(next - at);
      at = next;
    }
    return add_time(add_time(start, p.latency_ns), to_nanos(elapsed_ns));
  }

  std::string down_reason(const Transfer& m) const {
    if (m.src >= 0) {
      for (const Window* w : windows_on(topo_.route(m.src, m.dst))) {
        if (w->factor == 0 && w->end == kNever) {
          return "link " + w->name + " is down from t=" + std::to_string(w->start) + " ns on (no end); the message " +
                 std::to_string(m.src) + " -> " + std::to_string(m.dst) + " has no other route";
        }
      }
    }
    return "a link on its route is down for good";
  }

  // Max–min fair rates by progressive filling: repeatedly find the links whose remaining
  // capacity per unfrozen flow is smallest, give their unfrozen flows that share, and
  // take it off every link those flows cross. Deterministic: links in id order, flows in
  // round order, exact double arithmetic in a fixed order.
  void price_fair(std::span<const Transfer> round, std::span<Priced> out) const {
    // The working arrays, kept per thread: a replay prices rounds of up to
    // kMaxConcurrentRanks flows many times, and allocating them per flow and per round
    // cost as much as the pricing (the buffers hold no state between calls).
    thread_local FairScratch s;
    s.route_links.clear();
    s.route_first.clear();
    s.flow_of.clear();
    s.uses.clear();
    for (std::size_t f = 0; f < round.size(); ++f) {
      double unused_bps = 0;
      topo_.route_cost(round[f].src, round[f].dst, &out[f].latency_ns, &unused_bps);
      out[f].bytes_per_s = 0;
      s.route_first.push_back(s.route_links.size());
      topo_.append_route_links(round[f].src, round[f].dst, &s.route_links);
    }
    s.route_first.push_back(s.route_links.size());
    // (link, position in route_links): positions grow with the flow, so the order is that
    // of (link, flow) — a route crosses a link at most once.
    for (std::size_t f = 0; f < round.size(); ++f) {
      for (std::size_t i = s.route_first[f]; i < s.route_first[f + 1]; ++i) {
        s.uses.push_back({s.route_links[i], static_cast<std::int64_t>(i)});
        s.flow_of.push_back(static_cast<int>(f));
      }
    }
    std::sort(s.uses.begin(), s.uses.end());
    // Links (dense index), their flows, remaining capacity and unfrozen flow counts; each
    // route position's dense link.
    s.links.clear();
    s.first.clear();  // CSR into uses
    s.dense_of.resize(s.route_links.size());
    for (std::size_t i = 0; i < s.uses.size(); ++i) {
      if (i == 0 || s.uses[i].first != s.uses[i - 1].first) {
        s.links.push_back(s.uses[i].first);
        s.first.push_back(i);
      }
      s.dense_of[static_cast<std::size_t>(s.uses[i].second)] = s.links.size() - 1;
    }
    s.first.push_back(s.uses.size());
    const std::size_t nl = s.links.size();
    s.cap.resize(nl);
    s.unfrozen.resize(nl);
    for (std::size_t l = 0; l < nl; ++l) {
      s.cap[l] = topo_.link_bytes_per_s(s.links[l]);
      s.unfrozen[l] = static_cast<int>(s.first[l + 1] - s.first[l]);
    }
    s.frozen.assign(round.size(), 0);
    for (;;) {
      double share = -1;
      for (std::size_t l = 0; l < nl; ++l) {
        if (s.unfrozen[l] > 0) {
          const double x = s.cap[l] / s.unfrozen[l];
          if (share < 0 || x < share) share = x;
        }
      }
      if (share < 0) break;
      s.freeze.clear();
      for (std::size_t l = 0; l < nl; ++l) {
        if (s.unfrozen[l] > 0 && s.cap[l] / s.unfrozen[l] == share) {
          for (std::size_t u = s.first[l]; u < s.first[l + 1]; ++u) {
            const auto f = static_cast<std::size_t>(s.flow_of[static_cast<std::size_t>(s.uses[u].second)]);
            if (!s.frozen[f]) {
              s.frozen[f] = 1;
              s.freeze.push_back(static_cast<int>(f));
            }
          }
        }
      }
      for (int f : s.freeze) {
        out[static_cast<std::size_t>(f)].bytes_per_s = share;
        for (std::size_t i = s.route_first[static_cast<std::size_t>(f)];
             i < s.route_first[static_cast<std::size_t>(f) + 1]; ++i) {
          const std::size_t l = s.dense_of[i];
          s.cap[l] = std::max(0.0, s.cap[l] - share);
          --s.unfrozen[l];
        }
      }
    }
  }

  Topology topo_;
  NetworkModelKind model_;
  Algorithm algorithm_;
  std::vector<Window> windows_;
  Nanos last_end_ = 0;
};

}  // namespace

Result<std::shared_ptr<const NetworkCostModel>> make_network(const NetworkSpec& spec, TopologySpec topology) {
  SHARDLAB_ASSIGN_OR_RETURN(Topology topo, Topology::create(std::move(topology), spec.nodes, spec.devices_per_node));
  std::vector<Window> windows;
  for (std::size_t i = 0; i < spec.link_faults.size(); ++i) {
    const LinkFault& f = spec.link_faults[i];
    const std::string where = "link fault #" + std::to_string(i + 1) + " (" + f.link + ")";
    if (!(f.factor >= 0 && f.factor <= 1)) {
      return Status::invalid_argument(where + ": factor " + std::to_string(f.factor) +
                                      " out of range; allowed: [0, 1] (0: link down)");
    }
    if (f.start < 0 || f.end <= f.start) {
      return Status::invalid_argument(where + ": window [" + std::to_string(f.start) + ", " +
                                      (f.end == kNever ? std::string("open") : std::to_string(f.end)) +
                                      ") ns; allowed: 0 <= start < end (or no end)");
    }
    auto ids = topo.parse_link(f.link);
    if (!ids.is_ok()) return ids.status().with_context(where);
    for (LinkId id : *ids) windows.push_back({id, f.start, f.end, f.factor, f.link});
  }
  return std::shared_ptr<const NetworkCostModel>(
      std::make_shared<const TopologyNetwork>(std::move(topo), spec.model, spec.algorithm, std::move(windows)));
}

Result<std::shared_ptr<const NetworkCostModel>> make_network(const NetworkSpec& spec) {
  SHARDLAB_ASSIGN_OR_RETURN(TopologySpec topology, load_topology(spec.topology));
  return make_network(spec, std::move(topology));
}

}  // namespace shardlab::sim
