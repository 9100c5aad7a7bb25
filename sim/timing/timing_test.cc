// Timing mode (NOTE [Timing mode] in op_graph.h): phantom storages, the timing-mode
// SimDevice, comm-stream serialization (NOTE [Comm streams]), and the core promise —
// numerics and timing mode give the same timeline for the same scenario.
#include <gtest/gtest.h>

#include <limits>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <optional>
#include <set>

#include "runtime/core/check.h"
#include "runtime/model/bert.h"
#include "sim/engine/world.h"
#include "sim/faults/faults.h"
#include "sim/models/device/device.h"
#include "sim/models/device/profiles.h"
#include "sim/timing/capture.h"
#include "sim/timing/replay.h"
#include "testing/status_matchers.h"

using shardlab::testlib::IsOk;

namespace shardlab::sim::timing {
namespace {

using runtime::comm::OpKind;
using runtime::comm::ReduceOp;
using runtime::train::FsdpTrainOptions;
using runtime::train::FsdpTrainResult;

// ---- phantom storage and the timing-mode device ------------------------------------------

TEST(PhantomStorage, HostAccessToAStorageWithoutBytesIsACheckFailureNamingTheTensor) {
  auto s = std::make_shared<Storage>(nullptr, 0, 64, MemoryCategory::kActivations, "acts", "hpu:0", nullptr);
  const Tensor t = *Tensor::view_of(s, DType::kF32, {16}, 0, "x");
  EXPECT_TRUE(t.is_phantom());
  try {
    (void)t.data<float>();
    FAIL() << "expected a CheckFailure";
  } catch (const CheckFailure& e) {
    EXPECT_NE(std::string(e.what()).find("'x'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("no host bytes"), std::string::npos) << e.what();
  }
}

TEST(PhantomStorage, DeferredStorageGetsZeroedBytesOnlyWhenTheHostAsks) {
  int released = 0;
  auto s = Storage::make_deferred(40, MemoryCategory::kOther, "d", "sim:0", [&](Storage&) { ++released; });
  {
    const Tensor t = *Tensor::view_of(s, DType::kF32, {10}, 0, "d");
    EXPECT_FALSE(t.is_phantom());
    EXPECT_TRUE(t.is_deferred());
    EXPECT_FALSE(s->materialized());
    const float* p = t.data<float>();
    EXPECT_TRUE(s->materialized());
    for (int i = 0; i < 10; ++i) EXPECT_EQ(p[i], 0.0f);
    EXPECT_EQ(t.data<float>(), p);  // materialized once
  }
  s.reset();
  EXPECT_EQ(released, 1);
}

TEST(SimDeviceTimingMode, ChargesNumericsCostsAndMemoryWithoutTouchingBytes) {
  VirtualClock c_num, c_tim;
  SimDevice num(0, DeviceProfile{}, &c_num), tim(0, DeviceProfile{}, &c_tim);
  tim.set_timing_mode(true);
  for (SimDevice* sd : {&num, &tim}) {
    runtime::device::Device* d = sd;
    auto a = d->empty({64, 32}, DType::kF32, MemoryCategory::kActivations, "a");
    auto b = d->empty({32, 48}, DType::kF32, MemoryCategory::kParameters, "b");
    auto c = d->empty({64, 48}, DType::kF32, MemoryCategory::kActivations, "c");
    ASSERT_TRUE(a.is_ok() && b.is_ok() && c.is_ok());
    ASSERT_TRUE(d->fill(*a, 1.0f).is_ok());
    ASSERT_TRUE(d->fill(*b, 1.0f).is_ok());
    ASSERT_TRUE(d->gemm(*a, false, *b, false, *c, 1.0f, 0.0f).is_ok());
    if (sd == &tim) {
      EXPECT_TRUE(c->is_deferred());
      EXPECT_FALSE(c->storage()->materialized()) << "timing mode must not touch the bytes";
    }
    EXPECT_EQ(d->memory().stats().peak[static_cast<int>(MemoryCategory::kActivations)], (64 * 32 + 64 * 48) * 4);
  }
  EXPECT_EQ(c_num.now(), c_tim.now());
  EXPECT_GT(c_tim.now(), 0);
}

TEST(SimDeviceTimingMode, OverCapacityIsOutOfMemoryWithTheBreakdown) {
  VirtualClock clock;
  DeviceProfile p;
  p.capacity_bytes = 1000;
  SimDevice d(3, p, &clock);
  d.set_timing_mode(true);
  auto a = d.empty({100}, DType::kF32, MemoryCategory::kParameters, "w");
  ASSERT_TRUE(a.is_ok());
  auto b = d.empty({200}, DType::kF32, MemoryCategory::kActivations, "big");
  ASSERT_FALSE(b.is_ok());
  EXPECT_EQ(b.status().code(), StatusCode::kOutOfMemory);
  EXPECT_NE(b.status().message().find("parameters"), std::string::npos) << b.status().to_string();
  EXPECT_NE(b.status().message().find("big"), std::string::npos) << b.status().to_string();
}

// ---- comm streams in numerics mode ---------------------------------------------------------

// Rank 0 issues two all-gathers back to back; the second queues behind the first on the
// all-gather stream instead of running beside it.
TEST(CommStreams, BackToBackAllGathersRunOneAfterTheOther) {
  WorldOptions o;
  o.world_size = 2;
  o.trace = true;
  World world(o);
  const auto results = world.run([&](RankContext& ctx) -> Status {
    SHARDLAB_ASSIGN_OR_RETURN(Tensor a, ctx.device.zeros({2 * 1024}, DType::kF32, MemoryCategory::kOther, "a"));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor b, ctx.device.zeros({2 * 1024}, DType::kF32, MemoryCategory::kOther, "b"));
    auto w1 = ctx.comm.all_gather_into(a, *a.narrow(ctx.rank * 1024, 1024));
    auto w2 = ctx.comm.all_gather_into(b, *b.narrow(ctx.rank * 1024, 1024));
    SHARDLAB_RETURN_IF_ERROR(w2->wait(kNanosPerSecond));
    return w1->wait(kNanosPerSecond);
  });
  for (const auto& r : results) ASSERT_THAT(r.status, IsOk());
  std::vector<TraceEvent> ags;
  for (const auto& e : world.trace(0)) {
    if (e.stream == kTraceAllGather) ags.push_back(e);
  }
  ASSERT_EQ(ags.size(), 2u);
  EXPECT_GT(ags[0].duration, 0);
  EXPECT_EQ(ags[1].start, ags[0].start + ags[0].duration);
  EXPECT_EQ(ags[1].duration, ags[0].duration);
  EXPECT_EQ(results[0].end_time, ags[1].start + ags[1].duration);
}

// The second operation on a stream becomes complete (all members issued it) while the
// previous one on that stream still waits for a late member: it is timed only once the
// previous one is, from the previous one's completion — the same under any host timing.
std::vector<std::vector<TraceEvent>> run_deferred_case(std::uint64_t perturb_seed) {
  WorldOptions o;
  o.world_size = 3;
  o.trace = true;
  o.perturb_seed = perturb_seed;
  World world(o);
  const auto results = world.run([&](RankContext& ctx) -> Status {
    SHARDLAB_ASSIGN_OR_RETURN(auto pair, ctx.comm.split(ctx.rank < 2 ? 0 : -1, ctx.rank));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor w, ctx.device.zeros({3 * 256}, DType::kF32, MemoryCategory::kOther, "w"));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor s, ctx.device.zeros({2 * 256}, DType::kF32, MemoryCategory::kOther, "s"));
    if (ctx.rank == 2) {  // late to the world all-gather
      SHARDLAB_ASSIGN_OR_RETURN(Tensor big, ctx.device.zeros({1 << 20}, DType::kF32, MemoryCategory::kOther, "big"));
      for (int i = 0; i < 20; ++i) SHARDLAB_RETURN_IF_ERROR(ctx.device.scale(big, 1.0f));
    }
    auto w1 = ctx.comm.all_gather_into(w, *w.narrow(ctx.rank * 256, 256));
    runtime::comm::WorkPtr w2;
    if (pair) w2 = pair->all_gather_into(s, *s.narrow(ctx.rank * 256, 256));
    if (w2) SHARDLAB_RETURN_IF_ERROR(w2->wait(kNanosPerSecond));
    return w1->wait(kNanosPerSecond);
  });
  std::vector<std::vector<TraceEvent>> traces;
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(results[static_cast<std::size_t>(r)].status.is_ok())
        << results[static_cast<std::size_t>(r)].status.to_string();
    traces.push_back(world.trace(r));
  }
  return traces;
}

