#include "runtime/model/model.h"

#include <algorithm>

namespace shardlab::runtime::model {

Result<Tensor> Batch::get(const std::string& name) const {
  const auto it = tensors.find(name);
  if (it == tensors.end()) {
    std::string have;
    for (const auto& [k, v] : tensors) have += (have.empty() ? "" : ", ") + k;
    return Status::invalid_argument("batch has no tensor '" + name + "' (it has: " + (have.empty() ? "none" : have) + ")");
  }
  return it->second;
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
  }
  return out;
}

}  // namespace shardlab::runtime::model
