// SimDevice: the simulator's Device — cpu numerics (runtime/device/cpu) plus a roofline
// cost model (DeviceProfile) charged to the rank's VirtualClock.
//
// Memory is accounted against the profile's capacity under the name "sim:<rank>", so an
// over-budget allocation fails with the same OUT_OF_MEMORY breakdown as real devices.
// This first model executes in order on one timeline: every op advances the rank's
// clock by its cost. Communication overlaps compute through the communicator's streams
// (NOTE [Comm streams] in sim/engine/communicator.cc); the runtime issues its device ops from
// the host thread in order, which is the compute stream.
//
// Timing mode (set_timing_mode, NOTE [Phantom storage] in runtime/core/tensor.h): the
// same ops are validated by nothing, charged the same cost and recorded the same way,
// but skip their math; allocate() charges the MemoryTracker as before (so OUT_OF_MEMORY
// and the per-category peaks are those of numerics mode) and returns deferred storages.
// Shape errors are caught by numerics runs of the same program, not here.
//
// Thread safety: as for Device.
#pragma once

#include "runtime/device/cpu/device.h"
#include "sim/engine/trace.h"
#include "sim/engine/virtual_clock.h"
#include "sim/models/device/cost_model.h"
#include "sim/models/device/stack.h"

namespace shardlab::sim {

// The math behind SimDevice: the cpu backend's, or nothing in timing mode. Same op
// names as Device so SimDevice's cost code reads the same in both modes.
class SimMath {
 public:
  SimMath(runtime::device::DeviceId id, std::int64_t capacity) : cpu_(std::move(id), capacity) {}
  runtime::device::cpu::CpuDevice& cpu() { return cpu_; }
  runtime::device::DeviceId id() const { return cpu_.id(); }
  MemoryTracker& memory() { return cpu_.memory(); }
  Result<std::shared_ptr<Storage>> allocate(std::int64_t nbytes, std::int64_t charged_bytes, MemoryCategory category,
                                            std::string_view label) {
    return cpu_.allocate_charging(nbytes, charged_bytes, category, label);
  }
  Result<runtime::device::StreamId> create_stream(std::string_view name) { return cpu_.create_stream(name); }
  Result<runtime::device::EventId> record_event(runtime::device::StreamId s) { return cpu_.record_event(s); }
  Status wait_event(runtime::device::StreamId w, runtime::device::EventId e) { return cpu_.wait_event(w, e); }
  Status synchronize(runtime::device::StreamId s) { return cpu_.synchronize(s); }
  bool skip = false;  // timing mode: ops succeed without computing
  // Host access reads and writes the (deferred) bytes in both modes: the runtime's host-side
  // code runs unchanged in timing mode (NOTE [Phantom storage]).
  Status to_host(const Tensor& src, std::span<std::byte> dst, runtime::device::StreamId s) {
    return cpu_.to_host(src, dst, s);
  }
  Status from_host(std::span<const std::byte> src, const Tensor& dst, runtime::device::StreamId s) {
    return cpu_.from_host(src, dst, s);
  }
#define SHARDLAB_SIM_MATH_OP(name)                                 \
  template <typename... A>                                         \
  Status name(A&&... a) {                                          \
    return skip ? Status::ok() : cpu_.name(std::forward<A>(a)...); \
  }
  SHARDLAB_SIM_MATH_OP(copy)
  SHARDLAB_SIM_MATH_OP(fill)
  SHARDLAB_SIM_MATH_OP(cast)
  SHARDLAB_SIM_MATH_OP(axpy)
  SHARDLAB_SIM_MATH_OP(scale)
  SHARDLAB_SIM_MATH_OP(gemm)
  SHARDLAB_SIM_MATH_OP(batched_gemm)
  SHARDLAB_SIM_MATH_OP(add_bias)
  SHARDLAB_SIM_MATH_OP(bias_grad)
  SHARDLAB_SIM_MATH_OP(activation)
  SHARDLAB_SIM_MATH_OP(activation_backward)
  SHARDLAB_SIM_MATH_OP(layer_norm)
  SHARDLAB_SIM_MATH_OP(layer_norm_backward)
  SHARDLAB_SIM_MATH_OP(attention_softmax)
  SHARDLAB_SIM_MATH_OP(attention_softmax_backward)
  SHARDLAB_SIM_MATH_OP(embedding)
  SHARDLAB_SIM_MATH_OP(embedding_backward)
  SHARDLAB_SIM_MATH_OP(softmax_cross_entropy)
  SHARDLAB_SIM_MATH_OP(transpose_1_2)
  SHARDLAB_SIM_MATH_OP(multiply)
  SHARDLAB_SIM_MATH_OP(optimizer_step)
  SHARDLAB_SIM_MATH_OP(dropout_mask)
#undef SHARDLAB_SIM_MATH_OP

