#include "sim/calibrate.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "runtime/device/cpu/device.h"
#include "runtime/io/safetensors.h"

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
};

// Mean time of `op` over a window of at least `min_window` (at least one run),
// synchronizing after each run.
Result<Nanos> window_time(runtime::device::Device& device, const Clock& clock, Nanos min_window,
                          const std::function<Status()>& op) {
  const Nanos t0 = clock.now();
  std::int64_t runs = 0;
  Nanos elapsed = 0;
  do {
    SHARDLAB_RETURN_IF_ERROR(op());
    device.synchronize(kComputeStream);
    ++runs;
    elapsed = clock.now() - t0;
  } while (elapsed < min_window);
  return elapsed / runs;
}

// Best-of-`repeats` window time of `op` after one warm-up window (page faults, caches,
// lazy init).
Result<Nanos> best_time(runtime::device::Device& device, const Clock& clock, const DeviceCalibrationOptions& o,
                        const Coordination& co, const std::function<Status()>& op) {
  SHARDLAB_RETURN_IF_ERROR(co.before());
  SHARDLAB_RETURN_IF_ERROR(window_time(device, clock, o.min_window_ns, op).status());
  Nanos best = -1;
  for (int i = 0; i < o.repeats; ++i) {
    SHARDLAB_ASSIGN_OR_RETURN(const Nanos t, window_time(device, clock, o.min_window_ns, op));
    if (best < 0 || t < best) best = t;
  }
  return co.combine(best);
}

std::int64_t host_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<std::int64_t>(pages) * page : std::int64_t{16} << 30;
}

// Seconds of work once the launch overhead is taken off (at least 1 ns).
double work_s(Nanos t, Nanos launch) { return static_cast<double>(std::max<Nanos>(t - launch, 1)) / 1e9; }

Result<DeviceProfile> measure_device(runtime::device::Device& device, const Clock& clock,
                                     const DeviceCalibrationOptions& o, const Coordination& co) {
  if (o.gemm_size < 1 || o.vector_elements < 1 || o.copy_bytes < 4 || o.repeats < 1 || o.capacity_bytes < 0 ||
      o.min_window_ns < 0) {
    return Status::invalid_argument("calibrate: gemm_size, vector_elements, repeats must be >= 1, copy_bytes >= 4, "
                                    "capacity_bytes and min_window_ns >= 0");
  }
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

  SHARDLAB_ASSIGN_OR_RETURN(const Nanos launch, best_time(device, clock, o, co, [&] {
    return device.fill(one, 1.0f, kComputeStream);
  }));
  SHARDLAB_ASSIGN_OR_RETURN(const Nanos t_gemm, best_time(device, clock, o, co, [&] {
    return device.gemm(a, false, b, false, out, 1.0f, 0.0f, kComputeStream);
  }));
  SHARDLAB_ASSIGN_OR_RETURN(const Nanos t_gelu, best_time(device, clock, o, co, [&] {
    return device.activation(Activation::kGelu, x, y, kComputeStream);
  }));
  SHARDLAB_ASSIGN_OR_RETURN(const Nanos t_copy, best_time(device, clock, o, co, [&] {
    return device.copy(src, dst, kComputeStream);
  }));

  DeviceProfile p;
  p.name = o.name;
  p.description = "measured by shardlab calibrate";
  p.launch_ns = launch;
  p.matrix_flops_per_s = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) /
                         work_s(t_gemm, launch);
  p.matrix_bf16_flops_per_s = p.matrix_flops_per_s;
  p.vector_flops_per_s = 8.0 * static_cast<double>(v) / work_s(t_gelu, launch);
  p.vector_bf16_flops_per_s = p.vector_flops_per_s;
  p.memory_bytes_per_s = 2.0 * static_cast<double>(src.nbytes()) / work_s(t_copy, launch);
  p.capacity_bytes = o.capacity_bytes > 0 ? o.capacity_bytes : host_memory_bytes();
  p.matrix_efficiency = p.vector_efficiency = p.memory_efficiency = 1.0;
  return p;
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

Result<DeviceProfile> calibrate_device(runtime::device::Device& device, const Clock& clock,
                                       const DeviceCalibrationOptions& o) {
  const Coordination alone{[] { return Status::ok(); }, [](Nanos t) -> Result<Nanos> { return t; }};
  return measure_device(device, clock, o, alone);
}

