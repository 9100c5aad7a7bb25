// Text screening: what every file and argument the scenario reader takes must be before a
// parser sees it (NOTE [Hostile scenarios]).
//
// Thread safety: plain functions.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "cli/scenario.h"
#include "runtime/core/status.h"

namespace shardlab::cli::scenario_detail {

// NOTE [Hostile scenarios]
// Scenario text is untrusted. Before yaml-cpp sees it: at most 1 MiB, UTF-8 text without
// NUL or other control bytes. yaml-cpp then drives our own event handler (no YAML::Node
// tree is built) which refuses aliases on sight (so alias bombs never expand), counts
// nodes and limits nesting to kMaxDepth (checked on every collection start, long before
// yaml-cpp's own recursion guard). The walk over the tree stops at the first error.
// Together this bounds time and memory by the input size.
inline constexpr std::size_t kMaxTextBytes = std::size_t{1} << 20;
inline constexpr std::size_t kMaxNodes = 100000;
inline constexpr std::size_t kMaxDepth = 32;

// INVALID_ARGUMENT, positioned in `file`, unless `text` is at most kMaxTextBytes of UTF-8
// without NUL or control bytes (tabs and newlines are fine). `what` names it in the message.
Status screen_text(const std::string& file, std::string_view text, const std::string& what);
// 1-based line and column of a byte offset.
SourcePos pos_of_offset(const std::string& file, std::string_view text, std::size_t offset);
// Reads a regular file of at most kMaxTextBytes.
Result<std::string> read_bounded(const std::string& path, const std::string& what);

}  // namespace shardlab::cli::scenario_detail
