// timing_bench: the simulator's timing mode at scale (NOTE [Timing mode] in
// sim/timing/op_graph.h) — one bert-large FULL_SHARD training step (batch 8 × sequence
// 128 per rank, AdamW, dropout off) on W simulated ranks. Targets (2-core reference VM):
// 4,096 ranks in ≤ 1 s and 65,536 ranks in ≤ 20 s of wall time, peak host memory ≤ 4 GiB.
//
//   timing_step/capture_replay/<W>  the whole run: capture rank 0 and rank W-1 with
//                                   phantom tensors, compare, replay all W ranks
//   timing_step/replay/<W>          the replay alone, of a graph captured once before
//                                   timing (the reference compare.py divides by)
//   timing_step/hybrid_replay/<W>   the same step under HYBRID_SHARD, replayed alone: shards
//                                   inside each node's group, gradients all-reduced across
//                                   nodes (NOTE [Groups in timing mode]) — the cost of
//                                   replaying per-group collectives, as a ratio to replay
//   timing_step/hybrid_contention_replay/<W>  the HYBRID_SHARD step under the contention
//                                   model with one port per node (each node's 8 ranks
//                                   share it, as a host's NIC): every replica group's
//                                   all-reduce is priced together with the other groups
//                                   of its split that cross the same nodes (NOTE
//                                   [Concurrent groups] in sim/models/network/network.h)
//                                   — the cost of that joint pricing, as a ratio to replay
//   timing_step/stack_replay/<W>    the FULL_SHARD step captured and replayed under the
//                                   pytorch_lazy software stack (NOTE [Host and device
//                                   timelines] in sim/timing/replay.h: a host and a device
//                                   timeline per rank) — the stack model's cost, as a
//                                   ratio to replay (target ≤ 1.2 at 65,536 ranks)
// Counters: events_per_s (program nodes executed over all ranks + collectives timed, per
// second of wall time), events, ranks, simulated_step_s (rank 0's simulated step time),
// peak_rss_MiB (the process's high-water mark so far: run one size per process with
// --benchmark_filter to read it per size).
//
// The world: gaudi2 devices (sim/profiles/devices/gaudi2.json) in HLS-2 nodes of 8
// (topology hls2: per-peer links inside a node, leaf–spine scale-out) under the α–β model
// with `auto` collectives (hierarchical across nodes) — what a scenario with
// `world: {device: gaudi2, topology: hls2, nodes: W/8, devices_per_node: 8}` runs.
#include <sys/resource.h>

#include <memory>
#include <utility>

#include <benchmark/benchmark.h>

#include "runtime/model/bert.h"
#include "runtime/train/fsdp_train.h"
#include "sim/models/device/profiles.h"
#include "sim/models/device/stack.h"
#include "sim/models/network/network.h"
#include "sim/models/network/topology.h"
#include "sim/timing/capture.h"
#include "sim/timing/replay.h"

