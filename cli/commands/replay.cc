// `shardlab replay`: time a captured op graph again, on its network or another.
#include "cli/commands/command.h"

#include <memory>

#include "cli/run_command.h"

namespace shardlab::cli {

namespace {

// The flags: CLI11 binds them at registration, the action reads them.
struct State {
  ReplayArgs replay;
};

}  // namespace

Subcommand add_replay_command(CLI::App& app) {
  auto state = std::make_shared<State>();
  State& flags = *state;
  auto* replay_cmd = app.add_subcommand(
      "replay",
      "Time an op graph again (written by `shardlab run --dump-graph GRAPH.json` in timing mode) without the\n"
      "model: on the network it was captured with, or on another (--topology, --network-model,\n"
      "--collective-algorithm). Writes the usual output folder (reports/FORMATS.md).");
  replay_cmd->add_option("graph", flags.replay.graph, "The op graph (JSON, reports/FORMATS.md)")->required();
  replay_cmd->add_option("--out", flags.replay.out_dir, "Output folder (default out/replay-<graph name>)");
  replay_cmd->add_option("--topology", flags.replay.topology,
                         "Replay on this topology profile instead (`shardlab devices`)");
  replay_cmd->add_option("--network-model", flags.replay.network_model,
                         "alpha_beta or contention instead of the recorded one");
  replay_cmd->add_option("--collective-algorithm", flags.replay.collective_algorithm,
                         "auto, ring, direct, hierarchical, halving_doubling or libnbc instead of the recorded one");
  return {replay_cmd, [state](int* /*argc*/, char*** /*argv*/) -> int {
            State& flags = *state;
            return replay_command(flags.replay);
          }};
}

}  // namespace shardlab::cli
