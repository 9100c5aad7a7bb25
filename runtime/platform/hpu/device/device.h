// HpuDevice: the Intel Gaudi backend of the Device seam, through Synapse (dlopen'ed, see
// synapse_library.h). One process per card: the device acquires one module and calls it
// "hpu:0" (every process sees its own card as index 0), so an index-less "hpu" resolves
// to it (runtime/fsdp/options.cc resolve_device_id).
//
// NOTE [HPU device memory] — where tensors live and how the host sees them.
// Every storage this device hands out is device memory only (synDeviceMalloc; the
// Storage has a device_address and no host bytes), so Tensor::data() on it is a CHECK
// failure: code above the seam reads and writes values only through to_host/from_host
// (NOTE [Host access] in runtime/device/device.h). Ops are enqueued on their stream and
// return; ordering between streams is by events (the hccl communicator waits on the
// compute stream before each collective). Host traffic happens only where a value must
// cross:
//   - to_host: synchronizes the stream, DMA DRAM_TO_HOST into pinned staging, copies out;
//     from_host: copies into pinned staging, DMA HOST_TO_DRAM on the stream, returns (the
//     staging is kept until that stream is next synchronized);
//   - op scalars (alpha, beta, scale): a few bytes uploaded into the stream's scalar slots
//     (1-element input tensors, so recipes do not depend on their values);
//   - host ops (NOTE [HPU host ops] in device.cc): the few cases below whose exact
//     contract has no composition of public kernels download their operands, run the cpu
//     backend's math and upload what they wrote; stats().host_fallback_ops counts them;
//   - cross-entropy: the labels come down (range check), the kept rows' indices go up, the
//     per-row losses come down and their fp64 sum goes up;
//   - dropout masks: drawn on the host from shardlab's counter-based stream (no public
//     kernel reproduces it) and uploaded;
//   - embedding: its ids are downloaded and range-checked before the gather (an
//     out-of-range gather would read arbitrary device memory).
// host_transfer_bytes() counts every byte of these, both ways.
//
// Math ops run as compiled Synapse graphs — MME `gemm`/`batch_gemm`, TPC kernels by GUID
// with a dtype suffix (`relu_fwd_f32`, `gelu_bwd_f32`, `layer_norm_fwd_f32`,
// `cast_f32_to_bf16`, …) — one small graph per (op, shapes, dtypes, kernel params),
// compiled once and cached as a recipe (stats().recipes_compiled counts compilations).
// Scalars (alpha, beta, scale) are 1-element input tensors so recipes do not depend on
// their values. Ops without a fused public kernel are graphs of public ones in the cpu
// backend's operation order: the masked attention softmax and its backward
// (softmax_fwd/bwd_f32), cross-entropy (NOTE [HPU cross entropy]: only the per-row losses
// come down, for the fp64 sum), bias and embedding gradients (reduce_sum_fwd_f32,
// unsorted_scatter_add_fwd_f32) and the optimizer (NOTE [HPU optimizer step]). Host ops
// today: cross-entropy with a grad_scale that is not positive,
// int64 fills, overlapping copies, and the degenerate shapes (K = 0 gemms, 0-row LayerNorm
// backward). Device-to-device copies are DMA (DRAM_TO_DRAM).
//
// Before every launch each bound tensor is checked (check_launch_tensor): its byte offset
// and extent lie inside its storage, the storage is a live allocation of this device of at
// least that size, and its extent and dtype are what the recipe was compiled for. A
// mismatch is INVALID_ARGUMENT naming the tensor, the offsets and the storage; nothing is
// launched with a wrapped offset.
//
// Memory: allocate() reserves in the MemoryTracker (capacity = the card's memory from
// synDeviceGetMemoryInfo unless options say otherwise) before synDeviceMalloc, so OOM
// errors carry the per-category breakdown; a synOutOfDeviceMemory from the library is
// reported the same way with the status named.
//
// Thread safety: as for Device (one owning thread); storages may die on any thread (the
// allocation registry is locked).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/device/cpu/device.h"
#include "runtime/device/device.h"
#include "runtime/platform/hpu/synapse_library.h"

