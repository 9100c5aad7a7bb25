// Internal: reading profile JSON objects with errors that name the file, the key and
// what is allowed (shared by sim/models/device/profiles.cc and sim/models/network/topology.cc).
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/core/status.h"

namespace shardlab::sim::detail {

class JsonObject {
 public:
  // `where` prefixes messages: "gaudi2.json: key 'efficiency.matrix'".
  JsonObject(const nlohmann::json& j, std::string origin, std::string path = "")
      : j_(j), origin_(std::move(origin)), path_(std::move(path)) {}

  static Result<nlohmann::json> parse(const std::string& text, const std::string& origin) {
    std::vector<std::string> keys;  // the key path being read, for errors past the syntax (1e400)
    std::string last_key;
    try {
      nlohmann::json::parser_callback_t remember = [&](int depth, nlohmann::json::parse_event_t event,
                                                       nlohmann::json& parsed) {
        if (event == nlohmann::json::parse_event_t::key && parsed.is_string() && depth >= 1) {
          keys.resize(static_cast<std::size_t>(depth));
          keys.back() = parsed.get<std::string>();
          last_key.clear();
          for (const auto& k : keys) last_key += (last_key.empty() ? "" : ".") + k;
        }
        return true;
      };
      nlohmann::json j = nlohmann::json::parse(text, remember);
      if (!j.is_object()) return Status::invalid_argument(origin + ": a profile must be a JSON object");
      return j;
    } catch (const nlohmann::json::parse_error& e) {
      return Status::invalid_argument(origin + ": not valid JSON: " + e.what());
    } catch (const nlohmann::json::exception& e) {  // e.g. a number past the double range: out_of_range.406
      return Status::invalid_argument(origin + ": " + (last_key.empty() ? "" : "key '" + last_key + "': ") + e.what() +
                                      "; allowed: a finite number within its key's range");
    }
  }

  std::string key(const std::string& k) const { return path_.empty() ? k : path_ + "." + k; }
  Status bad(const std::string& k, const std::string& what) const {
    return Status::invalid_argument(origin_ + ": key '" + key(k) + "': " + what);
  }

  // Every key must be one of `allowed`.
  Status only(const std::vector<std::string>& allowed) const {
    for (auto it = j_.begin(); it != j_.end(); ++it) {
      bool ok = false;
      for (const auto& a : allowed) ok = ok || a == it.key();
      if (!ok) {
        std::string list;
        for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
        return bad(it.key(), "unknown key; allowed: " + list);
      }
    }
    return Status::ok();
  }
  bool has(const std::string& k) const { return j_.contains(k); }
  // The value of a key that has() found, for shapes the typed readers do not cover.
  const nlohmann::json& raw(const std::string& k) const { return j_.at(k); }

  Result<JsonObject> object(const std::string& k) const {
    if (!j_.contains(k)) return bad(k, "missing (an object)");
    if (!j_.at(k).is_object()) return bad(k, "must be an object");
    return JsonObject(j_.at(k), origin_, key(k));
  }
  Result<std::string> string(const std::string& k, bool required, std::string fallback = "") const {
    if (!j_.contains(k)) {
      if (required) return bad(k, "missing (a string)");
      return fallback;
    }
    if (!j_.at(k).is_string()) return bad(k, "must be a string");
    return j_.at(k).get<std::string>();
  }
  // A finite number in [lo, hi] (exclusive of lo when lo_open).
  Result<double> number(const std::string& k, double lo, double hi, bool lo_open, std::string allowed) const {
    if (!j_.contains(k)) return bad(k, "missing; allowed: " + allowed);
    const auto& v = j_.at(k);
    if (!v.is_number()) return bad(k, "must be a number; allowed: " + allowed);
    const double d = v.get<double>();
    if (!std::isfinite(d) || d < lo || d > hi || (lo_open && d == lo)) {
      return bad(k, "value " + v.dump() + " out of range; allowed: " + allowed);
    }
    return d;
  }
  Result<double> number_or(const std::string& k, double fallback, double lo, double hi, bool lo_open,
                           std::string allowed) const {
    if (!j_.contains(k)) return fallback;
    return number(k, lo, hi, lo_open, std::move(allowed));
  }
  // A whole number of nanoseconds in [0, 1e9]; `fallback` when absent (nullopt: required).
  Result<std::int64_t> nanos(const std::string& k, std::optional<std::int64_t> fallback = std::nullopt) const {
    const std::string allowed = "an integer number of ns in [0, 1e9]";
    if (fallback && !j_.contains(k)) return *fallback;
    SHARDLAB_ASSIGN_OR_RETURN(const double v, number(k, 0, 1e9, false, allowed));
    if (v != std::floor(v)) return bad(k, "must be " + allowed);
    return static_cast<std::int64_t>(v);
  }
  Result<bool> boolean_or(const std::string& k, bool fallback) const {
    if (!j_.contains(k)) return fallback;
    if (!j_.at(k).is_boolean()) return bad(k, "must be true or false");
    return j_.at(k).get<bool>();
  }
  // An array of strings (required).
  Result<std::vector<std::string>> strings(const std::string& k, const std::string& allowed) const {
    if (!j_.contains(k)) return bad(k, "missing; allowed: " + allowed);
    const auto& v = j_.at(k);
    if (!v.is_array()) return bad(k, "must be an array of strings; allowed: " + allowed);
    std::vector<std::string> out;
    for (const auto& e : v) {
      if (!e.is_string()) return bad(k, "element " + e.dump() + " is not a string; allowed: " + allowed);
      out.push_back(e.get<std::string>());
    }
    return out;
  }
  std::vector<std::string> keys() const {
    std::vector<std::string> out;
    for (auto it = j_.begin(); it != j_.end(); ++it) out.push_back(it.key());
    return out;
  }
  // "notes": free text, a string or an object of strings.
  Status notes_ok(const std::string& k) const {
    if (!j_.contains(k)) return Status::ok();
    const auto& v = j_.at(k);
    if (v.is_string()) return Status::ok();
    if (v.is_object()) {
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (!it->is_string()) return bad(k + "." + it.key(), "must be a string");
      }
      return Status::ok();
    }
    return bad(k, "must be a string or an object of strings");
  }

 private:
  const nlohmann::json& j_;
  std::string origin_, path_;
};

}  // namespace shardlab::sim::detail
