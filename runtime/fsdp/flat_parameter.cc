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
  const std::string& name = specs[static_cast<std::size_t>(local)].name;
  // Made on every unshard for every parameter: one checked view of the final shape rather
  // than a 1-D narrow and then a reshape (two tensors). Outside the buffer, or a shape
  // that does not hold p.numel elements: narrow's or reshape's error.
  if (buffer.defined() && p.flat_offset >= 0 && p.numel >= 0 && p.flat_offset <= buffer.numel() - p.numel) {
    Result<Tensor> v = Tensor::view_of(buffer.storage(), buffer.dtype(), p.shape, buffer.offset() + p.flat_offset, name);
    if (v.is_ok() && v->numel() == p.numel) return v;
  }
  SHARDLAB_ASSIGN_OR_RETURN(Tensor flat, buffer.narrow(p.flat_offset, p.numel, name));
  return flat.reshape(p.shape);
}

}  // namespace shardlab::runtime::fsdp
