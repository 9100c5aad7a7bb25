#include "runtime/fsdp/flat_parameter.h"

namespace shardlab::runtime::fsdp {

int FlatParameter::local_index(int model_param) const {
  for (std::size_t i = 0; i < param_indices.size(); ++i) {
    if (param_indices[i] == model_param) return static_cast<int>(i);
  }
  return -1;
}

Result<Tensor> FlatParameter::view(const Tensor& buffer, int local) const {
  const LayoutParam& p = layout.params()[static_cast<std::size_t>(local)];
  SHARDLAB_ASSIGN_OR_RETURN(Tensor flat, buffer.narrow(p.flat_offset, p.numel, specs[static_cast<std::size_t>(local)].name));
  return flat.reshape(p.shape);
}

}  // namespace shardlab::runtime::fsdp
