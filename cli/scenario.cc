#include "cli/scenario.h"

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/exceptions.h>
#include <yaml-cpp/mark.h>
#include <yaml-cpp/parser.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <new>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string_view>
#include <system_error>
#include <utility>

#include "cli/backends.h"
#include "runtime/model/bert.h"
#include "runtime/model/bert_io.h"
#include "sim/models/device/profiles.h"
#include "sim/models/device/stack.h"
#include "sim/models/network/topology.h"

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


namespace {

// NOTE [Hostile scenarios]
// Scenario text is untrusted. Before yaml-cpp sees it: at most 1 MiB, UTF-8 text without
// NUL or other control bytes. yaml-cpp then drives our own event handler (no YAML::Node
// tree is built) which refuses aliases on sight (so alias bombs never expand), counts
// nodes and limits nesting to kMaxDepth (checked on every collection start, long before
// yaml-cpp's own recursion guard). The walk over the tree stops at the first error.
// Together this bounds time and memory by the input size.
constexpr std::size_t kMaxTextBytes = std::size_t{1} << 20;
constexpr std::size_t kMaxNodes = 100000;
constexpr std::size_t kMaxDepth = 32;
constexpr std::int64_t kMaxWorldSize = 65536;
constexpr std::int64_t kPresetMaxPositions = 512;  // every BERT preset (and the MLP's synthetic data)
constexpr std::int64_t kIntMax = std::numeric_limits<int>::max();
constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();
constexpr double kMaxFaultSlowdown = 1e6;  // a straggler's factor; 1 / it is link_degrade's least

// ---------------------------------------------------------------------------------------
// Messages.

Status bad(const SourcePos& at, const std::string& what, const std::string& allowed) {
  return Status::invalid_argument(at.to_string() + ": " + what + "; " + allowed);
}

// A value as written, quoted, shortened and with control bytes escaped.
std::string show(std::string_view text) {
  std::string out = "'";
  std::size_t n = 0;
  for (unsigned char c : text) {
    if (++n > 256) {
      out += "...";
      break;
    }
    if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(c));
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "'";
}

std::string join(const std::vector<std::string>& items, const std::string& sep = ", ") {
  std::string out;
  for (const auto& i : items) out += (out.empty() ? "" : sep) + i;
  return out;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

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

// The closest candidate, if it is close enough to be a plausible typo.
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

// ---------------------------------------------------------------------------------------
// Text screening (NOTE [Hostile scenarios]).

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

// 1-based line and column of a byte offset.
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

// Reads a regular file of at most kMaxTextBytes.
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

// ---------------------------------------------------------------------------------------
// The document tree: our own, small, with a position on every node.

struct Node {
  enum class Kind { kNull, kScalar, kSeq, kMap };
  Kind kind = Kind::kNull;
  SourcePos pos;
  std::string text;          // kScalar
  bool plain = true;         // kScalar: unquoted and untagged
  std::vector<Node> items;   // kSeq
  std::vector<Node> keys;    // kMap, in document order
  std::vector<Node> values;  // kMap, values[i] belongs to keys[i]
};

std::string describe(const Node& n) {
  switch (n.kind) {
    case Node::Kind::kNull:
      return "nothing";
    case Node::Kind::kSeq:
      return "a list";
    case Node::Kind::kMap:
      return "a map";
    case Node::Kind::kScalar:
      break;
  }
  return show(n.text);
}

using Mapper = std::function<SourcePos(const YAML::Mark&)>;

// Thrown by the event handler to stop the parse at once.
struct Reject {
  SourcePos pos;
  std::string what, allowed;
};

bool is_null_word(const std::string& v) { return v.empty() || v == "~" || v == "null" || v == "Null" || v == "NULL"; }

class TreeBuilder final : public YAML::EventHandler {
 public:
  explicit TreeBuilder(const Mapper& at) : at_(at) {}

  void OnDocumentStart(const YAML::Mark& mark) override { doc_pos_ = at_(mark); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t) override {
    count(mark);
    Node n;
    n.pos = at_(mark);
    add(std::move(n));
  }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override {
    throw Reject{at_(mark), "YAML alias (*name) found",
                 "aliases are not allowed in scenarios (which also rules out alias bombs); write the value out"};
  }
  void OnScalar(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t, const std::string& value) override {
    count(mark);
    Node n;
    n.pos = at_(mark);
    n.plain = tag == "?";
    if (n.plain && is_null_word(value)) {
      n.kind = Node::Kind::kNull;
    } else {
      n.kind = Node::Kind::kScalar;
      n.text = value;
    }
    add(std::move(n));
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    open(mark, Node::Kind::kSeq);
  }
  void OnSequenceEnd() override { close(); }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    open(mark, Node::Kind::kMap);
  }
  void OnMapEnd() override { close(); }

  bool has_root() const { return has_root_; }
  Node take_root() { return std::move(root_); }
  const SourcePos& doc_pos() const { return doc_pos_; }

 private:
  void count(const YAML::Mark& mark) {
    if (++nodes_ > kMaxNodes) {
      throw Reject{at_(mark), "more than " + std::to_string(kMaxNodes) + " YAML nodes",
                   "a scenario is a small file; allowed: at most " + std::to_string(kMaxNodes) + " values"};
    }
  }
  void open(const YAML::Mark& mark, Node::Kind kind) {
    count(mark);
    if (stack_.size() >= kMaxDepth) {
      throw Reject{at_(mark), "nesting deeper than " + std::to_string(kMaxDepth) + " levels",
                   "allowed: at most " + std::to_string(kMaxDepth) + " nested maps and lists"};
    }
    Node n;
    n.kind = kind;
    n.pos = at_(mark);
    stack_.push_back(std::move(n));
  }
  void close() {
    Node n = std::move(stack_.back());
    stack_.pop_back();
    add(std::move(n));
  }
  void add(Node n) {
    if (stack_.empty()) {
      root_ = std::move(n);
      has_root_ = true;
      return;
    }
    Node& parent = stack_.back();
    if (parent.kind == Node::Kind::kSeq) {
      parent.items.push_back(std::move(n));
    } else if (parent.keys.size() == parent.values.size()) {
      parent.keys.push_back(std::move(n));
    } else {
      parent.values.push_back(std::move(n));
    }
  }

  const Mapper& at_;
  std::vector<Node> stack_;
  Node root_;
  bool has_root_ = false;
  std::size_t nodes_ = 0;
  SourcePos doc_pos_;
};

// Whether the line of `mark` (or the line before, where yaml-cpp often points) starts with a tab.
bool indented_with_tab(const std::string& text, const YAML::Mark& mark) {
  if (mark.is_null() || mark.line < 0) return false;
  int line = 0;
  bool at_start = true;
  for (char c : text) {
    if (line > mark.line) break;
    if (c == '\n') {
      ++line;
      at_start = true;
    } else if (at_start && c == '\t' && line >= mark.line - 1) {
      return true;
    } else if (c != ' ') {
      at_start = false;
    }
  }
  return false;
}

// Parses one YAML document into a Node (kNull when there is none). `start` is where an
// error without a position is reported.
Result<Node> parse_yaml(const std::string& text, const Mapper& at, const SourcePos& start) {
  auto pos_of = [&](const YAML::Mark& m) { return m.is_null() || m.line < 0 ? start : at(m); };
  try {
    std::istringstream in(text);
    YAML::Parser parser(in);
    TreeBuilder builder(at);
    if (!parser.HandleNextDocument(builder) || !builder.has_root()) {
      Node none;
      none.pos = start;
      return none;
    }
    Node root = builder.take_root();
    TreeBuilder extra(at);
    if (parser.HandleNextDocument(extra) && extra.has_root()) {
      Node second = extra.take_root();
      if (second.kind != Node::Kind::kNull) {
        return bad(extra.doc_pos().line > 0 ? extra.doc_pos() : second.pos, "a second YAML document",
                   "allowed: one document (remove the extra '---')");
      }
    }
    return root;
  } catch (const Reject& r) {
    return bad(r.pos, r.what, r.allowed);
  } catch (const YAML::DeepRecursion& e) {
    return bad(pos_of(e.mark), "nesting too deep (" + e.msg + ")",
               "allowed: at most " + std::to_string(kMaxDepth) + " nested maps and lists");
  } catch (const YAML::Exception& e) {
    return bad(pos_of(e.mark), "YAML syntax error: " + e.msg,
               indented_with_tab(text, e.mark) ? "indent with spaces; YAML does not allow tabs for indentation"
                                               : "fix the YAML syntax (https://yaml.org/spec/1.2.2/)");
  } catch (const std::bad_alloc&) {
    return bad(start, "out of memory while parsing", "allowed: a scenario of at most 1 MiB");
  } catch (const std::exception& e) {
    return bad(start, std::string("unreadable YAML: ") + e.what(), "fix the YAML syntax");
  }
}

Mapper file_mapper(const std::string& file) {
  return [file](const YAML::Mark& m) { return SourcePos{file, m.line + 1, m.column + 1}; };
}

// ---------------------------------------------------------------------------------------
// Canonical YAML.

std::string yaml_string(const std::string& v) {
  std::string out = "\"";
  for (unsigned char c : v) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(c));
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

std::string yaml_number(double v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);  // shortest form that reads back exactly
  return std::string(buf, r.ptr);
}

const char* yaml_bool(bool v) { return v ? "true" : "false"; }

// ---------------------------------------------------------------------------------------
// Scalars.

enum class NumParse { kOk, kNotNumber, kOverflow };

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
    case NumParse::kNotNumber:
      return bad(n.pos, key + ": expected an integer, got " + show(n.text), allowed);
    case NumParse::kOverflow:
      return bad(n.pos, key + ": " + show(n.text) + " is too large (integer overflow)", allowed);
    case NumParse::kOk:
      break;
  }
  if (v < lo || v > hi) return bad(n.pos, key + ": " + std::to_string(v) + " is out of range", allowed);
  return v;
}

// An unsigned 64-bit decimal (optional '+'); `why` says what is wrong when it is not one.
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

// `ok` says whether a finite value is in range; `allowed` describes the range.
Result<double> to_double(const Node& n, const std::string& key, const std::function<bool(double)>& ok,
                         const std::string& range) {
  const std::string allowed = "allowed: " + range;
  if (n.kind != Node::Kind::kScalar) return bad(n.pos, key + ": expected a number, got " + describe(n), allowed);
  double v = 0;
  switch (parse_double(n.text, v)) {
    case NumParse::kNotNumber:
      return bad(n.pos, key + ": expected a number, got " + show(n.text), allowed);
    case NumParse::kOverflow:
      return bad(n.pos, key + ": " + show(n.text) + " does not fit a double", allowed);
    case NumParse::kOk:
      break;
  }
  if (!std::isfinite(v)) return bad(n.pos, key + ": " + show(n.text) + " is not finite", allowed);
  if (!ok(v)) return bad(n.pos, key + ": " + show(n.text) + " is out of range", allowed);
  return v;
}

// true/false in any case, quoted or not (accelerate writes "true").
Result<bool> to_bool(const Node& n, const std::string& key) {
  const std::string allowed = "allowed: true or false";
  if (n.kind != Node::Kind::kScalar) return bad(n.pos, key + ": expected true or false, got " + describe(n), allowed);
  const std::string v = lower(n.text);
  if (v == "true") return true;
  if (v == "false") return false;
  return bad(n.pos, key + ": expected true or false, got " + show(n.text), allowed);
}

struct EnumValue {
  std::string canonical;
  std::vector<std::string> also;  // other accepted spellings (matched case-insensitively, like the canonical one)
};

