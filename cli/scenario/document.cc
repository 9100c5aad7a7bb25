#include "cli/scenario/document.h"

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/exceptions.h>
#include <yaml-cpp/parser.h>

#include <new>
#include <sstream>
#include <utility>

#include "cli/scenario/messages.h"
#include "cli/scenario/text.h"

namespace shardlab::cli::scenario_detail {

namespace {

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

struct TooDeep {};

}  // namespace

std::string describe(const Node& n) {
  switch (n.kind) {
    case Node::Kind::kNull: return "nothing";
    case Node::Kind::kSeq: return "a list";
    case Node::Kind::kMap: return "a map";
    case Node::Kind::kScalar: break;
  }
  return show(n.text);
}

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
}  // namespace shardlab::cli::scenario_detail
