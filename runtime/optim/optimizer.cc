#include "runtime/optim/optimizer.h"

#include <cmath>

namespace shardlab::runtime::optim {

Result<OptimizerConfig::Kind> parse_optimizer(std::string_view name) {
  if (name == "sgd") return OptimizerConfig::Kind::kSgd;
  if (name == "adamw") return OptimizerConfig::Kind::kAdamW;
  return Status::invalid_argument("unknown optimizer '" + std::string(name) + "'; allowed: sgd, adamw");
}

Result<Optimizer> Optimizer::create(device::Device& dev, const OptimizerConfig& config, std::int64_t numel,
                                    const std::string& label) {
  Optimizer o;
  o.config_ = config;
  const int n_state = config.kind == OptimizerConfig::Kind::kAdamW ? 2 : (config.momentum != 0.0f ? 1 : 0);
  for (int i = 0; i < n_state; ++i) {
    SHARDLAB_ASSIGN_OR_RETURN(Tensor t, dev.zeros({numel}, DType::kF32, MemoryCategory::kOptimizerState,
                                                  label + (i == 0 ? ".exp_avg" : ".exp_avg_sq")));
    o.state_.push_back(std::move(t));
  }
  return o;
}

std::vector<std::string> Optimizer::state_names() const {
  if (config_.kind == OptimizerConfig::Kind::kAdamW) return {"exp_avg", "exp_avg_sq"};
  if (config_.momentum != 0.0f) return {"momentum_buffer"};
  return {};
}

Status Optimizer::step(const Tensor& param, const Tensor& grad, const std::vector<std::uint8_t>* mask) {
  if (param.numel() != grad.numel() || (!state_.empty() && state_[0].numel() != param.numel()) ||
      (mask && static_cast<std::int64_t>(mask->size()) != param.numel())) {
    return Status::invalid_argument("optimizer step: param, grad and state sizes differ (" +
                                    std::to_string(param.numel()) + ", " + std::to_string(grad.numel()) + ")");
  }
  ++step_;
  float* p = param.data<float>();
  const float* g = grad.data<float>();
  const std::int64_t n = param.numel();
  const OptimizerConfig& c = config_;
  if (c.kind == OptimizerConfig::Kind::kSgd) {
    float* buf = state_.empty() ? nullptr : state_[0].data<float>();
    for (std::int64_t i = 0; i < n; ++i) {
      if (mask && !(*mask)[static_cast<std::size_t>(i)]) continue;
      float d = g[i];
      if (c.weight_decay != 0.0f) d += c.weight_decay * p[i];
      if (buf) {
        buf[i] = step_ == 1 ? d : c.momentum * buf[i] + d;
        d = buf[i];
      }
      p[i] -= c.lr * d;
    }
    return Status::ok();
  }
  float* m = state_[0].data<float>();
  float* v = state_[1].data<float>();
  const double bc1 = 1.0 - std::pow(static_cast<double>(c.beta1), static_cast<double>(step_));
  const double bc2 = 1.0 - std::pow(static_cast<double>(c.beta2), static_cast<double>(step_));
  const float step_size = static_cast<float>(c.lr / bc1);
  const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  for (std::int64_t i = 0; i < n; ++i) {
    if (mask && !(*mask)[static_cast<std::size_t>(i)]) continue;
    p[i] *= 1.0f - c.lr * c.weight_decay;
    m[i] = c.beta1 * m[i] + (1.0f - c.beta1) * g[i];
    v[i] = c.beta2 * v[i] + (1.0f - c.beta2) * g[i] * g[i];
    const float denom = std::sqrt(v[i]) / bc2_sqrt + c.eps;
    p[i] -= step_size * m[i] / denom;
  }
  return Status::ok();
}

}  // namespace shardlab::runtime::optim