Result<std::string> to_enum(const Node& n, const std::string& key, const std::vector<EnumValue>& values,
                            const std::string& note = "") {
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

// "512 MiB", "2 GiB", "1.5 GB", "4096", "4096 B".
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

// ---------------------------------------------------------------------------------------
// The schema: every key, its spellings, how its value is read, and what the reference
// (`shardlab schema`, docs/scenarios.md) says about it. NOTE [One schema]: the parser and
// the reference read the same table, so a key cannot be documented differently from how
// it is parsed; the default a reference shows is the key's value in a default Scenario.

using Setter = std::function<Status(const Node& value, const std::string& key, Scenario& s)>;
using Shower = std::function<std::string(const Scenario& s)>;

// How a leaf's value is read (`set`), what it is (`type`, `allowed`) and how its current
// value reads as YAML (`show`).
struct ValueDef {
  Setter set;
  std::string type;
  std::string allowed;
  Shower show;
};

// The reference text of a key: what it means, and the PyTorch / accelerate spelling of the
// same setting ("" where there is none).
struct Doc {
  Doc(std::string h = "", std::string e = "") : help(std::move(h)), equivalent(std::move(e)) {}
  std::string help;
  std::string equivalent;
};

struct KeyDef {
  std::string name;
  std::vector<std::string> aliases;  // accelerate's spellings
  ValueDef value;                    // a leaf
  Doc doc;
  std::vector<KeyDef> children;      // a section (no setter)
  std::vector<KeyDef> item_keys;     // a list of maps (faults): the keys of each entry, for the reference
  bool is_section() const { return !value.set; }
};

KeyDef leaf(std::string name, ValueDef value, Doc doc = {}, std::vector<std::string> aliases = {}) {
  KeyDef k;
  k.name = std::move(name);
  k.aliases = std::move(aliases);
  k.value = std::move(value);
  k.doc = std::move(doc);
  return k;
}

KeyDef section(std::string name, std::vector<KeyDef> children) {
  KeyDef k;
  k.name = std::move(name);
  k.children = std::move(children);
  return k;
}

std::string strip_allowed(std::string a) { return a.rfind("allowed: ", 0) == 0 ? a.substr(9) : a; }

// A path read from a scenario: relative to the folder of the file that gives it, or to the
// current directory when it comes from the command line (--set). NOTE [Relative paths].
std::string anchor_path(const SourcePos& at, const std::string& v) {
  if (v.empty() || at.file == "--set") return v;
  std::filesystem::path p(v);
  if (p.is_absolute()) return v;
  return (std::filesystem::path(at.file).parent_path() / p).lexically_normal().string();
}

// `optional`: null (or nothing) means "" (not given), as for paths and the description.
// `path`: the value is a file or folder, anchored by anchor_path (except `keep`, e.g. "random").
// The value `get` reaches in a copy of `s` (getters take a mutable Scenario, for setting).
template <class Get>
auto value_of(Get get, const Scenario& s) {
  Scenario copy = s;
  return get(copy);
}

template <class Get>
ValueDef str_setter(Get get, std::string allowed, bool optional = false, bool path = false, std::string keep = "") {
  Setter set = [get, allowed, optional, path, keep](const Node& n, const std::string& key, Scenario& s) -> Status {
    if (optional && n.kind == Node::Kind::kNull) {
      get(s).clear();
      return Status::ok();
    }
    SHARDLAB_ASSIGN_OR_RETURN(std::string v, to_str(n, key, allowed));
    get(s) = path && v != keep ? anchor_path(n.pos, v) : v;
    return Status::ok();
  };
  return {set, path ? "path" : "string", strip_allowed(allowed),
          [get](const Scenario& s) { return yaml_string(value_of(get, s)); }};
}

template <class Get>
ValueDef int_setter(Get get, std::int64_t lo, std::int64_t hi) {
  Setter set = [get, lo, hi](const Node& n, const std::string& key, Scenario& s) -> Status {
    SHARDLAB_ASSIGN_OR_RETURN(std::int64_t v, to_int(n, key, lo, hi));
    get(s) = static_cast<std::remove_reference_t<decltype(get(s))>>(v);
    return Status::ok();
  };
  return {set, "integer", int_range(lo, hi),
          [get](const Scenario& s) { return std::to_string(value_of(get, s)); }};
}

template <class Get>
ValueDef double_setter(Get get, std::function<bool(double)> ok, std::string range) {
  Setter set = [get, ok, range](const Node& n, const std::string& key, Scenario& s) -> Status {
    SHARDLAB_ASSIGN_OR_RETURN(get(s), to_double(n, key, ok, range));
    return Status::ok();
  };
  return {set, "number", range, [get](const Scenario& s) { return yaml_number(value_of(get, s)); }};
}

// An optional number: null clears it.
template <class Get>
ValueDef opt_double_setter(Get get, std::function<bool(double)> ok, std::string range) {
  Setter set = [get, ok, range](const Node& n, const std::string& key, Scenario& s) -> Status {
    if (n.kind == Node::Kind::kNull) {
      get(s).reset();
      return Status::ok();
    }
    SHARDLAB_ASSIGN_OR_RETURN(get(s), to_double(n, key, ok, range + ", or null (no check)"));
    return Status::ok();
  };
  return {set, "number or null", range + ", or null (no check)", [get](const Scenario& s) {
            const auto& v = value_of(get, s);
            return v ? yaml_number(*v) : std::string("null");
          }};
}

template <class Get>
ValueDef bool_setter(Get get) {
  Setter set = [get](const Node& n, const std::string& key, Scenario& s) -> Status {
    SHARDLAB_ASSIGN_OR_RETURN(get(s), to_bool(n, key));
    return Status::ok();
  };
  return {set, "bool", "true, false",
          [get](const Scenario& s) { return std::string(yaml_bool(value_of(get, s))); }};
}

std::string enum_allowed(const std::vector<EnumValue>& values, const std::string& note) {
  std::vector<std::string> names;
  for (const auto& v : values) names.push_back(v.canonical);
  return join(names) + note;
}

// world.backend: the registered backends (cli/backends.h), in their order.
std::vector<EnumValue> backend_values() {
  std::vector<EnumValue> values;
  for (const auto& name : backend_names()) values.push_back({name, {}});
  return values;
}

template <class Get>
ValueDef enum_setter(Get get, std::vector<EnumValue> values, std::string note = "") {
  Setter set = [get, values, note](const Node& n, const std::string& key, Scenario& s) -> Status {
    SHARDLAB_ASSIGN_OR_RETURN(get(s), to_enum(n, key, values, note));
    return Status::ok();
  };
  return {set, "name", enum_allowed(values, note), [get](const Scenario& s) { return value_of(get, s); }};
}

// A device or topology: a profile name, or a path (contains '/' or ends in .yaml/.json/.yml).
bool looks_like_path(const std::string& v) {
  auto ends = [&](std::string_view suffix) {
    return v.size() >= suffix.size() && lower(v.substr(v.size() - suffix.size())) == suffix;
  };
  return v.find('/') != std::string::npos || ends(".yaml") || ends(".yml") || ends(".json");
}

template <class Get>
ValueDef profile_setter(Get get, std::vector<std::string> names, std::string what) {
  const std::string allowed = join(names) + ", or a path to a " + what + " profile file (.json)";
  Setter set = [get, names, what, allowed](const Node& n, const std::string& key, Scenario& s) -> Status {
    SHARDLAB_ASSIGN_OR_RETURN(std::string v, to_str(n, key, "allowed: " + allowed));
    if (looks_like_path(v)) {
      get(s) = anchor_path(n.pos, v);  // existence is checked once everything is read
      return Status::ok();
    }
    for (const auto& name : names) {
      if (lower(v) == name) {
        get(s) = name;
        return Status::ok();
      }
    }
    std::string msg = key + ": unknown " + what + " profile " + show(v);
    if (auto sug = suggest(v, names)) msg += " (did you mean '" + *sug + "'?)";
    return bad(n.pos, msg, "allowed: " + allowed);
  };
  return {set, "name or path", allowed, [get](const Scenario& s) { return value_of(get, s); }};
}

Status set_betas(const Node& n, const std::string& key, Scenario& s) {
  const std::string allowed = "allowed: a list of two numbers in [0, 1), e.g. [0.9, 0.999]";
  if (n.kind != Node::Kind::kSeq || n.items.size() != 2) {
    std::string got = n.kind == Node::Kind::kSeq ? "a list of " + std::to_string(n.items.size()) : describe(n);
    return bad(n.pos, key + ": expected [beta1, beta2], got " + got, allowed);
  }
  auto in_unit = [](double v) { return v >= 0 && v < 1; };
  SHARDLAB_ASSIGN_OR_RETURN(s.train.optimizer.beta1, to_double(n.items[0], key + "[0]", in_unit, "a number in [0, 1)"));
  SHARDLAB_ASSIGN_OR_RETURN(s.train.optimizer.beta2, to_double(n.items[1], key + "[1]", in_unit, "a number in [0, 1)"));
  return Status::ok();
}

bool is_class_name(std::string_view v) {
  if (v.empty() || std::isdigit(static_cast<unsigned char>(v[0]))) return false;
  return std::all_of(v.begin(), v.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.'; });
}

// A list of class names, or one comma-separated string (accelerate writes "BertLayer,BertEmbeddings").
Status set_layer_classes(const Node& n, const std::string& key, Scenario& s) {
  const std::string allowed = "allowed: a list of module class names, or one comma-separated string, e.g. BertLayer";
  std::vector<std::pair<std::string, SourcePos>> names;
  if (n.kind == Node::Kind::kScalar) {
    std::string_view t = n.text;
    while (true) {
      const std::size_t comma = t.find(',');
      std::string_view part = t.substr(0, comma);
      while (!part.empty() && part.front() == ' ') part.remove_prefix(1);
      while (!part.empty() && part.back() == ' ') part.remove_suffix(1);
      names.emplace_back(std::string(part), n.pos);
      if (comma == std::string_view::npos) break;
      t.remove_prefix(comma + 1);
    }
  } else if (n.kind == Node::Kind::kSeq) {
    for (const auto& item : n.items) {
      SHARDLAB_ASSIGN_OR_RETURN(std::string v, to_str(item, key, allowed));
      names.emplace_back(v, item.pos);
    }
  } else {
    return bad(n.pos, key + ": expected class names, got " + describe(n), allowed);
  }
  std::vector<std::string> out;
  for (const auto& [name, pos] : names) {
    if (!is_class_name(name)) return bad(pos, key + ": " + show(name) + " is not a class name", allowed);
    out.push_back(name);
  }
  s.fsdp.transformer_layer_cls_to_wrap = std::move(out);
  return Status::ok();
}

// trace.ranks: a list of ranks, or one string of ranks and ranges ("0-7, 4095").
Status set_trace_ranks(const Node& n, const std::string& key, Scenario& s) {
  const std::string allowed = "allowed: a list of ranks (e.g. [0, 1, 4095]) or a string of ranks and ranges (e.g. "
                              "\"0-7, 4095\"), each a rank of the world";
  std::vector<int> ranks;
  const auto add = [&](std::string_view part, const SourcePos& pos) -> Status {
    while (!part.empty() && part.front() == ' ') part.remove_prefix(1);
    while (!part.empty() && part.back() == ' ') part.remove_suffix(1);
    const std::size_t dash = part.find('-', 1);
    const auto number = [&](std::string_view t, int& out) {
      if (t.empty() || t.size() > 9 || !std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        return false;
      }
      out = std::stoi(std::string(t));
      return true;
    };
    int lo = 0, hi = 0;
    const bool ok = dash == std::string_view::npos ? number(part, lo) && number(part, hi)
                                                   : number(part.substr(0, dash), lo) && number(part.substr(dash + 1), hi);
    if (!ok || hi < lo) return bad(pos, key + ": " + show(std::string(part)) + " is not a rank or a range lo-hi", allowed);
    if (hi - lo >= 1 << 20) return bad(pos, key + ": the range " + std::string(part) + " is too long", allowed);
    for (int r = lo; r <= hi; ++r) ranks.push_back(r);
    return Status::ok();
  };
  if (n.kind == Node::Kind::kScalar) {
    std::string_view t = n.text;
    while (true) {
      const std::size_t comma = t.find(',');
      SHARDLAB_RETURN_IF_ERROR(add(t.substr(0, comma), n.pos));
      if (comma == std::string_view::npos) break;
      t.remove_prefix(comma + 1);
    }
  } else if (n.kind == Node::Kind::kSeq && !n.items.empty()) {
    for (const auto& item : n.items) {
      if (item.kind != Node::Kind::kScalar) return bad(item.pos, key + ": expected a rank, got " + describe(item), allowed);
      SHARDLAB_RETURN_IF_ERROR(add(item.text, item.pos));
    }
  } else {
    return bad(n.pos, key + ": expected ranks, got " + describe(n), allowed);
  }
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  s.trace.ranks = std::move(ranks);
  return Status::ok();
}

// "0-7, 4095" (cli/run_outputs.h rank_ranges, without that dependency here).
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

Status set_peak_memory(const Node& n, const std::string& key, Scenario& s) {
  if (n.kind == Node::Kind::kNull) {
    s.expect.max_peak_memory_per_rank.reset();
    return Status::ok();
  }
  SHARDLAB_ASSIGN_OR_RETURN(s.expect.max_peak_memory_per_rank, to_bytes(n, key));
  return Status::ok();
}

// Link names (sim/models/network/topology.h): "a-b" the direct link of two different ranks, "a-net" rank
// a's ports to its switch (b = -1), "leafK-spine" leaf K's uplinks (a = -1, b = K). Rank
// ranges are checked against the world size later, the rest by the topology at run time.
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

const std::vector<EnumValue>& fault_kinds() {
  static const std::vector<EnumValue> kKinds = {{"crash", {}},     {"hang", {}},      {"straggler", {}},
                                                {"corrupt", {}},   {"link_down", {}}, {"link_degrade", {"link_degraded"}},
                                                {"view_offset", {}}};
  return kKinds;
}

// world.mode, held as the RunMode it names.
template <class Get>
ValueDef mode_setter(Get get) {
  static const std::vector<EnumValue> kModes = {{"numerics", {}}, {"timing", {}}};
  Setter set = [get](const Node& n, const std::string& key, Scenario& s) -> Status {
    SHARDLAB_ASSIGN_OR_RETURN(std::string name, to_enum(n, key, kModes));
    get(s) = name == "timing" ? RunMode::kTiming : RunMode::kNumerics;
    return Status::ok();
  };
  return {set, "name", enum_allowed(kModes, ""),
          [get](const Scenario& s) { return std::string(run_mode_name(value_of(get, s))); }};
}

// faults[].kind: one of fault_kinds(), held as the sim::FaultKind it names.
template <class Get>
ValueDef fault_kind_setter(Get get) {
  Setter set = [get](const Node& n, const std::string& key, Scenario& s) -> Status {
    SHARDLAB_ASSIGN_OR_RETURN(std::string name, to_enum(n, key, fault_kinds()));
    SHARDLAB_ASSIGN_OR_RETURN(get(s).kind, sim::parse_fault_kind(name));
    return Status::ok();
  };
  return {set, "name", enum_allowed(fault_kinds(), ""), [get](const Scenario& s) {
            const auto kind = value_of(get, s).kind;
            return kind ? std::string(sim::fault_kind_name(*kind)) : std::string();
          }};
}

std::vector<KeyDef> fault_keys() {
  auto f = [](Scenario& s) -> Scenario::Fault& { return s.faults.back(); };
  const std::string link_allowed =
      "\"a-b\" (the direct link of two different ranks, e.g. \"0-1\"), \"a-net\" (rank a's ports to its switch) or "
      "\"leafK-spine\" (leaf switch K's uplinks)";
  const std::string offset_allowed =
      "a byte offset from 0 to 18446744073709551615, decimal or 0x-hexadecimal, a multiple of 4 (the fp32 element "
      "size), e.g. 13835057943613014016 (the seed bug's)";
  return {
      leaf("kind", fault_kind_setter(f),
           {"what goes wrong (required); crash/hang end the run (exit 3), straggler/link_degrade slow it down, "
            "corrupt changes a collective's payload, view_offset corrupts a parameter view (sim/faults/faults.h)"}),
      leaf("rank", int_setter([f](Scenario& s) -> int& { return f(s).rank; }, 0, kMaxWorldSize - 1),
           {"the faulty rank (every kind but the link faults); -1: not given"}),
      leaf("step", int_setter([f](Scenario& s) -> int& { return f(s).step; }, 1, kIntMax),
           {"crash, hang, view_offset: the step it happens at (1-based, like the step table); -1: not given"}),
      leaf("time_ms",
           double_setter([f](Scenario& s) -> double& { return f(s).time_ms; }, [](double v) { return v >= 0; },
                         "a finite number of milliseconds >= 0 (virtual time from the start of the run, "
                         "initialization included)"),
           {"crash, hang, link faults: when it happens; < 0: not given (link faults start at 0)"}),
      leaf("link",
           {[f, link_allowed](const Node& n, const std::string& key, Scenario& s) -> Status {
              SHARDLAB_ASSIGN_OR_RETURN(std::string v, to_str(n, key, "allowed: " + link_allowed));
              std::int64_t a = 0, b = 0;
              if (!parse_link(v, a, b)) return bad(n.pos, key + ": malformed link " + show(v), "allowed: " + link_allowed);
              f(s).link = v;
              return Status::ok();
            },
            "string", link_allowed, [f](const Scenario& s) { return yaml_string(value_of(f, s).link); }},
           {"link_down, link_degrade: which link"}),
      leaf("factor",
           double_setter([f](Scenario& s) -> double& { return f(s).factor; }, [](double v) { return v > 0; },
                         "a finite number > 0"),
           {"straggler: slowdown in [1, 1e6]; link_degrade: bandwidth factor in [1e-6, 1]"}),
      leaf("collective", int_setter([f](Scenario& s) -> int& { return f(s).collective; }, 0, kIntMax),
           {"corrupt: which of the rank's collectives with a payload (0-based)"}),
      leaf("integrity_check", bool_setter([f](Scenario& s) -> bool& { return f(s).integrity_check; }),
           {"corrupt: a checksum detects the damage (the run ends, exit 3) instead of silent damage"}),
      leaf("unit", int_setter([f](Scenario& s) -> int& { return f(s).unit; }, 0, kIntMax),
           {"view_offset: the FSDP unit (0-based) whose first parameter view is corrupted"}),
      leaf("offset",
           {[f, offset_allowed](const Node& n, const std::string& key, Scenario& s) -> Status {
              SHARDLAB_ASSIGN_OR_RETURN(std::string v, to_str(n, key, "allowed: " + offset_allowed));
              const bool hex = v.size() > 2 && v[0] == '0' && (v[1] == 'x' || v[1] == 'X');
              const char* first = v.data() + (hex ? 2 : 0);
              const char* last = v.data() + v.size();
              std::uint64_t x = 0;
              const auto r = std::from_chars(first, last, x, hex ? 16 : 10);
              if (first == last || r.ec != std::errc() || r.ptr != last || x % 4 != 0) {
                return bad(n.pos, key + ": " + show(v) + " is not a byte offset that is a multiple of 4",
                           "allowed: " + offset_allowed);
              }
              f(s).offset = x;
              return Status::ok();
            },
            "integer", offset_allowed, [f](const Scenario& s) { return std::to_string(value_of(f, s).offset); }},
           {"view_offset: the byte offset the view gets"}),
  };
}

// NOTE [Every error]
// Reading a scenario does not stop at its first problem: every key is read, every check
// runs, and each problem becomes one line `file:line:col: what is wrong; what is allowed`
// of one INVALID_ARGUMENT (so `shardlab validate` lists them all, exit 2). A key whose
// value is refused keeps its default and still counts as given, so the checks across keys
// do not add "missing" errors for it. parse_scenario shows at most kMaxErrorsShown lines
// and says how many more it left out.
constexpr std::size_t kMaxErrorsShown = 20;

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

Status apply_map(const std::vector<KeyDef>& defs, const std::string& prefix, const Node& map, Scenario& s);

Status set_faults(const Node& n, const std::string& key, Scenario& s) {
  const std::string allowed = "allowed: a list of maps, e.g. [{kind: crash, rank: 1, step: 2}]";
  for (auto it = s.positions.begin(); it != s.positions.end();) {
    it = it->first.rfind("faults[", 0) == 0 ? s.positions.erase(it) : std::next(it);
  }
  s.faults.clear();
  if (n.kind == Node::Kind::kNull) return Status::ok();
  if (n.kind != Node::Kind::kSeq) return bad(n.pos, key + ": expected a list of faults, got " + describe(n), allowed);
  static const std::vector<KeyDef> kFaultKeys = fault_keys();
  Problems problems;
  for (std::size_t i = 0; i < n.items.size(); ++i) {
    const Node& item = n.items[i];
    const std::string name = "faults[" + std::to_string(i) + "]";
    if (item.kind != Node::Kind::kMap) {
      problems.add(bad(item.pos, name + ": expected a map, got " + describe(item), allowed));
      continue;
    }
    s.faults.emplace_back();
    s.faults.back().pos = item.pos;
    problems.add(apply_map(kFaultKeys, name, item, s));
  }
  return problems.status();
}

Status set_grads_match(const Node& n, const std::string& key, Scenario& s) {
  const std::string allowed = "allowed: true, false, or {rtol: <number >= 0>, atol: <number >= 0>}";
  s.expect.oracle_off = false;
  if (n.kind == Node::Kind::kNull) {
    s.expect.grads_match_unsharded.reset();
    s.expect.oracle_off = true;
    return Status::ok();
  }
  if (n.kind == Node::Kind::kMap) {
    auto non_negative = [](double v) { return v >= 0; };
    static const std::vector<KeyDef> kTolKeys = {
        leaf("rtol", double_setter([](Scenario& sc) -> double& { return sc.expect.grads_match_unsharded->rtol; },
                                   non_negative, "a finite number >= 0")),
        leaf("atol", double_setter([](Scenario& sc) -> double& { return sc.expect.grads_match_unsharded->atol; },
                                   non_negative, "a finite number >= 0")),
    };
    s.expect.grads_match_unsharded = Scenario::Tolerance{};
    return apply_map(kTolKeys, key, n, s);
  }
  if (n.kind != Node::Kind::kScalar)
    return bad(n.pos, key + ": expected true, false or a map, got " + describe(n), allowed);
  const std::string v = lower(n.text);
  if (v == "true") {
    s.expect.grads_match_unsharded = Scenario::Tolerance{};
  } else if (v == "false") {
    s.expect.grads_match_unsharded.reset();
    s.expect.oracle_off = true;
  } else {
    return bad(n.pos, key + ": expected true, false or {rtol, atol}, got " + show(n.text), allowed);
  }
  return Status::ok();
}

std::string show_grads_match(const Scenario& s) {
  if (s.expect.oracle_off) return "false";
  if (!s.expect.grads_match_unsharded) return "unset";
  return "true";
}

// Keys accelerate configs carry that do not change what shardlab computes.
ValueDef ignored_bool() {
  return {[](const Node& n, const std::string& key, Scenario&) -> Status { return to_bool(n, key).status(); },
          "bool", "true, false (accepted, no effect)", [](const Scenario&) { return std::string("false"); }};
}

std::vector<EnumValue> preset_values() {
  std::vector<EnumValue> v;
  for (const auto& p : runtime::model::bert_preset_names()) v.push_back({p, {}});
  v.push_back({"mlp", {}});
  return v;
}

std::vector<KeyDef> build_schema() {
  using S = Scenario;
  auto positive = [](double v) { return v > 0; };
  auto non_negative = [](double v) { return v >= 0; };
  auto below_one = [](double v) { return v >= 0 && v < 1; };
  auto any = [](double) { return true; };
  const std::vector<EnumValue> dtypes = {{"fp32", {"float32"}}, {"bf16", {"bfloat16"}}, {"fp16", {"float16"}}};
  std::vector<KeyDef> top;
  top.push_back(leaf("name",
                     str_setter([](S& s) -> std::string& { return s.name; }, "allowed: letters, digits, '_', '.' and '-'"),
                     {"required; names the output folder (out/<name>)"}));
  top.push_back(leaf("description",
                     str_setter([](S& s) -> std::string& { return s.description; }, "allowed: any text", true),
                     {"free text"}));
  top.push_back(leaf("seed",
                     {[](const Node& n, const std::string& key, S& s) -> Status {
                        SHARDLAB_ASSIGN_OR_RETURN(s.seed, to_uint64(n, key));
                        return Status::ok();
                      },
                      "integer", "an integer from 0 to 18446744073709551615",
                      [](const S& s) { return std::to_string(s.seed); }},
                     {"seed of the synthetic data, the initial parameters and dropout", "transformers set_seed / Trainer seed"}));
  top.push_back(section(
      "model",
      {
          leaf("preset", enum_setter([](S& s) -> std::string& { return s.model.preset; }, preset_values()),
               {"a BERT size (ignored when model.config is set), or the small MLP of the FSDP core",
                "bert-tiny … bert-large: Hugging Face BertConfig sizes (google/bert_uncased_L-2_H-128_A-2 … bert-large-uncased)"}),
          leaf("config",
               str_setter([](S& s) -> std::string& { return s.model.config; },
                          "allowed: a path to a Hugging Face config.json", true, /*path=*/true),
               {"a Hugging Face config.json; \"\": the preset", "BertConfig.from_pretrained"}),
          leaf("head",
               enum_setter([](S& s) -> std::string& { return s.model.head; },
                           {{"classification", {"BertForSequenceClassification"}},
                            {"mlm", {"BertForMaskedLM"}},
                            {"qa", {"BertForQuestionAnswering"}}}),
               {"the model head", "BertForSequenceClassification | BertForMaskedLM | BertForQuestionAnswering"}),
          leaf("weights",
               str_setter([](S& s) -> std::string& { return s.model.weights; },
                          "allowed: random, or a path to a model.safetensors", false, /*path=*/true, "random"),
               {"initial parameters: seeded random, or a Hugging Face model.safetensors",
                "from_pretrained (model.safetensors)"}),
      }));
  top.push_back(section(
      "data",
      {
          leaf("kind", enum_setter([](S& s) -> std::string& { return s.data.kind; }, {{"synthetic", {}}, {"file", {}}}),
               {"seeded synthetic batches, or token batches read from data.path"}),
          leaf("path",
               str_setter([](S& s) -> std::string& { return s.data.path; },
                          "allowed: a path to a batch .safetensors", true, /*path=*/true),
               {"kind file: input_ids, attention_mask, labels … as safetensors; rows are cycled"}),
          leaf("batch_size_per_rank",
               int_setter([](S& s) -> std::int64_t& { return s.data.batch_size_per_rank; }, 1, kIntMax),
               {"samples per rank per step (global batch = this × world size)",
                "TrainingArguments per_device_train_batch_size"}),
          leaf("seq_len", int_setter([](S& s) -> std::int64_t& { return s.data.seq_len; }, 1, kIntMax),
               {"tokens per sample (at most the model's max_position_embeddings)", "tokenizer max_length"}),
      }));
  top.push_back(section(
      "train",
      {
          leaf("steps", int_setter([](S& s) -> int& { return s.train.steps; }, 1, kIntMax),
               {"optimizer steps", "TrainingArguments max_steps"}),
          leaf("grad_accumulation", int_setter([](S& s) -> int& { return s.train.grad_accumulation; }, 1, kIntMax),
               {"micro-batches per step; all but the last under no_sync",
                "gradient_accumulation_steps; FSDP.no_sync()"}),
          leaf("max_grad_norm",
               double_setter([](S& s) -> double& { return s.train.max_grad_norm; }, non_negative, kMaxGradNormAllowed),
               {"clip the global gradient norm", "FSDP.clip_grad_norm_(max_norm); TrainingArguments max_grad_norm"}),
          leaf("precision",
               enum_setter([](S& s) -> std::string& { return s.train.precision; },
                           {{"fp32", {"float32"}}, {"bf16", {"bfloat16"}}}),
               {"compute dtype of BERT; bf16 also makes an fp32 fsdp.mixed_precision.param_dtype bf16",
                "accelerate mixed_precision (no | bf16); bf16 autocast"}),
          section("optimizer",
                  {
                      leaf("name",
                           enum_setter([](S& s) -> std::string& { return s.train.optimizer.name; },
                                       {{"adamw", {}}, {"sgd", {}}}),
                           {"the optimizer, elementwise on each rank's shard", "torch.optim.AdamW | torch.optim.SGD"}),
                      leaf("lr",
                           double_setter([](S& s) -> double& { return s.train.optimizer.lr; }, positive,
                                         "a finite number > 0"),
                           {"learning rate", "lr"}),
                      leaf("weight_decay",
                           double_setter([](S& s) -> double& { return s.train.optimizer.weight_decay; }, non_negative,
                                         "a finite number >= 0"),
                           {"decoupled (AdamW) or L2 (SGD) weight decay", "weight_decay"}),
                      leaf("betas",
                           {set_betas, "list", "two numbers in [0, 1), e.g. [0.9, 0.999]",
                            [](const S& s) {
                              return "[" + yaml_number(s.train.optimizer.beta1) + ", " +
                                     yaml_number(s.train.optimizer.beta2) + "]";
                            }},
                           {"AdamW's moment decay rates", "betas"}),
                      leaf("eps",
                           double_setter([](S& s) -> double& { return s.train.optimizer.eps; }, positive,
                                         "a finite number > 0"),
                           {"AdamW's denominator term", "eps"}),
                      leaf("momentum",
                           double_setter([](S& s) -> double& { return s.train.optimizer.momentum; }, below_one,
                                         "a number in [0, 1)"),
                           {"SGD momentum", "momentum"}),
                  }),
      }));
  top.push_back(section(
      "fsdp",
      {
          leaf("sharding_strategy",
               enum_setter([](S& s) -> std::string& { return s.fsdp.sharding_strategy; },
                           {{"FULL_SHARD", {"1"}},
                            {"SHARD_GRAD_OP", {"2"}},
                            {"NO_SHARD", {"3"}},
                            {"HYBRID_SHARD", {"4"}},
                            {"_HYBRID_SHARD_ZERO2", {"5", "HYBRID_SHARD_ZERO2"}}},
                           " (or accelerate's numbers 1-5, in that order)"),
               {"what is sharded, and across which ranks (HYBRID: inside a node, replicated across nodes)",
                "FSDP(sharding_strategy=ShardingStrategy.X); accelerate fsdp_sharding_strategy"},
               {"fsdp_sharding_strategy"}),
          leaf("auto_wrap_policy",
               enum_setter(
                   [](S& s) -> std::string& { return s.fsdp.auto_wrap_policy; },
                   {{"transformer", {"TRANSFORMER_BASED_WRAP"}}, {"size", {"SIZE_BASED_WRAP"}}, {"none", {"NO_WRAP"}}},
                   " (accelerate: TRANSFORMER_BASED_WRAP, SIZE_BASED_WRAP, NO_WRAP)"),
               {"how the model is split into FSDP units",
                "transformer_auto_wrap_policy | size_based_auto_wrap_policy; accelerate fsdp_auto_wrap_policy"},
               {"fsdp_auto_wrap_policy"}),
          leaf("transformer_layer_cls_to_wrap",
               {set_layer_classes, "list", "a list of module class names, or one comma-separated string",
                [](const S& s) {
                  std::string out = "[";
                  for (std::size_t i = 0; i < s.fsdp.transformer_layer_cls_to_wrap.size(); ++i)
                    out += (i ? ", " : "") + s.fsdp.transformer_layer_cls_to_wrap[i];
                  return out + "]";
                }},
               {"auto_wrap_policy transformer: each module of these classes is a unit",
                "transformer_auto_wrap_policy(transformer_layer_cls=…); accelerate fsdp_transformer_layer_cls_to_wrap"},
               {"fsdp_transformer_layer_cls_to_wrap"}),
          leaf("min_num_params",
               int_setter([](S& s) -> std::int64_t& { return s.fsdp.min_num_params; }, 0, kInt64Max),
               {"auto_wrap_policy size: a unit closes once it holds this many parameters",
                "size_based_auto_wrap_policy(min_num_params=…); accelerate fsdp_min_num_params"},
               {"fsdp_min_num_params"}),
          leaf("backward_prefetch",
               enum_setter([](S& s) -> std::string& { return s.fsdp.backward_prefetch; },
                           {{"BACKWARD_PRE", {}}, {"BACKWARD_POST", {}}, {"NONE", {"NO_PREFETCH"}}},
                           " (accelerate: NO_PREFETCH for NONE)"),
               {"when the next unit's all-gather is issued in backward",
                "FSDP(backward_prefetch=BackwardPrefetch.X); accelerate fsdp_backward_prefetch"},
               {"fsdp_backward_prefetch", "fsdp_backward_prefetch_policy"}),
          leaf("forward_prefetch", bool_setter([](S& s) -> bool& { return s.fsdp.forward_prefetch; }),
               {"all-gather the next unit during forward", "FSDP(forward_prefetch=…); accelerate fsdp_forward_prefetch"},
               {"fsdp_forward_prefetch"}),
          leaf("limit_all_gathers", bool_setter([](S& s) -> bool& { return s.fsdp.limit_all_gathers; }),
               {"at most two all-gathers in flight", "FSDP(limit_all_gathers=…)"}),
          leaf("async_reduction", bool_setter([](S& s) -> bool& { return s.fsdp.async_reduction; }),
               {"wait for each gradient reduction one unit later and at the end of backward (false: where it is "
                "issued, no overlap)",
                "PyTorch FSDP's post-backward stream; DeepSpeed zero_optimization.overlap_comm"}),
          leaf("use_orig_params", bool_setter([](S& s) -> bool& { return s.fsdp.use_orig_params; }),
               {"pad each parameter to 16 bytes in the flat parameter, as PyTorch does in this mode",
                "FSDP(use_orig_params=…); accelerate fsdp_use_orig_params"},
               {"fsdp_use_orig_params"}),
          leaf("sync_module_states", bool_setter([](S& s) -> bool& { return s.fsdp.sync_module_states; }),
               {"broadcast rank 0's parameters at wrap time",
                "FSDP(sync_module_states=…); accelerate fsdp_sync_module_states"},
               {"fsdp_sync_module_states"}),
          leaf("device_id",
               str_setter([](S& s) -> std::string& { return s.fsdp.device_id; }, "allowed: hpu, hpu:N, cpu, or local_rank",
                          /*optional=*/true),
               {"the device FSDP is told to use; \"\": the compute device (NOTE [Simulated device_id])",
                "FSDP(device_id=…)"}),
          leaf("cpu_offload", bool_setter([](S& s) -> bool& { return s.fsdp.cpu_offload; }),
               {"shards, gradients and optimizer state live on the host; the optimizer steps there",
                "FSDP(cpu_offload=CPUOffload(offload_params=True)); accelerate fsdp_offload_params"},
               {"fsdp_offload_params"}),
          leaf("activation_checkpointing", bool_setter([](S& s) -> bool& { return s.fsdp.activation_checkpointing; }),
               {"recompute each BertLayer's forward in backward",
                "apply_activation_checkpointing; accelerate fsdp_activation_checkpointing"},
               {"fsdp_activation_checkpointing"}),
          leaf("state_dict_type",
               enum_setter([](S& s) -> std::string& { return s.fsdp.state_dict_type; },
                           {{"FULL_STATE_DICT", {}}, {"SHARDED_STATE_DICT", {}}, {"LOCAL_STATE_DICT", {}}}),
               {"how checkpoints are written", "FSDP.set_state_dict_type(StateDictType.X); accelerate fsdp_state_dict_type"},
               {"fsdp_state_dict_type"}),
          section("mixed_precision",
                  {
                      leaf("param_dtype",
                           enum_setter([](S& s) -> std::string& { return s.fsdp.mixed_precision.param_dtype; }, dtypes),
                           {"dtype of the all-gather and of compute (fp16 is refused: no gradient scaler)",
                            "MixedPrecision(param_dtype=…)"}),
                      leaf("reduce_dtype",
                           enum_setter([](S& s) -> std::string& { return s.fsdp.mixed_precision.reduce_dtype; }, dtypes),
                           {"dtype of the gradient reduction", "MixedPrecision(reduce_dtype=…)"}),
                      leaf("buffer_dtype",
                           enum_setter([](S& s) -> std::string& { return s.fsdp.mixed_precision.buffer_dtype; }, dtypes),
                           {"dtype of buffers; unset: each buffer keeps its own", "MixedPrecision(buffer_dtype=…)"}),
                  }),
          leaf("cpu_ram_efficient_loading", ignored_bool(),
               {"accepted so accelerate configs paste unchanged; only changes how Hugging Face loads weights, which "
                "shardlab does not model",
                "accelerate fsdp_cpu_ram_efficient_loading"},
               {"fsdp_cpu_ram_efficient_loading"}),
          leaf("fsdp_version",
               {[](const Node& n, const std::string& key, S&) -> Status {
                  if (!to_int(n, key, 1, 1).is_ok()) {
                    return bad(n.pos, key + ": " + describe(n) + " is not supported (only FSDP1 is modeled)",
                               "allowed: 1");
                  }
                  return Status::ok();
                },
                "integer", "1", [](const S&) { return std::string("1"); }},
               {"only FSDP1 (FullyShardedDataParallel) is modeled; 2 is refused", "accelerate fsdp_version"}),
      }));
  top.push_back(section(
      "world",
      {
          leaf("backend",
               enum_setter([](S& s) -> std::string& { return s.world.backend; }, backend_values()),
               {"where ranks run: simulator threads, CPU processes under mpiexec, Gaudi cards under mpirun "
                "(--backend overrides)",
                "torch.distributed backend: gloo/mpi (mpi), hccl (hpu)"}),
          leaf("mode",
               mode_setter([](S& s) -> RunMode& { return s.world.mode; }),
               {"numerics: real math on every rank; timing: phantom tensors, one rank's op graph replayed (sim only)"}),
          leaf("nodes", int_setter([](S& s) -> int& { return s.world.nodes; }, 1, kMaxWorldSize),
               {"machines; world size = nodes × devices_per_node", "accelerate num_machines; torchrun --nnodes"}),
          leaf("devices_per_node", int_setter([](S& s) -> int& { return s.world.devices_per_node; }, 1, kMaxWorldSize),
               {"ranks per machine (HYBRID_SHARD's shard group)",
                "torchrun --nproc_per_node; accelerate num_processes / num_machines"}),
          leaf("device",
               profile_setter([](S& s) -> std::string& { return s.world.device; }, sim::device_profile_names(),
                              "device"),
               {"the simulated device (`shardlab devices` lists them)"}),
          leaf("topology",
               profile_setter([](S& s) -> std::string& { return s.world.topology; }, sim::list_topologies(),
                              "topology"),
               {"the simulated network (`shardlab devices` lists them)"}),
          leaf("stack",
               profile_setter([](S& s) -> std::string& { return s.world.stack; }, sim::list_stacks(), "stack"),
               {"how the framework drives the device: ideal (no host time), pytorch_eager, pytorch_lazy, "
                "pytorch_compile (timing mode)",
                "PT_HPU_LAZY_MODE=1 (lazy) or 0 (eager); --torch_compile"}),
          leaf("network_model",
               enum_setter([](S& s) -> std::string& { return s.world.network_model; },
                           {{"alpha_beta", {}}, {"contention", {}}}),
               {"alpha_beta: congestion-unaware; contention: max–min fair link sharing"}),
          leaf("collective_algorithm",
               enum_setter([](S& s) -> std::string& { return s.world.collective_algorithm; },
                           {{"auto", {}}, {"ring", {}}, {"direct", {}}, {"hierarchical", {}}, {"halving_doubling", {}}, {"libnbc", {}}}),
               {"how the simulator schedules each collective (libnbc: Open MPI's nonblocking schedules, what "
                "--backend mpi runs)"}),
          leaf("offload_host",
               profile_setter([](S& s) -> std::string& { return s.world.offload_host; }, {"host"}, "device"),
               {"fsdp.cpu_offload in the simulator: each rank's host as a device profile"}),
          leaf("collective_timeout_s",
               double_setter([](S& s) -> double& { return s.world.collective_timeout_s; },
                             [](double v) { return v >= 1e-6 && v <= 1e6; }, "seconds from 1e-6 to 1e6"),
               {"how long a rank waits in a collective before it fails (exit 3); virtual time in the simulator",
                "torch.distributed.init_process_group(timeout=…)"}),
      }));
  {
    KeyDef faults = leaf("faults",
                         {set_faults, "list of maps", "a list of maps, e.g. [{kind: crash, rank: 1, step: 2}]",
                          [](const S& s) { return s.faults.empty() ? std::string("[]") : std::string("[…]"); }},
                         {"faults the simulator injects (sim backend); each entry's keys are below"});
    faults.item_keys = fault_keys();
    top.push_back(std::move(faults));
  }
  top.push_back(section(
      "trace",
      {
          leaf("ranks",
               {set_trace_ranks, "list or string", "a list of ranks, or a string of ranks and ranges, e.g. \"0-7, 4095\"",
                [](const S& s) {
                  return s.trace.ranks.empty() ? std::string("every rank (timing mode: 0-7)")
                                               : "\"" + show_ranks(s.trace.ranks) + "\"";
                }},
               {"which ranks trace.json holds (a big world's trace of every rank would be huge); trace.json and "
                "metrics.json name them"}),
      }));
  top.push_back(section(
      "checkpoint",
      {
          leaf("dir",
               str_setter([](S& s) -> std::string& { return s.checkpoint.dir; }, "allowed: a folder path", true,
                          /*path=*/true),
               {"where checkpoints go; \"\": none", "TrainingArguments output_dir; torch.distributed.checkpoint"}),
          leaf("every_steps", int_setter([](S& s) -> int& { return s.checkpoint.every_steps; }, 0, kIntMax),
               {"save every N steps; 0: only at the end (when dir is set)", "TrainingArguments save_steps"}),
          leaf("resume",
               {[](const Node& n, const std::string& key, Scenario& s) -> Status {
                  // NOTE [Resume]: true needs a checkpoint; if_present starts from step 1 without one.
                  if (n.kind == Node::Kind::kScalar && n.text == "if_present") {
                    s.checkpoint.resume = s.checkpoint.resume_if_present = true;
                    return Status::ok();
                  }
                  s.checkpoint.resume_if_present = false;
                  auto b = to_bool(n, key);
                  if (!b.is_ok()) {
                    return Status::invalid_argument(b.status().message() + " (or if_present: resume when dir holds a "
                                                                           "checkpoint, else start from step 1)");
                  }
                  s.checkpoint.resume = *b;
                  return Status::ok();
                },
                "bool or if_present", "true, false, if_present",
                [](const S& s) {
                  return std::string(s.checkpoint.resume_if_present ? "if_present" : yaml_bool(s.checkpoint.resume));
                }},
               {"true: start from the latest checkpoint in dir (at any world size), and fail (exit 2) when dir "
                "holds none; if_present: resume when there is one, else start from step 1",
                "resume_from_checkpoint"}),
      }));
  top.push_back(section(
      "expect",
      {
          leaf("grads_match_unsharded",
               {set_grads_match, "bool or map", "true, false, or {rtol: <number >= 0>, atol: <number >= 0>}",
                show_grads_match},
               {"compare with unsharded training (the oracle); unset: compared but not listed; false: oracle off",
                "torch.testing.assert_close(rtol, atol)"}),
          leaf("max_peak_memory_per_rank",
               {set_peak_memory, "size or null", "a number of bytes, or with a unit (B, KB … TB, KiB … TiB), e.g. \"512 MiB\"",
                [](const S& s) {
                  return s.expect.max_peak_memory_per_rank ? std::to_string(*s.expect.max_peak_memory_per_rank)
                                                           : std::string("null");
                }},
               {"fail (exit 1) when a rank's peak device memory exceeds this"}),
          leaf("min_samples_per_s",
               opt_double_setter([](S& s) -> std::optional<double>& { return s.expect.min_samples_per_s; }, positive,
                                 "a finite number > 0"),
               {"fail (exit 1) below this throughput"}),
          leaf("max_step_time_s",
               opt_double_setter([](S& s) -> std::optional<double>& { return s.expect.max_step_time_s; }, positive,
                                 "a finite number > 0"),
               {"fail (exit 1) when the median step takes longer"}),
          leaf("final_loss_below",
               opt_double_setter([](S& s) -> std::optional<double>& { return s.expect.final_loss_below; }, any,
                                 "a finite number"),
               {"fail (exit 1) unless the last step's loss is below this"}),
      }));
  return top;
}

const std::vector<KeyDef>& schema() {
  static const std::vector<KeyDef> kSchema = build_schema();
  return kSchema;
}

const KeyDef* find_key(const std::vector<KeyDef>& defs, const std::string& name,
                       std::string* spelled_as_alias = nullptr) {
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

// Reads every key of `map` (NOTE [Every error]: a refused key does not stop the others).
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
      problems.add(bad(k.pos,
                       "a key " + std::string(prefix.empty() ? "at the top level" : "in " + prefix) + " is " +
                           describe(k),
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

// ---------------------------------------------------------------------------------------
// JSON (--fsdp-config and model.config).

struct TooDeep {};

// Parses JSON with nlohmann (syntax errors as file:line:col, depth bounded).
Result<nlohmann::json> parse_json(const std::string& file, const std::string& text, const std::string& what) {
  SHARDLAB_RETURN_IF_ERROR(screen_text(file, text, what));
  try {
    nlohmann::json::parser_callback_t limit = [](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
      if (depth > static_cast<int>(kMaxDepth)) throw TooDeep{};
      return true;
    };
    return nlohmann::json::parse(text, limit);
  } catch (const TooDeep&) {
    return bad(SourcePos{file, 1, 1}, what + ": nesting deeper than " + std::to_string(kMaxDepth) + " levels",
               "allowed: at most " + std::to_string(kMaxDepth) + " nested objects and arrays");
  } catch (const nlohmann::json::parse_error& e) {
    std::string msg = e.what();
    const std::size_t col = msg.find("column ");
    const std::size_t colon = col == std::string::npos ? std::string::npos : msg.find(": ", col);
    if (colon != std::string::npos) msg = msg.substr(colon + 2);
    const std::size_t offset = e.byte > 0 ? e.byte - 1 : 0;
    return bad(pos_of_offset(file, text, offset), "invalid JSON in " + what + ": " + msg, "allowed: a JSON object");
  } catch (const std::exception& e) {
    return bad(SourcePos{file, 1, 1}, "unreadable JSON in " + what + ": " + e.what(), "allowed: a JSON object");
  }
}

// A JSON value as a Node without positions (used only if yaml-cpp cannot re-read the JSON).
Node json_to_node(const nlohmann::json& j, const SourcePos& pos) {
  Node n;
  n.pos = pos;
  if (j.is_object()) {
    n.kind = Node::Kind::kMap;
    for (const auto& [k, v] : j.items()) {
      Node key;
      key.kind = Node::Kind::kScalar;
      key.pos = pos;
      key.text = k;
      n.keys.push_back(std::move(key));
      n.values.push_back(json_to_node(v, pos));
    }
  } else if (j.is_array()) {
    n.kind = Node::Kind::kSeq;
    for (const auto& v : j) n.items.push_back(json_to_node(v, pos));
  } else if (j.is_string()) {
    n.kind = Node::Kind::kScalar;
    n.plain = false;
    n.text = j.get<std::string>();
  } else if (!j.is_null()) {
    n.kind = Node::Kind::kScalar;
    n.text = j.dump();
  }
  return n;
}

// NOTE [accelerate config files]
// --fsdp-config takes either
//  - a JSON object of accelerate's fsdp_* keys (optimum-habana's and the Trainer's
//    fsdp_config), flat or nested under "fsdp_config"; the Trainer's other keys beside it
//    are training arguments, named as ignored; or
//  - the YAML file `accelerate config` writes (a file that does not start with '{'): its
//    fsdp_config section as above, and its top-level keys as follows.
// Honoured: distributed_type (must be FSDP: another value describes a run without FSDP, exit
// 2), mixed_precision (no: fp32; bf16: train.precision bf16; fp16 and fp8 exit 2, as shardlab
// models neither a gradient scaler nor fp8), num_machines (world.nodes) and num_processes
// (world.devices_per_node = num_processes / num_machines; must divide). Ignored, and named
// on stdout: the launcher's settings (where processes start and how they meet:
// compute_environment, machine_rank, main_process_ip/port, rdzv_backend, gpu_ids, use_cpu,
// tpu_*, dynamo …), which do not change what a step computes, and keys shardlab accepts
// without an effect (fsdp_cpu_ram_efficient_loading), and other unknown keys (the Trainer's
// training arguments beside its fsdp_config, keys of a newer accelerate) — but a near-miss of
// a key it honours (mixed_precison) is refused, exit 2. Every value is checked as a scenario
// value is, and errors point into the file (file:line:col).

const std::vector<std::string>& accelerate_launcher_keys() {
  static const std::vector<std::string> kKeys = {
      "compute_environment", "debug", "machine_rank", "main_process_ip", "main_process_port",
      "main_training_function", "rdzv_backend", "same_network", "tpu_env", "tpu_use_cluster", "tpu_use_sudo",
      "tpu_name", "tpu_zone", "commands", "command_file", "enable_cpu_affinity", "gpu_ids", "downcast_bf16",
      "dynamo_config", "dynamo_backend", "use_cpu", "ipex_config", "mpirun_config", "megatron_lm_config",
      "deepspeed_config", "fp8_config"};
  return kKeys;
}

bool json_text(const std::string& file, std::string_view text) {
  if (file.size() >= 5 && lower(file.substr(file.size() - 5)) == ".json") return true;
  const std::size_t first = text.find_first_not_of(" \t\r\n");
  return first != std::string_view::npos && text[first] == '{';
}

// accelerate's top-level keys (NOTE [accelerate config files]); `ignored` collects the
// launcher keys, `unknown` the names shardlab does not know (a near-miss of a key it
// honours is refused instead: dropping it would change the run).
Status apply_accelerate_top(const Node& root, std::size_t fsdp_index, Scenario& s, std::vector<std::string>& ignored,
                            std::vector<std::string>& unknown) {
  static const std::vector<std::string> kHonoured = {"distributed_type", "mixed_precision", "num_machines",
                                                     "num_processes", "fsdp_config"};
  Problems problems;
  const Node* machines = nullptr;
  const Node* processes = nullptr;
  for (std::size_t i = 0; i < root.keys.size(); ++i) {
    if (i == fsdp_index) continue;
    const Node& k = root.keys[i];
    const Node& v = root.values[i];
    const std::string name = k.kind == Node::Kind::kScalar ? k.text : describe(k);
    if (name == "distributed_type") {
      auto type = to_enum(v, name, {{"FSDP", {}}},
                          " (this file describes a run without FSDP; `accelerate config` writes FSDP when asked for "
                          "FSDP)");
      problems.add(type.status());
    } else if (name == "mixed_precision") {
      auto mp = to_enum(v, name, {{"no", {"fp32"}}, {"bf16", {}}, {"fp16", {}}, {"fp8", {}}});
      if (!mp.is_ok()) {
        problems.add(mp.status());
      } else if (*mp == "fp16" || *mp == "fp8") {
        problems.add(bad(v.pos, name + ": " + *mp + " is not modeled (fp16 needs a gradient scaler, fp8 its own kernels)",
                         "allowed: no, bf16"));
      } else {
        s.train.precision = *mp == "bf16" ? "bf16" : "fp32";
        s.positions["train.precision"] = v.pos;
      }
    } else if (name == "num_machines") {
      machines = &v;
    } else if (name == "num_processes") {
      processes = &v;
    } else if (std::find(accelerate_launcher_keys().begin(), accelerate_launcher_keys().end(), name) !=
               accelerate_launcher_keys().end()) {
      ignored.push_back(name);
    } else if (auto near = suggest(name, kHonoured)) {
      problems.add(bad(k.pos, "unknown accelerate key " + show(name) + " (did you mean '" + *near + "'?)",
                       "allowed: " + join(kHonoured) + ", or accelerate's launcher keys"));
    } else {
      unknown.push_back(name);
    }
  }
  std::int64_t nodes = s.world.nodes;
  if (machines != nullptr) {
    auto n = to_int(*machines, "num_machines", 1, kMaxWorldSize);
    problems.add(n.status());
    if (n.is_ok()) {
      nodes = *n;
      s.world.nodes = static_cast<int>(nodes);
      s.positions["world.nodes"] = machines->pos;
    }
  }
  if (processes != nullptr) {
    auto n = to_int(*processes, "num_processes", 1, kMaxWorldSize);
    problems.add(n.status());
    if (n.is_ok()) {
      if (*n % nodes != 0) {
        problems.add(bad(processes->pos,
                         "num_processes: " + std::to_string(*n) + " processes do not split evenly over " +
                             std::to_string(nodes) + " machines (num_machines)",
                         "allowed: a multiple of num_machines"));
      } else {
        s.world.devices_per_node = static_cast<int>(*n / nodes);
        s.positions["world.devices_per_node"] = processes->pos;
      }
    }
  }
  return problems.status();
}

Status apply_fsdp_config(const std::string& file, Scenario& s) {
  SHARDLAB_ASSIGN_OR_RETURN(std::string text, read_bounded(file, "--fsdp-config file"));
  const SourcePos start{file, 1, 1};
  Node root;
  if (json_text(file, text)) {
    SHARDLAB_ASSIGN_OR_RETURN(nlohmann::json j, parse_json(file, text, "--fsdp-config file"));
    // JSON is YAML 1.2, so yaml-cpp re-reads the validated text to recover positions.
    Result<Node> reread = parse_yaml(text, file_mapper(file), start);
    root = reread.is_ok() ? std::move(reread).value() : json_to_node(j, SourcePos{file, 0, 0});
  } else {
    SHARDLAB_RETURN_IF_ERROR(screen_text(file, text, "--fsdp-config file"));
    SHARDLAB_ASSIGN_OR_RETURN(root, parse_yaml(text, file_mapper(file), start));
  }
  if (root.kind != Node::Kind::kMap) {
    return bad(root.pos, "--fsdp-config: expected a JSON object (or the YAML map `accelerate config` writes), got " +
                             describe(root),
               "allowed: a JSON object {\"fsdp_sharding_strategy\": 1, ...} (possibly nested under \"fsdp_config\"), "
               "or the YAML file `accelerate config` writes");
  }
  Problems problems;
  std::vector<std::string> ignored, unknown;
  std::size_t fsdp_index = root.keys.size();
  for (std::size_t i = 0; i < root.keys.size(); ++i) {
    if (root.keys[i].kind == Node::Kind::kScalar && root.keys[i].text == "fsdp_config") fsdp_index = i;
  }
  const Node* fsdp = &root;
  if (fsdp_index < root.keys.size()) {
    fsdp = &root.values[fsdp_index];
    problems.add(apply_accelerate_top(root, fsdp_index, s, ignored, unknown));
  }
  const KeyDef* fsdp_section = find_key(schema(), "fsdp");
  problems.add(apply_map(fsdp_section->children, "fsdp", *fsdp, s));
  if (fsdp->kind == Node::Kind::kMap) {
    for (const auto& k : fsdp->keys) {
      const KeyDef* def = k.kind == Node::Kind::kScalar ? find_key(fsdp_section->children, k.text) : nullptr;
      if (def != nullptr && def->name == "cpu_ram_efficient_loading") ignored.push_back(k.text);
    }
  }
  if (!ignored.empty()) {
    s.notes.push_back("--fsdp-config " + file + ": ignored (no effect on what a step computes): " + join(ignored));
  }
  if (!unknown.empty()) {
    s.notes.push_back("--fsdp-config " + file + ": ignored (not accelerate keys shardlab knows; check the spelling): " +
                      join(unknown));
  }
  return problems.status();
}

// ---------------------------------------------------------------------------------------
// --set section.key=value

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


// ---------------------------------------------------------------------------------------
// Checks across keys, after every override.

bool is_file(const std::string& p) {
  std::error_code ec;
  return std::filesystem::is_regular_file(p, ec);
}

// The position of the first of `keys` that was given (line 0 when none was).
SourcePos first_given(const Scenario& s, std::initializer_list<const char*> keys) {
  for (const char* k : keys) {
    auto it = s.positions.find(k);
    if (it != s.positions.end()) return it->second;
  }
  return SourcePos{s.path, 0, 0};
}

// `value` is anchored already (NOTE [Relative paths] in cli/scenario.h).
Status check_file(const Scenario& s, const std::string& key, const std::string& value, const std::string& allowed) {
  if (is_file(value)) return Status::ok();
  const bool from_set = s.where(key).file == "--set";
  return bad(s.where(key),
             key + ": file " + show(value) + " not found (a relative path is relative to " +
                 (from_set ? "the current directory, as given with --set)" : "the scenario file's folder)"),
             allowed);
}

// max_position_embeddings of the model (preset or config.json).
Result<std::int64_t> max_positions(const Scenario& s) {
  if (s.model.config.empty()) return kPresetMaxPositions;
  const std::string allowed = "allowed: a path to a Hugging Face config.json";
  SHARDLAB_RETURN_IF_ERROR(check_file(s, "model.config", s.model.config, allowed));
  const std::string& resolved = s.model.config;
  SHARDLAB_ASSIGN_OR_RETURN(std::string text, read_bounded(resolved, "model config"));
  SHARDLAB_ASSIGN_OR_RETURN(nlohmann::json j, parse_json(resolved, text, "model config"));
  if (!j.is_object()) return bad(SourcePos{resolved, 1, 1}, "model config is not a JSON object", allowed);
  auto it = j.find("max_position_embeddings");
  if (it != j.end() && (!it->is_number_integer() || it->get<std::int64_t>() < 1)) {
    return bad(s.where("model.config"), "max_position_embeddings in " + show(resolved) + " is " + show(it->dump()),
               "allowed: an integer >= 1");
  }
  // Every other key as `run` reads it, so that `validate` refuses what `run` would
  // (NOTE [BERT size limits] in runtime/model/bert.h).
  const Result<runtime::model::BertHead> head = runtime::model::parse_bert_head(s.model.head);
  const auto config = runtime::model::parse_bert_config(
      resolved, text, head.is_ok() ? *head : runtime::model::BertHead::kSequenceClassification);
  if (!config.is_ok()) {
    return Status::invalid_argument(s.where("model.config").to_string() + ": model.config: " + config.status().message());
  }
  return config->config.max_position_embeddings;  // absent: Hugging Face's BertConfig default, 512
}

void validate(const Scenario& s, const SourcePos& top, Problems& problems) {
  // name
  if (!s.positions.count("name")) {
    problems.add(bad(top, "missing required key `name`",
               "a scenario needs `name:` (letters, digits, '_', '.', '-'); it names the output folder"));
  }
  const bool name_ok =
      !s.name.empty() && s.name != "." && s.name != ".." && std::all_of(s.name.begin(), s.name.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
      });
  if (s.positions.count("name") && !name_ok && !problems.reported_at(s.where("name"))) {
    problems.add(bad(s.where("name"), "name " + show(s.name) + " is not a valid folder name",
               "allowed: letters, digits, '_', '.' and '-' (not '.' or '..')"));
  }
  // trace
  if (!s.trace.ranks.empty() && s.trace.ranks.back() >= s.world.world_size()) {
    problems.add(bad(s.where("trace.ranks"),
                     "trace.ranks names rank " + std::to_string(s.trace.ranks.back()) +
                         ", not a rank of the world (size " + std::to_string(s.world.world_size()) + ")",
                     "allowed: ranks 0 to " + std::to_string(s.world.world_size() - 1)));
  }
  // model
  const Result<std::int64_t> max_pos = max_positions(s);
  problems.add(max_pos.status());
  if (s.model.weights != "random") {
    problems.add(
        check_file(s, "model.weights", s.model.weights,
                   "allowed: random, or a path to a model.safetensors"));
  }
  // data
  if (s.data.kind == "file") {
    if (s.data.path.empty()) {
      problems.add(bad(first_given(s, {"data.kind", "data.path"}), "data.kind is file but data.path is not given",
                 "give data.path (a batch .safetensors), or use data.kind: synthetic"));
    } else {
      problems.add(check_file(s, "data.path", s.data.path, "allowed: a path to a batch .safetensors"));
    }
  } else if (!s.data.path.empty()) {
    problems.add(bad(first_given(s, {"data.path", "data.kind"}), "data.path is given but data.kind is synthetic",
               "set data.kind: file to read batches from data.path, or remove data.path"));
  }
  if (max_pos.is_ok() && s.data.seq_len > *max_pos) {
    const std::string source = s.model.config.empty() ? "the " + s.model.preset + " preset" : show(s.model.config);
    problems.add(bad(first_given(s, {"data.seq_len", "model.config", "model.preset"}),
               "data.seq_len = " + std::to_string(s.data.seq_len) +
                   " exceeds max_position_embeddings = " + std::to_string(*max_pos) + " of " + source,
               "allowed: seq_len from 1 to " + std::to_string(*max_pos)));
  }
  if (s.data.batch_size_per_rank % s.train.grad_accumulation != 0) {
    problems.add(bad(first_given(s, {"data.batch_size_per_rank", "train.grad_accumulation"}),
               "data.batch_size_per_rank = " + std::to_string(s.data.batch_size_per_rank) +
                   " is not divisible by train.grad_accumulation = " + std::to_string(s.train.grad_accumulation),
               "allowed: a batch size that is a multiple of grad_accumulation (each micro-batch has batch / "
               "accumulation rows)"));
  }
  // fsdp
  if (s.fsdp.auto_wrap_policy == "transformer" && s.fsdp.transformer_layer_cls_to_wrap.empty()) {
    problems.add(bad(first_given(s, {"fsdp.transformer_layer_cls_to_wrap", "fsdp.auto_wrap_policy"}),
               "fsdp.auto_wrap_policy is transformer but transformer_layer_cls_to_wrap is empty",
               "allowed: at least one layer class (e.g. BertLayer), or auto_wrap_policy size/none"));
  }
  // world
  const std::int64_t world = std::int64_t{s.world.nodes} * s.world.devices_per_node;
  if (world > kMaxWorldSize) {
    problems.add(bad(first_given(s, {"world.nodes", "world.devices_per_node"}),
               "world size nodes x devices_per_node = " + std::to_string(s.world.nodes) + " x " +
                   std::to_string(s.world.devices_per_node) + " = " + std::to_string(world),
               "allowed: at most " + std::to_string(kMaxWorldSize) + " ranks"));
  }
  if (looks_like_path(s.world.device)) {
    problems.add(check_file(s, "world.device", s.world.device,
                            "allowed: " + join(sim::device_profile_names()) + ", or an existing device profile file"));
  }
  if (s.world.stack != "ideal") {
    if (s.world.mode != RunMode::kTiming || !backend(s.world.backend).simulated) {
      problems.add(bad(s.where("world.stack"),
                       "world.stack " + s.world.stack +
                           " models the host beside the device, which the simulator's timing mode replays; this run is " +
                           s.world.backend + " in " + std::string(run_mode_name(s.world.mode)) + " mode",
                       "allowed: world.stack: ideal (the default), or world.backend: sim with world.mode: timing"));
    }
    if (looks_like_path(s.world.stack)) {
      problems.add(check_file(s, "world.stack", s.world.stack,
                              "allowed: " + join(sim::list_stacks()) + ", or an existing stack file"));
    }
  }
  if (s.world.offload_host != "host") {
    if (!s.fsdp.cpu_offload) {
      problems.add(bad(s.where("world.offload_host"), "world.offload_host is set but fsdp.cpu_offload is false",
                 "allowed: fsdp.cpu_offload: true, or world.offload_host: host (the default)"));
    }
    if (!backend(s.world.backend).simulated) {
      problems.add(bad(s.where("world.offload_host"),
                 "world.offload_host models the host in the simulator; backend " + s.world.backend +
                     " offloads to the real host",
                 "allowed: world.backend: sim, or world.offload_host: host (the default)"));
    }
    problems.add(check_file(s, "world.offload_host", s.world.offload_host,
                            "allowed: host, or an existing device profile file"));
  }
  if (looks_like_path(s.world.topology)) {
    problems.add(
        check_file(s, "world.topology", s.world.topology,
                   "allowed: " + join(sim::list_topologies()) + ", or an existing topology profile file"));
  }
  // faults
  // One problem per fault at most: its checks build on each other.
  const auto check_fault = [&](std::size_t i) -> Status {
    const auto& f = s.faults[i];
    const std::string name = "faults[" + std::to_string(i) + "]";
    auto at = [&](const char* key) {
      auto it = s.positions.find(name + "." + key);
      return it != s.positions.end() ? it->second : f.pos;
    };
    if (!f.kind) {
      if (problems.reported_at(s.where(name + ".kind"))) return Status::ok();  // refused already
      return bad(f.pos, name + " has no kind",
                 "allowed kinds: crash, hang, straggler, corrupt, link_down, link_degrade, view_offset");
    }
    using sim::FaultKind;
    const FaultKind kind = *f.kind;
    const std::string kind_name(sim::fault_kind_name(kind));
    const bool link_kind = kind == FaultKind::kLinkDown || kind == FaultKind::kLinkDegrade;
    const bool rank_kind = !link_kind;  // crash, hang, straggler, corrupt, view_offset
    const bool view_kind = kind == FaultKind::kViewOffset;
    const bool when_kind = kind == FaultKind::kCrash || kind == FaultKind::kHang;
    if (link_kind && f.link.empty()) {
      return bad(f.pos, name + " (" + kind_name + ") has no link", "allowed: link: \"a-b\" naming two ranks");
    }
    if (link_kind && f.rank >= 0) {
      return bad(at("rank"), name + " (" + kind_name + ") names a rank",
                 "a link fault names its link (\"a-b\"), not a rank");
    }
    if (!link_kind && !f.link.empty()) {
      return bad(at("link"), name + " (" + kind_name + ") names a link", "only link_down and link_degrade take a link");
    }
    if (rank_kind && f.rank < 0)
      return bad(f.pos, name + " (" + kind_name + ") has no rank", "allowed: rank: 0 to " + std::to_string(world - 1));
    if (f.rank >= world) {
      return bad(at("rank"),
                 name + ".rank = " + std::to_string(f.rank) + " is not a rank of the world (size " +
                     std::to_string(world) + ")",
                 "allowed: 0 to " + std::to_string(world - 1));
    }
    if (link_kind) {
      std::int64_t a = 0, b = 0;
      if (!parse_link(f.link, a, b))
        return bad(at("link"), name + ".link " + show(f.link) + " is malformed", "allowed: \"a-b\"");
      if (a >= world || (a >= 0 && b >= world)) {
        return bad(
            at("link"),
            name + ".link " + show(f.link) + " names a rank outside the world (size " + std::to_string(world) + ")",
            "allowed: ranks 0 to " + std::to_string(world - 1));
      }
    }
    if (f.step > s.train.steps) {
      return bad(at("step"),
                 name + ".step = " + std::to_string(f.step) +
                     " is not a step of the run (train.steps = " + std::to_string(s.train.steps) + ")",
                 "allowed: 1 to " + std::to_string(s.train.steps) + " (steps count from 1, like the step table)");
    }
    if (when_kind && f.step < 0 && f.time_ms < 0) {
      return bad(f.pos, name + " (" + kind_name + ") has neither step nor time_ms",
                 "give step (1-based, like the step table) or time_ms to say when it happens");
    }
    if (view_kind && (f.step < 0 || f.unit < 0)) {
      return bad(f.pos, name + " (view_offset) needs step and unit",
                 "give step (1-based, like the step table) and unit (the 0-based FSDP unit whose parameter view is "
                 "corrupted)");
    }
    if (!view_kind && (f.unit >= 0 || s.positions.count(name + ".offset") != 0)) {
      return bad(at(f.unit >= 0 ? "unit" : "offset"), name + " (" + kind_name + ") takes no " + (f.unit >= 0 ? "unit" : "offset"),
                 "only view_offset takes unit and offset");
    }
    if (!when_kind && !view_kind && f.step >= 0) {
      return bad(at("step"), name + " (" + kind_name + ") takes no step",
                 kind == FaultKind::kCorrupt ? "a corrupt fault names the rank's collective index (collective: N)"
                                     : std::string("a ") + kind_name + " fault starts at time_ms (default 0) and lasts the run");
    }
    if ((kind == FaultKind::kStraggler || kind == FaultKind::kCorrupt || view_kind) && f.time_ms >= 0) {
      return bad(at("time_ms"), name + " (" + kind_name + ") takes no time_ms",
                 kind == FaultKind::kCorrupt ? "a corrupt fault names the rank's collective index (collective: N)"
                 : view_kind         ? "a view_offset fault happens at its step (step: N)"
                                     : "a straggler is slow for the whole run");
    }
    if (kind == FaultKind::kCorrupt && f.collective < 0) {
      return bad(f.pos, name + " (corrupt) has no collective",
                 "give collective: N, the 0-based index among the rank's collectives with a payload");
    }
    if (kind != FaultKind::kCorrupt && f.collective >= 0) {
      return bad(at("collective"), name + " (" + kind_name + ") takes no collective", "only corrupt takes a collective index");
    }
    if (kind != FaultKind::kCorrupt && s.positions.count(name + ".integrity_check") != 0) {
      return bad(at("integrity_check"), name + " (" + kind_name + ") takes no integrity_check",
                 "only corrupt takes integrity_check");
    }
    if ((kind == FaultKind::kCrash || kind == FaultKind::kHang || kind == FaultKind::kCorrupt || kind == FaultKind::kLinkDown || view_kind) &&
        s.positions.count(name + ".factor") != 0) {
      return bad(at("factor"), name + " (" + kind_name + ") takes no factor",
                 "only straggler (slowdown in [1, 1e6]) and link_degrade (bandwidth factor in [1e-6, 1]) take a factor");
    }
    // The bounds keep every degraded duration far inside the simulator's virtual time
    // (a 10^6 slowdown of a second-long op is 12 days; NOTE [Virtual time limit]).
    if (kind == FaultKind::kStraggler && f.factor < 1) {
      return bad(at("factor"), name + ".factor = " + yaml_number(f.factor) + " would speed the straggler up",
                 "allowed: a slowdown factor in [1, 1e6]");
    }
    if (kind == FaultKind::kStraggler && f.factor > kMaxFaultSlowdown) {
      return bad(at("factor"), name + ".factor = " + yaml_number(f.factor) + " is out of range",
                 "allowed: a slowdown factor in [1, 1e6]");
    }
    if (kind == FaultKind::kLinkDegrade && f.factor > 1) {
      return bad(at("factor"), name + ".factor = " + yaml_number(f.factor) + " would speed the link up",
                 "allowed: a bandwidth factor in [1e-6, 1]");
    }
    if (kind == FaultKind::kLinkDegrade && f.factor < 1 / kMaxFaultSlowdown) {
      return bad(at("factor"), name + ".factor = " + yaml_number(f.factor) + " is out of range",
                 "allowed: a bandwidth factor in [1e-6, 1] (0 is link_down)");
    }
    return Status::ok();
  };
  for (std::size_t i = 0; i < s.faults.size(); ++i) problems.add(check_fault(i));
  // checkpoint
  if (s.checkpoint.dir.empty() && s.checkpoint.every_steps > 0) {
    problems.add(bad(s.where("checkpoint.every_steps"), "checkpoint.every_steps is set but checkpoint.dir is not",
               "give checkpoint.dir to write checkpoints"));
  }
  if (s.checkpoint.dir.empty() && s.checkpoint.resume) {
    problems.add(bad(s.where("checkpoint.resume"), "checkpoint.resume is true but checkpoint.dir is not set",
               "give checkpoint.dir to resume from"));
  }
}


}  // namespace

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

std::string to_yaml(const Scenario& s) {
  std::ostringstream o;
  o << "name: " << yaml_string(s.name) << "\n";
  o << "description: " << yaml_string(s.description) << "\n";
  o << "seed: " << s.seed << "\n";
  o << "model:\n";
  o << "  preset: " << s.model.preset << "\n";
  o << "  config: " << yaml_string(s.model.config) << "\n";
  o << "  head: " << s.model.head << "\n";
  o << "  weights: " << yaml_string(s.model.weights) << "\n";
  o << "data:\n";
  o << "  kind: " << s.data.kind << "\n";
  o << "  path: " << yaml_string(s.data.path) << "\n";
  o << "  batch_size_per_rank: " << s.data.batch_size_per_rank << "\n";
  o << "  seq_len: " << s.data.seq_len << "\n";
  o << "train:\n";
  o << "  steps: " << s.train.steps << "\n";
  o << "  grad_accumulation: " << s.train.grad_accumulation << "\n";
  o << "  max_grad_norm: " << yaml_number(s.train.max_grad_norm) << "\n";
  o << "  precision: " << s.train.precision << "\n";
  o << "  optimizer:\n";
  o << "    name: " << s.train.optimizer.name << "\n";
  o << "    lr: " << yaml_number(s.train.optimizer.lr) << "\n";
  o << "    weight_decay: " << yaml_number(s.train.optimizer.weight_decay) << "\n";
  o << "    betas: [" << yaml_number(s.train.optimizer.beta1) << ", " << yaml_number(s.train.optimizer.beta2) << "]\n";
  o << "    eps: " << yaml_number(s.train.optimizer.eps) << "\n";
  o << "    momentum: " << yaml_number(s.train.optimizer.momentum) << "\n";
  o << "fsdp:\n";
  o << "  sharding_strategy: " << s.fsdp.sharding_strategy << "\n";
  o << "  auto_wrap_policy: " << s.fsdp.auto_wrap_policy << "\n";
  o << "  transformer_layer_cls_to_wrap: [";
  for (std::size_t i = 0; i < s.fsdp.transformer_layer_cls_to_wrap.size(); ++i) {
    o << (i ? ", " : "") << yaml_string(s.fsdp.transformer_layer_cls_to_wrap[i]);
  }
  o << "]\n";
  o << "  min_num_params: " << s.fsdp.min_num_params << "\n";
  o << "  backward_prefetch: " << s.fsdp.backward_prefetch << "\n";
  o << "  forward_prefetch: " << yaml_bool(s.fsdp.forward_prefetch) << "\n";
  o << "  limit_all_gathers: " << yaml_bool(s.fsdp.limit_all_gathers) << "\n";
  o << "  async_reduction: " << yaml_bool(s.fsdp.async_reduction) << "\n";
  o << "  use_orig_params: " << yaml_bool(s.fsdp.use_orig_params) << "\n";
  if (!s.fsdp.device_id.empty()) o << "  device_id: " << yaml_string(s.fsdp.device_id) << "\n";
  o << "  sync_module_states: " << yaml_bool(s.fsdp.sync_module_states) << "\n";
  o << "  cpu_offload: " << yaml_bool(s.fsdp.cpu_offload) << "\n";
  o << "  activation_checkpointing: " << yaml_bool(s.fsdp.activation_checkpointing) << "\n";
  o << "  state_dict_type: " << s.fsdp.state_dict_type << "\n";
  o << "  mixed_precision:\n";
  o << "    param_dtype: " << s.fsdp.mixed_precision.param_dtype << "\n";
  o << "    reduce_dtype: " << s.fsdp.mixed_precision.reduce_dtype << "\n";
  o << "    buffer_dtype: " << s.fsdp.mixed_precision.buffer_dtype << "\n";
  o << "world:\n";
  o << "  backend: " << s.world.backend << "\n";
  o << "  mode: " << run_mode_name(s.world.mode) << "\n";
  o << "  nodes: " << s.world.nodes << "\n";
  o << "  devices_per_node: " << s.world.devices_per_node << "\n";
  o << "  device: " << yaml_string(s.world.device) << "\n";
  o << "  topology: " << yaml_string(s.world.topology) << "\n";
  o << "  offload_host: " << yaml_string(s.world.offload_host) << "\n";
  if (s.world.stack != "ideal") o << "  stack: " << yaml_string(s.world.stack) << "\n";
  o << "  collective_timeout_s: " << yaml_number(s.world.collective_timeout_s) << "\n";
  o << "  network_model: " << s.world.network_model << "\n";
  o << "  collective_algorithm: " << s.world.collective_algorithm << "\n";
  if (s.faults.empty()) {
    o << "faults: []\n";
  } else {
    o << "faults:\n";
    for (const auto& f : s.faults) {
      o << "  - {kind: " << yaml_string(f.kind ? std::string(sim::fault_kind_name(*f.kind)) : std::string());
      if (f.rank >= 0) o << ", rank: " << f.rank;
      if (f.step >= 0) o << ", step: " << f.step;
      if (f.time_ms >= 0) o << ", time_ms: " << yaml_number(f.time_ms);
      if (!f.link.empty()) o << ", link: " << yaml_string(f.link);
      if (f.collective >= 0) o << ", collective: " << f.collective;
      if (f.unit >= 0) o << ", unit: " << f.unit << ", offset: " << f.offset;
      if (f.kind == sim::FaultKind::kCorrupt) o << ", integrity_check: " << yaml_bool(f.integrity_check);
      if (f.kind == sim::FaultKind::kStraggler || f.kind == sim::FaultKind::kLinkDegrade) {
        o << ", factor: " << yaml_number(f.factor);
      }
      o << "}\n";
    }
  }
  if (!s.trace.ranks.empty()) o << "trace:\n  ranks: \"" << show_ranks(s.trace.ranks) << "\"\n";
  o << "checkpoint:\n";
  o << "  dir: " << yaml_string(s.checkpoint.dir) << "\n";
  o << "  every_steps: " << s.checkpoint.every_steps << "\n";
  o << "  resume: " << (s.checkpoint.resume_if_present ? "if_present" : yaml_bool(s.checkpoint.resume)) << "\n";
  o << "expect:\n";
  // Only the keys the file states: an unstated one takes the dtypes' default on replay too.
  const bool rtol_stated = s.positions.count("expect.grads_match_unsharded.rtol") != 0;
  const bool atol_stated = s.positions.count("expect.grads_match_unsharded.atol") != 0;
  if (s.expect.grads_match_unsharded && !rtol_stated && !atol_stated) {
    o << "  grads_match_unsharded: true  # no tolerance stated: bitwise in the simulator, else the dtypes' default\n";
  } else if (s.expect.grads_match_unsharded) {
    o << "  grads_match_unsharded: {";
    if (rtol_stated) o << "rtol: " << yaml_number(s.expect.grads_match_unsharded->rtol) << (atol_stated ? ", " : "");
    if (atol_stated) o << "atol: " << yaml_number(s.expect.grads_match_unsharded->atol);
    o << "}\n";
  } else if (s.expect.oracle_off) {
    o << "  grads_match_unsharded: false\n";
  } else {
    o << "  # grads_match_unsharded unset: the oracle runs, at the tolerance the run's dtypes imply\n";
  }
  auto opt = [&](const char* key, const auto& v) {
    o << "  " << key << ": ";
    if (v) {
      if constexpr (std::is_same_v<std::decay_t<decltype(*v)>, double>) {
        o << yaml_number(*v);
      } else {
        o << *v;
      }
    } else {
      o << "null";
    }
    o << "\n";
  };
  opt("max_peak_memory_per_rank", s.expect.max_peak_memory_per_rank);
  opt("min_samples_per_s", s.expect.min_samples_per_s);
  opt("max_step_time_s", s.expect.max_step_time_s);
  opt("final_loss_below", s.expect.final_loss_below);
  return o.str();
}

// ---------------------------------------------------------------------------------------
// The reference (NOTE [One schema]).

namespace {

struct RefRow {
  std::string key, type, default_value, allowed, help, equivalent;
  std::vector<std::string> aliases;
};

// One table per section: its own keys, then its subsections, then the keys of its lists'
// entries (faults[]).
void collect_rows(const std::vector<KeyDef>& defs, const std::string& prefix, const Scenario& defaults,
                  std::vector<std::pair<std::string, std::vector<RefRow>>>& sections) {
  const auto row = [](const KeyDef& d, const std::string& path, const Scenario& values) {
    const std::string shown = d.value.show(values);
    return RefRow{path,         d.value.type, shown.empty() ? "\"\"" : shown, d.value.allowed, d.doc.help,
                  d.doc.equivalent, d.aliases};
  };
  const auto path_of = [&](const KeyDef& d) { return prefix.empty() ? d.name : prefix + "." + d.name; };
  std::vector<RefRow> rows;
  for (const auto& d : defs) {
    if (!d.is_section()) rows.push_back(row(d, path_of(d), defaults));
  }
  sections.emplace_back(prefix, std::move(rows));
  for (const auto& d : defs) {
    if (d.is_section()) collect_rows(d.children, path_of(d), defaults, sections);
  }
  for (const auto& d : defs) {
    if (d.item_keys.empty()) continue;
    Scenario with_item = defaults;
    with_item.faults.emplace_back();  // the only list of maps: its entries' defaults
    std::vector<RefRow> items;
    for (const auto& item : d.item_keys) items.push_back(row(item, path_of(d) + "[]." + item.name, with_item));
    sections.emplace_back(path_of(d) + "[]", std::move(items));
  }
}

std::string md_cell(const std::string& v) {
  std::string out;
  for (char c : v) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

constexpr const char* kReferenceIntro =
    "A scenario is a YAML file: what to run, where, and what must hold after (`shardlab run FILE`, `shardlab "
    "validate FILE`). Every key has the default below, so `name: x` alone is a valid scenario; `shardlab run` "
    "without a file runs scenarios/default.yaml, and `--set` / `--fsdp-config` without a file apply to it.\n\n"
    "Precedence: the file, then `--fsdp-config`, then each `--set section.key=value` in order (the value is YAML: "
    "`--set 'faults=[{kind: crash, rank: 1, step: 2}]'`). A relative path inside a scenario file is relative to "
    "that file's folder; one given with `--set` is relative to the current directory. Every problem of a file is "
    "reported as `file:line:col: what is wrong; what is allowed` (at most 20), exit 2.\n";

constexpr const char* kAccelerateText =
    "`--fsdp-config FILE` takes the YAML file `accelerate config` writes, or an fsdp_config JSON (optimum-habana, "
    "the Trainer's `fsdp_config`, flat or nested under `fsdp_config`). Its `fsdp_config` keys are the `fsdp.*` keys "
    "above under their accelerate names (column \"also\"). Its top-level keys:\n\n"
    "| key | what shardlab does |\n|---|---|\n"
    "| `distributed_type` | must be `FSDP`; another value describes a run without FSDP: exit 2 |\n"
    "| `mixed_precision` | `no`: fp32; `bf16`: `train.precision: bf16`; `fp16`, `fp8`: exit 2 (no gradient scaler, "
    "no fp8 kernels are modeled) |\n"
    "| `num_machines` | `world.nodes` |\n"
    "| `num_processes` | `world.devices_per_node` = num_processes / num_machines (must divide, else exit 2) |\n";

}  // namespace

std::string schema_reference(bool markdown) {
  std::vector<std::pair<std::string, std::vector<RefRow>>> sections;
  const Scenario defaults;
  collect_rows(schema(), "", defaults, sections);
  std::ostringstream o;
  if (markdown) {
    o << "# Scenario reference\n\n"
      << "<!-- Generated by `shardlab schema --markdown > docs/scenarios.md` from the table the parser reads "
         "(cli/scenario.cc); do not edit by hand. The ctest docs_scenarios_md_is_current fails when it is stale. "
         "-->\n\n"
      << kReferenceIntro << "\n";
    for (const auto& [name, rows] : sections) {
      if (rows.empty()) continue;
      o << "## " << (name.empty() ? std::string("Top level") : "`" + name + "`") << "\n\n";
      o << "| key | type | default | allowed | meaning | PyTorch / accelerate | also |\n";
      o << "|---|---|---|---|---|---|---|\n";
      for (const auto& r : rows) {
        o << "| `" << r.key << "` | " << md_cell(r.type) << " | `" << md_cell(r.default_value) << "` | "
          << md_cell(r.allowed) << " | " << md_cell(r.help) << " | " << md_cell(r.equivalent) << " | "
          << md_cell(join(r.aliases)) << " |\n";
      }
      o << "\n";
    }
    o << "## accelerate config files (`--fsdp-config`)\n\n" << kAccelerateText << "\n"
      << "Ignored, and named on stdout (launcher settings: where processes start and how they meet, not what a step "
         "computes): "
      << join(accelerate_launcher_keys())
      << "; and `fsdp_cpu_ram_efficient_loading` (accepted, no effect). Other top-level keys (the Trainer's training "
         "arguments beside its `fsdp_config`, keys of a newer accelerate) are named as unknown and ignored; a near-miss "
         "of a key shardlab honours (`mixed_precison`) exits 2.\n";
    return o.str();
  }
  o << "shardlab scenario keys (section.key: type, default; allowed values; meaning; PyTorch / accelerate)\n";
  for (const auto& [name, rows] : sections) {
    for (const auto& r : rows) {
      o << "\n" << r.key << "  (" << r.type << ", default " << r.default_value << ")\n";
      o << "    allowed: " << r.allowed << "\n";
      if (!r.help.empty()) o << "    " << r.help << "\n";
      if (!r.equivalent.empty()) o << "    PyTorch / accelerate: " << r.equivalent << "\n";
      if (!r.aliases.empty()) o << "    also accepted as: " << join(r.aliases) << "\n";
    }
  }
  o << "\n--fsdp-config: accelerate's YAML config or an fsdp_config JSON (docs/scenarios.md); top-level keys "
       "honoured: distributed_type (FSDP), mixed_precision (no, bf16), num_machines, num_processes; ignored and named: "
    << join(accelerate_launcher_keys()) << "\n";
  return o.str();
}

std::string_view run_mode_name(RunMode mode) { return mode == RunMode::kTiming ? "timing" : "numerics"; }

}  // namespace shardlab::cli
