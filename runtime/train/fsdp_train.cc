#include "runtime/train/fsdp_train.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "runtime/device/cpu/device.h"

namespace shardlab::runtime::train {

namespace {

using model::FlatParamAccess;

// The initial parameters (o.initial_params, or the model's own init) in `host`'s memory,
// flat fp32 in spec order: a model is built on the host, and FSDP moves it to the device
// unit by unit (NOTE [Initialization unit by unit] in runtime/fsdp/fully_sharded.h). When
// the device is in timing mode (`phantom`, NOTE [Phantom storage]) the buffer is a deferred
// host storage that nothing charges: no values and no host memory, whatever the model size.
Result<Tensor> init_on_host(device::Device& host, const model::Model& m, const FsdpTrainOptions& o, bool phantom) {
  const std::int64_t total = model::total_numel(m.params());
  if (phantom) {
    return Tensor::view_of(
        Storage::make_deferred(total * 4, MemoryCategory::kParameters, "init", host.id().to_string(), [](Storage&) {}),
        DType::kF32, {total}, 0, "init");
  }
  if (o.initial_params) {
    if (static_cast<std::int64_t>(o.initial_params->size()) != total) {
      return Status::invalid_argument("initial parameters hold " + std::to_string(o.initial_params->size()) +
                                      " values; the model has " + std::to_string(total));
    }
    // Viewed in place, not copied (a model's size in host memory and one pass less): its
    // readers (FullyShardedModel::create, the oracle's copy to its device) only read it,
    // and the storage holds the vector alive.
    return Tensor::host_floats(const_cast<float*>(o.initial_params->data()), total, MemoryCategory::kParameters, "init",
                               host.id().to_string(), o.initial_params);
  }
  SHARDLAB_ASSIGN_OR_RETURN(Tensor full, host.empty({total}, DType::kF32, MemoryCategory::kParameters, "init"));
  SHARDLAB_ASSIGN_OR_RETURN(Tensor scratch, host.empty({total}, DType::kF32, MemoryCategory::kGradients, "init_grads"));
  FlatParamAccess access(m.params(), full, scratch);
  SHARDLAB_RETURN_IF_ERROR(m.init_params(host, access.params(), o.seed));
  return full;
}

Result<model::Batch> load_batch(const FsdpTrainOptions& o, const model::Model& m, device::Device& dev,
                                std::int64_t step, std::int64_t first_row, std::int64_t rows) {
  if (o.data) return o.data(dev, step, first_row, rows);
  return m.synthetic_batch(dev, o.seed, step, first_row, rows);
}

// Per-term gradient scale for a rank's chunk: weight · W / (global valid targets), so the
// average over W ranks is the single-process mean. A term without targets scales by 0.
std::vector<float> term_scales(const model::Model& m, const std::vector<std::int64_t>& global_counts, int world) {
  const std::vector<double> w = m.loss_term_weights();
  std::vector<float> scale(w.size(), 0.0f);
  for (std::size_t t = 0; t < w.size(); ++t) {
    if (global_counts[t] > 0) scale[t] = static_cast<float>(w[t] * world / static_cast<double>(global_counts[t]));
  }
  return scale;
}

// The micro-batch's share of the step's mean loss. NOTE [Loss without targets]: a term
// whose global target count is 0 is a mean over nothing, NaN — PyTorch's mean
// cross-entropy with every label ignored — while its gradients stay 0 (term_scales).
float loss_share(const model::Model& m, const std::vector<double>& sums,
                 const std::vector<std::int64_t>& global_counts) {
  const std::vector<double> w = m.loss_term_weights();
  float share = 0.0f;
  for (std::size_t t = 0; t < w.size(); ++t) {
    share += global_counts[t] > 0 ? static_cast<float>(w[t] * sums[t] / static_cast<double>(global_counts[t]))
                                  : std::numeric_limits<float>::quiet_NaN();
  }
  return share;
}

Status add_counts(const model::Model& m, const model::Batch& b, std::vector<std::int64_t>& acc) {
  SHARDLAB_ASSIGN_OR_RETURN(std::vector<std::int64_t> c, m.count_targets(b));
  if (acc.empty()) acc.assign(c.size(), 0);
  for (std::size_t t = 0; t < c.size() && t < acc.size(); ++t) acc[t] += c[t];
  return Status::ok();
}

// Forwards every ParamAccess call to FSDP and samples the device's memory after each hook.
class MemorySampler final : public model::ParamAccess {
 public:
  MemorySampler(model::ParamAccess& inner, device::Device& dev, const Clock& clock, const int& step,
                std::vector<MemorySample>& out, const FsdpTrainOptions& options)
      : inner_(inner), dev_(dev), clock_(clock), step_(step), out_(out), options_(options) {}
  Result<Tensor> param(int i) override { return inner_.param(i); }
  Result<Tensor> grad(int i) override { return inner_.grad(i); }
  Status pre_forward(int l) override { return sampled(inner_.pre_forward(l), kPreForward, l); }
  Status post_forward(int l) override { return sampled(inner_.post_forward(l), kPostForward, l); }
  Status pre_backward(int l) override { return sampled(inner_.pre_backward(l), kPreBackward, l); }
  Status post_backward(int l) override { return sampled(inner_.post_backward(l), kPostBackward, l); }

