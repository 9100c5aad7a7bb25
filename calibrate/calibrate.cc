#include "calibrate/calibrate.h"

#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>

#include <Eigen/Dense>

#include "runtime/device/cpu/device.h"
#include "runtime/io/safetensors.h"
#include "runtime/train/fsdp_train.h"
#include "sim/engine/virtual_clock.h"
#include "sim/engine/world.h"
#include "sim/models/device/device.h"
#include "sim/models/network/collectives.h"
#include "sim/models/network/network.h"

namespace shardlab::sim {

using runtime::device::kComputeStream;

namespace {

using runtime::comm::Communicator;
using runtime::comm::OpKind;
using runtime::comm::ReduceOp;

// Called before each op's windows and given each op's best time: a no-op and the identity
// for one device; a barrier and the maximum over ranks for calibrate_device_together.
struct Coordination {
  std::function<Status()> before;
  std::function<Result<Nanos>(Nanos)> combine;
  // A one-member communicator of this rank for the FSDP training loop of NOTE [Host time
  // per op]; null: the loop is the unsharded oracle's (no communicator to train over).
  runtime::comm::Communicator* solo = nullptr;
};

// NOTE [Calibration rounds]
// The whole measurement runs `rounds` times, and each timed op keeps its best time over
// all rounds: the i-th op timed in a round is the i-th in every round (the sequence of
// timed ops does not depend on measured values), so round r's i-th time is compared with
// the best i-th time of the rounds before. Only the last round's profile is kept, derived
// from those best times. Why: on a shared VM the machine's speed changes every 0.1–1 s
// (bench/README.md), while one op's windows last 60–300 ms; within one round an op can be
// timed entirely in a slow spell (the thin GEMM's small-dimension factor came out
// 1.06–1.82 across five calibrations of one run). Spread over rounds, each op's samples
// span the whole calibration, as a real run's least disturbed window spans its whole run.
class RoundBests {
 public:
  void start_round() { next_ = 0; }
  // This round's next time, as the best of it and the same op's times in earlier rounds.
  Nanos keep(Nanos t) {
    if (next_ == best_.size()) best_.push_back(t);
    best_[next_] = std::min(best_[next_], t);
    return best_[next_++];
  }

