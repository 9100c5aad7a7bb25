// shardlab: one executable, subcommands. Exit codes: 0 ok, 1 an expectation failed,
// 2 bad input (flags, files), 3 runtime failure, 70 internal error (a bug).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "cli/run_command.h"
#include "runtime/core/check.h"

namespace {

constexpr const char* kDescription =
    "shardlab — a harness for sharded (FSDP) training: one runtime that runs in a deterministic\n"
    "simulator, on CPUs with Open MPI, and (later) on Intel Gaudi.\n\n"
    "Start with:  shardlab run             (4 simulated ranks, checked against unsharded training)\n"
    "             mpiexec -n 2 shardlab run --backend mpi\n";

int main_impl(int argc, char** argv) {
  CLI::App app{kDescription, "shardlab"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show help for every subcommand");

  shardlab::cli::RunArgs run;
  auto* run_cmd = app.add_subcommand(
      "run",
      "Train a small MLP data-parallel for a few steps and check it against unsharded training on the\n"
      "concatenated batch (the oracle). Prints loss and step time per step.");
  run_cmd->add_option("--backend", run.backend, "Where ranks run: sim (threads, virtual time) or mpi (under mpiexec)")
      ->check(CLI::IsMember({"sim", "mpi"}))
      ->capture_default_str();
  run_cmd->add_option("--world-size,-n", run.world_size, "Simulated ranks (sim only; mpi uses mpiexec -n)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  run_cmd->add_option("--steps", run.train.steps, "Optimizer steps")->check(CLI::Range(1, 1000000))->capture_default_str();
  run_cmd->add_option("--global-batch", run.train.global_batch, "Samples per step over all ranks (a multiple of the world size)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 30))
      ->capture_default_str();
  run_cmd->add_option("--hidden", run.train.model.hidden_dim, "Hidden width of the MLP")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 16))
      ->capture_default_str();
  run_cmd->add_option("--lr", run.train.lr, "SGD learning rate")->check(CLI::PositiveNumber)->capture_default_str();
  run_cmd->add_option("--seed", run.train.seed, "Seed of data and initial parameters")->capture_default_str();
  run_cmd->add_flag("!--no-check", run.check, "Skip the comparison with the unsharded oracle");

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
  if (*run_cmd) return shardlab::cli::run_command(run, &argc, &argv);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
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