 private:
  runtime::device::cpu::CpuDevice cpu_;
};

class SimDevice final : public runtime::device::Device {
 public:
  SimDevice(int rank, DeviceProfile profile, VirtualClock* clock);
  // A device with another name than "sim:<rank>" — e.g. a rank's host ("host:<rank>") for
  // CPU offload, whose ops then share the rank's clock and whose storages are on the other
  // side of the accelerator's host link (NOTE [Host link] in sim/models/device/cost_model.h).
  SimDevice(runtime::device::DeviceId id, DeviceProfile profile, VirtualClock* clock);

  runtime::device::DeviceId id() const override { return inner_.id(); }
  MemoryTracker& memory() override { return inner_.memory(); }
  const DeviceProfile& profile() const { return profile_; }
  // Total simulated compute time charged so far (for metrics).
  Nanos busy_time() const { return busy_; }
  // Device ops charged so far (each one launch_ns + op_host_ns; NOTE [Host time per op]).
  std::int64_t ops_charged() const { return ops_; }
  // Bytes charged at the profile's host link (CPU offload's copies and casts).
  std::int64_t host_transfer_bytes() const override { return host_bytes_; }
  // Its ops run on a CpuDevice; host operands are charged at the host link (copy, cast).
  bool host_addressable() const override { return !inner_.skip; }
  // Records every op (name, virtual start, duration) into `trace` when set (not owned).
  void set_trace(TraceRecorder* trace) { trace_ = trace; }
  TraceRecorder* trace() const { return trace_; }
  // Timing mode (see the top of this file); off by default. Set before the first allocation.
  void set_timing_mode(bool on) { inner_.skip = on; }
  bool timing_mode() const { return inner_.skip; }
  // Whether the host blocks behind this device ask for huge pages (CpuDevice::set_huge_pages).
  void set_host_huge_pages(bool on) { inner_.cpu().set_huge_pages(on); }
  // The host blocks behind this device (simulated time is not charged: no device op).
  void empty_cache() override { inner_.cpu().release_cached_blocks(); }
  // NOTE [Emulated low precision]
  // BERT's bf16 compute runs in fp32 on the host and rounds every stored activation to
  // bf16 (a cast to a bf16 scratch and back); an accelerator computes and streams those
  // tensors in bf16. With set_emulated_dtype(kBF16) this device charges ops led by an fp32
  // activation at the bf16 rates with half the bytes (parameters, gradients and optimizer
  // state keep their dtype), and the round trip's two casts (between an fp32
  // activation and a bf16 activation scratch) cost nothing. Activation memory is charged
  // at half the bytes the host holds (bf16 for fp32; also, approximately, for the few
  // int64 and bf16 activations). Other categories are charged as held.
  // Default kF32: everything is charged as it runs.
  void set_emulated_dtype(DType d) { emulated_ = d; }
  DType emulated_dtype() const { return emulated_; }
  // NOTE [Software stack] in sim/models/device/stack.h: the device side of a graph-building stack (lazy,
  // compiled) — each op costs graph_node_ns instead of the profile's launch_ns; with
  // fold_transposes a transpose_1_2 costs nothing (BERT's split and merge of attention
  // heads, each feeding a GEMM, which reads its operand strided); with fuse_elementwise a
  // vector op reading the tensor the op before it wrote does not read it from memory again
  // (it is still written: training keeps it for backward). A stack without graphs: no change.
  void set_graph_compiler(const SoftwareStack& stack);