 private:
  std::vector<Nanos> best_;
  std::size_t next_ = 0;
};

// What every timed op of a calibration is given: the ranks' coordination and the bests of
// the rounds so far.
struct Timing {
  const Coordination& co;
  RoundBests& bests;
};

// NOTE [Cold operands]
// A training step's large tensors come from main memory (NOTE [Cache-resident bytes] in
// sim/models/device/cost_model.h), but an op timed again and again on the same buffers finds them in
// the caches — on a host whose last-level cache holds hundreds of MB, a "far larger than
// caches" 64 MB copy included (measured on one core of a 480 MiB-L3 VM: a 16 MB fill
// 0.55 ms warm against 2.00 ms cold, a [20, 128] · [30522, 128]ᵀ GEMM 2.06 against 3.23).
// So every operand larger than the profile's cache_bytes is flushed from every cache
// level (clflush of each line, then a fence) before each timed call, outside the timed
// span — and calibrate_network flushes every buffer of every sample (NetworkCalibration-
// Options::cold) —, wherever the host can flush: x86 (elsewhere the operands stay warm, and the
// profile over-states the memory rate). Only on host-addressable devices (the cpu
// backend): an accelerator's memory is not behind the host's caches.
void flush_from_caches(const Tensor& t) {
#if defined(__x86_64__) || defined(__i386__)
  const char* p = reinterpret_cast<const char*>(t.bytes());
  for (std::int64_t i = 0; i < t.nbytes(); i += 64) _mm_clflush(p + i);
  _mm_mfence();
#else
  (void)t;
#endif
}

// The operands among `tensors` that NOTE [Cold operands] flushes: those over `cache_bytes`
// bytes on a host-addressable device with a cache model (cache_bytes > 0).
std::vector<Tensor> cold_operands(const runtime::device::Device& device, std::int64_t cache_bytes,
                                  std::initializer_list<Tensor> tensors) {
  std::vector<Tensor> cold;
  if (cache_bytes <= 0 || !device.host_addressable()) return cold;
  for (const Tensor& t : tensors) {
    if (t.defined() && !t.is_phantom() && t.nbytes() > cache_bytes) cold.push_back(t);
  }
  return cold;
}

// Mean time of `op` over a window of at least `min_window` (at least one run),
// synchronizing after each run. With `cold` operands, each run is timed on its own after
// they are flushed (NOTE [Cold operands]) and the window counts only the runs' time.
Result<Nanos> window_time(runtime::device::Device& device, const Clock& clock, Nanos min_window,
                          const std::function<Status()>& op, const std::vector<Tensor>& cold = {}) {
  std::int64_t runs = 0;
  Nanos elapsed = 0;
  if (!cold.empty()) {
    do {
      for (const Tensor& t : cold) flush_from_caches(t);
      const Nanos t0 = clock.now();
      SHARDLAB_RETURN_IF_ERROR(op());
      SHARDLAB_RETURN_IF_ERROR(device.synchronize(kComputeStream));
      elapsed += clock.now() - t0;
      ++runs;
    } while (elapsed < min_window);
    return elapsed / runs;
  }
  const Nanos t0 = clock.now();
  do {
    SHARDLAB_RETURN_IF_ERROR(op());
    SHARDLAB_RETURN_IF_ERROR(device.synchronize(kComputeStream));
    ++runs;
    elapsed = clock.now() - t0;
  } while (elapsed < min_window);
  return elapsed / runs;
}

// Best-of-`repeats` window time of `op` after one warm-up window (page faults, caches,
// lazy init); `cold` as for window_time.
Result<Nanos> best_time(runtime::device::Device& device, const Clock& clock, const DeviceCalibrationOptions& o,
                        const Timing& timing, const std::function<Status()>& op, const std::vector<Tensor>& cold = {}) {
  SHARDLAB_RETURN_IF_ERROR(timing.co.before());
  SHARDLAB_RETURN_IF_ERROR(window_time(device, clock, o.min_window_ns, op, cold).status());
  Nanos best = -1;
  for (int i = 0; i < o.repeats; ++i) {
    SHARDLAB_ASSIGN_OR_RETURN(const Nanos t, window_time(device, clock, o.min_window_ns, op, cold));
    if (best < 0 || t < best) best = t;
  }
  SHARDLAB_ASSIGN_OR_RETURN(const Nanos slowest, timing.co.combine(best));
  return timing.bests.keep(slowest);
}

std::int64_t host_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<std::int64_t>(pages) * page : std::int64_t{16} << 30;
}

// Seconds of work once the launch overhead is taken off (at least 1 ns).
double work_s(Nanos t, Nanos launch) { return static_cast<double>(std::max<Nanos>(t - launch, 1)) / 1e9; }

// Options for ops timed many times over: windows of min_window_ns / 5.
DeviceCalibrationOptions quick_options(const DeviceCalibrationOptions& o) {
  DeviceCalibrationOptions quick = o;
  quick.min_window_ns = std::max<Nanos>(1, o.min_window_ns / 5);
  return quick;
}

// NOTE [Per-op compute factors]: each op with a compute term runs on in-cache tensors of
// about `vector_elements` elements (where its arithmetic, not memory, sets the pace) —
// except the optimizer update, which runs on shard-sized ones as in training —, and
// its factor is the measured time, less the launch overhead, over the compute time the
// simulator charges for the same call with the profile measured so far. That charge comes
// from a SimDevice in timing mode (no math) given the very same tensors, so the flop
// counts are SimDevice's own; its memory bandwidth is made unlimited and its launch zero
// so that only the compute term is left.
// NOTE [Per-op memory factors]: a second such SimDevice, with unlimited compute instead,
// charges the same call's memory term. Two ops are timed at their training size on cold
// operands (NOTE [Cold operands]): the optimizer update over shard-sized tensors and a
// fill of copy_bytes; when such an op's measured time is more than 3% off its memory
// term, its memory factor is their ratio (the update streams faster than the copy that
// set the memory rate; a fill's stores read each line before writing it).
struct OpFactors {
  std::map<std::string, double, std::less<>> compute, memory;
};
Result<OpFactors> measure_op_factors(runtime::device::Device& device, const Clock& clock,
                                     const DeviceCalibrationOptions& o, const Timing& co,
                                     const DeviceProfile& measured) {
  using runtime::device::Activation;
  using runtime::device::OptimizerKind;
  using runtime::device::OptimizerUpdate;
  DeviceProfile compute_only = measured;
  compute_only.launch_ns = 0;
  compute_only.alloc_ns = 0;
  compute_only.op_host_ns = 0;
  compute_only.memory_bytes_per_s = 1e30;
  compute_only.cache_bytes = 0;
  compute_only.cache_bytes_per_s = 0;
  compute_only.compute_factors.clear();
  compute_only.memory_factors.clear();
  DeviceProfile memory_only = compute_only;
  memory_only.memory_bytes_per_s = measured.memory_bytes_per_s;
  memory_only.cache_bytes = measured.cache_bytes;
  memory_only.cache_bytes_per_s = measured.cache_bytes_per_s;
  memory_only.matrix_flops_per_s = memory_only.matrix_bf16_flops_per_s = 1e30;
  memory_only.vector_flops_per_s = memory_only.vector_bf16_flops_per_s = 1e30;
  VirtualClock memory_clock;
  SimDevice memory_sim(0, memory_only, &memory_clock);
  memory_sim.set_timing_mode(true);
  VirtualClock sim_clock;
  SimDevice sim(0, compute_only, &sim_clock);
  sim.set_timing_mode(true);

  const MemoryCategory cat = MemoryCategory::kOther;
  const std::int64_t h = 128, rows = std::max<std::int64_t>(1, o.vector_elements / h), n = rows * h;
  const auto make = [&](const Shape& shape, DType dtype, float value) -> Result<Tensor> {
    SHARDLAB_ASSIGN_OR_RETURN(Tensor t, device.empty(shape, dtype, cat, "calibrate.op"));
    if (dtype == DType::kF32) SHARDLAB_RETURN_IF_ERROR(device.fill(t, value, kComputeStream));
    return t;
  };
  SHARDLAB_ASSIGN_OR_RETURN(Tensor x, make({rows, h}, DType::kF32, 0.25f));
  SHARDLAB_ASSIGN_OR_RETURN(Tensor y, make({rows, h}, DType::kF32, 0.0f));
  SHARDLAB_ASSIGN_OR_RETURN(Tensor dy, make({rows, h}, DType::kF32, 0.5f));
  SHARDLAB_ASSIGN_OR_RETURN(Tensor dx, make({rows, h}, DType::kF32, 0.0f));
  SHARDLAB_ASSIGN_OR_RETURN(Tensor half, make({rows, h}, DType::kBF16, 0.0f));
  SHARDLAB_ASSIGN_OR_RETURN(Tensor gamma, make({h}, DType::kF32, 1.0f));
  SHARDLAB_ASSIGN_OR_RETURN(Tensor beta, make({h}, DType::kF32, 0.0f));
  SHARDLAB_ASSIGN_OR_RETURN(Tensor dgamma, make({h}, DType::kF32, 0.0f));
  SHARDLAB_ASSIGN_OR_RETURN(Tensor dbeta, make({h}, DType::kF32, 0.0f));
  SHARDLAB_ASSIGN_OR_RETURN(Tensor mean, make({rows}, DType::kF32, 0.0f));
  SHARDLAB_ASSIGN_OR_RETURN(Tensor rstd, make({rows}, DType::kF32, 1.0f));
  // The optimizer runs over whole flat-parameter shards (megabytes), not in cache: its
  // operands are shard-sized (a quarter of copy_bytes each, at least the in-cache size).
  const std::int64_t shard = std::max(n, o.copy_bytes / 16);
  SHARDLAB_ASSIGN_OR_RETURN(Tensor state0, make({shard}, DType::kF32, 0.0f));
  SHARDLAB_ASSIGN_OR_RETURN(Tensor state1, make({shard}, DType::kF32, 0.0f));
  SHARDLAB_ASSIGN_OR_RETURN(Tensor param, make({shard}, DType::kF32, 0.5f));
  SHARDLAB_ASSIGN_OR_RETURN(Tensor grad, make({shard}, DType::kF32, 0.01f));
  // A gradient buffer zeroed before accumulation, far larger than the cache.
  SHARDLAB_ASSIGN_OR_RETURN(Tensor big, make({std::max(n, o.copy_bytes / 4)}, DType::kF32, 0.0f));
  // Attention: [1, A, 128, 128] scores with an all-ones mask over 128 keys.
  const std::int64_t heads = std::max<std::int64_t>(1, n / (h * h));
  SHARDLAB_ASSIGN_OR_RETURN(Tensor scores, make({1, heads, h, h}, DType::kF32, 0.1f));
  SHARDLAB_ASSIGN_OR_RETURN(Tensor probs, make({1, heads, h, h}, DType::kF32, 0.0f));
  SHARDLAB_ASSIGN_OR_RETURN(Tensor dprobs, make({1, heads, h, h}, DType::kF32, 0.2f));
  SHARDLAB_ASSIGN_OR_RETURN(Tensor dscores, make({1, heads, h, h}, DType::kF32, 0.0f));
  SHARDLAB_ASSIGN_OR_RETURN(Tensor mask, make({1, h}, DType::kF32, 1.0f));
  // Cross-entropy over `rows` rows of 128 classes, every label valid.
  SHARDLAB_ASSIGN_OR_RETURN(Tensor labels, make({rows}, DType::kI64, 0.0f));
  for (std::int64_t i = 0; i < rows; ++i) labels.data<std::int64_t>()[i] = i % h;
  SHARDLAB_ASSIGN_OR_RETURN(Tensor loss_sum, make({1}, DType::kF32, 0.0f));
  // Attention-shaped batched GEMM: [heads·8, 64, 64] · [heads·8, 64, 64].
  const std::int64_t batch = 8 * heads;
  SHARDLAB_ASSIGN_OR_RETURN(Tensor ba, make({batch, 64, 64}, DType::kF32, 0.01f));
  SHARDLAB_ASSIGN_OR_RETURN(Tensor bb, make({batch, 64, 64}, DType::kF32, 0.01f));
  SHARDLAB_ASSIGN_OR_RETURN(Tensor bc, make({batch, 64, 64}, DType::kF32, 0.0f));
  OptimizerUpdate adamw;
  adamw.kind = OptimizerKind::kAdamW;
  adamw.lr = 1e-3f;
  adamw.weight_decay = 0.01f;
  adamw.step = 10;

  using Op = std::function<Status(runtime::device::Device&)>;
  std::vector<std::pair<std::string, Op>> ops = {
      {"add_bias", [&](auto& d) { return d.add_bias(y, gamma, kComputeStream); }},
      {"attention_softmax", [&](auto& d) { return d.attention_softmax(scores, mask, 0.125f, probs, kComputeStream); }},
      {"attention_softmax_backward",
       [&](auto& d) { return d.attention_softmax_backward(probs, dprobs, 0.125f, dscores, kComputeStream); }},
      {"axpy", [&](auto& d) { return d.axpy(0.5f, x, y, kComputeStream); }},
      {"batched_gemm", [&](auto& d) { return d.batched_gemm(ba, false, bb, true, bc, 1.0f, 0.0f, kComputeStream); }},
      {"bias_grad", [&](auto& d) { return d.bias_grad(dy, dbeta, false, kComputeStream); }},
      {"cast", [&](auto& d) { return d.cast(x, half, kComputeStream); }},
      {"fill", [&](auto& d) { return d.fill(big, 0.25f, kComputeStream); }},
      {"layer_norm", [&](auto& d) { return d.layer_norm(x, gamma, beta, 1e-12f, y, mean, rstd, kComputeStream); }},
      {"layer_norm_backward",
       [&](auto& d) {
         return d.layer_norm_backward(x, dy, mean, rstd, gamma, dx, dgamma, dbeta, false, kComputeStream);
       }},
      {"multiply", [&](auto& d) { return d.multiply(x, dy, y, kComputeStream); }},
      {"optimizer_step", [&](auto& d) { return d.optimizer_step(adamw, param, grad, state0, state1, kComputeStream); }},
      {"scale", [&](auto& d) { return d.scale(y, 1.0f, kComputeStream); }},
      {"softmax_cross_entropy",
       [&](auto& d) { return d.softmax_cross_entropy(x, labels, loss_sum, dx, 1.0f, -100, kComputeStream); }},
  };
  const std::pair<Activation, const char*> acts[] = {{Activation::kRelu, "relu"},
                                                     {Activation::kGelu, "gelu"},
                                                     {Activation::kGeluTanh, "gelu_tanh"},
                                                     {Activation::kTanh, "tanh"}};
  for (const auto& [act, name] : acts) {
    ops.emplace_back(std::string("activation_") + name,
                     [&, act = act](auto& d) { return d.activation(act, x, y, kComputeStream); });
    ops.emplace_back(std::string("activation_backward_") + name,
                     [&, act = act](auto& d) { return d.activation_backward(act, x, dy, dx, kComputeStream); });
  }

  // The ops timed at their training size, with their cold operands.
  const std::map<std::string, std::vector<Tensor>, std::less<>> at_size = {
      {"fill", cold_operands(device, measured.cache_bytes, {big})},
      {"optimizer_step", cold_operands(device, measured.cache_bytes, {param, grad, state0, state1})}};
  const DeviceCalibrationOptions quick = quick_options(o);  // small ops: many runs per window
  OpFactors factors;
  for (const auto& [key, op] : ops) {
    const Nanos before = sim_clock.now();
    SHARDLAB_RETURN_IF_ERROR(op(sim));
    const Nanos charged = sim_clock.now() - before;
    const Nanos memory_before = memory_clock.now();
    SHARDLAB_RETURN_IF_ERROR(op(memory_sim));
    const Nanos memory_charged = memory_clock.now() - memory_before;
    const auto sized = at_size.find(key);
    static const std::vector<Tensor> kWarm;
    SHARDLAB_ASSIGN_OR_RETURN(const Nanos t, best_time(
                                                 device, clock, quick, co, [&, &op = op] { return op(device); },
                                                 sized == at_size.end() ? kWarm : sized->second));
    const double work = static_cast<double>(std::max<Nanos>(t - measured.launch_ns, 1));
    if (charged > 0) {  // else no compute term at this size: nothing to scale
      factors.compute.emplace(key, std::clamp(work / static_cast<double>(charged), 1e-3, 1000.0));
    }
    // Only for the ops timed at their training size: the others run in cache here, and
    // their in-cache speed would under-charge large activations. Slower than the memory
    // term only for an op without a compute term (else its compute factor took it).
    const double ratio = memory_charged > 0 ? work / static_cast<double>(memory_charged) : 1.0;
    if (sized != at_size.end() && (ratio < 0.97 || (charged <= 0 && ratio > 1.03))) {
      factors.memory.emplace(key, std::clamp(ratio, 1e-3, 4.0));
    }
  }
  return factors;
}

// NOTE [Host time per op] (sim/models/device/cost_model.h): the calibration workload is a tiny MLP
// (8 → 8 → 8 → 8 → 3, batch 4, AdamW over 243 parameters) trained by the runtime's own
// training loop: model code, views, allocations and the optimizer — with a communicator
// (calibrate_device_together), train_fsdp over a one-member group of this rank, FULL_SHARD,
// the loop every run takes (its FSDP bookkeeping, flat-parameter views, one-rank
// collectives and phase events: on the 2-core reference VM 2.7× the host time per op of
// the unsharded loop, 0.40 against 0.15 µs); without one, the unsharded train_oracle.
// Tiny on purpose — its ops take well under a microsecond, so the loop's host
// time is not lost in their noise (at 24 → 48 wide, AdamW over 6,000 parameters dominated
// the step and the host time drowned in its error) — and unlike the MLP that
// bench/validate_sim.py predicts (16 → 32 → 32 → 4).
// Its time per step is the difference of two loop lengths (initialization cancels),
// best of the windows as for every op; what the simulator charges for the same loop comes
// from a SimDevice with `measured` (op_host_ns 0), and the host time per op is the
// difference over the ops it charged, 0 when the loop is no slower than its ops.
// Not measured: the wall-clock tracer a `shardlab run` with outputs wraps around the loop
// (cli/trace_backends.h). Traced, this loop took 0.9–1.0 µs per op, while the traced MLP
// runs of bench/validate_sim.py take 0.6–0.7 µs per op (the untraced figure predicts them
// 18–25% short, the traced one 30–40% long); bert-sized steps, ~30 µs of compute per op,
// do not notice either.
Result<Nanos> host_time_per_op(runtime::device::Device& device, const Clock& clock, const DeviceCalibrationOptions& o,
                               const Timing& co, const DeviceProfile& measured) {
  runtime::train::FsdpTrainOptions t;
  t.model.input_dim = 8;
  t.model.hidden_dim = 8;
  t.model.num_hidden_layers = 3;
  t.model.num_classes = 3;
  t.global_batch = 4;
  t.optimizer.kind = runtime::optim::OptimizerConfig::Kind::kAdamW;
  t.optimizer.lr = 1e-3f;
  constexpr int kShort = 10, kLong = 60;
  const DeviceCalibrationOptions quick = quick_options(o);
  Nanos real[2];
  double charged[2], ops[2];
  DeviceProfile prediction = measured;
  prediction.op_host_ns = 0;
  for (int i = 0; i < 2; ++i) {
    t.steps = i == 0 ? kShort : kLong;
    if (co.co.solo != nullptr) {
      SHARDLAB_ASSIGN_OR_RETURN(real[i], best_time(device, clock, quick, co, [&] {
                                  return runtime::train::train_fsdp(*co.co.solo, device, clock, t).status();
                                }));
      // The same loop in a one-rank World (its one-member collectives cost nothing there).
      WorldOptions w;
      w.device = prediction;
      w.host_huge_pages = false;
      World world(w);
      const std::vector<RankResult> ran = world.run([&](RankContext& ctx) -> Status {
        SHARDLAB_RETURN_IF_ERROR(runtime::train::train_fsdp(ctx.comm, ctx.device, ctx.clock, t).status());
        charged[i] = static_cast<double>(ctx.clock.now());
        ops[i] = static_cast<double>(ctx.sim_device.ops_charged());
        return Status::ok();
      });
      SHARDLAB_RETURN_IF_ERROR(ran[0].status);
      continue;
    }
    SHARDLAB_ASSIGN_OR_RETURN(real[i], best_time(device, clock, quick, co,
                                                 [&] { return runtime::train::train_oracle(device, t, 1).status(); }));
    VirtualClock sim_clock;
    SimDevice sim(0, prediction, &sim_clock);
    SHARDLAB_RETURN_IF_ERROR(runtime::train::train_oracle(sim, t, 1).status());
    charged[i] = static_cast<double>(sim_clock.now());
    ops[i] = static_cast<double>(sim.ops_charged());
  }
  const double extra_ns = static_cast<double>(real[1] - real[0]) - (charged[1] - charged[0]);
  return static_cast<Nanos>(std::llround(std::max(0.0, extra_ns / (ops[1] - ops[0]))));
}

Status check_options(const DeviceCalibrationOptions& o) {
  if (o.gemm_size < 1 || o.vector_elements < 1 || o.copy_bytes < 4 || o.repeats < 1 || o.rounds < 1 ||
      o.capacity_bytes < 0 || o.min_window_ns < 0 || o.cache_bytes < -1) {
    return Status::invalid_argument(
        "calibrate: gemm_size, vector_elements, repeats, rounds must be >= 1, "
        "copy_bytes >= 4, capacity_bytes and min_window_ns >= 0, cache_bytes >= -1");
  }
  return Status::ok();
}

// One round of the measurement (NOTE [Calibration rounds]): the profile from the best
// times so far.
Result<DeviceProfile> measure_round(runtime::device::Device& device, const Clock& clock,
                                    const DeviceCalibrationOptions& o, const Timing& co) {
  using runtime::device::Activation;
  const MemoryCategory cat = MemoryCategory::kOther;
  const std::int64_t n = o.gemm_size, v = o.vector_elements, c = o.copy_bytes / 4;
  SHARDLAB_ASSIGN_OR_RETURN(Tensor one, device.empty({1}, DType::kF32, cat, "calibrate.one"));
  SHARDLAB_ASSIGN_OR_RETURN(Tensor a, device.empty({n, n}, DType::kF32, cat, "calibrate.a"));
  SHARDLAB_ASSIGN_OR_RETURN(Tensor b, device.empty({n, n}, DType::kF32, cat, "calibrate.b"));
  SHARDLAB_ASSIGN_OR_RETURN(Tensor out, device.empty({n, n}, DType::kF32, cat, "calibrate.c"));
  SHARDLAB_ASSIGN_OR_RETURN(Tensor x, device.empty({v}, DType::kF32, cat, "calibrate.x"));
  SHARDLAB_ASSIGN_OR_RETURN(Tensor y, device.empty({v}, DType::kF32, cat, "calibrate.y"));
  SHARDLAB_ASSIGN_OR_RETURN(Tensor src, device.empty({c}, DType::kF32, cat, "calibrate.src"));
  SHARDLAB_ASSIGN_OR_RETURN(Tensor dst, device.empty({c}, DType::kF32, cat, "calibrate.dst"));
  for (const Tensor* t : {&a, &b, &x, &src}) SHARDLAB_RETURN_IF_ERROR(device.fill(*t, 0.5f, kComputeStream));
  // NOTE [Cache-resident bytes]: the core's cache, and a copy whose source and destination
  // fill half of it (the other half holds what a step keeps beside them).
  const std::int64_t cache = !device.host_addressable() ? 0 : o.cache_bytes >= 0 ? o.cache_bytes : host_cache_bytes();
  const std::int64_t cached_elements = std::max<std::int64_t>(1, cache / 16);
  SHARDLAB_ASSIGN_OR_RETURN(Tensor csrc, device.empty({cached_elements}, DType::kF32, cat, "calibrate.csrc"));
  SHARDLAB_ASSIGN_OR_RETURN(Tensor cdst, device.empty({cached_elements}, DType::kF32, cat, "calibrate.cdst"));
  SHARDLAB_RETURN_IF_ERROR(device.fill(csrc, 0.5f, kComputeStream));

  SHARDLAB_ASSIGN_OR_RETURN(const Nanos launch,
                            best_time(device, clock, o, co, [&] { return device.fill(one, 1.0f, kComputeStream); }));
  SHARDLAB_ASSIGN_OR_RETURN(const Nanos t_gemm, best_time(device, clock, o, co, [&] {
                              return device.gemm(a, false, b, false, out, 1.0f, 0.0f, kComputeStream);
                            }));
  SHARDLAB_ASSIGN_OR_RETURN(const Nanos t_gelu, best_time(device, clock, o, co, [&] {
                              return device.activation(Activation::kGelu, x, y, kComputeStream);
                            }));
  SHARDLAB_ASSIGN_OR_RETURN(const Nanos t_copy,
                            best_time(
                                device, clock, o, co, [&] { return device.copy(src, dst, kComputeStream); },
                                cold_operands(device, cache, {src, dst})));
  Nanos t_cached_copy = 0;
  if (cache > 0) {
    SHARDLAB_ASSIGN_OR_RETURN(t_cached_copy, best_time(device, clock, quick_options(o), co,
                                                       [&] { return device.copy(csrc, cdst, kComputeStream); }));
  }

  // NOTE [Host time per allocation]: an activation-sized tensor allocated and dropped, then
  // the one-element op (a device may charge the allocation only with its next op, as
  // SimDevice does); the one-element op's own time is taken off.
  SHARDLAB_ASSIGN_OR_RETURN(
      const Nanos t_alloc_op, best_time(device, clock, o, co, [&]() -> Status {
        SHARDLAB_RETURN_IF_ERROR(
            device.empty({v}, DType::kF32, MemoryCategory::kActivations, "calibrate.alloc").status());
        return device.fill(one, 1.0f, kComputeStream);
      }));
  const Nanos t_alloc = std::max<Nanos>(0, t_alloc_op - launch);

  DeviceProfile p;
  p.name = o.name;
  p.description = "measured by shardlab calibrate";
  p.launch_ns = launch;
  p.alloc_ns = t_alloc;
  p.vector_flops_per_s = 8.0 * static_cast<double>(v) / work_s(t_gelu, launch);
  p.vector_bf16_flops_per_s = p.vector_flops_per_s;
  const double copied = 2.0 * static_cast<double>(src.nbytes());
  p.memory_bytes_per_s = copied / work_s(t_copy, launch);
  if (cache > 0) {
    // NOTE [Cache-resident bytes]: the large copy's first `cache` bytes are charged at the
    // in-cache rate, so the memory rate is what its other bytes took. A cache no faster
    // than memory is no cache to model.
    const double cache_rate = 2.0 * static_cast<double>(csrc.nbytes()) / work_s(t_cached_copy, launch);
    const double cached = static_cast<double>(cache);
    if (cache_rate > p.memory_bytes_per_s && copied > cached) {
      const double rest_s = work_s(t_copy, launch) - cached / cache_rate;
      if (rest_s > 0) {
        p.memory_bytes_per_s = (copied - cached) / rest_s;
        p.cache_bytes = cache;
        p.cache_bytes_per_s = cache_rate;
      }
    }
  }
  // NOTE [Matrix ops on a CPU]: the GEMM's operand traffic is charged after its flops, so
  // it is taken off the measured time before the rate is computed.
  p.matrix_memory_overlap = false;
  // fp32 [m, k] · [k, nn] as SimDevice charges it (operand passes 1 until measured below).
  const auto gemm_bytes = [&p](double m, double nn, double k) {
    return p.matrix_bytes(4.0 * m * k, 4.0 * k * nn, 4.0 * m * nn);
  };
  const auto gemm_compute_s = [&](Nanos t, double m, double nn, double k) {
    return std::max(work_s(t, launch) - p.memory_seconds(gemm_bytes(m, nn, k)), 1e-9);
  };
  const double nd = static_cast<double>(n);
  p.matrix_flops_per_s = 2.0 * nd * nd * nd / gemm_compute_s(t_gemm, nd, nd, nd);
  p.matrix_bf16_flops_per_s = p.matrix_flops_per_s;
  if (o.small_dim_factors) {
    // NOTE [Thin GEMMs in the runtime's layouts]
    // Thin GEMMs against a weight far larger than the caches, G = gemm_size, W = 32·G (a
    // weight of 16 G² bytes streams from memory, as a language-model head's does), in the
    // three layouts a linear layer y = x·Wᵀ issues them (runtime/model): the forward
    // x·Wᵀ (NT: [d, G/2] · [W, G/2]ᵀ, m = d), the input gradient dy·W (NN: [d, W] ·
    // [W, G/2], m = d, k = W) and the weight gradient dyᵀ·x (TN: [d, W]ᵀ · [d, G/2],
    // k = d), d the tokens. The layout matters on a CPU (Eigen packs its operands into
    // panels, reading a transposed and a plain operand in different orders): the plain
    // [d, G/2] · [G/2, W] this calibration timed before — a layout none of the model's
    // linear layers issues — took 1.5× the time of any of the three at d = 16 on the
    // reference VM, and its factors over-charged the model's thin GEMMs by ~20%.
    const std::int64_t wide = 32 * n, half = std::max<std::int64_t>(1, n / 2);
    const DeviceCalibrationOptions quick = quick_options(o);
    enum class Layout { kForward, kInputGrad, kWeightGrad };
    // Time of the thin GEMM of `layout` with d tokens, and its m, n, k.
    struct Thin {
      Nanos t;
      double m, nn, k;
    };
    const auto time_thin = [&](Layout layout, std::int64_t d) -> Result<Thin> {
      const bool ta = layout == Layout::kWeightGrad, tb = layout == Layout::kForward;
      const std::array<std::int64_t, 2> a_shape =
          layout == Layout::kForward ? std::array<std::int64_t, 2>{d, half} : std::array<std::int64_t, 2>{d, wide};
      const std::array<std::int64_t, 2> b_shape = layout == Layout::kForward ? std::array<std::int64_t, 2>{wide, half}
                                                  : layout == Layout::kInputGrad
                                                      ? std::array<std::int64_t, 2>{wide, half}
                                                      : std::array<std::int64_t, 2>{d, half};
      const std::int64_t m = ta ? a_shape[1] : a_shape[0], k = ta ? a_shape[0] : a_shape[1];
      const std::int64_t cols = tb ? b_shape[0] : b_shape[1];
      SHARDLAB_ASSIGN_OR_RETURN(Tensor ga, device.empty({a_shape[0], a_shape[1]}, DType::kF32, cat, "calibrate.ga"));
      SHARDLAB_ASSIGN_OR_RETURN(Tensor gb, device.empty({b_shape[0], b_shape[1]}, DType::kF32, cat, "calibrate.gb"));
      SHARDLAB_ASSIGN_OR_RETURN(Tensor gc, device.empty({m, cols}, DType::kF32, cat, "calibrate.gc"));
      SHARDLAB_RETURN_IF_ERROR(device.fill(ga, 0.5f, kComputeStream));
      SHARDLAB_RETURN_IF_ERROR(device.fill(gb, 0.5f, kComputeStream));
      SHARDLAB_ASSIGN_OR_RETURN(
          const Nanos t,
          best_time(
              device, clock, quick, co, [&] { return device.gemm(ga, ta, gb, tb, gc, 1.0f, 0.0f, kComputeStream); },
              cold_operands(device, cache, {ga, gb, gc})));
      return Thin{t, static_cast<double>(m), static_cast<double>(cols), static_cast<double>(k)};
    };
    // The matrix rate and the operand passes together, from the square GEMM and the thin
    // forward one with d = 16 (two full register tiles): each time, less launch and C's
    // traffic, is
    //   flops · (1 / rate) + (A + B bytes) / memory · passes,
    // two linear equations (with the operands' bytes timed by memory_seconds at one pass,
    // NOTE [Cache-resident bytes]). Passes outside their physical range [1, 3] are clamped (the
    // thin GEMM then has inefficiency beyond its operand traffic, which its small-dimension
    // factor below takes), and the rate is taken from the square GEMM with them.
    const std::int64_t d0 = std::min<std::int64_t>(16, half);
    SHARDLAB_ASSIGN_OR_RETURN(const Thin t0, time_thin(Layout::kForward, d0));
    {
      const auto row = [&](Nanos t, double m, double nn, double k) {
        return std::array<double, 3>{2.0 * m * nn * k, p.memory_seconds(4.0 * (m * k + k * nn)),
                                     work_s(t, launch) - p.memory_seconds(8.0 * m * nn)};
      };
      const auto r1 = row(t_gemm, nd, nd, nd);
      const auto r0 = row(t0.t, t0.m, t0.nn, t0.k);
      const double det = r1[0] * r0[1] - r0[0] * r1[1];
      const double passes = det != 0 ? (r1[0] * r0[2] - r0[0] * r1[2]) / det : 1.0;
      p.matrix_operand_passes = std::clamp(std::isfinite(passes) ? passes : 1.0, 1.0, 3.0);
      p.matrix_flops_per_s = 2.0 * nd * nd * nd / gemm_compute_s(t_gemm, nd, nd, nd);
      p.matrix_bf16_flops_per_s = p.matrix_flops_per_s;
    }
    // Each factor: the mean over the three layouts of the time left once the operand
    // traffic (with those passes) is taken off, over the flops at the matrix rate.
    for (std::int64_t d = 8; d <= half; d *= 2) {
      double sum = 0;
      for (const Layout layout : {Layout::kForward, Layout::kInputGrad, Layout::kWeightGrad}) {
        Thin t = t0;
        if (d != d0 || layout != Layout::kForward) {
          SHARDLAB_ASSIGN_OR_RETURN(t, time_thin(layout, d));
        }
        sum += gemm_compute_s(t.t, t.m, t.nn, t.k) / (2.0 * t.m * t.nn * t.k / p.matrix_flops_per_s);
      }
      p.small_dim_factors.emplace_back(d, std::clamp(sum / 3.0, 0.05, 1000.0));
    }
    p.small_dim_factors.emplace_back(n, 1.0);  // the shape the rate was measured on
  }
  p.capacity_bytes = o.capacity_bytes > 0 ? o.capacity_bytes : host_memory_bytes();
  p.matrix_efficiency = p.vector_efficiency = p.memory_efficiency = 1.0;
  if (o.compute_factors) {
    SHARDLAB_ASSIGN_OR_RETURN(OpFactors f, measure_op_factors(device, clock, o, co, p));
    p.compute_factors = std::move(f.compute);
    p.memory_factors = std::move(f.memory);
  }
  if (o.op_host) {
    SHARDLAB_ASSIGN_OR_RETURN(p.op_host_ns, host_time_per_op(device, clock, o, co, p));
  }
  return p;
}

// What `round` derives in the last of `o.rounds` rounds, each op at its best time over
// all of them (NOTE [Calibration rounds]).
template <typename T>
Result<T> over_rounds(const DeviceCalibrationOptions& o, const Coordination& co,
                      const std::function<Result<T>(const Timing&)>& round) {
  SHARDLAB_RETURN_IF_ERROR(check_options(o));
  RoundBests bests;
  T last{};
  for (int r = 0; r < o.rounds; ++r) {
    bests.start_round();
    SHARDLAB_ASSIGN_OR_RETURN(last, round(Timing{co, bests}));
  }
  return last;
}

Result<DeviceProfile> measure_device(runtime::device::Device& device, const Clock& clock,
                                     const DeviceCalibrationOptions& o, const Coordination& co) {
  return over_rounds<DeviceProfile>(o, co, [&](const Timing& t) { return measure_round(device, clock, o, t); });
}

// One device measured on its own: no barrier, its own time.
Coordination alone() {
  return {[] { return Status::ok(); }, [](Nanos t) -> Result<Nanos> { return t; }};
}

// The largest of every rank's `values` (elementwise), on every rank.
Result<std::vector<Nanos>> max_over_ranks(Communicator& comm, runtime::device::Device& device,
                                          const std::vector<Nanos>& values) {
  SHARDLAB_ASSIGN_OR_RETURN(Tensor t, device.empty({static_cast<std::int64_t>(values.size())}, DType::kI64,
                                                   MemoryCategory::kOther, "calibrate.max"));
  std::copy(values.begin(), values.end(), t.data<std::int64_t>());
  SHARDLAB_RETURN_IF_ERROR(comm.all_reduce(t, ReduceOp::kMax)->wait(runtime::comm::kDefaultTimeout));
  return std::vector<Nanos>(t.data<std::int64_t>(), t.data<std::int64_t>() + values.size());
}

}  // namespace