bool same_events(const std::vector<TraceEvent>& a, const std::vector<TraceEvent>& b, std::string* why) {
  if (a.size() != b.size()) {
    *why = std::to_string(a.size()) + " vs " + std::to_string(b.size()) + " events";
    return false;
  }
  for (std::size_t i = 0; i < a.size(); ++i) {
    const TraceEvent& x = a[i];
    const TraceEvent& y = b[i];
    if (x.name != y.name || x.stream != y.stream || x.start != y.start || x.duration != y.duration ||
        x.bytes != y.bytes || x.group != y.group || x.algorithm != y.algorithm || x.shapes != y.shapes) {
      *why = "event " + std::to_string(i) + ": " + x.name + "@" + std::to_string(x.start) + "+" +
             std::to_string(x.duration) + " (stream " + std::to_string(x.stream) + ") vs " + y.name + "@" +
             std::to_string(y.start) + "+" + std::to_string(y.duration) + " (stream " + std::to_string(y.stream) + ")";
      return false;
    }
  }
  return true;
}

TEST(CommStreams, AnOperationCompleteBeforeItsPredecessorIsTimedFromThePredecessor) {
  const auto ref = run_deferred_case(0);
  for (int r = 0; r < 2; ++r) {
    std::vector<TraceEvent> ags;
    for (const auto& e : ref[static_cast<std::size_t>(r)]) {
      if (e.stream == kTraceAllGather) ags.push_back(e);
    }
    ASSERT_EQ(ags.size(), 2u);
    const TraceEvent& world_ag = ags[0].group == "world" ? ags[0] : ags[1];
    const TraceEvent& pair_ag = ags[0].group == "world" ? ags[1] : ags[0];
    EXPECT_GT(world_ag.start, 0);  // started when rank 2 arrived
    EXPECT_EQ(pair_ag.start, world_ag.start + world_ag.duration) << "rank " << r;
  }
  for (std::uint64_t seed : {3, 11}) {
    const auto t = run_deferred_case(seed);
    for (int r = 0; r < 3; ++r) {
      std::string why;
      EXPECT_TRUE(same_events(t[static_cast<std::size_t>(r)], ref[static_cast<std::size_t>(r)], &why))
          << "perturb " << seed << " rank " << r << ": " << why;
    }
  }
}

// ---- groups (NOTE [Groups in timing mode]) ------------------------------------------------

// HYBRID_SHARD's layouts in 2 nodes of 4: a rank's group, its place in it, the group's
// members and its numerics-mode name all follow from the layout; and which collectives a
// rank receives a payload in, as FaultInjector counts them.
TEST(Groups, ARanksGroupFollowsFromTheLayout) {
  CollectiveDesc node, replica, world;
  node.stride = 1, node.size = 4, node.split = 1;
  replica.stride = 4, replica.size = 2, replica.split = 2;
  EXPECT_EQ(group_count(node, 8), 2);
  EXPECT_EQ(group_count(replica, 8), 4);
  EXPECT_EQ(group_count(world, 8), 1);
  for (int r = 0; r < 8; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(group_color_of(node, r), r / 4);
    EXPECT_EQ(group_rank_of(node, r), r % 4);
    EXPECT_EQ(group_member(node, group_color_of(node, r), group_rank_of(node, r)), r);
    EXPECT_EQ(group_name_of(node, r), "world/" + std::to_string(r / 4));
    EXPECT_EQ(group_color_of(replica, r), r % 4);
    EXPECT_EQ(group_rank_of(replica, r), r / 4);
    EXPECT_EQ(group_member(replica, group_color_of(replica, r), group_rank_of(replica, r)), r);
    EXPECT_EQ(group_name_of(replica, r), "world/" + std::to_string(r % 4) + ".2");
    EXPECT_EQ(group_rank_of(world, r), r);
    EXPECT_EQ(group_name_of(world, r), "world");
  }
  EXPECT_EQ(group_member(replica, 3, 1), 7);
  EXPECT_EQ(group_size_of(replica, 8), 2);
  EXPECT_EQ(group_size_of(world, 8), 8);

  CollectiveDesc bcast = replica;
  bcast.kind = OpKind::kBroadcast;
  bcast.root = 1;  // group rank 1: ranks 4-7
  EXPECT_TRUE(has_payload(bcast, 2));
  EXPECT_FALSE(has_payload(bcast, 6));
  CollectiveDesc split;
  split.kind = OpKind::kSplit;
  EXPECT_FALSE(has_payload(split, 0));
  CollectiveDesc barrier;
  barrier.kind = OpKind::kBarrier;
  EXPECT_FALSE(has_payload(barrier, 0));
  world.kind = OpKind::kAllReduce;
  EXPECT_TRUE(has_payload(world, 0));
}

// ---- numerics vs timing -------------------------------------------------------------------

FsdpTrainOptions bert_tiny() {
  FsdpTrainOptions o;
  o.model_kind = runtime::train::ModelKind::kBert;
  o.bert.config = *runtime::model::bert_preset("bert-tiny");
  o.bert.head = runtime::model::BertHead::kMaskedLM;
  o.bert.seq_len = 16;
  o.global_batch = 16;  // 2 rows per rank
  o.steps = 2;
  o.seed = 5;
  o.wrap = runtime::train::WrapPolicy::kByClass;
  o.fsdp.forward_prefetch = true;  // all-gathers overlap compute
  o.optimizer.kind = runtime::optim::OptimizerConfig::Kind::kAdamW;
  o.optimizer.lr = 1e-3f;
  return o;
}

// A world just beyond kMaxPerRankCaptureWorld, and bert-tiny with the classifier head
// (static shapes) on one row a rank.
constexpr int kLargeWorld = kMaxPerRankCaptureWorld + 8;
FsdpTrainOptions large_world_classifier(int steps) {
  FsdpTrainOptions o = bert_tiny();
  o.bert.head = runtime::model::BertHead::kSequenceClassification;
  o.bert.config.num_labels = 3;
  o.global_batch = kLargeWorld;
  o.steps = steps;
  return o;
}

struct NumericsRun {
  std::vector<FsdpTrainResult> ranks;
  std::vector<std::vector<TraceEvent>> traces;
};

