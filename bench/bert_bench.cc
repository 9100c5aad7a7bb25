// bert_bench: BERT training on the CPU (every core the process may use), judged against
// the host's SGEMM peak measured in the same run: benchmarks measure, tests check (speed targets live here, never in
// timed tests). The simulator's numerics mode runs this code.
//
//   bert_peak/eigen/<M>x<N>x<K>    C[M,N] = A[M,K]·B[N,K]ᵀ through the native Eigen reference
//                                  (bench/eigen_native.h: -march=native, every core) on warm 64-byte
//                                  aligned buffers: the preset's Linear shapes (for bert-base,
//                                  the shapes the peak below is taken from)
//   bert_layer/eigen/<preset>      every GEMM one encoder layer issues in forward+backward
//                                  (same shapes and transposes), straight through Eigen
//   bert_layer/cpu_device/<preset> one encoder layer's forward+backward inside the model
//                                  (Bert::forward_backward of a 1-layer model; manual time =
//                                  the time between the layer's pre/post forward and pre/post
//                                  backward hooks: projections, attention, dropout, GELU,
//                                  LayerNorm, residuals — everything the layer does)
//   bert_step/eigen/<preset>       every GEMM of a training step, straight through Eigen
//   bert_step/cpu_device/<preset>  one training step: zero the gradients, forward+backward of
//                                  the global batch, AdamW over all parameters (no FSDP: one
//                                  process, flat parameter and gradient buffers, like
//                                  train_oracle at world size 1). Batch synthesis is excluded.
//                                  Counters share_{embeddings,encoder,head,rest} split the
//                                  time by the model's hook layers (rest: zeroing the
//                                  gradients, AdamW, forward_backward's setup).
// compare.py pairs each cpu_device case with its eigen case (--reference eigen): the ratio
// is the model's time over the time its GEMMs alone take at Eigen speed.
//
// Configuration (the issue's): BertForSequenceClassification, batch 8, sequence 128 (the
// smoke preset bert-tiny uses the same), fp32, AdamW (lr 1e-4, PyTorch defaults otherwise),
// dropout as configured by the preset (0.1 hidden and attention-probs dropout for
// bert-base, so dropout masks are drawn and applied), no activation checkpointing.
//
// FLOPs (analytic; the GFLOPS counters and the peak fraction use them): only matrix
// products count, 2·M·N·K each. With N = B·T tokens, H hidden, I intermediate, A heads of
// d = H/A, one layer's forward is
//   Linear:    2·N·(4·H·H + 2·H·I)            (Q, K, V, attention output; intermediate, output)
//   attention: 2·(2·B·A·T²·d)                 (Q·Kᵀ and probs·V)
// and its backward twice that (dX and dW of every Linear; four batched products for the
// attention), so forward+backward = 3 × forward (the 6·params·tokens rule plus attention).
// The step adds the head (pooler H×H and classifier H×labels on B rows, ×3). LayerNorm,
// softmax, GELU, dropout, embeddings and the optimizer are not counted: they are the
// overhead the ratio exposes.
//
// Peak: before any benchmark runs, main() times bert-base's three Linear shapes (whatever
// the presets) with the native Eigen reference on every core, best of three runs each, and
// takes the fastest as this run's SGEMM peak; it is printed and recorded in the JSON
// context as eigen_peak_gflops, and every case reports peak_fraction = its GFLOPS / that
// peak. The model's GEMMs run on the cpu backend's pool (runtime/device/cpu/gemm.h) with
// the same core count; its element-wise ops run on one core.
//
// Memory: bert_step/cpu_device reports the device's peak bytes per category (MiB counters
// peak_<category>_MiB) next to an analytic count (analytic_<category>_MiB): parameters P,
// gradients P, AdamW state 2·P (fp32), and the activations the forward saves for the
// backward (listed in analytic_activation_floats below). The measured activation peak is
// higher by the backward's transient working set of one layer.
//
// Times are wall time, reported as manual time: the GEMMs use every core, so the CPU time
// of one thread would undercount them; the same-run ratios absorb a shared machine's
// noise. bert_step reports minor_faults_per_step and system_s_per_step (getrusage of the
// process, steady state). Thread variables are set only in the commands of
// bench/README.md.
#include <benchmark/benchmark.h>
#include <sys/resource.h>
#include <time.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench/eigen_native.h"
#include "runtime/core/clock.h"
#include "runtime/core/rng.h"
#include "runtime/device/cpu/device.h"
#include "runtime/device/cpu/gemm.h"
#include "runtime/device/cpu/vmath.h"
#include "runtime/model/bert.h"
#include "runtime/model/module.h"
#include "runtime/optim/optimizer.h"

