// Topology: the links of a simulated cluster and the route every message takes.
//
// A topology is a profile (TopologySpec: a data file under sim/profiles/topologies/, by
// name or path) instantiated for a world of `nodes × devices_per_node` devices (world rank
// r is device r; its node is r / devices_per_node). Kinds:
//   hls             Gaudi servers (hls1, hls2, hls3): inside a node every ordered pair of
//                   cards has its own link (the per-peer ports of reference/gaudi.md,
//                   aggregated); across nodes each card goes through its scale-out ports
//                   to a leaf switch (with ports_per: node, the node's devices share one
//                   port, a host's one NIC: servers of CPUs, scripts/netns-cluster); leaves (nodes_per_leaf nodes each)
//                   meet at a spine whose leaf uplinks carry (devices under the leaf × port) / oversubscription.
//   fully_connected every ordered pair of devices of the world has its own link.
//   switch          every device has one port (up and down) to a single non-blocking switch.
//   ring            device r links to r+1 and r-1 (mod world); a message goes the shorter
//                   way round, hop by hop.
//
// Links are directed and identified by a LinkId computed from the structure (never a
// table of all pairs), so a 65,536-device topology costs O(1) memory and a route O(hops).
// A route's latency is the sum of its links' latencies; its bandwidth the smallest of
// its links' (line rate × the profile's payload efficiency).
//
// Link names (what link faults refer to; each name covers both directions):
//   "a-b"          the direct link between devices a and b (hls inside a node,
//                  fully_connected, ring neighbours)
//   "a-net"        device a's port(s) to its switch (hls scale-out, switch); with ports
//                  shared by a node, the node's port (every device of the node names it;
//                  link_name gives the node's first device)
//   "leafK-spine"  leaf K's uplinks to the spine (hls with nodes_per_leaf > 0)
//
// Thread safety: immutable after construction; share freely.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/comm/communicator.h"
#include "runtime/core/clock.h"
#include "runtime/core/status.h"

namespace shardlab::sim {

enum class TopologyKind { kHls, kFullyConnected, kSwitch, kRing };
std::string_view topology_kind_name(TopologyKind kind);

struct LinkSpec {
  double gbit_per_s = 200;  // line rate per direction, in 10^9 bits/s (network convention)
  Nanos latency_ns = 2500;  // one traversal
};

// NOTE [Measured collectives]
// What a collective library takes on one machine, measured rather than modeled: for a
// group of exactly `ranks` members, a table per kind (all_gather, reduce_scatter,
// all_reduce) of (bytes as a CollectiveQuery holds them: one member's chunk, the whole
// buffer for all_reduce; the time from the last member's arrival to completion),
// sorted by bytes. `shardlab calibrate` writes it from the collectives it times (issue to
// completion, slowest rank's median, operands cold — NOTE [Cold operands] in
// calibrate/calibrate.cc) at sizes up to 32 MiB. A query of that group size and kind takes the
// time interpolated linearly in bytes between the two nearest sizes — below the smallest,
// its time; above the largest, the last interval's time per byte continued — and every
// member completes then; the collective overhead and reduction rate are not added again
// (the table holds them). Other kinds, other group sizes and collectives under a link
// fault window take the topology's α–β–γ model. Why a table: Open MPI picks its
// algorithms by size, and on a CPU a collective's copies run from cache or from memory
// by size, so the time is far from one line — on a 2-process, 480 MiB-L3 VM a
// reduce_scatter of 8 MiB took 2.5 ms and one of 16 MiB 10.7 ms; the α–β–γ fit to all
// sizes under-charged the 32 MiB one by half (12.1 against 23.9 ms). JSON:
// "measured_collectives": {"ranks": 2, "all_gather": [[bytes, ns], …], …}.
struct MeasuredCollectives {
  int ranks = 0;  // 0: no table
  std::map<runtime::comm::OpKind, std::vector<std::pair<std::int64_t, Nanos>>> tables;
  // The table's time for a collective, nullopt where no table applies.
  std::optional<Nanos> time(runtime::comm::OpKind kind, int group_size, std::int64_t bytes) const;
};

// A topology profile (see sim/profiles/README.md for the file format and the reasoning
// behind the built-in numbers). The defaults are the generic `switch` profile, which
// matches the default α–β model (NetworkModel: 5 µs, 25 GB/s) end to end.
struct TopologySpec {
  std::string name = "switch";
  std::string description;
  TopologyKind kind = TopologyKind::kSwitch;
  int max_devices_per_node = 0;   // hls: cards per server (8); 0: any
  LinkSpec peer;                  // hls, fully_connected, ring: one direct link (all its ports)
  LinkSpec port;                  // hls, switch: a device's ports to its (leaf) switch
  int nodes_per_leaf = 0;         // hls: nodes under one leaf switch; 0: one switch for all
  double oversubscription = 1.0;  // hls: leaf downlink capacity / uplink capacity (>= 1)
  bool port_per_node = false;     // hls: the devices of a node share one port (JSON "ports_per": "node")
  Nanos spine_latency_ns = 0;     // hls: extra latency of a leaf → spine → leaf crossing
  double efficiency = 1.0;        // payload bytes / line-rate bytes, in (0, 1]
  // NOTE [Reduction cost]
  // γ of the α–β–γ model (Thakur, Rabenseifner & Gropp 2005): the bytes per second at
  // which a member combines what it receives in reduce_scatter and all_reduce; 0: free
  // (the Gaudi profiles: HCCL reduces at line rate on the device). Every algorithm here
  // has each member reduce (p-1) chunks of its result — ((p-1)/p)·N bytes for a buffer
  // of N —, so the term is algorithm-independent and is added to each member's completion
  // after the schedule: ring reduce_scatter (p-1)α + ((p-1)/p)·pn·(β + γ). It matters
  // where the reduction is host work (Open MPI on CPUs: `shardlab calibrate` fits it). A
  // one-member reduce_scatter reduces nothing but copies its input chunk to the output (Open
  // MPI does, ~8 GB/s here): charged as one chunk at this rate.
  double reduce_bytes_per_s = 0;
  // NOTE [Collective overhead]
  // Host time a member spends in the collective library per call, added to every
  // member's completion of every collective — also on a one-member group, which the
  // network itself completes at once. 0 in the built-in topologies (it is part of their
  // latencies). `shardlab calibrate` fits it (Open MPI's libnbc builds and progresses a
  // schedule per call: several µs with one process, ~25 µs with 4 processes on 2 cores),
  // apart from α by collectives with different round counts (NOTE [Fitting the
  // collective model] in calibrate/calibrate.h).
  Nanos collective_overhead_ns = 0;
  MeasuredCollectives measured;  // NOTE [Measured collectives]
  // NOTE [Host-progressed collectives]
  // Whether a collective moves its data while its members compute (false: an accelerator's
  // collective engine, NCCL or HCCL on their own streams, PyTorch's MPI backend with its
  // worker thread) or only while each member's host is inside the library (true). The
  // runtime's MpiCommunicator is the second kind: Open MPI's nonblocking collectives have
  // no progress thread and advance only inside MPI calls on the rank's one thread
  // (MPI_THREAD_FUNNELED), so a gradient reduction issued before a unit's backward makes
  // no headway during it — measured on 2 processes, bert-mini at batch 1 × 16: 83 ms per
  // step with asynchronous reductions and prefetching, 84 ms with every collective waited
  // for at once. With it, a member's wait ends no earlier than its start plus the
  // collective's own duration (its completion less the last member's ready time): what
  // the network model times then runs inside the wait. `shardlab calibrate` writes true.
  // JSON: "collective_progress": "host" (default "async").
  bool host_progress = false;
};

using LinkId = std::int64_t;

struct Route {
  std::vector<LinkId> links;
  Nanos latency_ns = 0;
  double bytes_per_s = 0;  // the bottleneck link's payload bandwidth (0 for src == dst)
};

class Topology {
 public:
  // INVALID_ARGUMENT when the world does not fit the profile (nodes or devices_per_node
  // < 1, more devices per node than the profile's servers hold, more than 2^20 devices).
  static Result<Topology> create(TopologySpec spec, int nodes, int devices_per_node);