// With `cpu_offload`, each rank's host is made as `shardlab run` makes it
// (cli/run_command.cc): a SimDevice with offload_host_profile() on the rank's clock and trace.
// `slowdown`: straggler factors per rank, as World takes them.
// `network`: the network model (null: the α–β ring of NetworkModel{}, as capture_and_replay's).
NumericsRun run_numerics(const FsdpTrainOptions& in, int world, std::uint64_t perturb_seed,
                         const DeviceProfile& device = {}, bool cpu_offload = false, std::vector<double> slowdown = {},
                         std::shared_ptr<const NetworkCostModel> network = nullptr) {
  WorldOptions wo;
  wo.network_model = std::move(network);
  wo.world_size = world;
  wo.trace = true;
  wo.perturb_seed = perturb_seed;
  wo.device = device;
  wo.slowdown = std::move(slowdown);
  World w(wo);
  FsdpTrainOptions o = in;
  o.record_memory_timeline = true;
  o.gather_results = false;  // as the capture: the timelines compared are the training's
  NumericsRun out;
  out.ranks.resize(static_cast<std::size_t>(world));
  const auto results = w.run([&](RankContext& ctx) -> Status {
    SimDevice host({"host", ctx.rank}, offload_host_profile(), &ctx.clock);
    host.set_trace(ctx.sim_device.trace());
    FsdpTrainOptions mine = o;
    if (cpu_offload) mine.fsdp.offload_device = &host;
    SHARDLAB_ASSIGN_OR_RETURN(out.ranks[static_cast<std::size_t>(ctx.rank)],
                              runtime::train::train_fsdp(ctx.comm, ctx.device, ctx.clock, mine));
    return Status::ok();
  });
  for (const auto& r : results) EXPECT_THAT(r.status, IsOk());
  for (int r = 0; r < world; ++r) out.traces.push_back(w.trace(r));
  return out;
}

std::vector<int> all_ranks(int w) {
  std::vector<int> v(static_cast<std::size_t>(w));
  for (int r = 0; r < w; ++r) v[static_cast<std::size_t>(r)] = r;
  return v;
}

void expect_same_timeline(const NumericsRun& num, const OpGraph& g, const ReplayResult& tim) {
  const int w = g.world_size;
  for (int r = 0; r < w; ++r) {
    const auto ur = static_cast<std::size_t>(r);
    const FsdpTrainResult& n = num.ranks[ur];
    std::string why;
    EXPECT_TRUE(same_events(num.traces[ur], tim.traces.at(r), &why)) << "rank " << r << ": " << why;
    EXPECT_EQ(n.step_starts, tim.ranks[ur].step_starts) << "rank " << r;
    EXPECT_EQ(n.step_times, tim.ranks[ur].step_times) << "rank " << r;
    const RankProgram& p = g.program(r);
    EXPECT_EQ(n.memory.peak, p.memory.peak) << "rank " << r;
    EXPECT_EQ(n.memory.peak_total, p.memory.peak_total) << "rank " << r;
    const auto& samples = tim.memory_timelines.at(r);
    ASSERT_EQ(n.memory_timeline.size(), samples.size()) << "rank " << r;
    for (std::size_t i = 0; i < samples.size(); ++i) {
      EXPECT_EQ(n.memory_timeline[i].event, samples[i].event);
      EXPECT_EQ(n.memory_timeline[i].time, samples[i].time) << "rank " << r << " sample " << samples[i].event;
      EXPECT_EQ(n.memory_timeline[i].bytes, samples[i].bytes) << "rank " << r << " sample " << samples[i].event;
    }
  }
}

// The timing-mode side of the comparisons below: `o` captured on `w` ranks and replayed
// with every rank traced (empty, with a test failure, when either step fails).
struct Timed {
  OpGraph graph;
  ReplayResult replay;
};
std::optional<Timed> capture_and_replay(const FsdpTrainOptions& o, int w, const DeviceProfile& device,
                                        const CaptureOptions& capture = {},
                                        std::shared_ptr<const NetworkCostModel> network = nullptr) {
  auto g = capture_graph(o, w, device, capture);
  if (!g.is_ok()) {
    ADD_FAILURE() << g.status().to_string();
    return std::nullopt;
  }
  ReplayOptions ro;
  ro.network = network ? std::move(network) : make_alpha_beta_ring(NetworkModel{});
  ro.traced_ranks = all_ranks(w);
  auto tim = replay(*g, ro);
  if (!tim.is_ok()) {
    ADD_FAILURE() << tim.status().to_string();
    return std::nullopt;
  }
  return Timed{std::move(*g), std::move(*tim)};
}

// Ranks' programs are not all the same (shard pieces): in small worlds each rank's is
// captured, and numerics and timing give the same timeline rank by rank.
TEST(TimingMode, NumericsAndTimingGiveTheSameTimelineForBertTinyOn8Ranks) {
  const FsdpTrainOptions o = bert_tiny();
  const int w = 8;
  const auto t = capture_and_replay(o, w, DeviceProfile{});
  ASSERT_TRUE(t.has_value());
  EXPECT_GT(t->graph.programs.size(), 1u) << "rank programs differ in their compute (shard pieces, data)";
  EXPECT_EQ(t->graph.program_of_rank.size(), 8u);
  EXPECT_GT(t->replay.collectives, 0);
  expect_same_timeline(run_numerics(o, w, 0), t->graph, t->replay);
  // Numerics under seeded random host yields: the same timeline again.
  expect_same_timeline(run_numerics(o, w, 9), t->graph, t->replay);
}

// CPU offload on a device with a host link (gaudi2: PCIe): the host's optimizer steps and
// the copies across the link are on each rank's timeline in both modes alike.
TEST(TimingMode, NumericsAndTimingGiveTheSameTimelineUnderCpuOffload) {
  const FsdpTrainOptions o = bert_tiny();
  const int w = 4;
  auto gaudi2 = load_device_profile("gaudi2");
  ASSERT_THAT(gaudi2, IsOk());
  CaptureOptions offload;
  offload.cpu_offload = true;
  const auto t = capture_and_replay(o, w, *gaudi2, offload);
  ASSERT_TRUE(t.has_value());
  expect_same_timeline(run_numerics(o, w, 0, *gaudi2, /*cpu_offload=*/true), t->graph, t->replay);

  // Offloading moves the shards, gradient shards and AdamW state off the device and adds
  // host time to every step (the host's AdamW, PCIe both ways).
  const auto on_device = capture_and_replay(o, w, *gaudi2);
  ASSERT_TRUE(on_device.has_value());
  const auto peak = [](const RankProgram& p, MemoryCategory c) { return p.memory.peak[static_cast<int>(c)]; };
  EXPECT_LT(peak(t->graph.program(0), MemoryCategory::kOptimizerState),
            peak(on_device->graph.program(0), MemoryCategory::kOptimizerState));
  EXPECT_GT(t->replay.ranks[0].step_times.back(), on_device->replay.ranks[0].step_times.back());
}

// A straggler (sim/faults/faults.h) runs its own, slower program; the others wait for it in the
// collectives, in timing mode exactly as in numerics mode.
TEST(TimingMode, NumericsAndTimingGiveTheSameTimelineWithAStraggler) {
  const FsdpTrainOptions o = bert_tiny();
  const int w = 8;
  CaptureOptions slow;
  slow.slowdown = {1, 1, 1, 1, 1, 3, 1, 1};
  const auto t = capture_and_replay(o, w, DeviceProfile{}, slow);
  ASSERT_TRUE(t.has_value());
  expect_same_timeline(run_numerics(o, w, 0, DeviceProfile{}, false, slow.slowdown), t->graph, t->replay);
}

// HYBRID_SHARD (NOTE [Groups in timing mode] in op_graph.h): shards inside a node's group,
// gradients averaged across nodes in the replica groups — per-group collectives, and the
// two splits themselves, on the same timeline in both modes, the groups named alike. On
// HLS-2 nodes under link contention, so a group replayed with the wrong members (inside a
// node instead of across nodes) would cost differently.
FsdpTrainOptions hybrid(int devices_per_node) {
  FsdpTrainOptions o = bert_tiny();
  o.fsdp.strategy = runtime::fsdp::ShardingStrategy::kHybridShard;
  o.fsdp.devices_per_node = devices_per_node;
  return o;
}

