#include "cli/scenario/schema.h"

#include <algorithm>
#include <map>
#include <optional>

#include "cli/scenario/messages.h"

namespace shardlab::cli::scenario_detail {

namespace {

// Where else in the schema a key of this name lives ("train.optimizer" for "lr", "" for the top level).
std::optional<std::string> home_of(const std::vector<KeyDef>& defs, const std::string& name,
                                   const std::string& prefix) {
  for (const auto& d : defs) {
    if (d.name == name || std::find(d.aliases.begin(), d.aliases.end(), name) != d.aliases.end()) return prefix;
  }
  for (const auto& d : defs) {
    if (!d.is_section()) continue;
    if (auto found = home_of(d.children, name, prefix.empty() ? d.name : prefix + "." + d.name)) return found;
  }
  return std::nullopt;
}

}  // namespace

const KeyDef* find_key(const std::vector<KeyDef>& defs, const std::string& name, std::string* spelled_as_alias) {
  for (const auto& d : defs) {
    if (d.name == name) return &d;
  }
  for (const auto& d : defs) {
    for (const auto& a : d.aliases) {
      if (a == name) {
        if (spelled_as_alias) *spelled_as_alias = a;
        return &d;
      }
    }
  }
  return nullptr;
}

Status unknown_key(const std::vector<KeyDef>& defs, const std::string& prefix, const std::string& name,
                   const SourcePos& pos) {
  std::vector<std::string> names, every;
  for (const auto& d : defs) {
    names.push_back(d.name);
    every.push_back(d.name);
    every.insert(every.end(), d.aliases.begin(), d.aliases.end());
  }
  const std::string where = prefix.empty() ? "at the top level" : "in " + prefix;
  const std::string what =
      "unknown " + std::string(prefix.empty() ? "section or key " : "key ") + show(name) + " " + where;
  if (auto s = suggest(name, every)) return bad(pos, what, "did you mean '" + *s + "'?");
  if (name.size() <= 64) {
    const auto home = home_of(schema(), name, "");
    if (home && *home != prefix)
      return bad(pos, what, "'" + name + "' belongs " + (home->empty() ? "at the top level" : "in " + *home));
  }
  return bad(pos, what,
             "allowed " + std::string(prefix.empty() ? "at the top level" : "in " + prefix) + ": " + join(names) +
                 (prefix == "fsdp" ? " (or accelerate's fsdp_* names)" : ""));
}

Status apply_map(const std::vector<KeyDef>& defs, const std::string& prefix, const Node& map, Scenario& s) {
  if (map.kind == Node::Kind::kNull) return Status::ok();
  if (map.kind != Node::Kind::kMap) {
    std::vector<std::string> names;
    for (const auto& d : defs) names.push_back(d.name);
    return bad(
        map.pos,
        (prefix.empty() ? std::string("the scenario") : prefix) + ": expected a map of keys, got " + describe(map),
        "allowed keys: " + join(names));
  }
  struct Seen {
    std::string spelling;
    SourcePos pos;
  };
  std::map<std::string, Seen> seen;  // canonical name → first spelling
  Problems problems;
  for (std::size_t i = 0; i < map.keys.size(); ++i) {
    const Node& k = map.keys[i];
    const Node& v = map.values[i];
    if (k.kind != Node::Kind::kScalar) {
      problems.add(bad(
          k.pos, "a key " + std::string(prefix.empty() ? "at the top level" : "in " + prefix) + " is " + describe(k),
          "allowed: plain key names"));
      continue;
    }
    const KeyDef* def = find_key(defs, k.text);
    if (!def) {
      problems.add(unknown_key(defs, prefix, k.text, k.pos));
      continue;
    }
    const std::string path = prefix.empty() ? def->name : prefix + "." + def->name;
    auto [it, fresh] = seen.emplace(def->name, Seen{k.text, k.pos});
    if (!fresh) {
      if (it->second.spelling == k.text) {
        problems.add(bad(k.pos, "duplicate key " + show(k.text) + " (first at " + it->second.pos.to_string() + ")",
                         "allowed: each key once"));
      } else {
        problems.add(bad(k.pos,
                         show(k.text) + " and " + show(it->second.spelling) + " (at " + it->second.pos.to_string() +
                             ") both set " + path,
                         "allowed: one spelling of each key"));
      }
      continue;
    }
    if (def->is_section()) {
      problems.add(apply_map(def->children, path, v, s));
    } else {
      problems.add(def->value.set(v, path, s));
      s.positions[path] = v.pos;  // also when refused (NOTE [Every error])
    }
  }
  return problems.status();
}
}  // namespace shardlab::cli::scenario_detail
