// Mlp: the walking skeleton's model — Linear layers with an activation, then a linear
// classifier and softmax cross-entropy. Parameters are named like PyTorch's
// nn.Sequential of Linear layers ("layers.0.weight" [out, in], "layers.0.bias" [out],
// …, "head.weight", "head.bias"), and Linear computes x·Wᵀ + b.
//
// forward_backward runs one micro-batch: it adds grad_scale × ∂(sum of per-sample
// losses)/∂θ into the gradients ParamAccess provides (accumulating), and returns the
// sum of per-sample losses. Activations are allocated per call in the "activations"
// category and freed on return.
//
// Thread safety: const methods only; one instance may serve many ranks.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/core/rng.h"
#include "runtime/device/device.h"
#include "runtime/model/model.h"
#include "runtime/model/module.h"

namespace shardlab::runtime::model {

struct MlpConfig {
  std::int64_t input_dim = 16;
  std::int64_t hidden_dim = 32;
  std::int64_t num_classes = 4;
  int num_hidden_layers = 2;
  device::Activation activation = device::Activation::kGelu;
  // Bit i set: parameter i is frozen (requires_grad = false), as with LoRA on a frozen base.
  std::uint64_t frozen_mask = 0;
};

class Mlp final : public Model {
 public:
  explicit Mlp(MlpConfig config);

  const MlpConfig& config() const { return config_; }
  const std::vector<ParamSpec>& params() const override { return specs_; }
  int num_layers() const override { return config_.num_hidden_layers + 1; }
  std::vector<std::string> default_wrap_classes() const override { return {"Linear"}; }

  // Fills params (views in spec order) like torch.nn.Linear's default init:
  // U(-1/√fan_in, 1/√fan_in) for weights and biases, from Rng(seed) split per parameter.
  Status init_params(device::Device& dev, const std::vector<Tensor>& params, std::uint64_t seed) const override;

  // x [B, input_dim] fp32, labels [B] int64. Returns the sum of per-sample losses.
  Result<double> forward_backward(device::Device& dev, ParamAccess& access, const Tensor& x, const Tensor& labels,
                                  float grad_scale) const;

  // Model: batches hold "x" and "labels" (every row is a target).
  Result<std::vector<std::int64_t>> count_targets(const Batch& batch) const override;
  Result<Batch> synthetic_batch(device::Device& dev, std::uint64_t seed, std::int64_t step, std::int64_t first_row,
                                std::int64_t rows) const override;
  Result<std::vector<double>> forward_backward(device::Device& dev, ParamAccess& access, const Batch& batch,
                                               const std::vector<float>& term_scale,
                                               const ForwardContext& ctx) const override;

 private:
  MlpConfig config_;
  std::vector<ParamSpec> specs_;
};

// Seeded synthetic classification data: row i of step s is a pure function of
// (seed, step, i), so any rank can make its own rows of the global batch. Labels come
// from a fixed random "teacher" linear map, so the task is learnable.
Status synthetic_rows(device::Device& dev, const MlpConfig& config, std::uint64_t seed, std::int64_t step,
                      std::int64_t first_row, const Tensor& x, const Tensor& labels);

}  // namespace shardlab::runtime::model
