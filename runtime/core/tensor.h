// Storage (bytes owned by a device) and Tensor (a bounds-checked view into one).
//
// A Tensor is (storage, dtype, shape, element offset), always contiguous, row-major.
// Every view creation is bounds-checked in every build type: a negative offset, an
// extent past the end of the storage, or an offset/extent whose byte size overflows
// 64 bits is an INVALID_ARGUMENT naming the tensor, the offset, the extent and the
// storage size. This is the class of bug that produced "offset 13835057943613014016"
// on Gaudi (a wrapped negative offset); here it cannot reach a kernel.
//
// Storage lifetime: a Storage is shared by its views (shared_ptr); it returns its
// bytes to its device's MemoryTracker when the last view dies. The device that made
// it must outlive it. A storage without host bytes (device memory, a phantom) is
// is_phantom() to its views: data() on it is a CHECK failure naming the tensor.
//
// NOTE [Phantom storage]
// The simulator's timing mode (sim/timing/op_graph.h) runs the real runtime with
// phantom tensors: shape, dtype and a charged size, no data. Its storages are *deferred*
// (Storage::make_deferred): no host bytes exist when they are made, and the device's
// ops in timing mode never touch them, so an unsharded layer, an activation or a
// communication buffer costs nothing on the host however large. The runtime's own
// host-side code still runs unchanged in timing mode — it writes synthetic batches and
// position ids, draws dropout masks, steps the optimizer over its shard, reads a loss —
// and a deferred storage gets zero-filled host bytes the first time a view's data() or
// bytes() asks (calloc: pages never written stay unbacked), counted by materialized().
// Values read back from a deferred storage are meaningless (ops skipped their math);
// code whose *control flow* depends on such a value is timing-unsafe (see
// runtime/train/fsdp_train.h for the trainer's reads, each made phantom-safe). A deferred
// storage is host-visible, so Tensor::is_phantom() is false for it; Tensor::is_deferred()
// tells the two apart.
//
// Thread safety: Tensor is a value. Concurrent reads of the same bytes are fine;
// writes need external ordering (streams/events or Work::wait).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/core/check.h"
#include "runtime/core/dtype.h"
#include "runtime/core/memory.h"
#include "runtime/core/status.h"

namespace shardlab {

using Shape = std::vector<std::int64_t>;
std::string shape_to_string(const Shape& shape);  // "[7, 3]"
// Product of the dims; INVALID_ARGUMENT for a negative dim or a product beyond int64.
Result<std::int64_t> checked_numel(const Shape& shape);

class Storage {
 public:
  using Release = std::function<void(Storage&)>;
  // host_data may be null (phantom or non-host memory); device_address is backend-defined.
  Storage(std::byte* host_data, std::uint64_t device_address, std::int64_t nbytes, MemoryCategory category,
          std::string label, std::string device_name, Release release);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  // A deferred storage (NOTE [Phantom storage]): host bytes only once host_data() is asked.
  static std::shared_ptr<Storage> make_deferred(std::int64_t nbytes, MemoryCategory category, std::string label,
                                                std::string device_name, Release release);

  std::int64_t nbytes() const { return nbytes_; }
  // Host bytes, or null when the storage has none; a deferred storage makes them now
  // (zero-filled; thread-safe).
  std::byte* host_data() const;
  // True for storages with host bytes or deferred ones (host_data() is never null then).
  bool host_visible() const { return host_data_ != nullptr || deferred_; }
  bool deferred() const { return deferred_; }
  // True once a deferred storage's bytes were asked for (false for other storages).
  bool materialized() const;
  std::uint64_t device_address() const { return device_address_; }
  MemoryCategory category() const { return category_; }
  const std::string& label() const { return label_; }
  const std::string& device_name() const { return device_name_; }

 private:
  std::byte* host_data_;
  std::uint64_t device_address_;
  std::int64_t nbytes_;
  MemoryCategory category_;
  std::string label_;
  std::string device_name_;
  Release release_;
  bool deferred_ = false;
  mutable std::once_flag materialize_once_;
  mutable std::atomic<std::byte*> deferred_bytes_{nullptr};
};

// Checks that [offset, offset + numel) elements of `element_bytes` each lie inside a
// storage of `storage_bytes` bytes, without overflowing. The error names `what`.
// view_in_bounds is the same test without the error (no strings: cheap on hot paths;
// check_view_bounds builds its message first and is kept independent of it, tests compare them).
bool view_in_bounds(std::int64_t offset, std::int64_t numel, std::size_t element_bytes, std::int64_t storage_bytes);
Status check_view_bounds(const std::string& what, std::int64_t offset, std::int64_t numel, std::size_t element_bytes,
                         std::int64_t storage_bytes);

template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::kF32;
};
template <>
struct DTypeOf<std::int64_t> {
  static constexpr DType value = DType::kI64;
};
template <>
struct DTypeOf<std::uint16_t> {
  static constexpr DType value = DType::kBF16;
};  // or kF16