Result<DeviceProfile> calibrate_cpu_device(const DeviceCalibrationOptions& options) {
  runtime::device::cpu::CpuDevice device({"cpu", 0});
  SteadyClock clock;
  return calibrate_device(device, clock, options);
}

Result<DeviceProfile> calibrate_device_together(Communicator& comm, runtime::device::Device& device,
                                                const Clock& clock, const DeviceCalibrationOptions& o) {
  const Coordination together{
      [&] { return comm.barrier()->wait(runtime::comm::kDefaultTimeout); },
      [&](Nanos t) -> Result<Nanos> {
        SHARDLAB_ASSIGN_OR_RETURN(std::vector<Nanos> slowest, max_over_ranks(comm, device, {t}));
        return slowest[0];
      }};
  return measure_device(device, clock, o, together);
}

Result<NetworkCalibration> calibrate_network(Communicator& comm, runtime::device::Device& device,
                                             const Clock& clock, const NetworkCalibrationOptions& o) {
  const int p = comm.size();
  if (p < 2) return Status::failed_precondition("calibrate_network needs at least 2 ranks; got " + std::to_string(p));
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

  NetworkCalibration result;
  result.ranks = p;
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
    for (const auto& [kind, issue] : ops) {
      std::vector<Nanos> times;
      for (int i = 0; i <= o.repeats; ++i) {  // round 0 is a warm-up
        SHARDLAB_RETURN_IF_ERROR(comm.barrier()->wait(timeout));
        const Nanos t0 = clock.now();
        SHARDLAB_RETURN_IF_ERROR(issue()->wait(timeout));
        if (i > 0) times.push_back(clock.now() - t0);
      }
      std::nth_element(times.begin(), times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2), times.end());
      medians.push_back(times[times.size() / 2]);
      const std::int64_t chunk = 4 * n;
      const int steps = kind == OpKind::kAllReduce ? 2 * (p - 1) : p - 1;
      result.samples.push_back({kind, chunk * p, chunk, steps, chunk, 0});
    }
  }
  SHARDLAB_ASSIGN_OR_RETURN(const std::vector<Nanos> slowest, max_over_ranks(comm, device, medians));
  for (std::size_t i = 0; i < slowest.size(); ++i) result.samples[i].time_ns = slowest[i];

  // Weighted least squares on y = time/steps = α + β·x (x = step bytes) with weights 1/y²:
  // the relative error of every sample counts the same. Every rank fits the same numbers.
  double sw = 0, swx = 0, swxx = 0, swy = 0, swxy = 0;
  for (const CollectiveSample& s : result.samples) {
    const double y = static_cast<double>(s.time_ns) / s.steps;
    const double x = static_cast<double>(s.step_bytes);
    const double w = 1.0 / std::max(y * y, 1.0);
    sw += w;
    swx += w * x;
    swxx += w * x * x;
    swy += w * y;
    swxy += w * x * y;
  }
  const double det = sw * swxx - swx * swx;
  const double beta = det > 0 ? (sw * swxy - swx * swy) / det : 0.0;  // ns per byte
  if (!(beta > 0)) {
    return Status::failed_precondition("calibrate_network: collective times do not grow with the message size (slope " +
                                       std::to_string(beta) + " ns/byte); use larger sizes");
  }
  const double alpha = (swy - beta * swx) / sw;
  result.latency_ns = std::max<Nanos>(0, static_cast<Nanos>(std::llround(alpha)));
  result.bytes_per_s = 1e9 / beta;
  return result;
}

TopologySpec switch_topology_from(const NetworkCalibration& c, std::string name) {
  TopologySpec t;
  t.name = std::move(name);
  t.description = "measured by shardlab calibrate with " + std::to_string(c.ranks) +
                  " MPI processes (all_gather, reduce_scatter, all_reduce; ring alpha-beta fit)";
  t.kind = TopologyKind::kSwitch;
  t.port.gbit_per_s = c.bytes_per_s * 8.0 / 1e9;
  t.port.latency_ns = c.latency_ns / 2;
  t.efficiency = 1.0;
  return t;
}

Status write_topology(const TopologySpec& spec, const std::string& path) {
  return runtime::io::write_file_atomic(path, topology_to_json(spec));
}

}  // namespace shardlab::sim
