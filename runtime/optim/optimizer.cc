#include "runtime/optim/optimizer.h"

namespace shardlab::runtime::optim {

std::string_view optimizer_name(OptimizerConfig::Kind kind) {
  return kind == OptimizerConfig::Kind::kAdamW ? "adamw" : "sgd";
}

Result<OptimizerConfig::Kind> parse_optimizer(std::string_view name) {
  for (const auto kind : {OptimizerConfig::Kind::kSgd, OptimizerConfig::Kind::kAdamW}) {
    if (name == optimizer_name(kind)) return kind;
  }
  return Status::invalid_argument("unknown optimizer '" + std::string(name) + "'; allowed: sgd, adamw");
}

Result<Optimizer> Optimizer::create(device::Device& dev, const OptimizerConfig& config, std::int64_t numel,
                                    const std::string& label) {
  Optimizer o;
  o.dev_ = &dev;
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
  if (dev_ == nullptr)
    return Status::failed_precondition("optimizer step: the optimizer was not made by Optimizer::create");
  if (param.numel() != grad.numel() || (!state_.empty() && state_[0].numel() != param.numel()) ||
      (mask && static_cast<std::int64_t>(mask->size()) != param.numel())) {
    return Status::invalid_argument("optimizer step: param, grad and state sizes differ (" +
                                    std::to_string(param.numel()) + ", " + std::to_string(grad.numel()) + ")");
  }
  device::OptimizerUpdate u;
  u.kind = config_.kind;
  u.lr = config_.lr;
  u.weight_decay = config_.weight_decay;
  u.momentum = config_.momentum;
  u.beta1 = config_.beta1;
  u.beta2 = config_.beta2;
  u.eps = config_.eps;
  u.step = step_ + 1;
  // A mask becomes the runs of elements it keeps: the update runs on each run's views and
  // never touches the others (bitwise what a masked update leaves), and no mask has to
  // live on the device. Without a mask: one run over everything.
  const auto update = [&](std::int64_t begin, std::int64_t count) -> Status {
    const Tensor none;
    if (begin == 0 && count == param.numel()) {
      return dev_->optimizer_step(u, param, grad, state_.empty() ? none : state_[0],
                                  state_.size() > 1 ? state_[1] : none);
    }
    SHARDLAB_ASSIGN_OR_RETURN(Tensor p, param.narrow(begin, count, param.name()));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor g, grad.narrow(begin, count, grad.name()));
    Tensor s0, s1;
    if (!state_.empty()) {
      SHARDLAB_ASSIGN_OR_RETURN(s0, state_[0].narrow(begin, count, state_[0].name()));
    }
    if (state_.size() > 1) {
      SHARDLAB_ASSIGN_OR_RETURN(s1, state_[1].narrow(begin, count, state_[1].name()));
    }
    return dev_->optimizer_step(u, p, g, s0, s1);
  };
  if (mask == nullptr) {
    SHARDLAB_RETURN_IF_ERROR(update(0, param.numel()));
  } else {
    const std::int64_t n = param.numel();
    for (std::int64_t i = 0; i < n;) {
      if ((*mask)[static_cast<std::size_t>(i)] == 0) {
        ++i;
        continue;
      }
      std::int64_t end = i + 1;
      while (end < n && (*mask)[static_cast<std::size_t>(end)] != 0) ++end;
      SHARDLAB_RETURN_IF_ERROR(update(i, end - i));
      i = end;
    }
  }
  ++step_;
  return Status::ok();
}

}  // namespace shardlab::runtime::optim
