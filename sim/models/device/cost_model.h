// First cost models of the simulator: an α–β network with ring collectives, and a
// roofline device. Issue 6 adds topologies, contention and more algorithms; these
// stay the congestion-unaware reference whose closed forms the tests pin.
//
// All times are integer nanoseconds; fractional costs are rounded once per message
// (llround), so results are identical on every platform.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/comm/communicator.h"
#include "runtime/core/clock.h"
#include "runtime/core/dtype.h"

namespace shardlab::sim {

// NOTE [Virtual time limit]
// Virtual time is int64 nanoseconds. Every duration computed from a profile (an op, a
// message, a host transfer, a reduction) goes through to_nanos, and sums of times through
// add_time, which never overflow: a duration that is NaN or past kTimeLimit (2^62 ns, about
// 146 years) becomes kTimeLimit, and a sum stops there (kNever, "never", stays kNever). A
// rate too slow for a run therefore shows as a time at the limit — never as a negative or
// wrapped time, which would predict a faster step — and the simulator refuses the run
// there: SimDevice fails the op and a topology network fails the collective
// (INVALID_ARGUMENT naming the profile and its keys; exit 2). Profiles are also bounded
// when loaded (sim/models/device/profiles.h), so such a run needs a huge model on the slowest rates.
inline constexpr Nanos kTimeLimit = Nanos{1} << 62;
// `ns` rounded to the nearest nanosecond in [0, kTimeLimit]; NaN and values past the limit
// give kTimeLimit, negative values 0.
Nanos to_nanos(double ns);
// a + b saturating at kTimeLimit; INT64_MAX ("never") absorbs.
Nanos add_time(Nanos a, Nanos b);

// α–β model: a message of n bytes takes latency_ns + n / bandwidth.
struct NetworkModel {
  Nanos latency_ns = 5 * kNanosPerMicro;         // α, per message
  double bandwidth_bytes_per_s = 25e9;           // 1/β, per link and direction
  Nanos message_time(std::int64_t bytes) const;  // α + n·β, rounded to ns
};

// The unit an op runs on: the matrix engine (MME-like: GEMMs) or the vector engines
// (TPC-like: everything else).
enum class ComputeUnit { kMatrix, kVector };

// Roofline device: an op takes
//   launch + op_host + max(flops / (peak(unit, dtype) · efficiency(unit)) · compute_factor(op),
//                          bytes / (memory · memory_efficiency) · memory_factor(op))
// rounded once to ns, plus the host time of the allocations made since the previous op
// (alloc_ns each; NOTE [Host time per allocation]). Peaks are per dtype: 16-bit floats (bf16, fp16) use the *_bf16
// rates, everything else the fp32 ones. The efficiency factors are the fraction of the vendor peak a well-shaped op
// sustains (documented per profile in sim/profiles/README.md); the defaults below are the simulator's `cpu-sim` profile
// (sim/profiles/devices/cpu-sim.json), whose efficiencies are 1 so that its times are exactly flops / peak.
struct DeviceProfile {
  std::string name = "cpu-sim";
  std::string description;
  // The PyTorch device type a process on this device computes on ("hpu" for Gaudi, "cpu"),
  // as fsdp.device_id names it; each process sees its own accelerator as index 0
  // (NOTE [Simulated device_id] in cli/scenario_to_run_args.h). JSON key "torch_device".
  std::string torch_device = "cpu";
  double matrix_flops_per_s = 100e9;       // matrix peak, fp32
  double matrix_bf16_flops_per_s = 100e9;  // matrix peak, bf16/fp16
  double vector_flops_per_s = 20e9;        // vector peak, fp32
  double vector_bf16_flops_per_s = 20e9;   // vector peak, bf16/fp16
  double memory_bytes_per_s = 20e9;        // device memory bandwidth
  // NOTE [Host link]: bytes/s one way between host memory and this device's memory (a
  // copy with one side in another device's storage, such as CPU offload's host shards or
  // the host-built model moved in at initialization), sustained. 0: the host's memory is
  // this device's memory (a cpu profile), and such a copy is an ordinary copy. The Gaudi
  // profiles give PCIe's rate (sim/profiles/README.md).
  double host_link_bytes_per_s = 0;
  Nanos launch_ns = 2 * kNanosPerMicro;  // per op
  std::int64_t capacity_bytes = std::int64_t{16} << 30;
  double matrix_efficiency = 1.0;  // in (0, 1]
  double vector_efficiency = 1.0;
  double memory_efficiency = 1.0;
  // NOTE [Per-op compute factors]
  // An op's flop count is a convention (sim/models/device/device.cc: a GELU is 8 flops, AdamW 14 per
  // element), and the cost of one flop is not the same in every op: a square root or a
  // division costs a CPU core several multiply-adds, an erf a few dozen. One vector rate
  // therefore cannot time every vector op. `compute_factors` holds a measured factor per
  // op key (compute_factor_keys()) that multiplies that op's compute term — never the
  // memory term, so a memory-bound op stays bound by bandwidth. `shardlab calibrate`
  // measures them on the host (calibrate/calibrate.h); the Gaudi profiles have none (factor 1:
  // their TPC kernels' per-op costs are unknown here). A sorted map: iteration order is
  // fixed, so the JSON it writes is too.
  std::map<std::string, double, std::less<>> compute_factors;
  // NOTE [Per-op memory factors]
  // The memory rate comes from one kernel, a large copy (memmove, which streams with
  // non-temporal stores). Some ops stream their operands faster than that: AdamW keeps
  // seven streams in flight, and a shard of a few tens of MB partly stays in the last-level
  // cache between steps (bert-tiny's 4.4 M-parameter update: 1.0 ns per element measured,
  // 1.7 charged at the copy's rate), and some slower: a fill's stores read each line
  // before writing it (write-allocate), twice the traffic its bytes say. `memory_factors`
  // holds, per op key, the measured time over the charged memory time (a factor in
  // [0.001, 4], on the memory term only). `calibrate` measures it for the two ops it
  // times at their training size on cold operands — the optimizer update (only when
  // faster: a slower one is compute-bound, its compute factor says so) and a fill — and
  // leaves it out within 3% of the memory term; the others run in cache there, which
  // would under-charge large activations. The Gaudi profiles have none.
  std::map<std::string, double, std::less<>> memory_factors;
  // NOTE [Cache-resident bytes]
  // On a CPU an op's operands come from two places: what the core's private cache (L2)
  // still holds from the ops just before, and main memory. A training step's small
  // tensors (a layer's activations, a bias, a 64 KB shard) live in the first; its large
  // ones (an embedding table, a language-model head's weight, a flat parameter's
  // gradient, the optimizer's states) were last touched a whole layer or step earlier and
  // come from the second — and on a VM the shared last-level cache, however large lscpu
  // says it is, is shared with other tenants, so it is not counted on. With `cache_bytes`
  // C > 0 an op's memory term is min(bytes, C) / cache_bytes_per_s + max(0, bytes − C) /
  // memory_bytes_per_s (each times memory_efficiency, then the op's memory factor): the
  // first C bytes at the in-cache rate, the rest from memory. `shardlab calibrate` sets C
  // to the core's L2 size, the in-cache rate from a copy that fits it, and
  // memory_bytes_per_s from a copy whose operands it flushes from every cache level before
  // each call (NOTE [Cold operands] in calibrate/calibrate.cc). C = 0 (the default and every
  // accelerator profile: HBM behind no large cache): every byte at memory_bytes_per_s.
  // JSON: "cache": {"kib": C / 1024, "bytes_per_s": …}.
  std::int64_t cache_bytes = 0;
  double cache_bytes_per_s = 0;
  // NOTE [Host time per allocation]
  // Host time to allocate (and later free) one tensor, charged to the rank's compute
  // timeline ahead of its next op. On an accelerator the host allocates while the device
  // computes (0 in the Gaudi profiles); on the cpu backend the host *is* the device and
  // every op allocates its output through CpuDevice's block cache, so a calibrated cpu
  // profile measures it.
  Nanos alloc_ns = 0;
  // NOTE [Host time per op]
  // The runtime's own host time around each device op — the model code that makes its
  // views and output tensors, the training loop, FSDP's bookkeeping — charged to the rank's
  // compute timeline with every op, like launch_ns. An accelerator's host issues ops ahead
  // of the device and hides it (0 in the Gaudi profiles); on the cpu backend host and
  // device are one thread, so it adds up: for a small MLP (~30 ops of about a µs) it is a
  // fifth of the step. `shardlab calibrate` measures it from a training loop (calibrate/calibrate.h:
  // measure_op_host_ns), as what the loop takes beyond the ops the profile already times.
  Nanos op_host_ns = 0;
  // NOTE [Matrix ops on a CPU]
  // Two measured departures from the plain roofline for matrix ops (gemm, batched_gemm),
  // both off in the Gaudi profiles (an MME streams its operands while it multiplies):
  //  - matrix_memory_overlap = false: the op's bytes are charged *after* its flops
  //    (compute + memory, not the max) — a CPU GEMM packs its operands into cache-sized
  //    panels before multiplying them, on the same core, and writes C back after, so a
  //    "thin" GEMM against a large operand (BERT's masked-LM decoder: ~20 rows times the
  //    30522 × H word embeddings) pays for streaming that operand on top of its flops.
  //  - small_dim_factors: {smallest of m, n, k → factor on the compute time}, linear in
  //    log2 of the dimension between entries, the nearest entry's factor outside them;
  //    register tiles are partly empty and packing is amortized over fewer flops when a
  //    dimension is small. Empty: factor 1.
  //  - matrix_operand_passes, in [1, 3]: how often the A and B operands' bytes are
  //    streamed (C's once, twice with accumulation as before). Packing reads an operand
  //    and writes its packed panels, and the kernel reads those panels again: up to 3
  //    passes when the operand does not fit in cache, 1 when the device streams it once.
  bool matrix_memory_overlap = true;
  double matrix_operand_passes = 1.0;
  // NOTE [Matrix engine geometry]
  // A matrix engine computes its output in tiles of a fixed shape: an h × w block of C
  // takes as long whether every cell of it is a real output or padding. Gaudi2 has two
  // logical MMEs, each configurable as 256 × 256, 128 × 512 or 512 × 128 (Habana's graph
  // compiler picks per GEMM; sim/profiles/README.md cites the source). A GEMM with
  // `batch` outputs of m × n fills, for a tile shape h × w, batch·⌈m/h⌉·⌈n/w⌉ tiles, which
  // run `engines` at a time: waves = ⌈tiles / engines⌉, so its utilization is
  //   batch·m·n / (waves · engines · h · w)
  // and the best tile shape is taken. The op's compute time is its flops at the sustained
  // rate (peak × efficiency.matrix, the large well-shaped GEMM's) divided by this
  // utilization. K does not enter: each tile accumulates over all of K, and fill and drain
  // of the array are overlapped with the next tile's. No engine given (the default, CPUs,
  // Gaudi1 whose geometry the reference does not give): utilization 1 at every shape.
  int matrix_engines = 0;
  std::vector<std::pair<std::int64_t, std::int64_t>> matrix_tiles;  // {h, w}; empty when no engine
  // The utilization above, in (0, 1]; 1 without an engine or for an empty GEMM.
  double matrix_utilization(std::int64_t batch, std::int64_t m, std::int64_t n) const;
  std::vector<std::pair<std::int64_t, double>> small_dim_factors;  // sorted by dimension

