// `shardlab run`: train with FSDP on a backend and check against the unsharded oracle (or time it).
#include "cli/commands/command.h"

#include <cstdint>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>

#include "cli/backends.h"
#include "cli/run_command.h"
#include "cli/scenario.h"
#include "cli/scenario_to_run_args.h"
#include "runtime/fsdp/options.h"
#include "runtime/model/bert.h"
#include "runtime/optim/optimizer.h"

namespace shardlab::cli {

namespace {

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

// The flags: CLI11 binds them at registration, the action reads them.
struct State {
  RunArgs run;
  std::string strategy = "FULL_SHARD";
  std::string prefetch = "BACKWARD_PRE";
  std::string optimizer = "adamw";
  std::string model_name = "bert-tiny";
  std::string head_name = "mlm";
  float dropout = -1.0f;
  std::string scenario_path;
  ScenarioOverrides overrides;
  bool no_oracle = false;
  CLI::Option* lr_opt = nullptr;
};

}  // namespace

Subcommand add_run_command(CLI::App& app) {
  auto state = std::make_shared<State>();
  State& flags = *state;
  flags.run.world_size = 8;
  flags.run.train.global_batch = 16;
  flags.run.train.optimizer.lr = 1e-3f;
  flags.run.train.steps = 5;
  flags.run.train.bert.seq_len = 64;
  auto* run_cmd = app.add_subcommand(
      "run",
      "Train BERT (a preset, seeded synthetic data) or a small MLP with FSDP for a few steps and check it\n"
      "against unsharded training on the concatenated batch (the oracle, same precision policy): bitwise on\n"
      "the simulator, else within the scenario's tolerance or the dtypes' default.");
  run_cmd->add_option("scenario", flags.scenario_path,
                      "A scenario file (YAML; see scenarios/ and docs/scenarios.md). Without one, the flags below "
                      "describe the run (their defaults are scenarios/default.yaml), or --set / --fsdp-config "
                      "override scenarios/default.yaml");
  run_cmd->add_option("--set", flags.overrides.set,
                      "Override a scenario key: section.key=value (repeatable; `shardlab schema` lists the keys)");
  run_cmd->add_option("--dump-graph", flags.run.dump_graph,
                      "Timing mode: also write the captured op graph as JSON (inspect or replay without the model)");
  run_cmd->add_option("--perturb-host-schedule", flags.run.perturb_seed,
                      "Testing: seeded random host yields between the simulator's ranks (outputs must not change)");
  run_cmd->add_option("--fsdp-config", flags.overrides.fsdp_config,
                      "An accelerate config (the YAML `accelerate config` writes, or an fsdp_config JSON) applied "
                      "over the scenario; keys it cannot honour are named (docs/scenarios.md)");
  run_cmd->add_option("--model", flags.model_name, "bert-tiny, bert-mini, bert-small, bert-base, bert-large or mlp")
      ->capture_default_str();
  run_cmd->add_option("--head", flags.head_name, "BERT head: classification, mlm or qa")->capture_default_str();
  run_cmd->add_option("--seq-len", flags.run.train.bert.seq_len, "BERT sequence length of the synthetic batches")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20))
      ->capture_default_str();
  run_cmd
      ->add_option("--dropout", flags.dropout,
                   "Override BERT's hidden and attention dropout (default: the config's 0.1)")
      ->check(CLI::Range(0.0f, 0.999f));
  run_cmd->add_flag("--activation-checkpointing", flags.run.train.bert.activation_checkpointing,
                    "Recompute each BertLayer's forward in backward (gradients unchanged bitwise)");
  run_cmd
      ->add_option("--backend", flags.run.backend,
                   "Where ranks run: sim (threads, virtual time), mpi (CPU processes under mpiexec) or hpu "
                   "(Gaudi cards under mpirun, one process per card)")
      ->check(CLI::IsMember(backend_names()))
      ->capture_default_str();
  run_cmd->add_option("--world-size,-n", flags.run.world_size, "Simulated ranks (sim only; mpi uses mpiexec -n)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  run_cmd->add_option("--strategy", flags.strategy, "FULL_SHARD, SHARD_GRAD_OP, NO_SHARD or HYBRID_SHARD (or 1-4)")
      ->capture_default_str();
  run_cmd
      ->add_option("--devices-per-node", flags.run.train.fsdp.devices_per_node, "HYBRID_SHARD: ranks per shard group")
      ->check(CLI::Range(1, 4096));
  run_cmd->add_option("--backward-prefetch", flags.prefetch, "BACKWARD_PRE, BACKWARD_POST or NONE")
      ->capture_default_str();
  run_cmd->add_flag("--forward-prefetch", flags.run.train.fsdp.forward_prefetch,
                    "Prefetch the next unit during forward");
  run_cmd->add_option("--steps", flags.run.train.steps, "Optimizer steps")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  run_cmd
      ->add_option("--global-batch", flags.run.train.global_batch,
                   "Samples per step over all ranks (a multiple of world size × grad accumulation)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 30))
      ->capture_default_str();
  run_cmd
      ->add_option("--grad-accumulation", flags.run.train.grad_accumulation,
                   "Micro-batches per step (no_sync on all but the last)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  run_cmd->add_option("--max-grad-norm", flags.run.train.max_grad_norm, "Clip the global gradient norm (0: off)")
      ->check(same_rule_as_the_scenario(parse_max_grad_norm, "--max-grad-norm"))
      ->capture_default_str();
  run_cmd->add_option("--hidden", flags.run.train.model.hidden_dim, "Hidden width of the MLP (--model mlp)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 16))
      ->capture_default_str();
  run_cmd
      ->add_option("--layers", flags.run.train.model.num_hidden_layers,
                   "Hidden layers of the MLP (--model mlp; each is one FSDP unit)")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  run_cmd->add_option("--optimizer", flags.optimizer, "adamw or sgd")
      ->check(CLI::IsMember({"adamw", "sgd"}))
      ->capture_default_str();
  flags.lr_opt =
      run_cmd->add_option("--lr", flags.run.train.optimizer.lr, "Learning rate (default 1e-3; 1e-2 for the MLP)")
          ->check(CLI::PositiveNumber);
  run_cmd->add_option("--seed", flags.run.train.seed, "Seed of data and initial parameters (0 to 2^64 - 1)")
      ->check(same_rule_as_the_scenario(parse_seed, "--seed"))
      ->capture_default_str();
  run_cmd->add_flag("--no-oracle", flags.no_oracle,
                    "Skip the comparison with the unsharded oracle (it runs on every numerics run otherwise; the run "
                    "then says it was not checked)");
  run_cmd
      ->add_option("--out", flags.run.out_dir,
                   "Output folder: summary.txt, metrics.json, trace.json, loss.csv, memory.csv "
                   "(reports/FORMATS.md; empty string: write nothing)")
      ->capture_default_str();
  run_cmd->add_flag("--check-collectives", flags.run.check_collectives,
                    "Verify that every rank issues the same collective sequence; report the first divergence");
  return {
      run_cmd, [state, run_cmd](int* argc, char*** argv) -> int {
        State& flags = *state;
        const auto bad = [](const shardlab::Status& s) {
          // A scenario's problems come one per line (NOTE [Every error] in cli/scenario/messages.h).
          std::istringstream lines(s.message());
          for (std::string line; std::getline(lines, line);) std::fprintf(stderr, "shardlab run: %s\n", line.c_str());
          return 2;
        };
        if (!flags.scenario_path.empty() || !flags.overrides.set.empty() || !flags.overrides.fsdp_config.empty()) {
          // With a scenario (a file, or without one the compiled-in scenarios/default.yaml that
          // --set / --fsdp-config then override), the scenario describes the run; only where it
          // runs, where outputs go and the collective check come from flags.
          for (const char* flag : {"--model", "--head", "--seq-len", "--dropout", "--activation-checkpointing",
                                   "--world-size", "--strategy", "--devices-per-node", "--backward-prefetch",
                                   "--forward-prefetch", "--steps", "--global-batch", "--grad-accumulation",
                                   "--max-grad-norm", "--hidden", "--layers", "--optimizer", "--lr", "--seed"}) {
            if (run_cmd->count(flag) > 0) {
              return bad(shardlab::Status::invalid_argument(
                  std::string(flag) +
                  " cannot be combined with a scenario file, --set or --fsdp-config; use "
                  "--set section.key=value (e.g. --set fsdp.sharding_strategy=NO_SHARD)"));
            }
          }
          auto spec = flags.scenario_path.empty()
                          ? parse_scenario(kDefaultScenarioName, std::string(default_scenario_text()), flags.overrides)
                          : load_scenario(flags.scenario_path, flags.overrides);
          if (!spec.is_ok()) return bad(spec.status());
          for (const auto& note : spec->notes) std::printf("note: %s\n", note.c_str());
          const std::string out = flags.run.out_dir;
          const bool out_given = run_cmd->count("--out") > 0;
          const std::string backend = flags.run.backend;
          const std::string dump_graph = flags.run.dump_graph;
          const std::uint64_t perturb_seed = flags.run.perturb_seed;
          if (shardlab::Status st = scenario_to_run_args(*spec, flags.run); !st.is_ok()) return bad(st);
          if (run_cmd->count("--backend") > 0) flags.run.backend = backend;
          if (out_given) {
            flags.run.out_dir = out;
          } else {
            // NOTE [One folder per configuration]: the scenario as its file states it, against
            // what this run does.
            const auto as_written = flags.scenario_path.empty()
                                        ? parse_scenario(kDefaultScenarioName, std::string(default_scenario_text()))
                                        : load_scenario(flags.scenario_path);
            std::string effective = to_yaml(*spec);
            if (flags.run.backend != spec->world.backend->name) effective += "# --backend " + flags.run.backend + "\n";
            if (!as_written.is_ok() || effective != to_yaml(*as_written)) {
              flags.run.out_dir += "-" + config_hash(effective);
            }
          }
          flags.run.dump_graph = dump_graph;
          flags.run.perturb_seed = perturb_seed;
          if (!flags.run.dump_graph.empty() && flags.run.mode != RunMode::kTiming) {
            return bad(
                shardlab::Status::invalid_argument("--dump-graph needs timing mode (world.mode: timing, or --set "
                                                   "world.mode=timing)"));
          }
          if (flags.no_oracle) flags.run.oracle_off = "--no-oracle";
          flags.run.spec = &*spec;
          return run_command(flags.run, argc, argv);
        }
        auto st = shardlab::runtime::fsdp::parse_strategy(flags.strategy);
        if (!st.is_ok()) return bad(st.status().with_context("--strategy"));
        auto pf = shardlab::runtime::fsdp::parse_prefetch(flags.prefetch);
        if (!pf.is_ok()) return bad(pf.status().with_context("--backward-prefetch"));
        flags.run.train.fsdp.strategy = *st;
        flags.run.train.fsdp.backward_prefetch = *pf;
        flags.run.train.optimizer.kind = *shardlab::runtime::optim::parse_optimizer(flags.optimizer);
        if (flags.model_name == "mlp") {
          flags.run.train.model_kind = shardlab::runtime::train::ModelKind::kMlp;
          if (flags.lr_opt->count() == 0) flags.run.train.optimizer.lr = 1e-2f;
        } else {
          auto preset = shardlab::runtime::model::bert_preset(flags.model_name);
          if (!preset.is_ok()) return bad(preset.status().with_context("--model (or mlp)"));
          auto head = shardlab::runtime::model::parse_bert_head(flags.head_name);
          if (!head.is_ok()) return bad(head.status().with_context("--head"));
          flags.run.train.model_kind = shardlab::runtime::train::ModelKind::kBert;
          flags.run.train.bert.config = *preset;
          flags.run.train.bert.head = *head;
          if (flags.dropout >= 0.0f)
            flags.run.train.bert.config.hidden_dropout_prob = flags.run.train.bert.config.attention_probs_dropout_prob =
                flags.dropout;
          flags.run.train.wrap = shardlab::runtime::train::WrapPolicy::kByClass;  // each BertLayer is a unit
          flags.run.model_name = flags.model_name;
        }
        if (shardlab::runtime::fsdp::is_hybrid(*st) && flags.run.train.fsdp.devices_per_node == 0) {
          return bad(shardlab::Status::invalid_argument(
              "--strategy " + std::string(shardlab::runtime::fsdp::strategy_name(*st)) + " needs --devices-per-node"));
        }
        if (flags.no_oracle) flags.run.oracle_off = "--no-oracle";
        if (run_cmd->count("--out") == 0) {
          // NOTE [One folder per configuration]: the flags that change the run, in order.
          std::string changed;
          for (const auto* opt : run_cmd->get_options()) {
            const std::string name = opt->get_name();
            if (opt->count() == 0 || name == "--out" || name == "--no-oracle" || name == "--check-collectives" ||
                name == "--perturb-host-schedule" || name == "--help" ||
                (name == "--backend" && flags.run.backend == kDefaultBackend)) {
              continue;
            }
            changed += name;
            for (const auto& v : opt->results()) changed += " " + v;
            changed += "\n";
          }
          if (!changed.empty()) flags.run.out_dir += "-" + config_hash(changed);
        }
        return run_command(flags.run, argc, argv);
      }};
}

}  // namespace shardlab::cli
