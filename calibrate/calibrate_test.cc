// Calibration measured on the simulator itself (a VirtualClock instead of the wall
// clock): it must recover the profile and the α–β numbers the simulator was given. The
// real-CPU measurement runs once, tiny, as a smoke test.
#include "calibrate/calibrate.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <limits>

#include "sim/engine/world.h"
#include "sim/models/device/device.h"
#include "sim/models/device/profiles.h"
#include "sim/models/network/network.h"
#include "sim/models/network/topology.h"
#include "testing/status_matchers.h"

using shardlab::testlib::IsOk;

namespace shardlab::sim {
namespace {

// A small calibration of a simulated device: 64³ GEMM, in-cache ops of 1,024 elements, a
// 1 MiB copy, two windows of 5 ms each (quick windows of 1 ms).
DeviceCalibrationOptions small_options() {
  DeviceCalibrationOptions o;
  o.gemm_size = 64;
  o.vector_elements = 1 << 10;
  o.copy_bytes = 1 << 20;
  o.repeats = 2;
  o.min_window_ns = 5 * kNanosPerMilli;
  o.cache_bytes = 0;  // the host's L2 must not change what a simulated truth measures as
  return o;
}

// NOTE [Host time per op]: a device whose every op costs 300 ns more than the profile says
// (the runtime's host time, on a CPU) shows it in the training loop, per op charged.
TEST(Calibrate, MeasuresTheHostTimePerOpOfATrainingLoop) {
  DeviceProfile truth;
  truth.launch_ns = 1500;
  truth.alloc_ns = 200;
  truth.op_host_ns = 300;
  truth.compute_factors = {{"optimizer_step", 0.5}};
  VirtualClock clock;
  SimDevice dev(0, truth, &clock);
  DeviceCalibrationOptions o = small_options();  // quick windows of 1 ms: one loop each
  DeviceProfile without = truth;
  without.op_host_ns = 0;
  auto host = measure_op_host_ns(dev, clock, without, o);
  ASSERT_THAT(host, IsOk());
  EXPECT_NEAR(*host, 300, 1);
  // The profile's own op_host_ns is not part of the prediction.
  host = measure_op_host_ns(dev, clock, truth, o);
  ASSERT_THAT(host, IsOk());
  EXPECT_NEAR(*host, 300, 1);
  // A profile that charges more than the device takes finds no host time (never negative).
  DeviceProfile slower = without;
  slower.launch_ns = 3000;
  host = measure_op_host_ns(dev, clock, slower, o);
  ASSERT_THAT(host, IsOk());
  EXPECT_EQ(*host, 0);
  // From the outside a per-op host time and the launch overhead are the same charge: the
  // full calibration finds their sum, in launch_ns (timed on a bare one-element op).
  o.small_dim_factors = false;
  o.compute_factors = false;
  auto p = calibrate_device(dev, clock, o);
  ASSERT_THAT(p, IsOk());
  EXPECT_NEAR(p->launch_ns + p->op_host_ns, 1800, 2);
}

// NOTE [Per-op memory factors]: an optimizer update that streams its shard in half the
// time the memory rate says is found at its training size; the in-cache ops get none.
TEST(Calibrate, FindsAnOptimizerThatStreamsFasterThanTheCopyRate) {
  DeviceProfile truth;
  truth.vector_flops_per_s = 1e12;  // the update is memory-bound
  truth.memory_bytes_per_s = 2e10;
  truth.launch_ns = 1000;
  truth.memory_factors = {{"optimizer_step", 0.5}};
  VirtualClock clock;
  SimDevice dev(0, truth, &clock);
  DeviceCalibrationOptions o = small_options();
  o.small_dim_factors = false;
  o.op_host = false;
  auto p = calibrate_device(dev, clock, o);
  ASSERT_THAT(p, IsOk());
  EXPECT_NEAR(p->memory_bytes_per_s / truth.memory_bytes_per_s, 1.0, 1e-3);
  ASSERT_EQ(p->memory_factors.size(), 1u);
  EXPECT_NEAR(p->memory_factor("optimizer_step"), 0.5, 1e-2);
}

// A CPU-like simulated device (what calibrate assumes): GEMM operand traffic after the
// flops, a host cost per allocation, per-op compute factors and a small-dimension table
// (factor 1 at d = 16, the thin GEMM the operand passes are solved from).
DeviceProfile cpu_like_truth() {
  DeviceProfile truth;
  truth.matrix_flops_per_s = 3e11;
  truth.vector_flops_per_s = 1e10;  // in-cache GELU is compute bound
  truth.memory_bytes_per_s = 5e10;
  truth.launch_ns = 1500;
  truth.matrix_memory_overlap = false;
  truth.alloc_ns = 700;
  truth.compute_factors = {{"optimizer_step", 0.5}, {"layer_norm", 2.0}};
  truth.small_dim_factors = {{8, 1.5}, {16, 1.0}, {128, 1.0}};
  truth.matrix_operand_passes = 2.0;
  return truth;
}

// A machine that runs at half speed from `from` until `until` (virtual ns) and at full
// speed otherwise: every interval read inside that spell looks twice as long.
class SlowSpellClock final : public Clock {
 public:
  SlowSpellClock(const VirtualClock& base, Nanos from, Nanos until) : base_(base), from_(from), until_(until) {}
  Nanos now() const override {
    const Nanos t = base_.now();
    return t + std::clamp(t, from_, until_) - from_;
  }

