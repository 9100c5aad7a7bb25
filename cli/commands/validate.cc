// `shardlab validate`: check scenario files without running them.
#include "cli/commands/command.h"

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/run_command.h"
#include "cli/scenario.h"
#include "cli/scenario_to_run_args.h"

namespace shardlab::cli {

namespace {

// The flags: CLI11 binds them at registration, the action reads them.
struct State {
  std::vector<std::string> validate_files;
  ScenarioOverrides validate_overrides;
  bool validate_print = false;
};

}  // namespace

Subcommand add_validate_command(CLI::App& app) {
  auto state = std::make_shared<State>();
  State& flags = *state;
  auto* validate_cmd =
      app.add_subcommand("validate",
                         "Check scenario files without running them: exit 0 when every file is valid, 2 with\n"
                         "file:line:col: what is wrong; what is allowed for every problem of each file (at most 20).");
  validate_cmd->add_option("files", flags.validate_files, "Scenario files")->required();
  validate_cmd->add_option("--set", flags.validate_overrides.set, "Override a key: section.key=value (repeatable)");
  validate_cmd->add_option("--fsdp-config", flags.validate_overrides.fsdp_config,
                           "An accelerate config (YAML from `accelerate config`, or an fsdp_config JSON)");
  validate_cmd->add_flag("--print", flags.validate_print,
                         "Print each scenario as canonical YAML with every default filled in");
  return {validate_cmd, [state](int* /*argc*/, char*** /*argv*/) -> int {
            State& flags = *state;
            int code = 0;
            for (const auto& f : flags.validate_files) {
              auto spec = load_scenario(f, flags.validate_overrides);
              if (!spec.is_ok()) {
                std::fprintf(stderr, "%s\n", spec.status().message().c_str());
                code = 2;
                continue;
              }
              RunArgs probe;
              if (shardlab::Status st = scenario_to_run_args(*spec, probe); !st.is_ok()) {
                std::fprintf(stderr, "%s\n", st.message().c_str());
                code = 2;
                continue;
              }
              if (shardlab::Status st = check_run_plan(probe); !st.is_ok()) {
                std::fprintf(stderr, "%s: %s\n", f.c_str(), st.message().c_str());
                code = 2;
                continue;
              }
              for (const auto& note : spec->notes) std::printf("%s: note: %s\n", f.c_str(), note.c_str());
              if (flags.validate_print) {
                std::printf("%s", to_yaml(*spec).c_str());
              } else {
                std::printf("%s: ok (%s, %d ranks, %d steps)\n", f.c_str(), spec->name.c_str(),
                            spec->world.world_size(), spec->train.steps);
              }
            }
            return code;
          }};
}

}  // namespace shardlab::cli
