#include "runtime/core/tensor.h"

#include <algorithm>
#include <cstdlib>
#include <limits>

namespace shardlab {

std::string shape_to_string(const Shape& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

Result<std::int64_t> checked_numel(const Shape& shape) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) {
    if (d < 0) return Status::invalid_argument("shape " + shape_to_string(shape) + " has a negative dimension");
    if (__builtin_mul_overflow(n, d, &n)) {
      return Status::invalid_argument("shape " + shape_to_string(shape) + " has more than 2^63 elements");
    }
  }
  return n;
}

Storage::Storage(std::byte* host_data, std::uint64_t device_address, std::int64_t nbytes, MemoryCategory category,
                 std::string label, std::string device_name, Release release)
    : host_data_(host_data),
      device_address_(device_address),
      nbytes_(nbytes),
      category_(category),
      label_(std::move(label)),
      device_name_(std::move(device_name)),
      release_(std::move(release)) {}

std::shared_ptr<Storage> Storage::make_deferred(std::int64_t nbytes, MemoryCategory category, std::string label,
                                                std::string device_name, Release release) {
  auto s = std::make_shared<Storage>(nullptr, 0, nbytes, category, std::move(label), std::move(device_name),
                                     std::move(release));
  s->deferred_ = true;
  return s;
}

std::byte* Storage::host_data() const {
  if (!deferred_) return host_data_;
  std::call_once(materialize_once_, [this] {
    // calloc: zeroed, and for large sizes fresh pages that cost no memory until written.
    void* p = std::calloc(static_cast<std::size_t>(std::max<std::int64_t>(nbytes_, 1)), 1);
    SHARDLAB_CHECK(p != nullptr);
    deferred_bytes_.store(static_cast<std::byte*>(p), std::memory_order_release);
  });
  return deferred_bytes_.load(std::memory_order_acquire);
}

bool Storage::materialized() const { return deferred_bytes_.load(std::memory_order_acquire) != nullptr; }

Storage::~Storage() {
  if (release_) release_(*this);
  std::free(deferred_bytes_.load(std::memory_order_relaxed));
}

bool view_in_bounds(std::int64_t offset, std::int64_t numel, std::size_t element_bytes, std::int64_t storage_bytes) {
  const auto eb = static_cast<std::int64_t>(element_bytes);
  std::int64_t begin_bytes, count_bytes, end_bytes;
  return offset >= 0 && numel >= 0 && !__builtin_mul_overflow(offset, eb, &begin_bytes) &&
         !__builtin_mul_overflow(numel, eb, &count_bytes) &&
         !__builtin_add_overflow(begin_bytes, count_bytes, &end_bytes) && end_bytes <= storage_bytes;
}

Status check_view_bounds(const std::string& what, std::int64_t offset, std::int64_t numel, std::size_t element_bytes,
                         std::int64_t storage_bytes) {
  const auto eb = static_cast<std::int64_t>(element_bytes);
  const std::string where = "view " + what + ": offset " + std::to_string(offset) + " (unsigned " +
                            std::to_string(static_cast<std::uint64_t>(offset)) + "), extent " + std::to_string(numel) +
                            " elements of " + std::to_string(element_bytes) + " bytes, storage " +
                            std::to_string(storage_bytes) + " bytes";
  if (offset < 0) return Status::invalid_argument(where + ": the offset is negative (a wrapped or overflowed offset?)");
  if (numel < 0) return Status::invalid_argument(where + ": the extent is negative");
  std::int64_t begin_bytes, count_bytes, end_bytes;
  if (__builtin_mul_overflow(offset, eb, &begin_bytes) || __builtin_mul_overflow(numel, eb, &count_bytes) ||
      __builtin_add_overflow(begin_bytes, count_bytes, &end_bytes)) {
    return Status::invalid_argument(where + ": offset + extent overflows 64 bits when multiplied by the element size");
  }
  if (end_bytes > storage_bytes) {
    return Status::invalid_argument(where + ": the view ends at byte " + std::to_string(end_bytes) +
                                    ", past the end of its storage; expected offset + extent <= " +
                                    std::to_string(storage_bytes / eb) + " elements");
  }
  return Status::ok();
}

Tensor Tensor::host_floats(float* data, std::int64_t count, MemoryCategory category, std::string name,
                           std::string device_name, std::shared_ptr<const void> keep_alive) {
  Storage::Release release;
  if (keep_alive) release = [keep_alive](Storage&) {};
  auto storage =
      std::make_shared<Storage>(reinterpret_cast<std::byte*>(data), 0, count * static_cast<std::int64_t>(sizeof(float)),
                                category, name, std::move(device_name), std::move(release));
  return *view_of(std::move(storage), DType::kF32, {count}, 0, std::move(name));  // whole storage: in bounds
}