 private:
  enum Hook { kPreForward, kPostForward, kPreBackward, kPostBackward, kNumHooks };
  // Every hook of every layer samples at every step: the event names ("post_backward:3")
  // are made once, not concatenated per sample (host time inside the step).
  Status sampled(Status s, Hook hook, int layer) {
    static constexpr const char* kNames[kNumHooks] = {"pre_forward", "post_forward", "pre_backward", "post_backward"};
    if (!s.is_ok()) return s;
    if (layer < 0) {  // not a model's layer: named as is, not cached
      record(out_, dev_, clock_, step_, std::string(kNames[hook]) + ":" + std::to_string(layer), options_);
      return s;
    }
    std::vector<std::string>& names = names_[hook];
    const auto l = static_cast<std::size_t>(layer);
    if (l >= names.size()) {
      for (std::size_t i = names.size(); i <= l; ++i)
        names.push_back(std::string(kNames[hook]) + ":" + std::to_string(i));
    }
    record(out_, dev_, clock_, step_, names[l], options_);
    return s;
  }

 public:
  static void record(std::vector<MemorySample>& out, device::Device& dev, const Clock& clock, int step,
                     std::string event, const FsdpTrainOptions& options) {
    MemorySample m;
    m.step = step;
    m.event = std::move(event);
    m.time = clock.now();
    m.bytes = dev.memory().stats().current;
    out.push_back(std::move(m));
    if (options.on_marker) options.on_marker(TrainMarker::kMemorySample, step);
  }

 private:
  model::ParamAccess& inner_;
  device::Device& dev_;
  const Clock& clock_;
  const int& step_;
  std::vector<MemorySample>& out_;
  const FsdpTrainOptions& options_;
  std::vector<std::string> names_[kNumHooks];
};

}  // namespace

std::unique_ptr<model::Model> make_model(const FsdpTrainOptions& o) {
  if (o.model_kind == ModelKind::kBert) return std::make_unique<model::Bert>(o.bert);
  return std::make_unique<model::Mlp>(o.model);
}

Status validate(const FsdpTrainOptions& o, int world) {
  if (o.steps < 1) return Status::invalid_argument("steps must be >= 1, got " + std::to_string(o.steps));
  if (o.memory_timeline_steps < 0) {
    return Status::invalid_argument("memory_timeline_steps must be >= 0, got " +
                                    std::to_string(o.memory_timeline_steps));
  }
  if (o.model_kind == ModelKind::kMlp) {
    if (o.model.input_dim < 1 || o.model.hidden_dim < 1 || o.model.num_classes < 2 || o.model.num_hidden_layers < 0) {
      return Status::invalid_argument("MLP dims must be positive and num_classes >= 2");
    }
  } else {
    SHARDLAB_RETURN_IF_ERROR(o.bert.config.validate());
    if (o.bert.head == model::BertHead::kSequenceClassification && o.bert.config.num_labels < 2) {
      return Status::invalid_argument(
          "BERT classification needs num_labels >= 2 (num_labels = 1 is regression, not supported)");
    }
    if (o.bert.seq_len < 1 || o.bert.seq_len > o.bert.config.max_position_embeddings) {
      return Status::invalid_argument("sequence length " + std::to_string(o.bert.seq_len) + " must be in [1, " +
                                      std::to_string(o.bert.config.max_position_embeddings) +
                                      "] (max_position_embeddings)");
    }
    if (o.bert.compute_dtype != DType::kF32 && o.bert.compute_dtype != DType::kBF16) {
      return Status::invalid_argument("BERT compute dtype must be fp32 or bf16");
    }
  }
  if (!(o.optimizer.lr > 0.0f) || !std::isfinite(o.optimizer.lr)) {
    return Status::invalid_argument("lr must be a positive finite number");
  }
  // NaN would silently turn clipping off (every `norm > max` test is false).
  if (!(o.max_grad_norm >= 0.0) || !std::isfinite(o.max_grad_norm)) {
    return Status::invalid_argument("max_grad_norm " + std::to_string(o.max_grad_norm) +
                                    " must be a finite number >= 0 (0: no clipping)");
  }
  if (o.grad_accumulation < 1 || o.global_batch < 1 ||
      o.global_batch % (static_cast<std::int64_t>(world) * o.grad_accumulation) != 0) {
    return Status::invalid_argument(
        "global batch " + std::to_string(o.global_batch) + " does not split evenly into " + std::to_string(world) +
        " ranks × " + std::to_string(o.grad_accumulation) + " micro-batches; use a multiple of " +
        std::to_string(static_cast<std::int64_t>(world) * std::max(o.grad_accumulation, 1)));
  }
  if (o.skip_last_optimizer_step && !o.checkpoint.dir.empty()) {
    return Status::invalid_argument("skip_last_optimizer_step cannot be combined with checkpoints (checkpoint.dir '" +
                                    o.checkpoint.dir + "'): the last one would save a step without its update");
  }
  if (fsdp::is_hybrid(o.fsdp.strategy) && (o.fsdp.devices_per_node < 1 || world % o.fsdp.devices_per_node != 0)) {
    return Status::invalid_argument(std::string(fsdp::strategy_name(o.fsdp.strategy)) +
                                    " needs devices_per_node dividing the world size " + std::to_string(world));
  }
  return Status::ok();
}

std::int64_t host_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return 0;
  std::int64_t bytes = 0;
  if (__builtin_mul_overflow(static_cast<std::int64_t>(pages), static_cast<std::int64_t>(page), &bytes))
    return INT64_MAX;
  return bytes;
}

