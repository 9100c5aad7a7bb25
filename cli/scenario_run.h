// From a validated Scenario to the run's arguments (RunArgs), and the scenario's
// expectations checked against the run's metrics.
//
// Parts of the format that later issues implement (timing mode, device and topology
// profiles other than the default, faults, checkpoint/resume, the hpu backend,
// _HYBRID_SHARD_ZERO2) are refused here with INVALID_ARGUMENT naming the key and its
// position — never silently ignored.
#pragma once

#include <nlohmann/json.hpp>

#include "cli/run_command.h"
#include "cli/run_outputs.h"
#include "cli/scenario.h"

namespace shardlab::cli {

// Fills `args` (world size, training options, output folder default out/<name>).
Status scenario_to_run_args(const Scenario& s, RunArgs& args);

// One ExpectResult per expectation the scenario states (metrics as written to metrics.json).
std::vector<ExpectResult> check_expectations(const Scenario& s, const nlohmann::json& metrics);

}  // namespace shardlab::cli
