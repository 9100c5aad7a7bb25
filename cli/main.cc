// shardlab: one executable, subcommands. Exit codes: 0 ok, 1 an expectation failed,
// 2 bad input (flags, files), 3 runtime failure, 70 internal error (a bug).
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <sstream>
#include <string>

#include "cli/grads_command.h"
#include "cli/run_command.h"
#include "cli/scenario.h"
#include "runtime/device/cpu/gemm.h"
#include "runtime/device/hpu/hpu_runtime.h"
#include "sim/calibrate.h"
#include "sim/profiles.h"
#include "sim/topology.h"
#include "cli/scenario_run.h"
#include "runtime/model/bert.h"
#include "runtime/fsdp/shard_layout.h"
#include "runtime/core/check.h"
#include "runtime/comm/mpi/communicator.h"
#include "runtime/device/cpu/device.h"

namespace {

constexpr const char* kDescription =
    "shardlab — a harness for sharded (FSDP) training: one runtime that runs in a deterministic\n"
    "simulator, on CPUs with Open MPI, and on Intel Gaudi with HCCL.\n\n"
    "Start with:  shardlab run             (bert-tiny, FSDP FULL_SHARD on 8 simulated ranks, checked against\n"
    "                                       unsharded training)\n"
    "             mpiexec -n 2 shardlab run --backend mpi\n"
    "             shardlab grads --model DIR --inputs BATCH.safetensors --out GRADS.safetensors --world-size 4\n";

// NOTE [One folder per configuration]
// A run's outputs go to out/<scenario name> only when it runs the scenario as written (or,
// without a scenario, the built-in defaults); a run whose effective configuration
// differs — --set, --fsdp-config, --backend, or configuration flags — gets
// out/<name>-<8 hex digits of FNV-1a over that configuration>, so variants never
// overwrite each other and the same variant always lands in the same folder. --out names
// the folder outright.
std::string config_hash(const std::string& text) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%08llx", static_cast<unsigned long long>(h & 0xffffffffull));
  return hex;
}

// A CLI11 check of a flag's text by the rule the scenario key of the same meaning follows
// (cli/scenario.h: parse_seed, parse_max_grad_norm), so the flag and --set refuse alike.
template <typename Parse>
CLI::Validator same_rule_as_the_scenario(Parse parse, const std::string& flag) {
  return CLI::Validator(
      [parse, flag](std::string& text) -> std::string {
        const auto r = parse(text, flag);
        if (r.is_ok()) return "";
        const std::string m = r.status().message(), prefix = flag + ": ";
        return m.rfind(prefix, 0) == 0 ? m.substr(prefix.size()) : m;  // CLI11 names the flag itself
      },
      "");
}

