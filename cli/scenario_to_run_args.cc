#include "cli/scenario_to_run_args.h"

#include <cmath>
#include <cstdio>
#include <memory>

#include "cli/backends.h"
#include "cli/run_timing.h"
#include "runtime/device/cpu/device.h"
#include "runtime/fsdp/options.h"
#include "runtime/io/sha256.h"
#include "runtime/model/bert_io.h"
#include "sim/engine/world.h"
#include "sim/models/device/profiles.h"
#include "sim/models/network/network.h"

namespace shardlab::cli {

namespace {

Status refuse(const Scenario& s, const std::string& key, const std::string& what) {
  return Status::invalid_argument(s.where(key).to_string() + ": " + key + ": " + what);
}

Result<DType> dtype_of(const Scenario& s, const std::string& key, DType dtype) {
  if (dtype == DType::kF16) {
    // PyTorch trains fp16 only with a ShardedGradScaler (dynamic loss scale, steps skipped
    // on inf/nan), which shardlab does not model; refusing here makes `validate` refuse
    // what `run` could not do.
    return refuse(s, key,
                  "fp16 needs a gradient scaler (PyTorch's ShardedGradScaler: dynamic loss scaling, "
                  "steps skipped on inf/nan), which shardlab does not model; allowed: fp32, bf16 (bf16 "
                  "needs no scaler: it has fp32's exponent range)");
  }
  return dtype;
}

}  // namespace

Status numerics_world_too_big(int world_size) {
  return Status::invalid_argument("a numerics world of " + std::to_string(world_size) +
                                  " simulated ranks is above the limit of " + std::to_string(sim::kMaxNumericsRanks) +
                                  " (each rank is a host thread holding real tensors; NOTE [Numerics world size] in "
                                  "sim/engine/world.h); allowed: 1 to " +
                                  std::to_string(sim::kMaxNumericsRanks) +
                                  " ranks, or world.mode: timing (up to 65536 ranks, no values)");
}

std::string torch_device_of(const std::string& backend, const sim::DeviceProfile& device) {
  const BackendInfo& b = cli::backend(backend);
  return b.torch_device.empty() ? device.torch_device : std::string(b.torch_device);
}

std::string device_id_of_rank(const std::string& device_id, const std::string& torch_device, int rank,
                              int devices_per_node) {
  if (device_id != "local_rank") return device_id;
  return torch_device + ":" + std::to_string(devices_per_node > 0 ? rank % devices_per_node : rank);
}

Status check_device_id(const std::string& device_id, const std::string& torch_device, int world, int dpn) {
  if (device_id.empty()) return Status::ok();
  const runtime::device::DeviceId compute{torch_device,
                                          torch_device == "cpu" ? runtime::device::DeviceId::kNoIndex : 0};
  Status first = Status::ok();
  int first_rank = -1, last_rank = -1, failing = 0;
  for (int r = 0; r < world; ++r) {
    const Status s =
        runtime::fsdp::resolve_device_id(device_id_of_rank(device_id, torch_device, r, dpn), compute, r).status();
    if (s.is_ok()) continue;
    if (failing++ == 0) {
      first = s;
      first_rank = r;
    }
    last_rank = r;
  }
  if (failing == 0) return Status::ok();
  std::string more;
  if (failing > 1) {
    more = "; " + std::to_string(failing) + " of " + std::to_string(world) + " ranks fail (ranks " +
           std::to_string(first_rank) + (failing == last_rank - first_rank + 1 ? "-" : " … ") +
           std::to_string(last_rank) + ")";
  }
  const std::string why = compute.type == "hpu" ? "; every Gaudi process sees its own card as hpu:0" : "";
  return Status::invalid_argument(first.message() + more + why);
}

namespace {

// What a timing run cannot do.
Status check_mode(const Scenario& s, RunArgs& a) {
  if (a.mode == RunMode::kTiming && !s.world.backend->simulated) {
    return refuse(s, "world.mode",
                  "timing mode is the simulator's (phantom tensors); run with --backend sim, or use "
                  "mode: numerics on " +
                      std::string(s.world.backend->name));
  }
  if (a.mode == RunMode::kTiming) {
    // Checks of values: timing mode has none (losses and gradients are NaN).
    const struct {
      const char* key;
      bool given;
      const char* off;  // the value that removes the check
    } value_checks[] = {{"expect.grads_match_unsharded", s.expect.grads_match_unsharded.has_value(), "false"},
                        {"expect.final_loss_below", s.expect.final_loss_below.has_value(), "null"}};
    for (const auto& c : value_checks) {
      if (c.given) {
        return refuse(s, c.key,
                      std::string("checks values, and timing mode has none (phantom tensors); allowed in "
                                  "timing mode: expect.max_peak_memory_per_rank, min_samples_per_s, "
                                  "max_step_time_s — remove it (--set ") +
                          c.key + "=" + c.off + ") or run with world.mode: numerics");
      }
    }
  }
  return Status::ok();
}

// The device and host profiles, the software stack and the network (with its link faults).
Status set_platform(const Scenario& s, RunArgs& a) {
  auto device = sim::load_device_profile(s.world.device);
  if (!device.is_ok())
    return Status::invalid_argument(s.where("world.device").to_string() + ": " + device.status().message());
  a.device = *device;
  if (s.world.offload_host != "host") {
    auto host = sim::load_device_profile(s.world.offload_host);
    if (!host.is_ok()) {
      return Status::invalid_argument(s.where("world.offload_host").to_string() + ": " + host.status().message());
    }
    host->host_link_bytes_per_s = 0;  // it is the host
    a.offload_host = *host;
  }
  auto stack = sim::load_stack(s.world.stack);
  if (!stack.is_ok())
    return Status::invalid_argument(s.where("world.stack").to_string() + ": " + stack.status().message());
  a.stack = *stack;
  sim::NetworkSpec net;
  net.topology = s.world.topology;
  net.nodes = s.world.nodes;
  net.devices_per_node = s.world.devices_per_node;
  net.model = s.world.network_model;
  net.algorithm = s.world.collective_algorithm;
  for (const auto& f : s.faults) {
    if (f.kind != sim::FaultKind::kLinkDown && f.kind != sim::FaultKind::kLinkDegrade) continue;
    sim::LinkFault lf;
    lf.link = f.link;
    lf.start = f.time_ms >= 0 ? static_cast<Nanos>(std::llround(f.time_ms * 1e6)) : 0;
    lf.factor = f.kind == sim::FaultKind::kLinkDown ? 0.0 : f.factor;
    net.link_faults.push_back(lf);
  }
  a.network_spec = net;
  auto network = sim::make_network(net);
  if (!network.is_ok()) {
    // A bad link name is the fault's problem, anything else the topology's.
    std::string where = s.where("world.topology").to_string();
    for (const auto& f : s.faults)
      if (!f.link.empty() && network.status().message().find(f.link) != std::string::npos) where = f.pos.to_string();
    return Status::invalid_argument(where + ": " + network.status().message());
  }
  a.network = *network;
  return Status::ok();
}

// The fault plan the simulator injects.
Status set_faults(const Scenario& s, RunArgs& a) {
  if (!s.faults.empty()) {
    if (!s.world.backend->simulated) {
      return refuse(s, "world.backend",
                    "faults are injected by the simulator; run with --backend sim (or remove faults)");
    }
    auto plan = std::make_shared<sim::FaultPlan>();
    plan->seed = s.seed;
    for (const auto& f : s.faults) {
      sim::Fault x;
      x.kind = *f.kind;  // validate() refused a fault without a kind
      x.rank = f.rank;
      x.step = f.step >= 1 ? f.step - 1 : -1;  // the scenario counts steps from 1
      x.time = f.time_ms >= 0 ? static_cast<Nanos>(std::llround(f.time_ms * 1e6)) : -1;
      x.factor = f.factor;
      x.collective = f.collective;
      x.integrity_check = f.integrity_check;
      x.unit = f.unit;
      x.byte_offset = f.offset;
      x.origin = f.pos.to_string();
      x.link = f.link;
      plan->faults.push_back(std::move(x));
    }
    if (a.mode == RunMode::kTiming) SHARDLAB_RETURN_IF_ERROR(check_timing_faults(*plan));
    a.faults = std::move(plan);
  }
  return Status::ok();
}

Status set_checkpoint(const Scenario& s, RunArgs& a) {
  auto& o = a.train;
  // checkpoint.dir is anchored like every path (NOTE [Relative paths] in cli/scenario.h).
  o.checkpoint.dir = s.checkpoint.dir;
  o.checkpoint.every_steps = s.checkpoint.every_steps;
  o.checkpoint.resume = s.checkpoint.resume;
  o.checkpoint.resume_if_present = s.checkpoint.resume_if_present;
  o.checkpoint.run =
      nlohmann::json{{"scenario", s.name}, {"config_sha256", runtime::io::sha256_hex(to_yaml(s))}}.dump();
  o.checkpoint.type = s.fsdp.state_dict_type;
  return Status::ok();
}

// The model, and its initial weights when a file gives them.
Status set_model(const Scenario& s, RunArgs& a) {
  auto& o = a.train;
  // Model.
  if (!s.model.config.empty()) {
    auto hf = runtime::model::read_bert_config(s.model.config, s.model.head);
    if (!hf.is_ok())
      return Status::invalid_argument(s.where("model.config").to_string() + ": " + hf.status().message());
    o.model_kind = runtime::train::ModelKind::kBert;
    o.bert.config = hf->config;
    o.bert.head = s.model.head;
    a.model_name = s.model.config;
  } else if (s.model.preset == "mlp") {
    o.model_kind = runtime::train::ModelKind::kMlp;
    a.model_name = "mlp";
  } else {
    auto preset = runtime::model::bert_preset(s.model.preset);
    if (!preset.is_ok()) return refuse(s, "model.preset", preset.status().message());
    o.model_kind = runtime::train::ModelKind::kBert;
    o.bert.config = *preset;
    o.bert.head = s.model.head;
    a.model_name = s.model.preset;
  }
  o.bert.seq_len = s.data.seq_len;
  o.bert.activation_checkpointing = s.fsdp.activation_checkpointing;
  if (s.model.weights != "random") {
    if (o.model_kind != runtime::train::ModelKind::kBert)
      return refuse(s, "model.weights", "weights need a BERT model");
    const auto specs = runtime::model::bert_param_specs(o.bert.config, o.bert.head);
    const std::int64_t total = runtime::model::total_numel(specs);
    runtime::device::cpu::CpuDevice host;
    SHARDLAB_ASSIGN_OR_RETURN(Tensor p, host.empty({total}, DType::kF32, MemoryCategory::kParameters, "weights"));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor g, host.empty({total}, DType::kF32, MemoryCategory::kOther, "scratch"));
    runtime::model::FlatParamAccess views(specs, p, g);
    if (Status st = runtime::model::load_bert_weights(s.model.weights, specs, views.params()); !st.is_ok()) {
      return Status::invalid_argument(s.where("model.weights").to_string() + ": " + st.message());
    }
    o.initial_params = std::make_shared<const std::vector<float>>(p.data<float>(), p.data<float>() + total);
  }
  return Status::ok();
}

// Token batches from a file (synthetic data needs nothing here).
Status set_data(const Scenario& s, RunArgs& a) {
  auto& o = a.train;
  if (s.data.kind == DataKind::kFile) {
    if (o.model_kind != runtime::train::ModelKind::kBert) {
      return refuse(s, "data.kind", "token batches from a file need a BERT model (model.preset or model.config)");
    }
    if (s.data.path.empty()) return refuse(s, "data.kind", "data.kind is file but data.path is not set");
    // The file is read once; every step takes its global batch from it, cycling through
    // its rows (global row i of step k is file row (k·G + i) mod B).
    struct FileData {
      runtime::device::cpu::CpuDevice host;
      runtime::model::Batch batch;
    };
    auto data = std::make_shared<FileData>();
    const runtime::model::Bert bert(o.bert);
    auto batch = runtime::model::read_bert_batch(s.data.path, bert, data->host);
    if (!batch.is_ok())
      return Status::invalid_argument(s.where("data.path").to_string() + ": " + batch.status().message());
    data->batch = std::move(*batch);
    SHARDLAB_ASSIGN_OR_RETURN(Tensor ids, data->batch.get("input_ids"));
    const std::int64_t t = ids.shape()[1];
    if (s.positions.count("data.seq_len") != 0 && s.data.seq_len != t) {
      return refuse(s, "data.seq_len",
                    "is " + std::to_string(s.data.seq_len) + " but the batch file " + s.data.path +
                        " has sequences of " + std::to_string(t) + " tokens; remove data.seq_len or set it to " +
                        std::to_string(t));
    }
    o.bert.seq_len = t;
    const std::int64_t global = s.data.batch_size_per_rank * a.world_size;
    o.data = [data, global](runtime::device::Device& dev, std::int64_t step, std::int64_t first, std::int64_t rows) {
      return runtime::model::slice_batch(data->batch, dev, (step * global + first) % data->batch.rows, rows);
    };
  }
  return Status::ok();
}

Status set_training(const Scenario& s, RunArgs& a) {
  auto& o = a.train;
  o.steps = s.train.steps;
  o.grad_accumulation = s.train.grad_accumulation;
  o.global_batch = s.data.batch_size_per_rank * a.world_size;
  o.max_grad_norm = s.train.max_grad_norm;
  o.optimizer.kind = s.train.optimizer.name;
  o.optimizer.lr = static_cast<float>(s.train.optimizer.lr);
  o.optimizer.weight_decay = static_cast<float>(s.train.optimizer.weight_decay);
  o.optimizer.beta1 = static_cast<float>(s.train.optimizer.beta1);
  o.optimizer.beta2 = static_cast<float>(s.train.optimizer.beta2);
  o.optimizer.eps = static_cast<float>(s.train.optimizer.eps);
  o.optimizer.momentum = static_cast<float>(s.train.optimizer.momentum);
  return Status::ok();
}

Status set_fsdp(const Scenario& s, RunArgs& a) {
  auto& o = a.train;
  o.fsdp.strategy = s.fsdp.sharding_strategy;
  o.fsdp.backward_prefetch = s.fsdp.backward_prefetch;
  o.fsdp.version = s.fsdp.version;
  o.fsdp.reshard_after_forward_size = s.fsdp.reshard_after_forward_size;
  o.fsdp.forward_prefetch_units = s.fsdp.forward_prefetch_units;
  o.fsdp.backward_prefetch_units = s.fsdp.backward_prefetch_units;
  o.fsdp.devices_per_node = s.world.devices_per_node;
  o.fsdp.collective_timeout = static_cast<Nanos>(std::llround(s.world.collective_timeout_s * 1e9));
  o.fsdp.forward_prefetch = s.fsdp.forward_prefetch;
  o.fsdp.limit_all_gathers = s.fsdp.limit_all_gathers;
  o.fsdp.async_reduction = s.fsdp.async_reduction;
  o.fsdp.sync_module_states = s.fsdp.sync_module_states;
  if (!s.fsdp.device_id.empty()) {
    if (s.fsdp.device_id != "local_rank") {
      auto parsed = runtime::device::DeviceId::parse(s.fsdp.device_id);
      if (!parsed.is_ok() || (parsed->type != "hpu" && parsed->type != "cpu")) {
        return refuse(s, "fsdp.device_id",
                      "'" + s.fsdp.device_id + "' is not a device; allowed: hpu, hpu:N, cpu, or local_rank");
      }
    }
    a.device_id = s.fsdp.device_id;
    a.device_id_where = s.where("fsdp.device_id").to_string() + ": fsdp.device_id: ";
    // `validate` refuses what `run` would (run_command checks again for a --backend override).
    if (Status st = check_device_id(a.device_id, torch_device_of(a.backend, a.device), s.world.world_size(),
                                    s.world.devices_per_node);
        !st.is_ok()) {
      return Status::invalid_argument(a.device_id_where + st.message());
    }
  }
  // PyTorch FSDP1 (FlatParamHandle, align_addresses = use_orig_params) pads between
  // original parameters to 16-byte boundaries only with use_orig_params=True.
  o.fsdp.align_bytes = s.fsdp.use_orig_params ? 16 : 0;
  a.cpu_offload = s.fsdp.cpu_offload;
  if (s.fsdp.auto_wrap_policy == AutoWrapPolicy::kTransformer) {
    o.wrap = runtime::train::WrapPolicy::kByClass;
    o.wrap_classes = s.fsdp.transformer_layer_cls_to_wrap;
  } else if (s.fsdp.auto_wrap_policy == AutoWrapPolicy::kSize) {
    o.wrap = runtime::train::WrapPolicy::kBySize;
    o.min_num_params = s.fsdp.min_num_params;
  } else {
    o.wrap = runtime::train::WrapPolicy::kNone;
  }
  SHARDLAB_ASSIGN_OR_RETURN(o.fsdp.param_dtype,
                            dtype_of(s, "fsdp.mixed_precision.param_dtype", s.fsdp.mixed_precision.param_dtype));
  SHARDLAB_ASSIGN_OR_RETURN(o.fsdp.reduce_dtype,
                            dtype_of(s, "fsdp.mixed_precision.reduce_dtype", s.fsdp.mixed_precision.reduce_dtype));
  // buffer_dtype as PyTorch: unset keeps each buffer's declared dtype.
  if (s.positions.count("fsdp.mixed_precision.buffer_dtype") != 0) {
    SHARDLAB_ASSIGN_OR_RETURN(o.fsdp.buffer_dtype,
                              dtype_of(s, "fsdp.mixed_precision.buffer_dtype", s.fsdp.mixed_precision.buffer_dtype));
  }
  if (s.train.precision == DType::kBF16) {
    o.bert.compute_dtype = DType::kBF16;
    if (o.fsdp.param_dtype == DType::kF32) o.fsdp.param_dtype = DType::kBF16;
  }
  return Status::ok();
}

Status set_expect(const Scenario& s, RunArgs& a) {
  a.oracle_off = s.expect.oracle_off
                     ? "expect.grads_match_unsharded: false at " + s.where("expect.grads_match_unsharded").to_string()
                     : "";
  // Only a tolerance the file states; otherwise the dtypes' (NOTE [Default tolerance]).
  if (s.positions.count("expect.grads_match_unsharded.rtol") != 0) a.rtol = s.expect.grads_match_unsharded->rtol;
  if (s.positions.count("expect.grads_match_unsharded.atol") != 0) a.atol = s.expect.grads_match_unsharded->atol;
  return Status::ok();
}

}  // namespace