// With one port per node (ports_per: node) the replica groups' all-reduces share the node
// ports (NOTE [Concurrent groups] in sim/models/network/network.h): both modes must pass
// every group of the split to the network model.
TEST(TimingMode, NumericsAndTimingGiveTheSameTimelineUnderHybridShard) {
  const int w = 8;
  for (auto [dpn, per_node] : {std::pair{4, false}, std::pair{2, false}, std::pair{4, true}}) {
    SCOPED_TRACE("devices per node " + std::to_string(dpn) + (per_node ? ", one port per node" : ""));
    const FsdpTrainOptions o = hybrid(dpn);
    NetworkSpec spec;
    spec.nodes = w / dpn;
    spec.devices_per_node = dpn;
    spec.model = NetworkModelKind::kContention;
    auto hls2 = load_topology("hls2");
    ASSERT_THAT(hls2, IsOk());
    hls2->port_per_node = per_node;
    auto network = make_network(spec, *hls2);
    ASSERT_THAT(network, IsOk());
    const auto t = capture_and_replay(o, w, DeviceProfile{}, {}, *network);
    ASSERT_TRUE(t.has_value());
    bool shard_group = false, replica_group = false;
    for (const CollectiveDesc& d : t->graph.program(0).collectives) {
      shard_group |= d.stride == 1 && d.size == dpn;
      replica_group |= d.stride == dpn && d.size == w / dpn;
    }
    EXPECT_TRUE(shard_group && replica_group);
    expect_same_timeline(run_numerics(o, w, 0, DeviceProfile{}, false, {}, *network), t->graph, t->replay);
    // Rank 5's groups, named as numerics mode names them: its node's, then its replicas'.
    std::set<std::string> groups;
    for (const TraceEvent& e : t->replay.traces.at(5)) {
      if (!e.group.empty()) groups.insert(e.group);
    }
    EXPECT_EQ(groups, (std::set<std::string>{"world", "world/" + std::to_string(5 / dpn),
                                             "world/" + std::to_string(5 % dpn) + ".2"}));
  }
}

// NOTE [Measured collectives], NOTE [Host-progressed collectives] (sim/models/network/topology.h): a
// calibrated-MPI-like topology — measured tables for the group size, collectives that move
// only inside the waits — gives the same timeline in both modes, and longer steps than the
// same tables progressed asynchronously (the reductions no longer hide behind backward).
TEST(TimingMode, NumericsAndTimingAgreeWhenTheHostProgressesCollectives) {
  const FsdpTrainOptions o = bert_tiny();
  const int w = 4;
  TopologySpec spec;
  spec.host_progress = true;
  spec.measured.ranks = w;
  spec.measured.tables[runtime::comm::OpKind::kAllGather] = {{1024, 20'000}, {1 << 20, 400'000}};
  spec.measured.tables[runtime::comm::OpKind::kReduceScatter] = {{1024, 30'000}, {1 << 20, 900'000}};
  NetworkSpec ns;
  ns.nodes = 1;
  ns.devices_per_node = w;
  auto host = make_network(ns, spec);
  ASSERT_THAT(host, IsOk());
  const auto t = capture_and_replay(o, w, DeviceProfile{}, {}, *host);
  ASSERT_TRUE(t.has_value());
  expect_same_timeline(run_numerics(o, w, 0, DeviceProfile{}, false, {}, *host), t->graph, t->replay);
  expect_same_timeline(run_numerics(o, w, 5, DeviceProfile{}, false, {}, *host), t->graph, t->replay);
  spec.host_progress = false;
  auto async = make_network(ns, spec);
  ASSERT_THAT(async, IsOk());
  const auto a = capture_and_replay(o, w, DeviceProfile{}, {}, *async);
  ASSERT_TRUE(a.has_value());
  EXPECT_GT(t->replay.ranks[0].step_times.back(), a->replay.ranks[0].step_times.back());
}

// Beyond kMaxPerRankCaptureWorld ranks the others share rank 0's program, and the straggler
// still runs its own: every rank's step grows by what the straggler's compute adds.
TEST(TimingMode, LargeWorldsCaptureEachStragglerAtItsOwnSpeed) {
  const int w = kLargeWorld;
  const FsdpTrainOptions o = large_world_classifier(2);
  CaptureOptions slow;
  slow.slowdown.assign(static_cast<std::size_t>(w), 1.0);
  slow.slowdown[40] = 2.0;
  slow.slowdown[w - 1] = 2.0;  // rank W-1's full-speed program is then nobody's
  auto g = capture_graph(o, w, DeviceProfile{}, slow);
  ASSERT_THAT(g, IsOk());
  auto plain = capture_graph(o, w, DeviceProfile{});
  ASSERT_THAT(plain, IsOk());
  ASSERT_EQ(plain->programs.size(), 2u);  // rank 0's and rank W-1's
  EXPECT_EQ(g->programs.size(), 3u);      // rank 0's and the two stragglers'
  EXPECT_NE(&g->program(w - 1), &g->program(40));
  EXPECT_EQ(&g->program(39), &g->program(0));
  const RankProgram& straggler = g->program(40);
  EXPECT_NE(&straggler, &g->program(0));
  Nanos slow_compute = 0, own_compute = 0;
  for (const auto& op : straggler.ops) slow_compute += op.duration;
  for (const auto& op : g->program(0).ops) own_compute += op.duration;
  EXPECT_GT(slow_compute, own_compute * 19 / 10);  // twice the compute, host time per op included
  ReplayOptions ro;
  ro.network = make_alpha_beta_ring(NetworkModel{});
  auto with = replay(*g, ro);
  auto without = replay(*plain, ro);
  ASSERT_TRUE(with.is_ok() && without.is_ok());
  for (int r : {0, 40, w - 1}) {
    EXPECT_GT(with->ranks[static_cast<std::size_t>(r)].step_times.back(),
              without->ranks[static_cast<std::size_t>(r)].step_times.back())
        << "rank " << r;
  }
}

// The ranks' statuses of a numerics run with `faults`, carried out by a FaultInjector on
// every rank as `shardlab run` does (cli/run_command.cc).
std::vector<Status> numerics_with_faults(const FsdpTrainOptions& in, int world, const std::vector<Fault>& faults) {
  WorldOptions wo;
  wo.world_size = world;
  World w(wo);
  auto plan = std::make_shared<FaultPlan>();
  plan->faults = faults;
  FsdpTrainOptions o = in;
  o.gather_results = false;
  const auto results = w.run([&](RankContext& ctx) -> Status {
    FaultInjector comm(&ctx.comm, plan, ctx.rank, &ctx.clock);
    FsdpTrainOptions mine = o;
    mine.before_step = [&comm](int step) { return comm.before_step(step); };
    return runtime::train::train_fsdp(comm, ctx.device, ctx.clock, mine).status();
  });
  std::vector<Status> out;
  for (const auto& r : results) out.push_back(r.status);
  return out;
}

