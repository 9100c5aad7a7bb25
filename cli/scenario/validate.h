// Checks across keys, once the file and every override are read: what no single key can
// say (a file that must exist, a fault that must name a rank of the world, a seq_len the
// model's positions allow).
//
// Thread safety: plain functions (they read files the scenario names).
#pragma once

#include "cli/scenario.h"
#include "cli/scenario/messages.h"

namespace shardlab::cli::scenario_detail {

// Adds one line per problem to `problems` (NOTE [Every error]); `top` is where a missing
// required key is reported.
void validate(const Scenario& s, const SourcePos& top, Problems& problems);

}  // namespace shardlab::cli::scenario_detail