namespace shardlab::runtime::device::hpu {

struct HpuDeviceOptions {
  // The module (card) to acquire; unset: select_module() from the environment.
  std::optional<std::uint32_t> module_id;
  // MemoryTracker capacity; <= 0: the card's total memory reported by Synapse.
  std::int64_t capacity_bytes = 0;
};

// Picks this process's module: HABANA_VISIBLE_MODULES (comma-separated module ids, default
// 0..7 in order) indexed by the local rank (OMPI_COMM_WORLD_LOCAL_RANK, else LOCAL_RANK,
// else 0). INVALID_ARGUMENT when the list is malformed or shorter than the local rank.
Result<std::uint32_t> select_module();

// The pre-launch placement check of one tensor (see the header comment; NOTE [Launch
// check] in runtime/device/device.h): DATA_LOSS when it fails. Offsets and sizes in bytes; `allocation_bytes` < 0 means
// the storage is not an allocation of this device. Pure function, so the wrapped-offset case can be tested directly.
Status check_launch_tensor(const std::string& recipe, const std::string& tensor, const std::string& storage_label,
                           std::int64_t byte_offset, std::int64_t nbytes, std::int64_t storage_bytes,
                           std::int64_t allocation_bytes, std::int64_t compiled_bytes);

class HpuDevice final : public Device {
 public:
  struct Stats {
    std::int64_t recipes_compiled = 0;
    std::int64_t recipe_cache_hits = 0;
    std::int64_t launches = 0;
    std::int64_t host_fallback_ops = 0;
    std::int64_t bytes_to_device = 0;
    std::int64_t bytes_to_host = 0;
  };

  // synInitialize is the caller's (HpuContext); this acquires the module, creates the
  // compute stream and reads the device type and memory size. Errors name the Synapse
  // call and status (e.g. synDeviceAlreadyAcquired with a hint on HABANA_VISIBLE_MODULES).
  static Result<std::unique_ptr<HpuDevice>> open(std::shared_ptr<SynapseLibrary> lib,
                                                 const HpuDeviceOptions& options = {});
  // Destroys recipes, events and streams, then releases the module. Storages must be gone.
  ~HpuDevice() override;
  HpuDevice(const HpuDevice&) = delete;
  HpuDevice& operator=(const HpuDevice&) = delete;

  DeviceId id() const override { return {"hpu", 0}; }
  MemoryTracker& memory() override { return memory_; }

  Result<std::shared_ptr<Storage>> allocate(std::int64_t nbytes, MemoryCategory category,
                                            std::string_view label) override;

  Result<StreamId> create_stream(std::string_view name) override;
  Result<EventId> record_event(StreamId stream) override;
  Status wait_event(StreamId waiter, EventId event) override;
  Status synchronize(StreamId stream) override;