// NOTE [Faults in timing mode]: a crash (by step), a hang (by time) and a corrupt payload
// caught by the integrity check stop the same rank at the same point in both modes, and
// every other rank times out at the same virtual instant with the same words (numerics
// mode's errors may carry the FSDP layer's context in front).
void expect_faults_as_in_numerics_mode(const FsdpTrainOptions& o, int w) {
  auto g = capture_graph(o, w, DeviceProfile{});
  ASSERT_THAT(g, IsOk());
  ReplayOptions ro;
  ro.network = make_alpha_beta_ring(NetworkModel{});
  auto plain = replay(*g, ro);
  ASSERT_THAT(plain, IsOk());
  ASSERT_EQ(plain->ranks[0].step_starts.size(), 3u);
  EXPECT_TRUE(plain->errors.empty());
  Fault crash;  // rank 2 at the top of step 2
  crash.rank = 2;
  crash.step = 1;
  Fault hang;  // rank 3 in the middle of step 2
  hang.kind = FaultKind::kHang;
  hang.rank = 3;
  hang.time = (plain->ranks[3].step_starts[1] + plain->ranks[3].step_starts[2]) / 2;
  Fault corrupt;
  corrupt.kind = FaultKind::kCorrupt;
  corrupt.rank = 1;
  corrupt.collective = 5;
  corrupt.integrity_check = true;
  for (const Fault& f : {crash, hang, corrupt}) {
    SCOPED_TRACE(f.describe());
    ro.faults = {f};
    auto tim = replay(*g, ro);
    ASSERT_THAT(tim, IsOk());
    const std::vector<Status> num = numerics_with_faults(o, w, {f});
    ASSERT_EQ(tim->errors.size(), static_cast<std::size_t>(w));
    EXPECT_EQ(tim->errors.front().rank, f.rank);
    for (const RankError& e : tim->errors) {
      const Status& n = num[static_cast<std::size_t>(e.rank)];
      EXPECT_EQ(e.status.code(), n.code()) << e.status.to_string();
      EXPECT_EQ(e.status.code(),
                e.rank == f.rank ? (f.kind == FaultKind::kCorrupt ? StatusCode::kDataLoss : StatusCode::kUnavailable)
                                 : StatusCode::kTimeout);
      EXPECT_TRUE(n.message().ends_with(e.status.message()))
          << "numerics: " << n.message() << "\ntiming:   " << e.status.message();
    }
  }
}

TEST(TimingMode, FaultsStopRanksAsInNumericsMode) {
  for (const bool hybrid_shard : {false, true}) {
    SCOPED_TRACE(hybrid_shard ? "HYBRID_SHARD, 2 nodes of 2" : "FULL_SHARD");
    FsdpTrainOptions o = hybrid_shard ? hybrid(2) : bert_tiny();
    o.steps = 3;
    expect_faults_as_in_numerics_mode(o, 4);
  }
}

// A collective that completes later than the collective timeout after a rank began to wait
// for it times out that rank ("it completed only at …"), and the others then wait for it
// in vain — in both modes alike.
TEST(TimingMode, ALateCollectiveTimesOutAsInNumericsMode) {
  FsdpTrainOptions o = bert_tiny();
  o.fsdp.collective_timeout = 20'000;  // 20 µs: shorter than the gradient reduce-scatters
  const int w = 4;
  auto g = capture_graph(o, w, DeviceProfile{});
  ASSERT_THAT(g, IsOk());
  ReplayOptions ro;
  ro.network = make_alpha_beta_ring(NetworkModel{});
  ro.collective_timeout = o.fsdp.collective_timeout;
  auto tim = replay(*g, ro);
  ASSERT_THAT(tim, IsOk());
  const std::vector<Status> num = numerics_with_faults(o, w, {});
  ASSERT_EQ(tim->errors.size(), static_cast<std::size_t>(w));
  EXPECT_NE(tim->errors.front().status.message().find("it completed only at"), std::string::npos)
      << tim->errors.front().status.message();
  for (const RankError& e : tim->errors) {
    const Status& n = num[static_cast<std::size_t>(e.rank)];
    EXPECT_EQ(e.status.code(), StatusCode::kTimeout);
    EXPECT_EQ(n.code(), StatusCode::kTimeout) << n.to_string();
    EXPECT_TRUE(n.message().ends_with(e.status.message()))
        << "numerics: " << n.message() << "\ntiming:   " << e.status.message();
  }
}

// NOTE [Virtual time limit]: a timeout as long as the API allows never wraps the deadline
// (which would time every collective out at once).
TEST(TimingMode, TheLongestTimeoutNeverWraps) {
  const FsdpTrainOptions o = bert_tiny();
  auto g = capture_graph(o, 4, DeviceProfile{});
  ASSERT_THAT(g, IsOk());
  ReplayOptions ro;
  ro.network = make_alpha_beta_ring(NetworkModel{});
  ro.collective_timeout = std::numeric_limits<Nanos>::max() - 1;
  auto tim = replay(*g, ro);
  ASSERT_THAT(tim, IsOk());
  EXPECT_TRUE(tim->errors.empty()) << tim->errors.front().status.to_string();
}

// A crash in a world beyond kMaxPerRankCaptureWorld: every survivor times out, each
// naming the crashed rank as the one that never arrived.
TEST(TimingMode, LargeWorldsReportEveryRankAfterACrash) {
  const int w = kLargeWorld;
  const FsdpTrainOptions o = large_world_classifier(2);
  auto g = capture_graph(o, w, DeviceProfile{});
  ASSERT_THAT(g, IsOk());
  ReplayOptions ro;
  ro.network = make_alpha_beta_ring(NetworkModel{});
  ro.collective_timeout = 5'000'000'000;
  Fault crash;
  crash.rank = 40;
  crash.step = 1;
  ro.faults = {crash};
  auto tim = replay(*g, ro);
  ASSERT_THAT(tim, IsOk());
  ASSERT_EQ(tim->errors.size(), static_cast<std::size_t>(w));
  EXPECT_EQ(tim->errors[0].rank, 40);
  EXPECT_NE(tim->errors[0].status.message().find("crashed at the top of step 2"), std::string::npos);
  for (std::size_t i = 1; i < tim->errors.size(); ++i) {
    EXPECT_EQ(tim->errors[i].status.code(), StatusCode::kTimeout);
    EXPECT_NE(tim->errors[i].status.message().find("timed out after 5.000000 s (virtual)"), std::string::npos);
    EXPECT_NE(tim->errors[i].status.message().find("never arrived (group ranks): 40 ["), std::string::npos)
        << tim->errors[i].status.message();
  }
  // Step 1 completed everywhere; nobody completed step 2.
  for (const RankTiming& r : tim->ranks) EXPECT_EQ(r.step_times.size(), 1u);
}

// Ranks differ in their compute (shard pieces, data): beyond kMaxPerRankCaptureWorld
// ranks, rank 0's program stands in for the ranks between 0 and W-1, and the graph says so.
TEST(TimingMode, LargeWorldsReplayRank0sProgramAndSayTheyAreApproximate) {
  const int w = kLargeWorld;
  const FsdpTrainOptions o = large_world_classifier(1);
  auto g = capture_graph(o, w, DeviceProfile{});
  ASSERT_THAT(g, IsOk());
  ASSERT_EQ(g->programs.size(), 2u);
  EXPECT_FALSE(g->approximation.empty());
  EXPECT_EQ(g->program_of_rank[0], 0);
  EXPECT_EQ(g->program_of_rank[static_cast<std::size_t>(w - 2)], 0);
  EXPECT_EQ(g->program_of_rank[static_cast<std::size_t>(w - 1)], 1);
  ReplayOptions ro;
  ro.network = make_alpha_beta_ring(NetworkModel{});
  auto tim = replay(*g, ro);
  ASSERT_THAT(tim, IsOk());
  EXPECT_GT(tim->ranks.back().step_times.at(0), 0);
}

// The masked-LM head too (NOTE [Static masked-LM shape] in runtime/model/bert.h): its
// decoder's shape does not depend on how many tokens a rank's data masks, so rank 0's
// program can stand in for the others, and worlds of more than kMaxPerRankCaptureWorld
// ranks replay with it.
TEST(TimingMode, LargeWorldsWithTheMaskedLmHeadReplayRank0sProgram) {
  FsdpTrainOptions o = bert_tiny();
  const int w = kMaxPerRankCaptureWorld + 8;
  o.global_batch = 2 * w;
  o.steps = 1;
  auto g = capture_graph(o, w, DeviceProfile{});
  ASSERT_THAT(g, IsOk());
  EXPECT_LE(g->programs.size(), 2u);
  ReplayOptions ro;
  ro.network = make_alpha_beta_ring(NetworkModel{});
  auto tim = replay(*g, ro);
  ASSERT_THAT(tim, IsOk());
  EXPECT_GT(tim->ranks.front().step_times.at(0), 0);
}

