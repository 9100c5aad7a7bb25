#include "runtime/train/data_parallel.h"

#include <cmath>
#include <cstdio>
#include <functional>

namespace shardlab::runtime::train {

namespace {

// Views of parameters and gradients inside two flat buffers.
class FlatAccess final : public model::ParamAccess {
 public:
  FlatAccess(const std::vector<model::ParamSpec>& specs, const Tensor& params, const Tensor& grads) {
    std::int64_t off = 0;
    for (const auto& s : specs) {
      const std::int64_t n = *checked_numel(s.shape);
      params_.push_back(*params.narrow(off, n, s.name)->reshape(s.shape));
      grads_.push_back(*grads.narrow(off, n, s.name + ".grad")->reshape(s.shape));
      off += n;
    }
  }
  Result<Tensor> param(int i) override { return params_[static_cast<std::size_t>(i)]; }
  Result<Tensor> grad(int i) override { return grads_[static_cast<std::size_t>(i)]; }
  const std::vector<Tensor>& params() const { return params_; }

 private:
  std::vector<Tensor> params_, grads_;
};

using Reduce = std::function<Status(const Tensor& grads, const Tensor& loss)>;

Result<TrainResult> train(device::Device& dev, const Clock& clock, const TrainOptions& o, int rank, int world,
                          const Reduce& reduce) {
  SHARDLAB_RETURN_IF_ERROR(validate(o, world));
  const model::Mlp mlp(o.model);
  const std::int64_t total = model::total_numel(mlp.params());
  SHARDLAB_ASSIGN_OR_RETURN(Tensor params, dev.empty({total}, DType::kF32, MemoryCategory::kParameters, "params"));
  SHARDLAB_ASSIGN_OR_RETURN(Tensor grads, dev.empty({total}, DType::kF32, MemoryCategory::kGradients, "grads"));
  FlatAccess access(mlp.params(), params, grads);
  SHARDLAB_RETURN_IF_ERROR(mlp.init_params(dev, access.params(), o.seed));
  const std::int64_t local = o.global_batch / world;
  SHARDLAB_ASSIGN_OR_RETURN(Tensor x, dev.empty({local, o.model.input_dim}, DType::kF32, MemoryCategory::kActivations, "x"));
  SHARDLAB_ASSIGN_OR_RETURN(Tensor labels, dev.empty({local}, DType::kI64, MemoryCategory::kActivations, "labels"));
  SHARDLAB_ASSIGN_OR_RETURN(Tensor loss, dev.empty({1}, DType::kF32, MemoryCategory::kOther, "loss"));
  TrainResult result;
  for (int step = 0; step < o.steps; ++step) {
    const Nanos start = clock.now();
    SHARDLAB_RETURN_IF_ERROR(model::synthetic_rows(dev, o.model, o.seed, step, rank * local, x, labels));
    SHARDLAB_RETURN_IF_ERROR(dev.fill(grads, 0.0f));
    SHARDLAB_ASSIGN_OR_RETURN(double loss_sum,
                              mlp.forward_backward(dev, access, x, labels, 1.0f / static_cast<float>(o.global_batch)));
    loss.data<float>()[0] = static_cast<float>(loss_sum);
    SHARDLAB_RETURN_IF_ERROR(reduce(grads, loss));
    SHARDLAB_RETURN_IF_ERROR(dev.axpy(-o.lr, grads, params));
    dev.synchronize(device::kComputeStream);
    result.losses.push_back(static_cast<double>(loss.data<float>()[0]) / static_cast<double>(o.global_batch));
    result.step_times.push_back(clock.now() - start);
  }
  result.final_params.assign(params.data<float>(), params.data<float>() + total);
  result.memory = dev.memory().stats();
  return result;
}

std::string sci(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2e", v);
  return buf;
}

}  // namespace

Status validate(const TrainOptions& o, int world) {
  if (o.steps < 1) return Status::invalid_argument("steps must be >= 1, got " + std::to_string(o.steps));
  if (o.global_batch < 1) {
    return Status::invalid_argument("global batch must be >= 1, got " + std::to_string(o.global_batch));
  }
  if (world < 1 || o.global_batch % world != 0) {
    return Status::invalid_argument("global batch " + std::to_string(o.global_batch) +
                                    " does not split evenly over " + std::to_string(world) +
                                    " ranks; use a multiple of the world size");
  }
  if (o.model.input_dim < 1 || o.model.hidden_dim < 1 || o.model.num_classes < 2 || o.model.num_hidden_layers < 0) {
    return Status::invalid_argument("model dims must be positive and num_classes >= 2");
  }
  if (!(o.lr > 0.0f) || !std::isfinite(o.lr)) return Status::invalid_argument("lr must be a positive finite number");
  return Status::ok();
}

Result<TrainResult> train_data_parallel(comm::Communicator& comm, device::Device& dev, const Clock& clock,
                                        const TrainOptions& o) {
  return train(dev, clock, o, comm.rank(), comm.size(), [&](const Tensor& grads, const Tensor& loss) -> Status {
    auto g = comm.all_reduce(grads, comm::ReduceOp::kSum);
    auto l = comm.all_reduce(loss, comm::ReduceOp::kSum);
    SHARDLAB_RETURN_IF_ERROR(g->wait(o.collective_timeout));
    return l->wait(o.collective_timeout);
  });
}

Result<TrainResult> train_unsharded(device::Device& dev, const Clock& clock, const TrainOptions& o) {
  return train(dev, clock, o, 0, 1, [](const Tensor&, const Tensor&) { return Status::ok(); });
}

Comparison compare(const TrainResult& a, const TrainResult& b, double rtol, double atol) {
  Comparison c;
  c.rtol = rtol;
  c.atol = atol;
  c.match = a.losses.size() == b.losses.size() && a.final_params.size() == b.final_params.size();
  for (std::size_t i = 0; i < std::min(a.losses.size(), b.losses.size()); ++i) {
    const double d = std::fabs(a.losses[i] - b.losses[i]);
    c.max_loss_diff = std::max(c.max_loss_diff, d);
    if (!(d <= atol + rtol * std::fabs(b.losses[i]))) c.match = false;
  }
  for (std::size_t i = 0; i < std::min(a.final_params.size(), b.final_params.size()); ++i) {
    const double d = std::fabs(static_cast<double>(a.final_params[i]) - b.final_params[i]);
    c.max_param_diff = std::max(c.max_param_diff, d);
    if (!(d <= atol + rtol * std::fabs(static_cast<double>(b.final_params[i])))) c.match = false;
  }
  return c;
}

std::string Comparison::describe() const {
  return std::string(match ? "MATCH" : "MISMATCH") + ": max |Δloss| " + sci(max_loss_diff) + ", max |Δparam| " +
         sci(max_param_diff) + " (tolerance |Δ| <= " + sci(atol) + " + " + sci(rtol) + "·|oracle|)";
}

}  // namespace shardlab::runtime::train
