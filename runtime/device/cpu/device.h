// CpuDevice: the host backend of the Device seam — host memory, Eigen math, in-order
// execution (every op completes before it returns; streams and events are bookkeeping).
//
// It is also the numerics engine of the simulated device (sim/models/device/device.h), which wraps
// it and charges each op's cost to a virtual clock.
//
// Thread safety: as for Device (one owning thread; the MemoryTracker is thread-safe).
#pragma once

#include <atomic>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "runtime/device/device.h"

namespace shardlab::runtime::device::cpu {

// The cache sizes Eigen's GEMM blocking is computed from in every process that makes a
// CpuDevice (NOTE [Pinned GEMM blocking] in device.cc): Eigen products' fp32 results do
// not depend on the host's caches. The backend's own GEMM is gemm.h's. Idempotent and thread-safe; the CpuDevice
// constructor calls it.
inline constexpr std::ptrdiff_t kPinnedL1Bytes = 48 << 10, kPinnedL2Bytes = 2 << 20, kPinnedL3Bytes = 32 << 20;
void pin_eigen_blocking();

class CpuDevice final : public Device {
 public:
  // capacity_bytes <= 0: unlimited (still tracked).
  explicit CpuDevice(DeviceId id = {"cpu", DeviceId::kNoIndex}, std::int64_t capacity_bytes = 0);
  ~CpuDevice() override;
  CpuDevice(const CpuDevice&) = delete;
  CpuDevice& operator=(const CpuDevice&) = delete;

  DeviceId id() const override { return id_; }
  bool host_addressable() const override { return true; }
  MemoryTracker& memory() override { return memory_; }

  Result<std::shared_ptr<Storage>> allocate(std::int64_t nbytes, MemoryCategory category,
                                            std::string_view label) override;
  // The same, but the memory tracker is charged `charged_bytes` (<= nbytes) for it: a
  // simulated device that stands for one holding the tensor in fewer bytes (NOTE
  // [Emulated low precision] in sim/models/device/device.h).
  Result<std::shared_ptr<Storage>> allocate_charging(std::int64_t nbytes, std::int64_t charged_bytes,
                                                     MemoryCategory category, std::string_view label);

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
  Status dropout_mask(const Tensor& mask, float p, const Rng& base, std::int64_t first_row, std::uint64_t site,
                      StreamId stream) override;
  Status optimizer_step(const OptimizerUpdate& update, const Tensor& param, const Tensor& grad, const Tensor& state0,
                        const Tensor& state1, StreamId stream) override;

 private:
  Status check_stream(std::string_view op, StreamId stream) const;

 public:
  // NOTE [Host block cache]: freed blocks are kept for reuse (like PyTorch's caching
  // allocator): FSDP frees and re-allocates the same buffers every iteration, a BERT step
  // frees its activations in backward while it allocates their gradients, and fresh pages
  // cost a page fault each (plus an munmap/mmap pair for glibc's large blocks). Requests
  // are rounded up to size classes (the alignment below 1 MiB; above, eight classes per
  // power of two, so at most 12.5% more than asked), and a block is reused for its class
  // only. The cache never makes the device hold much more than its peak: cached + live
  // bytes stay within max(9/8 of the peak of live bytes, live + kMinLimitBytes) — the 1/8
  // (the size classes' own rounding) lets a repeating step find a block of every class it
  // needs instead of returning one to the system and faulting its pages in again each
  // step. Accounting (MemoryTracker) counts the requested bytes of live storages only.
  // Thread-safe: storages die on any thread.
  static std::size_t size_class(std::size_t bytes);
  // Frees every cached block (torch.cuda.empty_cache); live storages are untouched.
  void release_cached_blocks();
  void empty_cache() override { release_cached_blocks(); }
  // Whether new blocks of 4 MiB and more ask for transparent huge pages (MADV_HUGEPAGE).
  // On by default: a training run reuses its blocks every step (NOTE [Host block cache]),
  // and 2 MiB pages keep the GEMM operands in the TLB. A process that runs one step
  // touches each block once: where first touching a huge page costs more than its 512
  // small pages (in VMs: 2 GiB first touched 2.8–5.2 s vs 0.7 s on this project's CI
  // VM), it should turn them off, which is PyTorch's CPU allocator's default
  // (C10_THP_MEM_ALLOC_ENABLE=0). Affects blocks allocated afterwards only.
  void set_huge_pages(bool on) { huge_pages_.store(on, std::memory_order_relaxed); }
  bool huge_pages() const { return huge_pages_.load(std::memory_order_relaxed); }
  std::size_t cached_bytes() const;

 private:
  struct BlockCache {
    static constexpr std::size_t kMinLimitBytes = std::size_t{256} << 20;
    mutable std::mutex mu;
    std::multimap<std::size_t, void*> blocks;
    std::size_t cached = 0;                // bytes in `blocks`
    std::size_t live = 0;                  // bytes of blocks handed out and not yet given back
    std::size_t peak_live = 0;             // the most `live` has been
    void* take(std::size_t size);          // a cached block of that size class, or null
    void note_new(std::size_t size);       // a fresh block of that class was handed out
    void give(void* p, std::size_t size);  // caches or frees
    void clear();
  };

  DeviceId id_;
  std::string id_name_;  // id_.to_string(), once: every allocation's storage carries it
  MemoryTracker memory_;
  std::shared_ptr<BlockCache> cache_;
  std::atomic<bool> huge_pages_{true};
  int num_streams_ = 1;
  std::uint64_t next_event_ = 1;
};

}  // namespace shardlab::runtime::device::cpu
