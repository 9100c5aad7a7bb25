// timing_bench: the simulator's timing mode at scale (NOTE [Timing mode] in
// sim/timing/op_graph.h) — one bert-large FULL_SHARD training step (batch 8 × sequence
// 128 per rank, AdamW, dropout off) on W simulated ranks. Targets (2-core reference VM):
// 4,096 ranks in ≤ 1 s and 65,536 ranks in ≤ 20 s of wall time, peak host memory ≤ 4 GiB.
//
//   timing_step/capture_replay/<W>  the whole run: capture rank 0 and rank W-1 with
//                                   phantom tensors, compare, replay all W ranks
//   timing_step/replay/<W>          the replay alone, of a graph captured once before
//                                   timing (the reference compare.py divides by)
// Counters: events_per_s (program nodes executed over all ranks + collectives timed, per
// second of wall time), events, ranks, simulated_step_s (rank 0's simulated step time),
// peak_rss_MiB (the process's high-water mark so far: run one size per process with
// --benchmark_filter to read it per size).
//
// The network: a closed-form ring (ClosedFormRing below), O(p) per collective. The
// default α–β ring of sim/cost_model.cc times a collective message by message on an
// Engine, O(p²) — hours at p = 65,536; the fast models behind NetworkCostModel replace
// this one when they land. The device: the default DeviceProfile.
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include <benchmark/benchmark.h>

#include "runtime/model/bert.h"
#include "runtime/train/fsdp_train.h"
#include "sim/network.h"
#include "sim/timing/capture.h"
#include "sim/timing/replay.h"

namespace shardlab::bench {
namespace {

using runtime::comm::OpKind;

// The α–β ring of sim/cost_model.h in closed form: every member finishes at the latest
// ready time plus the schedule's steps × (α + chunk·β). Equal to the Engine's answer when
// members are ready together (the common case under FSDP), a lower bound otherwise.
class ClosedFormRing final : public sim::NetworkCostModel {
 public:
  explicit ClosedFormRing(sim::NetworkModel net) : net_(net) {}
  sim::CollectiveTiming collective(const sim::CollectiveQuery& q) const override {
    const auto p = static_cast<std::int64_t>(q.arrivals.size());
    Nanos start = 0;
    for (Nanos a : q.arrivals) start = std::max(start, a);
    const std::int64_t log_p = p > 1 ? static_cast<std::int64_t>(std::ceil(std::log2(static_cast<double>(p)))) : 0;
    Nanos cost = 0;
    std::string algorithm = "ring";
    switch (q.kind) {
      case OpKind::kAllGather:
      case OpKind::kReduceScatter: cost = (p - 1) * net_.message_time(q.bytes); break;
      case OpKind::kAllReduce: cost = 2 * (p - 1) * net_.message_time((q.bytes + p - 1) / p); break;
      case OpKind::kBroadcast:
        cost = log_p * net_.message_time(q.bytes);
        algorithm = "binomial_tree";
        break;
      default:
        cost = log_p * net_.latency_ns;
        algorithm = "dissemination";
        break;
    }
    return {std::vector<Nanos>(static_cast<std::size_t>(p), start + (p > 1 ? cost : 0)), algorithm};
  }
  Nanos message(int, int, std::int64_t bytes, Nanos start) const override { return start + net_.message_time(bytes); }
  std::string describe() const override { return "closed-form alpha-beta ring"; }

 private:
  sim::NetworkModel net_;
};

runtime::train::FsdpTrainOptions bert_large_step(int world) {
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
  o.fsdp.strategy = runtime::fsdp::ShardingStrategy::kFullShard;
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
  sim::timing::ReplayOptions ro;
  ro.network = std::make_shared<ClosedFormRing>(sim::NetworkModel{});
  ro.traced_ranks = {0};
  std::int64_t events = 0;
  sim::timing::ReplayResult last;
  for (auto _ : state) {
    auto graph = sim::timing::capture_graph(options, world, sim::DeviceProfile{});
    if (!graph.is_ok()) {
      state.SkipWithError(graph.status().to_string().c_str());
      return;
    }
    auto r = sim::timing::replay(*graph, ro);
    if (!r.is_ok()) {
      state.SkipWithError(r.status().to_string().c_str());
      return;
    }
    events += r->events;
    last = std::move(*r);
  }
  report(state, events, last, world);
}

void BM_Replay(benchmark::State& state) {
  const int world = static_cast<int>(state.range(0));
  auto graph = sim::timing::capture_graph(bert_large_step(world), world, sim::DeviceProfile{});
  if (!graph.is_ok()) {
    state.SkipWithError(graph.status().to_string().c_str());
    return;
  }
  sim::timing::ReplayOptions ro;
  ro.network = std::make_shared<ClosedFormRing>(sim::NetworkModel{});
  ro.traced_ranks = {0};
  std::int64_t events = 0;
  sim::timing::ReplayResult last;
  for (auto _ : state) {
    auto r = sim::timing::replay(*graph, ro);
    if (!r.is_ok()) {
      state.SkipWithError(r.status().to_string().c_str());
      return;
    }
    events += r->events;
    last = std::move(*r);
  }
  report(state, events, last, world);
}

// One iteration at the large sizes: a run is seconds long and its own measurement.
BENCHMARK(BM_Replay)->Name("timing_step/replay")->Arg(256)->Arg(4096)->Arg(65536)->Unit(benchmark::kMillisecond)
    ->UseRealTime()->Iterations(1);
BENCHMARK(BM_CaptureReplay)->Name("timing_step/capture_replay")->Arg(256)->Arg(4096)->Arg(65536)
    ->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(1);

}  // namespace
}  // namespace shardlab::bench

BENCHMARK_MAIN();
