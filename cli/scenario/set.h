// --set section.key=value: one override, read through the schema like a key of the file.
//
// Thread safety: plain functions.
#pragma once

#include <string>

#include "cli/scenario.h"
#include "runtime/core/status.h"

namespace shardlab::cli::scenario_detail {

// Applies the `index`-th --set (1-based; its errors read "--set:index:col"). The value is
// YAML (a scalar, a flow sequence or a flow map for a whole section).
Status apply_set(int index, const std::string& arg, Scenario& s);

}  // namespace shardlab::cli::scenario_detail