int main_impl(int argc, char** argv) {
  CLI::App app{kDescription, "shardlab"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show help for every subcommand");

  shardlab::cli::RunArgs run;
  std::string strategy = "FULL_SHARD", prefetch = "BACKWARD_PRE", optimizer = "adamw";
  std::string model_name = "bert-tiny", head_name = "mlm";
  float dropout = -1.0f;
  run.world_size = 8;
  run.train.global_batch = 16;
  run.train.optimizer.lr = 1e-3f;
  run.train.steps = 5;
  run.train.bert.seq_len = 64;
  auto* run_cmd = app.add_subcommand(
      "run",
      "Train BERT (a preset, seeded synthetic data) or a small MLP with FSDP for a few steps and check it\n"
      "against unsharded training on the concatenated batch (the oracle, same precision policy): bitwise on\n"
      "the simulator, else within the scenario's tolerance or the dtypes' default.");
  std::string scenario_path;
  shardlab::cli::ScenarioOverrides overrides;
  run_cmd->add_option("scenario", scenario_path,
                      "A scenario file (YAML; see scenarios/ and docs/scenarios.md). Without one, the flags below "
                      "describe the run (their defaults are scenarios/default.yaml), or --set / --fsdp-config "
                      "override scenarios/default.yaml");
  run_cmd->add_option("--set", overrides.set,
                      "Override a scenario key: section.key=value (repeatable; `shardlab schema` lists the keys)");
  run_cmd->add_option("--dump-graph", run.dump_graph,
                      "Timing mode: also write the captured op graph as JSON (inspect or replay without the model)");
  run_cmd->add_option("--perturb-host-schedule", run.perturb_seed,
                      "Testing: seeded random host yields between the simulator's ranks (outputs must not change)");
  run_cmd->add_option("--fsdp-config", overrides.fsdp_config,
                      "An accelerate config (the YAML `accelerate config` writes, or an fsdp_config JSON) applied "
                      "over the scenario; keys it cannot honour are named (docs/scenarios.md)");
  run_cmd->add_option("--model", model_name, "bert-tiny, bert-mini, bert-small, bert-base, bert-large or mlp")
      ->capture_default_str();
  run_cmd->add_option("--head", head_name, "BERT head: classification, mlm or qa")->capture_default_str();
  run_cmd->add_option("--seq-len", run.train.bert.seq_len, "BERT sequence length of the synthetic batches")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20))
      ->capture_default_str();
  run_cmd->add_option("--dropout", dropout, "Override BERT's hidden and attention dropout (default: the config's 0.1)")
      ->check(CLI::Range(0.0f, 0.999f));
  run_cmd->add_flag("--activation-checkpointing", run.train.bert.activation_checkpointing,
                    "Recompute each BertLayer's forward in backward (gradients unchanged bitwise)");
  run_cmd->add_option("--backend", run.backend,
                      "Where ranks run: sim (threads, virtual time), mpi (CPU processes under mpiexec) or hpu "
                      "(Gaudi cards under mpirun, one process per card)")
      ->check(CLI::IsMember({"sim", "mpi", "hpu"}))
      ->capture_default_str();
  run_cmd->add_option("--world-size,-n", run.world_size, "Simulated ranks (sim only; mpi uses mpiexec -n)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  run_cmd->add_option("--strategy", strategy, "FULL_SHARD, SHARD_GRAD_OP, NO_SHARD or HYBRID_SHARD (or 1-4)")
      ->capture_default_str();
  run_cmd->add_option("--devices-per-node", run.train.fsdp.devices_per_node, "HYBRID_SHARD: ranks per shard group")
      ->check(CLI::Range(1, 4096));
  run_cmd->add_option("--backward-prefetch", prefetch, "BACKWARD_PRE, BACKWARD_POST or NONE")->capture_default_str();
  run_cmd->add_flag("--forward-prefetch", run.train.fsdp.forward_prefetch, "Prefetch the next unit during forward");
  run_cmd->add_option("--steps", run.train.steps, "Optimizer steps")->check(CLI::Range(1, 1000000))->capture_default_str();
  run_cmd->add_option("--global-batch", run.train.global_batch,
                      "Samples per step over all ranks (a multiple of world size × grad accumulation)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 30))
      ->capture_default_str();
  run_cmd->add_option("--grad-accumulation", run.train.grad_accumulation, "Micro-batches per step (no_sync on all but the last)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  run_cmd->add_option("--max-grad-norm", run.train.max_grad_norm, "Clip the global gradient norm (0: off)")
      ->check(same_rule_as_the_scenario(shardlab::cli::parse_max_grad_norm, "--max-grad-norm"))
      ->capture_default_str();
  run_cmd->add_option("--hidden", run.train.model.hidden_dim, "Hidden width of the MLP (--model mlp)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 16))
      ->capture_default_str();
  run_cmd->add_option("--layers", run.train.model.num_hidden_layers,
                      "Hidden layers of the MLP (--model mlp; each is one FSDP unit)")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  run_cmd->add_option("--optimizer", optimizer, "adamw or sgd")->check(CLI::IsMember({"adamw", "sgd"}))->capture_default_str();
  auto* lr_opt = run_cmd->add_option("--lr", run.train.optimizer.lr, "Learning rate (default 1e-3; 1e-2 for the MLP)")
                     ->check(CLI::PositiveNumber);
  run_cmd->add_option("--seed", run.train.seed, "Seed of data and initial parameters (0 to 2^64 - 1)")
      ->check(same_rule_as_the_scenario(shardlab::cli::parse_seed, "--seed"))
      ->capture_default_str();
  bool no_oracle = false;
  run_cmd->add_flag("--no-oracle", no_oracle,
                    "Skip the comparison with the unsharded oracle (it runs on every numerics run otherwise; the run "
                    "then says it was not checked)");
  run_cmd->add_option("--out", run.out_dir,
                      "Output folder: summary.txt, metrics.json, trace.json, loss.csv, memory.csv "
                      "(reports/FORMATS.md; empty string: write nothing)")
      ->capture_default_str();
  run_cmd->add_flag("--check-collectives", run.check_collectives,
                    "Verify that every rank issues the same collective sequence; report the first divergence");

  shardlab::cli::GradsArgs grads;
  std::string grads_strategy = "FULL_SHARD";
  float grads_dropout = -1.0f;
  auto* grads_cmd = app.add_subcommand(
      "grads",
      "One forward+backward of a Hugging Face BERT checkpoint (config.json + model.safetensors; the head\n"
      "from architectures[0]) on a token batch, in training mode, on N simulated ranks under FSDP. Writes\n"
      "one F32 gradient per parameter under its Hugging Face name, and the mean loss in __metadata__.");
  grads_cmd->add_option("--model", grads.model_dir, "Folder with config.json and model.safetensors")->required();
  grads_cmd->add_option("--inputs", grads.inputs,
                        "Batch safetensors: input_ids [B, T], attention_mask [B, T], optional token_type_ids, and "
                        "labels ([B] or [B, T]) or start_positions + end_positions [B]")
      ->required();
  grads_cmd->add_option("--out", grads.out, "Where to write the gradients (safetensors)")->required();
  grads_cmd->add_option("--world-size,-n", grads.world_size, "Simulated ranks the batch is split over (must divide B)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  grads_cmd->add_option("--strategy", grads_strategy, "FULL_SHARD, SHARD_GRAD_OP, NO_SHARD or HYBRID_SHARD")
      ->capture_default_str();
  grads_cmd->add_option("--devices-per-node", grads.devices_per_node, "HYBRID_SHARD group size (default: half the ranks)")
      ->check(CLI::Range(1, 4096));
  grads_cmd->add_option("--dtype", grads.dtype, "fp32, or bf16 (bf16 parameters and activations, fp32 accumulation)")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  grads_cmd->add_option("--dropout", grads_dropout, "Override the config's dropout (0 to compare with another framework)")
      ->check(CLI::Range(0.0f, 0.999f));
  grads_cmd->add_option("--seed", grads.seed, "Seed of the dropout masks (0 to 2^64 - 1)")
      ->check(same_rule_as_the_scenario(shardlab::cli::parse_seed, "--seed"))
      ->capture_default_str();

  std::vector<std::string> validate_files;
  shardlab::cli::ScenarioOverrides validate_overrides;
  bool validate_print = false;
  auto* validate_cmd = app.add_subcommand(
      "validate", "Check scenario files without running them: exit 0 when every file is valid, 2 with\n"
                  "file:line:col: what is wrong; what is allowed for every problem of each file (at most 20).");
  validate_cmd->add_option("files", validate_files, "Scenario files")->required();
  validate_cmd->add_option("--set", validate_overrides.set, "Override a key: section.key=value (repeatable)");
  validate_cmd->add_option("--fsdp-config", validate_overrides.fsdp_config,
                           "An accelerate config (YAML from `accelerate config`, or an fsdp_config JSON)");
  validate_cmd->add_flag("--print", validate_print, "Print each scenario as canonical YAML with every default filled in");

  std::string report_dir, report_out;
  auto* report_cmd = app.add_subcommand(
      "report", "Draw a run folder (or a folder of runs) as PNGs + index.html: per-rank timeline, memory over\n"
                "time, step-time breakdown, loss against the oracle, and for several runs a scaling chart.\n"
                "Runs reports/shardlab_report.py with Debian's /usr/bin/python3 (python3-matplotlib).");
  report_cmd->add_option("dir", report_dir, "A run folder (with metrics.json) or a folder of run folders")->required();
  report_cmd->add_option("--out", report_out, "Where to write the pictures (default: DIR)");

  std::string calibrate_out, calibrate_topology_out;
  std::vector<std::int64_t> calibrate_sizes;
  auto* calibrate_cmd = app.add_subcommand(
      "calibrate",
      "Measure this machine (GEMM, vector and memcpy rates and the CPU's per-op costs; with --topology-out under\n"
      "mpiexec -n P also the MPI collectives: their times by size, per-call overhead, α, β and γ) and write simulator\n"
      "profiles: use them as world.device / world.topology to predict CPU\n"
      "runs. Under mpiexec every process measures at once, so the profiles describe a P-process run on this\n"
      "machine (cores shared when P exceeds them); calibrate with the process count you want to predict.");
  calibrate_cmd->add_option("--out", calibrate_out, "Device profile to write (JSON)")->required();
  calibrate_cmd->add_option("--topology-out", calibrate_topology_out,
                            "Also time MPI all_gather/reduce_scatter/all_reduce on all processes (mpiexec -n P), "
                            "fit the per-call overhead, α, β and γ under the simulator's schedules and write them as a switch "
                            "topology with the measured times (NOTE [Measured collectives] in sim/topology.h)");
  calibrate_cmd
      ->add_option("--collective-sizes", calibrate_sizes,
                   "With --topology-out: the buffer sizes in bytes to time each collective at, comma-separated, "
                   "at least 2 (default 64 B, 4 KiB, 64 KiB, 1, 2, 4, 8, 12, 15, 17, 24 and 32 MiB); the "
                   "measured table interpolates between them (NOTE [Measured collectives] in sim/topology.h)")
      ->delimiter(',')
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 34));

  bool schema_markdown = false;
  auto* schema_cmd = app.add_subcommand(
      "schema", "Print the scenario reference: every key, its type, default, allowed values and its PyTorch /\n"
                "accelerate equivalent (docs/scenarios.md is `shardlab schema --markdown`).");
  schema_cmd->add_flag("--markdown", schema_markdown, "As Markdown tables (docs/scenarios.md)");

  shardlab::cli::ReplayArgs replay;
  auto* replay_cmd = app.add_subcommand(
      "replay",
      "Time an op graph again (written by `shardlab run --dump-graph GRAPH.json` in timing mode) without the\n"
      "model: on the network it was captured with, or on another (--topology, --network-model,\n"
      "--collective-algorithm). Writes the usual output folder (reports/FORMATS.md).");
  replay_cmd->add_option("graph", replay.graph, "The op graph (JSON, reports/FORMATS.md)")->required();
  replay_cmd->add_option("--out", replay.out_dir, "Output folder (default out/replay-<graph name>)");
  replay_cmd->add_option("--topology", replay.topology, "Replay on this topology profile instead (`shardlab devices`)");
  replay_cmd->add_option("--network-model", replay.network_model, "alpha_beta or contention instead of the recorded one");
  replay_cmd->add_option("--collective-algorithm", replay.collective_algorithm,
                         "auto, ring, direct, hierarchical, halving_doubling or libnbc instead of the recorded one");

  auto* devices_cmd = app.add_subcommand(
      "devices", "List the device and topology profiles the simulator knows, and any accelerators found.");

  std::string layout_shapes, layout_dtype = "fp32";
  int layout_world = 1;
  std::int64_t layout_align = 0;
  auto* layout_cmd = app.add_subcommand(
      "layout",
      "Print PyTorch FSDP's flat-parameter layout as JSON: parameter offsets (with alignment padding), the\n"
      "shard size S = ceil(total / W) and, per rank, which slice of which parameter it owns.");
  layout_cmd->add_option("--shapes", layout_shapes, "Parameter shapes in order, e.g. 7x3,5x7,5x5")->required();
  layout_cmd->add_option("--world-size", layout_world, "Number of ranks W (1 to 65536)")->required();
  layout_cmd->add_option("--dtype", layout_dtype, "Element type: fp32, bf16, fp16, int64")->capture_default_str();
  layout_cmd->add_option("--align-bytes", layout_align,
                         "Start every parameter after the first at a multiple of this many bytes (0 or 16 in PyTorch)")
      ->capture_default_str();

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "shardlab: error: %s\nRun 'shardlab --help' (or 'shardlab SUBCOMMAND --help') for what is allowed.\n",
                 e.what());
    return 2;
  }
  if (*run_cmd) {
    const auto bad = [](const shardlab::Status& s) {
      // A scenario's problems come one per line (NOTE [Every error] in cli/scenario.cc).
      std::istringstream lines(s.message());
      for (std::string line; std::getline(lines, line);) std::fprintf(stderr, "shardlab run: %s\n", line.c_str());
      return 2;
    };
    if (!scenario_path.empty() || !overrides.set.empty() || !overrides.fsdp_config.empty()) {
      // With a scenario (a file, or without one the compiled-in scenarios/default.yaml that
      // --set / --fsdp-config then override), the scenario describes the run; only where it
      // runs, where outputs go and the collective check come from flags.
      for (const char* flag : {"--model", "--head", "--seq-len", "--dropout", "--activation-checkpointing", "--world-size",
                               "--strategy", "--devices-per-node", "--backward-prefetch", "--forward-prefetch", "--steps",
                               "--global-batch", "--grad-accumulation", "--max-grad-norm", "--hidden", "--layers",
                               "--optimizer", "--lr", "--seed"}) {
        if (run_cmd->count(flag) > 0) {
          return bad(shardlab::Status::invalid_argument(
              std::string(flag) + " cannot be combined with a scenario file, --set or --fsdp-config; use "
                                  "--set section.key=value (e.g. --set fsdp.sharding_strategy=NO_SHARD)"));
        }
      }
      auto spec = scenario_path.empty()
                      ? shardlab::cli::parse_scenario(shardlab::cli::kDefaultScenarioName,
                                                      std::string(shardlab::cli::default_scenario_text()), overrides)
                      : shardlab::cli::load_scenario(scenario_path, overrides);
      if (!spec.is_ok()) return bad(spec.status());
      for (const auto& note : spec->notes) std::printf("note: %s\n", note.c_str());
      const std::string out = run.out_dir;
      const bool out_given = run_cmd->count("--out") > 0;
      const std::string backend = run.backend;
      const std::string dump_graph = run.dump_graph;
      const std::uint64_t perturb_seed = run.perturb_seed;
      if (shardlab::Status st = shardlab::cli::scenario_to_run_args(*spec, run); !st.is_ok()) return bad(st);
      if (run_cmd->count("--backend") > 0) run.backend = backend;
      if (out_given) {
        run.out_dir = out;
      } else {
        // NOTE [One folder per configuration]: the scenario as its file states it, against
        // what this run does.
        const auto as_written = scenario_path.empty()
                                    ? shardlab::cli::parse_scenario(shardlab::cli::kDefaultScenarioName,
                                                                    std::string(shardlab::cli::default_scenario_text()))
                                    : shardlab::cli::load_scenario(scenario_path);
        std::string effective = shardlab::cli::to_yaml(*spec);
        if (run.backend != spec->world.backend) effective += "# --backend " + run.backend + "\n";
        if (!as_written.is_ok() || effective != shardlab::cli::to_yaml(*as_written)) {
          run.out_dir += "-" + config_hash(effective);
        }
      }
      run.dump_graph = dump_graph;
      run.perturb_seed = perturb_seed;
      if (!run.dump_graph.empty() && run.mode != "timing") {
        return bad(shardlab::Status::invalid_argument("--dump-graph needs timing mode (world.mode: timing, or --set "
                                                      "world.mode=timing)"));
      }
      if (no_oracle) run.oracle_off = "--no-oracle";
      run.spec = &*spec;
      return shardlab::cli::run_command(run, &argc, &argv);
    }
    auto st = shardlab::runtime::fsdp::parse_strategy(strategy);
    if (!st.is_ok()) return bad(st.status().with_context("--strategy"));
    auto pf = shardlab::runtime::fsdp::parse_prefetch(prefetch);
    if (!pf.is_ok()) return bad(pf.status().with_context("--backward-prefetch"));
    run.train.fsdp.strategy = *st;
    run.train.fsdp.backward_prefetch = *pf;
    run.train.optimizer.kind = *shardlab::runtime::optim::parse_optimizer(optimizer);
    if (model_name == "mlp") {
      run.train.model_kind = shardlab::runtime::train::ModelKind::kMlp;
      if (lr_opt->count() == 0) run.train.optimizer.lr = 1e-2f;
    } else {
      auto preset = shardlab::runtime::model::bert_preset(model_name);
      if (!preset.is_ok()) return bad(preset.status().with_context("--model (or mlp)"));
      auto head = shardlab::runtime::model::parse_bert_head(head_name);
      if (!head.is_ok()) return bad(head.status().with_context("--head"));
      run.train.model_kind = shardlab::runtime::train::ModelKind::kBert;
      run.train.bert.config = *preset;
      run.train.bert.head = *head;
      if (dropout >= 0.0f) run.train.bert.config.hidden_dropout_prob = run.train.bert.config.attention_probs_dropout_prob = dropout;
      run.train.wrap = shardlab::runtime::train::WrapPolicy::kByClass;  // each BertLayer is a unit
      run.model_name = model_name;
    }
    if (shardlab::runtime::fsdp::is_hybrid(*st) && run.train.fsdp.devices_per_node == 0) {
      return bad(shardlab::Status::invalid_argument("--strategy " + std::string(shardlab::runtime::fsdp::strategy_name(*st)) + " needs --devices-per-node"));
    }
    if (no_oracle) run.oracle_off = "--no-oracle";
    if (run_cmd->count("--out") == 0) {
      // NOTE [One folder per configuration]: the flags that change the run, in order.
      std::string flags;
      for (const auto* opt : run_cmd->get_options()) {
        const std::string name = opt->get_name();
        if (opt->count() == 0 || name == "--out" || name == "--no-oracle" || name == "--check-collectives" ||
            name == "--perturb-host-schedule" || name == "--help" || (name == "--backend" && run.backend == "sim")) {
          continue;
        }
        flags += name;
        for (const auto& v : opt->results()) flags += " " + v;
        flags += "\n";
      }
      if (!flags.empty()) run.out_dir += "-" + config_hash(flags);
    }
    return shardlab::cli::run_command(run, &argc, &argv);
  }
  if (*replay_cmd) return shardlab::cli::replay_command(replay);
  if (*report_cmd) {
    // The script ships with the sources; SHARDLAB_REPORT_SCRIPT overrides where it is.
    const char* env = std::getenv("SHARDLAB_REPORT_SCRIPT");
    const std::string script = env != nullptr ? env : SHARDLAB_SOURCE_DIR "/reports/shardlab_report.py";
    const std::string python = "/usr/bin/python3";
    if (access(script.c_str(), R_OK) != 0) {
      std::fprintf(stderr, "shardlab report: the report script %s is not readable (set SHARDLAB_REPORT_SCRIPT)\n",
                   script.c_str());
      return 2;
    }
    if (access(python.c_str(), X_OK) != 0) {
      std::fprintf(stderr, "shardlab report: %s not found; install python3-matplotlib python3-numpy (./bootstrap does)\n",
                   python.c_str());
      return 2;
    }
    std::vector<std::string> args = {python, script, report_dir};
    if (!report_out.empty()) {
      args.push_back("--out");
      args.push_back(report_out);
    }
    std::vector<char*> argv2;
    for (auto& a : args) argv2.push_back(a.data());
    argv2.push_back(nullptr);
    std::fflush(stdout);
    execv(python.c_str(), argv2.data());
    std::fprintf(stderr, "shardlab report: could not start %s: %s\n", python.c_str(), std::strerror(errno));
    return 3;
  }
  if (*calibrate_cmd) {
    const auto failed = [](const shardlab::Status& s) {
      std::fprintf(stderr, "shardlab calibrate: %s\n", s.to_string().c_str());
      return s.exit_code();
    };
    const auto print_device = [&](const shardlab::sim::DeviceProfile& p, int processes) {
      char cache[96] = "";
      if (p.cache_bytes > 0) {
        std::snprintf(cache, sizeof cache, " (its first %lld KiB at %.3g GB/s, in cache)",
                      static_cast<long long>(p.cache_bytes / 1024), p.cache_bytes_per_s / 1e9);
      }
      std::printf("device: matrix %.3g GFLOP/s, vector %.3g GFLOP/s, memory %.3g GB/s%s, launch %lld ns, "
                  "allocation %lld ns, runtime host time %lld ns per op, %zu op compute factors (%d process%s at "
                  "once) → %s\n",
                  p.matrix_flops_per_s / 1e9, p.vector_flops_per_s / 1e9, p.memory_bytes_per_s / 1e9, cache,
                  static_cast<long long>(p.launch_ns), static_cast<long long>(p.alloc_ns),
                  static_cast<long long>(p.op_host_ns), p.compute_factors.size(),
                  processes, processes == 1 ? "" : "es", calibrate_out.c_str());
    };
    if (calibrate_topology_out.empty()) {
      auto profile = shardlab::sim::calibrate_cpu_device();
      if (!profile.is_ok()) return failed(profile.status());
      if (auto st = shardlab::sim::write_device_profile(*profile, calibrate_out); !st.is_ok()) return failed(st);
      print_device(*profile, 1);
      return 0;
    }
    // NOTE [Calibrate with the run's process count] in sim/calibrate.h.
    auto env = shardlab::runtime::comm::mpi::MpiEnvironment::initialize(&argc, &argv);
    if (!env.is_ok()) return failed(env.status());
    shardlab::SteadyClock clock;
    auto world = shardlab::runtime::comm::mpi::MpiEnvironment::create_world(clock);
    if (!world.is_ok()) return failed(world.status());
    const int rank = (*world)->rank();
    shardlab::runtime::device::cpu::CpuDevice host({"cpu", rank});
    shardlab::sim::NetworkCalibrationOptions net_options;
    if (!calibrate_sizes.empty()) net_options.sizes = calibrate_sizes;
    auto net = shardlab::sim::calibrate_network(**world, host, clock, net_options);
    if (!net.is_ok()) return failed(net.status());
    auto profile = shardlab::sim::calibrate_device_together(**world, host, clock);
    if (!profile.is_ok()) return failed(profile.status());
    if (rank != 0) return 0;
    const auto topo = shardlab::sim::switch_topology_from(*net, "calibrated-mpi");
    if (auto st = shardlab::sim::write_topology(topo, calibrate_topology_out); !st.is_ok()) return failed(st);
    if (net->ranks == 1) {
      std::printf("MPI: %.3g us per collective call, reduce_scatter copies at %.3g GB/s (one-rank collectives; 1 "
                  "process) → %s\n",
                  static_cast<double>(net->overhead_ns) / 1e3, net->reduce_bytes_per_s / 1e9,
                  calibrate_topology_out.c_str());
    } else {
      std::printf("MPI: %.3g us per call, α %.3g us per round, %.3g GB/s, reductions at %.3g GB/s (collectives on %d "
                  "processes, fitted under the simulator's schedules) → %s\n",
                  static_cast<double>(net->overhead_ns) / 1e3, static_cast<double>(net->latency_ns) / 1e3,
                  net->bytes_per_s / 1e9, net->reduce_bytes_per_s / 1e9, net->ranks, calibrate_topology_out.c_str());
    }
    for (const auto& m : net->samples) {
      const double fitted = net->fitted_ns(m);
      std::printf("  %-14s %9lld B (%s: %d rounds, %lld B on the path): %10.1f us measured, %10.1f us fitted\n",
                  std::string(shardlab::runtime::comm::op_kind_name(m.kind)).c_str(),
                  static_cast<long long>(m.buffer_bytes), m.algorithm.c_str(), m.rounds,
                  static_cast<long long>(m.path_bytes),
                  static_cast<double>(m.time_ns) / 1e3, fitted / 1e3);
    }
    if (auto st = shardlab::sim::write_device_profile(*profile, calibrate_out); !st.is_ok()) return failed(st);
    print_device(*profile, net->ranks);
    return 0;
  }
  if (*devices_cmd) {
    std::printf("simulated device profiles (world.device; sim/profiles/README.md):\n");
    for (const auto& name : shardlab::sim::device_profile_names()) {
      auto p = shardlab::sim::load_device_profile(name);
      if (!p.is_ok()) continue;
      std::printf("  %-9s matrix %g/%g TFLOP/s (bf16/fp32), vector %g TFLOP/s, memory %g TB/s, %.1f GiB — %s\n",
                  name.c_str(), p->matrix_bf16_flops_per_s / 1e12, p->matrix_flops_per_s / 1e12,
                  p->vector_bf16_flops_per_s / 1e12, p->memory_bytes_per_s / 1e12,
                  static_cast<double>(p->capacity_bytes) / static_cast<double>(1 << 30), p->description.c_str());
    }
    std::printf("simulated topologies (world.topology):\n");
    for (const auto& name : shardlab::sim::list_topologies()) {
      auto t = shardlab::sim::load_topology(name);
      if (t.is_ok()) std::printf("  %-16s %s\n", name.c_str(), t->description.c_str());
    }
    {
      namespace cpu = shardlab::runtime::device::cpu;
      const cpu::GemmIsa best = cpu::best_gemm_isa(), used = *cpu::gemm_isa();
      std::printf("cpu backend: GEMM and GELU kernels %s%s on %d thread(s) (SHARDLAB_CPU_ISA=scalar|avx2|avx512 forces a lower "
                  "level, SHARDLAB_CPU_THREADS the count; the bits are the same on every path)\n",
                  std::string(cpu::gemm_isa_name(used)).c_str(),
                  used == best ? " (the best this CPU has)"
                               : (" (forced; this CPU has " + std::string(cpu::gemm_isa_name(best)) + ")").c_str(),
                  cpu::gemm_threads());
    }
    const auto probe = shardlab::runtime::device::hpu::probe_hpu();
    std::string searched;
    for (const auto& p : probe.searched) searched += (searched.empty() ? "" : ", ") + p;
    if (probe.found) {
      std::printf("accelerators: %d Gaudi card(s)%s%s (Synapse %s)\n", probe.device_count,
                  probe.device_type.empty() ? "" : ", type ", probe.device_type.c_str(), probe.library.c_str());
      if (!probe.error.empty()) std::printf("  note: %s\n", probe.error.c_str());
      std::printf("Run scenarios on them with: mpirun -np <cards> shardlab run SCENARIO --backend hpu\n");
    } else {
      std::printf("accelerators: none\n  %s\n", probe.error.empty() ? ("no Gaudi software found (looked in: " + searched + ")").c_str() : probe.error.c_str());
      std::printf("Run scenarios with --backend sim (default, any machine) or under mpiexec with --backend mpi.\n");
    }
    return 0;
  }
  if (*validate_cmd) {
    int code = 0;
    for (const auto& f : validate_files) {
      auto spec = shardlab::cli::load_scenario(f, validate_overrides);
      if (!spec.is_ok()) {
        std::fprintf(stderr, "%s\n", spec.status().message().c_str());
        code = 2;
        continue;
      }
      shardlab::cli::RunArgs probe;
      if (shardlab::Status st = shardlab::cli::scenario_to_run_args(*spec, probe); !st.is_ok()) {
        std::fprintf(stderr, "%s\n", st.message().c_str());
        code = 2;
        continue;
      }
      if (shardlab::Status st = shardlab::cli::check_run_plan(probe); !st.is_ok()) {
        std::fprintf(stderr, "%s: %s\n", f.c_str(), st.message().c_str());
        code = 2;
        continue;
      }
      for (const auto& note : spec->notes) std::printf("%s: note: %s\n", f.c_str(), note.c_str());
      if (validate_print) {
        std::printf("%s", shardlab::cli::to_yaml(*spec).c_str());
      } else {
        std::printf("%s: ok (%s, %d ranks, %d steps)\n", f.c_str(), spec->name.c_str(), spec->world.world_size(),
                    spec->train.steps);
      }
    }
    return code;
  }
  if (*schema_cmd) {
    std::printf("%s", shardlab::cli::schema_reference(schema_markdown).c_str());
    return 0;
  }
  if (*grads_cmd) {
    auto st = shardlab::runtime::fsdp::parse_strategy(grads_strategy);
    if (!st.is_ok()) {
      std::fprintf(stderr, "shardlab grads: %s\n", st.status().with_context("--strategy").message().c_str());
      return 2;
    }
    grads.strategy = *st;
    if (grads_dropout >= 0.0f) grads.dropout = grads_dropout;
    return shardlab::cli::grads_command(grads);
  }
  if (*layout_cmd) {
    const auto fail = [](const shardlab::Status& s) {
      std::fprintf(stderr, "shardlab layout: %s\n", s.message().c_str());
      return s.exit_code();
    };
    auto shapes = shardlab::runtime::fsdp::parse_shapes(layout_shapes);
    if (!shapes.is_ok()) return fail(shapes.status());
    auto dtype = shardlab::parse_dtype(layout_dtype);
    if (!dtype.is_ok()) return fail(dtype.status().with_context("--dtype"));
    auto layout = shardlab::runtime::fsdp::ShardLayout::make(*shapes, layout_world, *dtype, layout_align);
    if (!layout.is_ok()) return fail(layout.status());
    std::printf("%s\n", layout->to_json().c_str());
    return 0;
  }
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  // SHARDLAB_CPU_ISA / SHARDLAB_CPU_THREADS are read once; a bad value is bad input.
  if (const shardlab::Status s = shardlab::runtime::device::cpu::check_cpu_settings(); !s.is_ok()) {
    std::fprintf(stderr, "shardlab: %s\n", s.message().c_str());
    return 2;
  }
  try {
    return main_impl(argc, argv);
  } catch (const shardlab::CheckFailure& e) {
    std::fprintf(stderr, "shardlab: internal error (please report): %s\n", e.what());
    return 70;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "shardlab: internal error (please report): %s\n", e.what());
    return 70;
  }
}
