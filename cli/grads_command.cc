#include "cli/grads_command.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include <unistd.h>

#include "runtime/device/cpu/device.h"
#include "runtime/io/safetensors.h"
#include "runtime/model/bert_io.h"
#include "runtime/train/fsdp_train.h"
#include "sim/engine/world.h"

namespace shardlab::cli {

namespace {

int fail(const Status& s) {
  std::fprintf(stderr, "shardlab grads: %s\n", s.to_string().c_str());
  return s.exit_code();
}

// Where a flat fp32 buffer over `specs` (spec order) holds NaN or ±Inf: how many, in which
// tensors, and the first element of each.
struct NonFinite {
  std::int64_t nan = 0, inf = 0, tensors = 0;
  std::vector<std::string> where;  // "name (k of n, first at [i, j])", at most kListed
  static constexpr std::size_t kListed = 5;
  std::int64_t total() const { return nan + inf; }
};

std::string index_text(std::int64_t flat, const Shape& shape) {
  std::string out;
  for (std::size_t d = shape.size(); d-- > 0;) {
    const std::int64_t i = shape[d] > 0 ? flat % shape[d] : 0;
    flat = shape[d] > 0 ? flat / shape[d] : 0;
    out = std::to_string(i) + (out.empty() ? "" : ", ") + out;
  }
  return "[" + out + "]";
}

// Non-finite values per tensor, and the largest |value| of the finite ones. One integer
// pass over the bits (vectorizable: IEEE magnitudes order like their bit patterns), the
// per-element walk only for tensors that hold a NaN or an infinity.
NonFinite find_non_finite(const std::vector<runtime::model::ParamSpec>& specs, const float* values,
                          double* max_abs = nullptr) {
  NonFinite r;
  std::uint32_t largest = 0;
  std::int64_t offset = 0;
  for (const auto& spec : specs) {
    const std::int64_t n = *checked_numel(spec.shape);  // the specs of a validated config
    const float* v = values + offset;
    offset += n;
    std::uint32_t top = 0, any_bad = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      const std::uint32_t magnitude = std::bit_cast<std::uint32_t>(v[i]) & 0x7fffffffu;
      top = std::max(top, magnitude);
      any_bad |= magnitude >= 0x7f800000u ? 1u : 0u;
    }
    if (any_bad == 0) {
      largest = std::max(largest, top);
      continue;
    }
    std::int64_t bad = 0, first = -1;
    for (std::int64_t i = 0; i < n; ++i) {
      if (std::isfinite(v[i])) {
        largest = std::max(largest, std::bit_cast<std::uint32_t>(v[i]) & 0x7fffffffu);
        continue;
      }
      (std::isnan(v[i]) ? r.nan : r.inf) += 1;
      if (bad++ == 0) first = i;
    }
    ++r.tensors;
    if (r.where.size() < NonFinite::kListed) {
      r.where.push_back(spec.name + " (" + std::to_string(bad) + " of " + std::to_string(n) + ", first at " +
                        index_text(first, spec.shape) + ")");
    }
  }
  if (max_abs != nullptr) *max_abs = std::bit_cast<float>(largest);
  return r;
}

std::string describe(const NonFinite& f, std::int64_t of, std::size_t tensors) {
  std::string list;
  for (const auto& w : f.where) list += (list.empty() ? "" : ", ") + w;
  if (static_cast<std::int64_t>(f.where.size()) < f.tensors) list += ", ...";
  return std::to_string(f.total()) + " of " + std::to_string(of) + " values (" + std::to_string(f.nan) + " NaN, " +
         std::to_string(f.inf) + " ±Inf) in " + std::to_string(f.tensors) + " of " + std::to_string(tensors) +
         " tensors: " + list;
}

// `bert`'s dropout masks for `rows` × `seq` at `ctx`, drawn on `host` and written to `path`
// (safetensors, F32).
Status write_dropout_masks(runtime::device::Device& host, const std::string& path, const runtime::model::Bert& bert,
                           const runtime::model::ForwardContext& ctx, std::int64_t rows, std::int64_t seq) {
  SHARDLAB_ASSIGN_OR_RETURN(auto masks, bert.dropout_masks(host, ctx, rows, seq));
  std::vector<std::vector<float>> values;
  std::vector<runtime::io::TensorRef> refs;
  values.reserve(masks.size());
  for (const auto& [name, mask] : masks) {
    SHARDLAB_ASSIGN_OR_RETURN(std::vector<float> v, runtime::device::values_to_host<float>(host, mask));
    values.push_back(std::move(v));
    refs.push_back({name, DType::kF32, mask.shape(), std::as_bytes(std::span<const float>(values.back()))});
  }
  return runtime::io::write_safetensors(path, refs, {{"seed", std::to_string(ctx.seed)}, {"step", "0"}})
      .with_context("--dropout-masks");
}

// INVALID_ARGUMENT naming `flag` unless `path`'s folder exists and this process may
// write in it: checked before the step, so a typo in an output path ends the command at
// once, with exit 2, instead of after the gradients were computed.
Status check_writable(const std::string& flag, const std::string& path) {
  const std::filesystem::path folder = std::filesystem::path(path).parent_path();
  const std::string shown = folder.empty() ? std::string(".") : folder.string();
  std::error_code ec;
  if (!std::filesystem::is_directory(folder.empty() ? "." : folder, ec)) {
    return Status::invalid_argument(flag + " " + path + ": the folder " + shown +
                                    " does not exist; allowed: a file in an existing, writable folder");
  }
  if (::access(shown.c_str(), W_OK) != 0) {
    return Status::invalid_argument(flag + " " + path + ": cannot write in " + shown + " (" + std::strerror(errno) +
                                    "); allowed: a file in an existing, writable folder");
  }
  return Status::ok();
}

}  // namespace