 private:
  const VirtualClock& base_;
  Nanos from_, until_;
};

// NOTE [Calibration rounds]: a slow spell over one whole round leaves no trace when
// another round runs undisturbed, whether the spell comes first or last (each op keeps its
// best time over the rounds, and the profile is derived from those), while a single round
// measures the spell.
TEST(Calibrate, RoundsKeepEachOpsBestTimeOverASlowSpell) {
  const DeviceProfile truth = cpu_like_truth();
  constexpr Nanos kForever = std::numeric_limits<Nanos>::max() / 4;
  // The profile measured in `rounds` rounds with a spell [from, until), and the virtual
  // time the calibration took.
  const auto calibrate_in_spell = [&](int rounds, Nanos from, Nanos until) {
    VirtualClock base;
    SlowSpellClock clock(base, from, until);
    SimDevice dev(0, truth, &base);
    DeviceCalibrationOptions o = small_options();
    o.rounds = rounds;
    auto p = calibrate_device(dev, clock, o);
    EXPECT_THAT(p, IsOk());
    return std::make_pair(p.is_ok() ? *p : DeviceProfile{}, base.now());
  };
  const auto [fast, fast_ns] = calibrate_in_spell(1, kForever, kForever);
  const auto [slow, slow_ns] = calibrate_in_spell(1, 0, kForever);
  // One round, all of it in the spell: everything measured at half speed.
  EXPECT_NEAR(fast.matrix_flops_per_s / truth.matrix_flops_per_s, 1.0, 1e-3);
  EXPECT_NEAR(slow.matrix_flops_per_s / truth.matrix_flops_per_s, 0.5, 1e-2);
  EXPECT_NEAR(slow.memory_bytes_per_s / truth.memory_bytes_per_s, 0.5, 1e-2);
  EXPECT_EQ(slow.launch_ns, 2 * truth.launch_ns);
  // Two rounds, the first or the second in the spell: every figure is the truth's.
  for (const auto& [from, until] : {std::pair<Nanos, Nanos>{0, slow_ns}, {fast_ns, kForever}}) {
    SCOPED_TRACE("spell from " + std::to_string(from) + " until " + std::to_string(until));
    const DeviceProfile two = calibrate_in_spell(2, from, until).first;
    EXPECT_NEAR(two.matrix_flops_per_s / truth.matrix_flops_per_s, 1.0, 1e-3);
    EXPECT_NEAR(two.vector_flops_per_s / truth.vector_flops_per_s, 1.0, 1e-3);
    EXPECT_NEAR(two.memory_bytes_per_s / truth.memory_bytes_per_s, 1.0, 1e-3);
    EXPECT_EQ(two.launch_ns, truth.launch_ns);
    EXPECT_EQ(two.alloc_ns, truth.alloc_ns);
    EXPECT_NEAR(two.compute_factor("layer_norm"), 2.0, 1e-3);
    EXPECT_NEAR(two.matrix_operand_passes, 2.0, 1e-2);
    ASSERT_FALSE(two.small_dim_factors.empty());
    EXPECT_NEAR(two.small_dim_factors.front().second, 1.5, 1e-2);
    EXPECT_LE(two.op_host_ns, 2);
  }
}

// NOTE [Cache-resident bytes], NOTE [Per-op memory factors]: a truth whose first MiB moves
// 4x faster than memory and whose fills cost twice their bytes.
TEST(Calibrate, RecoversTheCacheRateAndTheFillFactor) {
  DeviceProfile truth = cpu_like_truth();
  truth.cache_bytes = 1 << 20;
  truth.cache_bytes_per_s = 2e11;
  truth.memory_factors = {{"fill", 2.0}};
  VirtualClock clock;
  SimDevice dev(0, truth, &clock);
  DeviceCalibrationOptions o = small_options();
  o.cache_bytes = truth.cache_bytes;
  o.copy_bytes = 1 << 22;
  o.min_window_ns = 200 * kNanosPerMicro;  // each cold run flushes its operands for real
  o.rounds = 1;
  auto p = calibrate_device(dev, clock, o);
  ASSERT_THAT(p, IsOk());
  EXPECT_EQ(p->cache_bytes, truth.cache_bytes);
  EXPECT_NEAR(p->cache_bytes_per_s / truth.cache_bytes_per_s, 1.0, 1e-3);
  EXPECT_NEAR(p->memory_bytes_per_s / truth.memory_bytes_per_s, 1.0, 1e-3);
  EXPECT_NEAR(p->memory_factor("fill"), 2.0, 1e-2);
  // The matrix rate and passes come out as without a cache.
  EXPECT_NEAR(p->matrix_flops_per_s / truth.matrix_flops_per_s, 1.0, 1e-2);
  EXPECT_NEAR(p->matrix_operand_passes, 2.0, 5e-2);
  // Without a cache model the same truth's large copy sets one rate for every byte.
  o.cache_bytes = 0;
  auto flat = calibrate_device(dev, clock, o);
  ASSERT_THAT(flat, IsOk());
  EXPECT_EQ(flat->cache_bytes, 0);
  EXPECT_GT(flat->memory_bytes_per_s, truth.memory_bytes_per_s);
}

TEST(Calibrate, RecoversASimulatedDevicesRoofline) {
  const DeviceProfile truth = cpu_like_truth();
  VirtualClock clock;
  SimDevice dev(0, truth, &clock);
  DeviceCalibrationOptions o;
  o.name = "sim-measured";
  o.gemm_size = 128;
  o.vector_elements = 1 << 12;
  o.copy_bytes = 1 << 22;
  o.repeats = 2;
  o.min_window_ns = 200 * kNanosPerMicro;  // several runs of the fastest op, one of the slowest
  o.capacity_bytes = 1 << 30;
  o.cache_bytes = 0;  // the truth has no cache (CacheRateAndFillFactor has one)
  auto p = calibrate_device(dev, clock, o);
  ASSERT_THAT(p, IsOk());
  EXPECT_EQ(p->cache_bytes, 0);
  EXPECT_EQ(p->name, "sim-measured");
  EXPECT_EQ(p->launch_ns, truth.launch_ns);
  EXPECT_NEAR(p->matrix_flops_per_s / truth.matrix_flops_per_s, 1.0, 1e-3);
  EXPECT_NEAR(p->vector_flops_per_s / truth.vector_flops_per_s, 1.0, 1e-3);
  EXPECT_NEAR(p->memory_bytes_per_s / truth.memory_bytes_per_s, 1.0, 1e-3);
  EXPECT_EQ(p->matrix_bf16_flops_per_s, p->matrix_flops_per_s);
  EXPECT_EQ(p->capacity_bytes, std::int64_t{1} << 30);
  EXPECT_FALSE(p->matrix_memory_overlap);
  EXPECT_EQ(p->alloc_ns, truth.alloc_ns);
  // The truth has no host time beyond its ops: the training loop takes exactly what the
  // calibrated profile charges for it (to the rates' rounding).
  EXPECT_LE(p->op_host_ns, 2);
  // Its optimizer is compute-bound: nothing streams faster than the memory rate.
  EXPECT_TRUE(p->memory_factors.empty());
  // Compute-bound in the truth at the calibration sizes: optimizer 0.7 ns/element of
  // compute against 0.56 of memory, layer_norm 1.6 against ~0.2.
  EXPECT_NEAR(p->compute_factor("optimizer_step"), 0.5, 1e-3);
  EXPECT_NEAR(p->compute_factor("layer_norm"), 2.0, 1e-3);
  EXPECT_NEAR(p->compute_factor("activation_gelu"), 1.0, 1e-3);  // the vector rate's own op
  EXPECT_NEAR(p->compute_factor("activation_relu"), 1.0, 1e-3);
  // The passes come out of the square GEMM and the thin one at m = 16 together; then
  // dimensions 8, 16, 32, 64 are measured, and 128 = gemm_size is the rate's own shape.
  EXPECT_NEAR(p->matrix_operand_passes, 2.0, 1e-2);
  ASSERT_EQ(p->small_dim_factors.size(), 5u);
  const double want[] = {1.5, 1.0, 1.0, 1.0, 1.0};
  for (std::size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(p->small_dim_factors[i].first, std::int64_t{8} << i);
    EXPECT_NEAR(p->small_dim_factors[i].second, want[i], 1e-2) << "dimension " << (8 << i);
  }
  // What `shardlab calibrate` writes reads back as a profile.
  const std::string path =
      (std::filesystem::temp_directory_path() / ("shardlab_calibrated_" + std::to_string(::getpid()) + ".json"))
          .string();
  ASSERT_TRUE(write_device_profile(*p, path).is_ok());
  auto back = load_device_profile(path);
  ASSERT_THAT(back, IsOk());
  EXPECT_EQ(back->launch_ns, p->launch_ns);
  EXPECT_EQ(back->alloc_ns, p->alloc_ns);
  EXPECT_EQ(back->compute_factors, p->compute_factors);
  EXPECT_EQ(back->small_dim_factors, p->small_dim_factors);
  EXPECT_EQ(back->matrix_memory_overlap, p->matrix_memory_overlap);
  EXPECT_EQ(back->matrix_operand_passes, p->matrix_operand_passes);
  std::filesystem::remove(path);
}

TEST(Calibrate, RecoversTheSimulatedNetworksAlphaBeta) {
  for (int world_size : {2, 3, 4}) {
    WorldOptions o;
    o.world_size = world_size;
    o.network = NetworkModel{4000, 20e9};  // ring collectives, α–β per message
    World world(o);
    std::vector<NetworkCalibration> got(static_cast<std::size_t>(world_size));
    const auto results = world.run([&](RankContext& ctx) -> Status {
      NetworkCalibrationOptions n;
      n.sizes = {4, 4 << 10, 64 << 10, 1 << 20};
      n.repeats = 2;
      n.algorithm = Algorithm::kRing;  // what this network runs
      SHARDLAB_ASSIGN_OR_RETURN(got[static_cast<std::size_t>(ctx.rank)],
                                calibrate_network(ctx.comm, ctx.device, ctx.clock, n));
      return Status::ok();
    });
    for (const auto& r : results) ASSERT_THAT(r.status, IsOk());
    for (const auto& c : got) {
      EXPECT_EQ(c.ranks, world_size);
      EXPECT_NEAR(static_cast<double>(c.latency_ns), 4000, 2) << "world " << world_size;
      EXPECT_NEAR(c.bytes_per_s / 20e9, 1.0, 1e-3) << "world " << world_size;
      EXPECT_EQ(c.reduce_bytes_per_s, 0.0) << "reductions are free in this network";
      EXPECT_NEAR(static_cast<double>(c.overhead_ns), 0, 2) << "no per-call cost in this network";
    }
    // all_gather, reduce_scatter and all_reduce per size, with the ring's rounds.
    ASSERT_EQ(got[0].samples.size(), 12u);
    EXPECT_EQ(got[0].samples[0].kind, runtime::comm::OpKind::kAllGather);
    EXPECT_EQ(got[0].samples[0].algorithm, "ring");
    EXPECT_EQ(got[0].samples[0].rounds, world_size - 1);
    EXPECT_EQ(got[0].samples[2].kind, runtime::comm::OpKind::kAllReduce);
    EXPECT_EQ(got[0].samples[2].rounds, 2 * (world_size - 1));
    // Sizes are whole buffers: p chunks of whole fp32 elements, at least one each.
    EXPECT_EQ(got[0].samples[0].chunk_bytes, 4);
    EXPECT_EQ(got[0].samples[11].chunk_bytes, 4 * ((1 << 20) / 4 / world_size));
    EXPECT_EQ(got[0].samples[11].buffer_bytes, world_size * got[0].samples[11].chunk_bytes);
    EXPECT_EQ(got[0].samples[11].path_bytes, 2 * (world_size - 1) * got[0].samples[11].chunk_bytes);
    const TopologySpec t = switch_topology_from(got[0], "measured");
    EXPECT_EQ(t.kind, TopologyKind::kSwitch);
    auto parsed = parse_topology(topology_to_json(t), "measured.json");
    ASSERT_THAT(parsed, IsOk());
    EXPECT_NEAR(parsed->port.gbit_per_s, 160, 0.2);
    EXPECT_EQ(parsed->port.latency_ns, 2000);
  }
}

// A `switch` whose messages take 4 µs and 20 GB/s end to end, as a fit's truth.
TopologySpec switch_truth(double reduce_bytes_per_s, Nanos collective_overhead_ns) {
  TopologySpec truth;
  truth.name = "truth";
  truth.kind = TopologyKind::kSwitch;
  truth.port = {160, 2000};  // 20 GB/s, α = 4 µs end to end
  truth.reduce_bytes_per_s = reduce_bytes_per_s;
  truth.collective_overhead_ns = collective_overhead_ns;
  return truth;
}

// What calibrate_network fits on a simulated one-node world of `world_size` members whose
// network is `truth` running `algorithm` (the fit told the same algorithm); rank 0's result.
Result<NetworkCalibration> calibrate_simulated(const TopologySpec& truth, int world_size, Algorithm algorithm,
                                               std::vector<std::int64_t> sizes, int repeats) {
  NetworkSpec ns;
  ns.nodes = 1;
  ns.devices_per_node = world_size;
  ns.algorithm = algorithm;
  SHARDLAB_ASSIGN_OR_RETURN(auto net, make_network(ns, truth));
  WorldOptions o;
  o.world_size = world_size;
  o.network_model = net;
  World world(o);
  std::vector<NetworkCalibration> got(static_cast<std::size_t>(world_size));
  const auto results = world.run([&](RankContext& ctx) -> Status {
    NetworkCalibrationOptions n;
    n.sizes = sizes;
    n.repeats = repeats;
    n.algorithm = algorithm;
    SHARDLAB_ASSIGN_OR_RETURN(got[static_cast<std::size_t>(ctx.rank)],
                              calibrate_network(ctx.comm, ctx.device, ctx.clock, n));
    return Status::ok();
  });
  for (const auto& r : results) SHARDLAB_RETURN_IF_ERROR(r.status);
  return got[0];
}

// NOTE [Reduction cost]: a network whose members reduce at 2 GB/s — the fit recovers γ
// from what reduce_scatter and all_reduce take beyond α–β, and α and β beside it.
TEST(Calibrate, RecoversTheReductionRate) {
  for (int world_size : {2, 4}) {
    auto got = calibrate_simulated(switch_truth(2e9, 0), world_size, Algorithm::kRing, {4 << 10, 64 << 10, 1 << 20}, 2);
    ASSERT_THAT(got, IsOk());
    const NetworkCalibration& c = *got;
    EXPECT_NEAR(static_cast<double>(c.latency_ns), 4000, 2) << "world " << world_size;
    EXPECT_NEAR(c.bytes_per_s / 20e9, 1.0, 1e-3) << "world " << world_size;
    EXPECT_NEAR(c.reduce_bytes_per_s / 2e9, 1.0, 1e-3) << "world " << world_size;
    for (const CollectiveSample& s : c.samples) {
      EXPECT_EQ(s.reduced_bytes, s.kind == runtime::comm::OpKind::kAllGather ? 0 : (world_size - 1) * s.chunk_bytes);
      EXPECT_NEAR(c.fitted_ns(s) / static_cast<double>(s.time_ns), 1.0, 1e-2);
    }
    // The topology written for it carries the rate, and reads back.
    auto back = parse_topology(topology_to_json(switch_topology_from(c, "measured")), "measured.json");
    ASSERT_THAT(back, IsOk());
    EXPECT_NEAR(back->reduce_bytes_per_s / 2e9, 1.0, 1e-3);
  }
}

// NOTE [Fitting the collective model]: a network with a per-call cost of 20 µs (what
// Open MPI's nonblocking collectives cost on 4 oversubscribed processes), α = 4 µs and
// 2 GB/s reductions, running `auto` — halving-doubling for the small sizes on 2 and 4
// members (log2 p rounds for all_gather, 2·log2 p for all_reduce), ring for the large
// ones and on 3. The fit, in the simulator's own schedules, recovers all four numbers;
// a latency-only model would have to fold the 20 µs into α and could not fit both kinds.
TEST(Calibrate, FitsThePerCallOverheadApartFromTheLatency) {
  for (int world_size : {2, 3, 4}) {
    auto got = calibrate_simulated(switch_truth(2e9, 20000), world_size, Algorithm::kAuto,  // as scenarios run
                                   {64, 4 << 10, 64 << 10, 1 << 20}, 1);
    ASSERT_THAT(got, IsOk());
    const NetworkCalibration& c = *got;
    EXPECT_NEAR(static_cast<double>(c.overhead_ns), 20000, 5) << "world " << world_size;
    EXPECT_NEAR(static_cast<double>(c.latency_ns), 4000, 5) << "world " << world_size;
    EXPECT_NEAR(c.bytes_per_s / 20e9, 1.0, 1e-3) << "world " << world_size;
    EXPECT_NEAR(c.reduce_bytes_per_s / 2e9, 1.0, 1e-3) << "world " << world_size;
    const bool pow2 = world_size != 3;
    const int lg = world_size == 4 ? 2 : 1;
    ASSERT_EQ(c.samples.size(), 12u);
    // 64 B: all_gather and all_reduce, halving-doubling on 2 and 4 members.
    EXPECT_EQ(c.samples[0].algorithm, pow2 ? "halving_doubling" : "ring");
    EXPECT_EQ(c.samples[0].rounds, pow2 ? lg : world_size - 1);
    EXPECT_EQ(c.samples[2].rounds, pow2 ? 2 * lg : 2 * (world_size - 1));
    // 1 MiB: ring on every size.
    EXPECT_EQ(c.samples[9].algorithm, "ring");
    EXPECT_EQ(c.samples[9].rounds, world_size - 1);
    EXPECT_EQ(c.samples[9].path_bytes, (world_size - 1) * c.samples[9].chunk_bytes);
    for (const CollectiveSample& s : c.samples) {
      EXPECT_NEAR(c.fitted_ns(s) / static_cast<double>(s.time_ns), 1.0, 1e-3)
          << runtime::comm::op_kind_name(s.kind) << " " << s.buffer_bytes << " B on " << world_size;
    }
    // Written out and read back, the topology times the collectives as measured.
    auto back = parse_topology(topology_to_json(switch_topology_from(c, "measured")), "measured.json");
    ASSERT_THAT(back, IsOk());
    EXPECT_NEAR(static_cast<double>(back->collective_overhead_ns), 20000, 5);
    EXPECT_NEAR(static_cast<double>(back->port.latency_ns), 2000, 3);
  }
}

// NOTE [Calibrate with the run's process count]: every rank measures at once and the
// slowest rank's times make the profile — here rank 1 is a straggler twice as slow.
TEST(Calibrate, TogetherKeepsTheSlowestRank) {
  DeviceProfile truth;
  truth.matrix_flops_per_s = 3e11;
  truth.vector_flops_per_s = 1e10;
  truth.memory_bytes_per_s = 5e10;
  truth.launch_ns = 1500;
  truth.matrix_memory_overlap = false;  // CPU-like, as calibrate assumes
  WorldOptions o;
  o.world_size = 3;
  o.device = truth;
  o.slowdown = {1.0, 2.0, 1.0};
  World world(o);
  std::vector<DeviceProfile> got(3);
  const auto results = world.run([&](RankContext& ctx) -> Status {
    DeviceCalibrationOptions d;
    d.gemm_size = 64;
    d.vector_elements = 1 << 10;
    d.copy_bytes = 1 << 20;
    d.repeats = 1;
    d.min_window_ns = 0;
    d.capacity_bytes = 1 << 30;
    SHARDLAB_ASSIGN_OR_RETURN(got[static_cast<std::size_t>(ctx.rank)],
                              calibrate_device_together(ctx.comm, ctx.device, ctx.clock, d));
    return Status::ok();
  });
  for (const auto& r : results) ASSERT_THAT(r.status, IsOk());
  const DeviceProfile slow = truth.slowed_by(2.0);
  for (const auto& p : got) {
    EXPECT_EQ(p.launch_ns, slow.launch_ns);
    EXPECT_NEAR(p.matrix_flops_per_s / slow.matrix_rate(DType::kF32), 1.0, 1e-3);
    EXPECT_NEAR(p.vector_flops_per_s / slow.vector_rate(DType::kF32), 1.0, 1e-3);
    EXPECT_NEAR(p.memory_bytes_per_s / slow.memory_rate(), 1.0, 1e-3);
  }
}

// NOTE [Collective overhead]: one rank has no links to fit, only the per-call cost — here
// a truth of 7 µs per collective; written out, it reads back and times a one-rank world.
TEST(Calibrate, OneRankMeasuresTheCollectiveOverhead) {
  TopologySpec truth;
  truth.name = "truth";
  truth.kind = TopologyKind::kSwitch;
  truth.collective_overhead_ns = 7000;
  truth.reduce_bytes_per_s = 4e9;  // the one-rank reduce_scatter's copy: 0.25 ns per byte
  NetworkSpec ns;
  ns.nodes = 1;
  ns.devices_per_node = 1;
  auto net = make_network(ns, truth);
  ASSERT_THAT(net, IsOk());
  WorldOptions o;
  o.network_model = *net;
  World world(o);
  NetworkCalibration got;
  const auto results = world.run([&](RankContext& ctx) -> Status {
    NetworkCalibrationOptions n;
    n.sizes = {64, 4 << 10, 64 << 10, 1 << 20, 4 << 20, 8 << 20};
    SHARDLAB_ASSIGN_OR_RETURN(got, calibrate_network(ctx.comm, ctx.device, ctx.clock, n));
    return Status::ok();
  });
  ASSERT_THAT(results[0].status, IsOk());
  EXPECT_EQ(got.ranks, 1);
  EXPECT_EQ(got.overhead_ns, 7000);
  EXPECT_EQ(got.latency_ns, 0);
  EXPECT_EQ(got.bytes_per_s, 0.0);
  EXPECT_NEAR(got.reduce_bytes_per_s / 4e9, 1.0, 1e-3);
  for (const CollectiveSample& s : got.samples) {
    const bool copies = s.kind == runtime::comm::OpKind::kReduceScatter;
    EXPECT_EQ(s.reduced_bytes, copies ? s.chunk_bytes : 0);
    EXPECT_NEAR(got.fitted_ns(s), 7000.0 + (copies ? 0.25 * static_cast<double>(s.chunk_bytes) : 0.0), 2.0);
  }
  const TopologySpec t = switch_topology_from(got, "one");
  auto back = parse_topology(topology_to_json(t), "one.json");
  ASSERT_THAT(back, IsOk());
  EXPECT_EQ(back->collective_overhead_ns, 7000);
  EXPECT_NEAR(back->reduce_bytes_per_s / 4e9, 1.0, 1e-3);
  EXPECT_EQ(back->port.gbit_per_s, TopologySpec{}.port.gbit_per_s);  // default links
  // A one-rank world on it: an all_reduce issued at t completes at t + 7 µs.
  auto again = make_network(ns, *back);
  ASSERT_TRUE(again.is_ok());
  const int ranks[] = {0};
  const Nanos arrivals[] = {1000};
  CollectiveQuery q;
  q.kind = runtime::comm::OpKind::kAllReduce;
  q.world_ranks = ranks;
  q.arrivals = arrivals;
  q.bytes = 4096;
  EXPECT_EQ((*again)->collective(q).done, std::vector<Nanos>{8000});
  // A reduce_scatter of a 4096-byte chunk also copies it: + 4096 / 4 GB/s ≈ 1024 ns.
  q.kind = runtime::comm::OpKind::kReduceScatter;
  EXPECT_NEAR(static_cast<double>((*again)->collective(q).done[0]), 8000 + 1024, 2);
  // Bad values in a file are refused naming the key.
  for (const char* bad : {"-1", "1.5", "2e9", "\"7us\""}) {
    auto r = parse_topology(R"({"name": "t", "kind": "switch", "port": {"gbit_per_s": 100, "latency_ns": 1000},
                                "collective_overhead_ns": )" +
                                std::string(bad) + "}",
                            "t.json");
    ASSERT_FALSE(r.is_ok()) << bad;
    EXPECT_NE(r.status().message().find("collective_overhead_ns"), std::string::npos) << r.status().message();
  }
}

// NOTE [Measured collectives]: calibrate's samples become the table, bytes as a query
// holds them; a query of the measured group size is interpolated (and continued past the
// last size), any other group size takes the α–β–γ model; the file round-trips, and bad
// tables are refused naming the key.
TEST(Calibrate, MeasuredTableTimesCollectivesOfItsGroupSize) {
  NetworkCalibration c;
  c.ranks = 2;
  c.latency_ns = 1000;
  c.bytes_per_s = 1e9;
  using runtime::comm::OpKind;
  c.samples = {{OpKind::kAllGather, 2048, 1024, "ring", 1, 1024, 0, 5'000},
               {OpKind::kAllGather, 8192, 4096, "ring", 1, 4096, 0, 11'000},
               {OpKind::kAllReduce, 8192, 4096, "ring", 2, 8192, 4096, 40'000}};
  const TopologySpec t = switch_topology_from(c, "measured");
  EXPECT_TRUE(t.host_progress);
  ASSERT_EQ(t.measured.ranks, 2);
  EXPECT_EQ(t.measured.tables.at(OpKind::kAllGather),
            (std::vector<std::pair<std::int64_t, Nanos>>{{1024, 5'000}, {4096, 11'000}}));
  EXPECT_EQ(t.measured.tables.at(OpKind::kAllReduce), (std::vector<std::pair<std::int64_t, Nanos>>{{8192, 40'000}}));
  EXPECT_EQ(t.measured.time(OpKind::kAllGather, 2, 512), 5'000);       // below the smallest
  EXPECT_EQ(t.measured.time(OpKind::kAllGather, 2, 2560), 8'000);      // halfway
  EXPECT_EQ(t.measured.time(OpKind::kAllGather, 2, 7168), 17'000);     // the last interval continued
  EXPECT_EQ(t.measured.time(OpKind::kAllReduce, 2, 1 << 20), 40'000);  // one size: its time
  EXPECT_FALSE(t.measured.time(OpKind::kAllGather, 3, 2560).has_value());
  EXPECT_FALSE(t.measured.time(OpKind::kReduceScatter, 2, 2560).has_value());
  auto back = parse_topology(topology_to_json(t), "measured.json");
  ASSERT_THAT(back, IsOk());
  EXPECT_TRUE(back->host_progress);
  EXPECT_EQ(back->measured.ranks, 2);
  EXPECT_EQ(back->measured.tables, t.measured.tables);
  // In a network: every member completes the table's time after the last arrival.
  NetworkSpec ns;
  ns.nodes = 1;
  ns.devices_per_node = 3;
  auto net = make_network(ns, t);
  ASSERT_THAT(net, IsOk());
  EXPECT_TRUE((*net)->host_progress());
  const int pair[] = {0, 2};
  const Nanos arrivals[] = {100, 700};
  CollectiveQuery q;
  q.kind = OpKind::kAllGather;
  q.world_ranks = pair;
  q.arrivals = arrivals;
  q.bytes = 2560;
  const CollectiveTiming timing = (*net)->collective(q);
  EXPECT_EQ(timing.done, (std::vector<Nanos>{8'700, 8'700}));
  EXPECT_EQ(timing.algorithm, "measured");
  const int three[] = {0, 1, 2};
  const Nanos three_arrivals[] = {0, 0, 0};
  q.world_ranks = three;
  q.arrivals = three_arrivals;
  EXPECT_NE((*net)->collective(q).algorithm, "measured");
  const std::string head = R"({"name": "t", "kind": "switch", "port": {"gbit_per_s": 100, "latency_ns": 1000}, )";
  const std::pair<const char*, const char*> bad[] = {
      {R"("measured_collectives": [1])", "must be an object"},
      {R"("measured_collectives": {"all_gather": [[1024, 5]]})", "measured_collectives.ranks"},
      {R"("measured_collectives": {"ranks": 0, "all_gather": [[1024, 5]]})", "measured_collectives.ranks"},
      {R"("measured_collectives": {"ranks": 2})", "at least one of all_gather"},
      {R"("measured_collectives": {"ranks": 2, "barrier": [[1, 5]]})", "unknown key"},
      {R"("measured_collectives": {"ranks": 2, "all_gather": []})", "non-empty array"},
      {R"("measured_collectives": {"ranks": 2, "all_gather": [[1024]]})", "all_gather[0]"},
      {R"("measured_collectives": {"ranks": 2, "all_gather": [[1024, -5]]})", "all_gather[0]"},
      {R"("measured_collectives": {"ranks": 2, "all_gather": [[1024, 5], [1024, 9]]})", "bytes must rise"},
      {R"("measured_collectives": {"ranks": 2, "all_gather": [[1.5, 5]]})", "all_gather[0]"},
      {R"("collective_progress": "sometimes")", "allowed: async, host"},
      {R"("collective_progress": 1)", "collective_progress"},
  };
  for (const auto& [body, want] : bad) {
    auto r = parse_topology(head + body + "}", "t.json");
    ASSERT_FALSE(r.is_ok()) << body;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << body;
    EXPECT_NE(r.status().message().find(want), std::string::npos) << body << ": " << r.status().message();
  }
}

TEST(Calibrate, MeasuresThisCpu) {
  DeviceCalibrationOptions o = small_options();
  o.repeats = 1;
  o.min_window_ns = kNanosPerMilli;
  auto p = calibrate_cpu_device(o);
  ASSERT_THAT(p, IsOk());
  EXPECT_GT(p->matrix_flops_per_s, 0);
  EXPECT_GT(p->vector_flops_per_s, 0);
  EXPECT_GT(p->memory_bytes_per_s, 0);
  EXPECT_GT(p->capacity_bytes, 0);
  EXPECT_GE(p->launch_ns, 0);
  EXPECT_FALSE(calibrate_cpu_device(DeviceCalibrationOptions{.repeats = 0}).is_ok());
  EXPECT_FALSE(calibrate_cpu_device(DeviceCalibrationOptions{.rounds = 0}).is_ok());
}

}  // namespace
}  // namespace shardlab::sim
