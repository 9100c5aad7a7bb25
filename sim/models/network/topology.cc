#include "sim/models/network/topology.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "runtime/core/check.h"
#include "sim/models/device/profile_json.h"
#include "sim/models/device/profiles.h"

namespace shardlab::sim {

namespace {

// LinkId = kind << 48 | index (NOTE: computed, never tabulated, so huge worlds cost nothing).
enum LinkKind : std::int64_t { kPeer = 0, kPortUp = 1, kPortDown = 2, kLeafUp = 3, kLeafDown = 4 };
constexpr int kKindShift = 48;
constexpr int kMaxDevices = 1 << 20;

LinkId make_link(LinkKind kind, std::int64_t index) { return (static_cast<std::int64_t>(kind) << kKindShift) | index; }
LinkKind kind_of(LinkId id) { return static_cast<LinkKind>(id >> kKindShift); }
std::int64_t index_of(LinkId id) { return id & ((std::int64_t{1} << kKindShift) - 1); }

double payload_bps(const LinkSpec& l, double efficiency) { return l.gbit_per_s * 1e9 / 8.0 * efficiency; }

}  // namespace

std::string_view topology_kind_name(TopologyKind kind) {
  switch (kind) {
    case TopologyKind::kHls: return "hls";
    case TopologyKind::kFullyConnected: return "fully_connected";
    case TopologyKind::kSwitch: return "switch";
    case TopologyKind::kRing: return "ring";
  }
  return "?";
}

Topology::Topology(TopologySpec spec, int nodes, int devices_per_node)
    : spec_(std::move(spec)), nodes_(nodes), devices_per_node_(devices_per_node) {
  peer_bps_ = payload_bps(spec_.peer, spec_.efficiency);
  port_bps_ = payload_bps(spec_.port, spec_.efficiency);
  const int nodes_under_leaf = spec_.nodes_per_leaf > 0 ? std::min(spec_.nodes_per_leaf, nodes_) : nodes_;
  leaf_bps_ = port_bps_ * nodes_under_leaf * (spec_.port_per_node ? 1 : devices_per_node_) / spec_.oversubscription;
}

Result<Topology> Topology::create(TopologySpec spec, int nodes, int devices_per_node) {
  if (nodes < 1 || devices_per_node < 1) {
    return Status::invalid_argument("topology " + spec.name + ": nodes (" + std::to_string(nodes) +
                                    ") and devices_per_node (" + std::to_string(devices_per_node) + ") must be >= 1");
  }
  if (spec.max_devices_per_node > 0 && devices_per_node > spec.max_devices_per_node) {
    return Status::invalid_argument("topology " + spec.name + " has servers of " +
                                    std::to_string(spec.max_devices_per_node) + " devices; devices_per_node " +
                                    std::to_string(devices_per_node) + " does not fit (allowed: 1.." +
                                    std::to_string(spec.max_devices_per_node) + ")");
  }
  if (static_cast<std::int64_t>(nodes) * devices_per_node > kMaxDevices) {
    return Status::invalid_argument("topology " + spec.name + ": " + std::to_string(nodes) + " x " +
                                    std::to_string(devices_per_node) + " devices; at most " +
                                    std::to_string(kMaxDevices) + " allowed");
  }
  return Topology(std::move(spec), nodes, devices_per_node);
}

int Topology::port_of(int device) const {
  return spec_.kind == TopologyKind::kHls && spec_.port_per_node ? node_of(device) * devices_per_node_ : device;
}

int Topology::leaf_of(int device) const {
  return spec_.nodes_per_leaf > 0 ? node_of(device) / spec_.nodes_per_leaf : 0;
}

void Topology::route_cost(int src, int dst, Nanos* latency_ns, double* bytes_per_s) const {
  SHARDLAB_CHECK(src >= 0 && src < devices() && dst >= 0 && dst < devices());
  if (src == dst) {
    *latency_ns = 0;
    *bytes_per_s = 0;
    return;
  }
  switch (spec_.kind) {
    case TopologyKind::kFullyConnected:
      *latency_ns = spec_.peer.latency_ns;
      *bytes_per_s = peer_bps_;
      return;
    case TopologyKind::kSwitch:
      *latency_ns = 2 * spec_.port.latency_ns;
      *bytes_per_s = port_bps_;
      return;
    case TopologyKind::kRing: {
      const int p = devices();
      const int d = (dst - src + p) % p;
      *latency_ns = std::min(d, p - d) * spec_.peer.latency_ns;
      *bytes_per_s = peer_bps_;
      return;
    }
    case TopologyKind::kHls:
      if (node_of(src) == node_of(dst)) {
        *latency_ns = spec_.peer.latency_ns;
        *bytes_per_s = peer_bps_;
      } else if (leaf_of(src) == leaf_of(dst)) {
        *latency_ns = 2 * spec_.port.latency_ns;
        *bytes_per_s = port_bps_;
      } else {
        *latency_ns = 2 * spec_.port.latency_ns + spec_.spine_latency_ns;
        *bytes_per_s = std::min(port_bps_, leaf_bps_);
      }
      return;
  }
}

Route Topology::route(int src, int dst) const {
  Route r;
  route_cost(src, dst, &r.latency_ns, &r.bytes_per_s);
  append_route_links(src, dst, &r.links);
  return r;
}

void Topology::append_route_links(int src, int dst, std::vector<LinkId>* links) const {
  if (src == dst) return;
  const std::int64_t p = devices();
  switch (spec_.kind) {
    case TopologyKind::kFullyConnected: links->push_back(make_link(kPeer, src * p + dst)); break;
    case TopologyKind::kSwitch:
      links->push_back(make_link(kPortUp, src));
      links->push_back(make_link(kPortDown, dst));
      break;
    case TopologyKind::kRing: {
      const std::int64_t d = (dst - src + p) % p;
      const std::int64_t step = d <= p - d ? 1 : p - 1;  // clockwise, or counter-clockwise
      for (std::int64_t at = src; at != dst; at = (at + step) % p) {
        links->push_back(make_link(kPeer, at * p + (at + step) % p));
      }
      break;
    }
    case TopologyKind::kHls:
      if (node_of(src) == node_of(dst)) {
        links->push_back(make_link(kPeer, src * p + dst));
      } else {
        links->push_back(make_link(kPortUp, port_of(src)));
        if (leaf_of(src) != leaf_of(dst)) {
          links->push_back(make_link(kLeafUp, leaf_of(src)));
          links->push_back(make_link(kLeafDown, leaf_of(dst)));
        }
        links->push_back(make_link(kPortDown, port_of(dst)));
      }
      break;
  }
}

double Topology::link_bytes_per_s(LinkId link) const {
  switch (kind_of(link)) {
    case kPeer: return peer_bps_;
    case kPortUp:
    case kPortDown: return port_bps_;
    case kLeafUp:
    case kLeafDown: return leaf_bps_;
  }
  return 0;
}

std::string Topology::link_name(LinkId link) const {
  const std::int64_t i = index_of(link);
  switch (kind_of(link)) {
    case kPeer: {
      const std::int64_t a = i / devices(), b = i % devices();
      return std::to_string(std::min(a, b)) + "-" + std::to_string(std::max(a, b));
    }
    case kPortUp:
    case kPortDown: return std::to_string(i) + "-net";
    case kLeafUp:
    case kLeafDown: return "leaf" + std::to_string(i) + "-spine";
  }
  return "?";
}

Result<std::vector<LinkId>> Topology::parse_link(std::string_view name) const {
  const std::int64_t p = devices();
  auto number = [](std::string_view s, std::int64_t* out) {
    if (s.empty() || s.size() > 9) return false;
    std::int64_t v = 0;
    for (char c : s) {
      if (c < '0' || c > '9') return false;
      v = v * 10 + (c - '0');
    }
    *out = v;
    return true;
  };
  std::string allowed;
  if (spec_.kind != TopologyKind::kSwitch) allowed += "'a-b' (the direct link between devices a and b";
  if (spec_.kind == TopologyKind::kHls) allowed += " of one node";
  if (spec_.kind == TopologyKind::kRing) allowed += ", ring neighbours";
  if (!allowed.empty()) allowed += ")";
  if (spec_.kind == TopologyKind::kHls || spec_.kind == TopologyKind::kSwitch) {
    allowed += std::string(allowed.empty() ? "" : ", ") + (port_of(p - 1) != p - 1
                                                               ? "'a-net' (the port device a shares with its node)"
                                                               : "'a-net' (device a's ports to its switch)");
  }
  if (spec_.kind == TopologyKind::kHls && spec_.nodes_per_leaf > 0) {
    allowed += ", 'leafK-spine' (leaf K's uplinks; K in 0.." + std::to_string(leaf_of(devices() - 1)) + ")";
  }
  allowed += "; devices are 0.." + std::to_string(p - 1);
  const auto bad = [&](const std::string& why) {
    return Status::invalid_argument("link '" + std::string(name) + "' in topology " + spec_.name + ": " + why +
                                    "; allowed: " + allowed);
  };
  const auto dash = name.rfind('-');
  if (dash == std::string_view::npos) return bad("not a link name");
  const std::string_view left = name.substr(0, dash), right = name.substr(dash + 1);
  std::int64_t a = 0, b = 0;
  if (right == "spine") {
    if (spec_.kind != TopologyKind::kHls || spec_.nodes_per_leaf <= 0 || !left.starts_with("leaf") ||
        !number(left.substr(4), &a) || a > leaf_of(devices() - 1)) {
      return bad("no such leaf uplink");
    }
    return std::vector<LinkId>{make_link(kLeafUp, a), make_link(kLeafDown, a)};
  }
  if (right == "net") {
    if (spec_.kind != TopologyKind::kHls && spec_.kind != TopologyKind::kSwitch)
      return bad("this topology has no switch");
    if (!number(left, &a) || a >= p) return bad("no such device");
    return std::vector<LinkId>{make_link(kPortUp, port_of(static_cast<int>(a))),
                               make_link(kPortDown, port_of(static_cast<int>(a)))};
  }
  if (!number(left, &a) || !number(right, &b) || a >= p || b >= p || a == b) return bad("no such pair of devices");
  bool direct = false;
  switch (spec_.kind) {
    case TopologyKind::kFullyConnected: direct = true; break;
    case TopologyKind::kHls: direct = node_of(static_cast<int>(a)) == node_of(static_cast<int>(b)); break;
    case TopologyKind::kRing: direct = (a + 1) % p == b || (b + 1) % p == a; break;
    case TopologyKind::kSwitch: direct = false; break;
  }
  if (!direct) return bad("devices " + std::to_string(a) + " and " + std::to_string(b) + " have no direct link");
  return std::vector<LinkId>{make_link(kPeer, a * p + b), make_link(kPeer, b * p + a)};
}

std::string Topology::describe() const {
  char buf[256];
  const auto gbs = [](double bps) { return bps / 1e9; };
  switch (spec_.kind) {
    case TopologyKind::kHls:
      std::snprintf(buf, sizeof buf,
                    "%s: %d nodes x %d devices; %.4g GB/s per peer (%.3g us), %.4g GB/s scale-out per %s (%.3g us "
                    "per port), %d nodes per leaf, oversubscription %.3g",
                    spec_.name.c_str(), nodes_, devices_per_node_, gbs(peer_bps_),
                    static_cast<double>(spec_.peer.latency_ns) / 1e3, gbs(port_bps_),
                    spec_.port_per_node ? "node" : "device", static_cast<double>(spec_.port.latency_ns) / 1e3,
                    spec_.nodes_per_leaf, spec_.oversubscription);
      break;
    case TopologyKind::kSwitch:
      std::snprintf(buf, sizeof buf, "%s: %d devices on one switch; %.4g GB/s per port, %.3g us end to end",
                    spec_.name.c_str(), devices(), gbs(port_bps_),
                    2 * static_cast<double>(spec_.port.latency_ns) / 1e3);
      break;
    default:
      std::snprintf(buf, sizeof buf, "%s (%s): %d devices; %.4g GB/s, %.3g us per link", spec_.name.c_str(),
                    std::string(topology_kind_name(spec_.kind)).c_str(), devices(), gbs(peer_bps_),
                    static_cast<double>(spec_.peer.latency_ns) / 1e3);
  }
  std::string d = buf;
  if (spec_.reduce_bytes_per_s > 0) {  // NOTE [Reduction cost]
    std::snprintf(buf, sizeof buf, "; reductions at %.4g GB/s", spec_.reduce_bytes_per_s / 1e9);
    d += buf;
  }
  if (spec_.collective_overhead_ns > 0) {  // NOTE [Collective overhead]
    std::snprintf(buf, sizeof buf, "; %.3g us per collective call",
                  static_cast<double>(spec_.collective_overhead_ns) / 1e3);
    d += buf;
  }
  return d;
}

// ---- profiles -------------------------------------------------------------------------

std::vector<std::string> list_topologies() { return detail::builtin_names("topologies"); }

Result<TopologySpec> load_topology(const std::string& name_or_path) {
  std::string origin;
  SHARDLAB_ASSIGN_OR_RETURN(std::string text, detail::read_profile("topologies", name_or_path, &origin));
  return parse_topology(text, origin);
}

namespace {

Result<LinkSpec> read_link(const detail::JsonObject& root, const std::string& key) {
  SHARDLAB_ASSIGN_OR_RETURN(detail::JsonObject o, root.object(key));
  SHARDLAB_RETURN_IF_ERROR(o.only({"gbit_per_s", "latency_ns"}));
  LinkSpec l;
  // NOTE [Profile bounds] in sim/models/device/profiles.cc: from 1 Mbit/s, far below any real link.
  SHARDLAB_ASSIGN_OR_RETURN(l.gbit_per_s,
                            o.number("gbit_per_s", 1e-3, 1e9, false, "line rate in Gbit/s in [0.001, 1e9], e.g. 300"));
  SHARDLAB_ASSIGN_OR_RETURN(const double lat,
                            o.number("latency_ns", 0, 1e9, false, "an integer number of ns in [0, 1e9]"));
  if (lat != std::floor(lat)) return o.bad("latency_ns", "must be an integer number of ns");
  l.latency_ns = static_cast<Nanos>(lat);
  return l;
}

// NOTE [Measured collectives]: {"ranks": p, kind: [[bytes, ns], …] sorted by bytes}.
Result<MeasuredCollectives> read_measured(const detail::JsonObject& root) {
  using runtime::comm::OpKind;
  SHARDLAB_ASSIGN_OR_RETURN(detail::JsonObject o, root.object("measured_collectives"));
  const std::pair<OpKind, const char*> kinds[] = {{OpKind::kAllGather, "all_gather"},
                                                  {OpKind::kReduceScatter, "reduce_scatter"},
                                                  {OpKind::kAllReduce, "all_reduce"}};
  SHARDLAB_RETURN_IF_ERROR(o.only({"ranks", "all_gather", "reduce_scatter", "all_reduce"}));
  MeasuredCollectives m;
  SHARDLAB_ASSIGN_OR_RETURN(const double ranks, o.number("ranks", 1, 1 << 20, false, "an integer >= 1, e.g. 2"));
  if (ranks != std::floor(ranks)) return o.bad("ranks", "must be an integer");
  m.ranks = static_cast<int>(ranks);
  const std::string row_allowed = "[bytes, ns]: integers, bytes in [1, 2^50] rising from row to row, ns in [0, 1e12]";
  for (const auto& [kind, name] : kinds) {
    if (!o.has(name)) continue;
    const nlohmann::json& rows = o.raw(name);
    if (!rows.is_array() || rows.empty()) return o.bad(name, "must be a non-empty array of " + row_allowed);
    auto& table = m.tables[kind];
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const nlohmann::json& r = rows[i];
      const std::string where = std::string(name) + "[" + std::to_string(i) + "]";
      const auto integer_in = [](const nlohmann::json& v, double lo, double hi) {
        if (!v.is_number()) return false;
        const double d = v.get<double>();
        return d >= lo && d <= hi && d == std::floor(d);
      };
      if (!r.is_array() || r.size() != 2 || !integer_in(r[0], 1, std::ldexp(1.0, 50)) || !integer_in(r[1], 0, 1e12)) {
        return o.bad(where, "must be " + row_allowed);
      }
      const auto bytes = static_cast<std::int64_t>(r[0].get<double>());
      if (!table.empty() && bytes <= table.back().first)
        return o.bad(where, "bytes must rise; allowed: " + row_allowed);
      table.emplace_back(bytes, static_cast<Nanos>(r[1].get<double>()));
    }
  }
  if (m.tables.empty()) return o.bad("ranks", "a table needs at least one of all_gather, reduce_scatter, all_reduce");
  return m;
}

}  // namespace