  Status to_host(const Tensor& src, std::span<std::byte> dst, StreamId stream) override;
  Status from_host(std::span<const std::byte> src, const Tensor& dst, StreamId stream) override;
  Status copy(const Tensor& src, const Tensor& dst, StreamId stream) override;
  Status fill(const Tensor& dst, float value, StreamId stream) override;
  Status cast(const Tensor& src, const Tensor& dst, StreamId stream) override;
  Status axpy(float alpha, const Tensor& x, const Tensor& y, StreamId stream) override;
  Status scale(const Tensor& x, float alpha, StreamId stream) override;
  Status gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c, float alpha, float beta,
              StreamId stream) override;
  Status batched_gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c, float alpha,
                      float beta, StreamId stream) override;
  Status add_bias(const Tensor& x, const Tensor& bias, StreamId stream) override;
  Status bias_grad(const Tensor& dy, const Tensor& dbias, bool accumulate, StreamId stream) override;
  Status activation(Activation act, const Tensor& x, const Tensor& y, StreamId stream) override;
  Status activation_backward(Activation act, const Tensor& x, const Tensor& dy, const Tensor& dx,
                             StreamId stream) override;
  Status layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, const Tensor& y,
                    const Tensor& mean, const Tensor& rstd, StreamId stream) override;
  Status layer_norm_backward(const Tensor& x, const Tensor& dy, const Tensor& mean, const Tensor& rstd,
                             const Tensor& gamma, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,
                             bool accumulate, StreamId stream) override;
  Status attention_softmax(const Tensor& scores, const Tensor& attention_mask, float scale, const Tensor& probs,
                           StreamId stream) override;
  Status attention_softmax_backward(const Tensor& probs, const Tensor& dprobs, float scale, const Tensor& dscores,
                                    StreamId stream) override;
  Status embedding(const Tensor& table, const Tensor& ids, const Tensor& out, StreamId stream) override;
  Status embedding_backward(const Tensor& dout, const Tensor& ids, const Tensor& dtable, bool accumulate,
                            StreamId stream) override;
  Status softmax_cross_entropy(const Tensor& logits, const Tensor& labels, const Tensor& loss_sum,
                               const Tensor& dlogits, float grad_scale, std::int64_t ignore_index,
                               StreamId stream) override;
  Status transpose_1_2(const Tensor& x, const Tensor& y, StreamId stream) override;
  Status multiply(const Tensor& a, const Tensor& b, const Tensor& c, StreamId stream) override;
  Status optimizer_step(const OptimizerUpdate& update, const Tensor& param, const Tensor& grad, const Tensor& state0,
                        const Tensor& state1, StreamId stream) override;
  Status dropout_mask(const Tensor& mask, float p, const Rng& base, std::int64_t first_row, std::uint64_t site,
                      StreamId stream) override;

  Stats stats() const { return stats_; }
  std::int64_t host_transfer_bytes() const override { return stats_.bytes_to_device + stats_.bytes_to_host; }
  std::uint32_t module_id() const { return module_id_; }
  // "Gaudi", "Gaudi2", "Gaudi3" or "synDeviceType N".
  std::string device_type_name() const;

  // ---- for the hccl communicator (same process, same owning thread) ----------------------
  const SynapseLibrary& library() const { return *lib_; }
  const std::shared_ptr<SynapseLibrary>& library_ptr() const { return lib_; }
  synDeviceId synapse_device() const { return device_; }
  // The Synapse stream behind a StreamId (INVALID_ARGUMENT for unknown ids).
  Result<synStreamHandle> stream_handle(StreamId stream) const;
  // OK when `t` is a view into a live allocation of this device (INVALID_ARGUMENT naming
  // `what`, the tensor and where its storage lives otherwise).
  Status check_device_tensor(const Tensor& t, std::string_view what) const;
  // The device address of the view's first byte (storage base + byte offset).
  static std::uint64_t device_address(const Tensor& t);
  // Keeps `resources` (buffers and events of operations that never completed, e.g. after
  // hcclCommAbort) until the device closes: the card may still write into them, so they
  // must not be reused before the module is released.
  void keep_until_close(std::shared_ptr<void> resources) { abandoned_.push_back(std::move(resources)); }

 private:
  struct Allocations;  // the live device allocations, shared with storages
  struct Recipe;
  struct GraphSpec;
  struct Binding;
  struct HostOperand;

  HpuDevice(std::shared_ptr<SynapseLibrary> lib, synDeviceId device, std::uint32_t module, int device_type,
            std::int64_t capacity);

  Status check_stream(std::string_view op, StreamId stream) const;
  Status check_operand(std::string_view op, const Tensor& t, DType dtype) const;
  // Compiles (or finds) the recipe of `spec`, checks and uploads the bindings, launches,
  // downloads the outputs and synchronizes `stream`.
  Status run_graph(const GraphSpec& spec, const std::vector<Binding>& bindings, StreamId stream);
  Result<Recipe*> recipe_for(const GraphSpec& spec);
  // `values` in this stream's scalar slots, as a [n, 1, ...] tensor of `rank` dims.
  Result<Tensor> scalars(StreamId stream, const std::vector<float>& values, int rank);
  // Pinned host memory (synHostMalloc) for DMA; freed when the storage dies.
  Result<std::shared_ptr<Storage>> pinned(std::int64_t nbytes, std::string_view label);
  // DMA between pinned host bytes and device memory on `stream`, counted.
  Status dma_to_device(StreamId stream, const std::byte* host, std::uint64_t address, std::int64_t nbytes,
                       const std::string& what);
  Status dma_to_host(StreamId stream, std::uint64_t address, std::int64_t nbytes, std::byte* host,
                     const std::string& what);
  // Keeps `staging` alive until `stream` is next synchronized (its DMA may still read it).
  void keep_until_synchronized(StreamId stream, std::shared_ptr<Storage> staging);
  // NOTE [HPU host ops] in device.cc.
  Status host_op(std::string_view op, StreamId stream, const std::vector<HostOperand>& operands,
                 const std::function<Status(const std::vector<Tensor>&)>& math);
  // The shared checks of embedding and its backward: dtypes, shapes, overlaps, and the ids
  // in [0, V) (downloaded: an out-of-range index on the device would touch any memory).
  Status check_lookup(std::string_view op, const Tensor& table, const Tensor& ids, const Tensor& rows, StreamId stream);
  // True when `t` is a view into a live allocation of this device.
  bool is_device_tensor(const Tensor& t) const;

  std::shared_ptr<SynapseLibrary> lib_;
  const SynapseApi& api_;
  synDeviceId device_;
  std::uint32_t module_id_;
  int device_type_;
  MemoryTracker memory_;
  std::shared_ptr<Allocations> allocations_;
  cpu::CpuDevice host_math_;  // the cpu backend's math on staged host copies (host ops)
  std::vector<synStreamHandle> streams_;
  std::map<std::uint64_t, synEventHandle> events_;
  std::uint64_t next_event_ = 1;
  std::map<std::string, std::unique_ptr<Recipe>> recipes_;
  std::map<StreamId, std::shared_ptr<Storage>> scalar_storage_;        // per stream, made on first use
  std::vector<std::pair<StreamId, std::shared_ptr<Storage>>> staged_;  // see keep_until_synchronized
  std::shared_ptr<Storage> workspace_;
  std::vector<std::shared_ptr<void>> abandoned_;
  Stats stats_;
};

}  // namespace shardlab::runtime::device::hpu