std::int64_t host_cache_bytes() {
#ifdef _SC_LEVEL2_CACHE_SIZE
  const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  return l2 > 0 ? static_cast<std::int64_t>(l2) : 0;
#else
  return 0;
#endif
}

Result<DeviceProfile> calibrate_device(runtime::device::Device& device, const Clock& clock,
                                       const DeviceCalibrationOptions& o) {
  return measure_device(device, clock, o, alone());
}

Result<Nanos> measure_op_host_ns(runtime::device::Device& device, const Clock& clock, const DeviceProfile& profile,
                                 const DeviceCalibrationOptions& options) {
  return over_rounds<Nanos>(options, alone(),
                            [&](const Timing& t) { return host_time_per_op(device, clock, options, t, profile); });
}

Result<DeviceProfile> calibrate_cpu_device(const DeviceCalibrationOptions& options) {
  runtime::device::cpu::CpuDevice device({"cpu", 0});
  SteadyClock clock;
  return calibrate_device(device, clock, options);
}

Result<DeviceProfile> calibrate_device_together(Communicator& comm, runtime::device::Device& device, const Clock& clock,
                                                const DeviceCalibrationOptions& o) {
  // NOTE [Host time per op]: every rank trains over a group of its own.
  SHARDLAB_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> solo, comm.split(comm.rank(), 0));
  const Coordination together{[&] { return comm.barrier()->wait(runtime::comm::kDefaultTimeout); },
                              [&](Nanos t) -> Result<Nanos> {
                                SHARDLAB_ASSIGN_OR_RETURN(std::vector<Nanos> slowest,
                                                          max_over_ranks(comm, device, {t}));
                                return slowest[0];
                              },
                              solo.get()};
  return measure_device(device, clock, o, together);
}

