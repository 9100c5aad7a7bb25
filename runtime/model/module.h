// How a model reaches its parameters and gradients during forward/backward.
//
// A model declares its parameters (ParamSpec, in registration order) and never owns
// their storage: a ParamAccess hands out views when the model needs them, and is told
// when each layer's forward and backward begin and end. Data parallelism hands out views
// of one flat buffer; FSDP (runtime/fsdp) unshards before a unit's forward/backward and
// reshards after — the model code is the same for both.
//
// Thread safety: used by one rank's thread.
#pragma once

#include <string>
#include <vector>

#include "runtime/core/status.h"
#include "runtime/core/tensor.h"

namespace shardlab::runtime::model {

struct ParamSpec {
  std::string name;  // Hugging Face-style dotted name, e.g. "layers.0.weight"
  Shape shape;
  bool requires_grad = true;
  int layer = 0;             // which layer (module) owns it, in forward order
  std::string module_class;  // the owning module's class, for the transformer-layer wrap policy ("Linear", "BertLayer")
};

class ParamAccess {
 public:
  virtual ~ParamAccess() = default;
  // The value of parameter `index` (valid until the matching post hook).
  virtual Result<Tensor> param(int index) = 0;
  // Where the gradient of parameter `index` accumulates (fp32, same numel).
  virtual Result<Tensor> grad(int index) = 0;
  virtual Status pre_forward(int /*layer*/) { return Status::ok(); }
  virtual Status post_forward(int /*layer*/) { return Status::ok(); }
  virtual Status pre_backward(int /*layer*/) { return Status::ok(); }
  virtual Status post_backward(int /*layer*/) { return Status::ok(); }
};

// Total elements of all specs.
std::int64_t total_numel(const std::vector<ParamSpec>& specs);

// Parameters and gradients as shaped views of two flat fp32 buffers in spec order (the
// unsharded case: the oracle, tests, initialization). No hooks.
class FlatParamAccess final : public ParamAccess {
 public:
  FlatParamAccess(const std::vector<ParamSpec>& specs, const Tensor& params, const Tensor& grads);
  Result<Tensor> param(int i) override { return params_[static_cast<std::size_t>(i)]; }
  Result<Tensor> grad(int i) override { return grads_[static_cast<std::size_t>(i)]; }
  const std::vector<Tensor>& params() const { return params_; }
  const std::vector<Tensor>& grads() const { return grads_; }

 private:
  std::vector<Tensor> params_, grads_;
};

// A module buffer: non-parameter state such as BatchNorm's running statistics or BERT's
// position ids. Unlike parameters, buffers are never sharded: FSDP keeps the whole tensor
// on every rank, casts floating ones to FsdpOptions::buffer_dtype, and state dicts save
// them in `dtype`, the dtype the model declares (fp32, bf16 or int64).
struct BufferSpec {
  std::string name;  // Hugging Face-style dotted name, e.g. "embeddings.position_ids"
  Shape shape;
  DType dtype = DType::kF32;
  int layer = 0;  // which layer (module) owns it, in forward order
};

}  // namespace shardlab::runtime::model
