#include "runtime/device/device.h"

#include <charconv>

namespace shardlab::runtime::device {

std::string DeviceId::to_string() const { return has_index() ? type + ":" + std::to_string(index) : type; }

Result<DeviceId> DeviceId::parse(std::string_view text) {
  const auto bad = [&](const std::string& why) {
    return Status::invalid_argument("device '" + std::string(text) + "': " + why +
                                    "; expected TYPE or TYPE:INDEX, e.g. 'hpu', 'hpu:0', 'cpu', 'sim:3'");
  };
  const auto colon = text.find(':');
  DeviceId id;
  id.type = std::string(text.substr(0, colon));
  if (id.type.empty()) return bad("the type is empty");
  for (char ch : id.type) {
    if (!(ch >= 'a' && ch <= 'z')) return bad("the type must be lower-case letters");
  }
  if (colon == std::string_view::npos) return id;
  const std::string_view idx = text.substr(colon + 1);
  int value = 0;
  const auto [ptr, ec] = std::from_chars(idx.data(), idx.data() + idx.size(), value);
  if (idx.empty() || ec != std::errc() || ptr != idx.data() + idx.size() || value < 0) {
    return bad("the index '" + std::string(idx) + "' is not a non-negative integer");
  }
  id.index = value;
  return id;
}

Status check_launch_extent(std::string_view where, const std::string& tensor, const std::string& storage_label,
                           std::int64_t byte_offset, std::int64_t nbytes, std::int64_t storage_bytes) {
  std::int64_t end = 0;
  const bool wrapped = byte_offset < 0 || nbytes < 0 || __builtin_add_overflow(byte_offset, nbytes, &end);
  if (!wrapped && end <= storage_bytes) return Status::ok();
  const std::string what = "launch of " + std::string(where) + ": tensor '" + tensor + "' at byte offset " +
                           std::to_string(byte_offset) + " (unsigned " +
                           std::to_string(static_cast<std::uint64_t>(byte_offset)) + "), extent " +
                           std::to_string(nbytes) + " bytes, in storage '" + storage_label + "' of " +
                           std::to_string(storage_bytes) + " bytes";
  if (wrapped) {
    return Status::data_loss(what + ": the offset or extent is negative or overflows (a wrapped offset?); "
                                    "nothing was launched");
  }
  return Status::data_loss(what + ": the view ends at byte " + std::to_string(end) +
                           ", past the end of its storage; nothing was launched");
}

Status check_launch_view(std::string_view where, const Tensor& t) {
  if (!t.defined()) return Status::ok();
  // The common case without building a message: in bounds.
  if (view_in_bounds(t.offset(), t.numel(), element_size(t.dtype()), t.storage()->nbytes())) return Status::ok();
  return check_launch_extent(where, t.name(), t.storage()->label(), t.byte_offset(), t.nbytes(), t.storage()->nbytes());
}

Result<Tensor> Device::empty(const Shape& shape, DType dtype, MemoryCategory category, const std::string& name) {
  SHARDLAB_ASSIGN_OR_RETURN(std::int64_t numel, checked_numel(shape));
  std::int64_t nbytes;
  if (__builtin_mul_overflow(numel, static_cast<std::int64_t>(element_size(dtype)), &nbytes)) {
    return Status::invalid_argument("tensor '" + name + "' " + shape_to_string(shape) + " is larger than 2^63 bytes");
  }
  SHARDLAB_ASSIGN_OR_RETURN(std::shared_ptr<Storage> storage, allocate(nbytes, category, name));
  return Tensor::view_of(std::move(storage), dtype, shape, 0, name);
}

Result<Tensor> Device::zeros(const Shape& shape, DType dtype, MemoryCategory category, const std::string& name) {
  SHARDLAB_ASSIGN_OR_RETURN(Tensor t, empty(shape, dtype, category, name));
  SHARDLAB_RETURN_IF_ERROR(fill(t, 0.0f));
  return t;
}

}  // namespace shardlab::runtime::device