Status check_numerics_host_memory(const FsdpTrainOptions& o, std::int64_t host_bytes) {
  if (host_bytes <= 0) return Status::ok();
  std::int64_t params = 0;
  if (o.model_kind == ModelKind::kBert) {
    SHARDLAB_ASSIGN_OR_RETURN(params, model::bert_param_count(o.bert.config, o.bert.head));
  } else {
    const std::unique_ptr<model::Model> m = make_model(o);
    for (const auto& spec : m->params()) {
      SHARDLAB_ASSIGN_OR_RETURN(const std::int64_t n, checked_numel(spec.shape));
      if (__builtin_add_overflow(params, n, &params))
        return Status::invalid_argument("the parameter count passes 2^63");
    }
  }
  std::int64_t planned = 0;
  if (__builtin_mul_overflow(params, kNumericsBytesPerParameter, &planned) || planned > host_bytes) {
    const auto gib = [](double b) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.1f GiB", b / static_cast<double>(std::int64_t{1} << 30));
      return std::string(buf);
    };
    return Status::invalid_argument(
        "the model has " + std::to_string(params) + " parameters; a numerics run holds at least " +
        std::to_string(kNumericsBytesPerParameter) +
        " bytes of each in this host's memory (NOTE [Host memory plan]): " +
        gib(static_cast<double>(params) * kNumericsBytesPerParameter) + ", more than the host's " +
        gib(static_cast<double>(host_bytes)) + "; allowed: a model of at most " +
        std::to_string(host_bytes / kNumericsBytesPerParameter) +
        " parameters here, or world.mode: timing (phantom tensors, no values)");
  }
  return Status::ok();
}

fsdp::WrapPlan wrap_plan(const FsdpTrainOptions& o, const model::Model& m) {
  switch (o.wrap) {
    case WrapPolicy::kPerLayer: return fsdp::WrapPlan::per_layer(m.num_layers());
    case WrapPolicy::kNone: return fsdp::WrapPlan::single(m.num_layers());
    case WrapPolicy::kBySize: return fsdp::WrapPlan::by_size(m.params(), m.num_layers(), o.min_num_params);
    case WrapPolicy::kByClass:
      return fsdp::WrapPlan::by_class(m.params(), m.num_layers(),
                                      o.wrap_classes.empty() ? m.default_wrap_classes() : o.wrap_classes);
  }
  return fsdp::WrapPlan::single(m.num_layers());
}

FsdpTrainer::FsdpTrainer(comm::Communicator& comm, device::Device& dev, const Clock& clock,
                         const FsdpTrainOptions& options)
    : comm_(comm), dev_(dev), clock_(clock), options_(options), model_(make_model(options)) {}

Result<std::unique_ptr<FsdpTrainer>> FsdpTrainer::create(comm::Communicator& comm, device::Device& dev,
                                                         const Clock& clock, const FsdpTrainOptions& o) {
  SHARDLAB_RETURN_IF_ERROR(validate(o, comm.size()));
  std::unique_ptr<FsdpTrainer> t(new FsdpTrainer(comm, dev, clock, o));
  const fsdp::WrapPlan plan = wrap_plan(o, *t->model_);
  if (o.model_kind == ModelKind::kBert && o.bert.head == model::BertHead::kMaskedLM) {
    const int head_layer = t->model_->num_layers() - 1;
    if (plan.unit_of_layer.front() != plan.unit_of_layer[static_cast<std::size_t>(head_layer)]) {
      return Status::invalid_argument(
          "BERT's masked-LM decoder is tied to the word embeddings, so the embeddings and the head must share an FSDP "
          "unit (as in PyTorch); this wrap policy puts them in different units — use the transformer-layer policy "
          "(wrap BertLayer) or no auto-wrap");
    }
  }
  SHARDLAB_ASSIGN_OR_RETURN(t->loss_, dev.empty({1}, DType::kF32, MemoryCategory::kOther, "loss"));
  SHARDLAB_ASSIGN_OR_RETURN(t->counts_, dev.empty({static_cast<std::int64_t>(t->model_->loss_term_weights().size())},
                                                  DType::kI64, MemoryCategory::kOther, "target_counts"));
  {
    device::cpu::CpuDevice host({"cpu", comm.rank()});
    SHARDLAB_ASSIGN_OR_RETURN(Tensor full, init_on_host(host, *t->model_, o, t->loss_.is_deferred()));
    SHARDLAB_ASSIGN_OR_RETURN(t->fsdp_,
                              fsdp::FullyShardedModel::create(comm, dev, t->model_->params(), plan, o.fsdp, full));
  }                                    // the host copy is freed here: only shards remain
  t->options_.initial_params.reset();  // and so is a given one, unless its owner keeps it
  SHARDLAB_RETURN_IF_ERROR(t->fsdp_->set_optimizer(o.optimizer));
  if (o.record_memory_timeline) {
    t->sampler_ =
        std::make_unique<MemorySampler>(*t->fsdp_, dev, clock, t->step_, t->result_.memory_timeline, t->options_);
  }
  t->result_.num_units = t->fsdp_->num_units();
  for (const auto& u : t->fsdp_->units()) t->result_.num_trainable_units += u.has_trainable ? 1 : 0;
  return t;
}