std::optional<Nanos> MeasuredCollectives::time(runtime::comm::OpKind kind, int group_size, std::int64_t bytes) const {
  if (ranks <= 0 || group_size != ranks) return std::nullopt;
  const auto it = tables.find(kind);
  if (it == tables.end() || it->second.empty()) return std::nullopt;
  const auto& t = it->second;
  if (bytes <= t.front().first || t.size() == 1) return t.front().second;
  // The interval [lo, hi] holding `bytes`, or the last one to continue.
  std::size_t hi = 1;
  while (hi + 1 < t.size() && t[hi].first < bytes) ++hi;
  const auto& [b0, t0] = t[hi - 1];
  const auto& [b1, t1] = t[hi];
  const double slope = static_cast<double>(t1 - t0) / static_cast<double>(b1 - b0);
  const double v = static_cast<double>(t0) + slope * static_cast<double>(bytes - b0);
  return to_nanos(std::max(v, 0.0));
}

Result<TopologySpec> parse_topology(const std::string& json_text, const std::string& origin) {
  SHARDLAB_ASSIGN_OR_RETURN(nlohmann::json j, detail::JsonObject::parse(json_text, origin));
  detail::JsonObject root(j, origin);
  SHARDLAB_RETURN_IF_ERROR(
      root.only({"name", "description", "kind", "max_devices_per_node", "peer", "port", "nodes_per_leaf",
                 "oversubscription", "spine_latency_ns", "ports_per", "efficiency", "reduce_gbyte_per_s",
                 "collective_overhead_ns", "measured_collectives", "collective_progress", "notes"}));
  SHARDLAB_RETURN_IF_ERROR(root.notes_ok("notes"));
  TopologySpec t;
  SHARDLAB_ASSIGN_OR_RETURN(t.name, root.string("name", true));
  if (t.name.empty()) return root.bad("name", "must not be empty");
  SHARDLAB_ASSIGN_OR_RETURN(t.description, root.string("description", false));
  SHARDLAB_ASSIGN_OR_RETURN(const std::string kind, root.string("kind", true));
  bool found = false;
  for (TopologyKind k :
       {TopologyKind::kHls, TopologyKind::kFullyConnected, TopologyKind::kSwitch, TopologyKind::kRing}) {
    if (kind == topology_kind_name(k)) {
      t.kind = k;
      found = true;
    }
  }
  if (!found) return root.bad("kind", "unknown kind '" + kind + "'; allowed: hls, fully_connected, switch, ring");
  const bool needs_peer = t.kind != TopologyKind::kSwitch;
  const bool needs_port = t.kind == TopologyKind::kHls || t.kind == TopologyKind::kSwitch;
  if (needs_peer) {
    SHARDLAB_ASSIGN_OR_RETURN(t.peer, read_link(root, "peer"));
  } else if (root.has("peer")) {
    return root.bad("peer", "a '" + kind + "' topology has no direct links; remove it");
  }
  if (needs_port) {
    SHARDLAB_ASSIGN_OR_RETURN(t.port, read_link(root, "port"));
  } else if (root.has("port")) {
    return root.bad("port", "a '" + kind + "' topology has no switch ports; remove it");
  }
  if (t.kind != TopologyKind::kHls) {
    for (const char* k :
         {"max_devices_per_node", "nodes_per_leaf", "oversubscription", "spine_latency_ns", "ports_per"}) {
      if (root.has(k)) return root.bad(k, "only 'hls' topologies have it");
    }
  } else {
    SHARDLAB_ASSIGN_OR_RETURN(const double dpn,
                              root.number("max_devices_per_node", 1, 1 << 16, false, "an integer >= 1, e.g. 8"));
    SHARDLAB_ASSIGN_OR_RETURN(const double npl, root.number_or("nodes_per_leaf", 0, 0, 1 << 20, false,
                                                               "an integer >= 0 (0: one switch for all nodes)"));
    if (dpn != std::floor(dpn)) return root.bad("max_devices_per_node", "must be an integer");
    if (npl != std::floor(npl)) return root.bad("nodes_per_leaf", "must be an integer");
    t.max_devices_per_node = static_cast<int>(dpn);
    t.nodes_per_leaf = static_cast<int>(npl);
    SHARDLAB_ASSIGN_OR_RETURN(t.oversubscription, root.number_or("oversubscription", 1.0, 1, 1000, false,
                                                                 "downlink / uplink capacity in [1, 1000] (1: "
                                                                 "non-blocking)"));
    SHARDLAB_ASSIGN_OR_RETURN(
        const double sl, root.number_or("spine_latency_ns", 0, 0, 1e9, false, "an integer number of ns in [0, 1e9]"));
    if (sl != std::floor(sl)) return root.bad("spine_latency_ns", "must be an integer number of ns");
    t.spine_latency_ns = static_cast<Nanos>(sl);
    if (root.has("ports_per")) {
      SHARDLAB_ASSIGN_OR_RETURN(const std::string per, root.string("ports_per", true));
      if (per != "device" && per != "node")
        return root.bad("ports_per", "unknown value '" + per + "'; allowed: device, node");
      t.port_per_node = per == "node";
    }
  }
  SHARDLAB_ASSIGN_OR_RETURN(t.efficiency, root.number_or("efficiency", 1.0, 1e-3, 1, false,
                                                         "payload fraction of the line rate in [0.001, 1]"));
  if (root.has("reduce_gbyte_per_s")) {  // NOTE [Reduction cost]
    SHARDLAB_ASSIGN_OR_RETURN(const double gbs, root.number("reduce_gbyte_per_s", 1e-3, 1e9, false,
                                                            "10^9 bytes/s in [0.001, 1e9] (leave it out: reductions "
                                                            "are free)"));
    t.reduce_bytes_per_s = gbs * 1e9;
  }
  SHARDLAB_ASSIGN_OR_RETURN(const double overhead, root.number_or("collective_overhead_ns", 0, 0, 1e9, false,
                                                                  "an integer number of ns in [0, 1e9]"));
  if (overhead != std::floor(overhead)) return root.bad("collective_overhead_ns", "must be an integer number of ns");
  t.collective_overhead_ns = static_cast<Nanos>(overhead);
  if (root.has("measured_collectives")) {
    SHARDLAB_ASSIGN_OR_RETURN(t.measured, read_measured(root));
  }
  if (root.has("collective_progress")) {  // NOTE [Host-progressed collectives]
    SHARDLAB_ASSIGN_OR_RETURN(const std::string progress, root.string("collective_progress", true));
    if (progress != "host" && progress != "async") {
      return root.bad("collective_progress", "unknown value '" + progress + "'; allowed: async, host");
    }
    t.host_progress = progress == "host";
  }
  return t;
}