namespace shardlab::bench {
namespace {

using runtime::device::cpu::CpuDevice;
using runtime::model::Bert;
using runtime::model::BertConfig;
using runtime::model::BertOptions;

constexpr std::int64_t kBatch = 8;
constexpr std::int64_t kSeqLen = 128;
constexpr std::uint64_t kSeed = 7;
constexpr double kMiB = 1024.0 * 1024.0;

// Wall time (CLOCK_MONOTONIC): the timer of every case here, since the model's GEMMs and
// the reference both use every core.
class WallClock final : public Clock {
 public:
  Nanos now() const override {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<Nanos>(ts.tv_sec) * kNanosPerSecond + ts.tv_nsec;
  }
};

// One GEMM as the model issues it: `batch` products op(A)[M, K] · op(B)[K, N].
struct GemmShape {
  std::int64_t batch, m, n, k;
  bool trans_a, trans_b;
  double flops() const { return 2.0 * static_cast<double>(batch * m) * static_cast<double>(n * k); }
};

// The forward and backward GEMMs of a Linear y[rows, out] = x[rows, in]·Wᵀ, as
// bert_forward.cc issues them: y = x·Wᵀ, dW = dyᵀ·x, dx = dy·W.
void add_linear(std::vector<GemmShape>& out, std::int64_t rows, std::int64_t in, std::int64_t features) {
  out.push_back({1, rows, features, in, false, true});
  out.push_back({1, features, in, rows, true, false});
  out.push_back({1, rows, in, features, false, false});
}

// Every GEMM of one encoder layer's forward and backward.
std::vector<GemmShape> layer_gemms(const BertConfig& c) {
  const std::int64_t n = kBatch * kSeqLen, h = c.hidden_size, i = c.intermediate_size;
  const std::int64_t heads = kBatch * c.num_attention_heads, d = h / c.num_attention_heads, t = kSeqLen;
  std::vector<GemmShape> g;
  for (int p = 0; p < 4; ++p) add_linear(g, n, h, h);  // Q, K, V, attention output
  add_linear(g, n, h, i);                              // intermediate
  add_linear(g, n, i, h);                              // output
  g.push_back({heads, t, t, d, false, true});          // scores = Q·Kᵀ
  g.push_back({heads, t, d, t, false, false});         // ctx = probs·V
  g.push_back({heads, t, t, d, false, true});          // dprobs = dctx·Vᵀ
  g.push_back({heads, t, d, t, true, false});          // dV = probsᵀ·dctx
  g.push_back({heads, t, d, t, false, false});         // dQ = dscores·K
  g.push_back({heads, t, d, t, true, false});          // dK = dscoresᵀ·Q
  return g;
}

// Every GEMM of a training step: the layers and the classification head.
std::vector<GemmShape> step_gemms(const BertConfig& c) {
  std::vector<GemmShape> g;
  const std::vector<GemmShape> layer = layer_gemms(c);
  for (int l = 0; l < c.num_hidden_layers; ++l) g.insert(g.end(), layer.begin(), layer.end());
  add_linear(g, kBatch, c.hidden_size, c.hidden_size);  // pooler
  add_linear(g, kBatch, c.hidden_size, c.num_labels);   // classifier
  return g;
}

double total_flops(const std::vector<GemmShape>& gemms) {
  double f = 0;
  for (const GemmShape& s : gemms) f += s.flops();
  return f;
}

// Floats the forward keeps alive for the backward (bert_forward.cc's LayerSaved, the
// embeddings' saved tensors and the encoder output), with dropout on: per layer
// x, q/k/v heads, ctx, dropout masks of attention output and output, s1, a, s2 (N·H each:
// 10), i1 and g (N·I each), probs, dropped probs and their mask (B·A·T² each), four
// LayerNorm statistics (N each); embeddings: the sum, its output and mask (N·H each), two
// statistics (N); the last layer's output (N·H).
double analytic_activation_floats(const BertConfig& c) {
  const double n = kBatch * kSeqLen, h = static_cast<double>(c.hidden_size),
               i = static_cast<double>(c.intermediate_size);
  const double probs = static_cast<double>(kBatch * c.num_attention_heads) * kSeqLen * kSeqLen;
  const bool dropout = c.hidden_dropout_prob > 0.0f, attn_dropout = c.attention_probs_dropout_prob > 0.0f;
  const double per_layer = n * h * (dropout ? 10 : 8) + 2 * n * i + probs * (attn_dropout ? 3 : 1) + 4 * n;
  const double embeddings = n * h * (dropout ? 3 : 2) + 2 * n;
  return c.num_hidden_layers * per_layer + embeddings + n * h;
}

BertConfig preset(const std::string& name) {
  auto c = runtime::model::bert_preset(name);
  SHARDLAB_CHECK_OK(c.status());
  return *c;
}

// Uniform values in [-1, 1) for a buffer of `numel` floats from `device`.
Tensor random_buffer(CpuDevice& device, std::int64_t numel, const char* name, std::uint64_t seed) {
  auto t = device.empty({std::max<std::int64_t>(numel, 1)}, DType::kF32, MemoryCategory::kOther, name);
  SHARDLAB_CHECK_OK(t.status());
  Rng rng(seed);
  float* data = t->data<float>();
  for (std::int64_t i = 0; i < t->numel(); ++i) data[i] = rng.uniform(-1.0f, 1.0f);
  return *t;
}

// Runs `gemms` through the native Eigen reference (bench/eigen_native.h, every core), or
// with `ours` through the cpu backend's GEMM (gemm.h, the path and pool the model uses),
// on buffers large enough for the biggest operand (the data is irrelevant to the speed;
// the buffers are reused, as the model's allocator does).
class GemmPlan {
 public:
  explicit GemmPlan(std::vector<GemmShape> gemms, bool ours = false) : gemms_(std::move(gemms)), ours_(ours) {
    std::int64_t a = 0, b = 0, c = 0;
    for (const GemmShape& s : gemms_) {
      a = std::max(a, s.batch * s.m * s.k);
      b = std::max(b, s.batch * s.k * s.n);
      c = std::max(c, s.batch * s.m * s.n);
    }
    a_ = random_buffer(device_, a, "a", 1);
    b_ = random_buffer(device_, b, "b", 2);
    c_ = random_buffer(device_, c, "c", 3);
  }
  void run() {
    for (const GemmShape& s : gemms_) {
      if (ours_) {
        const runtime::device::cpu::GemmArgs g = runtime::device::cpu::contiguous_gemm(
            a_.data<float>(), s.trans_a, b_.data<float>(), s.trans_b, c_.data<float>(), s.m, s.n, s.k);
        runtime::device::cpu::gemm_batched(g, s.batch, s.m * s.k, s.k * s.n, s.m * s.n, isa_, threads_);
        continue;
      }
      if (s.batch > 1) {
        eigen_native_gemm_batched(a_.data<float>(), s.trans_a, b_.data<float>(), s.trans_b, c_.data<float>(), s.batch,
                                  s.m, s.n, s.k, threads_);
      } else {
        eigen_native_gemm(a_.data<float>(), s.trans_a, b_.data<float>(), s.trans_b, c_.data<float>(), s.m, s.n, s.k,
                          threads_);
      }
    }
    benchmark::DoNotOptimize(c_.data<float>());
    benchmark::ClobberMemory();
  }
  double flops() const { return total_flops(gemms_); }

