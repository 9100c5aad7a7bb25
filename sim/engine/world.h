// World: N simulated ranks as threads of one process, with virtual time.
//
// NOTE [Determinism]
// Same scenario + seed + build ⇒ bitwise-identical numbers, traces and metrics, whatever
// the host's thread scheduling or core count. How the simulator keeps that promise:
//  - Time is integer nanoseconds on per-rank VirtualClocks. A rank's clock advances only
//    by its own device ops (a pure function of the op) and by the completion time of the
//    Works it waits on.
//  - A collective completes when its last member arrives; its data movement reduces in
//    a fixed rank order (0, 1, …, W-1) and its per-rank completion times come from the
//    cost model applied to the members' arrival times — never from host timing.
//  - A wait times out iff the operation's virtual completion time is past the waiter's
//    virtual deadline. When every live rank is blocked and nothing can complete, the
//    waiter with the earliest (deadline, rank) times out — one at a time — so a missing
//    peer is reported instantly and the same way on every run.
//  - Randomness comes only from shardlab::Rng streams split by (seed, purpose, rank, …).
// Tests run the same worlds with seeded random host yields (WorldOptions::perturb_seed)
// and compare results bitwise.
//
// Thread safety: World::run may be called once at a time; rank bodies run concurrently
// and each must touch only its own RankContext (plus data exchanged via the Communicator).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "runtime/comm/communicator.h"
#include "runtime/device/device.h"
#include "sim/engine/trace.h"
#include "sim/engine/virtual_clock.h"
#include "sim/models/device/cost_model.h"
#include "sim/models/device/device.h"
#include "sim/models/network/network.h"

namespace shardlab::sim {

// NOTE [Numerics world size]
// A numerics world runs every rank as a host thread holding real tensors (its shards, its
// activations, its stacks), so how many ranks fit is a property of the host, not of the
// model: kMaxNumericsRanks at most. Callers refuse a larger world before starting it
// (INVALID_ARGUMENT pointing to timing mode, which captures one rank's program and replays
// it on up to 65,536 ranks without threads or values). Should the host still refuse a
// thread, World::run starts no rank body, and every rank reports UNAVAILABLE (exit 3).
inline constexpr int kMaxNumericsRanks = 1024;

struct WorldOptions {
  int world_size = 1;
  // Per rank (index = rank; missing entries 1): how many times slower than `device` the
  // rank's device is (straggler faults, sim/faults/faults.h).
  std::vector<double> slowdown;
  NetworkModel network;
  // The network cost model collectives and messages are timed with; null: the
  // congestion-unaware α–β ring model of `network` (make_alpha_beta_ring).
  std::shared_ptr<const NetworkCostModel> network_model;
  DeviceProfile device;
  // The compute dtype the runtime emulates in fp32 (NOTE [Emulated low precision] in
  // sim/models/device/device.h): kBF16 for BERT with bf16 compute; kF32 (default) charges ops as run.
  DType emulated_dtype = DType::kF32;
  // Test knob: when non-zero, every communicator call and wait first yields or sleeps a
  // few microseconds of host time, chosen by an Rng seeded with this value, to shake
  // out host-scheduling dependence. Results must not change.
  std::uint64_t perturb_seed = 0;
  // Record every device op and collective per rank (World::trace) for trace.json.
  bool trace = false;
  // Whether the ranks' host memory asks for huge pages (CpuDevice::set_huge_pages): on for
  // runs of many steps, off for a process that runs one.
  bool host_huge_pages = true;
};

struct RankContext {
  int rank;
  int world_size;
  VirtualClock& clock;
  runtime::comm::Communicator& comm;
  runtime::device::Device& device;
  SimDevice& sim_device;  // the same device, with its simulated busy time
};

struct RankResult {
  Status status;
  Nanos end_time = 0;  // the rank's virtual clock when its body returned
};

class World {
 public:
  explicit World(WorldOptions options);
  ~World();
  World(const World&) = delete;
  World& operator=(const World&) = delete;

  // Runs body on every rank (one host thread each) and returns when all are done.
  // A body that throws (e.g. a CheckFailure) yields an INTERNAL status for its rank. The
  // bodies start only once every thread exists: when the host cannot create one (NOTE
  // [Numerics world size]), no body runs and every rank's status is UNAVAILABLE
  // naming the rank whose thread failed.
  std::vector<RankResult> run(const std::function<Status(RankContext&)>& body);

  const WorldOptions& options() const { return options_; }
  // Rank r's timeline of the last run() (empty unless WorldOptions::trace).
  std::vector<TraceEvent> trace(int rank) const;

  struct Shared;  // rendezvous state shared by the ranks' communicators (world.cc)

 private:
  WorldOptions options_;
  std::shared_ptr<Shared> shared_;
  std::vector<std::unique_ptr<TraceRecorder>> traces_;
};

}  // namespace shardlab::sim