Status FsdpTrainer::step() {
  const FsdpTrainOptions& o = options_;
  const int world = comm_.size();
  const std::int64_t local = o.global_batch / world;
  const std::int64_t micro = local / o.grad_accumulation;
  if (o.before_step) SHARDLAB_RETURN_IF_ERROR(o.before_step(step_));
  const Nanos start = clock_.now();
  const auto host_bytes = [&] {
    return dev_.host_transfer_bytes() + (o.fsdp.offload_device ? o.fsdp.offload_device->host_transfer_bytes() : 0);
  };
  const std::int64_t host_bytes_before = host_bytes();
  const bool sample_memory = o.record_memory_timeline && step_ < o.memory_timeline_steps;
  if (o.on_marker) o.on_marker(TrainMarker::kStepBegin, step_);
  fsdp_->zero_grad();
  // The step's micro-batches first: the loss is normalized by the global target count.
  std::vector<model::Batch> batches;
  std::vector<std::int64_t> counts;
  for (int m = 0; m < o.grad_accumulation; ++m) {
    SHARDLAB_ASSIGN_OR_RETURN(model::Batch b,
                              load_batch(o, *model_, dev_, step_, comm_.rank() * local + m * micro, micro));
    SHARDLAB_RETURN_IF_ERROR(add_counts(*model_, b, counts));
    batches.push_back(std::move(b));
  }
  SHARDLAB_RETURN_IF_ERROR(device::values_from_host(dev_, counts, counts_));
  SHARDLAB_RETURN_IF_ERROR(comm_.all_reduce(counts_, comm::ReduceOp::kSum)->wait(o.fsdp.collective_timeout));
  SHARDLAB_ASSIGN_OR_RETURN(counts, device::values_to_host<std::int64_t>(dev_, counts_));
  const std::vector<float> scale = term_scales(*model_, counts, world);
  float loss_sum = 0.0f;
  for (int m = 0; m < o.grad_accumulation; ++m) {
    SHARDLAB_RETURN_IF_ERROR(fsdp_->begin_iteration(/*no_sync=*/m + 1 < o.grad_accumulation));
    const model::ForwardContext ctx{o.seed, step_, comm_.rank() * local + m * micro, true};
    model::ParamAccess& access = sample_memory ? *sampler_ : static_cast<model::ParamAccess&>(*fsdp_);
    SHARDLAB_ASSIGN_OR_RETURN(std::vector<double> sums,
                              model_->forward_backward(dev_, access, batches[static_cast<std::size_t>(m)], scale, ctx));
    SHARDLAB_RETURN_IF_ERROR(fsdp_->end_iteration());
    batches[static_cast<std::size_t>(m)] = model::Batch();
    result_.counts.push_back(fsdp_->counts());
    loss_sum += loss_share(*model_, sums, counts);
  }
  SHARDLAB_RETURN_IF_ERROR(device::values_from_host(dev_, std::vector<float>{loss_sum}, loss_));
  SHARDLAB_RETURN_IF_ERROR(comm_.all_reduce(loss_, comm::ReduceOp::kSum)->wait(o.fsdp.collective_timeout));
  if (o.max_grad_norm > 0.0) {
    SHARDLAB_ASSIGN_OR_RETURN(double norm, fsdp_->clip_grad_norm(o.max_grad_norm, o.clip_inf_norm));
    result_.grad_norms.push_back(loss_.is_deferred() ? std::nan("") : norm);
  }
  if (!(o.skip_last_optimizer_step && step_ + 1 == o.steps)) SHARDLAB_RETURN_IF_ERROR(fsdp_->optimizer_step());
  SHARDLAB_RETURN_IF_ERROR(dev_.synchronize(device::kComputeStream));
  if (sample_memory) {
    MemorySampler::record(result_.memory_timeline, dev_, clock_, step_, "optimizer_step", o);
  }
  SHARDLAB_ASSIGN_OR_RETURN(const std::vector<float> loss, device::values_to_host<float>(dev_, loss_));
  result_.losses.push_back(loss_.is_deferred() ? std::nan("") : static_cast<double>(loss[0]));
  result_.step_times.push_back(clock_.now() - start);
  result_.step_starts.push_back(start);
  result_.host_transfer_bytes.push_back(host_bytes() - host_bytes_before);
  if (o.on_marker) o.on_marker(TrainMarker::kStepEnd, step_);
  ++step_;
  return Status::ok();
}

