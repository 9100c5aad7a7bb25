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

// Best-of-`repeats` time of `op` (after one warm-up run), synchronizing around it.
Result<Nanos> best_time(runtime::device::Device& device, const Clock& clock, int repeats,
                        const std::function<Status()>& op) {
  SHARDLAB_RETURN_IF_ERROR(op());  // warm-up: page faults, caches, lazy init
  device.synchronize(kComputeStream);
  Nanos best = -1;
  for (int i = 0; i < repeats; ++i) {
    const Nanos t0 = clock.now();
    SHARDLAB_RETURN_IF_ERROR(op());
    device.synchronize(kComputeStream);
    const Nanos t = clock.now() - t0;
    if (best < 0 || t < best) best = t;
  }
  return best;
}

std::int64_t host_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<std::int64_t>(pages) * page : std::int64_t{16} << 30;
}

// Seconds of work once the launch overhead is taken off (at least 1 ns).
double work_s(Nanos t, Nanos launch) { return static_cast<double>(std::max<Nanos>(t - launch, 1)) / 1e9; }

}  // namespace

Result<DeviceProfile> calibrate_device(runtime::device::Device& device, const Clock& clock,
                                       const DeviceCalibrationOptions& o) {
  if (o.gemm_size < 1 || o.vector_elements < 1 || o.copy_bytes < 4 || o.repeats < 1 || o.capacity_bytes < 0) {
    return Status::invalid_argument("calibrate: gemm_size, vector_elements, repeats must be >= 1, copy_bytes >= 4 and "
                                    "capacity_bytes >= 0");
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

  SHARDLAB_ASSIGN_OR_RETURN(const Nanos launch, best_time(device, clock, o.repeats, [&] {
    return device.fill(one, 1.0f, kComputeStream);
  }));
  SHARDLAB_ASSIGN_OR_RETURN(const Nanos t_gemm, best_time(device, clock, o.repeats, [&] {
    return device.gemm(a, false, b, false, out, 1.0f, 0.0f, kComputeStream);
  }));
  SHARDLAB_ASSIGN_OR_RETURN(const Nanos t_gelu, best_time(device, clock, o.repeats, [&] {
    return device.activation(Activation::kGelu, x, y, kComputeStream);
  }));
  SHARDLAB_ASSIGN_OR_RETURN(const Nanos t_copy, best_time(device, clock, o.repeats, [&] {
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

Result<DeviceProfile> calibrate_cpu_device(const DeviceCalibrationOptions& options) {
  runtime::device::cpu::CpuDevice device({"cpu", 0});
  SteadyClock clock;
  return calibrate_device(device, clock, options);
}

Result<NetworkCalibration> calibrate_network(runtime::comm::Communicator& comm, runtime::device::Device& device,
                                             const Clock& clock, const NetworkCalibrationOptions& o) {
  if (comm.size() < 2) return Status::failed_precondition("calibrate_network needs at least 2 ranks; got " + std::to_string(comm.size()));
  if (o.sizes.size() < 2 || o.repeats < 1) {
    return Status::invalid_argument("calibrate_network: needs at least 2 sizes and repeats >= 1");
  }
  std::int64_t largest = 0;
  for (std::int64_t s : o.sizes) {
    if (s < 4 || s % 4 != 0) {
      return Status::invalid_argument("calibrate_network: size " + std::to_string(s) + " bytes; allowed: multiples of 4, >= 4");
    }
    largest = std::max(largest, s);
  }
  const int me = comm.rank();
  SHARDLAB_ASSIGN_OR_RETURN(Tensor buf, device.empty({largest / 4}, DType::kF32, MemoryCategory::kOther, "calibrate.msg"));
  SHARDLAB_RETURN_IF_ERROR(device.fill(buf, 0.0f, kComputeStream));
  NetworkCalibration result;
  if (me < 2) {
    const int peer = 1 - me;
    for (std::int64_t size : o.sizes) {
      SHARDLAB_ASSIGN_OR_RETURN(Tensor msg, buf.narrow(0, size / 4));
      Nanos best = -1;
      for (int i = 0; i <= o.repeats; ++i) {  // round 0 is a warm-up
        const Nanos t0 = clock.now();
        if (me == 0) {
          SHARDLAB_RETURN_IF_ERROR(comm.send(msg, peer, 0)->wait(runtime::comm::kDefaultTimeout));
          SHARDLAB_RETURN_IF_ERROR(comm.recv(msg, peer, 0)->wait(runtime::comm::kDefaultTimeout));
        } else {
          SHARDLAB_RETURN_IF_ERROR(comm.recv(msg, peer, 0)->wait(runtime::comm::kDefaultTimeout));
          SHARDLAB_RETURN_IF_ERROR(comm.send(msg, peer, 0)->wait(runtime::comm::kDefaultTimeout));
        }
        const Nanos rtt = clock.now() - t0;
        if (i > 0 && (best < 0 || rtt < best)) best = rtt;
      }
      result.one_way.push_back({size, best / 2});
    }
  }
  // Least squares on rank 0: t = α + β·n.
  Status fit;
  if (me == 0) {
    double sn = 0, st = 0, snn = 0, snt = 0;
    const double k = static_cast<double>(result.one_way.size());
    for (const auto& [n, t] : result.one_way) {
      sn += static_cast<double>(n);
      st += static_cast<double>(t);
      snn += static_cast<double>(n) * static_cast<double>(n);
      snt += static_cast<double>(n) * static_cast<double>(t);
    }
    const double beta = (k * snt - sn * st) / (k * snn - sn * sn);  // ns per byte
    const double alpha = (st - beta * sn) / k;
    if (!(beta > 0)) {
      fit = Status::failed_precondition("calibrate_network: one-way times do not grow with the message size (slope " +
                                        std::to_string(beta) + " ns/byte); use larger sizes");
    } else {
      result.latency_ns = std::max<Nanos>(0, static_cast<Nanos>(std::llround(alpha)));
      result.bytes_per_s = 1e9 / beta;
    }
  }
  // Share rank 0's result (or failure) with every rank.
  SHARDLAB_ASSIGN_OR_RETURN(Tensor shared, device.empty({3}, DType::kI64, MemoryCategory::kOther, "calibrate.result"));
  auto* s = shared.data<std::int64_t>();
  s[0] = fit.is_ok() ? 1 : 0;
  s[1] = result.latency_ns;
  s[2] = static_cast<std::int64_t>(std::llround(result.bytes_per_s));
  SHARDLAB_RETURN_IF_ERROR(comm.broadcast(shared, 0)->wait(runtime::comm::kDefaultTimeout));
  if (!fit.is_ok()) return fit;
  if (s[0] == 0) return Status::failed_precondition("calibrate_network: rank 0 could not fit the measurements");
  if (me != 0) {
    result.latency_ns = s[1];
    result.bytes_per_s = static_cast<double>(s[2]);
  }
  return result;
}

TopologySpec switch_topology_from(const NetworkCalibration& c, std::string name) {
  TopologySpec t;
  t.name = std::move(name);
  t.description = "measured by shardlab calibrate (ping-pong, least-squares alpha-beta)";
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
