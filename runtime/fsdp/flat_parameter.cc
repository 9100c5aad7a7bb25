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
  // Made on every unshard for every parameter: one checked view of the final shape.
  SHARDLAB_ASSIGN_OR_RETURN(Tensor v,
                            buffer.narrow(p.flat_offset, p.shape, specs[static_cast<std::size_t>(local)].name));
  if (v.numel() != p.numel) {
    return Status::internal("FSDP layout: parameter '" + specs[static_cast<std::size_t>(local)].name + "' has shape " +
                            shape_to_string(p.shape) + " but " + std::to_string(p.numel) + " elements");
  }
  return v;
}

}  // namespace shardlab::runtime::fsdp