class Tensor {
 public:
  Tensor() = default;  // undefined (no storage)

  // A view of `shape` starting `offset` elements into `storage`, bounds-checked.
  static Result<Tensor> view_of(std::shared_ptr<Storage> storage, DType dtype, Shape shape, std::int64_t offset,
                                std::string name);

  // A 1-D fp32 view of `count` floats of host memory the tensor does not own (a caller's
  // buffer, e.g. a std::vector): `keep_alive` (may be null) is held by the storage, so
  // the memory must otherwise outlive every view of it. For backends whose ops take host
  // operands (Device::host_addressable) and host-side I/O.
  static Tensor host_floats(float* data, std::int64_t count, MemoryCategory category, std::string name,
                            std::string device_name, std::shared_ptr<const void> keep_alive = nullptr);

  // A 1-D view of [begin, begin + count) elements of this tensor, checked against this
  // tensor's own extent (not just the storage).
  Result<Tensor> narrow(std::int64_t begin, std::int64_t count, std::string name = "") const;
  // The same range, numel(shape) elements from `begin`, viewed as `shape`: one checked view
  // where narrow and then reshape make two (FSDP's parameter views, made at every unshard).
  Result<Tensor> narrow(std::int64_t begin, Shape shape, std::string name) const;
  // Same elements, new shape (numel must match).
  Result<Tensor> reshape(Shape shape) const;
  // Fault injection only (sim::FaultKind::kViewOffset, the Gaudi1 seed bug): this view with
  // its byte offset replaced by `byte_offset` (read as signed; a multiple of the element
  // size), unchecked — the one way to make a view that breaks the bounds invariant every
  // other constructor keeps. Nothing may read its bytes: every backend's launch check
  // refuses it (NOTE [Launch check] in runtime/device/device.h).
  Tensor with_unchecked_byte_offset(std::uint64_t byte_offset) const;

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  std::int64_t dim(int i) const;  // negative i counts from the end
  int ndim() const { return static_cast<int>(shape_.size()); }
  std::int64_t numel() const { return numel_; }
  std::int64_t nbytes() const { return numel_ * static_cast<std::int64_t>(element_size(dtype_)); }
  std::int64_t offset() const { return offset_; }  // in elements from the storage start
  std::int64_t byte_offset() const { return offset_ * static_cast<std::int64_t>(element_size(dtype_)); }
  const std::string& name() const { return name_; }
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  // No host bytes can be had (data() would fail). False for deferred storages.
  bool is_phantom() const { return storage_ && !storage_->host_visible(); }
  // A timing-mode phantom (NOTE [Phantom storage]).
  bool is_deferred() const { return storage_ && storage_->deferred(); }

  // Host pointer to the first element. CHECKs that T matches the dtype and that the
  // storage has host bytes (a deferred storage makes them now).
  template <typename T>
  T* data() const {
    SHARDLAB_CHECK(element_size(dtype_) == sizeof(T));
    SHARDLAB_CHECK(dtype_ == DTypeOf<T>::value || (sizeof(T) == 2 && dtype_ == DType::kF16));
    return reinterpret_cast<T*>(bytes());
  }
  std::byte* bytes() const;

  // True when both views cover exactly the same bytes of the same storage.
  bool same_view(const Tensor& other) const;
  // True when the byte ranges of the two views intersect.
  bool overlaps(const Tensor& other) const;

  std::string describe() const;  // "'w1' fp32 [4, 8] @ offset 0 in 'params' (1.00 KiB)"

 private:
  // narrow's checks: [begin, begin + count) within this tensor; then the view, as `shape`.
  Result<Tensor> narrow_range(std::int64_t begin, std::int64_t count, Shape shape, std::string name) const;

  std::shared_ptr<Storage> storage_;
  DType dtype_ = DType::kF32;
  Shape shape_;
  std::int64_t numel_ = 0;
  std::int64_t offset_ = 0;
  std::string name_;
};

}  // namespace shardlab
