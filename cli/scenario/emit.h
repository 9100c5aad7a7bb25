// Canonical YAML: how a value is written back (`shardlab validate --print` through
// to_yaml in cli/scenario.h, and the defaults the reference shows).
//
// Thread safety: plain functions.
#pragma once

#include <string>

namespace shardlab::cli::scenario_detail {

// A double-quoted YAML string, escaped.
std::string yaml_string(const std::string& v);
// The shortest form that reads back exactly.
std::string yaml_number(double v);
const char* yaml_bool(bool v);

}  // namespace shardlab::cli::scenario_detail
