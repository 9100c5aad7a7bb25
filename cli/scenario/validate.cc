#include "cli/scenario/validate.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <string_view>
#include <system_error>

#include "cli/backends.h"
#include "cli/scenario/document.h"
#include "cli/scenario/emit.h"
#include "cli/scenario/schema.h"
#include "cli/scenario/text.h"
#include "cli/scenario/values.h"
#include "runtime/model/bert.h"
#include "runtime/model/bert_io.h"
#include "sim/faults/faults.h"
#include "sim/models/device/profiles.h"
#include "sim/models/device/stack.h"
#include "sim/models/network/topology.h"

namespace shardlab::cli::scenario_detail {

namespace {

constexpr std::int64_t kPresetMaxPositions = 512;  // every BERT preset (and the MLP's synthetic data)
constexpr double kMaxFaultSlowdown = 1e6;          // a straggler's factor; 1 / it is link_degrade's least

bool is_file(const std::string& p) {
  std::error_code ec;
  return std::filesystem::is_regular_file(p, ec);
}

// The position of the first of `keys` that was given (line 0 when none was).
SourcePos first_given(const Scenario& s, std::initializer_list<const char*> keys) {
  for (const char* k : keys) {
    auto it = s.positions.find(k);
    if (it != s.positions.end()) return it->second;
  }
  return SourcePos{s.path, 0, 0};
}

// `value` is anchored already (NOTE [Relative paths] in cli/scenario.h).
Status check_file(const Scenario& s, const std::string& key, const std::string& value, const std::string& allowed) {
  if (is_file(value)) return Status::ok();
  const bool from_set = s.where(key).file == "--set";
  return bad(s.where(key),
             key + ": file " + show(value) + " not found (a relative path is relative to " +
                 (from_set ? "the current directory, as given with --set)" : "the scenario file's folder)"),
             allowed);
}

// max_position_embeddings of the model (preset or config.json).
Result<std::int64_t> max_positions(const Scenario& s) {
  if (s.model.config.empty()) return kPresetMaxPositions;
  const std::string allowed = "allowed: a path to a Hugging Face config.json";
  SHARDLAB_RETURN_IF_ERROR(check_file(s, "model.config", s.model.config, allowed));
  const std::string& resolved = s.model.config;
  SHARDLAB_ASSIGN_OR_RETURN(std::string text, read_bounded(resolved, "model config"));
  SHARDLAB_ASSIGN_OR_RETURN(nlohmann::json j, parse_json(resolved, text, "model config"));
  if (!j.is_object()) return bad(SourcePos{resolved, 1, 1}, "model config is not a JSON object", allowed);
  auto it = j.find("max_position_embeddings");
  if (it != j.end() && (!it->is_number_integer() || it->get<std::int64_t>() < 1)) {
    return bad(s.where("model.config"), "max_position_embeddings in " + show(resolved) + " is " + show(it->dump()),
               "allowed: an integer >= 1");
  }
  // Every other key as `run` reads it, so that `validate` refuses what `run` would
  // (NOTE [BERT size limits] in runtime/model/bert.h).
  const auto config = runtime::model::parse_bert_config(resolved, text, s.model.head);
  if (!config.is_ok()) {
    return Status::invalid_argument(s.where("model.config").to_string() +
                                    ": model.config: " + config.status().message());
  }
  return config->config.max_position_embeddings;  // absent: Hugging Face's BertConfig default, 512
}

void check_name(const Scenario& s, const SourcePos& top, Problems& problems) {
  if (!s.positions.count("name")) {
    problems.add(bad(top, "missing required key `name`",
                     "a scenario needs `name:` (letters, digits, '_', '.', '-'); it names the output folder"));
  }
  const bool name_ok =
      !s.name.empty() && s.name != "." && s.name != ".." && std::all_of(s.name.begin(), s.name.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
      });
  if (s.positions.count("name") && !name_ok && !problems.reported_at(s.where("name"))) {
    problems.add(bad(s.where("name"), "name " + show(s.name) + " is not a valid folder name",
                     "allowed: letters, digits, '_', '.' and '-' (not '.' or '..')"));
  }
}

void check_trace(const Scenario& s, Problems& problems) {
  if (!s.trace.ranks.empty() && s.trace.ranks.back() >= s.world.world_size()) {
    problems.add(bad(s.where("trace.ranks"),
                     "trace.ranks names rank " + std::to_string(s.trace.ranks.back()) +
                         ", not a rank of the world (size " + std::to_string(s.world.world_size()) + ")",
                     "allowed: ranks 0 to " + std::to_string(s.world.world_size() - 1)));
  }
}

// The model, then the data it reads (seq_len against the model's positions).
void check_model_and_data(const Scenario& s, Problems& problems) {
  const Result<std::int64_t> max_pos = max_positions(s);
  problems.add(max_pos.status());
  if (s.model.weights != "random") {
    problems.add(check_file(s, "model.weights", s.model.weights, "allowed: random, or a path to a model.safetensors"));
  }
  if (s.data.kind == DataKind::kFile) {
    if (s.data.path.empty()) {
      problems.add(bad(first_given(s, {"data.kind", "data.path"}), "data.kind is file but data.path is not given",
                       "give data.path (a batch .safetensors), or use data.kind: synthetic"));
    } else {
      problems.add(check_file(s, "data.path", s.data.path, "allowed: a path to a batch .safetensors"));
    }
  } else if (!s.data.path.empty()) {
    problems.add(bad(first_given(s, {"data.path", "data.kind"}), "data.path is given but data.kind is synthetic",
                     "set data.kind: file to read batches from data.path, or remove data.path"));
  }
  if (max_pos.is_ok() && s.data.seq_len > *max_pos) {
    const std::string source = s.model.config.empty() ? "the " + s.model.preset + " preset" : show(s.model.config);
    problems.add(bad(first_given(s, {"data.seq_len", "model.config", "model.preset"}),
                     "data.seq_len = " + std::to_string(s.data.seq_len) +
                         " exceeds max_position_embeddings = " + std::to_string(*max_pos) + " of " + source,
                     "allowed: seq_len from 1 to " + std::to_string(*max_pos)));
  }
  if (s.data.batch_size_per_rank % s.train.grad_accumulation != 0) {
    problems.add(bad(first_given(s, {"data.batch_size_per_rank", "train.grad_accumulation"}),
                     "data.batch_size_per_rank = " + std::to_string(s.data.batch_size_per_rank) +
                         " is not divisible by train.grad_accumulation = " + std::to_string(s.train.grad_accumulation),
                     "allowed: a batch size that is a multiple of grad_accumulation (each micro-batch has batch / "
                     "accumulation rows)"));
  }
}

void check_fsdp(const Scenario& s, Problems& problems) {
  if (s.fsdp.auto_wrap_policy == AutoWrapPolicy::kTransformer && s.fsdp.transformer_layer_cls_to_wrap.empty()) {
    problems.add(bad(first_given(s, {"fsdp.transformer_layer_cls_to_wrap", "fsdp.auto_wrap_policy"}),
                     "fsdp.auto_wrap_policy is transformer but transformer_layer_cls_to_wrap is empty",
                     "allowed: at least one layer class (e.g. BertLayer), or auto_wrap_policy size/none"));
  }
  for (const char* key : {"fsdp.forward_prefetch_units", "fsdp.backward_prefetch_units"}) {
    const int n = std::string_view(key) == "fsdp.forward_prefetch_units" ? s.fsdp.forward_prefetch_units
                                                                         : s.fsdp.backward_prefetch_units;
    if (n > 0 && s.fsdp.version != 2) {
      problems.add(
          bad(s.where(key),
              std::string(key) + " " + std::to_string(n) + " is FSDP2's explicit prefetch; this is fsdp_version 1",
              "allowed: fsdp_version: 2, or 0 (FSDP1: forward_prefetch and backward_prefetch)"));
    }
  }
  if (const int n = s.fsdp.reshard_after_forward_size; n > 0) {
    const std::int64_t world = std::int64_t{s.world.nodes} * s.world.devices_per_node;
    std::string why;
    if (s.fsdp.version != 2) {
      why = "is FSDP2's (fsdp_version: 2); this is fsdp_version 1";
    } else if (s.fsdp.sharding_strategy != runtime::fsdp::ShardingStrategy::kFullShard) {
      why = "reshards FULL_SHARD's parameters; the strategy is " +
            std::string(runtime::fsdp::strategy_name(s.fsdp.sharding_strategy));
    } else if (n >= world || world % n != 0) {
      why = "must divide the world size " + std::to_string(world) + " and be smaller";
    }
    if (!why.empty()) {
      problems.add(bad(s.where("fsdp.reshard_after_forward"),
                       "fsdp.reshard_after_forward " + std::to_string(n) + " " + why,
                       "allowed: with fsdp_version 2 and FULL_SHARD, a divisor N of the world size with 1 < N < "
                       "world size (e.g. world.devices_per_node), or true / false"));
    }
  }
}

void check_world(const Scenario& s, Problems& problems) {
  const std::int64_t world = std::int64_t{s.world.nodes} * s.world.devices_per_node;
  if (world > kMaxWorldSize) {
    problems.add(bad(first_given(s, {"world.nodes", "world.devices_per_node"}),
                     "world size nodes x devices_per_node = " + std::to_string(s.world.nodes) + " x " +
                         std::to_string(s.world.devices_per_node) + " = " + std::to_string(world),
                     "allowed: at most " + std::to_string(kMaxWorldSize) + " ranks"));
  }
  if (looks_like_path(s.world.device)) {
    problems.add(check_file(s, "world.device", s.world.device,
                            "allowed: " + join(sim::device_profile_names()) + ", or an existing device profile file"));
  }
  if (s.world.stack != "ideal") {
    if (s.world.mode != RunMode::kTiming || !s.world.backend->simulated) {
      problems.add(
          bad(s.where("world.stack"),
              "world.stack " + s.world.stack +
                  " models the host beside the device, which the simulator's timing mode replays; this run is " +
                  std::string(s.world.backend->name) + " in " + std::string(run_mode_name(s.world.mode)) + " mode",
              "allowed: world.stack: ideal (the default), or world.backend: sim with world.mode: timing"));
    }
    if (looks_like_path(s.world.stack)) {
      problems.add(check_file(s, "world.stack", s.world.stack,
                              "allowed: " + join(sim::list_stacks()) + ", or an existing stack file"));
    }
  }
  if (s.world.offload_host != "host") {
    if (!s.fsdp.cpu_offload) {
      problems.add(bad(s.where("world.offload_host"), "world.offload_host is set but fsdp.cpu_offload is false",
                       "allowed: fsdp.cpu_offload: true, or world.offload_host: host (the default)"));
    }
    if (!s.world.backend->simulated) {
      problems.add(bad(s.where("world.offload_host"),
                       "world.offload_host models the host in the simulator; backend " +
                           std::string(s.world.backend->name) + " offloads to the real host",
                       "allowed: world.backend: sim, or world.offload_host: host (the default)"));
    }
    problems.add(
        check_file(s, "world.offload_host", s.world.offload_host, "allowed: host, or an existing device profile file"));
  }
  if (looks_like_path(s.world.topology)) {
    problems.add(check_file(s, "world.topology", s.world.topology,
                            "allowed: " + join(sim::list_topologies()) + ", or an existing topology profile file"));
  }
}

// One problem per fault at most: its checks build on each other. A kind refused as it was
// read (reported in `problems`) is not reported again as missing.
Status check_fault(const Scenario& s, std::size_t i, const Problems& problems) {
  const std::int64_t world = std::int64_t{s.world.nodes} * s.world.devices_per_node;
  const auto& f = s.faults[i];
  const std::string name = "faults[" + std::to_string(i) + "]";
  auto at = [&](const char* key) {
    auto it = s.positions.find(name + "." + key);
    return it != s.positions.end() ? it->second : f.pos;
  };
  if (!f.kind) {
    if (problems.reported_at(s.where(name + ".kind"))) return Status::ok();  // refused already
    return bad(f.pos, name + " has no kind",
               "allowed kinds: crash, hang, straggler, corrupt, link_down, link_degrade, view_offset");
  }
  using sim::FaultKind;
  const FaultKind kind = *f.kind;
  const std::string kind_name(sim::fault_kind_name(kind));
  const bool link_kind = kind == FaultKind::kLinkDown || kind == FaultKind::kLinkDegrade;
  const bool rank_kind = !link_kind;  // crash, hang, straggler, corrupt, view_offset
  const bool view_kind = kind == FaultKind::kViewOffset;
  const bool when_kind = kind == FaultKind::kCrash || kind == FaultKind::kHang;
  if (link_kind && f.link.empty()) {
    return bad(f.pos, name + " (" + kind_name + ") has no link", "allowed: link: \"a-b\" naming two ranks");
  }
  if (link_kind && f.rank >= 0) {
    return bad(at("rank"), name + " (" + kind_name + ") names a rank",
               "a link fault names its link (\"a-b\"), not a rank");
  }
  if (!link_kind && !f.link.empty()) {
    return bad(at("link"), name + " (" + kind_name + ") names a link", "only link_down and link_degrade take a link");
  }
  if (rank_kind && f.rank < 0)
    return bad(f.pos, name + " (" + kind_name + ") has no rank", "allowed: rank: 0 to " + std::to_string(world - 1));
  if (f.rank >= world) {
    return bad(
        at("rank"),
        name + ".rank = " + std::to_string(f.rank) + " is not a rank of the world (size " + std::to_string(world) + ")",
        "allowed: 0 to " + std::to_string(world - 1));
  }
  if (link_kind) {
    std::int64_t a = 0, b = 0;
    if (!parse_link(f.link, a, b))
      return bad(at("link"), name + ".link " + show(f.link) + " is malformed", "allowed: \"a-b\"");
    if (a >= world || (a >= 0 && b >= world)) {
      return bad(
          at("link"),
          name + ".link " + show(f.link) + " names a rank outside the world (size " + std::to_string(world) + ")",
          "allowed: ranks 0 to " + std::to_string(world - 1));
    }
  }
  if (f.step > s.train.steps) {
    return bad(at("step"),
               name + ".step = " + std::to_string(f.step) +
                   " is not a step of the run (train.steps = " + std::to_string(s.train.steps) + ")",
               "allowed: 1 to " + std::to_string(s.train.steps) + " (steps count from 1, like the step table)");
  }
  if (when_kind && f.step < 0 && f.time_ms < 0) {
    return bad(f.pos, name + " (" + kind_name + ") has neither step nor time_ms",
               "give step (1-based, like the step table) or time_ms to say when it happens");
  }
  if (view_kind && (f.step < 0 || f.unit < 0)) {
    return bad(f.pos, name + " (view_offset) needs step and unit",
               "give step (1-based, like the step table) and unit (the 0-based FSDP unit whose parameter view is "
               "corrupted)");
  }
  if (!view_kind && (f.unit >= 0 || s.positions.count(name + ".offset") != 0)) {
    return bad(at(f.unit >= 0 ? "unit" : "offset"),
               name + " (" + kind_name + ") takes no " + (f.unit >= 0 ? "unit" : "offset"),
               "only view_offset takes unit and offset");
  }
  if (!when_kind && !view_kind && f.step >= 0) {
    return bad(at("step"), name + " (" + kind_name + ") takes no step",
               kind == FaultKind::kCorrupt
                   ? "a corrupt fault names the rank's collective index (collective: N)"
                   : std::string("a ") + kind_name + " fault starts at time_ms (default 0) and lasts the run");
  }
  if ((kind == FaultKind::kStraggler || kind == FaultKind::kCorrupt || view_kind) && f.time_ms >= 0) {
    return bad(at("time_ms"), name + " (" + kind_name + ") takes no time_ms",
               kind == FaultKind::kCorrupt ? "a corrupt fault names the rank's collective index (collective: N)"
               : view_kind                 ? "a view_offset fault happens at its step (step: N)"
                                           : "a straggler is slow for the whole run");
  }
  if (kind == FaultKind::kCorrupt && f.collective < 0) {
    return bad(f.pos, name + " (corrupt) has no collective",
               "give collective: N, the 0-based index among the rank's collectives with a payload");
  }
  if (kind != FaultKind::kCorrupt && f.collective >= 0) {
    return bad(at("collective"), name + " (" + kind_name + ") takes no collective",
               "only corrupt takes a collective index");
  }
  if (kind != FaultKind::kCorrupt && s.positions.count(name + ".integrity_check") != 0) {
    return bad(at("integrity_check"), name + " (" + kind_name + ") takes no integrity_check",
               "only corrupt takes integrity_check");
  }
  if ((kind == FaultKind::kCrash || kind == FaultKind::kHang || kind == FaultKind::kCorrupt ||
       kind == FaultKind::kLinkDown || view_kind) &&
      s.positions.count(name + ".factor") != 0) {
    return bad(at("factor"), name + " (" + kind_name + ") takes no factor",
               "only straggler (slowdown in [1, 1e6]) and link_degrade (bandwidth factor in [1e-6, 1]) take a factor");
  }
  // The bounds keep every degraded duration far inside the simulator's virtual time
  // (a 10^6 slowdown of a second-long op is 12 days; NOTE [Virtual time limit]).
  if (kind == FaultKind::kStraggler && f.factor < 1) {
    return bad(at("factor"), name + ".factor = " + yaml_number(f.factor) + " would speed the straggler up",
               "allowed: a slowdown factor in [1, 1e6]");
  }
  if (kind == FaultKind::kStraggler && f.factor > kMaxFaultSlowdown) {
    return bad(at("factor"), name + ".factor = " + yaml_number(f.factor) + " is out of range",
               "allowed: a slowdown factor in [1, 1e6]");
  }
  if (kind == FaultKind::kLinkDegrade && f.factor > 1) {
    return bad(at("factor"), name + ".factor = " + yaml_number(f.factor) + " would speed the link up",
               "allowed: a bandwidth factor in [1e-6, 1]");
  }
  if (kind == FaultKind::kLinkDegrade && f.factor < 1 / kMaxFaultSlowdown) {
    return bad(at("factor"), name + ".factor = " + yaml_number(f.factor) + " is out of range",
               "allowed: a bandwidth factor in [1e-6, 1] (0 is link_down)");
  }
  return Status::ok();
}

void check_checkpoint(const Scenario& s, Problems& problems) {
  if (s.checkpoint.dir.empty() && s.checkpoint.every_steps > 0) {
    problems.add(bad(s.where("checkpoint.every_steps"), "checkpoint.every_steps is set but checkpoint.dir is not",
                     "give checkpoint.dir to write checkpoints"));
  }
  if (s.checkpoint.dir.empty() && s.checkpoint.resume) {
    problems.add(bad(s.where("checkpoint.resume"), "checkpoint.resume is true but checkpoint.dir is not set",
                     "give checkpoint.dir to resume from"));
  }
}

}  // namespace

void validate(const Scenario& s, const SourcePos& top, Problems& problems) {
  check_name(s, top, problems);
  check_trace(s, problems);
  check_model_and_data(s, problems);
  check_fsdp(s, problems);
  check_world(s, problems);
  for (std::size_t i = 0; i < s.faults.size(); ++i) problems.add(check_fault(s, i, problems));
  check_checkpoint(s, problems);
}

}  // namespace shardlab::cli::scenario_detail
