#include "cli/scenario/text.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <system_error>
#include <utility>

#include "cli/scenario/messages.h"

namespace shardlab::cli::scenario_detail {

namespace {

// The first byte offset that is not acceptable text, and why; nullopt when all is well.
std::optional<std::pair<std::size_t, std::string>> find_bad_byte(std::string_view t) {
  std::size_t i = 0;
  while (i < t.size()) {
    const unsigned char c = static_cast<unsigned char>(t[i]);
    if (c == 0) return std::make_pair(i, std::string("NUL byte"));
    if (c < 0x80) {
      if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f) {
        char buf[48];
        std::snprintf(buf, sizeof buf, "control byte 0x%02x", static_cast<unsigned>(c));
        return std::make_pair(i, std::string(buf));
      }
      ++i;
      continue;
    }
    // UTF-8: lead byte, then continuation bytes with the usual overlong/surrogate limits.
    std::size_t len = 0;
    unsigned char lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf) {
      len = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
      len = 3;
      if (c == 0xe0) lo = 0xa0;
      if (c == 0xed) hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      len = 4;
      if (c == 0xf0) lo = 0x90;
      if (c == 0xf4) hi = 0x8f;
    } else {
      return std::make_pair(i, std::string("invalid UTF-8 byte"));
    }
    if (i + len > t.size()) return std::make_pair(i, std::string("truncated UTF-8 sequence"));
    for (std::size_t k = 1; k < len; ++k) {
      const unsigned char cc = static_cast<unsigned char>(t[i + k]);
      const unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xbf;
      if (cc < l || cc > h) return std::make_pair(i, std::string("invalid UTF-8 sequence"));
    }
    i += len;
  }
  return std::nullopt;
}

}  // namespace

SourcePos pos_of_offset(const std::string& file, std::string_view text, std::size_t offset) {
  int line = 1, col = 1;
  for (std::size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return SourcePos{file, line, col};
}

Status screen_text(const std::string& file, std::string_view text, const std::string& what) {
  if (text.size() > kMaxTextBytes) {
    return bad(SourcePos{file, 1, 1}, what + " is " + std::to_string(text.size()) + " bytes",
               "allowed: at most 1 MiB (" + std::to_string(kMaxTextBytes) + " bytes)");
  }
  if (auto b = find_bad_byte(text)) {
    return bad(pos_of_offset(file, text, b->first), b->second + " in " + what,
               "allowed: UTF-8 text without NUL or control characters (tabs and newlines are fine)");
  }
  return Status::ok();
}

Result<std::string> read_bounded(const std::string& path, const std::string& what) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st)) {
    return Status::invalid_argument(path + ": cannot open " + what +
                                    " (no such file); give the path of an existing file");
  }
  if (!std::filesystem::is_regular_file(st)) {
    return Status::invalid_argument(path + ": " + what + " is not a regular file; give the path of a file");
  }
  const auto size = std::filesystem::file_size(path, ec);
  if (!ec && size > kMaxTextBytes) {
    return bad(SourcePos{path, 1, 1}, what + " is " + std::to_string(size) + " bytes",
               "allowed: at most 1 MiB (" + std::to_string(kMaxTextBytes) + " bytes)");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::invalid_argument(path + ": cannot open " + what + "; give a readable file");
  std::string text(kMaxTextBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<std::size_t>(in.gcount()));
  if (text.size() > kMaxTextBytes) {
    return bad(SourcePos{path, 1, 1}, what + " is larger than 1 MiB",
               "allowed: at most 1 MiB (" + std::to_string(kMaxTextBytes) + " bytes)");
  }
  return text;
}
}  // namespace shardlab::cli::scenario_detail
