// Scenario files: the user's unit of work — what to run, where, and what must hold after.
//
// A scenario is YAML with the sections below (names fixed; `shardlab schema` and
// docs/scenarios.md list every key). load_scenario reads and validates it completely
// before anything runs: syntax errors, unknown keys (with a did-you-mean), wrong types,
// out-of-range values and inconsistencies are INVALID_ARGUMENT with one line
// `file:line:col: what is wrong; what is allowed` per problem of the file (at most 20
// shown; NOTE [Every error] in cli/scenario/messages.h), exit code 2. Hostile input (alias bombs, deep
// nesting, huge numbers, binary junk, empty or oversized files) gets the same treatment,
// quickly and in bounded memory.
//
// Every key has a default (below), so `name: x` alone is a valid scenario. The `fsdp`
// section also accepts Hugging Face accelerate's key names (fsdp_sharding_strategy as a
// name or 1–5, fsdp_backward_prefetch, fsdp_auto_wrap_policy,
// fsdp_transformer_layer_cls_to_wrap, fsdp_offload_params, fsdp_state_dict_type,
// fsdp_use_orig_params, fsdp_sync_module_states, fsdp_forward_prefetch,
// fsdp_min_num_params); the same key given twice under both spellings is an error.
//
// A value is typed as it is read: every closed set of names is an enum (the runtime's own
// where it has one), the backend its registry entry; only paths, profile names and free
// text stay strings.
//
// Thread safety: plain data; the functions are reentrant.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cli/backends.h"
#include "runtime/core/dtype.h"
#include "runtime/core/status.h"
#include "runtime/fsdp/checkpoint.h"
#include "runtime/fsdp/options.h"
#include "runtime/model/bert.h"
#include "runtime/optim/optimizer.h"
#include "sim/faults/faults.h"
#include "sim/models/network/collectives.h"
#include "sim/models/network/network.h"

namespace shardlab::cli {

// world.mode: real values on every rank (numerics), or time only, with phantom tensors
// captured once and replayed over the world (timing; NOTE [Timing mode] in
// sim/timing/op_graph.h).
enum class RunMode { kNumerics, kTiming };
std::string_view run_mode_name(RunMode mode);  // "numerics", "timing"

// data.kind: seeded synthetic batches, or token batches read from data.path.
enum class DataKind { kSynthetic, kFile };
std::string_view data_kind_name(DataKind kind);  // "synthetic", "file"

// fsdp.auto_wrap_policy: one unit per module of the named classes, units closed by size, or
// one unit for the whole model.
enum class AutoWrapPolicy { kTransformer, kSize, kNone };
std::string_view auto_wrap_policy_name(AutoWrapPolicy policy);  // "transformer", "size", "none"

// Where a value came from: a file position, or a command-line override.
struct SourcePos {
  std::string file;               // the scenario path, "--set" or the --fsdp-config path
  int line = 0;                   // 1-based; 0 when unknown
  int column = 0;                 // 1-based
  std::string to_string() const;  // "file:line:col"
};

struct Scenario {
  std::string path;  // as given
  std::string name;  // required: [A-Za-z0-9_.-]+ (it names the output folder)
  std::string description;
  std::uint64_t seed = 0;

  struct Model {
    std::string preset = "bert-tiny";  // bert-tiny|mini|small|base|large, or "mlp"; ignored when `config` is set
    std::string config;                // path to a Hugging Face config.json (NOTE [Relative paths])
    runtime::model::BertHead head = runtime::model::BertHead::kMaskedLM;
    std::string weights = "random";  // random | path to model.safetensors
  } model;

  struct Data {
    DataKind kind = DataKind::kSynthetic;
    std::string path;  // kind file: a batch safetensors (NOTE [Relative paths])
    std::int64_t batch_size_per_rank = 2;
    std::int64_t seq_len = 64;
  } data;

  struct Optimizer {
    runtime::optim::OptimizerConfig::Kind name = runtime::optim::OptimizerConfig::Kind::kAdamW;
    double lr = 1e-3;
    double weight_decay = 0.0;
    double beta1 = 0.9, beta2 = 0.999;  // YAML: betas: [0.9, 0.999]
    double eps = 1e-8;
    double momentum = 0.0;
  };
  struct Train {
    int steps = 5;
    int grad_accumulation = 1;
    double max_grad_norm = 0.0;     // 0: off
    DType precision = DType::kF32;  // fp32 | bf16
    Optimizer optimizer;
  } train;