  const TopologySpec& spec() const { return spec_; }
  int nodes() const { return nodes_; }
  int devices_per_node() const { return devices_per_node_; }
  int devices() const { return nodes_ * devices_per_node_; }
  int node_of(int device) const { return device / devices_per_node_; }
  int leaf_of(int device) const;
  // The device whose index names the switch port `device` uses: itself, or with ports
  // shared by a node (hls, port_per_node) the node's first device.
  int port_of(int device) const;

  // The route of a message from src to dst (devices in [0, devices())).
  Route route(int src, int dst) const;
  // Appends route(src, dst).links to *links (no allocation once *links has the room).
  void append_route_links(int src, int dst, std::vector<LinkId>* links) const;
  // Cheaper than route(): latency and bandwidth only.
  void route_cost(int src, int dst, Nanos* latency_ns, double* bytes_per_s) const;
  double link_bytes_per_s(LinkId link) const;  // payload capacity of a link
  std::string link_name(LinkId link) const;    // "3-5", "3-net", "leaf2-spine"
  // The directed links a fault name covers (both directions), or INVALID_ARGUMENT naming
  // the forms this topology allows.
  Result<std::vector<LinkId>> parse_link(std::string_view name) const;
  // One line: "hls2: 2 nodes × 8 devices, 37.5 GB/s per peer, …".
  std::string describe() const;

 private:
  Topology(TopologySpec spec, int nodes, int devices_per_node);
  double peer_bps_ = 0, port_bps_ = 0, leaf_bps_ = 0;  // payload bytes/s
  TopologySpec spec_;
  int nodes_ = 1, devices_per_node_ = 1;
};

// Built-in topology profile names (sorted), for `shardlab devices`.
std::vector<std::string> list_topologies();
// A built-in profile by name, or a JSON file by path (anything with a '/' or ending in
// ".json"). INVALID_ARGUMENT names the file, the key and what is allowed.
Result<TopologySpec> load_topology(const std::string& name_or_path);
// Parses a topology profile's JSON text; `origin` names it in messages.
Result<TopologySpec> parse_topology(const std::string& json_text, const std::string& origin);
// The profile as JSON (what parse_topology reads back).
std::string topology_to_json(const TopologySpec& spec);

}  // namespace shardlab::sim
