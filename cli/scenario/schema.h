// The schema: every key of a scenario, its spellings, how its value is read, and what the
// reference (`shardlab schema`, docs/scenarios.md) says about it.
//
// NOTE [One schema]
// The parser and the reference read the same table (schema(), built in
// cli/scenario/keys.cc), so a key cannot be documented differently from how it is parsed;
// the default a reference shows is the key's value in a default Scenario.
//
// Thread safety: the table is built once (a function-local static) and read-only after.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cli/scenario.h"
#include "cli/scenario/document.h"
#include "runtime/core/status.h"

namespace shardlab::cli::scenario_detail {

// The largest world a scenario may describe (world.nodes × world.devices_per_node).
inline constexpr std::int64_t kMaxWorldSize = 65536;

using Setter = std::function<Status(const Node& value, const std::string& key, Scenario& s)>;
using Shower = std::function<std::string(const Scenario& s)>;

// How a leaf's value is read (`set`), what it is (`type`, `allowed`) and how its current
// value reads as YAML (`show`).
struct ValueDef {
  Setter set;
  std::string type;
  std::string allowed;
  Shower show;
};

// The reference text of a key: what it means, and the PyTorch / accelerate spelling of the
// same setting ("" where there is none).
struct Doc {
  Doc(std::string h = "", std::string e = "") : help(std::move(h)), equivalent(std::move(e)) {}
  std::string help;
  std::string equivalent;
};

struct KeyDef {
  std::string name;
  std::vector<std::string> aliases;  // accelerate's spellings
  ValueDef value;                    // a leaf
  Doc doc;
  std::vector<KeyDef> children;   // a section (no setter)
  std::vector<KeyDef> item_keys;  // a list of maps (faults): the keys of each entry, for the reference
  bool is_section() const { return !value.set; }
};

// Every key, in document order.
const std::vector<KeyDef>& schema();

// The key named `name` (or spelled as one of its aliases) among `defs`; nullptr if none.
const KeyDef* find_key(const std::vector<KeyDef>& defs, const std::string& name,
                       std::string* spelled_as_alias = nullptr);
// The refusal of an unknown key in section `prefix`: a did-you-mean, the section where a key
// of that name lives, or the keys allowed here.
Status unknown_key(const std::vector<KeyDef>& defs, const std::string& prefix, const std::string& name,
                   const SourcePos& pos);
// Reads every key of `map` into `s` (NOTE [Every error]: a refused key does not stop the
// others), recording each key's position in s.positions.
Status apply_map(const std::vector<KeyDef>& defs, const std::string& prefix, const Node& map, Scenario& s);

}  // namespace shardlab::cli::scenario_detail