  struct MixedPrecision {
    // fp32 | bf16 | fp16 (read, and refused with its reason where the run is set up).
    DType param_dtype = DType::kF32, reduce_dtype = DType::kF32, buffer_dtype = DType::kF32;
  };
  struct Fsdp {
    runtime::fsdp::ShardingStrategy sharding_strategy = runtime::fsdp::ShardingStrategy::kFullShard;
    AutoWrapPolicy auto_wrap_policy = AutoWrapPolicy::kTransformer;
    std::vector<std::string> transformer_layer_cls_to_wrap = {"BertLayer"};  // YAML: a list or a comma-separated string
    std::int64_t min_num_params = 100000000;
    runtime::fsdp::BackwardPrefetch backward_prefetch = runtime::fsdp::BackwardPrefetch::kBackwardPre;
    bool forward_prefetch = false;
    bool limit_all_gathers = true;
    bool async_reduction = true;
    bool use_orig_params = true;
    bool sync_module_states = false;
    // PyTorch's device_id: "" (not given: the compute device), hpu, hpu:N, cpu, or
    // local_rank (the CUDA idiom device_id=local_rank). NOTE [Simulated device_id] in
    // cli/scenario_to_run_args.h.
    std::string device_id;
    bool cpu_offload = false;
    bool activation_checkpointing = false;
    int version = 1;  // 1: FullyShardedDataParallel, 2: fully_shard (YAML: fsdp_version)
    // FSDP2's reshard_after_forward=N (NOTE [reshard_after_forward] in cli/scenario/keys.cc);
    // 0: reshard to the whole world, or not at all, as the strategy says.
    int reshard_after_forward_size = 0;
    int forward_prefetch_units = 0;  // FSDP2's explicit prefetch (FsdpOptions); 0: not set
    int backward_prefetch_units = 0;
    runtime::fsdp::StateDictType state_dict_type = runtime::fsdp::StateDictType::kFull;
    MixedPrecision mixed_precision;
  } fsdp;

  struct World {
    const BackendInfo* backend = &cli::backend(kDefaultBackend);  // a registered backend (cli/backends.h)
    RunMode mode = RunMode::kNumerics;
    int nodes = 1;
    int devices_per_node = 8;         // world size = nodes × devices_per_node
    std::string device = "cpu";       // profile name (cpu, gaudi1, gaudi2, gaudi3) or a path to a profile file
    std::string topology = "switch";  // profile name (hls1, hls2, hls3, ring, fully_connected, switch) or a path
    // Each rank's host under fsdp.cpu_offload (sim backend): "host" (sim::offload_host_profile:
    // cpu-sim's rates, unlimited memory) or a path to a device profile, e.g. one `shardlab
    // calibrate` wrote on the accelerator node's host; its host link is ignored (it is the host).
    std::string offload_host = "host";
    // How the framework drives the device (NOTE [Software stack] in sim/models/device/stack.h): a built-in
    // stack (ideal, pytorch_eager, pytorch_lazy, pytorch_compile) or a path to a stack file.
    // Anything but ideal is timing mode's: the replay keeps a host timeline beside the device's.
    std::string stack = "ideal";
    // How long a rank waits in a collective before it fails with a timeout (exit 3), as
    // torch.distributed.init_process_group(timeout=…); virtual time in the simulator.
    double collective_timeout_s = 30.0;
    sim::NetworkModelKind network_model =
        sim::NetworkModelKind::kAlphaBeta;  // congestion-unaware, or max–min fair links
    sim::Algorithm collective_algorithm = sim::Algorithm::kAuto;
    int world_size() const { return nodes * devices_per_node; }
  } world;

  struct Fault {
    std::optional<sim::FaultKind> kind;  // not given until the file names it (sim/faults/faults.h)
    int rank = -1;                       // -1: not given
    int step = -1;                       // 1-based, like the step table; -1: not given
    double time_ms = -1.0;               // < 0: not given
    std::string link;                    // "a-b" rank pair, for link faults
    double factor = 1.0;                 // slowdown / bandwidth factor
    int collective = -1;                 // corrupt: which of the rank's collectives (0-based); -1: not given
    bool integrity_check = false;        // corrupt: a checksum detects it (the run ends) instead of silent damage
    int unit = -1;                       // view_offset: the FSDP unit (0-based); -1: not given
    std::uint64_t offset = 13835057943613014016ull;  // view_offset: the byte offset the view gets (the seed bug's)
    SourcePos pos;
  };
  std::vector<Fault> faults;

  // Which ranks trace.json holds (NOTE [Traced ranks] in cli/run_outputs.h); empty: the
  // default (every rank in numerics mode, ranks 0-7 in timing mode). Sorted, distinct.
  struct Trace {
    std::vector<int> ranks;
  } trace;