Status scenario_to_run_args(const Scenario& s, RunArgs& a) {
  auto& o = a.train;
  a.scenario = s.name;
  a.out_dir = "out/" + s.name;
  a.backend = s.world.backend->name;
  a.mode = s.world.mode;
  SHARDLAB_RETURN_IF_ERROR(check_mode(s, a));
  SHARDLAB_RETURN_IF_ERROR(set_platform(s, a));
  SHARDLAB_RETURN_IF_ERROR(set_faults(s, a));
  SHARDLAB_RETURN_IF_ERROR(set_checkpoint(s, a));
  a.world_size = s.world.world_size();
  if (a.mode == RunMode::kNumerics && backend(a.backend).simulated && a.world_size > sim::kMaxNumericsRanks) {
    const std::string key = s.positions.count("world.nodes") != 0 ? "world.nodes" : "world.devices_per_node";
    return refuse(s, key, numerics_world_too_big(a.world_size).message());
  }
  a.trace_ranks = s.trace.ranks;
  o.seed = s.seed;
  SHARDLAB_RETURN_IF_ERROR(set_model(s, a));
  SHARDLAB_RETURN_IF_ERROR(set_data(s, a));
  SHARDLAB_RETURN_IF_ERROR(set_training(s, a));
  SHARDLAB_RETURN_IF_ERROR(set_fsdp(s, a));
  SHARDLAB_RETURN_IF_ERROR(set_expect(s, a));
  return Status::ok();
}