// HYBRID_SHARD in a large world: every rank's program names the same group layouts, so
// rank 0's program still stands in for the others; rank 71 runs in node 8's group and in
// replica group 7, and every group's collectives complete.
TEST(TimingMode, LargeWorldsReplayHybridShardGroupByGroup) {
  const int w = kLargeWorld;  // 9 nodes of 8
  FsdpTrainOptions o = large_world_classifier(1);
  o.fsdp.strategy = runtime::fsdp::ShardingStrategy::kHybridShard;
  o.fsdp.devices_per_node = 8;
  auto g = capture_graph(o, w, DeviceProfile{});
  ASSERT_THAT(g, IsOk());
  EXPECT_LE(g->programs.size(), 2u);
  ReplayOptions ro;
  ro.network = make_alpha_beta_ring(NetworkModel{});
  ro.traced_ranks = {0, w - 1};
  auto tim = replay(*g, ro);
  ASSERT_THAT(tim, IsOk());
  ASSERT_TRUE(tim->errors.empty());
  std::set<std::string> groups;
  for (const TraceEvent& e : tim->traces.at(w - 1)) {
    if (!e.group.empty()) groups.insert(e.group);
  }
  EXPECT_EQ(groups, (std::set<std::string>{"world", "world/8", "world/7.2"}));
  for (const RankTiming& r : tim->ranks) EXPECT_GT(r.step_times.at(0), 0);
  // Per instance: 2 splits + the world's collectives once + each layout's once per group.
  std::int64_t expected = 0;
  for (const CollectiveDesc& d : g->program(0).collectives) expected += group_count(d, w);
  EXPECT_EQ(tim->collectives, expected);
}

// NOTE [Initialization unit by unit]: in timing mode the host copy the units move from is
// a deferred storage nothing charges, so a world of 72 ranks whose devices could not hold
// the full fp32 model (12 layers, a small vocabulary: layers dominate) still captures, and
// the device's peak stays below that model's size.
TEST(TimingMode, LargeWorldsNeverHoldTheFullModelOnADevice) {
  FsdpTrainOptions o = bert_tiny();
  o.bert.config.vocab_size = 512;
  o.bert.config.num_hidden_layers = 12;
  const int w = kMaxPerRankCaptureWorld + 8;
  o.global_batch = 2 * w;
  o.steps = 1;
  const std::int64_t model_bytes = 4 * runtime::model::total_numel(runtime::train::make_model(o)->params());
  DeviceProfile device;
  device.capacity_bytes = model_bytes;
  auto p = capture_rank(o, w, 0, device);
  ASSERT_THAT(p, IsOk());
  EXPECT_LT(p->memory.peak_total, model_bytes);
  EXPECT_LT(p->memory.peak[static_cast<int>(MemoryCategory::kOther)], 1 << 10);
}

TEST(TimingMode, CaptureAndReplayAreDeterministic) {
  FsdpTrainOptions o = bert_tiny();
  o.steps = 1;
  auto g1 = capture_graph(o, 8, DeviceProfile{});
  auto g2 = capture_graph(o, 8, DeviceProfile{});
  ASSERT_TRUE(g1.is_ok() && g2.is_ok());
  EXPECT_EQ(graph_to_json_string(*g1), graph_to_json_string(*g2));
  ReplayOptions ro;
  ro.network = make_alpha_beta_ring(NetworkModel{});
  ro.traced_ranks = {0, 7};
  auto a = replay(*g1, ro);
  auto b = replay(*g1, ro);
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  for (int r = 0; r < 8; ++r)
    EXPECT_EQ(a->ranks[static_cast<std::size_t>(r)].end_time, b->ranks[static_cast<std::size_t>(r)].end_time);
  std::string why;
  EXPECT_TRUE(same_events(a->traces.at(7), b->traces.at(7), &why)) << why;
}

TEST(TimingMode, GraphJsonRoundTripReplaysTheSameTimeline) {
  FsdpTrainOptions o = hybrid(4);  // the group layouts round-trip too
  o.steps = 1;
  auto g = capture_graph(o, 8, DeviceProfile{});
  ASSERT_THAT(g, IsOk());
  const std::string path = (std::filesystem::temp_directory_path() / "shardlab_timing_test_graph.json").string();
  ASSERT_TRUE(write_graph_json(*g, path).is_ok());
  auto back = read_graph_json(path);
  std::filesystem::remove(path);
  ASSERT_THAT(back, IsOk());
  EXPECT_EQ(graph_to_json_string(*back), graph_to_json_string(*g));
  ReplayOptions ro;
  ro.network = make_alpha_beta_ring(NetworkModel{});
  ro.traced_ranks = all_ranks(8);
  auto a = replay(*g, ro);
  auto b = replay(*back, ro);
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  for (int r = 0; r < 8; ++r) {
    std::string why;
    EXPECT_TRUE(same_events(a->traces.at(r), b->traces.at(r), &why)) << why;
    EXPECT_EQ(a->ranks[static_cast<std::size_t>(r)].step_times, b->ranks[static_cast<std::size_t>(r)].step_times);
  }
}

// `text` with its first `from` replaced by `to` must be refused, naming `expected`.
void expect_graph_rejected(const std::string& text, const std::string& from, const std::string& to,
                           const std::string& expected) {
  SCOPED_TRACE(from + " -> " + to);
  std::string bad = text;
  const std::size_t at = bad.find(from);
  ASSERT_NE(at, std::string::npos) << "the graph has no " << from;
  bad.replace(at, from.size(), to);
  auto r = graph_from_json_string(bad, "g.json");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find(expected), std::string::npos) << r.status().to_string();
}

