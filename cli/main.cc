// shardlab: one executable, subcommands (cli/commands/, one file each). Exit codes: 0 ok,
// 1 an expectation failed, 2 bad input (flags, files), 3 runtime failure, 70 internal
// error (a bug).
#include <cstdio>
#include <exception>
#include <vector>

#include "cli/commands/command.h"
#include "runtime/core/check.h"
#include "runtime/device/cpu/gemm.h"

namespace {

constexpr const char* kDescription =
    "shardlab — a harness for sharded (FSDP) training: one runtime that runs in a deterministic\n"
    "simulator, on CPUs with Open MPI, and on Intel Gaudi with HCCL.\n\n"
    "Start with:  shardlab run             (bert-tiny, FSDP FULL_SHARD on 8 simulated ranks, checked against\n"
    "                                       unsharded training)\n"
    "             mpiexec -n 2 shardlab run --backend mpi\n"
    "             shardlab grads --model DIR --inputs BATCH.safetensors --out GRADS.safetensors --world-size 4\n";

int main_impl(int argc, char** argv) {
  CLI::App app{kDescription, "shardlab"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show help for every subcommand");
  namespace cli = shardlab::cli;
  // A braced list runs its elements in order: the order `shardlab --help` lists them.
  const std::vector<cli::Subcommand> commands = {
      cli::add_run_command(app),    cli::add_grads_command(app),     cli::add_validate_command(app),
      cli::add_report_command(app), cli::add_calibrate_command(app), cli::add_schema_command(app),
      cli::add_replay_command(app), cli::add_devices_command(app),   cli::add_layout_command(app),
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr,
                 "shardlab: error: %s\nRun 'shardlab --help' (or 'shardlab SUBCOMMAND --help') for what is allowed.\n",
                 e.what());
    return 2;
  }
  for (const auto& command : commands) {
    if (*command.app) return command.run(&argc, &argv);
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