 private:
  CpuDevice device_;
  std::vector<GemmShape> gemms_;
  bool ours_;
  Tensor a_, b_, c_;
  int threads_ = runtime::device::cpu::gemm_threads();
  runtime::device::cpu::GemmIsa isa_ = runtime::device::cpu::gemm_isa().is_ok()
                                           ? *runtime::device::cpu::gemm_isa()
                                           : runtime::device::cpu::GemmIsa::kScalar;
};

void set_rate_counters(benchmark::State& state, double flops) {
  state.counters["GFLOPS"] = benchmark::Counter(flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP"] = flops / 1e9;
}

// The peak fraction needs the mean iteration time, which benchmark only knows afterwards;
// the benchmarks accumulate their manual times themselves.
void set_peak_fraction(benchmark::State& state, double flops, double seconds, double peak_gflops) {
  if (peak_gflops <= 0.0 || seconds <= 0.0) return;
  const double gflops = flops / 1e9 / (seconds / static_cast<double>(state.iterations()));
  state.counters["peak_fraction"] = gflops / peak_gflops;
  state.counters["peak_GFLOPS"] = peak_gflops;
}

void BM_EigenPlan(benchmark::State& state, std::vector<GemmShape> gemms, double peak_gflops, bool ours) {
  GemmPlan plan(std::move(gemms), ours);
  plan.run();  // warm-up
  WallClock clock;
  double total = 0;
  for (auto _ : state) {
    const Nanos t0 = clock.now();
    plan.run();
    const double s = static_cast<double>(clock.now() - t0) / 1e9;
    state.SetIterationTime(s);
    total += s;
  }
  set_rate_counters(state, plan.flops());
  set_peak_fraction(state, plan.flops(), total, peak_gflops);
}

// Times the model's work per hook layer (0 = embeddings, 1..L = encoder layers, L+1 = the
// head): forward from pre_forward to post_forward, backward from pre_backward to
// post_backward.
class TimingAccess final : public runtime::model::ParamAccess {
 public:
  TimingAccess(runtime::model::ParamAccess& inner, int num_layers)
      : inner_(inner),
        forward_(static_cast<std::size_t>(num_layers)),
        backward_(static_cast<std::size_t>(num_layers)) {}
  Result<Tensor> param(int i) override { return inner_.param(i); }
  Result<Tensor> grad(int i) override { return inner_.grad(i); }
  Status pre_forward(int) override { return start(); }
  Status post_forward(int l) override { return stop(forward_, l); }
  Status pre_backward(int) override { return start(); }
  Status post_backward(int l) override { return stop(backward_, l); }
  // Seconds spent in layer l's forward plus backward since the last reset.
  double seconds(int l) const {
    return static_cast<double>(forward_.at(static_cast<std::size_t>(l)) + backward_.at(static_cast<std::size_t>(l))) /
           1e9;
  }
  void reset() {
    std::fill(forward_.begin(), forward_.end(), 0);
    std::fill(backward_.begin(), backward_.end(), 0);
  }

 private:
  Status start() {
    start_ = clock_.now();
    return Status::ok();
  }
  Status stop(std::vector<Nanos>& into, int l) {
    into.at(static_cast<std::size_t>(l)) += clock_.now() - start_;
    return Status::ok();
  }
  runtime::model::ParamAccess& inner_;
  WallClock clock_;
  Nanos start_ = 0;
  std::vector<Nanos> forward_, backward_;
};

// A model, its flat parameters and gradients, AdamW and one synthetic batch on a fresh
// CpuDevice: what one unsharded training process holds.
struct Trainee {
  explicit Trainee(const BertOptions& options) : model(options) {
    const std::int64_t total = runtime::model::total_numel(model.params());
    auto p = dev.empty({total}, DType::kF32, MemoryCategory::kParameters, "params");
    auto g = dev.zeros({total}, DType::kF32, MemoryCategory::kGradients, "grads");
    SHARDLAB_CHECK_OK(p.status());
    SHARDLAB_CHECK_OK(g.status());
    params = *p;
    grads = *g;
    access = std::make_unique<runtime::model::FlatParamAccess>(model.params(), params, grads);
    SHARDLAB_CHECK_OK(model.init_params(dev, access->params(), kSeed));
    runtime::optim::OptimizerConfig oc;
    oc.kind = runtime::optim::OptimizerConfig::Kind::kAdamW;
    oc.lr = 1e-4f;
    auto opt = runtime::optim::Optimizer::create(dev, oc, total, "bench");
    SHARDLAB_CHECK_OK(opt.status());
    optimizer = std::make_unique<runtime::optim::Optimizer>(std::move(*opt));
    auto b = model.synthetic_batch(dev, kSeed, 0, 0, kBatch);
    SHARDLAB_CHECK_OK(b.status());
    batch = std::move(*b);
    auto counts = model.count_targets(batch);
    SHARDLAB_CHECK_OK(counts.status());
    for (std::size_t t = 0; t < counts->size(); ++t) {
      term_scale.push_back((*counts)[t] > 0 ? static_cast<float>(model.loss_term_weights()[t] / (*counts)[t]) : 0.0f);
    }
  }
  Status step(runtime::model::ParamAccess& via, std::int64_t step_index, bool optimize) {
    SHARDLAB_RETURN_IF_ERROR(dev.fill(grads, 0.0f, runtime::device::kComputeStream));
    const runtime::model::ForwardContext ctx{kSeed, step_index, 0, true};
    SHARDLAB_RETURN_IF_ERROR(model.forward_backward(dev, via, batch, term_scale, ctx).status());
    if (optimize) SHARDLAB_RETURN_IF_ERROR(optimizer->step(params, grads));
    return Status::ok();
  }

  CpuDevice dev;
  Bert model;
  Tensor params, grads;
  std::unique_ptr<runtime::model::FlatParamAccess> access;
  std::unique_ptr<runtime::optim::Optimizer> optimizer;
  runtime::model::Batch batch;
  std::vector<float> term_scale;
};

BertOptions bert_options(const BertConfig& config) {
  BertOptions o;
  o.config = config;
  o.head = runtime::model::BertHead::kSequenceClassification;
  o.seq_len = kSeqLen;
  o.compute_dtype = DType::kF32;
  return o;
}

void BM_Layer(benchmark::State& state, BertConfig config, double peak_gflops) {
  config.num_hidden_layers = 1;
  // The layer is what is timed; a small vocabulary keeps the untimed embeddings cheap.
  config.vocab_size = std::min<std::int64_t>(config.vocab_size, 1024);
  Trainee t(bert_options(config));
  TimingAccess timing(*t.access, t.model.num_layers());
  if (const Status s = t.step(timing, 0, false); !s.is_ok()) {  // warm-up (and the allocator's cache)
    state.SkipWithError(s.to_string().c_str());
    return;
  }
  double total = 0;
  std::int64_t step = 1;
  for (auto _ : state) {
    timing.reset();
    if (const Status s = t.step(timing, step++, false); !s.is_ok()) {
      state.SkipWithError(s.to_string().c_str());
      break;
    }
    const double seconds = timing.seconds(/*layer=*/1);
    state.SetIterationTime(seconds);
    total += seconds;
  }
  const double flops = total_flops(layer_gemms(config));
  set_rate_counters(state, flops);
  set_peak_fraction(state, flops, total, peak_gflops);
}

void BM_Step(benchmark::State& state, BertConfig config, double peak_gflops) {
  Trainee t(bert_options(config));
  TimingAccess timing(*t.access, t.model.num_layers());
  if (const Status s = t.step(timing, 0, true); !s.is_ok()) {  // warm-up (and the allocator's cache)
    state.SkipWithError(s.to_string().c_str());
    return;
  }
  WallClock clock;
  double total = 0, embeddings = 0, encoder = 0, head = 0, faults = 0, system = 0;
  std::int64_t step = 1;
  for (auto _ : state) {
    timing.reset();
    rusage before{};
    getrusage(RUSAGE_SELF, &before);
    const Nanos t0 = clock.now();
    if (const Status s = t.step(timing, step++, true); !s.is_ok()) {
      state.SkipWithError(s.to_string().c_str());
      break;
    }
    const double seconds = static_cast<double>(clock.now() - t0) / 1e9;
    rusage after{};
    getrusage(RUSAGE_SELF, &after);
    faults += static_cast<double>(after.ru_minflt - before.ru_minflt);
    system += static_cast<double>(after.ru_stime.tv_sec - before.ru_stime.tv_sec) +
              static_cast<double>(after.ru_stime.tv_usec - before.ru_stime.tv_usec) / 1e6;
    state.SetIterationTime(seconds);
    total += seconds;
    embeddings += timing.seconds(0);
    for (int l = 1; l <= config.num_hidden_layers; ++l) encoder += timing.seconds(l);
    head += timing.seconds(config.num_hidden_layers + 1);
  }
  const double flops = total_flops(step_gemms(config));
  set_rate_counters(state, flops);
  set_peak_fraction(state, flops, total, peak_gflops);
  // Where the step's time goes, as fractions: the hooks' layers, and the rest (zeroing the
  // gradients, the optimizer, forward_backward's own setup).
  // Steady state (after the warm-up step): page faults and kernel time per step, from
  // getrusage of the process, every pool thread included (the allocator's cache should
  // leave both near zero).
  const double iterations = static_cast<double>(std::max<benchmark::IterationCount>(1, state.iterations()));
  state.counters["minor_faults_per_step"] = faults / iterations;
  state.counters["system_s_per_step"] = system / iterations;
  if (total > 0) {
    state.counters["share_embeddings"] = embeddings / total;
    state.counters["share_encoder"] = encoder / total;
    state.counters["share_head"] = head / total;
    state.counters["share_rest"] = (total - embeddings - encoder - head) / total;
  }

  // Peak memory per category, measured and analytic.
  const MemoryStats m = t.dev.memory().stats();
  const double p = static_cast<double>(runtime::model::total_numel(t.model.params())) * 4;
  const double analytic[kNumMemoryCategories] = {p, p, 2 * p, analytic_activation_floats(config) * 4, 0, 0};
  for (int c = 0; c < kNumMemoryCategories; ++c) {
    const std::string name(category_name(static_cast<MemoryCategory>(c)));
    state.counters["peak_" + name + "_MiB"] = static_cast<double>(m.peak[static_cast<std::size_t>(c)]) / kMiB;
    if (analytic[c] > 0) state.counters["analytic_" + name + "_MiB"] = analytic[c] / kMiB;
  }
  state.counters["peak_total_MiB"] = static_cast<double>(m.peak_total) / kMiB;
  state.counters["analytic_total_MiB"] = (4 * p + analytic_activation_floats(config) * 4) / kMiB;
}

// The fastest Eigen SGEMM over BERT's Linear shapes for `config` (best of `runs` each), in
// GFLOP/s.
}  // namespace

double measure_peak(const BertConfig& config, int runs) {
  const std::int64_t n = kBatch * kSeqLen, h = config.hidden_size, i = config.intermediate_size;
  double best = 0;
  for (const GemmShape& s :
       {GemmShape{1, n, h, h, false, true}, GemmShape{1, n, i, h, false, true}, GemmShape{1, n, h, i, false, true}}) {
    GemmPlan plan({s});
    plan.run();
    WallClock clock;
    for (int r = 0; r < runs; ++r) {
      const Nanos t0 = clock.now();
      plan.run();
      const double seconds = static_cast<double>(clock.now() - t0) / 1e9;
      if (seconds > 0) best = std::max(best, plan.flops() / 1e9 / seconds);
    }
  }
  return best;
}

namespace {
std::string shape_name(const GemmShape& s) {
  return std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k);
}
// The hidden dropout mask of one layer ([B·T, H], p = 0.1) on the calling thread: through
// draw_dropout_mask (Rng::fill_u32, Philox eight counters at a time) against the
// reference, the same mask drawn with one next_u32 call per two elements (the draw before
// fill_u32; the bits are equal, RngProperty.FillU32IsNextU32CallsInOrder).
void draw_per_call(float* out, std::int64_t rows, std::int64_t per_row, float p, const Rng& base, std::uint64_t site) {
  const auto threshold = static_cast<std::uint32_t>(std::lround(static_cast<double>(p) * 65536.0));
  const float keep = 1.0f / (1.0f - p);
  for (std::int64_t b = 0; b < rows; ++b) {
    Rng rng = base.split(static_cast<std::uint64_t>(b)).split(site);
    float* row = out + b * per_row;
    for (std::int64_t i = 0; i + 1 < per_row; i += 2) {
      const std::uint32_t r = rng.next_u32();
      row[i] = (r & 0xffffu) >= threshold ? keep : 0.0f;
      row[i + 1] = (r >> 16) >= threshold ? keep : 0.0f;
    }
  }
}

void BM_Dropout(benchmark::State& state, BertConfig config, bool per_call) {
  const std::int64_t rows = kBatch * kSeqLen, per_row = config.hidden_size;
  std::vector<float> mask(static_cast<std::size_t>(rows * per_row));
  const Rng base(7);
  for (auto _ : state) {
    if (per_call) {
      draw_per_call(mask.data(), rows, per_row, 0.1f, base, 3);
    } else {
      runtime::device::draw_dropout_mask(mask.data(), rows, per_row, 0.1f, base, 0, 3);
    }
    benchmark::DoNotOptimize(mask.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * rows * per_row);
}

// GELU forward + backward over one layer's FFN activation ([B·T, I]) and e^y over its
// attention logits ([B·A·T, T], y <= 0), on the calling thread: the cpu backend's
// vectorized math (vmath.h, NOTE [Element-wise math bits]) against the reference, the
// same formulas through libm one element at a time (what the backend did before; close
// to, not the same bits as, vmath's).
std::vector<float> ramp(std::int64_t n, float lo, float hi) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    v[static_cast<std::size_t>(i)] = lo + (hi - lo) * static_cast<float>(i % 4099) / 4099.0f;
  return v;
}

void BM_Gelu(benchmark::State& state, BertConfig config, bool libm) {
  const std::int64_t n = kBatch * kSeqLen * config.intermediate_size;
  const std::vector<float> x = ramp(n, -6.0f, 6.0f), dy = ramp(n, -1.0f, 1.0f);
  std::vector<float> y(x.size()), dx(x.size());
  for (auto _ : state) {
    if (libm) {
      for (std::int64_t i = 0; i < n; ++i) y[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * 0.70710678118654752f));
      for (std::int64_t i = 0; i < n; ++i) {
        const float cdf = 0.5f * (1.0f + std::erf(x[i] * 0.70710678118654752f));
        dx[i] = dy[i] * (cdf + x[i] * 0.39894228040143268f * std::exp(-0.5f * x[i] * x[i]));
      }
    } else {
      runtime::device::cpu::gelu_erf(x.data(), y.data(), n);
      runtime::device::cpu::gelu_erf_backward(x.data(), dy.data(), dx.data(), n);
    }
    benchmark::DoNotOptimize(y.data());
    benchmark::DoNotOptimize(dx.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * n);
}

void BM_Exp(benchmark::State& state, BertConfig config, bool libm) {
  const std::int64_t n = kBatch * config.num_attention_heads * kSeqLen * kSeqLen;
  const std::vector<float> y = ramp(n, -30.0f, 0.0f);
  std::vector<float> out(y.size());
  for (auto _ : state) {
    if (libm) {
      for (std::int64_t i = 0; i < n; ++i) out[i] = std::exp(y[i]);
    } else {
      runtime::device::cpu::exp_nonpositive(y.data(), out.data(), n);
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * n);
}

}  // namespace

// Registers the cases for `preset_name` ("bert-base" → size "base"); peak_gflops is this
// run's Eigen SGEMM peak (measure_peak).
void register_bert_benchmarks(const std::string& preset_name, double peak_gflops) {
  const BertConfig config = preset(preset_name);
  const std::string size = preset_name.substr(preset_name.find('-') + 1);
  const std::int64_t n = kBatch * kSeqLen, h = config.hidden_size, i = config.intermediate_size;
  for (const GemmShape& s :
       {GemmShape{1, n, h, h, false, true}, GemmShape{1, n, i, h, false, true}, GemmShape{1, n, h, i, false, true}}) {
    benchmark::RegisterBenchmark(("bert_peak/eigen/" + shape_name(s)).c_str(), BM_EigenPlan, std::vector<GemmShape>{s},
                                 peak_gflops, false)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  }
  benchmark::RegisterBenchmark(("bert_layer/eigen/" + size).c_str(), BM_EigenPlan, layer_gemms(config), peak_gflops,
                               false)
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond);
  // The layer's GEMMs alone through the cpu backend's GEMM: what the layer would take
  // if everything but its GEMMs were free.
  benchmark::RegisterBenchmark(("bert_layer/cpu_gemm/" + size).c_str(), BM_EigenPlan, layer_gemms(config), peak_gflops,
                               true)
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark(("bert_layer/cpu_device/" + size).c_str(), BM_Layer, config, peak_gflops)
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark(("bert_dropout/next_u32/" + size).c_str(), BM_Dropout, config, true)
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark(("bert_dropout/fill_u32/" + size).c_str(), BM_Dropout, config, false)
      ->Unit(benchmark::kMillisecond);
  for (bool libm : {true, false}) {
    const std::string variant = libm ? "libm/" : "vmath/";
    benchmark::RegisterBenchmark(("bert_gelu/" + variant + size).c_str(), BM_Gelu, config, libm)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("bert_exp/" + variant + size).c_str(), BM_Exp, config, libm)
        ->Unit(benchmark::kMillisecond);
  }
  benchmark::RegisterBenchmark(("bert_step/eigen/" + size).c_str(), BM_EigenPlan, step_gemms(config), peak_gflops,
                               false)
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark(("bert_step/cpu_device/" + size).c_str(), BM_Step, config, peak_gflops)
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond);
}

}  // namespace shardlab::bench

