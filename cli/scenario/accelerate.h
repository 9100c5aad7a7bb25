// Hugging Face accelerate's config files, read by --fsdp-config (NOTE [accelerate config
// files] in cli/scenario/accelerate.cc says what is honoured, ignored and refused).
//
// Thread safety: plain functions.
#pragma once

#include <string>
#include <vector>

#include "cli/scenario.h"
#include "runtime/core/status.h"

namespace shardlab::cli::scenario_detail {

// The launcher's keys: where processes start and how they meet, not what a step computes
// (ignored, and named on stdout).
const std::vector<std::string>& accelerate_launcher_keys();
// Applies `file` (accelerate's YAML or an fsdp_config JSON) to `s`; what it ignores goes
// to s.notes.
Status apply_fsdp_config(const std::string& file, Scenario& s);

}  // namespace shardlab::cli::scenario_detail
