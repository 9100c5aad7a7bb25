#include "runtime/model/mlp.h"

#include <cmath>

namespace shardlab::runtime::model {

std::int64_t total_numel(const std::vector<ParamSpec>& specs) {
  std::int64_t n = 0;
  for (const auto& s : specs) n += *checked_numel(s.shape);
  return n;
}

FlatParamAccess::FlatParamAccess(const std::vector<ParamSpec>& specs, const Tensor& params, const Tensor& grads) {
  std::int64_t off = 0;
  for (const auto& s : specs) {
    const std::int64_t n = *checked_numel(s.shape);
    params_.push_back(*params.narrow(off, n, s.name)->reshape(s.shape));
    grads_.push_back(*grads.narrow(off, n, s.name + ".grad")->reshape(s.shape));
    off += n;
  }
}

Mlp::Mlp(MlpConfig config) : config_(config) {
  std::int64_t in = config_.input_dim;
  for (int l = 0; l < config_.num_hidden_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    specs_.push_back({p + "weight", {config_.hidden_dim, in}, true, l, "Linear"});
    specs_.push_back({p + "bias", {config_.hidden_dim}, true, l, "Linear"});
    in = config_.hidden_dim;
  }
  specs_.push_back({"head.weight", {config_.num_classes, in}, true, config_.num_hidden_layers, "ClassifierHead"});
  specs_.push_back({"head.bias", {config_.num_classes}, true, config_.num_hidden_layers, "ClassifierHead"});
  for (std::size_t i = 0; i < specs_.size(); ++i)
    specs_[i].requires_grad = i >= 64 || !((config_.frozen_mask >> i) & 1u);
}

Status Mlp::init_params(device::Device& dev, const std::vector<Tensor>& params, std::uint64_t seed) const {
  if (params.size() != specs_.size()) {
    return Status::invalid_argument("init_params: got " + std::to_string(params.size()) + " tensors for " +
                                    std::to_string(specs_.size()) + " parameters");
  }
  const Rng root(seed, /*stream=*/0x4d4c50);  // "MLP"
  for (std::size_t i = 0; i < specs_.size(); ++i) {
    const ParamSpec& s = specs_[i];
    const std::int64_t fan_in = s.shape.size() == 2 ? s.shape[1] : specs_[i - 1].shape[1];
    const float bound = 1.0f / std::sqrt(static_cast<float>(fan_in));
    Rng rng = root.split(i);
    std::vector<float> values(static_cast<std::size_t>(params[i].numel()));
    for (float& v : values) v = rng.uniform(-bound, bound);
    SHARDLAB_RETURN_IF_ERROR(device::values_from_host(dev, values, params[i]));
  }
  return Status::ok();
}

Result<double> Mlp::forward_backward(device::Device& dev, ParamAccess& access, const Tensor& x, const Tensor& labels,
                                     float grad_scale) const {
  const std::int64_t batch = x.dim(0);
  const int layers = num_layers();
  // acts[l] is the input of layer l; pre[l] the pre-activation output of hidden layer l.
  std::vector<Tensor> acts(static_cast<std::size_t>(layers + 1)), pre(static_cast<std::size_t>(layers));
  acts[0] = x;
  for (int l = 0; l < layers; ++l) {
    SHARDLAB_RETURN_IF_ERROR(access.pre_forward(l));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor w, access.param(2 * l));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor b, access.param(2 * l + 1));
    const std::int64_t out = w.dim(0);
    SHARDLAB_ASSIGN_OR_RETURN(
        Tensor y, dev.empty({batch, out}, DType::kF32, MemoryCategory::kActivations, "act" + std::to_string(l)));
    SHARDLAB_RETURN_IF_ERROR(dev.gemm(acts[static_cast<std::size_t>(l)], false, w, true, y, 1.0f, 0.0f));
    SHARDLAB_RETURN_IF_ERROR(dev.add_bias(y, b));
    if (l + 1 < layers) {
      pre[static_cast<std::size_t>(l)] = y;
      SHARDLAB_ASSIGN_OR_RETURN(
          Tensor a, dev.empty({batch, out}, DType::kF32, MemoryCategory::kActivations, "gelu" + std::to_string(l)));
      SHARDLAB_RETURN_IF_ERROR(dev.activation(config_.activation, y, a));
      acts[static_cast<std::size_t>(l + 1)] = a;
    } else {
      acts[static_cast<std::size_t>(l + 1)] = y;  // logits
    }
    SHARDLAB_RETURN_IF_ERROR(access.post_forward(l));
  }
  const Tensor& logits = acts[static_cast<std::size_t>(layers)];
  SHARDLAB_ASSIGN_OR_RETURN(Tensor loss, dev.empty({1}, DType::kF32, MemoryCategory::kActivations, "loss"));
  SHARDLAB_ASSIGN_OR_RETURN(Tensor dy, dev.empty(logits.shape(), DType::kF32, MemoryCategory::kActivations, "dlogits"));
  SHARDLAB_RETURN_IF_ERROR(dev.softmax_cross_entropy(logits, labels, loss, dy, grad_scale));
  for (int l = layers - 1; l >= 0; --l) {
    SHARDLAB_RETURN_IF_ERROR(access.pre_backward(l));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor w, access.param(2 * l));
    const Tensor& input = acts[static_cast<std::size_t>(l)];
    // dW += dyᵀ·x, db += Σ dy (trainable parameters only), dx = dy·W
    if (specs_[static_cast<std::size_t>(2 * l)].requires_grad) {
      SHARDLAB_ASSIGN_OR_RETURN(Tensor gw, access.grad(2 * l));
      SHARDLAB_RETURN_IF_ERROR(dev.gemm(dy, true, input, false, gw, 1.0f, 1.0f));
    }
    if (specs_[static_cast<std::size_t>(2 * l + 1)].requires_grad) {
      SHARDLAB_ASSIGN_OR_RETURN(Tensor gb, access.grad(2 * l + 1));
      SHARDLAB_RETURN_IF_ERROR(dev.bias_grad(dy, gb, /*accumulate=*/true));
    }
    if (l > 0) {
      SHARDLAB_ASSIGN_OR_RETURN(
          Tensor dx, dev.empty(input.shape(), DType::kF32, MemoryCategory::kActivations, "dx" + std::to_string(l)));
      SHARDLAB_RETURN_IF_ERROR(dev.gemm(dy, false, w, false, dx, 1.0f, 0.0f));
      SHARDLAB_RETURN_IF_ERROR(
          dev.activation_backward(config_.activation, pre[static_cast<std::size_t>(l - 1)], dx, dx));
      dy = dx;
    }
    SHARDLAB_RETURN_IF_ERROR(access.post_backward(l));
  }
  SHARDLAB_ASSIGN_OR_RETURN(const std::vector<float> loss_value, device::values_to_host<float>(dev, loss));
  return static_cast<double>(loss_value[0]);
}

