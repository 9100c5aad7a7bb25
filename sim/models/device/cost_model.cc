#include "sim/models/device/cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "runtime/core/check.h"
#include "sim/engine/engine.h"

namespace shardlab::sim {

using runtime::comm::OpKind;

Nanos to_nanos(double ns) {
  if (!(ns < static_cast<double>(kTimeLimit))) return kTimeLimit;  // NaN too
  if (!(ns > 0.0)) return 0;
  return static_cast<Nanos>(std::llround(ns));
}

Nanos add_time(Nanos a, Nanos b) {
  constexpr Nanos kNeverTime = std::numeric_limits<Nanos>::max();
  if (a == kNeverTime || b == kNeverTime) return kNeverTime;
  Nanos sum = 0;
  if (__builtin_add_overflow(a, b, &sum)) return b > 0 ? kTimeLimit : std::numeric_limits<Nanos>::min();
  return std::min(sum, kTimeLimit);
}

Nanos NetworkModel::message_time(std::int64_t bytes) const {
  return add_time(latency_ns, to_nanos(static_cast<double>(bytes) * 1e9 / bandwidth_bytes_per_s));
}

DeviceProfile DeviceProfile::slowed_by(double factor) const {
  SHARDLAB_CHECK_GE(factor, 1.0);
  DeviceProfile p = *this;
  p.launch_ns = to_nanos(static_cast<double>(launch_ns) * factor);
  p.alloc_ns = to_nanos(static_cast<double>(alloc_ns) * factor);
  p.op_host_ns = to_nanos(static_cast<double>(op_host_ns) * factor);
  p.matrix_efficiency /= factor;
  p.vector_efficiency /= factor;
  p.memory_efficiency /= factor;
  p.host_link_bytes_per_s /= factor;
  return p;
}

namespace {
bool is_16bit_float(DType d) { return d == DType::kBF16 || d == DType::kF16; }
}  // namespace

double DeviceProfile::matrix_rate(DType dtype) const {
  return (is_16bit_float(dtype) ? matrix_bf16_flops_per_s : matrix_flops_per_s) * matrix_efficiency;
}
double DeviceProfile::vector_rate(DType dtype) const {
  return (is_16bit_float(dtype) ? vector_bf16_flops_per_s : vector_flops_per_s) * vector_efficiency;
}

const std::vector<std::string>& compute_factor_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> k = {"add_bias",
                                  "attention_softmax",
                                  "attention_softmax_backward",
                                  "axpy",
                                  "batched_gemm",
                                  "bias_grad",
                                  "cast",
                                  "embedding_backward",
                                  "fill",
                                  "gemm",
                                  "layer_norm",
                                  "layer_norm_backward",
                                  "multiply",
                                  "optimizer_step",
                                  "scale",
                                  "softmax_cross_entropy"};
    for (const char* act : {"gelu", "gelu_tanh", "relu", "tanh"}) {
      k.push_back(std::string("activation_") + act);
      k.push_back(std::string("activation_backward_") + act);
    }
    std::sort(k.begin(), k.end());
    return k;
  }();
  return keys;
}

namespace {
// An op's factor from a per-op table: 1 for an op the table does not name.
double factor_of(const std::map<std::string, double, std::less<>>& table, std::string_view factor_key) {
  const auto it = table.find(factor_key);
  return it == table.end() ? 1.0 : it->second;
}
}  // namespace

double DeviceProfile::compute_factor(std::string_view factor_key) const {
  return factor_of(compute_factors, factor_key);
}

double DeviceProfile::memory_factor(std::string_view factor_key) const { return factor_of(memory_factors, factor_key); }

double DeviceProfile::memory_seconds(double bytes) const {
  if (cache_bytes <= 0 || cache_bytes_per_s <= 0) return bytes / memory_rate();
  const double cached = std::min(bytes, static_cast<double>(cache_bytes));
  return cached / (cache_bytes_per_s * memory_efficiency) + (bytes - cached) / memory_rate();
}