  struct Checkpoint {
    std::string dir;      // empty: no checkpoints (NOTE [Relative paths])
    int every_steps = 0;  // 0: only at the end when dir is set
    bool resume = false;
    bool resume_if_present = false;  // resume: if_present (NOTE [Resume] in runtime/train/fsdp_train.h)
  } checkpoint;

  struct Tolerance {
    double rtol = 1.3e-6, atol = 1e-5;
  };
  struct Expect {
    // The unsharded oracle runs on every numerics run (NOTE [The oracle by default] in
    // cli/run_command.h). YAML true: listed as an expectation, at the default tolerance
    // (NOTE [Default tolerance]); {rtol, atol}: the keys stated replace the default's;
    // unset: checked as for true but not listed; false or null: off
    // (oracle_off, so that the run says it was turned off, and by what).
    std::optional<Tolerance> grads_match_unsharded;
    bool oracle_off = false;
    std::optional<std::int64_t> max_peak_memory_per_rank;  // bytes; YAML also accepts "512 MiB", "2 GiB"
    std::optional<double> min_samples_per_s;
    std::optional<double> max_step_time_s;
    std::optional<double> final_loss_below;
  } expect;

  // Where each given key was set ("world.nodes" → position), for later semantic errors.
  std::map<std::string, SourcePos> positions;
  // What the run was given but does not honour, one line each (e.g. --fsdp-config keys with
  // no effect; NOTE [accelerate config files] in cli/scenario/accelerate.cc). `run` and `validate` print
  // them on stdout.
  std::vector<std::string> notes;
  // The position of `key` if it was given, else the file itself (line 0).
  SourcePos where(const std::string& key) const;
};

struct ScenarioOverrides {
  std::vector<std::string> set;  // "section.key=value" (value parsed as a YAML scalar or flow sequence)
  // An accelerate config: `accelerate config`'s YAML file, or an fsdp_config JSON
  // (NOTE [accelerate config files] in cli/scenario/accelerate.cc); empty: none.
  std::string fsdp_config;
};

// Reads, applies overrides (file < --fsdp-config < --set), validates.
Result<Scenario> load_scenario(const std::string& path, const ScenarioOverrides& overrides = {});
// The same from text (`path` names it in messages and anchors relative paths).
Result<Scenario> parse_scenario(const std::string& path, const std::string& text,
                                const ScenarioOverrides& overrides = {});

// The one rule for a seed, wherever it is given (a scenario's `seed:`, --set seed=N, the
// --seed flags of run and grads): a decimal integer from 0 to 18446744073709551615, an
// optional leading '+'. A negative number or one past 2^64 − 1 is refused, never wrapped or
// clamped. The error message starts with `what` ("--seed: '-1' is negative; allowed: …").
Result<std::uint64_t> parse_seed(std::string_view text, const std::string& what);
// The same for a maximum gradient norm (train.max_grad_norm, --max-grad-norm): a finite
// number >= 0, 0 turning clipping off; NaN, infinities and negatives are refused.
Result<double> parse_max_grad_norm(std::string_view text, const std::string& what);
inline constexpr const char* kSeedAllowed = "allowed: an integer from 0 to 18446744073709551615";
inline constexpr const char* kMaxGradNormAllowed = "a finite number >= 0 (0: no clipping)";

// The scenario as canonical YAML (every key, defaults filled in) — `shardlab validate --print`.
std::string to_yaml(const Scenario& s);

// scenarios/default.yaml as compiled in: what `shardlab run` runs without a scenario file,
// and what --set / --fsdp-config apply to when no file is given. Messages name it
// kDefaultScenarioName.
std::string_view default_scenario_text();
inline constexpr const char* kDefaultScenarioName = "scenarios/default.yaml (built in)";

// NOTE [Relative paths]
// Every path-valued key (model.config, model.weights, data.path, world.device /
// world.topology / world.offload_host when a path, checkpoint.dir) is anchored when it is
// read: a relative path inside a scenario file is relative to that file's folder; one given
// with --set is relative to the current directory, as any command-line path is. The
// Scenario then holds paths as they are to be opened; absolute paths are kept unchanged.

// The scenario reference (`shardlab schema`), from the table the parser reads: every key
// with its type, default, allowed values and PyTorch / accelerate equivalent. `markdown`:
// as docs/scenarios.md (tables), else plain text.
std::string schema_reference(bool markdown);

}  // namespace shardlab::cli
