#include "runtime/model/model.h"

#include <algorithm>

namespace shardlab::runtime::model {

Result<Tensor> Batch::get(const std::string& name) const {
  const auto it = tensors.find(name);
  if (it == tensors.end()) {
    std::string have;
    for (const auto& [k, v] : tensors) have += (have.empty() ? "" : ", ") + k;
    return Status::invalid_argument("batch has no tensor '" + name + "' (it has: " + (have.empty() ? "none" : have) +
                                    ")");
  }
  return it->second;
}

Result<const std::vector<std::int64_t>*> Batch::ints(const std::string& name) const {
  SHARDLAB_RETURN_IF_ERROR(get(name).status());
  const auto it = host_ints.find(name);
  if (it == host_ints.end()) {
    return Status::invalid_argument("batch tensor '" + name +
                                    "' has no host copy of its values (make batches with Batch::put)");
  }
  return &it->second;
}

namespace {

template <typename T>
Status put_values(Batch& b, device::Device& dev, const std::string& name, const Shape& shape, const std::vector<T>& v) {
  SHARDLAB_ASSIGN_OR_RETURN(Tensor t, dev.empty(shape, DTypeOf<T>::value, MemoryCategory::kActivations, name));
  if (static_cast<std::int64_t>(v.size()) != t.numel()) {
    return Status::invalid_argument("batch tensor '" + name + "' " + shape_to_string(shape) + " needs " +
                                    std::to_string(t.numel()) + " values, got " + std::to_string(v.size()));
  }
  SHARDLAB_RETURN_IF_ERROR(device::values_from_host(dev, v, t));
  b.tensors[name] = t;
  return Status::ok();
}

}  // namespace

Status Batch::put(device::Device& dev, const std::string& name, const Shape& shape, std::vector<std::int64_t> values) {
  SHARDLAB_RETURN_IF_ERROR(put_values(*this, dev, name, shape, values));
  host_ints[name] = std::move(values);
  return Status::ok();
}

Status Batch::put(device::Device& dev, const std::string& name, const Shape& shape, const std::vector<float>& values) {
  host_ints.erase(name);
  return put_values(*this, dev, name, shape, values);
}

Result<Batch> slice_batch(const Batch& batch, device::Device& dev, std::int64_t first, std::int64_t rows) {
  if (batch.rows < 1 || rows < 0 || first < 0) {
    return Status::invalid_argument("slice_batch: cannot take " + std::to_string(rows) + " rows from row " +
                                    std::to_string(first) + " of a batch of " + std::to_string(batch.rows) + " rows");
  }
  Batch out;
  out.rows = rows;
  for (const auto& [name, t] : batch.tensors) {
    const std::int64_t per_row = t.numel() / batch.rows;
    Shape shape = t.shape();
    shape[0] = rows;
    SHARDLAB_ASSIGN_OR_RETURN(Tensor dst, dev.empty(shape, t.dtype(), MemoryCategory::kActivations, name));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor flat, dst.reshape({rows * per_row}));
    // Contiguous runs of source rows up to the batch's end, then from its start again.
    for (std::int64_t done = 0; done < rows;) {
      const std::int64_t from = (first + done) % batch.rows;
      const std::int64_t n = std::min(rows - done, batch.rows - from);
      SHARDLAB_ASSIGN_OR_RETURN(Tensor src, t.narrow(from * per_row, n * per_row));
      SHARDLAB_ASSIGN_OR_RETURN(Tensor part, flat.narrow(done * per_row, n * per_row));
      SHARDLAB_RETURN_IF_ERROR(dev.copy(src, part));
      done += n;
    }
    out.tensors[name] = dst;
    if (auto h = batch.host_ints.find(name); h != batch.host_ints.end()) {
      std::vector<std::int64_t>& v = out.host_ints[name];
      v.reserve(static_cast<std::size_t>(rows * per_row));
      for (std::int64_t r = 0; r < rows; ++r) {
        const auto from = h->second.begin() + ((first + r) % batch.rows) * per_row;
        v.insert(v.end(), from, from + per_row);
      }
    }
  }
  return out;
}

}  // namespace shardlab::runtime::model