  Result<std::shared_ptr<Storage>> allocate(std::int64_t nbytes, MemoryCategory category,
                                            std::string_view label) override;
  Result<runtime::device::StreamId> create_stream(std::string_view name) override;
  Result<runtime::device::EventId> record_event(runtime::device::StreamId stream) override;
  Status wait_event(runtime::device::StreamId waiter, runtime::device::EventId event) override;
  Status synchronize(runtime::device::StreamId stream) override;

  // Across the host link on an accelerator profile (the batch, the loss, checkpoints);
  // a memory copy on a device without one, and on a rank's host device.
  Status to_host(const Tensor& src, std::span<std::byte> dst, runtime::device::StreamId stream) override;
  Status from_host(std::span<const std::byte> src, const Tensor& dst, runtime::device::StreamId stream) override;
  Status copy(const Tensor& src, const Tensor& dst, runtime::device::StreamId stream) override;
  Status fill(const Tensor& dst, float value, runtime::device::StreamId stream) override;
  Status cast(const Tensor& src, const Tensor& dst, runtime::device::StreamId stream) override;
  // One op for every pair (one launch, the pairs' bytes; a cast's conversions where the
  // dtypes differ). Pairs across the host link are charged one by one, as copy and cast are.
  Status copy_many(std::span<const CopyPair> pairs, runtime::device::StreamId stream) override;
  Status axpy(float alpha, const Tensor& x, const Tensor& y, runtime::device::StreamId stream) override;
  Status scale(const Tensor& x, float alpha, runtime::device::StreamId stream) override;
  Status gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c, float alpha, float beta,
              runtime::device::StreamId stream) override;
  Status batched_gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c, float alpha,
                      float beta, runtime::device::StreamId stream) override;
  Status add_bias(const Tensor& x, const Tensor& bias, runtime::device::StreamId stream) override;
  Status bias_grad(const Tensor& dy, const Tensor& dbias, bool accumulate, runtime::device::StreamId stream) override;
  Status activation(runtime::device::Activation act, const Tensor& x, const Tensor& y,
                    runtime::device::StreamId stream) override;
  Status activation_backward(runtime::device::Activation act, const Tensor& x, const Tensor& dy, const Tensor& dx,
                             runtime::device::StreamId stream) override;
  Status layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, const Tensor& y,
                    const Tensor& mean, const Tensor& rstd, runtime::device::StreamId stream) override;
  Status layer_norm_backward(const Tensor& x, const Tensor& dy, const Tensor& mean, const Tensor& rstd,
                             const Tensor& gamma, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,
                             bool accumulate, runtime::device::StreamId stream) override;
  Status attention_softmax(const Tensor& scores, const Tensor& attention_mask, float scale, const Tensor& probs,
                           runtime::device::StreamId stream) override;
  Status attention_softmax_backward(const Tensor& probs, const Tensor& dprobs, float scale, const Tensor& dscores,
                                    runtime::device::StreamId stream) override;
  Status embedding(const Tensor& table, const Tensor& ids, const Tensor& out,
                   runtime::device::StreamId stream) override;
  Status embedding_backward(const Tensor& dout, const Tensor& ids, const Tensor& dtable, bool accumulate,
                            runtime::device::StreamId stream) override;
  Status softmax_cross_entropy(const Tensor& logits, const Tensor& labels, const Tensor& loss_sum,
                               const Tensor& dlogits, float grad_scale, std::int64_t ignore_index,
                               runtime::device::StreamId stream) override;
  Status transpose_1_2(const Tensor& x, const Tensor& y, runtime::device::StreamId stream) override;
  Status multiply(const Tensor& a, const Tensor& b, const Tensor& c, runtime::device::StreamId stream) override;
  Status dropout_mask(const Tensor& mask, float p, const Rng& base, std::int64_t first_row, std::uint64_t site,
                      runtime::device::StreamId stream) override;
  Status optimizer_step(const runtime::device::OptimizerUpdate& update, const Tensor& param, const Tensor& grad,
                        const Tensor& state0, const Tensor& state1, runtime::device::StreamId stream) override;

 private:
  // Charges an op's roofline time when it succeeded: matrix ops at the profile's matrix
  // rate for `dtype` (the dtype of the op's inputs), the others at its vector rate.
  // `lead`: the tensor whose dtype sets the rate (NOTE [Emulated low precision]).
  // `factor_key` selects the op's compute factor (NOTE [Per-op compute factors]); nullptr:
  // the op's name. The host time of the allocations since the previous op
  // (NOTE [Host time per allocation]) is added to this op's time.
  // `min_dim`: a matrix op's smallest dimension (NOTE [Matrix ops on a CPU]).
  Status charge(const char* op, Status s, double flops, double bytes, bool matrix, const Tensor& lead,
                const char* factor_key = nullptr, std::int64_t min_dim = 0);

  // NOTE [Host link] in sim/models/device/cost_model.h: true when the profile has a host link and one
  // side of a copy lives in another device's storage (the host's); such a copy is charged
  // by charge_transfer at the link's rate instead of as a memory copy.
  bool crosses_host_link(const Tensor& a, const Tensor& b) const;
  Status charge_transfer(const char* op, Status s, double bytes);
  // Keeps the shapes of the op's tensors for its trace event (traced devices only).
  void note_shapes(std::initializer_list<const Tensor*> tensors);
  // The op's element-wise inputs and its output, for fuse_elementwise (set_graph_compiler).
  void note_io(std::initializer_list<const Tensor*> inputs, const Tensor& output);
  // Advances the clock by an op's time `t` (plus pending allocation time) and records it.
  // NOTE [Virtual time limit] in sim/models/device/cost_model.h: INVALID_ARGUMENT when the clock would
  // reach kTimeLimit, naming the op and `keys` (the profile keys its time comes from).
  Status advance(const char* op, Nanos t, const std::string& keys);

  double matrix_bytes(const Tensor& a, const Tensor& b, const Tensor& c) const;

  DeviceProfile profile_;
  VirtualClock* clock_;
  SimMath inner_;        // the cpu backend's math, skipped in timing mode
  std::string id_name_;  // inner_.id().to_string(): the device name on this device's storages
  Nanos busy_ = 0;
  std::int64_t ops_ = 0;
  std::int64_t host_bytes_ = 0;
  Nanos pending_alloc_ns_ = 0;    // NOTE [Host time per allocation]: not yet charged
  DType emulated_ = DType::kF32;  // NOTE [Emulated low precision]
  TraceRecorder* trace_ = nullptr;
  std::vector<std::vector<std::int64_t>> op_shapes_;  // of the op being charged (note_shapes)
  // set_graph_compiler: in a graph; its per-node time; the two rewrites.
  bool graph_ = false, fold_transposes_ = false, fuse_elementwise_ = false;
  Nanos graph_node_ns_ = 0;
  // A tensor's place (storage, first byte, bytes): the last op's output and the op's
  // inputs being charged (note_io).
  struct Place {
    const Storage* storage = nullptr;
    std::int64_t offset = 0, bytes = 0;
    friend bool operator==(const Place&, const Place&) = default;
  };
  Place last_out_, pending_out_;
  std::vector<Place> pending_in_;
};

}  // namespace shardlab::sim