int grads_command(const GradsArgs& a) {
  using namespace runtime;
  if (a.dtype != "fp32" && a.dtype != "bf16") {
    return fail(Status::invalid_argument("--dtype must be fp32 or bf16, got '" + a.dtype + "'"));
  }
  if (a.world_size > sim::kMaxNumericsRanks) {
    return fail(Status::invalid_argument("--world-size " + std::to_string(a.world_size) + " is above the limit of " +
                                         std::to_string(sim::kMaxNumericsRanks) +
                                         " simulated ranks (each is a host thread holding real tensors); allowed: 1 "
                                         "to " +
                                         std::to_string(sim::kMaxNumericsRanks)));
  }
  auto hf = model::read_bert_config(a.model_dir + "/config.json");
  if (!hf.is_ok()) return fail(hf.status());
  if (a.dropout) {
    if (!(*a.dropout >= 0.0f && *a.dropout < 1.0f)) {
      return fail(Status::invalid_argument("--dropout must be in [0, 1), got " + std::to_string(*a.dropout)));
    }
    hf->config.hidden_dropout_prob = hf->config.attention_probs_dropout_prob = *a.dropout;
  }
  train::FsdpTrainOptions o;
  o.model_kind = train::ModelKind::kBert;
  o.bert.config = hf->config;
  o.bert.head = hf->head;
  if (a.dtype == "bf16") {
    o.bert.compute_dtype = DType::kBF16;
    o.fsdp.param_dtype = DType::kBF16;
  }
  if (!a.dropout_masks.empty() && o.bert.config.hidden_dropout_prob <= 0.0f &&
      o.bert.config.attention_probs_dropout_prob <= 0.0f) {
    return fail(Status::invalid_argument("--dropout-masks " + a.dropout_masks +
                                         ": the step draws no dropout mask (hidden_dropout_prob and "
                                         "attention_probs_dropout_prob are 0); give --dropout P with P in (0, 1)"));
  }
  for (const auto& [flag, path] : {std::pair{"--out", a.out}, std::pair{"--dropout-masks", a.dropout_masks}}) {
    if (path.empty()) continue;
    if (Status s = check_writable(flag, path); !s.is_ok()) return fail(s);
  }
  if (Status s = train::check_numerics_host_memory(o, train::host_memory_bytes()); !s.is_ok()) return fail(s);
  // The batch, read once on the host; each rank copies its rows.
  device::cpu::CpuDevice host;
  model::Bert probe(o.bert);
  auto batch = model::read_bert_batch(a.inputs, probe, host);
  if (!batch.is_ok()) return fail(batch.status());
  const std::int64_t B = batch->rows, T = batch->get("input_ids")->dim(1);
  if (B % a.world_size != 0) {
    return fail(Status::invalid_argument("the batch in " + a.inputs + " has B = " + std::to_string(B) +
                                         " rows, which do not split evenly over --world-size " +
                                         std::to_string(a.world_size) + "; use a world size dividing " +
                                         std::to_string(B)));
  }
  o.bert.seq_len = T;
  if (!a.dropout_masks.empty()) {
    // The step is step 0 of a run seeded --seed, its batch rows 0..B-1: the masks of that
    // forward, whichever rank draws each row.
    if (Status s = write_dropout_masks(host, a.dropout_masks, probe, model::ForwardContext{a.seed, 0, 0, true}, B, T);
        !s.is_ok()) {
      return fail(s);
    }
  }
  // Weights.
  const auto specs = model::bert_param_specs(o.bert.config, o.bert.head);
  const std::int64_t total = model::total_numel(specs);
  // The weights are read straight into the buffer training starts from (no copies).
  auto initial = std::make_shared<std::vector<float>>(static_cast<std::size_t>(total));
  {
    const Tensor params =
        Tensor::host_floats(initial->data(), total, MemoryCategory::kParameters, "checkpoint", "cpu:0");
    model::FlatParamAccess views(specs, params, params);
    if (Status s = model::load_bert_weights(a.model_dir + "/model.safetensors", specs, views.params()); !s.is_ok()) {
      return fail(s);
    }
  }
  // Weights with NaN or ±Inf compute (as in PyTorch) but explain a non-finite result below.
  const NonFinite bad_weights = find_non_finite(specs, initial->data());
  o.initial_params = initial;
  // Only the gradients are wanted: no update after them, no gather of the parameters.
  o.skip_last_optimizer_step = true;
  o.gather_params = false;
  o.global_batch = B;
  o.steps = 1;
  o.seed = a.seed;
  o.wrap = train::WrapPolicy::kByClass;
  o.optimizer.kind = optim::OptimizerConfig::Kind::kSgd;  // set up, never stepped
  // PyTorch FSDP runs NO_SHARD whatever strategy it is given when the world size is 1
  // (with a warning): one rank has nothing to shard, and the unsharded copies and the
  // reduce-scatter would only cost memory and passes. The gradients are the same bits.
  const bool switched = a.world_size == 1 && a.strategy != fsdp::ShardingStrategy::kNoShard;
  o.fsdp.strategy = switched ? fsdp::ShardingStrategy::kNoShard : a.strategy;
  if (fsdp::is_hybrid(o.fsdp.strategy)) {
    o.fsdp.devices_per_node = a.devices_per_node > 0 ? a.devices_per_node : std::max(1, a.world_size / 2);
  }
  const model::Batch& full = *batch;
  o.data = [&full](device::Device& dev, std::int64_t, std::int64_t first, std::int64_t rows) {
    return model::slice_batch(full, dev, first, rows);
  };
  if (Status s = train::validate(o, a.world_size); !s.is_ok()) return fail(s);

  // The step's wall time (forward, backward, gradient reduction; first rank in to last
  // out), printed for benchmarks that compare the numerics alone (bench/vs_pytorch.py).
  using WallClock = std::chrono::steady_clock;
  std::mutex step_mu;
  WallClock::time_point step_begin = WallClock::time_point::max(), step_end = WallClock::time_point::min();
  o.on_marker = [&](train::TrainMarker m, int) {
    const auto now = WallClock::now();
    std::lock_guard<std::mutex> lock(step_mu);
    if (m == train::TrainMarker::kStepBegin) step_begin = std::min(step_begin, now);
    if (m == train::TrainMarker::kStepEnd) step_end = std::max(step_end, now);
  };
  sim::WorldOptions wo;
  wo.world_size = a.world_size;
  // One step: no block is used twice, so huge pages would only make the first touches
  // dearer (CpuDevice::set_huge_pages).
  wo.host_huge_pages = false;
  sim::World world(wo);
  train::FsdpTrainResult result;
  // Each rank gets its own copy of the options, holding the only references to the
  // weights read: they are freed once every rank has built its model, before the step,
  // which then reuses their pages (FsdpTrainOptions::initial_params).
  std::vector<train::FsdpTrainOptions> rank_options(static_cast<std::size_t>(a.world_size), o);
  o.initial_params.reset();
  initial.reset();
  const auto results = world.run([&](sim::RankContext& ctx) -> Status {
    SHARDLAB_ASSIGN_OR_RETURN(train::FsdpTrainResult r,
                              train::train_fsdp(ctx.comm, ctx.device, ctx.clock,
                                                std::move(rank_options[static_cast<std::size_t>(ctx.rank)])));
    if (ctx.rank == 0) result = std::move(r);
    return Status::ok();
  });
  for (std::size_t r = 0; r < results.size(); ++r) {
    if (!results[r].status.is_ok()) return fail(results[r].status.with_context("rank " + std::to_string(r)));
  }
  // Write the gradients under their Hugging Face names.
  const Tensor grads =
      Tensor::host_floats(result.last_grads.data(), static_cast<std::int64_t>(result.last_grads.size()),
                          MemoryCategory::kGradients, "grads", "cpu:0");
  model::FlatParamAccess out_views(specs, grads, grads);
  char loss[64];
  std::snprintf(loss, sizeof loss, "%.9g", result.losses.at(0));
  if (Status s = model::save_bert_tensors(a.out, specs, out_views.params(), {{"loss", loss}}); !s.is_ok())
    return fail(s);
  // A non-finite loss or gradient is a failed result (exit 3), said with how many and where;
  // the file is still written, for inspection.
  double max_abs = 0;
  const NonFinite bad_grads = find_non_finite(specs, result.last_grads.data(), &max_abs);
  const double loss_value = result.losses.at(0);
  if (bad_grads.total() > 0 || !std::isfinite(loss_value)) {
    std::fprintf(stderr, "shardlab grads: non-finite result (gradients written to %s for inspection):\n",
                 a.out.c_str());
    if (!std::isfinite(loss_value)) std::fprintf(stderr, "  loss: %s\n", loss);
    if (bad_grads.total() > 0) {
      std::fprintf(stderr, "  gradients: %s\n", describe(bad_grads, total, specs.size()).c_str());
    }
    if (bad_weights.total() > 0) {
      std::fprintf(stderr, "  cause: the weights in %s/model.safetensors are not finite: %s\n", a.model_dir.c_str(),
                   describe(bad_weights, total, specs.size()).c_str());
    }
    std::vector<std::int64_t> targets(probe.loss_term_weights().size(), 0);
    if (auto counted = probe.count_targets(*batch); counted.is_ok()) targets = *counted;
    if (std::any_of(targets.begin(), targets.end(), [](std::int64_t n) { return n == 0; })) {
      std::fprintf(stderr,
                   "  cause: the batch in %s has no targets (every label ignored, e.g. -100): the mean "
                   "cross-entropy over no targets is NaN, as in PyTorch\n",
                   a.inputs.c_str());
    }
    return 3;
  }
  if (!a.quiet) {
    std::printf("shardlab grads: %s (%s, %lld parameters) · batch %lld × %lld · %d simulated rank%s, FSDP %s, %s\n",
                std::string(model::bert_architecture_name(o.bert.head)).c_str(), a.model_dir.c_str(),
                static_cast<long long>(total), static_cast<long long>(B), static_cast<long long>(T), a.world_size,
                a.world_size == 1 ? "" : "s", std::string(fsdp::strategy_name(o.fsdp.strategy)).c_str(),
                a.dtype.c_str());
    if (switched) {
      std::printf("note: FSDP runs NO_SHARD instead of %s since the world size is 1, as PyTorch FSDP does\n",
                  std::string(fsdp::strategy_name(a.strategy)).c_str());
    }
    std::printf("loss %s · max |grad| %.6g · %zu gradient tensors written to %s\n", loss, max_abs, specs.size(),
                a.out.c_str());
    std::printf("forward + backward + gradient reduction: %.3f s wall\n",
                std::chrono::duration<double>(step_end - step_begin).count());
  }
  return 0;
}

}  // namespace shardlab::cli
