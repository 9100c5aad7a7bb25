#include "cli/scenario.h"

#include <cmath>

#include "cli/scenario/accelerate.h"
#include "cli/scenario/document.h"
#include "cli/scenario/messages.h"
#include "cli/scenario/schema.h"
#include "cli/scenario/set.h"
#include "cli/scenario/text.h"
#include "cli/scenario/validate.h"
#include "cli/scenario/values.h"

namespace shardlab::cli {

std::string SourcePos::to_string() const {
  // Line 0 means "somewhere in this file" (a default, or a whole-file problem).
  if (line <= 0) return file;
  return file + ":" + std::to_string(line) + ":" + std::to_string(column > 0 ? column : 1);
}

SourcePos Scenario::where(const std::string& key) const {
  auto it = positions.find(key);
  if (it != positions.end()) return it->second;
  return SourcePos{path, 0, 0};
}

using namespace scenario_detail;

Result<std::uint64_t> parse_seed(std::string_view text, const std::string& what) {
  std::uint64_t v = 0;
  std::string why;
  if (!parse_uint64_text(text, v, why)) return Status::invalid_argument(what + ": " + why + "; " + kSeedAllowed);
  return v;
}

Result<double> parse_max_grad_norm(std::string_view text, const std::string& what) {
  const auto refuse = [&](const std::string& why) {
    return Status::invalid_argument(what + ": " + why + "; allowed: " + kMaxGradNormAllowed);
  };
  double v = 0;
  switch (parse_double(text, v)) {
    case NumParse::kNotNumber: return refuse("expected a number, got " + show(text));
    case NumParse::kOverflow: return refuse(show(text) + " does not fit a double");
    case NumParse::kOk: break;
  }
  if (!std::isfinite(v)) return refuse(show(text) + " is not finite");
  if (v < 0) return refuse(show(text) + " is negative");
  return v;
}

Result<Scenario> parse_scenario(const std::string& path, const std::string& text, const ScenarioOverrides& overrides) {
  SHARDLAB_RETURN_IF_ERROR(screen_text(path, text, "scenario file"));
  const SourcePos start{path, 1, 1};
  SHARDLAB_ASSIGN_OR_RETURN(Node root, parse_yaml(text, file_mapper(path), start));
  if (root.kind == Node::Kind::kNull) {
    return bad(start, "empty scenario", "a scenario needs at least `name:`");
  }
  if (root.kind != Node::Kind::kMap) {
    return bad(root.pos, "the top level is " + describe(root) + ", not a map",
               "a scenario is a map of keys and sections (name:, model:, train:, fsdp:, world: ...)");
  }
  Scenario s;
  s.path = path;
  Problems problems;  // NOTE [Every error]
  problems.add(apply_map(schema(), "", root, s));
  if (!overrides.fsdp_config.empty()) problems.add(apply_fsdp_config(overrides.fsdp_config, s));
  for (std::size_t i = 0; i < overrides.set.size(); ++i) {
    problems.add(apply_set(static_cast<int>(i) + 1, overrides.set[i], s));
  }
  validate(s, root.pos, problems);
  if (!problems.empty()) return problems.shown();
  return s;
}

Result<Scenario> load_scenario(const std::string& path, const ScenarioOverrides& overrides) {
  SHARDLAB_ASSIGN_OR_RETURN(std::string text, read_bounded(path, "scenario file"));
  return parse_scenario(path, text, overrides);
}

std::string_view run_mode_name(RunMode mode) { return mode == RunMode::kTiming ? "timing" : "numerics"; }

std::string_view data_kind_name(DataKind kind) { return kind == DataKind::kFile ? "file" : "synthetic"; }

std::string_view auto_wrap_policy_name(AutoWrapPolicy policy) {
  switch (policy) {
    case AutoWrapPolicy::kTransformer: return "transformer";
    case AutoWrapPolicy::kSize: return "size";
    case AutoWrapPolicy::kNone: return "none";
  }
  return "?";
}

}  // namespace shardlab::cli