Nanos DeviceProfile::op_time(double flops, double bytes, ComputeUnit unit, DType dtype) const {
  return op_time({}, flops, bytes, unit, dtype);
}

double DeviceProfile::small_dim_factor(std::int64_t min_dim) const {
  if (small_dim_factors.empty() || min_dim <= 0) return 1.0;
  if (min_dim <= small_dim_factors.front().first) return small_dim_factors.front().second;
  if (min_dim >= small_dim_factors.back().first) return small_dim_factors.back().second;
  const auto hi = std::lower_bound(small_dim_factors.begin(), small_dim_factors.end(), min_dim,
                                   [](const auto& e, std::int64_t d) { return e.first < d; });
  const auto lo = hi - 1;
  const double x = std::log2(static_cast<double>(min_dim)), x0 = std::log2(static_cast<double>(lo->first)),
               x1 = std::log2(static_cast<double>(hi->first));
  return lo->second + (hi->second - lo->second) * (x - x0) / (x1 - x0);
}

Nanos DeviceProfile::op_time(std::string_view factor_key, double flops, double bytes, ComputeUnit unit, DType dtype,
                             std::int64_t min_dim) const {
  const bool matrix = unit == ComputeUnit::kMatrix;
  double compute_s = flops / (matrix ? matrix_rate(dtype) : vector_rate(dtype)) * compute_factor(factor_key);
  if (matrix) compute_s *= small_dim_factor(min_dim);
  const double memory_s = memory_seconds(bytes) * memory_factor(factor_key);
  // NOTE [Matrix ops on a CPU]: staging operands does not overlap the multiply there.
  const double t = matrix && !matrix_memory_overlap ? compute_s + memory_s : std::max(compute_s, memory_s);
  return add_time(add_time(launch_ns, op_host_ns), to_nanos(t * 1e9));
}

double DeviceProfile::matrix_utilization(std::int64_t batch, std::int64_t m, std::int64_t n) const {
  if (matrix_engines <= 0 || matrix_tiles.empty() || batch <= 0 || m <= 0 || n <= 0) return 1.0;
  const double used = static_cast<double>(batch) * static_cast<double>(m) * static_cast<double>(n);
  double best = 0;
  for (const auto& [h, w] : matrix_tiles) {
    // In doubles: a batch of large outputs overflows int64 tile counts long before it
    // overflows a double's exact integers (2^53).
    const double tiles = static_cast<double>(batch) * std::ceil(static_cast<double>(m) / static_cast<double>(h)) *
                         std::ceil(static_cast<double>(n) / static_cast<double>(w));
    const double waves = std::ceil(tiles / matrix_engines);
    best = std::max(best, used / (waves * matrix_engines * static_cast<double>(h) * static_cast<double>(w)));
  }
  return std::min(best, 1.0);
}

Nanos DeviceProfile::host_transfer_time(double bytes) const {
  return add_time(add_time(launch_ns, op_host_ns), to_nanos(bytes / host_link_bytes_per_s * 1e9));
}

std::string DeviceProfile::keys_of(std::string_view factor_key, ComputeUnit unit, DType dtype, bool transfer) const {
  char buf[512];
  if (transfer) {
    std::snprintf(buf, sizeof buf, "host_link_bytes_per_s = %.4g", host_link_bytes_per_s);
    return buf;
  }
  const bool matrix = unit == ComputeUnit::kMatrix, half = is_16bit_float(dtype);
  const char* prefix = matrix ? "matrix" : "vector";
  const double peak = matrix ? (half ? matrix_bf16_flops_per_s : matrix_flops_per_s)
                             : (half ? vector_bf16_flops_per_s : vector_flops_per_s);
  std::snprintf(
      buf, sizeof buf,
      "%s_flops_per_s.%s = %.4g, efficiency.%s = %.4g, compute_factors.%.*s = %.4g, memory_bytes_per_s = %.4g, "
      "efficiency.memory = %.4g, memory_factors.%.*s = %.4g%s%s",
      prefix, half ? "bf16" : "fp32", peak, prefix, matrix ? matrix_efficiency : vector_efficiency,
      static_cast<int>(factor_key.size()), factor_key.data(), compute_factor(factor_key), memory_bytes_per_s,
      memory_efficiency, static_cast<int>(factor_key.size()), factor_key.data(), memory_factor(factor_key),
      cache_bytes > 0 ? ", cache" : "", matrix && !small_dim_factors.empty() ? ", small_dim_factors" : "");
  return buf;
}

