// First cost models of the simulator: an α–β network with ring collectives, and a
// roofline device. Issue 6 adds topologies, contention and more algorithms; these
// stay the congestion-unaware reference whose closed forms the tests pin.
//
// All times are integer nanoseconds; fractional costs are rounded once per message
// (llround), so results are identical on every platform.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/comm/communicator.h"
#include "runtime/core/clock.h"
#include "runtime/core/dtype.h"

namespace shardlab::sim {

// α–β model: a message of n bytes takes latency_ns + n / bandwidth.
struct NetworkModel {
  Nanos latency_ns = 5 * kNanosPerMicro;          // α, per message
  double bandwidth_bytes_per_s = 25e9;            // 1/β, per link and direction
  Nanos message_time(std::int64_t bytes) const;   // α + n·β, rounded to ns
};

// The unit an op runs on: the matrix engine (MME-like: GEMMs) or the vector engines
// (TPC-like: everything else).
enum class ComputeUnit { kMatrix, kVector };

// Roofline device: an op takes
//   launch + max(flops / (peak(unit, dtype) · efficiency(unit)), bytes / (memory · memory_efficiency))
// rounded once to ns. Peaks are per dtype: 16-bit floats (bf16, fp16) use the *_bf16 rates,
// everything else the fp32 ones. The efficiency factors are the fraction of the vendor
// peak a well-shaped op sustains (documented per profile in sim/profiles/README.md); the
// defaults below are the simulator's `cpu-sim` profile (sim/profiles/devices/cpu-sim.json),
// whose efficiencies are 1 so that its times are exactly flops / peak.
struct DeviceProfile {
  std::string name = "cpu-sim";
  std::string description;
  double matrix_flops_per_s = 100e9;        // matrix peak, fp32
  double matrix_bf16_flops_per_s = 100e9;   // matrix peak, bf16/fp16
  double vector_flops_per_s = 20e9;         // vector peak, fp32
  double vector_bf16_flops_per_s = 20e9;    // vector peak, bf16/fp16
  double memory_bytes_per_s = 20e9;         // device memory bandwidth
  Nanos launch_ns = 2 * kNanosPerMicro;     // per op
  std::int64_t capacity_bytes = std::int64_t{16} << 30;
  double matrix_efficiency = 1.0;           // in (0, 1]
  double vector_efficiency = 1.0;
  double memory_efficiency = 1.0;

  // The sustained rates the roofline uses (peak · efficiency).
  double matrix_rate(DType dtype) const;
  double vector_rate(DType dtype) const;
  double memory_rate() const { return memory_bytes_per_s * memory_efficiency; }
  Nanos op_time(double flops, double bytes, ComputeUnit unit, DType dtype) const;
  // fp32 shorthand: op_time(flops, bytes, matrix ? kMatrix : kVector, kF32).
  Nanos op_time(double flops, double bytes, bool matrix) const;
  // The same device `factor` (≥ 1) times slower at everything (a straggler, sim/faults.h):
  // launch overhead × factor and every efficiency ÷ factor.
  DeviceProfile slowed_by(double factor) const;
};

// Per-rank completion times of a collective in a group, given each member's arrival
// time (index = group rank) and the buffer size in bytes:
//   all_gather / reduce_scatter: `bytes` is one rank's chunk n; ring with p-1 steps of n bytes
//       → equal arrivals t0 finish at t0 + (p-1)·(α + n·β) = t0 + (p-1)α + ((p-1)/p)·(p·n)·β.
//   all_reduce: `bytes` is the whole buffer N; ring reduce-scatter + all-gather with
//       2(p-1) steps of ceil(N/p) bytes → t0 + 2(p-1)α + 2((p-1)/p)·N·β (N divisible by p).
//   broadcast: binomial tree from the latest arrival: ceil(log2 p)·(α + N·β).
//   barrier, split: dissemination: ceil(log2 p)·α after the latest arrival.
// The ring schedule is run on an Engine message by message: a rank sends step s once it
// has arrived and received step s-1, and a message needs its receiver to have arrived
// (rendezvous); a rank completes when its last send and receive are done.
std::vector<Nanos> collective_completion_times(runtime::comm::OpKind kind, const std::vector<Nanos>& arrivals,
                                               std::int64_t bytes, const NetworkModel& net);

}  // namespace shardlab::sim