Result<std::vector<std::int64_t>> Mlp::count_targets(const Batch& batch) const {
  SHARDLAB_ASSIGN_OR_RETURN(Tensor labels, batch.get("labels"));
  return std::vector<std::int64_t>{labels.numel()};
}

Result<Batch> Mlp::synthetic_batch(device::Device& dev, std::uint64_t seed, std::int64_t step, std::int64_t first_row,
                                   std::int64_t rows) const {
  Batch b;
  b.rows = rows;
  SHARDLAB_ASSIGN_OR_RETURN(Tensor x,
                            dev.empty({rows, config_.input_dim}, DType::kF32, MemoryCategory::kActivations, "x"));
  SHARDLAB_ASSIGN_OR_RETURN(Tensor labels, dev.empty({rows}, DType::kI64, MemoryCategory::kActivations, "labels"));
  SHARDLAB_RETURN_IF_ERROR(synthetic_rows(dev, config_, seed, step, first_row, x, labels));
  b.tensors["x"] = x;
  b.tensors["labels"] = labels;
  return b;
}

Result<std::vector<double>> Mlp::forward_backward(device::Device& dev, ParamAccess& access, const Batch& batch,
                                                  const std::vector<float>& term_scale, const ForwardContext&) const {
  if (term_scale.size() != 1) return Status::invalid_argument("MLP forward_backward takes one loss scale");
  SHARDLAB_ASSIGN_OR_RETURN(Tensor x, batch.get("x"));
  SHARDLAB_ASSIGN_OR_RETURN(Tensor labels, batch.get("labels"));
  SHARDLAB_ASSIGN_OR_RETURN(double loss, forward_backward(dev, access, x, labels, term_scale[0]));
  return std::vector<double>{loss};
}

Status synthetic_rows(device::Device& dev, const MlpConfig& config, std::uint64_t seed, std::int64_t step,
                      std::int64_t first_row, const Tensor& x, const Tensor& labels) {
  const std::int64_t rows = x.dim(0), d = config.input_dim, c = config.num_classes;
  if (x.dim(1) != d || labels.numel() != rows) {
    return Status::invalid_argument("synthetic_rows: x must be [rows, " + std::to_string(d) + "] and labels [rows]");
  }
  const Rng data(seed, /*stream=*/0x44415441);  // "DATA"
  Rng teacher_rng = data.split(~std::uint64_t{0});
  std::vector<float> teacher(static_cast<std::size_t>(c * d));
  for (float& t : teacher) t = teacher_rng.uniform(-1.0f, 1.0f);
  const Rng step_rng = data.split(static_cast<std::uint64_t>(step));
  std::vector<float> xs(static_cast<std::size_t>(rows * d));
  std::vector<std::int64_t> ls(static_cast<std::size_t>(rows));
  float* xp = xs.data();
  std::int64_t* lp = ls.data();
  for (std::int64_t r = 0; r < rows; ++r) {
    Rng rng = step_rng.split(static_cast<std::uint64_t>(first_row + r));
    float* row = xp + r * d;
    for (std::int64_t j = 0; j < d; ++j) row[j] = rng.uniform(-1.0f, 1.0f);
    std::int64_t best = 0;
    float best_score = 0;
    for (std::int64_t k = 0; k < c; ++k) {
      float score = 0;
      for (std::int64_t j = 0; j < d; ++j) score += teacher[static_cast<std::size_t>(k * d + j)] * row[j];
      if (k == 0 || score > best_score) {
        best = k;
        best_score = score;
      }
    }
    lp[r] = best;
  }
  SHARDLAB_RETURN_IF_ERROR(device::values_from_host(dev, xs, x));
  return device::values_from_host(dev, ls, labels);
}

}  // namespace shardlab::runtime::model