namespace {

// The upper median (the middle one of an odd count); `v` is not empty.
Nanos upper_median(std::vector<Nanos> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

// What a member's critical path holds under the simulator's schedule for a collective when
// all members arrive together (NOTE [Fitting the collective model] in calibrate/calibrate.h):
// the schedule priced twice, once with only a latency per message and once with only a
// cost per byte — both exact integers, and the completion is linear in each.
struct CriticalPath {
  std::string algorithm;
  int rounds = 0;
  std::int64_t bytes = 0;
};

CriticalPath critical_path(OpKind kind, std::int64_t query_bytes, Algorithm algorithm, const Topology& topo,
                           std::span<const int> members) {
  const Schedule s = plan_collective(kind, members, query_bytes, 0, algorithm, topo);
  const std::vector<Nanos> arrivals(members.size(), 0);
  const auto latest = [&](Priced price) {
    const std::vector<Nanos> done = evaluate_schedule(
        s, members, arrivals, [price](auto, std::span<Priced> out) { std::fill(out.begin(), out.end(), price); });
    return done.empty() ? Nanos{0} : *std::max_element(done.begin(), done.end());
  };
  return {s.algorithm, static_cast<int>(latest({1, 0.0})), latest({0, 1e9})};
}

// Weighted least squares for y ≈ X·c with row i weighted 1/t_i (t: the measured times, so
// the error is relative), c ≥ 0: columns that are all zero, and then the most negative
// coefficient of each unconstrained solve, are dropped (coefficient 0) until the rest are
// all ≥ 0.
std::vector<double> fit_nonnegative(const std::vector<std::array<double, 4>>& x, const std::vector<double>& y,
                                    const std::vector<double>& t) {
  std::vector<int> active;
  for (int j = 0; j < 4; ++j) {
    if (std::any_of(x.begin(), x.end(), [j](const auto& row) { return row[static_cast<std::size_t>(j)] != 0; })) {
      active.push_back(j);
    }
  }
  std::vector<double> c(4, 0.0);
  while (!active.empty()) {
    Eigen::MatrixXd a(static_cast<Eigen::Index>(y.size()), static_cast<Eigen::Index>(active.size()));
    Eigen::VectorXd b(static_cast<Eigen::Index>(y.size()));
    for (std::size_t i = 0; i < y.size(); ++i) {
      const double w = 1.0 / std::max(t[i], 1.0);
      b(static_cast<Eigen::Index>(i)) = y[i] * w;
      for (std::size_t k = 0; k < active.size(); ++k) {
        a(static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(k)) = x[i][static_cast<std::size_t>(active[k])] * w;
      }
    }
    const Eigen::VectorXd sol = a.colPivHouseholderQr().solve(b);
    std::size_t worst = 0;
    for (std::size_t k = 1; k < active.size(); ++k) {
      if (sol(static_cast<Eigen::Index>(k)) < sol(static_cast<Eigen::Index>(worst))) worst = k;
    }
    if (sol(static_cast<Eigen::Index>(worst)) >= 0) {
      for (std::size_t k = 0; k < active.size(); ++k) {
        c[static_cast<std::size_t>(active[k])] = sol(static_cast<Eigen::Index>(k));
      }
      break;
    }
    active.erase(active.begin() + static_cast<std::ptrdiff_t>(worst));
  }
  return c;
}

// NOTE [Fitting the collective model] in calibrate/calibrate.h: o, α, β, γ from the samples.
Status fit_collective_model(NetworkCalibration& r) {
  // One rank: o is the median time of the samples of at most 64 KiB (where no copy
  // matters; the kinds differ by ~1 µs — libnbc completes a one-rank in-place all_reduce
  // at once —, and the median is what a mix of them costs), and γ fits what is left.
  const bool fit_overhead = r.ranks > 1;
  std::vector<CollectiveSample> fitted;
  for (const CollectiveSample& s : r.samples) {
    if (r.fit_max_bytes <= 0 || s.buffer_bytes <= r.fit_max_bytes) fitted.push_back(s);
  }
  Nanos overhead = 0;
  if (!fit_overhead) {
    std::vector<Nanos> small;
    for (const CollectiveSample& s : fitted) {
      if (s.buffer_bytes <= (64 << 10)) small.push_back(s.time_ns);
    }
    if (small.empty()) {
      return Status::invalid_argument("calibrate_network: one rank needs a size of at most 64 KiB");
    }
    overhead = upper_median(std::move(small));
  }
  std::vector<std::array<double, 4>> x;
  std::vector<double> y, t;
  for (const CollectiveSample& s : fitted) {
    x.push_back({fit_overhead ? 1.0 : 0.0, static_cast<double>(s.rounds), static_cast<double>(s.path_bytes),
                 static_cast<double>(s.reduced_bytes)});
    t.push_back(static_cast<double>(s.time_ns));
    y.push_back(t.back() - static_cast<double>(overhead));
  }
  std::vector<double> c = fit_nonnegative(x, y, t);  // o, α ns; β, γ ns per byte
  if (!fit_overhead) c[0] = static_cast<double>(overhead);
  if (r.ranks > 1 && !(c[2] > 0)) {
    return Status::failed_precondition(
        "calibrate_network: collective times do not grow with the bytes on the path (fitted " + std::to_string(c[2]) +
        " ns/byte); use larger sizes");
  }
  r.overhead_ns = static_cast<Nanos>(std::llround(c[0]));
  r.latency_ns = static_cast<Nanos>(std::llround(c[1]));
  r.bytes_per_s = c[2] > 0 ? 1e9 / c[2] : 0.0;
  // Under 1% of every reducing sample's time is rounding, not a cost: reductions are free.
  double largest_share = 0;
  for (const CollectiveSample& s : fitted) {
    if (s.reduced_bytes > 0) {
      largest_share = std::max(
          largest_share, c[3] * static_cast<double>(s.reduced_bytes) / std::max(static_cast<double>(s.time_ns), 1.0));
    }
  }
  r.reduce_bytes_per_s = largest_share >= 0.01 ? 1e9 / c[3] : 0.0;
  return Status::ok();
}

}  // namespace

Result<NetworkCalibration> calibrate_network(Communicator& comm, runtime::device::Device& device, const Clock& clock,
                                             const NetworkCalibrationOptions& o) {
  const int p = comm.size();
  if (o.sizes.size() < 2 || o.repeats < 1) {
    return Status::invalid_argument("calibrate_network: needs at least 2 sizes and repeats >= 1");
  }
  std::int64_t largest = 0;
  for (std::int64_t s : o.sizes) {
    if (s < 1) {
      return Status::invalid_argument("calibrate_network: size " + std::to_string(s) + " bytes; allowed: >= 1");
    }
    largest = std::max(largest, s);
  }
  const auto chunk_elements = [p](std::int64_t bytes) { return std::max<std::int64_t>(1, bytes / 4 / p); };
  SHARDLAB_ASSIGN_OR_RETURN(Tensor full_buf, device.empty({chunk_elements(largest) * p}, DType::kF32,
                                                          MemoryCategory::kOther, "calibrate.full"));
  SHARDLAB_ASSIGN_OR_RETURN(Tensor shard_buf, device.empty({chunk_elements(largest)}, DType::kF32,
                                                           MemoryCategory::kOther, "calibrate.shard"));
  // Zeros: sums of zeros stay finite however often they are reduced.
  SHARDLAB_RETURN_IF_ERROR(device.fill(full_buf, 0.0f, kComputeStream));
  SHARDLAB_RETURN_IF_ERROR(device.fill(shard_buf, 0.0f, kComputeStream));
  const Nanos timeout = runtime::comm::kDefaultTimeout;

  // The simulator's schedules for each sample: p members on one switch (its links do not
  // matter, only the schedule's shape).
  SHARDLAB_ASSIGN_OR_RETURN(const Topology topo, Topology::create(TopologySpec{}, 1, p));
  std::vector<int> members(static_cast<std::size_t>(p));
  for (int i = 0; i < p; ++i) members[static_cast<std::size_t>(i)] = i;

  NetworkCalibration result;
  result.ranks = p;
  result.fit_max_bytes = o.fit_max_bytes;
  std::vector<Nanos> medians;
  for (std::int64_t size : o.sizes) {
    const std::int64_t n = chunk_elements(size);
    SHARDLAB_ASSIGN_OR_RETURN(Tensor full, full_buf.narrow(0, n * p));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor mine, full.narrow(comm.rank() * n, n));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor shard, shard_buf.narrow(0, n));
    const std::pair<OpKind, std::function<runtime::comm::WorkPtr()>> ops[] = {
        {OpKind::kAllGather, [&] { return comm.all_gather_into(full, mine); }},
        {OpKind::kReduceScatter, [&] { return comm.reduce_scatter(shard, full, ReduceOp::kSum); }},
        {OpKind::kAllReduce, [&] { return comm.all_reduce(full, ReduceOp::kSum); }},
    };
    const std::vector<Tensor> cold = cold_operands(device, o.cold ? 1 : 0, {full, shard});
    for (const auto& [kind, issue] : ops) {
      std::vector<Nanos> times;
      for (int i = 0; i <= o.repeats; ++i) {  // round 0 is a warm-up
        for (const Tensor& t : cold) flush_from_caches(t);
        SHARDLAB_RETURN_IF_ERROR(comm.barrier()->wait(timeout));
        const Nanos t0 = clock.now();
        SHARDLAB_RETURN_IF_ERROR(issue()->wait(timeout));
        if (i > 0) times.push_back(clock.now() - t0);
      }
      medians.push_back(upper_median(std::move(times)));
      const std::int64_t chunk = 4 * n;
      // Bytes as a CollectiveQuery holds them: one chunk, or the whole buffer for all_reduce.
      const std::int64_t query_bytes = kind == OpKind::kAllReduce ? chunk * p : chunk;
      const CriticalPath path = critical_path(kind, query_bytes, o.algorithm, topo, members);
      result.samples.push_back(
          {kind, chunk * p, chunk, path.algorithm, path.rounds, path.bytes, reduced_bytes(kind, p, query_bytes), 0});
    }
  }
  SHARDLAB_ASSIGN_OR_RETURN(const std::vector<Nanos> slowest, max_over_ranks(comm, device, medians));
  for (std::size_t i = 0; i < slowest.size(); ++i) result.samples[i].time_ns = slowest[i];
  SHARDLAB_RETURN_IF_ERROR(fit_collective_model(result));
  return result;
}

