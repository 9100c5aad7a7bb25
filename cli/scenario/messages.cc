#include "cli/scenario/messages.h"

#include <cctype>
#include <cstdio>

namespace shardlab::cli::scenario_detail {

namespace {

// Optimal-string-alignment distance (an adjacent swap counts 1), case-insensitive.
std::size_t edit_distance(std::string_view a_in, std::string_view b_in) {
  const std::string a = lower(a_in.substr(0, 128)), b = lower(b_in.substr(0, 128));
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

}  // namespace

Status bad(const SourcePos& at, const std::string& what, const std::string& allowed) {
  return Status::invalid_argument(at.to_string() + ": " + what + "; " + allowed);
}

std::string show(std::string_view text) {
  std::string out = "'";
  std::size_t n = 0;
  for (unsigned char c : text) {
    if (++n > 256) {
      out += "...";
      break;
    }
    append_printable(out, c);
  }
  return out + "'";
}

void append_printable(std::string& out, unsigned char c) {
  if (c < 0x20 || c == 0x7f) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(c));
    out += buf;
  } else {
    out += static_cast<char>(c);
  }
}

std::string join(const std::vector<std::string>& items, const std::string& sep) {
  std::string out;
  for (const auto& i : items) out += (out.empty() ? "" : sep) + i;
  return out;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::optional<std::string> suggest(std::string_view word, const std::vector<std::string>& candidates) {
  if (word.size() < 3) return std::nullopt;  // "9" is no typo of "1"
  const std::size_t limit = word.size() == 3 ? 1 : std::min<std::size_t>(3, std::max<std::size_t>(2, word.size() / 4));
  std::optional<std::string> best;
  std::size_t best_d = limit + 1;
  for (const auto& c : candidates) {
    const std::size_t d = edit_distance(word, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  return best;
}
}  // namespace shardlab::cli::scenario_detail
