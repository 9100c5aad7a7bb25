// Elementwise optimizers with PyTorch semantics, applied to a flat fp32 slice (a shard or
// the whole unsharded buffer). Because every update is elementwise, stepping shards
// gives bitwise the same parameters as stepping the unsharded model.
//
// SGD (torch.optim.SGD, dampening 0, nesterov off): g += wd·p; buf = g (first step) or
//   momentum·buf + g; p -= lr·buf (buf = g without momentum).
// AdamW (torch.optim.AdamW): p *= 1 - lr·wd; m = β1·m + (1-β1)·g; v = β2·v + (1-β2)·g²;
//   p -= (lr / (1-β1^t)) · m / (√v / √(1-β2^t) + eps).
// State tensors are allocated on the device in the "optimizer_state" category, and each step
// is one fused Device::optimizer_step on that device (so the simulator charges it).
// Thread safety: one instance per rank.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/device/device.h"

namespace shardlab::runtime::optim {

struct OptimizerConfig {
  using Kind = device::OptimizerKind;
  Kind kind = Kind::kSgd;
  float lr = 0.1f;
  float weight_decay = 0.0f;
  float momentum = 0.0f;                            // SGD
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;  // AdamW
};
Result<OptimizerConfig::Kind> parse_optimizer(std::string_view name);  // "sgd" | "adamw"
std::string_view optimizer_name(OptimizerConfig::Kind kind);           // "sgd", "adamw"

class Optimizer {
 public:
  // State for `numel` parameters (zeros) on `dev`, which must outlive the optimizer.
  static Result<Optimizer> create(device::Device& dev, const OptimizerConfig& config, std::int64_t numel,
                                  const std::string& label);

  // One step over param/grad (fp32, numel elements each). With a mask (numel bytes),
  // elements whose mask byte is 0 (frozen parameters, padding) are left untouched, state
  // included.
  Status step(const Tensor& param, const Tensor& grad, const std::vector<std::uint8_t>* mask = nullptr);

  std::int64_t steps() const { return step_; }
  void set_steps(std::int64_t steps) { step_ = steps; }
  // PyTorch's names of the state tensors: SGD "momentum_buffer"; AdamW "exp_avg", "exp_avg_sq".
  std::vector<std::string> state_names() const;
  const std::vector<Tensor>& state() const { return state_; }  // SGD: [momentum]; AdamW: [m, v]
  const OptimizerConfig& config() const { return config_; }

 private:
  device::Device* dev_ = nullptr;  // where the state lives and the update runs (not owned)
  OptimizerConfig config_;
  std::vector<Tensor> state_;
  std::int64_t step_ = 0;
};

}  // namespace shardlab::runtime::optim
