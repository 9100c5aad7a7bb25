#include "cli/scenario/values.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <system_error>

#include "cli/scenario.h"
#include "cli/scenario/messages.h"

namespace shardlab::cli::scenario_detail {

NumParse parse_int64(std::string_view t, std::int64_t& out) {
  std::size_t i = 0;
  bool neg = false;
  if (!t.empty() && (t[0] == '+' || t[0] == '-')) {
    neg = t[0] == '-';
    i = 1;
  }
  if (i == t.size()) return NumParse::kNotNumber;
  for (std::size_t k = i; k < t.size(); ++k) {
    if (t[k] < '0' || t[k] > '9') return NumParse::kNotNumber;
  }
  std::uint64_t mag = 0;
  auto r = std::from_chars(t.data() + i, t.data() + t.size(), mag);
  if (r.ec == std::errc::result_out_of_range) return NumParse::kOverflow;
  if (r.ec != std::errc() || r.ptr != t.data() + t.size()) return NumParse::kNotNumber;
  constexpr std::uint64_t kMax = static_cast<std::uint64_t>(kInt64Max);
  if (neg) {
    if (mag > kMax + 1) return NumParse::kOverflow;
    out = mag == kMax + 1 ? std::numeric_limits<std::int64_t>::min() : -static_cast<std::int64_t>(mag);
  } else {
    if (mag > kMax) return NumParse::kOverflow;
    out = static_cast<std::int64_t>(mag);
  }
  return NumParse::kOk;
}

NumParse parse_double(std::string_view t, double& out) {
  std::size_t i = 0;
  if (!t.empty() && t[0] == '+') i = 1;
  if (i == t.size() || !(std::isdigit(static_cast<unsigned char>(t[i])) || t[i] == '.' || t[i] == '-')) {
    return NumParse::kNotNumber;
  }
  if (t[i] == '-' && i == 1) return NumParse::kNotNumber;  // "+-1"
  auto r = std::from_chars(t.data() + i, t.data() + t.size(), out, std::chars_format::general);
  if (r.ec == std::errc::result_out_of_range) return NumParse::kOverflow;
  if (r.ec != std::errc() || r.ptr != t.data() + t.size()) return NumParse::kNotNumber;
  return NumParse::kOk;
}

Result<std::string> to_str(const Node& n, const std::string& key, const std::string& allowed) {
  if (n.kind != Node::Kind::kScalar) return bad(n.pos, key + ": expected a string, got " + describe(n), allowed);
  return n.text;
}

std::string int_range(std::int64_t lo, std::int64_t hi) {
  if (hi == kInt64Max) return "an integer >= " + std::to_string(lo);
  return "an integer from " + std::to_string(lo) + " to " + std::to_string(hi);
}

Result<std::int64_t> to_int(const Node& n, const std::string& key, std::int64_t lo, std::int64_t hi) {
  const std::string allowed = "allowed: " + int_range(lo, hi);
  if (n.kind != Node::Kind::kScalar) return bad(n.pos, key + ": expected an integer, got " + describe(n), allowed);
  std::int64_t v = 0;
  switch (parse_int64(n.text, v)) {
    case NumParse::kNotNumber: return bad(n.pos, key + ": expected an integer, got " + show(n.text), allowed);
    case NumParse::kOverflow:
      return bad(n.pos, key + ": " + show(n.text) + " is too large (integer overflow)", allowed);
    case NumParse::kOk: break;
  }
  if (v < lo || v > hi) return bad(n.pos, key + ": " + std::to_string(v) + " is out of range", allowed);
  return v;
}

bool parse_uint64_text(std::string_view text, std::uint64_t& out, std::string& why) {
  std::string_view t = text;
  if (!t.empty() && t[0] == '+') t.remove_prefix(1);
  std::int64_t probe = 0;
  const NumParse signed_parse = parse_int64(text, probe);
  if (signed_parse == NumParse::kNotNumber) {
    why = "expected an integer, got " + show(text);
    return false;
  }
  if (signed_parse == NumParse::kOverflow && !t.empty() && t[0] == '-') {
    why = show(text) + " is negative";
    return false;
  }
  if (signed_parse == NumParse::kOk && probe < 0) {
    why = show(text) + " is negative";
    return false;
  }
  auto r = std::from_chars(t.data(), t.data() + t.size(), out);
  if (r.ec != std::errc() || r.ptr != t.data() + t.size()) {
    why = show(text) + " is too large (integer overflow)";
    return false;
  }
  return true;
}

Result<std::uint64_t> to_uint64(const Node& n, const std::string& key) {
  const std::string allowed = kSeedAllowed;
  if (n.kind != Node::Kind::kScalar) return bad(n.pos, key + ": expected an integer, got " + describe(n), allowed);
  std::uint64_t v = 0;
  std::string why;
  if (!parse_uint64_text(n.text, v, why)) return bad(n.pos, key + ": " + why, allowed);
  return v;
}

Result<double> to_double(const Node& n, const std::string& key, const std::function<bool(double)>& ok,
                         const std::string& range) {
  const std::string allowed = "allowed: " + range;
  if (n.kind != Node::Kind::kScalar) return bad(n.pos, key + ": expected a number, got " + describe(n), allowed);
  double v = 0;
  switch (parse_double(n.text, v)) {
    case NumParse::kNotNumber: return bad(n.pos, key + ": expected a number, got " + show(n.text), allowed);
    case NumParse::kOverflow: return bad(n.pos, key + ": " + show(n.text) + " does not fit a double", allowed);
    case NumParse::kOk: break;
  }
  if (!std::isfinite(v)) return bad(n.pos, key + ": " + show(n.text) + " is not finite", allowed);
  if (!ok(v)) return bad(n.pos, key + ": " + show(n.text) + " is out of range", allowed);
  return v;
}

Result<bool> to_bool(const Node& n, const std::string& key) {
  const std::string allowed = "allowed: true or false";
  if (n.kind != Node::Kind::kScalar) return bad(n.pos, key + ": expected true or false, got " + describe(n), allowed);
  const std::string v = lower(n.text);
  if (v == "true") return true;
  if (v == "false") return false;
  return bad(n.pos, key + ": expected true or false, got " + show(n.text), allowed);
}

Result<std::string> to_enum(const Node& n, const std::string& key, const std::vector<EnumValue>& values,
                            const std::string& note) {
  std::vector<std::string> names, every;
  for (const auto& v : values) {
    names.push_back(v.canonical);
    every.push_back(v.canonical);
    every.insert(every.end(), v.also.begin(), v.also.end());
  }
  const std::string allowed = "allowed: " + join(names) + note;
  if (n.kind != Node::Kind::kScalar)
    return bad(n.pos, key + ": expected one of the names below, got " + describe(n), allowed);
  const std::string v = lower(n.text);
  for (const auto& e : values) {
    if (v == lower(e.canonical)) return e.canonical;
    for (const auto& a : e.also) {
      if (v == lower(a)) return e.canonical;
    }
  }
  std::string what = key + ": unknown value " + show(n.text);
  if (auto s = suggest(n.text, every)) what += " (did you mean '" + *s + "'?)";
  return bad(n.pos, what, allowed);
}

Result<std::int64_t> to_bytes(const Node& n, const std::string& key) {
  const std::string allowed =
      "allowed: a positive number of bytes, as an integer or with a unit (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB), "
      "e.g. \"512 MiB\"";
  if (n.kind != Node::Kind::kScalar) return bad(n.pos, key + ": expected a size in bytes, got " + describe(n), allowed);
  std::string_view t = n.text;
  std::size_t split = 0;
  while (split < t.size() && (std::isdigit(static_cast<unsigned char>(t[split])) || t[split] == '.')) ++split;
  std::string_view number = t.substr(0, split), unit = t.substr(split);
  while (!unit.empty() && unit.front() == ' ') unit.remove_prefix(1);
  if (number.empty()) return bad(n.pos, key + ": expected a size in bytes, got " + show(n.text), allowed);
  struct Unit {
    const char* name;
    double factor;
  };
  static constexpr Unit kUnits[] = {
      {"", 1},      {"b", 1},        {"kb", 1e3},        {"mb", 1e6},           {"gb", 1e9},
      {"tb", 1e12}, {"kib", 1024.0}, {"mib", 1048576.0}, {"gib", 1073741824.0}, {"tib", 1099511627776.0}};
  const std::string u = lower(unit);
  const Unit* found = nullptr;
  for (const auto& k : kUnits) {
    if (u == k.name) found = &k;
  }
  if (!found) return bad(n.pos, key + ": unknown unit " + show(unit) + " in " + show(n.text), allowed);
  if (number.find('.') == std::string_view::npos) {
    std::int64_t v = 0;
    const NumParse p = parse_int64(number, v);
    if (p == NumParse::kNotNumber) return bad(n.pos, key + ": expected a size in bytes, got " + show(n.text), allowed);
    const double bytes = p == NumParse::kOverflow ? std::numeric_limits<double>::infinity() : double(v) * found->factor;
    if (bytes >= 9.2e18) return bad(n.pos, key + ": " + show(n.text) + " is too large (integer overflow)", allowed);
    if (v < 1) return bad(n.pos, key + ": " + show(n.text) + " is out of range", allowed);
    return v * static_cast<std::int64_t>(found->factor);
  }
  double v = 0;
  if (parse_double(number, v) != NumParse::kOk) {
    return bad(n.pos, key + ": expected a size in bytes, got " + show(n.text), allowed);
  }
  const double bytes = std::floor(v * found->factor);
  if (!(bytes < 9.2e18)) return bad(n.pos, key + ": " + show(n.text) + " is too large (integer overflow)", allowed);
  if (bytes < 1) return bad(n.pos, key + ": " + show(n.text) + " is out of range", allowed);
  return static_cast<std::int64_t>(bytes);
}

bool looks_like_path(const std::string& v) {
  auto ends = [&](std::string_view suffix) {
    return v.size() >= suffix.size() && lower(v.substr(v.size() - suffix.size())) == suffix;
  };
  return v.find('/') != std::string::npos || ends(".yaml") || ends(".yml") || ends(".json");
}

bool parse_link(const std::string& v, std::int64_t& a, std::int64_t& b) {
  const std::size_t dash = v.find('-');
  if (dash == std::string::npos || dash == 0) return false;
  const std::string left = v.substr(0, dash), right = v.substr(dash + 1);
  const auto number = [](const std::string& t, std::int64_t& x) {
    return !t.empty() && t[0] != '+' && t[0] != '-' && parse_int64(t, x) == NumParse::kOk && x >= 0;
  };
  if (left.rfind("leaf", 0) == 0 && right == "spine") {
    a = -1;
    return number(left.substr(4), b);
  }
  if (right == "net") {
    b = -1;
    return number(left, a);
  }
  return number(left, a) && number(right, b) && a != b;
}

std::string show_ranks(const std::vector<int>& ranks) {
  std::string out;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    out += (out.empty() ? "" : ", ") + std::to_string(ranks[i]) + (j > i ? "-" + std::to_string(ranks[j]) : "");
    i = j + 1;
  }
  return out;
}
}  // namespace shardlab::cli::scenario_detail
