// `shardlab report`: draw a run folder as PNGs with reports/shardlab_report.py.
#include "cli/commands/command.h"

#include <unistd.h>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace shardlab::cli {

namespace {

// The flags: CLI11 binds them at registration, the action reads them.
struct State {
  std::string report_dir;
  std::string report_out;
};

}  // namespace

Subcommand add_report_command(CLI::App& app) {
  auto state = std::make_shared<State>();
  State& flags = *state;
  auto* report_cmd = app.add_subcommand(
      "report",
      "Draw a run folder (or a folder of runs) as PNGs + index.html: per-rank timeline, memory over\n"
      "time, step-time breakdown, loss against the oracle, and for several runs a scaling chart.\n"
      "Runs reports/shardlab_report.py with Debian's /usr/bin/python3 (python3-matplotlib).");
  report_cmd->add_option("dir", flags.report_dir, "A run folder (with metrics.json) or a folder of run folders")
      ->required();
  report_cmd->add_option("--out", flags.report_out, "Where to write the pictures (default: DIR)");
  return {
      report_cmd, [state](int* /*argc*/, char*** /*argv*/) -> int {
        State& flags = *state;
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
          std::fprintf(stderr,
                       "shardlab report: %s not found; install python3-matplotlib python3-numpy (./bootstrap does)\n",
                       python.c_str());
          return 2;
        }
        std::vector<std::string> args = {python, script, flags.report_dir};
        if (!flags.report_out.empty()) {
          args.push_back("--out");
          args.push_back(flags.report_out);
        }
        std::vector<char*> argv2;
        for (auto& a : args) argv2.push_back(a.data());
        argv2.push_back(nullptr);
        std::fflush(stdout);
        execv(python.c_str(), argv2.data());
        std::fprintf(stderr, "shardlab report: could not start %s: %s\n", python.c_str(), std::strerror(errno));
        return 3;
      }};
}

}  // namespace shardlab::cli
