#include "runtime/model/model.h"

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

}  // namespace shardlab::runtime::model
