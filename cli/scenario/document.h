// The document tree: a scenario, an accelerate config or a --set value, read from YAML (or
// JSON) into our own small tree with a position on every node. yaml-cpp drives an event
// handler that builds it (no YAML::Node tree), bounded as NOTE [Hostile scenarios] says.
//
// Thread safety: plain functions.
#pragma once

#include <yaml-cpp/mark.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/scenario.h"
#include "runtime/core/status.h"

namespace shardlab::cli::scenario_detail {

struct Node {
  enum class Kind { kNull, kScalar, kSeq, kMap };
  Kind kind = Kind::kNull;
  SourcePos pos;
  std::string text;          // kScalar
  bool plain = true;         // kScalar: unquoted and untagged
  std::vector<Node> items;   // kSeq
  std::vector<Node> keys;    // kMap, in document order
  std::vector<Node> values;  // kMap, values[i] belongs to keys[i]
};

// What a node is, for messages: "nothing", "a list", "a map", or the scalar as written.
std::string describe(const Node& n);

// Where a yaml-cpp mark is, as a position in the file (or argument) being read.
using Mapper = std::function<SourcePos(const YAML::Mark&)>;
// Positions in `file`.
Mapper file_mapper(const std::string& file);

// Parses one YAML document into a Node (kNull when there is none). `start` is where an
// error without a position is reported.
Result<Node> parse_yaml(const std::string& text, const Mapper& at, const SourcePos& start);

// Parses JSON with nlohmann (syntax errors as file:line:col, depth bounded).
Result<nlohmann::json> parse_json(const std::string& file, const std::string& text, const std::string& what);
// A JSON value as a Node without positions (used only if yaml-cpp cannot re-read the JSON).
Node json_to_node(const nlohmann::json& j, const SourcePos& pos);

}  // namespace shardlab::cli::scenario_detail