namespace {

// train_fsdp after the trainer is made: resume, the steps, checkpoints, the results.
Result<FsdpTrainResult> train_to_end(FsdpTrainer* t, device::Device& dev, const FsdpTrainOptions& o) {
  const auto& ck = o.checkpoint;
  std::error_code ec;
  const bool has_checkpoint = !ck.dir.empty() && std::filesystem::exists(std::filesystem::symlink_status(
                                                     std::filesystem::path(ck.dir) / "latest", ec));
  if (ck.resume && !has_checkpoint && !ck.resume_if_present) {
    return Status::invalid_argument("checkpoint.resume is true but '" + ck.dir + "' holds no checkpoint (no " + ck.dir +
                                    "/latest); check checkpoint.dir, or use checkpoint.resume: if_present to start "
                                    "from step 1 when there is none");
  }
  if (ck.resume && has_checkpoint) {
    // Each rank reads its own pieces, so one rank may find a problem the others do not;
    // NOTE [Agreeing on bad input]: the ranks agree before training on, so that every rank
    // ends with the same exit code (2) instead of the others timing out behind it.
    Result<std::int64_t> loaded = [&]() -> Result<std::int64_t> {
      SHARDLAB_ASSIGN_OR_RETURN(t->result().resumed_from, fsdp::latest_step_dir(ck.dir));
      SHARDLAB_ASSIGN_OR_RETURN(t->result().resumed_what, fsdp::describe_checkpoint(t->result().resumed_from));
      SHARDLAB_ASSIGN_OR_RETURN(std::int64_t done, fsdp::load_checkpoint(t->model(), ck.dir));
      if (done < 0 || done > o.steps) {
        return Status::invalid_argument("checkpoint in '" + ck.dir + "' is at step " + std::to_string(done) +
                                        ", beyond this run's " + std::to_string(o.steps) + " steps");
      }
      return done;
    }();
    comm::Communicator& world = t->model().world();
    SHARDLAB_ASSIGN_OR_RETURN(Tensor flag, dev.empty({1}, DType::kI64, MemoryCategory::kOther, "resume_ok"));
    if (!flag.is_deferred()) {
      // min: the first failing rank
      SHARDLAB_RETURN_IF_ERROR(
          device::values_from_host(dev, std::vector<std::int64_t>{loaded.is_ok() ? world.size() : world.rank()}, flag));
      SHARDLAB_RETURN_IF_ERROR(
          world.all_reduce(flag, comm::ReduceOp::kMin)->wait(o.fsdp.collective_timeout).with_context("resume"));
      if (!loaded.is_ok()) return loaded.status();
      SHARDLAB_ASSIGN_OR_RETURN(const std::vector<std::int64_t> agreed,
                                device::values_to_host<std::int64_t>(dev, flag));
      const std::int64_t failed = agreed[0];
      if (failed < world.size()) {
        return Status::invalid_argument("rank " + std::to_string(failed) + " could not load the checkpoint in '" +
                                        ck.dir + "' (its error says why)");
      }
    } else if (!loaded.is_ok()) {
      return loaded.status();
    }
    t->skip_to(static_cast<int>(*loaded));
  }
  const int first = t->steps_done();
  while (t->steps_done() < o.steps) {
    SHARDLAB_RETURN_IF_ERROR(t->step());
    const int done = t->steps_done();
    if (o.on_step) o.on_step(t->result());
    if (!ck.dir.empty() && ((ck.every_steps > 0 && done % ck.every_steps == 0) || done == o.steps)) {
      fsdp::CheckpointOptions co;
      co.type = ck.type;
      nlohmann::json run = ck.run.empty() ? nlohmann::json::object() : nlohmann::json::parse(ck.run);
      run["seed"] = o.seed;
      run["world_size"] = t->model().world().size();
      co.run = run.dump();
      SHARDLAB_RETURN_IF_ERROR(fsdp::save_checkpoint(t->model(), ck.dir, done, co));
    }
  }
  FsdpTrainResult& result = t->result();
  result.max_live_unsharded = t->model().max_live_unsharded();
  // The training's memory, before the gathers below: they serve the checks, not training.
  result.memory = dev.memory().stats();
  if (o.gather_results) {
    // Training's cached blocks go back to the system first: the result buffers below then
    // reuse pages this process has touched instead of first-touching fresh ones.
    dev.empty_cache();
    const std::int64_t total = model::total_numel(t->model().specs());
    // Gathers into `out` (full, fp32, spec order). A device that takes host operands
    // writes straight into it; others gather into device memory and copy it over.
    const auto gather = [&](const auto& gather_into, std::vector<float>& out, const char* name) -> Status {
      if (dev.host_addressable()) {
        out.assign(static_cast<std::size_t>(total), 0.0f);
        return gather_into(Tensor::host_floats(out.data(), total, MemoryCategory::kOther, name, "host"));
      }
      SHARDLAB_ASSIGN_OR_RETURN(Tensor d, dev.empty({total}, DType::kF32, MemoryCategory::kOther, name));
      SHARDLAB_RETURN_IF_ERROR(gather_into(d));
      if (!d.is_deferred()) {
        SHARDLAB_ASSIGN_OR_RETURN(out, device::values_to_host<float>(dev, d));
      }
      return Status::ok();
    };
    if (t->steps_done() > first) {
      // The last step's gradients are still in their shards (the optimizer only reads
      // them; the next step's zero_grad would clear them).
      SHARDLAB_RETURN_IF_ERROR(
          gather([&](const Tensor& g) { return t->model().gather_full_grads(g); }, result.last_grads, "grads_out"));
    }
    if (o.gather_params) {
      SHARDLAB_RETURN_IF_ERROR(
          gather([&](const Tensor& p) { return t->model().gather_full_params(p); }, result.final_params, "params_out"));
    }
  }
  return std::move(result);
}

}  // namespace

