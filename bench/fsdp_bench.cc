// FSDP hot paths against references measured in the same run (benchmarks measure, tests check):
//   unshard/memcpy/<bytes>      memcpy of the bytes an unshard writes (W full buffers of
//                               W·S fp32 on the sim backend), into warm buffers
//   unshard/sim_fsdp/<bytes>    FullyShardedModel::summon_full_params(true/false) on a
//                               2-rank sim world: copy-in, all-gather, reshard (free)
//   unshard/sim_fsdp2/<bytes>   the same under FSDP2 (fsdp version 2): plus the copy-out of
//                               the gathered shards into the parameter
//   step/unsharded/<hidden>     10 AdamW steps of an MLP (4 × hidden, batch 256), one
//                               process, no FSDP (train_oracle at world size 1)
//   step/fsdp_full_shard/<hidden>  the same 10 steps under FSDP FULL_SHARD on 1 sim rank:
//                               the ratio is FSDP's own overhead (copies, hooks, bookkeeping)
//   step/fsdp2_full_shard/<hidden> the same under FSDP2 on 2 sim ranks against
//   step/fsdp_full_shard_2/<hidden> FSDP1 on 2 (FSDP2's copy-in/copy-out)
// compare.py pairs them by (group, size) with --reference memcpy --reference unsharded.
#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

#include "runtime/device/cpu/device.h"
#include "runtime/fsdp/fully_sharded.h"
#include "runtime/train/fsdp_train.h"
#include "sim/engine/world.h"

namespace shardlab::bench {
namespace {

constexpr int kWorld = 2;
constexpr int kRepeats = 8;

// Bytes an unshard of a `numel`-element unit writes on a kWorld-rank world.
std::int64_t unshard_bytes(std::int64_t numel) { return static_cast<std::int64_t>(kWorld) * numel * 4; }

void BM_UnshardMemcpy(benchmark::State& state) {
  const std::int64_t numel = state.range(0) / 4 / kWorld;
  const std::size_t bytes = static_cast<std::size_t>(unshard_bytes(numel));
  std::vector<std::byte> src(bytes, std::byte{1}), dst(bytes);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.counters["GBps"] =
      benchmark::Counter(static_cast<double>(bytes), benchmark::Counter::kIsIterationInvariantRate);
}

void BM_UnshardSimFsdp(benchmark::State& state, int version) {
  const std::int64_t numel = state.range(0) / 4 / kWorld;
  const std::size_t bytes = static_cast<std::size_t>(unshard_bytes(numel));
  sim::WorldOptions o;
  o.world_size = kWorld;
  for (auto _ : state) {
    sim::World world(o);
    double seconds = 0;
    const auto results = world.run([&](sim::RankContext& ctx) -> Status {
      SHARDLAB_ASSIGN_OR_RETURN(Tensor init, ctx.device.zeros({numel}, DType::kF32, MemoryCategory::kOther, "init"));
      runtime::fsdp::FsdpOptions fo;
      fo.version = version;
      SHARDLAB_ASSIGN_OR_RETURN(
          auto m, runtime::fsdp::FullyShardedModel::create(ctx.comm, ctx.device, {{"w", {numel}, true, 0, "Linear"}},
                                                           runtime::fsdp::WrapPlan::per_layer(1), fo, init));
      SHARDLAB_RETURN_IF_ERROR(m->summon_full_params(true));  // warm the allocator
      SHARDLAB_RETURN_IF_ERROR(m->summon_full_params(false));
      SHARDLAB_RETURN_IF_ERROR(ctx.comm.barrier()->wait(runtime::comm::kDefaultTimeout));
      SteadyClock clock;
      const Nanos t0 = clock.now();
      for (int i = 0; i < kRepeats; ++i) {
        SHARDLAB_RETURN_IF_ERROR(m->summon_full_params(true));
        SHARDLAB_RETURN_IF_ERROR(m->summon_full_params(false));
      }
      SHARDLAB_RETURN_IF_ERROR(ctx.comm.barrier()->wait(runtime::comm::kDefaultTimeout));
      if (ctx.rank == 0) seconds = static_cast<double>(clock.now() - t0) / 1e9 / kRepeats;
      return Status::ok();
    });
    for (const auto& r : results) {
      if (!r.status.is_ok()) state.SkipWithError(r.status.to_string().c_str());
    }
    state.SetIterationTime(seconds);
  }
  state.counters["GBps"] =
      benchmark::Counter(static_cast<double>(bytes), benchmark::Counter::kIsIterationInvariantRate);
}

runtime::train::FsdpTrainOptions step_options(std::int64_t hidden) {
  runtime::train::FsdpTrainOptions o;
  o.model.input_dim = hidden;
  o.model.hidden_dim = hidden;
  o.model.num_hidden_layers = 4;
  o.model.num_classes = 16;
  o.global_batch = 256;
  o.steps = 10;
  o.optimizer.kind = runtime::optim::OptimizerConfig::Kind::kAdamW;
  o.optimizer.lr = 1e-3f;
  return o;
}

void BM_StepUnsharded(benchmark::State& state) {
  const auto o = step_options(state.range(0));
  for (auto _ : state) {
    runtime::device::cpu::CpuDevice dev;
    auto r = runtime::train::train_oracle(dev, o, 1);
    if (!r.is_ok()) state.SkipWithError(r.status().to_string().c_str());
  }
}

void BM_StepFsdpFullShard(benchmark::State& state, int world, int version) {
  auto o = step_options(state.range(0));
  o.fsdp.version = version;
  for (auto _ : state) {
    sim::WorldOptions wo;
    wo.world_size = world;
    sim::World world(wo);
    const auto results = world.run([&](sim::RankContext& ctx) -> Status {
      return runtime::train::train_fsdp(ctx.comm, ctx.device, ctx.clock, o).status();
    });
    for (const auto& r : results) {
      if (!r.status.is_ok()) state.SkipWithError(r.status.to_string().c_str());
    }
  }
}

}  // namespace
}  // namespace shardlab::bench

using namespace shardlab::bench;
BENCHMARK(BM_UnshardMemcpy)
    ->Name("unshard/memcpy")
    ->RangeMultiplier(8)
    ->Range(64 << 10, 32 << 20)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_UnshardSimFsdp, fsdp1, 1)
    ->Name("unshard/sim_fsdp")
    ->RangeMultiplier(8)
    ->Range(64 << 10, 32 << 20)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_UnshardSimFsdp, fsdp2, 2)
    ->Name("unshard/sim_fsdp2")
    ->RangeMultiplier(8)
    ->Range(64 << 10, 32 << 20)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_StepUnsharded)
    ->Name("step/unsharded")
    ->Arg(16)
    ->Arg(256)
    ->Arg(512)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_StepFsdpFullShard, w1, 1, 1)
    ->Name("step/fsdp_full_shard")
    ->Arg(16)
    ->Arg(256)
    ->Arg(512)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_StepFsdpFullShard, w2, 2, 1)
    ->Name("step/fsdp_full_shard_2")
    ->Arg(16)
    ->Arg(256)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_StepFsdpFullShard, fsdp2_w2, 2, 2)
    ->Name("step/fsdp2_full_shard")
    ->Arg(16)
    ->Arg(256)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