double NetworkCalibration::fitted_ns(const CollectiveSample& s) const {
  double t = static_cast<double>(overhead_ns) + static_cast<double>(s.rounds) * static_cast<double>(latency_ns);
  if (bytes_per_s > 0) t += static_cast<double>(s.path_bytes) * 1e9 / bytes_per_s;
  if (reduce_bytes_per_s > 0) t += static_cast<double>(s.reduced_bytes) * 1e9 / reduce_bytes_per_s;
  return t;
}

TopologySpec switch_topology_from(const NetworkCalibration& c, std::string name) {
  TopologySpec t;
  t.name = std::move(name);
  t.description = "measured by shardlab calibrate with " + std::to_string(c.ranks) +
                  (c.ranks == 1 ? " MPI process (the per-call overhead of one-rank collectives; default links)"
                                : " MPI processes (per-call overhead, latency, bandwidth and reduction rate fit "
                                  "together to all_gather, reduce_scatter and all_reduce under the simulator's "
                                  "schedules)");
  t.kind = TopologyKind::kSwitch;
  if (c.bytes_per_s > 0) {  // one rank measures no links: the defaults stay
    t.port.gbit_per_s = c.bytes_per_s * 8.0 / 1e9;
    t.port.latency_ns = c.latency_ns / 2;
  }
  t.efficiency = 1.0;
  t.reduce_bytes_per_s = c.reduce_bytes_per_s;
  t.collective_overhead_ns = c.overhead_ns;
  // NOTE [Host-progressed collectives]: the communicator measured is MpiCommunicator's.
  t.host_progress = true;
  // NOTE [Measured collectives]: bytes as a CollectiveQuery holds them.
  t.measured.ranks = c.ranks;
  for (const CollectiveSample& s : c.samples) {
    const std::int64_t bytes = s.kind == OpKind::kAllReduce ? s.buffer_bytes : s.chunk_bytes;
    t.measured.tables[s.kind].emplace_back(bytes, s.time_ns);
  }
  for (auto& [kind, table] : t.measured.tables) {
    // By size; sizes too small to split into p fp32 chunks repeat a query size: keep one.
    std::stable_sort(table.begin(), table.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    table.erase(
        std::unique(table.begin(), table.end(), [](const auto& a, const auto& b) { return a.first == b.first; }),
        table.end());
  }
  return t;
}

Status write_topology(const TopologySpec& spec, const std::string& path) {
  return runtime::io::write_file_atomic(path, topology_to_json(spec));
}

}  // namespace shardlab::sim