int main(int argc, char** argv) {
  // --bert_preset=NAME[,NAME...] (default bert-base) picks the models; the smoke test uses
  // bert-tiny, the baseline holds bert-tiny and bert-base (so the smoke run pairs with it).
  std::string presets = "bert-base";
  int out = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--bert_preset=", 0) == 0) {
      presets = arg.substr(14);
    } else {
      argv[out++] = argv[i];
    }
  }
  argc = out;
  std::vector<std::string> names;
  for (std::size_t start = 0; start <= presets.size();) {
    const std::size_t end = std::min(presets.find(',', start), presets.size());
    names.push_back(presets.substr(start, end - start));
    start = end + 1;
  }
  for (const std::string& name : names) {
    if (const auto c = shardlab::runtime::model::bert_preset(name); !c.is_ok()) {
      std::fprintf(stderr, "bert_bench: --bert_preset: %s\n", c.status().to_string().c_str());
      return 2;
    }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  // The peak is measured first, on bert-base's shapes whatever the presets, so every case
  // (whatever the filter) is judged against the same machine peak.
  const double peak = shardlab::bench::measure_peak(*shardlab::runtime::model::bert_preset("bert-base"), 3);
  std::fprintf(stderr,
               "bert_bench: %s, batch %lld, sequence %lld; SGEMM peak (native Eigen, every core) %.1f GFLOP/s\n",
               presets.c_str(), static_cast<long long>(shardlab::bench::kBatch),
               static_cast<long long>(shardlab::bench::kSeqLen), peak);
  benchmark::AddCustomContext("bert_presets", presets);
  benchmark::AddCustomContext("eigen_peak_gflops", std::to_string(peak));
  for (const std::string& name : names) shardlab::bench::register_bert_benchmarks(name, peak);
  const std::size_t ran = benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return ran > 0 ? 0 : 1;  // a filter that matches nothing is a broken smoke run
}
