// `shardlab schema`: print the scenario reference.
#include "cli/commands/command.h"

#include <cstdio>
#include <memory>

#include "cli/scenario.h"

namespace shardlab::cli {

namespace {

// The flags: CLI11 binds them at registration, the action reads them.
struct State {
  bool schema_markdown = false;
};

}  // namespace

Subcommand add_schema_command(CLI::App& app) {
  auto state = std::make_shared<State>();
  State& flags = *state;
  auto* schema_cmd = app.add_subcommand(
      "schema",
      "Print the scenario reference: every key, its type, default, allowed values and its PyTorch /\n"
      "accelerate equivalent (docs/scenarios.md is `shardlab schema --markdown`).");
  schema_cmd->add_flag("--markdown", flags.schema_markdown, "As Markdown tables (docs/scenarios.md)");
  return {schema_cmd, [state](int* /*argc*/, char*** /*argv*/) -> int {
            State& flags = *state;
            std::printf("%s", schema_reference(flags.schema_markdown).c_str());
            return 0;
          }};
}

}  // namespace shardlab::cli