Result<FsdpTrainResult> train_fsdp(comm::Communicator& comm, device::Device& dev, const Clock& clock,
                                   FsdpTrainOptions o) {
  SHARDLAB_ASSIGN_OR_RETURN(std::unique_ptr<FsdpTrainer> t, FsdpTrainer::create(comm, dev, clock, o));
  o.initial_params.reset();  // the model is built (FsdpTrainOptions::initial_params)
  Result<FsdpTrainResult> r = train_to_end(t.get(), dev, o);
  if (!r.is_ok() && o.progress_on_failure != nullptr) {
    *o.progress_on_failure = t->result();
    o.progress_on_failure->memory = dev.memory().stats();
  }
  return r;
}

Result<FsdpTrainResult> train_oracle(device::Device& dev, const FsdpTrainOptions& o, int world,
                                     const std::string& start_from) {
  SHARDLAB_RETURN_IF_ERROR(validate(o, world));
  const std::unique_ptr<model::Model> net = make_model(o);
  const std::int64_t total = model::total_numel(net->params());
  const DType pd = o.fsdp.param_dtype, rd = o.fsdp.reduce_dtype;
  auto buffer = [&](DType dt, MemoryCategory c, const char* label) { return dev.empty({total}, dt, c, label); };
  SHARDLAB_ASSIGN_OR_RETURN(Tensor params, buffer(DType::kF32, MemoryCategory::kParameters, "params"));
  {
    device::cpu::CpuDevice host({"cpu", 0});
    SHARDLAB_ASSIGN_OR_RETURN(Tensor init, init_on_host(host, *net, o, params.is_deferred()));
    SHARDLAB_RETURN_IF_ERROR(dev.copy(init, params));
  }
  // The compute copy: the fp32 master itself, or its param_dtype rounding widened back
  // (FSDP's all-gather in param_dtype, widened to the fp32 compute buffer).
  Tensor compute = params, low_params;
  if (pd != DType::kF32) {
    SHARDLAB_ASSIGN_OR_RETURN(compute, buffer(DType::kF32, MemoryCategory::kParameters, "compute_params"));
    SHARDLAB_ASSIGN_OR_RETURN(low_params, buffer(pd, MemoryCategory::kParameters, "low_params"));
  }
  SHARDLAB_ASSIGN_OR_RETURN(Tensor chunk_grad, buffer(DType::kF32, MemoryCategory::kGradients, "chunk_grad"));
  // The reduction runs in reduce_dtype: each rank's pre-divided chunk cast to it, summed
  // with the collectives' own element rule (comm::reduce_into: bf16 adds in fp32 and rounds
  // once per add).
  Tensor chunk_low = chunk_grad;
  if (rd != DType::kF32) {
    SHARDLAB_ASSIGN_OR_RETURN(chunk_low, buffer(rd, MemoryCategory::kGradients, "chunk_grad_low"));
  }
  SHARDLAB_ASSIGN_OR_RETURN(Tensor node_sum, buffer(rd, MemoryCategory::kGradients, "node_sum"));
  SHARDLAB_ASSIGN_OR_RETURN(Tensor world_sum, buffer(rd, MemoryCategory::kGradients, "world_sum"));
  SHARDLAB_ASSIGN_OR_RETURN(Tensor grads, buffer(DType::kF32, MemoryCategory::kGradients, "grads"));
  // keep_low_precision_grads: the stored gradient is rounded to param_dtype after the
  // reduction and again after clipping scales it (FullyShardedModel::store_grad).
  Tensor grads_low;
  if (o.fsdp.keep_low_precision_grads && pd != DType::kF32) {
    SHARDLAB_ASSIGN_OR_RETURN(grads_low, buffer(pd, MemoryCategory::kGradients, "grads_low"));
  }
  auto round_grads = [&]() -> Status {
    if (!grads_low.defined()) return Status::ok();
    SHARDLAB_RETURN_IF_ERROR(dev.cast(grads, grads_low));
    return dev.cast(grads_low, grads);
  };
  // The collectives' own host arithmetic (comm::reduce_into), in their order: the oracle
  // runs on host memory (a cpu or sim device), which it checks below.
  auto add_into = [&](const Tensor& src, const Tensor& dst) {
    comm::reduce_into(rd, comm::ReduceOp::kSum, dst.bytes(), src.bytes(), total);
  };
  if (!node_sum.storage()->host_visible()) {
    return Status::invalid_argument("the unsharded oracle runs on host memory (a cpu or sim device), not on " +
                                    dev.id().to_string());
  }
  SHARDLAB_ASSIGN_OR_RETURN(optim::Optimizer opt, optim::Optimizer::create(dev, o.optimizer, total, "oracle"));
  std::vector<std::uint8_t> trainable;
  for (const auto& spec : net->params())
    trainable.insert(trainable.end(), static_cast<std::size_t>(*checked_numel(spec.shape)), spec.requires_grad ? 1 : 0);
  FlatParamAccess access(net->params(), compute, chunk_grad);
  const std::int64_t local = o.global_batch / world;
  const std::int64_t micro = local / o.grad_accumulation;
  // The reduction tree of the collectives: groups of `group` ranks summed in order, then
  // the group sums in order (one group unless HYBRID_SHARD).
  const int group = fsdp::is_hybrid(o.fsdp.strategy) ? o.fsdp.devices_per_node : world;
  const auto [pre, post] = fsdp::divide_factors(world);
  FsdpTrainResult result;
  if (!start_from.empty()) {
    SHARDLAB_ASSIGN_OR_RETURN(fsdp::UnshardedCheckpoint ck,
                              fsdp::load_checkpoint_unsharded(start_from, net->params(), opt.state_names()));
    if (ck.step < 0 || ck.step > o.steps) {
      return Status::invalid_argument(start_from + " is at step " + std::to_string(ck.step) + ", beyond this run's " +
                                      std::to_string(o.steps) + " steps");
    }
    if (params.is_deferred()) return Status::invalid_argument("the oracle cannot resume in timing mode");
    SHARDLAB_RETURN_IF_ERROR(device::values_from_host(dev, ck.params, params));
    for (std::size_t k = 0; k < ck.optimizer_state.size(); ++k) {
      SHARDLAB_RETURN_IF_ERROR(device::values_from_host(dev, ck.optimizer_state[k], opt.state()[k]));
    }
    opt.set_steps(ck.optimizer_steps);
    result.first_step = static_cast<int>(ck.step);
    result.resumed_from = start_from;
  }
  for (int step = result.first_step; step < o.steps; ++step) {
    if (pd != DType::kF32) {
      SHARDLAB_RETURN_IF_ERROR(dev.cast(params, low_params));
      SHARDLAB_RETURN_IF_ERROR(dev.cast(low_params, compute));
    }
    std::vector<std::int64_t> counts;
    for (std::int64_t row = 0; row < o.global_batch; row += micro) {
      SHARDLAB_ASSIGN_OR_RETURN(model::Batch b, load_batch(o, *net, dev, step, row, micro));
      SHARDLAB_RETURN_IF_ERROR(add_counts(*net, b, counts));
    }
    const std::vector<float> scale = term_scales(*net, counts, world);
    float loss_total = 0.0f;
    for (int r = 0; r < world; ++r) {
      SHARDLAB_RETURN_IF_ERROR(dev.fill(chunk_grad, 0.0f));
      float rank_loss = 0.0f;
      for (int m = 0; m < o.grad_accumulation; ++m) {
        const std::int64_t first = r * local + m * micro;
        SHARDLAB_ASSIGN_OR_RETURN(model::Batch b, load_batch(o, *net, dev, step, first, micro));
        const model::ForwardContext ctx{o.seed, step, first, true};
        SHARDLAB_ASSIGN_OR_RETURN(std::vector<double> sums, net->forward_backward(dev, access, b, scale, ctx));
        rank_loss += loss_share(*net, sums, counts);
      }
      loss_total = r == 0 ? rank_loss : loss_total + rank_loss;
      if (pre != 1.0) SHARDLAB_RETURN_IF_ERROR(dev.scale(chunk_grad, static_cast<float>(1.0 / pre)));
      if (rd != DType::kF32) SHARDLAB_RETURN_IF_ERROR(dev.cast(chunk_grad, chunk_low));
      if (r % group == 0) {
        SHARDLAB_RETURN_IF_ERROR(dev.copy(chunk_low, node_sum));
      } else {
        add_into(chunk_low, node_sum);
      }
      if (r % group == group - 1) {
        if (r == group - 1) {
          SHARDLAB_RETURN_IF_ERROR(dev.copy(node_sum, world_sum));
        } else {
          add_into(node_sum, world_sum);
        }
      }
    }
    SHARDLAB_RETURN_IF_ERROR(rd == DType::kF32 ? dev.copy(world_sum, grads) : dev.cast(world_sum, grads));
    if (post != 1.0) SHARDLAB_RETURN_IF_ERROR(dev.scale(grads, static_cast<float>(1.0 / post)));
    SHARDLAB_RETURN_IF_ERROR(round_grads());
    if (o.max_grad_norm > 0.0) {
      double acc = 0.0;
      SHARDLAB_ASSIGN_OR_RETURN(const std::vector<float> host_grads, device::values_to_host<float>(dev, grads));
      for (const float value : host_grads) {
        const double g = std::fabs(static_cast<double>(value));
        acc = o.clip_inf_norm ? std::max(acc, g) : acc + g * g;
      }
      const double norm = o.clip_inf_norm ? acc : std::sqrt(static_cast<double>(static_cast<float>(acc)));
      result.grad_norms.push_back(norm);
      const double coef = o.max_grad_norm / (norm + 1e-6);
      if (coef < 1.0) {
        SHARDLAB_RETURN_IF_ERROR(dev.scale(grads, static_cast<float>(coef)));
        SHARDLAB_RETURN_IF_ERROR(round_grads());
      }
    }
    if (step + 1 == o.steps) {
      SHARDLAB_ASSIGN_OR_RETURN(result.last_grads, device::values_to_host<float>(dev, grads));
    }
    SHARDLAB_RETURN_IF_ERROR(opt.step(params, grads, &trainable));
    result.losses.push_back(static_cast<double>(loss_total));
    result.step_times.push_back(0);
  }
  SHARDLAB_ASSIGN_OR_RETURN(result.final_params, device::values_to_host<float>(dev, params));
  result.memory = dev.memory().stats();
  return result;
}

