// Calibration: measure a real machine and write what the simulator needs to mimic it —
// a device profile (sim/models/device/profiles.h) and an α–β `switch` topology profile (sim/models/network/topology.h).
// The library side of `shardlab calibrate`.
//
// NOTE [Calibration is the only wall clock in sim/]
// These functions read the Clock they are given — SteadyClock for a real measurement, a
// VirtualClock in tests — and nothing else in sim/ ever does: a simulation never depends
// on host timing (NOTE [Determinism] in sim/engine/world.h). Calibration output is data that a
// later, deterministic simulation reads.
//
// Flops and bytes are counted exactly as SimDevice charges them (gemm 2mnk; a GELU 8
// flops per element; a copy reads and writes its bytes), so a calibrated profile predicts
// the measured op times on the machine it came from. Each figure is the best of `repeats`
// windows after one warm-up window (the least disturbed window) in each of `rounds`
// rounds of the whole measurement (NOTE [Calibration rounds]); a window runs the op back
// to back for at least `min_window_ns` and yields the mean time per op, with the launch
// overhead (the mean time of a one-element op) taken off before dividing. Beyond the
// roofline rates it measures what a CPU device has and an accelerator hides: the host time
// per allocation, a compute factor per vector op kind (NOTE [Per-op compute factors]), and
// for GEMMs the operand passes and small-dimension factors (NOTE [Matrix ops on a CPU],
// both in sim/models/device/cost_model.h); calibrate_network adds the reduction rate γ.
//
// NOTE [Calibrate with the run's process count]
// The simulator gives every rank a device of its own. When a run has more processes than
// the machine has cores (4 MPI ranks on 2 cores), each rank's "device" is a time share
// of a core, and the collectives' latency includes being scheduled. So the profiles for a
// P-process run are measured with P processes: calibrate_device_together has every rank
// measure at once (windows long enough to span several scheduler time slices) and keeps
// the slowest rank's time, and calibrate_network times the collectives the runtime issues
// (all_gather, reduce_scatter, all_reduce through the Communicator, i.e. Open MPI's
// nonblocking collectives) on all P ranks and fits the simulator's collective model to
// them (rather than timing point-to-point messages: the collectives are what a run waits
// for) — NOTE [Fitting the collective model].
// A profile measured with P processes predicts runs of P processes on this machine; it is
// not a property of the hardware alone.
//
// Thread safety: calibrate_device uses the device from one thread; calibrate_device_together
// and calibrate_network are called by every rank of the communicator, each from its own
// thread or process.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "runtime/comm/communicator.h"
#include "runtime/core/clock.h"
#include "runtime/device/device.h"
#include "sim/models/device/cost_model.h"
#include "sim/models/network/collectives.h"
#include "sim/models/network/topology.h"

