// Messages of the scenario reader: one line `file:line:col: what is wrong; what is allowed`
// per problem (NOTE [Every error]), values quoted as written, did-you-mean suggestions.
//
// Thread safety: plain functions; Problems is a value.
#pragma once

#include <algorithm>
#include <cstddef>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "cli/scenario.h"
#include "runtime/core/status.h"

namespace shardlab::cli::scenario_detail {

// INVALID_ARGUMENT "file:line:col: what; allowed".
Status bad(const SourcePos& at, const std::string& what, const std::string& allowed);
// A value as written, quoted, shortened and with control bytes escaped.
std::string show(std::string_view text);
std::string join(const std::vector<std::string>& items, const std::string& sep = ", ");
std::string lower(std::string_view s);
// Appends byte `c` as it is, or as \xNN when it is a control byte (< 0x20 or 0x7f).
void append_printable(std::string& out, unsigned char c);
// The closest candidate, if it is close enough to be a plausible typo (case-insensitive).
std::optional<std::string> suggest(std::string_view word, const std::vector<std::string>& candidates);

// NOTE [Every error]
// Reading a scenario does not stop at its first problem: every key is read, every check
// runs, and each problem becomes one line `file:line:col: what is wrong; what is allowed`
// of one INVALID_ARGUMENT (so `shardlab validate` lists them all, exit 2). A key whose
// value is refused keeps its default and still counts as given, so the checks across keys
// do not add "missing" errors for it. parse_scenario shows at most kMaxErrorsShown lines
// and says how many more it left out.
inline constexpr std::size_t kMaxErrorsShown = 20;

class Problems {
 public:
  void add(const Status& s) {
    if (s.is_ok()) return;
    std::istringstream lines(s.message());
    for (std::string line; std::getline(lines, line);) {
      if (!line.empty()) lines_.push_back(line);
    }
  }
  bool empty() const { return lines_.empty(); }
  // Whether a problem was reported at `at` (a refused value: checks that build on it are skipped).
  bool reported_at(const SourcePos& at) const {
    if (at.line <= 0) return false;
    const std::string prefix = at.to_string() + ":";
    return std::any_of(lines_.begin(), lines_.end(), [&](const std::string& l) { return l.rfind(prefix, 0) == 0; });
  }
  // Every line (nested readers fold theirs into their caller's).
  Status status() const {
    if (lines_.empty()) return Status::ok();
    return Status::invalid_argument(join(lines_, "\n"));
  }
  // At most kMaxErrorsShown lines, and a last line saying how many more there are.
  Status shown() const {
    if (lines_.size() <= kMaxErrorsShown) return status();
    std::vector<std::string> head(lines_.begin(), lines_.begin() + kMaxErrorsShown);
    const std::size_t more = lines_.size() - kMaxErrorsShown;
    head.push_back("... and " + std::to_string(more) + " more error" + (more == 1 ? "" : "s") + " not shown (at most " +
                   std::to_string(kMaxErrorsShown) + " are listed; fix these and validate again)");
    return Status::invalid_argument(join(head, "\n"));
  }

 private:
  std::vector<std::string> lines_;
};

}  // namespace shardlab::cli::scenario_detail