Tolerance default_tolerance(const FsdpTrainOptions& o) {
  const bool bf16 = o.fsdp.param_dtype == DType::kBF16 || o.fsdp.reduce_dtype == DType::kBF16 ||
                    (o.model_kind == ModelKind::kBert && o.bert.compute_dtype == DType::kBF16);
  if (bf16) return Tolerance{1.6e-2, 1e-5, "bf16"};
  return Tolerance{};
}

namespace {
double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b, double rtol, double atol, bool* ok) {
  double worst = 0;
  if (a.size() != b.size()) *ok = false;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    const double d = std::fabs(static_cast<double>(a[i]) - b[i]);
    worst = std::max(worst, d);
    if (!(d <= atol + rtol * std::fabs(static_cast<double>(b[i])))) *ok = false;
  }
  return worst;
}
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}
std::string sci(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2e", v);
  return buf;
}
}  // namespace

Comparison compare(const FsdpTrainResult& a, const FsdpTrainResult& b, double rtol, double atol) {
  Comparison c;
  c.rtol = rtol;
  c.atol = atol;
  c.within_tolerance = true;
  c.max_grad_diff = max_abs_diff(a.last_grads, b.last_grads, rtol, atol, &c.within_tolerance);
  c.max_param_diff = max_abs_diff(a.final_params, b.final_params, rtol, atol, &c.within_tolerance);
  // A resumed run (first_step > 0) holds the losses of its own steps only.
  std::vector<double> b_losses = b.losses;
  if (a.first_step > 0 && static_cast<std::size_t>(a.first_step) + a.losses.size() == b.losses.size()) {
    b_losses.erase(b_losses.begin(), b_losses.begin() + a.first_step);
  }
  if (a.losses.size() != b_losses.size()) c.within_tolerance = false;
  bool same_losses = a.losses.size() == b_losses.size();
  for (std::size_t i = 0; i < std::min(a.losses.size(), b_losses.size()); ++i) {
    // NOTE [Loss without targets]: a step without targets is NaN on both sides, and equal.
    if (std::isnan(a.losses[i]) && std::isnan(b_losses[i])) continue;
    same_losses = same_losses && a.losses[i] == b_losses[i];
    const double d = std::fabs(a.losses[i] - b_losses[i]);
    c.max_loss_diff = std::max(c.max_loss_diff, d);
    if (!(d <= atol + rtol * std::fabs(b_losses[i]))) c.within_tolerance = false;
  }
  c.bitwise = same_bits(a.last_grads, b.last_grads) && same_bits(a.final_params, b.final_params) && same_losses;
  return c;
}

std::string Comparison::describe() const {
  if (bitwise) return "MATCH (bitwise): gradients, parameters and losses are identical";
  return std::string(within_tolerance ? "MATCH" : "MISMATCH") + ": max |Δgrad| " + sci(max_grad_diff) +
         ", max |Δparam| " + sci(max_param_diff) + ", max |Δloss| " + sci(max_loss_diff) +
         " (tolerance |Δ| <= " + sci(atol) + " + " + sci(rtol) + "·|oracle|)";
}

}  // namespace shardlab::runtime::train