Nanos DeviceProfile::op_time(double flops, double bytes, bool matrix) const {
  return op_time(flops, bytes, matrix ? ComputeUnit::kMatrix : ComputeUnit::kVector, DType::kF32);
}

namespace {

int ceil_log2(int p) {
  int r = 0;
  while ((1 << r) < p) ++r;
  return r;
}

// Ring schedule with `steps` steps of `chunk` bytes each, run on an Engine.
std::vector<Nanos> ring_times(const std::vector<Nanos>& arrivals, int steps, std::int64_t chunk,
                              const NetworkModel& net) {
  const int p = static_cast<int>(arrivals.size());
  std::vector<Nanos> done(arrivals.begin(), arrivals.end());
  if (p == 1 || steps == 0) return done;
  const Nanos msg = net.message_time(chunk);
  Engine engine;
  // received[i] = number of steps rank i has received; ready time of its next send.
  std::vector<int> sent(static_cast<std::size_t>(p), 0), received(static_cast<std::size_t>(p), 0);
  std::vector<Nanos> last_recv(static_cast<std::size_t>(p), 0);
  std::function<void(int)> try_send;
  try_send = [&](int i) {
    const auto ui = static_cast<std::size_t>(i);
    const int s = sent[ui];
    if (s >= steps || received[ui] < s) return;  // done, or still waiting for step s-1
    const int to = (i + 1) % p;
    const Nanos start =
        std::max({arrivals[ui], s == 0 ? arrivals[ui] : last_recv[ui], arrivals[static_cast<std::size_t>(to)]});
    ++sent[ui];
    engine.schedule_at(add_time(std::max(start, engine.now()), msg), [&, i, to]() {
      const auto ut = static_cast<std::size_t>(to);
      ++received[ut];
      last_recv[ut] = engine.now();
      done[ut] = std::max(done[ut], engine.now());
      done[static_cast<std::size_t>(i)] = std::max(done[static_cast<std::size_t>(i)], engine.now());  // send finished
      try_send(to);
    });
  };
  for (int i = 0; i < p; ++i) try_send(i);
  engine.run();
  for (int i = 0; i < p; ++i) SHARDLAB_CHECK_EQ(received[static_cast<std::size_t>(i)], steps);
  return done;
}

}  // namespace

std::vector<Nanos> collective_completion_times(OpKind kind, const std::vector<Nanos>& arrivals, std::int64_t bytes,
                                               const NetworkModel& net) {
  const int p = static_cast<int>(arrivals.size());
  SHARDLAB_CHECK_GT(p, 0);
  const Nanos latest = *std::max_element(arrivals.begin(), arrivals.end());
  switch (kind) {
    case OpKind::kAllGather:
    case OpKind::kReduceScatter: return ring_times(arrivals, p - 1, bytes, net);
    case OpKind::kAllReduce: return ring_times(arrivals, 2 * (p - 1), (bytes + p - 1) / p, net);
    case OpKind::kBroadcast:
      return std::vector<Nanos>(
          static_cast<std::size_t>(p),
          add_time(latest, to_nanos(ceil_log2(p) * static_cast<double>(net.message_time(bytes)))));
    case OpKind::kBarrier:
    case OpKind::kSplit:
      return std::vector<Nanos>(static_cast<std::size_t>(p),
                                add_time(latest, to_nanos(ceil_log2(p) * static_cast<double>(net.latency_ns))));
    case OpKind::kSend:
    case OpKind::kRecv:
      return std::vector<Nanos>(static_cast<std::size_t>(p), add_time(latest, net.message_time(bytes)));
  }
  return std::vector<Nanos>(static_cast<std::size_t>(p), latest);
}

}  // namespace shardlab::sim
