#include "cli/scenario/set.h"

#include <algorithm>

#include "cli/scenario/document.h"
#include "cli/scenario/messages.h"
#include "cli/scenario/schema.h"
#include "cli/scenario/text.h"

namespace shardlab::cli::scenario_detail {

Status apply_set(int index, const std::string& arg, Scenario& s) {
  const std::string file = "--set";
  auto at = [&](int col) { return SourcePos{file, index, col}; };
  const std::string allowed =
      "allowed: section.key=value, e.g. train.steps=10 or fsdp.mixed_precision.param_dtype=bf16";
  SHARDLAB_RETURN_IF_ERROR(screen_text(file, arg, "--set " + std::to_string(index)));
  const std::size_t eq = arg.find('=');
  if (eq == std::string::npos) return bad(at(1), "--set " + show(arg) + " has no '='", allowed);
  if (eq == 0) return bad(at(1), "--set " + show(arg) + " has no key before '='", allowed);
  const std::string key = arg.substr(0, eq);
  // Value: YAML, positioned inside the argument.
  const int value_col = static_cast<int>(eq) + 2;
  const Mapper mapper = [&](const YAML::Mark& m) { return SourcePos{file, index, value_col + std::max(m.column, 0)}; };
  SHARDLAB_ASSIGN_OR_RETURN(Node value, parse_yaml(arg.substr(eq + 1), mapper, at(value_col)));
  // Walk the dotted key through the schema.
  const std::vector<KeyDef>* defs = &schema();
  std::string prefix;
  std::size_t start = 0;
  while (true) {
    const std::size_t dot = key.find('.', start);
    const std::string part = key.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const int col = static_cast<int>(start) + 1;
    if (part.empty()) return bad(at(col), "--set " + show(arg) + " has an empty key part", allowed);
    const KeyDef* def = find_key(*defs, part);
    if (!def) return unknown_key(*defs, prefix, part, at(col));
    const std::string path = prefix.empty() ? def->name : prefix + "." + def->name;
    const bool last = dot == std::string::npos;
    if (!def->is_section()) {
      if (!last) {
        return bad(at(static_cast<int>(dot) + 2), path + " is a key, not a section",
                   "allowed: --set " + path + "=value");
      }
      s.positions[path] = value.pos;  // also when refused (NOTE [Every error])
      return def->value.set(value, path, s);
    }
    if (last) return apply_map(def->children, path, value, s);  // a whole section as a flow map
    defs = &def->children;
    prefix = path;
    start = dot + 1;
  }
}

}  // namespace shardlab::cli::scenario_detail