std::string topology_to_json(const TopologySpec& t) {
  nlohmann::ordered_json j;
  j["name"] = t.name;
  if (!t.description.empty()) j["description"] = t.description;
  j["kind"] = std::string(topology_kind_name(t.kind));
  if (t.kind != TopologyKind::kSwitch)
    j["peer"] = {{"gbit_per_s", t.peer.gbit_per_s}, {"latency_ns", t.peer.latency_ns}};
  if (t.kind == TopologyKind::kHls || t.kind == TopologyKind::kSwitch) {
    j["port"] = {{"gbit_per_s", t.port.gbit_per_s}, {"latency_ns", t.port.latency_ns}};
  }
  if (t.kind == TopologyKind::kHls) {
    j["max_devices_per_node"] = t.max_devices_per_node;
    j["nodes_per_leaf"] = t.nodes_per_leaf;
    j["oversubscription"] = t.oversubscription;
    j["spine_latency_ns"] = t.spine_latency_ns;
    if (t.port_per_node) j["ports_per"] = "node";
  }
  j["efficiency"] = t.efficiency;
  if (t.reduce_bytes_per_s > 0) j["reduce_gbyte_per_s"] = t.reduce_bytes_per_s / 1e9;
  if (t.collective_overhead_ns > 0) j["collective_overhead_ns"] = t.collective_overhead_ns;
  if (t.host_progress) j["collective_progress"] = "host";
  if (t.measured.ranks > 0) {
    nlohmann::ordered_json m;
    m["ranks"] = t.measured.ranks;
    for (const auto& [kind, table] : t.measured.tables) {
      nlohmann::ordered_json rows = nlohmann::ordered_json::array();
      for (const auto& [bytes, ns] : table) rows.push_back({bytes, ns});
      m[std::string(runtime::comm::op_kind_name(kind))] = rows;
    }
    j["measured_collectives"] = m;
  }
  return j.dump(2) + "\n";
}

}  // namespace shardlab::sim