std::vector<ExpectResult> check_expectations(const Scenario& s, const nlohmann::json& m) {
  std::vector<ExpectResult> out;
  char buf[256];
  const auto& e = s.expect;
  const nlohmann::json oracle = m.value("oracle", nlohmann::json::object());
  if (e.grads_match_unsharded && !oracle.value("ran", true)) {
    // The oracle was turned off (--no-oracle) or cannot run: nothing to check against.
    out.push_back({"grads_match_unsharded", false,
                   "not checked: the unsharded oracle did not run (" + oracle.value("why", std::string("?")) + ")",
                   true});
  } else if (e.grads_match_unsharded) {
    const nlohmann::json g = m.value("grads_match_unsharded", nlohmann::json::object());
    const bool ok = g.value("within_tolerance", false) || g.value("bitwise", false);
    std::snprintf(buf, sizeof buf, "max |Δgrad| %.3g, max |Δparam| %.3g (rtol %.3g, atol %.3g)",
                  g.value("max_grad_diff", NAN), g.value("max_param_diff", NAN), g.value("rtol", NAN),
                  g.value("atol", NAN));
    out.push_back({"grads_match_unsharded", ok, buf});
  }
  if (e.max_peak_memory_per_rank) {
    std::int64_t worst = 0;
    for (const auto& p : m.value("peak_memory_bytes", nlohmann::json::array()))
      worst = std::max(worst, p.get<std::int64_t>());
    out.push_back({"max_peak_memory_per_rank", worst <= *e.max_peak_memory_per_rank,
                   "peak " + format_bytes(worst) + " ≤ " + format_bytes(*e.max_peak_memory_per_rank)});
  }
  if (e.min_samples_per_s) {
    const double v = m.value("samples_per_s", 0.0);
    std::snprintf(buf, sizeof buf, "%.4g samples/s ≥ %.4g", v, *e.min_samples_per_s);
    out.push_back({"min_samples_per_s", v >= *e.min_samples_per_s, buf});
  }
  if (e.max_step_time_s) {
    const double v = m.contains("step_time_s") ? m["step_time_s"].value("median", 0.0) : 0.0;
    std::snprintf(buf, sizeof buf, "median step %.4g s ≤ %.4g s", v, *e.max_step_time_s);
    out.push_back({"max_step_time_s", v <= *e.max_step_time_s, buf});
  }
  if (e.final_loss_below) {
    const auto& loss = m.value("loss", nlohmann::json::array());
    const double v = loss.empty() ? NAN : loss.back().get<double>();
    std::snprintf(buf, sizeof buf, "final loss %.6g < %.6g", v, *e.final_loss_below);
    out.push_back({"final_loss_below", v < *e.final_loss_below, buf});
  }
  return out;
}

}  // namespace shardlab::cli