TEST(TimingMode, GraphReaderRejectsBrokenFilesNamingTheField) {
  FsdpTrainOptions o = bert_tiny();
  o.steps = 1;
  auto g = capture_graph(o, 2, DeviceProfile{});
  ASSERT_TRUE(g.is_ok());
  const std::string text = graph_to_json_string(*g);
  EXPECT_EQ(graph_from_json_string("{", "g.json").status().code(), StatusCode::kInvalidArgument);
  expect_graph_rejected(text, "\"world_size\":2", "\"world_size\":0", "world_size");
  expect_graph_rejected(text, "\"kind\":\"all_gather\"", "\"kind\":\"all_gatherX\"", "].kind: 'all_gatherX'");
  // Op shapes (format version 2): a table of shape lists (dimensions >= 0), ops index it.
  {
    auto j = nlohmann::json::parse(text);
    ASSERT_FALSE(j["programs"][0]["op_shapes"].empty());
    j["programs"][0]["op_shapes"][0] = nlohmann::json::array({nlohmann::json::array({4, -1})});
    auto negative = graph_from_json_string(j.dump(), "g.json");
    ASSERT_FALSE(negative.is_ok());
    EXPECT_NE(negative.status().message().find("op_shapes[0]: dimension -1 is negative"), std::string::npos)
        << negative.status().message();
    j = nlohmann::json::parse(text);
    j["programs"][0]["ops"][0][2] = j["programs"][0]["op_shapes"].size();
    auto outside = graph_from_json_string(j.dump(), "g.json");
    ASSERT_FALSE(outside.is_ok());
    EXPECT_NE(outside.status().message().find("ops[0]: shapes index"), std::string::npos) << outside.status().message();
    j["programs"][0]["ops"][0].erase(2);
    auto old = graph_from_json_string(j.dump(), "g.json");
    ASSERT_FALSE(old.is_ok());
    EXPECT_NE(old.status().message().find("expected [name index, duration, shapes]"), std::string::npos)
        << old.status().message();
  }
  // Numbers beyond their type are an error, not a wrap (2^40 ranks once read as 0).
  expect_graph_rejected(text, "\"world_size\":2", "\"world_size\":1099511627776",
                        "world_size: 1099511627776 is out of range");
  {
    // A program whose last collective was removed still issues it: refused, no heap
    // corruption.
    auto j = nlohmann::json::parse(text);
    j["programs"][0]["collectives"].erase(j["programs"][0]["collectives"].size() - 1);
    auto broken = graph_from_json_string(j.dump(), "g.json");
    ASSERT_FALSE(broken.is_ok());
    EXPECT_NE(broken.status().message().find("issues collective"), std::string::npos) << broken.status().message();
  }

  // Group layouts (NOTE [Groups in timing mode]), in HYBRID_SHARD on 2 nodes of 2: the
  // replica groups' desc ends "stride":2}, the node groups' "split":1,"stride":1}.
  FsdpTrainOptions h = hybrid(2);
  h.steps = 1;
  auto hg = capture_graph(h, 4, DeviceProfile{});
  ASSERT_THAT(hg, IsOk());
  const std::string hybrid_text = graph_to_json_string(*hg);
  // A layout that does not tile the world.
  expect_graph_rejected(hybrid_text, "\"stride\":2}", "\"stride\":3}",
                        "split_strided(stride 3, size 2) of a group of 4");
  expect_graph_rejected(hybrid_text, "\"stride\":2}", "\"stride\":0}", "stride, size and split must be >= 1");
  // Split 2 with the node groups' layout as well as the replica groups'.
  expect_graph_rejected(hybrid_text, "\"split\":1,\"stride\":1}", "\"split\":2,\"stride\":1}",
                        "split 2 of group 'world/split2' has stride 2 and size 2, elsewhere stride 1 and size 2");
  expect_graph_rejected(hybrid_text, "\"split\":1,\"stride\":1}", "\"split\":99999,\"stride\":1}",
                        "split 99999 outside 1..");
}

TEST(TimingMode, OutOfMemoryEndsTheCaptureWithTheBreakdown) {
  FsdpTrainOptions o = bert_tiny();
  DeviceProfile small;
  // bert-tiny's root unit (embeddings and the tied MLM head) is 15.34 MiB of fp32: moving
  // it to the device at initialization (NOTE [Initialization unit by unit]) cannot fit.
  small.capacity_bytes = 8 << 20;
  auto g = capture_graph(o, 8, small);
  ASSERT_FALSE(g.is_ok());
  EXPECT_EQ(g.status().code(), StatusCode::kOutOfMemory);
  EXPECT_NE(g.status().message().find("requested 15.34 MiB for 'unit2.init' (parameters)"), std::string::npos)
      << g.status().to_string();
  EXPECT_NE(g.status().message().find("other"), std::string::npos) << g.status().to_string();
}

TEST(TimingMode, TheCaptureNeverMaterializesWhatOnlyDeviceOpsTouch) {
  // bert-tiny's unsharded word embeddings alone are 15.6 MB; the capture's host footprint
  // stays that of the shards, the batch and the masks — measured through a device whose
  // capacity is the whole model, far below what materializing it all would take. The
  // equality test above checks the program; here the timing-mode peak equals numerics'.
  const FsdpTrainOptions o = bert_tiny();
  auto p = capture_rank(o, 8, 0, DeviceProfile{});
  ASSERT_THAT(p, IsOk());
  EXPECT_GT(p->memory.peak_total, 15 << 20);
  EXPECT_GT(p->ops.size(), 100u);
  EXPECT_FALSE(p->collectives.empty());
}

// ---- replay on hand-made graphs ------------------------------------------------------------

// A closed-form model: every member finishes `cost` after the latest ready time.
class FlatModel final : public NetworkCostModel {
 public:
  explicit FlatModel(Nanos cost) : cost_(cost) {}
  CollectiveTiming collective(const CollectiveQuery& q) const override {
    Nanos last = 0;
    for (Nanos a : q.arrivals) last = std::max(last, a);
    return {std::vector<Nanos>(q.arrivals.size(), last + cost_), "flat"};
  }
  Nanos message(int, int, std::int64_t, Nanos start) const override { return start + cost_; }
  std::string describe() const override { return "flat"; }

 private:
  Nanos cost_;
};

OpGraph two_all_gathers(int world) {
  RankProgram p;
  p.shapes = {{{8, 4}, {4, 8}, {8, 8}}};
  p.ops = {{"gemm", 100, 0}};
  CollectiveDesc ag;
  ag.kind = OpKind::kAllGather;
  ag.bytes = 64;
  ag.count = 16;
  p.collectives = {ag, ag};
  p.markers = {{runtime::train::TrainMarker::kStepBegin, 0, -1}, {runtime::train::TrainMarker::kStepEnd, 0, -1}};
  p.nodes = {{NodeKind::kMarker, 0, 0, 0}, {NodeKind::kCompute, 0, 1, 100}, {NodeKind::kIssue, 0, 0, 0},
             {NodeKind::kIssue, 1, 0, 0},  {NodeKind::kWait, 1, 0, 0},      {NodeKind::kWait, 0, 0, 0},
             {NodeKind::kMarker, 1, 0, 0}};
  OpGraph g;
  g.world_size = world;
  g.steps = 1;
  g.programs = {p};
  return g;
}

TEST(Replay, CollectivesOnOneStreamRunOneAfterTheOther) {
  ReplayOptions ro;
  ro.network = std::make_shared<FlatModel>(1000);
  ro.traced_ranks = {0};
  auto r = replay(two_all_gathers(1000), ro);
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->collectives, 2);
  // The traced rank's compute op carries its captured shapes into trace.json.
  const auto& events = r->traces.at(0);
  const auto gemm = std::find_if(events.begin(), events.end(), [](const TraceEvent& e) { return e.name == "gemm"; });
  ASSERT_NE(gemm, events.end());
  EXPECT_EQ(gemm->shapes, (std::vector<std::vector<std::int64_t>>{{8, 4}, {4, 8}, {8, 8}}));
  for (const RankTiming& t : r->ranks) {
    EXPECT_EQ(t.step_starts, std::vector<Nanos>{0});
    EXPECT_EQ(t.step_times, std::vector<Nanos>{100 + 1000 + 1000});
  }
  const auto& tr = r->traces.at(0);
  ASSERT_EQ(tr.size(), 3u);
  EXPECT_EQ(tr[2].start, 1100);  // the second all-gather starts when the first ends
}

// two_all_gathers(4) with the ranks that `program_of_rank` maps to 1 running a program whose
// second collective `change` alters: the replay's error (OK if it replayed).
Status replay_with_changed_second_collective(const std::function<void(CollectiveDesc&)>& change,
                                             std::vector<int> program_of_rank) {
  OpGraph g = two_all_gathers(4);
  RankProgram other = g.programs[0];
  change(other.collectives[1]);
  g.programs.push_back(other);
  g.program_of_rank = std::move(program_of_rank);
  ReplayOptions ro;
  ro.network = std::make_shared<FlatModel>(10);
  return replay(g, ro).status();
}

TEST(Replay, MismatchedProgramsFailNamingBothCollectives) {
  const Status s =
      replay_with_changed_second_collective([](CollectiveDesc& d) { d.kind = OpKind::kReduceScatter; }, {0, 0, 1, 0});
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("reduce_scatter #1"), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find("all_gather #1"), std::string::npos) << s.to_string();
}