namespace shardlab::bench {
namespace {

constexpr int kDevicesPerNode = 8;  // an HLS-2 server

// W ranks of that world: the replay's network and the device to capture with;
// INVALID_ARGUMENT if a profile does not load.
struct Gaudi2World {
  sim::timing::ReplayOptions replay;
  sim::DeviceProfile device;
};
// `shared_ports`: the contention model with one scale-out port per node instead of the
// α–β model with ports per card.
Result<Gaudi2World> gaudi2_world(int world, bool shared_ports = false) {
  sim::NetworkSpec n;
  n.topology = "hls2";
  n.nodes = world / kDevicesPerNode;
  n.devices_per_node = kDevicesPerNode;
  Gaudi2World w;
  if (shared_ports) {
    n.model = sim::NetworkModelKind::kContention;
    SHARDLAB_ASSIGN_OR_RETURN(sim::TopologySpec topology, sim::load_topology(n.topology));
    topology.port_per_node = true;
    SHARDLAB_ASSIGN_OR_RETURN(w.replay.network, sim::make_network(n, std::move(topology)));
  } else {
    SHARDLAB_ASSIGN_OR_RETURN(w.replay.network, sim::make_network(n));
  }
  w.replay.traced_ranks = {0};
  SHARDLAB_ASSIGN_OR_RETURN(w.device, sim::load_device_profile("gaudi2"));
  return w;
}

runtime::train::FsdpTrainOptions bert_large_step(
    int world, runtime::fsdp::ShardingStrategy strategy = runtime::fsdp::ShardingStrategy::kFullShard) {
  runtime::train::FsdpTrainOptions o;
  o.model_kind = runtime::train::ModelKind::kBert;
  o.bert.config = *runtime::model::bert_preset("bert-large");
  // Dropout masks are drawn on the host (bert_forward.cc) also in timing mode: 4·10⁸
  // random values per step at this size, which would dominate the capture.
  o.bert.config.hidden_dropout_prob = 0.0f;
  o.bert.config.attention_probs_dropout_prob = 0.0f;
  o.bert.head = runtime::model::BertHead::kSequenceClassification;
  o.bert.config.num_labels = 2;
  o.bert.seq_len = 128;
  o.global_batch = std::int64_t{8} * world;
  o.steps = 1;
  o.seed = 1;
  o.wrap = runtime::train::WrapPolicy::kByClass;
  o.fsdp.strategy = strategy;
  o.fsdp.devices_per_node = kDevicesPerNode;  // HYBRID_SHARD's node groups
  o.optimizer.kind = runtime::optim::OptimizerConfig::Kind::kAdamW;
  o.optimizer.lr = 1e-4f;
  return o;
}

double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // KiB on Linux
}

void report(benchmark::State& state, std::int64_t events, const sim::timing::ReplayResult& last, int world) {
  state.counters["events_per_s"] = benchmark::Counter(static_cast<double>(events), benchmark::Counter::kIsRate);
  state.counters["events"] = static_cast<double>(last.events);
  state.counters["ranks"] = world;
  state.counters["simulated_step_s"] =
      last.ranks.front().step_times.empty() ? 0.0 : static_cast<double>(last.ranks.front().step_times.front()) / 1e9;
  state.counters["peak_rss_MiB"] = peak_rss_mib();
}

void BM_CaptureReplay(benchmark::State& state) {
  const int world = static_cast<int>(state.range(0));
  const auto options = bert_large_step(world);
  auto w = gaudi2_world(world);
  if (!w.is_ok()) {
    state.SkipWithError(w.status().to_string().c_str());
    return;
  }
  std::int64_t events = 0;
  sim::timing::ReplayResult last;
  for (auto _ : state) {
    auto graph = sim::timing::capture_graph(options, world, w->device);
    if (!graph.is_ok()) {
      state.SkipWithError(graph.status().to_string().c_str());
      return;
    }
    auto r = sim::timing::replay(*graph, w->replay);
    if (!r.is_ok()) {
      state.SkipWithError(r.status().to_string().c_str());
      return;
    }
    events += r->events;
    last = std::move(*r);
  }
  report(state, events, last, world);
}

// `stack`: a software stack's name, "" for none (ideal); `shared_ports` as in gaudi2_world.
void BM_Replay(benchmark::State& state, runtime::fsdp::ShardingStrategy strategy, const char* stack,
               bool shared_ports) {
  const int world = static_cast<int>(state.range(0));
  auto w = gaudi2_world(world, shared_ports);
  if (!w.is_ok()) {
    state.SkipWithError(w.status().to_string().c_str());
    return;
  }
  sim::timing::CaptureOptions capture;
  if (*stack != '\0') {
    auto s = sim::load_stack(stack);
    if (!s.is_ok()) {
      state.SkipWithError(s.status().to_string().c_str());
      return;
    }
    capture.stack = *s;
    w->replay.stack = *s;
  }
  auto graph = sim::timing::capture_graph(bert_large_step(world, strategy), world, w->device, capture);
  if (!graph.is_ok()) {
    state.SkipWithError(graph.status().to_string().c_str());
    return;
  }
  std::int64_t events = 0;
  sim::timing::ReplayResult last;
  for (auto _ : state) {
    auto r = sim::timing::replay(*graph, w->replay);
    if (!r.is_ok()) {
      state.SkipWithError(r.status().to_string().c_str());
      return;
    }
    events += r->events;
    last = std::move(*r);
  }
  report(state, events, last, world);
}

// Every case's sizes and settings: one iteration at the large sizes, a run being seconds
// long and its own measurement.
void at_scale(benchmark::internal::Benchmark* b) {
  b->Arg(256)->Arg(4096)->Arg(65536)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(1);
}

BENCHMARK_CAPTURE(BM_Replay, full_shard, runtime::fsdp::ShardingStrategy::kFullShard, "", false)
    ->Name("timing_step/replay")
    ->Apply(at_scale);
BENCHMARK_CAPTURE(BM_Replay, hybrid_shard, runtime::fsdp::ShardingStrategy::kHybridShard, "", false)
    ->Name("timing_step/hybrid_replay")
    ->Apply(at_scale);
BENCHMARK_CAPTURE(BM_Replay, hybrid_contention, runtime::fsdp::ShardingStrategy::kHybridShard, "", true)
    ->Name("timing_step/hybrid_contention_replay")
    ->Apply(at_scale);
BENCHMARK_CAPTURE(BM_Replay, stack, runtime::fsdp::ShardingStrategy::kFullShard, "pytorch_lazy", false)
    ->Name("timing_step/stack_replay")
    ->Apply(at_scale);
BENCHMARK(BM_CaptureReplay)->Name("timing_step/capture_replay")->Apply(at_scale);

}  // namespace
}  // namespace shardlab::bench

BENCHMARK_MAIN();