  // The sustained rates the roofline uses (peak · efficiency).
  double matrix_rate(DType dtype) const;
  double vector_rate(DType dtype) const;
  double memory_rate() const { return memory_bytes_per_s * memory_efficiency; }
  // Seconds to move `bytes` (NOTE [Cache-resident bytes]), before any op's memory factor.
  double memory_seconds(double bytes) const;
  Nanos op_time(double flops, double bytes, ComputeUnit unit, DType dtype) const;
  // The same with the op's compute factor (1 when `factor_key` has none) and, for matrix
  // ops, the factor of their smallest dimension (`min_dim`, 0: none; NOTE [Matrix ops on a CPU]).
  Nanos op_time(std::string_view factor_key, double flops, double bytes, ComputeUnit unit, DType dtype,
                std::int64_t min_dim = 0) const;
  double small_dim_factor(std::int64_t min_dim) const;
  // A matrix op's bytes (NOTE [Matrix ops on a CPU]): A and B matrix_operand_passes times,
  // C twice (read and written).
  double matrix_bytes(double a_bytes, double b_bytes, double c_bytes) const {
    return (a_bytes + b_bytes) * matrix_operand_passes + 2.0 * c_bytes;
  }
  // fp32 shorthand: op_time(flops, bytes, matrix ? kMatrix : kVector, kF32).
  Nanos op_time(double flops, double bytes, bool matrix) const;
  // A copy of `bytes` over the host link (NOTE [Host link]; host_link_bytes_per_s > 0):
  // launch and host time per op, then the bytes at the link's rate.
  Nanos host_transfer_time(double bytes) const;
  double compute_factor(std::string_view factor_key) const;
  double memory_factor(std::string_view factor_key) const;
  // The profile keys and values an op's time comes from ("matrix_flops_per_s.bf16 = 4.32e+14,
  // efficiency.matrix = 0.5, …"), for messages about a time past kTimeLimit; `transfer`:
  // a host-link copy.
  std::string keys_of(std::string_view factor_key, ComputeUnit unit, DType dtype, bool transfer = false) const;
  // The same device `factor` (≥ 1) times slower at everything (a straggler, sim/faults/faults.h):
  // launch overhead × factor and every efficiency ÷ factor.
  DeviceProfile slowed_by(double factor) const;
};

// The keys `compute_factors` may hold (sorted): SimDevice's op names with a compute term,
// activations by kind ("activation_gelu", "activation_backward_relu", …).
const std::vector<std::string>& compute_factor_keys();

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