namespace shardlab::sim {

struct DeviceCalibrationOptions {
  std::string name = "calibrated-cpu";     // the profile's name
  std::int64_t gemm_size = 512;            // square fp32 GEMM (m = n = k): compute bound
  std::int64_t vector_elements = 1 << 15;  // GELU on an in-cache tensor: vector compute
  std::int64_t copy_bytes = 64 << 20;      // a copy far larger than caches: memory bandwidth
  int repeats = 2;                         // windows per op and round (after one warm-up window)
  // The whole measurement runs this many times and each op keeps its best window over all
  // of them (NOTE [Calibration rounds] in calibrate/calibrate.cc): an op's windows then span the
  // calibration, not one moment of it.
  int rounds = 3;
  // Each window runs the op until this much time has passed (at least once). Longer
  // windows average over time slices when ranks share cores; shorter ones calibrate faster.
  Nanos min_window_ns = 50 * kNanosPerMilli;
  std::int64_t capacity_bytes = 0;  // 0: the host's physical memory
  // The profile's cache_bytes (NOTE [Cache-resident bytes] in sim/models/device/cost_model.h): -1 the
  // host's L2 per core (0 where the host does not say), 0 no cache model (every operand
  // warm, every byte at one rate). Only host-addressable devices get one.
  std::int64_t cache_bytes = -1;
  // Measure a compute factor per op (NOTE [Per-op compute factors] in sim/models/device/cost_model.h),
  // in windows of min_window_ns / 5.
  bool compute_factors = true;
  // Measure matrix_operand_passes and small_dim_factors at dimensions 8, 16, … up to gemm_size / 2 (NOTE [Matrix ops on
  // a CPU] in sim/models/device/cost_model.h), in windows of min_window_ns / 5.
  bool small_dim_factors = true;
  // Measure op_host_ns from a training loop (NOTE [Host time per op] in sim/models/device/cost_model.h),
  // in windows of min_window_ns / 5.
  bool op_host = true;
};

// The host's L2 cache per core in bytes (what DeviceCalibrationOptions::cache_bytes = -1
// takes), 0 where the C library does not say.
std::int64_t host_cache_bytes();
// Measures `device` with `clock`. The matrix and vector rates are measured in fp32; bf16
// gets the same rates (the cpu backend computes in fp32). Efficiencies are 1 (the rates
// are already sustained ones). INVALID_ARGUMENT for bad options; a device error as is.
Result<DeviceProfile> calibrate_device(runtime::device::Device& device, const Clock& clock,
                                       const DeviceCalibrationOptions& options = {});
// NOTE [Host time per op] (sim/models/device/cost_model.h): what a short training loop of the runtime
// (a small MLP, unsharded) takes on `device` beyond what a SimDevice with `profile` charges
// for the same loop, per op charged, in ns (0 when it takes no longer). The profile's own
// op_host_ns is ignored. Errors as calibrate_device.
Result<Nanos> measure_op_host_ns(runtime::device::Device& device, const Clock& clock, const DeviceProfile& profile,
                                 const DeviceCalibrationOptions& options = {});
// The host CPU through runtime/device/cpu and SteadyClock.
Result<DeviceProfile> calibrate_cpu_device(const DeviceCalibrationOptions& options = {});
// Every rank of `comm` measures its `device` at the same time (a barrier before each op's
// windows), and each op's time is the slowest rank's (NOTE [Calibrate with the run's
// process count]). Every rank returns the same profile. Errors as calibrate_device, or a
// communicator error.
Result<DeviceProfile> calibrate_device_together(runtime::comm::Communicator& comm, runtime::device::Device& device,
                                                const Clock& clock, const DeviceCalibrationOptions& options = {});

struct NetworkCalibrationOptions {
  // Whole-buffer sizes in bytes, as FSDP's flat parameters have them: all_gather fills,
  // reduce_scatter reduces and all_reduce reduces a buffer of this size, p chunks of
  // size/p bytes (rounded down to whole fp32 elements, at least one). The largest stays
  // below a cliff of Open MPI 4.1 on the reference VM: a reduce_scatter of 16 MiB or more
  // takes ~20x longer than one of 12 MiB, for raw MPI as well (bench/README.md,
  // "Validating the simulator"); one such size would dominate the fit.
  // 15 and 17 MiB straddle the step of Open MPI 4.1's reduce_scatter just past 16 MiB
  // (2 processes here: 15 MiB 5.8 ms, 16 MiB 6.2 ms, 17 MiB 12.7 ms), so the table's
  // interpolation does not smear it over the sizes below.
  std::vector<std::int64_t> sizes = {64,      4 << 10,  64 << 10, 1 << 20,  2 << 20,  4 << 20,
                                     8 << 20, 12 << 20, 15 << 20, 17 << 20, 24 << 20, 32 << 20};
  // The α–β–γ fit uses the sizes up to this many bytes; every size goes into the measured
  // table (NOTE [Measured collectives] in sim/models/network/topology.h).
  int repeats = 10;
  std::int64_t fit_max_bytes = 8 << 20;
  // Flush the buffers from the host's caches before each timed run (NOTE [Cold operands]
  // in calibrate/calibrate.cc): a training step's gradients and shards were last touched a
  // layer or a step before their collective (on a 480 MiB-L3 VM, 2 processes: a 1 MiB
  // all_gather 14 µs warm, 87 µs cold; the same unit's all_gather in a step 367 µs
  // for 1.5 MiB).
  bool cold = true;
  // The algorithm the simulator will run on the written topology (the scenario's
  // world.collective_algorithm; `shardlab calibrate` fits for `auto`, the default): the
  // fit uses its schedules.
  Algorithm algorithm = Algorithm::kAuto;
};

// One measured collective: the slowest rank's median time, and what the simulator's
// schedule for it (NetworkCalibrationOptions::algorithm on a one-node switch of p members)
// puts on a member's critical path when all arrive together: `rounds` message latencies
// and `path_bytes` bytes sent one after the other (ring all_gather: p-1 rounds of one
// chunk; halving-doubling all_gather: log2 p rounds, (p-1) chunks in all; Rabenseifner
// all_reduce: 2·log2 p rounds, 2(p-1) chunks).
struct CollectiveSample {
  runtime::comm::OpKind kind = runtime::comm::OpKind::kAllGather;
  std::int64_t buffer_bytes = 0;  // p chunks
  std::int64_t chunk_bytes = 0;
  std::string algorithm;  // what the simulator runs ("ring", "halving_doubling" …)
  int rounds = 0;
  std::int64_t path_bytes = 0;
  std::int64_t reduced_bytes = 0;  // what each member reduces: (p-1) chunks, 0 for all_gather
  Nanos time_ns = 0;
};
struct NetworkCalibration {
  int ranks = 0;                   // how many processes were measured
  std::int64_t fit_max_bytes = 0;  // the samples fitted: buffer_bytes up to this
  Nanos overhead_ns = 0;           // o: per call (NOTE [Collective overhead] in sim/models/network/topology.h)
  Nanos latency_ns = 0;            // α: one round's message latency (0 with one rank)
  double bytes_per_s = 0;          // 1/β: a message's bytes per second (0 with one rank)
  double reduce_bytes_per_s = 0;   // 1/γ (NOTE [Reduction cost] in sim/models/network/topology.h); 0: none fitted
  std::vector<CollectiveSample> samples;
  // What the fitted model predicts for a sample: o + rounds·α + path_bytes·β + reduced·γ.
  double fitted_ns(const CollectiveSample& s) const;
};

// Times all_gather (in place, as FSDP's unshard issues it), reduce_scatter (into a separate
// shard, as FSDP's gradient reduction) and all_reduce (in place), fp32 sum, of every size
// on all ranks of `comm`: a barrier before each run; each rank keeps the median of
// `repeats` runs after a warm-up, then the slowest rank's median is taken. The median, not
// the best: with more ranks than cores a collective's time depends on whether its peers
// are scheduled, and a training run sees the typical case, not the luckiest. Then fits
// the model (NOTE [Fitting the collective model]). Every rank calls it and gets the same
// result. FAILED_PRECONDITION when, with two or more ranks, the times do not grow with the
// bytes on the path (no bandwidth to fit); INVALID_ARGUMENT for bad options.
//
// NOTE [Fitting the collective model]
// The simulator times a collective as o + rounds·α + path_bytes·β + reduced·γ for members
// that arrive together on a congestion-free switch: the per-call overhead o (NOTE
// [Collective overhead] in sim/models/network/topology.h), one message latency α per round and β per
// byte along the schedule's critical path, and γ per byte each member reduces (NOTE
// [Reduction cost]). Each sample's rounds and path bytes come from the schedule the
// simulator itself will run (plan_collective with `options.algorithm` on a one-node
// switch of p members: under `auto`, halving-doubling up to 256 KiB on 2, 4, 8 … members,
// ring otherwise), so the fitted numbers reproduce the measured times in the simulator's
// own terms rather than in a ring model the simulator then does not run. The four
// coefficients are fitted together by least squares on relative error (sizes span orders
// of magnitude; each should be predicted equally well, and an outlier weighs little), none
// negative: a coefficient the unconstrained fit makes negative is dropped (0) and the rest
// refitted. o and α are told apart by kinds with different round counts for the same
// bytes (all_gather log2 p rounds, all_reduce 2·log2 p): Open MPI's nonblocking
// collectives on an oversubscribed 4-process run cost ~25 µs per call however many rounds
// they take (a 64-byte all_reduce 26.9 µs, all_gather 28.5 µs), which a latency-only model
// could only fit by under-charging all_gather and over-charging all_reduce. γ is dropped
// when it is under 1% of every reducing sample's time (rounding, not a cost). With one
// rank there are no messages: o is the median time of the samples of at most 64 KiB, and γ
// (a one-member reduce_scatter copies its chunk) is fitted to the rest.
Result<NetworkCalibration> calibrate_network(runtime::comm::Communicator& comm, runtime::device::Device& device,
                                             const Clock& clock, const NetworkCalibrationOptions& options = {});

// A `switch` topology profile with the fitted α (split over the two port traversals of a
// message), bandwidth, reduction rate and overhead — what `shardlab calibrate` writes next
// to the device profile. From one rank: the default links, and the overhead. Every sample
// also goes into its measured table (NOTE [Measured collectives] in sim/models/network/topology.h).
TopologySpec switch_topology_from(const NetworkCalibration& c, std::string name);
// Writes topology_to_json atomically.
Status write_topology(const TopologySpec& spec, const std::string& path);

}  // namespace shardlab::sim
