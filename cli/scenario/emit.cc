#include "cli/scenario/emit.h"

#include <charconv>
#include <cstdio>
#include <sstream>
#include <type_traits>

#include "cli/scenario.h"
#include "cli/scenario/messages.h"
#include "cli/scenario/values.h"

namespace shardlab::cli::scenario_detail {

std::string yaml_string(const std::string& v) {
  std::string out = "\"";
  for (unsigned char c : v) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default: append_printable(out, c);
    }
  }
  return out + "\"";
}

std::string yaml_number(double v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

const char* yaml_bool(bool v) { return v ? "true" : "false"; }

}  // namespace shardlab::cli::scenario_detail

namespace shardlab::cli {

using namespace scenario_detail;

std::string to_yaml(const Scenario& s) {
  std::ostringstream o;
  o << "name: " << yaml_string(s.name) << "\n";
  o << "description: " << yaml_string(s.description) << "\n";
  o << "seed: " << s.seed << "\n";
  o << "model:\n";
  o << "  preset: " << s.model.preset << "\n";
  o << "  config: " << yaml_string(s.model.config) << "\n";
  o << "  head: " << runtime::model::bert_head_name(s.model.head) << "\n";
  o << "  weights: " << yaml_string(s.model.weights) << "\n";
  o << "data:\n";
  o << "  kind: " << data_kind_name(s.data.kind) << "\n";
  o << "  path: " << yaml_string(s.data.path) << "\n";
  o << "  batch_size_per_rank: " << s.data.batch_size_per_rank << "\n";
  o << "  seq_len: " << s.data.seq_len << "\n";
  o << "train:\n";
  o << "  steps: " << s.train.steps << "\n";
  o << "  grad_accumulation: " << s.train.grad_accumulation << "\n";
  o << "  max_grad_norm: " << yaml_number(s.train.max_grad_norm) << "\n";
  o << "  precision: " << dtype_name(s.train.precision) << "\n";
  o << "  optimizer:\n";
  o << "    name: " << runtime::optim::optimizer_name(s.train.optimizer.name) << "\n";
  o << "    lr: " << yaml_number(s.train.optimizer.lr) << "\n";
  o << "    weight_decay: " << yaml_number(s.train.optimizer.weight_decay) << "\n";
  o << "    betas: [" << yaml_number(s.train.optimizer.beta1) << ", " << yaml_number(s.train.optimizer.beta2) << "]\n";
  o << "    eps: " << yaml_number(s.train.optimizer.eps) << "\n";
  o << "    momentum: " << yaml_number(s.train.optimizer.momentum) << "\n";
  o << "fsdp:\n";
  o << "  sharding_strategy: " << runtime::fsdp::strategy_name(s.fsdp.sharding_strategy) << "\n";
  o << "  auto_wrap_policy: " << auto_wrap_policy_name(s.fsdp.auto_wrap_policy) << "\n";
  o << "  transformer_layer_cls_to_wrap: [";
  for (std::size_t i = 0; i < s.fsdp.transformer_layer_cls_to_wrap.size(); ++i) {
    o << (i ? ", " : "") << yaml_string(s.fsdp.transformer_layer_cls_to_wrap[i]);
  }
  o << "]\n";
  o << "  min_num_params: " << s.fsdp.min_num_params << "\n";
  o << "  backward_prefetch: " << runtime::fsdp::prefetch_name(s.fsdp.backward_prefetch) << "\n";
  o << "  forward_prefetch: " << yaml_bool(s.fsdp.forward_prefetch) << "\n";
  o << "  limit_all_gathers: " << yaml_bool(s.fsdp.limit_all_gathers) << "\n";
  o << "  async_reduction: " << yaml_bool(s.fsdp.async_reduction) << "\n";
  o << "  use_orig_params: " << yaml_bool(s.fsdp.use_orig_params) << "\n";
  if (!s.fsdp.device_id.empty()) o << "  device_id: " << yaml_string(s.fsdp.device_id) << "\n";
  o << "  sync_module_states: " << yaml_bool(s.fsdp.sync_module_states) << "\n";
  o << "  cpu_offload: " << yaml_bool(s.fsdp.cpu_offload) << "\n";
  o << "  activation_checkpointing: " << yaml_bool(s.fsdp.activation_checkpointing) << "\n";
  if (s.fsdp.version != 1) o << "  fsdp_version: " << s.fsdp.version << "\n";
  o << "  state_dict_type: " << runtime::fsdp::state_dict_type_name(s.fsdp.state_dict_type) << "\n";
  o << "  mixed_precision:\n";
  o << "    param_dtype: " << dtype_name(s.fsdp.mixed_precision.param_dtype) << "\n";
  o << "    reduce_dtype: " << dtype_name(s.fsdp.mixed_precision.reduce_dtype) << "\n";
  o << "    buffer_dtype: " << dtype_name(s.fsdp.mixed_precision.buffer_dtype) << "\n";
  o << "world:\n";
  o << "  backend: " << s.world.backend->name << "\n";
  o << "  mode: " << run_mode_name(s.world.mode) << "\n";
  o << "  nodes: " << s.world.nodes << "\n";
  o << "  devices_per_node: " << s.world.devices_per_node << "\n";
  o << "  device: " << yaml_string(s.world.device) << "\n";
  o << "  topology: " << yaml_string(s.world.topology) << "\n";
  o << "  offload_host: " << yaml_string(s.world.offload_host) << "\n";
  if (s.world.stack != "ideal") o << "  stack: " << yaml_string(s.world.stack) << "\n";
  o << "  collective_timeout_s: " << yaml_number(s.world.collective_timeout_s) << "\n";
  o << "  network_model: " << sim::network_model_name(s.world.network_model) << "\n";
  o << "  collective_algorithm: " << sim::algorithm_name(s.world.collective_algorithm) << "\n";
  if (s.faults.empty()) {
    o << "faults: []\n";
  } else {
    o << "faults:\n";
    for (const auto& f : s.faults) {
      o << "  - {kind: " << yaml_string(f.kind ? std::string(sim::fault_kind_name(*f.kind)) : std::string());
      if (f.rank >= 0) o << ", rank: " << f.rank;
      if (f.step >= 0) o << ", step: " << f.step;
      if (f.time_ms >= 0) o << ", time_ms: " << yaml_number(f.time_ms);
      if (!f.link.empty()) o << ", link: " << yaml_string(f.link);
      if (f.collective >= 0) o << ", collective: " << f.collective;
      if (f.unit >= 0) o << ", unit: " << f.unit << ", offset: " << f.offset;
      if (f.kind == sim::FaultKind::kCorrupt) o << ", integrity_check: " << yaml_bool(f.integrity_check);
      if (f.kind == sim::FaultKind::kStraggler || f.kind == sim::FaultKind::kLinkDegrade) {
        o << ", factor: " << yaml_number(f.factor);
      }
      o << "}\n";
    }
  }
  if (!s.trace.ranks.empty()) o << "trace:\n  ranks: \"" << show_ranks(s.trace.ranks) << "\"\n";
  o << "checkpoint:\n";
  o << "  dir: " << yaml_string(s.checkpoint.dir) << "\n";
  o << "  every_steps: " << s.checkpoint.every_steps << "\n";
  o << "  resume: " << (s.checkpoint.resume_if_present ? "if_present" : yaml_bool(s.checkpoint.resume)) << "\n";
  o << "expect:\n";
  // Only the keys the file states: an unstated one takes the dtypes' default on replay too.
  const bool rtol_stated = s.positions.count("expect.grads_match_unsharded.rtol") != 0;
  const bool atol_stated = s.positions.count("expect.grads_match_unsharded.atol") != 0;
  if (s.expect.grads_match_unsharded && !rtol_stated && !atol_stated) {
    o << "  grads_match_unsharded: true  # no tolerance stated: bitwise in the simulator, else the dtypes' default\n";
  } else if (s.expect.grads_match_unsharded) {
    o << "  grads_match_unsharded: {";
    if (rtol_stated) o << "rtol: " << yaml_number(s.expect.grads_match_unsharded->rtol) << (atol_stated ? ", " : "");
    if (atol_stated) o << "atol: " << yaml_number(s.expect.grads_match_unsharded->atol);
    o << "}\n";
  } else if (s.expect.oracle_off) {
    o << "  grads_match_unsharded: false\n";
  } else {
    o << "  # grads_match_unsharded unset: the oracle runs, at the tolerance the run's dtypes imply\n";
  }
  auto opt = [&](const char* key, const auto& v) {
    o << "  " << key << ": ";
    if (v) {
      if constexpr (std::is_same_v<std::decay_t<decltype(*v)>, double>) {
        o << yaml_number(*v);
      } else {
        o << *v;
      }
    } else {
      o << "null";
    }
    o << "\n";
  };
  opt("max_peak_memory_per_rank", s.expect.max_peak_memory_per_rank);
  opt("min_samples_per_s", s.expect.min_samples_per_s);
  opt("max_step_time_s", s.expect.max_step_time_s);
  opt("final_loss_below", s.expect.final_loss_below);
  return o.str();
}

}  // namespace shardlab::cli
