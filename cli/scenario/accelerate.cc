#include "cli/scenario/accelerate.h"

#include <algorithm>

#include "cli/scenario/document.h"
#include "cli/scenario/messages.h"
#include "cli/scenario/schema.h"
#include "cli/scenario/text.h"
#include "cli/scenario/values.h"

namespace shardlab::cli::scenario_detail {

// NOTE [accelerate config files]
// --fsdp-config takes either
//  - a JSON object of accelerate's fsdp_* keys (optimum-habana's and the Trainer's
//    fsdp_config), flat or nested under "fsdp_config"; the Trainer's other keys beside it
//    are training arguments, named as ignored; or
//  - the YAML file `accelerate config` writes (a file that does not start with '{'): its
//    fsdp_config section as above, and its top-level keys as follows.
// Honoured: distributed_type (must be FSDP: another value describes a run without FSDP, exit
// 2), mixed_precision (no: fp32; bf16: train.precision bf16; fp16 and fp8 exit 2, as shardlab
// models neither a gradient scaler nor fp8), num_machines (world.nodes) and num_processes
// (world.devices_per_node = num_processes / num_machines; must divide). Ignored, and named
// on stdout: the launcher's settings (where processes start and how they meet:
// compute_environment, machine_rank, main_process_ip/port, rdzv_backend, gpu_ids, use_cpu,
// tpu_*, dynamo …), which do not change what a step computes, and keys shardlab accepts
// without an effect (fsdp_cpu_ram_efficient_loading), and other unknown keys (the Trainer's
// training arguments beside its fsdp_config, keys of a newer accelerate) — but a near-miss of
// a key it honours (mixed_precison) is refused, exit 2. Every value is checked as a scenario
// value is, and errors point into the file (file:line:col).
//
// NOTE [accelerate's defaults]
// The YAML file `accelerate config` writes is the FSDP configuration of the run it launches: an fsdp_* key the
// file leaves out means what accelerate's FullyShardedDataParallelPlugin gives it when
// `accelerate launch` sets no environment variable for it, not what the scenario's fsdp
// section says. So the fsdp keys accelerate has start from the plugin's defaults (those of
// accelerate 1.7.0, the peer's pin, checked live by peer_configs for FSDP1 and FSDP2):
// FULL_SHARD (reshard_after_forward true), no wrap policy (the root module is the one unit),
// min_num_params 1e8, no backward prefetch, no forward prefetch, limit_all_gathers,
// use_orig_params false, sync_module_states false, no CPU offload, no activation
// checkpointing, FSDP1, FULL_STATE_DICT — SHARDED_STATE_DICT with fsdp_version 2. Kept from the scenario:
// the classes to wrap (accelerate takes the model's _no_split_modules, BertLayer for BERT),
// mixed precision (the top-level mixed_precision, or the Trainer's bf16 flag beside a JSON),
// device_id and async_reduction (no accelerate key). Where a default replaces a different
// value of the scenario, a note on stdout says so. An fsdp_config JSON (the Trainer's,
// optimum-habana's) is a fragment whose meaning also depends on the training arguments
// beside it (the Trainer's --fsdp flag), which shardlab does not see: it overlays the
// scenario, key by key, and the scenario's values stand for the rest.

const std::vector<std::string>& accelerate_launcher_keys() {
  static const std::vector<std::string> kKeys = {"compute_environment",
                                                 "debug",
                                                 "machine_rank",
                                                 "main_process_ip",
                                                 "main_process_port",
                                                 "main_training_function",
                                                 "rdzv_backend",
                                                 "same_network",
                                                 "tpu_env",
                                                 "tpu_use_cluster",
                                                 "tpu_use_sudo",
                                                 "tpu_name",
                                                 "tpu_zone",
                                                 "commands",
                                                 "command_file",
                                                 "enable_cpu_affinity",
                                                 "gpu_ids",
                                                 "downcast_bf16",
                                                 "dynamo_config",
                                                 "dynamo_backend",
                                                 "use_cpu",
                                                 "ipex_config",
                                                 "mpirun_config",
                                                 "megatron_lm_config",
                                                 "deepspeed_config",
                                                 "fp8_config"};
  return kKeys;
}

namespace {

bool json_text(const std::string& file, std::string_view text) {
  if (file.size() >= 5 && lower(file.substr(file.size() - 5)) == ".json") return true;
  const std::size_t first = text.find_first_not_of(" \t\r\n");
  return first != std::string_view::npos && text[first] == '{';
}

// accelerate's top-level keys (NOTE [accelerate config files]); `ignored` collects the
// launcher keys, `unknown` the names shardlab does not know (a near-miss of a key it
// honours is refused instead: dropping it would change the run).
Status apply_accelerate_top(const Node& root, std::size_t fsdp_index, Scenario& s, std::vector<std::string>& ignored,
                            std::vector<std::string>& unknown) {
  static const std::vector<std::string> kHonoured = {"distributed_type", "mixed_precision", "num_machines",
                                                     "num_processes", "fsdp_config"};
  Problems problems;
  const Node* machines = nullptr;
  const Node* processes = nullptr;
  for (std::size_t i = 0; i < root.keys.size(); ++i) {
    if (i == fsdp_index) continue;
    const Node& k = root.keys[i];
    const Node& v = root.values[i];
    const std::string name = k.kind == Node::Kind::kScalar ? k.text : describe(k);
    if (name == "distributed_type") {
      auto type = to_enum(v, name, {{"FSDP", {}}},
                          " (this file describes a run without FSDP; `accelerate config` writes FSDP when asked for "
                          "FSDP)");
      problems.add(type.status());
    } else if (name == "mixed_precision") {
      auto mp = to_enum(v, name, {{"no", {"fp32"}}, {"bf16", {}}, {"fp16", {}}, {"fp8", {}}});
      if (!mp.is_ok()) {
        problems.add(mp.status());
      } else if (*mp == "fp16" || *mp == "fp8") {
        problems.add(bad(v.pos,
                         name + ": " + *mp + " is not modeled (fp16 needs a gradient scaler, fp8 its own kernels)",
                         "allowed: no, bf16"));
      } else {
        s.train.precision = *mp == "bf16" ? DType::kBF16 : DType::kF32;
        s.positions["train.precision"] = v.pos;
      }
    } else if (name == "num_machines") {
      machines = &v;
    } else if (name == "num_processes") {
      processes = &v;
    } else if (std::find(accelerate_launcher_keys().begin(), accelerate_launcher_keys().end(), name) !=
               accelerate_launcher_keys().end()) {
      ignored.push_back(name);
    } else if (auto near = suggest(name, kHonoured)) {
      problems.add(bad(k.pos, "unknown accelerate key " + show(name) + " (did you mean '" + *near + "'?)",
                       "allowed: " + join(kHonoured) + ", or accelerate's launcher keys"));
    } else {
      unknown.push_back(name);
    }
  }
  std::int64_t nodes = s.world.nodes;
  if (machines != nullptr) {
    auto n = to_int(*machines, "num_machines", 1, kMaxWorldSize);
    problems.add(n.status());
    if (n.is_ok()) {
      nodes = *n;
      s.world.nodes = static_cast<int>(nodes);
      s.positions["world.nodes"] = machines->pos;
    }
  }
  if (processes != nullptr) {
    auto n = to_int(*processes, "num_processes", 1, kMaxWorldSize);
    problems.add(n.status());
    if (n.is_ok()) {
      if (*n % nodes != 0) {
        problems.add(bad(processes->pos,
                         "num_processes: " + std::to_string(*n) + " processes do not split evenly over " +
                             std::to_string(nodes) + " machines (num_machines)",
                         "allowed: a multiple of num_machines"));
      } else {
        s.world.devices_per_node = static_cast<int>(*n / nodes);
        s.positions["world.devices_per_node"] = processes->pos;
      }
    }
  }
  return problems.status();
}

}  // namespace

namespace {

// NOTE [accelerate's defaults]: `fsdp` with its accelerate-configurable settings at the
// plugin's defaults.
Scenario::Fsdp accelerate_defaults(Scenario::Fsdp fsdp) {
  fsdp.sharding_strategy = runtime::fsdp::ShardingStrategy::kFullShard;
  fsdp.auto_wrap_policy = AutoWrapPolicy::kNone;
  fsdp.min_num_params = 100000000;
  fsdp.backward_prefetch = runtime::fsdp::BackwardPrefetch::kNone;
  fsdp.forward_prefetch = false;
  fsdp.limit_all_gathers = true;
  fsdp.use_orig_params = false;
  fsdp.sync_module_states = false;
  fsdp.cpu_offload = false;
  fsdp.activation_checkpointing = false;
  fsdp.version = 1;
  fsdp.reshard_after_forward_size = 0;
  fsdp.state_dict_type = runtime::fsdp::StateDictType::kFull;
  return fsdp;
}

// The fsdp leaves the file did not set whose value `after` shows differently from `before`
// (the scenario): "fsdp.key VALUE (the scenario: OLD)", each now placed in the file (line
// 0: its defaults).
std::vector<std::string> note_defaults(const std::vector<KeyDef>& defs, const std::string& prefix,
                                       const Scenario& before, const Scenario& defaulted, Scenario& after,
                                       const std::string& file) {
  std::vector<std::string> out;
  for (const KeyDef& def : defs) {
    const std::string path = prefix + "." + def.name;
    if (def.is_section()) {
      for (auto& line : note_defaults(def.children, path, before, defaulted, after, file))
        out.push_back(std::move(line));
      continue;
    }
    if (def.value.show == nullptr || after.where(path).file == file) continue;
    // A default replaced the scenario's value, and the file's keys (also those another key
    // spells, as offload_policy spells cpu_offload) left it so.
    const std::string was = def.value.show(before), now = def.value.show(after);
    if (was == def.value.show(defaulted) || now != def.value.show(defaulted)) continue;
    std::string line = path;
    line.append(" ").append(now).append(" (the scenario: ").append(was).append(")");
    out.push_back(std::move(line));
    after.positions[path] = SourcePos{file, 0, 0};
  }
  return out;
}

}  // namespace

Status apply_fsdp_config(const std::string& file, Scenario& s) {
  SHARDLAB_ASSIGN_OR_RETURN(std::string text, read_bounded(file, "--fsdp-config file"));
  const SourcePos start{file, 1, 1};
  Node root;
  const bool is_json = json_text(file, text);
  if (is_json) {
    SHARDLAB_ASSIGN_OR_RETURN(nlohmann::json j, parse_json(file, text, "--fsdp-config file"));
    // JSON is YAML 1.2, so yaml-cpp re-reads the validated text to recover positions.
    Result<Node> reread = parse_yaml(text, file_mapper(file), start);
    root = reread.is_ok() ? std::move(reread).value() : json_to_node(j, SourcePos{file, 0, 0});
  } else {
    SHARDLAB_RETURN_IF_ERROR(screen_text(file, text, "--fsdp-config file"));
    SHARDLAB_ASSIGN_OR_RETURN(root, parse_yaml(text, file_mapper(file), start));
  }
  if (root.kind != Node::Kind::kMap) {
    return bad(
        root.pos,
        "--fsdp-config: expected a JSON object (or the YAML map `accelerate config` writes), got " + describe(root),
        "allowed: a JSON object {\"fsdp_sharding_strategy\": 1, ...} (possibly nested under \"fsdp_config\"), "
        "or the YAML file `accelerate config` writes");
  }
  Problems problems;
  std::vector<std::string> ignored, unknown;
  std::size_t fsdp_index = root.keys.size();
  for (std::size_t i = 0; i < root.keys.size(); ++i) {
    if (root.keys[i].kind == Node::Kind::kScalar && root.keys[i].text == "fsdp_config") fsdp_index = i;
  }
  // A JSON object is an fsdp_config, flat or nested; a YAML file is accelerate's config,
  // whose fsdp keys are under fsdp_config (absent when it sets none: accelerate leaves the
  // empty section out).
  Node no_fsdp_keys;
  no_fsdp_keys.kind = Node::Kind::kMap;
  no_fsdp_keys.pos = root.pos;
  const Node* fsdp = is_json ? &root : &no_fsdp_keys;
  if (fsdp_index < root.keys.size()) fsdp = &root.values[fsdp_index];
  if (fsdp_index < root.keys.size() || !is_json) {
    problems.add(apply_accelerate_top(root, fsdp_index, s, ignored, unknown));
  }
  const KeyDef* fsdp_section = find_key(schema(), "fsdp");
  const Scenario before = s;
  if (!is_json) s.fsdp = accelerate_defaults(s.fsdp);
  Scenario defaulted = s;
  problems.add(apply_map(fsdp_section->children, "fsdp", *fsdp, s));
  // FSDP2's plugin defaults to sharded state dicts.
  if (!is_json && s.fsdp.version == 2) {
    defaulted.fsdp.state_dict_type = runtime::fsdp::StateDictType::kSharded;
    if (s.where("fsdp.state_dict_type").file != file) s.fsdp.state_dict_type = runtime::fsdp::StateDictType::kSharded;
  }
  if (const auto replaced = note_defaults(fsdp_section->children, "fsdp", before, defaulted, s, file);
      !replaced.empty()) {
    s.notes.push_back("--fsdp-config " + file +
                      ": accelerate's defaults for the fsdp keys it leaves out (FullyShardedDataParallelPlugin) "
                      "replace the scenario's: " +
                      join(replaced));
  }
  if (fsdp->kind == Node::Kind::kMap) {
    for (const auto& k : fsdp->keys) {
      const KeyDef* def = k.kind == Node::Kind::kScalar ? find_key(fsdp_section->children, k.text) : nullptr;
      if (def != nullptr && def->name == "cpu_ram_efficient_loading") ignored.push_back(k.text);
    }
  }
  if (!ignored.empty()) {
    s.notes.push_back("--fsdp-config " + file + ": ignored (no effect on what a step computes): " + join(ignored));
  }
  if (!unknown.empty()) {
    s.notes.push_back("--fsdp-config " + file +
                      ": ignored (not accelerate keys shardlab knows; check the spelling): " + join(unknown));
  }
  return problems.status();
}
}  // namespace shardlab::cli::scenario_detail
