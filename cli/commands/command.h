// The subcommands of `shardlab`, one file each in cli/commands/: each registers its CLI11
// subcommand with its flags and help on the app, and returns the action that runs when
// the command line chose it. main.cc parses and dispatches; nothing else.
//
// Exit codes (every subcommand): 0 ok, 1 an expectation failed, 2 bad input (flags,
// files), 3 runtime failure, 70 internal error (a bug; main.cc catches it).
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>

namespace shardlab::cli {

struct Subcommand {
  CLI::App* app = nullptr;  // the registered subcommand: *app is true when it was chosen
  // The action, after parsing. argc/argv are main's, for MPI_Init where the command
  // starts MPI. Returns the process's exit code.
  std::function<int(int* argc, char*** argv)> run;
};

// In the order `shardlab --help` lists them.
Subcommand add_run_command(CLI::App& app);
Subcommand add_grads_command(CLI::App& app);
Subcommand add_validate_command(CLI::App& app);
Subcommand add_report_command(CLI::App& app);
Subcommand add_calibrate_command(CLI::App& app);
Subcommand add_schema_command(CLI::App& app);
Subcommand add_replay_command(CLI::App& app);
Subcommand add_devices_command(CLI::App& app);
Subcommand add_layout_command(CLI::App& app);

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

}  // namespace shardlab::cli
