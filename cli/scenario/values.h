// Scalars of a scenario: numbers, booleans, names, sizes, paths, links and rank lists, each
// read from a Node with a message naming the key and what it allows.
//
// Thread safety: plain functions.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "cli/scenario/document.h"
#include "runtime/core/status.h"

namespace shardlab::cli::scenario_detail {

inline constexpr std::int64_t kIntMax = std::numeric_limits<int>::max();
inline constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();

enum class NumParse { kOk, kNotNumber, kOverflow };
// A decimal integer (optional sign) / a number as from_chars reads it (optional '+').
NumParse parse_int64(std::string_view t, std::int64_t& out);
NumParse parse_double(std::string_view t, double& out);
// An unsigned 64-bit decimal (optional '+'); `why` says what is wrong when it is not one.
bool parse_uint64_text(std::string_view text, std::uint64_t& out, std::string& why);

// "an integer from lo to hi", or "an integer >= lo" when hi is kInt64Max.
std::string int_range(std::int64_t lo, std::int64_t hi);

// Each refuses a node of the wrong kind or value with "key: what is wrong; allowed: ...".
Result<std::string> to_str(const Node& n, const std::string& key, const std::string& allowed);
Result<std::int64_t> to_int(const Node& n, const std::string& key, std::int64_t lo, std::int64_t hi);
Result<std::uint64_t> to_uint64(const Node& n, const std::string& key);  // a seed's range (kSeedAllowed)
// `ok` says whether a finite value is in range; `range` describes the range.
Result<double> to_double(const Node& n, const std::string& key, const std::function<bool(double)>& ok,
                         const std::string& range);
// true/false in any case, quoted or not (accelerate writes "true").
Result<bool> to_bool(const Node& n, const std::string& key);
// "512 MiB", "2 GiB", "1.5 GB", "4096", "4096 B".
Result<std::int64_t> to_bytes(const Node& n, const std::string& key);

struct EnumValue {
  std::string canonical;
  std::vector<std::string> also;  // other accepted spellings (matched case-insensitively, like the canonical one)
};
// One of `values` (case-insensitive), as its canonical spelling; `note` follows the list of
// allowed names in the message.
Result<std::string> to_enum(const Node& n, const std::string& key, const std::vector<EnumValue>& values,
                            const std::string& note = "");

// A device, topology or stack: a profile name, or a path (contains '/' or ends in
// .yaml/.json/.yml).
bool looks_like_path(const std::string& v);
// Link names (sim/models/network/topology.h): "a-b" the direct link of two different ranks, "a-net" rank
// a's ports to its switch (b = -1), "leafK-spine" leaf K's uplinks (a = -1, b = K). Rank
// ranges are checked against the world size later, the rest by the topology at run time.
bool parse_link(const std::string& v, std::int64_t& a, std::int64_t& b);
// "0-7, 4095" (cli/run_outputs.h rank_ranges, without that dependency here).
std::string show_ranks(const std::vector<int>& ranks);

}  // namespace shardlab::cli::scenario_detail