// The same collective in another group layout (NOTE [Groups in timing mode]) is a mismatch
// too, even when the two ranks' groups would be different groups.
TEST(Replay, ProgramsInDifferentGroupLayoutsFailNamingBothGroups) {
  const Status s = replay_with_changed_second_collective(
      [](CollectiveDesc& d) {
        d.group = "world/split1";
        d.stride = 1;
        d.size = 2;
        d.split = 1;
      },
      {0, 0, 1, 1});
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("group 'world')"), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find("group 'world/1')"), std::string::npos) << s.to_string();
}

// NOTE [Host and device timelines]: one rank, one step of `n` ops of `d` ns each, then a
// collective (wait included) and the step's end.
OpGraph one_segment(int n, Nanos d) {
  RankProgram p;
  for (int k = 0; k < n; ++k) p.ops.push_back({"scale", d, -1});
  CollectiveDesc ar;
  ar.kind = OpKind::kAllReduce;
  ar.bytes = 64;
  ar.count = 16;
  p.collectives = {ar};
  p.markers = {{runtime::train::TrainMarker::kStepBegin, 0, -1}, {runtime::train::TrainMarker::kStepEnd, 0, -1}};
  p.nodes = {{NodeKind::kMarker, 0, 0, 0},
             {NodeKind::kCompute, 0, n, n * d},
             {NodeKind::kIssue, 0, 0, 0},
             {NodeKind::kWait, 0, 0, 0},
             {NodeKind::kMarker, 1, 0, 0}};
  OpGraph g;
  g.world_size = 1;
  g.steps = 1;
  g.programs = {p};
  return g;
}

SoftwareStack eager_stack(Nanos dispatch, bool overlap) {
  SoftwareStack s;
  s.name = "test_eager";
  s.execution = StackExecution::kEager;
  s.op_dispatch_ns = dispatch;
  s.fsdp_hook_ns = 7;
  s.host_device_overlap = overlap;
  return s;
}

TEST(Replay, AHostBoundStepTakesTheHostStreamsTime) {
  // Eager, dispatch D = 50 ns per op, ops of d = 20 ns: the host is the bottleneck. Op k
  // is dispatched at k·D and runs [k·D, k·D + d]; the hook puts the host at 507; the
  // all-reduce (flat 1000 ns) is ready at max(h, dev) = max(507, 520) and ends at 1520.
  ReplayOptions ro;
  ro.network = std::make_shared<FlatModel>(1000);
  ro.traced_ranks = {0};
  ro.stack = eager_stack(50, true);
  auto r = replay(one_segment(10, 20), ro);
  ASSERT_THAT(r, IsOk());
  const RankTiming& t = r->ranks[0];
  EXPECT_EQ(t.step_times, std::vector<Nanos>{520 + 1000});
  // The device waited D before the first op and D - d before each other one.
  EXPECT_EQ(t.host_bound, std::vector<Nanos>{50 + 9 * 30});
  // The trace shows the host stream: one dispatch span and the hook.
  const auto& tr = r->traces.at(0);
  const auto host = std::count_if(tr.begin(), tr.end(), [](const TraceEvent& e) { return e.stream == kTraceHost; });
  EXPECT_EQ(host, 2);
  const auto last = std::find_if(tr.rbegin(), tr.rend(), [](const TraceEvent& e) { return e.name == "scale"; });
  ASSERT_NE(last, tr.rend());
  EXPECT_EQ(last->start, 500);  // the tenth op, once dispatched
}

TEST(Replay, ADeviceBoundStepHidesTheHost) {
  // Dispatch 5 ns, ops of 100 ns: the host runs ahead; the device starts the first op at 5
  // and never waits again: 5 + 10·100, then the all-reduce.
  ReplayOptions ro;
  ro.network = std::make_shared<FlatModel>(1000);
  ro.stack = eager_stack(5, true);
  auto r = replay(one_segment(10, 100), ro);
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->ranks[0].step_times, std::vector<Nanos>{5 + 1000 + 1000});
  EXPECT_EQ(r->ranks[0].host_bound, std::vector<Nanos>{5});
  // Without overlap the host waits for each op: host and device add up.
  ro.stack = eager_stack(5, false);
  auto serial = replay(one_segment(10, 100), ro);
  ASSERT_THAT(serial, IsOk());
  EXPECT_EQ(serial->ranks[0].step_times, std::vector<Nanos>{10 * 105 + 7 + 1000});
}

TEST(Replay, AGraphIsRecordedThenLaunchedAsOne) {
  // Lazy: 10 ops recorded at 30 ns each and one launch of 200 ns put the host at 500, when
  // the graph's ops start back to back (the device waited 500) and end at 700; the hook
  // puts the host at 507, and the all-reduce is ready at max(507, 700) = 700.
  SoftwareStack s;
  s.name = "test_lazy";
  s.execution = StackExecution::kLazy;
  s.op_dispatch_ns = 30;
  s.graph_launch_ns = 200;
  s.fsdp_hook_ns = 7;
  s.host_device_overlap = true;
  ReplayOptions ro;
  ro.network = std::make_shared<FlatModel>(1000);
  ro.stack = s;
  auto r = replay(one_segment(10, 20), ro);
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->ranks[0].step_times, std::vector<Nanos>{700 + 1000});
  EXPECT_EQ(r->ranks[0].host_bound, std::vector<Nanos>{500});
  // The ideal stack on the same graph: the one-timeline replay (no host time).
  ro.stack = SoftwareStack{};
  auto ideal = replay(one_segment(10, 20), ro);
  ASSERT_THAT(ideal, IsOk());
  EXPECT_EQ(ideal->ranks[0].step_times, std::vector<Nanos>{200 + 1000});
  EXPECT_EQ(ideal->ranks[0].host_bound, std::vector<Nanos>{0});
}

// NOTE [Software stack]: a graph carries the stack it was captured under; a broken stack
// is refused naming the key.
TEST(TimingMode, GraphJsonCarriesItsSoftwareStack) {
  OpGraph g = one_segment(3, 10);
  g.stack = *load_stack("pytorch_lazy");
  const std::string text = graph_to_json_string(g);
  auto back = graph_from_json_string(text, "g.json");
  ASSERT_THAT(back, IsOk());
  EXPECT_EQ(back->stack, g.stack);
  EXPECT_EQ(graph_to_json_string(*back), text);
  // An ideal graph writes no stack (older graphs read the same).
  EXPECT_EQ(graph_to_json_string(one_segment(3, 10)).find("\"stack\""), std::string::npos);
  std::string bad = text;
  bad.replace(bad.find("\"lazy\""), 6, "\"lazy2\"");
  auto r = graph_from_json_string(bad, "g.json");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("g.json: stack: key 'execution'"), std::string::npos) << r.status().to_string();
  std::string not_object = text;
  const std::size_t at = not_object.find("\"stack\":{");
  ASSERT_NE(at, std::string::npos);
  not_object.replace(at, 9, "\"stack\":7,\"was\":{");
  auto r2 = graph_from_json_string(not_object, "g.json");
  ASSERT_FALSE(r2.is_ok());
  EXPECT_NE(r2.status().message().find("stack"), std::string::npos) << r2.status().to_string();
  EXPECT_NE(r2.status().message().find("not an object"), std::string::npos) << r2.status().to_string();
}

TEST(Replay, ProgramsIssuingDifferentCollectivesAreRefused) {
  OpGraph g = two_all_gathers(3);
  RankProgram lazy = g.programs[0];
  lazy.nodes = {{NodeKind::kMarker, 0, 0, 0}};
  lazy.collectives.clear();
  g.programs.push_back(lazy);
  g.program_of_rank = {0, 0, 1};
  ReplayOptions ro;
  ro.network = std::make_shared<FlatModel>(10);
  auto r = replay(g, ro);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace shardlab::sim::timing