Result<Tensor> Tensor::view_of(std::shared_ptr<Storage> storage, DType dtype, Shape shape, std::int64_t offset,
                               std::string name) {
  if (!storage) return Status::invalid_argument("view '" + name + "': no storage");
  auto numel_or = checked_numel(shape);
  if (!numel_or.is_ok()) return numel_or.status().with_context("view '" + name + "'");
  const std::int64_t numel = *numel_or;
  // The description is built only for the error: views are made on every op (hot path).
  if (!view_in_bounds(offset, numel, element_size(dtype), storage->nbytes())) {
    return check_view_bounds("'" + name + "' " + std::string(dtype_name(dtype)) + " " + shape_to_string(shape) +
                                 " in '" + storage->label() + "'",
                             offset, numel, element_size(dtype), storage->nbytes());
  }
  Tensor t;
  t.storage_ = std::move(storage);
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.numel_ = numel;
  t.offset_ = offset;
  t.name_ = std::move(name);
  return t;
}

Result<Tensor> Tensor::narrow(std::int64_t begin, std::int64_t count, std::string name) const {
  if (name.empty()) name = name_ + "[" + std::to_string(begin) + ":+" + std::to_string(count) + "]";
  return narrow_range(begin, count, Shape{count}, std::move(name));
}

Result<Tensor> Tensor::narrow(std::int64_t begin, Shape shape, std::string name) const {
  auto count = checked_numel(shape);
  if (!count.is_ok()) return count.status().with_context("view '" + name + "'");
  return narrow_range(begin, *count, std::move(shape), std::move(name));
}

Result<Tensor> Tensor::narrow_range(std::int64_t begin, std::int64_t count, Shape shape, std::string name) const {
  if (!defined()) return Status::invalid_argument("narrow '" + name + "' of an undefined tensor");
  std::int64_t end;
  if (begin < 0 || count < 0 || __builtin_add_overflow(begin, count, &end) || end > numel_) {
    return Status::invalid_argument("view '" + name + "': range [" + std::to_string(begin) + ", " +
                                    std::to_string(begin) + " + " + std::to_string(count) + ") is outside '" + name_ +
                                    "' of " + std::to_string(numel_) + " elements");
  }
  return view_of(storage_, dtype_, std::move(shape), offset_ + begin, std::move(name));
}

Result<Tensor> Tensor::reshape(Shape shape) const {
  SHARDLAB_ASSIGN_OR_RETURN(std::int64_t n, checked_numel(shape));
  if (n != numel_) {
    return Status::invalid_argument("reshape '" + name_ + "' from " + shape_to_string(shape_) + " to " +
                                    shape_to_string(shape) + ": element counts differ (" + std::to_string(numel_) +
                                    " vs " + std::to_string(n) + ")");
  }
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::with_unchecked_byte_offset(std::uint64_t byte_offset) const {
  const auto es = static_cast<std::int64_t>(element_size(dtype_));
  const auto signed_offset = static_cast<std::int64_t>(byte_offset);
  SHARDLAB_CHECK_EQ(signed_offset % es, 0);
  Tensor t = *this;
  t.offset_ = signed_offset / es;
  return t;
}

std::int64_t Tensor::dim(int i) const {
  const int n = ndim();
  if (i < 0) i += n;
  SHARDLAB_CHECK(i >= 0 && i < n);
  return shape_[static_cast<std::size_t>(i)];
}

std::byte* Tensor::bytes() const {
  SHARDLAB_CHECK(storage_ != nullptr);
  std::byte* host = storage_->host_data();
  if (host == nullptr) {
    detail::check_failed(__FILE__, __LINE__,
                         "host access to " + describe() + " on " + storage_->device_name() +
                             ": the storage has no host bytes (a phantom tensor, or device memory); read it back "
                             "with a copy to a host-visible tensor");
  }
  return host + byte_offset();
}

bool Tensor::same_view(const Tensor& o) const {
  return storage_ == o.storage_ && byte_offset() == o.byte_offset() && nbytes() == o.nbytes();
}

bool Tensor::overlaps(const Tensor& o) const {
  if (storage_ != o.storage_ || !storage_) return false;
  const std::int64_t a0 = byte_offset(), a1 = a0 + nbytes();
  const std::int64_t b0 = o.byte_offset(), b1 = b0 + o.nbytes();
  return a0 < b1 && b0 < a1 && nbytes() > 0 && o.nbytes() > 0;
}

std::string Tensor::describe() const {
  if (!defined()) return "undefined tensor";
  return "'" + name_ + "' " + std::string(dtype_name(dtype_)) + " " + shape_to_string(shape_) + " @ offset " +
         std::to_string(offset_) + " in '" + storage_->label() + "' (" + format_bytes(storage_->nbytes()) + ")";
}

}  // namespace shardlab
