// The table of every scenario key (NOTE [One schema] in cli/scenario/schema.h): how each
// value is read, checked and shown, with its reference text.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <filesystem>
#include <optional>
#include <string_view>
#include <system_error>
#include <type_traits>

#include "cli/backends.h"
#include "cli/scenario/emit.h"
#include "cli/scenario/messages.h"
#include "cli/scenario/schema.h"
#include "cli/scenario/values.h"
#include "runtime/model/bert.h"
#include "sim/faults/faults.h"
#include "sim/models/device/profiles.h"
#include "sim/models/device/stack.h"
#include "sim/models/network/topology.h"

namespace shardlab::cli::scenario_detail {

namespace {

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

std::string strip_allowed(const std::string& a) { return a.rfind("allowed: ", 0) == 0 ? a.substr(9) : a; }

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
ValueDef str_setter(Get get, const std::string& allowed, bool optional = false, bool path = false,
                    const std::string& keep = "") {
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
  return {set, "integer", int_range(lo, hi), [get](const Scenario& s) { return std::to_string(value_of(get, s)); }};
}

template <class Get>
ValueDef double_setter(Get get, const std::function<bool(double)>& ok, const std::string& range) {
  Setter set = [get, ok, range](const Node& n, const std::string& key, Scenario& s) -> Status {
    SHARDLAB_ASSIGN_OR_RETURN(get(s), to_double(n, key, ok, range));
    return Status::ok();
  };
  return {set, "number", range, [get](const Scenario& s) { return yaml_number(value_of(get, s)); }};
}

// An optional number: null clears it.
template <class Get>
ValueDef opt_double_setter(Get get, const std::function<bool(double)>& ok, const std::string& range) {
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
  return {set, "bool", "true, false", [get](const Scenario& s) { return std::string(yaml_bool(value_of(get, s))); }};
}

std::string enum_allowed(const std::vector<EnumValue>& values, const std::string& note) {
  std::vector<std::string> names;
  for (const auto& v : values) names.push_back(v.canonical);
  return join(names) + note;
}

// A name from an open list (model.preset), held as its canonical spelling.
template <class Get>
ValueDef enum_setter(Get get, const std::vector<EnumValue>& values, const std::string& note = "") {
  Setter set = [get, values, note](const Node& n, const std::string& key, Scenario& s) -> Status {
    SHARDLAB_ASSIGN_OR_RETURN(get(s), to_enum(n, key, values, note));
    return Status::ok();
  };
  return {set, "name", enum_allowed(values, note), [get](const Scenario& s) { return value_of(get, s); }};
}

template <class Get>
ValueDef profile_setter(Get get, const std::vector<std::string>& names, const std::string& what) {
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
  const std::string allowed =
      "allowed: a list of ranks (e.g. [0, 1, 4095]) or a string of ranks and ranges (e.g. "
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
    const bool ok = dash == std::string_view::npos
                        ? number(part, lo) && number(part, hi)
                        : number(part.substr(0, dash), lo) && number(part.substr(dash + 1), hi);
    if (!ok || hi < lo)
      return bad(pos, key + ": " + show(std::string(part)) + " is not a rank or a range lo-hi", allowed);
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
      if (item.kind != Node::Kind::kScalar)
        return bad(item.pos, key + ": expected a rank, got " + describe(item), allowed);
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

Status set_peak_memory(const Node& n, const std::string& key, Scenario& s) {
  if (n.kind == Node::Kind::kNull) {
    s.expect.max_peak_memory_per_rank.reset();
    return Status::ok();
  }
  SHARDLAB_ASSIGN_OR_RETURN(s.expect.max_peak_memory_per_rank, to_bytes(n, key));
  return Status::ok();
}

// One name of a typed value: the value, its canonical spelling and the others accepted.
template <class E>
struct Named {
  E value;
  EnumValue name;
};

// The canonical spelling is the one the type's own name function gives (one spelling per
// value, kept beside the type).
template <class E, class NameOf>
Named<E> named(E value, NameOf name_of, std::vector<std::string> also = {}) {
  return {value, {std::string(name_of(value)), std::move(also)}};
}

template <class T>
struct Held {
  using type = T;
};
template <class T>
struct Held<std::optional<T>> {
  using type = T;
};
// The value a getter reaches (the E of an std::optional<E>).
template <class Get>
using HeldBy = typename Held<std::remove_reference_t<decltype(std::declval<Get>()(std::declval<Scenario&>()))>>::type;

template <class T>
struct IsOptional : std::false_type {};
template <class T>
struct IsOptional<std::optional<T>> : std::true_type {};

// A closed set of names, held as the value each names. `get` reaches an E, or an
// std::optional<E> (shown as "" while unset).
template <class Get>
ValueDef typed_setter(Get get, const std::vector<Named<HeldBy<Get>>>& values, const std::string& note = "") {
  std::vector<EnumValue> names;
  for (const auto& v : values) names.push_back(v.name);
  Setter set = [get, values, names, note](const Node& n, const std::string& key, Scenario& s) -> Status {
    SHARDLAB_ASSIGN_OR_RETURN(std::string name, to_enum(n, key, names, note));
    for (const auto& v : values) {
      if (v.name.canonical == name) get(s) = v.value;
    }
    return Status::ok();
  };
  Shower show = [get, values](const Scenario& s) {
    const auto current = value_of(get, s);
    for (const auto& v : values) {
      if constexpr (IsOptional<std::decay_t<decltype(current)>>::value) {
        if (current && *current == v.value) return v.name.canonical;
      } else {
        if (current == v.value) return v.name.canonical;
      }
    }
    return std::string();
  };
  return {set, "name", enum_allowed(names, note), show};
}

// world.backend: the registered backends (cli/backends.h), in their order.
std::vector<Named<const BackendInfo*>> backend_values() {
  std::vector<Named<const BackendInfo*>> values;
  for (const auto& b : backends()) values.push_back({&b, {std::string(b.name), {}}});
  return values;
}

std::vector<Named<sim::FaultKind>> fault_kinds() {
  using sim::FaultKind;
  const auto name = sim::fault_kind_name;
  return {named(FaultKind::kCrash, name),     named(FaultKind::kHang, name),
          named(FaultKind::kStraggler, name), named(FaultKind::kCorrupt, name),
          named(FaultKind::kLinkDown, name),  named(FaultKind::kLinkDegrade, name, {"link_degraded"}),
          named(FaultKind::kViewOffset, name)};
}

std::vector<Named<DType>> dtype_values(bool with_fp16) {
  std::vector<Named<DType>> v = {named(DType::kF32, dtype_name, {"float32"}),
                                 named(DType::kBF16, dtype_name, {"bfloat16"})};
  if (with_fp16) v.push_back(named(DType::kF16, dtype_name, {"float16"}));
  return v;
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
      leaf("kind",
           typed_setter([f](Scenario& s) -> std::optional<sim::FaultKind>& { return f(s).kind; }, fault_kinds()),
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
              if (!parse_link(v, a, b))
                return bad(n.pos, key + ": malformed link " + show(v), "allowed: " + link_allowed);
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
  return {[](const Node& n, const std::string& key, Scenario&) -> Status { return to_bool(n, key).status(); }, "bool",
          "true, false (accepted, no effect)", [](const Scenario&) { return std::string("false"); }};
}

std::vector<EnumValue> preset_values() {
  std::vector<EnumValue> v;
  for (const auto& p : runtime::model::bert_preset_names()) v.push_back({p, {}});
  v.push_back({"mlp", {}});
  return v;
}

using S = Scenario;
using runtime::fsdp::BackwardPrefetch;
using runtime::fsdp::ShardingStrategy;
using runtime::fsdp::StateDictType;
using runtime::model::BertHead;
using Optimizer = runtime::optim::OptimizerConfig::Kind;

bool positive(double v) { return v > 0; }
bool non_negative(double v) { return v >= 0; }
bool below_one(double v) { return v >= 0 && v < 1; }
bool any(double) { return true; }

Named<BertHead> head(BertHead h) {
  return named(h, runtime::model::bert_head_name, {std::string(runtime::model::bert_architecture_name(h))});
}

// name, description, seed.
std::vector<KeyDef> top_level_keys() {
  std::vector<KeyDef> top;
  top.push_back(leaf(
      "name", str_setter([](S& s) -> std::string& { return s.name; }, "allowed: letters, digits, '_', '.' and '-'"),
      {"required; names the output folder (out/<name>)"}));
  top.push_back(leaf("description",
                     str_setter([](S& s) -> std::string& { return s.description; }, "allowed: any text", true),
                     {"free text"}));
  top.push_back(
      leaf("seed",
           {[](const Node& n, const std::string& key, S& s) -> Status {
              SHARDLAB_ASSIGN_OR_RETURN(s.seed, to_uint64(n, key));
              return Status::ok();
            },
            "integer", "an integer from 0 to 18446744073709551615", [](const S& s) { return std::to_string(s.seed); }},
           {"seed of the synthetic data, the initial parameters and dropout", "transformers set_seed / Trainer seed"}));
  return top;
}

// model: which BERT (or the MLP), its head and initial weights.
KeyDef model_keys() {
  return section(
      "model",
      {
          leaf("preset", enum_setter([](S& s) -> std::string& { return s.model.preset; }, preset_values()),
               {"a BERT size (ignored when model.config is set), or the small MLP of the FSDP core",
                "bert-tiny … bert-large: Hugging Face BertConfig sizes (google/bert_uncased_L-2_H-128_A-2 … "
                "bert-large-uncased)"}),
          leaf("config",
               str_setter([](S& s) -> std::string& { return s.model.config; },
                          "allowed: a path to a Hugging Face config.json", true, /*path=*/true),
               {"a Hugging Face config.json; \"\": the preset", "BertConfig.from_pretrained"}),
          leaf("head",
               typed_setter([](S& s) -> BertHead& { return s.model.head; },
                            {head(BertHead::kSequenceClassification), head(BertHead::kMaskedLM),
                             head(BertHead::kQuestionAnswering)}),
               {"the model head", "BertForSequenceClassification | BertForMaskedLM | BertForQuestionAnswering"}),
          leaf("weights",
               str_setter([](S& s) -> std::string& { return s.model.weights; },
                          "allowed: random, or a path to a model.safetensors", false, /*path=*/true, "random"),
               {"initial parameters: seeded random, or a Hugging Face model.safetensors",
                "from_pretrained (model.safetensors)"}),
      });
}

// data: synthetic or file batches, their size.
KeyDef data_keys() {
  return section(
      "data",
      {
          leaf("kind",
               typed_setter([](S& s) -> DataKind& { return s.data.kind; },
                            {named(DataKind::kSynthetic, data_kind_name), named(DataKind::kFile, data_kind_name)}),
               {"seeded synthetic batches, or token batches read from data.path"}),
          leaf("path",
               str_setter([](S& s) -> std::string& { return s.data.path; }, "allowed: a path to a batch .safetensors",
                          true, /*path=*/true),
               {"kind file: input_ids, attention_mask, labels … as safetensors; rows are cycled"}),
          leaf("batch_size_per_rank",
               int_setter([](S& s) -> std::int64_t& { return s.data.batch_size_per_rank; }, 1, kIntMax),
               {"samples per rank per step (global batch = this × world size)",
                "TrainingArguments per_device_train_batch_size"}),
          leaf("seq_len", int_setter([](S& s) -> std::int64_t& { return s.data.seq_len; }, 1, kIntMax),
               {"tokens per sample (at most the model's max_position_embeddings)", "tokenizer max_length"}),
      });
}

// train: steps, accumulation, clipping, precision, the optimizer.
KeyDef train_keys() {
  return section(
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
               typed_setter([](S& s) -> DType& { return s.train.precision; }, dtype_values(/*with_fp16=*/false)),
               {"compute dtype of BERT; bf16 also makes an fp32 fsdp.mixed_precision.param_dtype bf16",
                "accelerate mixed_precision (no | bf16); bf16 autocast"}),
          section("optimizer",
                  {
                      leaf("name",
                           typed_setter([](S& s) -> Optimizer& { return s.train.optimizer.name; },
                                        {named(Optimizer::kAdamW, runtime::optim::optimizer_name),
                                         named(Optimizer::kSgd, runtime::optim::optimizer_name)}),
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
      });
}

// NOTE [reshard_after_forward]
// FSDP2 spells the strategy of a 1-D mesh as reshard_after_forward: true is FULL_SHARD,
// false SHARD_GRAD_OP, an integer N FULL_SHARD resharding to groups of N ranks after
// forward (FsdpOptions::reshard_after_forward_size). The key sets the strategy unless the
// same file sets fsdp.sharding_strategy too, in which case the two must agree (HYBRID_SHARD
// reshards after forward, _HYBRID_SHARD_ZERO2 does not; NO_SHARD agrees with either):
// whichever comes second is refused when they do not.
bool reshards_after_forward(ShardingStrategy s) {
  return s == ShardingStrategy::kFullShard || s == ShardingStrategy::kHybridShard;
}
bool agrees(ShardingStrategy s, int size, bool reshard) {
  if (s == ShardingStrategy::kNoShard) return size == 0;
  return reshards_after_forward(s) == reshard && (size == 0 || s == ShardingStrategy::kFullShard);
}
// The position of `other` when the file `here` is in set it too, with its line.
std::optional<SourcePos> also_set(const Scenario& s, const std::string& other, const SourcePos& here) {
  const auto it = s.positions.find(other);
  if (it == s.positions.end() || it->second.file != here.file || it->second.line == 0) return std::nullopt;
  return it->second;
}
// Two keys that spell one setting (reshard_after_forward and sharding_strategy,
// offload_policy and cpu_offload): ok unless the file `n` is in set `other` too and the two
// do not `agree`; then the refusal names both positions. `value` and `other_value` are
// what the message shows of each ("" leaves the other's value out).
Status agreement(const Scenario& s, const Node& n, const std::string& key, const std::string& value,
                 const std::string& other, const std::string& other_value, bool agree, const std::string& note = "") {
  const auto where = also_set(s, other, n.pos);
  if (!where || agree) return Status::ok();
  return bad(n.pos,
             key + ": " + value + " disagrees with " + other + (other_value.empty() ? "" : " " + other_value) +
                 " (at " + where->to_string() + ")",
             "allowed: one of the two, or values that agree" + note);
}

ValueDef reshard_after_forward_setter() {
  const std::string allowed =
      "true (FULL_SHARD), false (SHARD_GRAD_OP), or an integer N >= 2 (FULL_SHARD, resharded "
      "to groups of N ranks after forward; FSDP2)";
  Setter set = [allowed](const Node& n, const std::string& key, Scenario& s) -> Status {
    bool reshard = true;
    int size = 0;
    std::int64_t v = 0;
    if (n.kind == Node::Kind::kScalar && n.plain && parse_int64(n.text, v) == NumParse::kOk) {
      if (v < 2 || v > kMaxWorldSize) {
        return bad(n.pos, key + ": " + n.text + " is not a group size", "allowed: " + allowed);
      }
      size = static_cast<int>(v);
    } else {
      Result<bool> b = to_bool(n, key);
      if (!b.is_ok())
        return bad(n.pos, key + ": expected true, false or a group size, got " + describe(n), "allowed: " + allowed);
      reshard = *b;
    }
    SHARDLAB_RETURN_IF_ERROR(agreement(s, n, key, n.text, "fsdp.sharding_strategy",
                                       std::string(runtime::fsdp::strategy_name(s.fsdp.sharding_strategy)),
                                       agrees(s.fsdp.sharding_strategy, size, reshard),
                                       " (NOTE [reshard_after_forward])"));
    if (!also_set(s, "fsdp.sharding_strategy", n.pos)) {
      s.fsdp.sharding_strategy = reshard ? ShardingStrategy::kFullShard : ShardingStrategy::kShardGradOp;
    }
    s.fsdp.reshard_after_forward_size = size;
    return Status::ok();
  };
  Shower show = [](const Scenario& s) -> std::string {
    if (s.fsdp.reshard_after_forward_size > 0) return std::to_string(s.fsdp.reshard_after_forward_size);
    return reshards_after_forward(s.fsdp.sharding_strategy) ? "true" : "false";
  };
  return {set, "bool or integer", allowed, show};
}

// fsdp.sharding_strategy: the names, checked against reshard_after_forward when the same
// file sets both (NOTE [reshard_after_forward]).
ValueDef sharding_strategy_setter() {
  ValueDef def = typed_setter(
      [](S& s) -> ShardingStrategy& { return s.fsdp.sharding_strategy; },
      {named(ShardingStrategy::kFullShard, runtime::fsdp::strategy_name, {"1"}),
       named(ShardingStrategy::kShardGradOp, runtime::fsdp::strategy_name, {"2"}),
       named(ShardingStrategy::kNoShard, runtime::fsdp::strategy_name, {"3"}),
       named(ShardingStrategy::kHybridShard, runtime::fsdp::strategy_name, {"4"}),
       named(ShardingStrategy::kHybridShardZero2, runtime::fsdp::strategy_name, {"5", "HYBRID_SHARD_ZERO2"})},
      " (or accelerate's numbers 1-5, in that order)");
  def.set = [inner = def.set](const Node& n, const std::string& key, Scenario& s) -> Status {
    // reshard_after_forward, when it came first, left its strategy here.
    const bool reshard = reshards_after_forward(s.fsdp.sharding_strategy);
    SHARDLAB_RETURN_IF_ERROR(inner(n, key, s));
    return agreement(s, n, key, n.text, "fsdp.reshard_after_forward", "",
                     agrees(s.fsdp.sharding_strategy, s.fsdp.reshard_after_forward_size, reshard),
                     " (NOTE [reshard_after_forward])");
  };
  return def;
}

// fsdp.offload_policy: FSDP2's spelling of fsdp.cpu_offload (CPUOffloadPolicy offloads,
// OffloadPolicy, the base class and fully_shard's default, does not). When the same file sets
// both keys they must agree, whichever comes second is refused otherwise.
ValueDef offload_policy_setter() {
  const std::vector<EnumValue> names = {{"CPUOffloadPolicy", {}}, {"OffloadPolicy", {"none"}}};
  const std::string note = " (fully_shard's offload_policy: CPUOffloadPolicy offloads, OffloadPolicy does not)";
  Setter set = [names, note](const Node& n, const std::string& key, Scenario& s) -> Status {
    SHARDLAB_ASSIGN_OR_RETURN(std::string name, to_enum(n, key, names, note));
    const bool offload = name == "CPUOffloadPolicy";
    SHARDLAB_RETURN_IF_ERROR(
        agreement(s, n, key, name, "fsdp.cpu_offload", yaml_bool(s.fsdp.cpu_offload), s.fsdp.cpu_offload == offload));
    s.fsdp.cpu_offload = offload;
    return Status::ok();
  };
  Shower show = [](const Scenario& s) -> std::string {
    return s.fsdp.cpu_offload ? "CPUOffloadPolicy" : "OffloadPolicy";
  };
  return {set, "name", enum_allowed(names, note), show};
}

// fsdp.cpu_offload, checked against offload_policy when the same file sets both.
ValueDef cpu_offload_setter() {
  ValueDef def = bool_setter([](S& s) -> bool& { return s.fsdp.cpu_offload; });
  def.set = [inner = def.set](const Node& n, const std::string& key, Scenario& s) -> Status {
    const bool before = s.fsdp.cpu_offload;  // offload_policy's, when it came first
    SHARDLAB_RETURN_IF_ERROR(inner(n, key, s));
    return agreement(s, n, key, n.text, "fsdp.offload_policy", "", s.fsdp.cpu_offload == before);
  };
  return def;
}

// fsdp: the FullyShardedDataParallel arguments, with accelerate's names.
KeyDef fsdp_keys() {
  return section(
      "fsdp",
      {
          leaf("sharding_strategy", sharding_strategy_setter(),
               {"what is sharded, and across which ranks (HYBRID: inside a node, replicated across nodes)",
                "FSDP(sharding_strategy=ShardingStrategy.X); accelerate fsdp_sharding_strategy"},
               {"fsdp_sharding_strategy"}),
          leaf("reshard_after_forward", reshard_after_forward_setter(),
               {"FSDP2's spelling of the strategy on a 1-D mesh: true is FULL_SHARD, false SHARD_GRAD_OP; an integer "
                "N (fsdp_version 2, FULL_SHARD) keeps each unit sharded over groups of N consecutive ranks (a "
                "node's) from forward to backward, whose all-gather then stays inside the group. Agrees with "
                "sharding_strategy when both are set",
                "fully_shard(reshard_after_forward=True|False|N); accelerate fsdp_reshard_after_forward"},
               {"fsdp_reshard_after_forward"}),
          leaf("auto_wrap_policy",
               typed_setter([](S& s) -> AutoWrapPolicy& { return s.fsdp.auto_wrap_policy; },
                            {named(AutoWrapPolicy::kTransformer, auto_wrap_policy_name, {"TRANSFORMER_BASED_WRAP"}),
                             named(AutoWrapPolicy::kSize, auto_wrap_policy_name, {"SIZE_BASED_WRAP"}),
                             named(AutoWrapPolicy::kNone, auto_wrap_policy_name, {"NO_WRAP"})},
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
          leaf("min_num_params", int_setter([](S& s) -> std::int64_t& { return s.fsdp.min_num_params; }, 0, kInt64Max),
               {"auto_wrap_policy size: a unit closes once it holds this many parameters",
                "size_based_auto_wrap_policy(min_num_params=…); accelerate fsdp_min_num_params"},
               {"fsdp_min_num_params"}),
          leaf("backward_prefetch",
               typed_setter([](S& s) -> BackwardPrefetch& { return s.fsdp.backward_prefetch; },
                            {named(BackwardPrefetch::kBackwardPre, runtime::fsdp::prefetch_name),
                             named(BackwardPrefetch::kBackwardPost, runtime::fsdp::prefetch_name),
                             named(BackwardPrefetch::kNone, runtime::fsdp::prefetch_name, {"NO_PREFETCH"})},
                            " (accelerate: NO_PREFETCH for NONE)"),
               {"when the next unit's all-gather is issued in backward",
                "FSDP(backward_prefetch=BackwardPrefetch.X); accelerate fsdp_backward_prefetch"},
               {"fsdp_backward_prefetch", "fsdp_backward_prefetch_policy"}),
          leaf(
              "forward_prefetch", bool_setter([](S& s) -> bool& { return s.fsdp.forward_prefetch; }),
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
               str_setter([](S& s) -> std::string& { return s.fsdp.device_id; },
                          "allowed: hpu, hpu:N, cpu, or local_rank",
                          /*optional=*/true),
               {"the device FSDP is told to use; \"\": the compute device (NOTE [Simulated device_id])",
                "FSDP(device_id=…)"}),
          leaf("cpu_offload", cpu_offload_setter(),
               {"shards, gradients and optimizer state live on the host; the optimizer steps there",
                "FSDP(cpu_offload=CPUOffload(offload_params=True)); accelerate fsdp_offload_params"},
               {"fsdp_offload_params"}),
          leaf("offload_policy", offload_policy_setter(),
               {"FSDP2's spelling of cpu_offload; agrees with it when both are set",
                "fully_shard(offload_policy=CPUOffloadPolicy() | OffloadPolicy())"}),
          leaf("activation_checkpointing", bool_setter([](S& s) -> bool& { return s.fsdp.activation_checkpointing; }),
               {"recompute each BertLayer's forward in backward",
                "apply_activation_checkpointing; accelerate fsdp_activation_checkpointing"},
               {"fsdp_activation_checkpointing"}),
          leaf("state_dict_type",
               typed_setter([](S& s) -> StateDictType& { return s.fsdp.state_dict_type; },
                            {named(StateDictType::kFull, runtime::fsdp::state_dict_type_name),
                             named(StateDictType::kSharded, runtime::fsdp::state_dict_type_name),
                             named(StateDictType::kLocal, runtime::fsdp::state_dict_type_name)}),
               {"how checkpoints are written",
                "FSDP.set_state_dict_type(StateDictType.X); accelerate fsdp_state_dict_type"},
               {"fsdp_state_dict_type"}),
          section("mixed_precision",
                  {
                      leaf("param_dtype",
                           typed_setter([](S& s) -> DType& { return s.fsdp.mixed_precision.param_dtype; },
                                        dtype_values(/*with_fp16=*/true)),
                           {"dtype of the all-gather and of compute (fp16 is refused: no gradient scaler)",
                            "MixedPrecision(param_dtype=…)"}),
                      leaf("reduce_dtype",
                           typed_setter([](S& s) -> DType& { return s.fsdp.mixed_precision.reduce_dtype; },
                                        dtype_values(/*with_fp16=*/true)),
                           {"dtype of the gradient reduction", "MixedPrecision(reduce_dtype=…)"}),
                      leaf("buffer_dtype",
                           typed_setter([](S& s) -> DType& { return s.fsdp.mixed_precision.buffer_dtype; },
                                        dtype_values(/*with_fp16=*/true)),
                           {"dtype of buffers; unset: each buffer keeps its own", "MixedPrecision(buffer_dtype=…)"}),
                  }),
          leaf("cpu_ram_efficient_loading", ignored_bool(),
               {"accepted so accelerate configs paste unchanged; only changes how Hugging Face loads weights, which "
                "shardlab does not model",
                "accelerate fsdp_cpu_ram_efficient_loading"},
               {"fsdp_cpu_ram_efficient_loading"}),
          leaf("forward_prefetch_units",
               int_setter([](S& s) -> int& { return s.fsdp.forward_prefetch_units; }, 0, 1024),
               {"FSDP2's explicit forward prefetch: each unit's pre-forward all-gathers the next N units (0: "
                "forward_prefetch decides)",
                "module.set_modules_to_forward_prefetch(next N modules)"}),
          leaf("backward_prefetch_units",
               int_setter([](S& s) -> int& { return s.fsdp.backward_prefetch_units; }, 0, 1024),
               {"FSDP2's explicit backward prefetch: each unit's pre-backward all-gathers the next N units of "
                "backward (0: backward_prefetch decides)",
                "module.set_modules_to_backward_prefetch(next N modules)"}),
          leaf("fsdp_version", int_setter([](S& s) -> int& { return s.fsdp.version; }, 1, 2),
               {"1: FullyShardedDataParallel (one flat parameter per unit); 2: fully_shard (each parameter sharded "
                "on dim 0, copied in and out around the collectives; use_orig_params' alignment does not apply)",
                "FullyShardedDataParallel | fully_shard; accelerate fsdp_version"}),
      });
}

// world: where the ranks run and what the simulator models.
KeyDef world_keys() {
  return section(
      "world",
      {
          leaf("backend", typed_setter([](S& s) -> const BackendInfo*& { return s.world.backend; }, backend_values()),
               {"where ranks run: simulator threads, CPU processes under mpiexec, Gaudi cards under mpirun "
                "(--backend overrides)",
                "torch.distributed backend: gloo/mpi (mpi), hccl (hpu)"}),
          leaf("mode",
               typed_setter([](S& s) -> RunMode& { return s.world.mode; },
                            {named(RunMode::kNumerics, run_mode_name), named(RunMode::kTiming, run_mode_name)}),
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
          leaf(
              "topology",
              profile_setter([](S& s) -> std::string& { return s.world.topology; }, sim::list_topologies(), "topology"),
              {"the simulated network (`shardlab devices` lists them)"}),
          leaf("stack", profile_setter([](S& s) -> std::string& { return s.world.stack; }, sim::list_stacks(), "stack"),
               {"how the framework drives the device: ideal (no host time), pytorch_eager, pytorch_lazy, "
                "pytorch_compile (timing mode)",
                "PT_HPU_LAZY_MODE=1 (lazy) or 0 (eager); --torch_compile"}),
          leaf("network_model",
               typed_setter([](S& s) -> sim::NetworkModelKind& { return s.world.network_model; },
                            {named(sim::NetworkModelKind::kAlphaBeta, sim::network_model_name),
                             named(sim::NetworkModelKind::kContention, sim::network_model_name)}),
               {"alpha_beta: congestion-unaware; contention: max–min fair link sharing"}),
          leaf("collective_algorithm",
               typed_setter([](S& s) -> sim::Algorithm& { return s.world.collective_algorithm; },
                            {named(sim::Algorithm::kAuto, sim::algorithm_name),
                             named(sim::Algorithm::kRing, sim::algorithm_name),
                             named(sim::Algorithm::kDirect, sim::algorithm_name),
                             named(sim::Algorithm::kHierarchical, sim::algorithm_name),
                             named(sim::Algorithm::kHalvingDoubling, sim::algorithm_name),
                             named(sim::Algorithm::kLibnbc, sim::algorithm_name)}),
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
      });
}

// faults: what the simulator injects (each entry's keys in fault_keys()).
KeyDef faults_key() {
  KeyDef faults = leaf("faults",
                       {set_faults, "list of maps", "a list of maps, e.g. [{kind: crash, rank: 1, step: 2}]",
                        [](const S& s) { return s.faults.empty() ? std::string("[]") : std::string("[…]"); }},
                       {"faults the simulator injects (sim backend); each entry's keys are below"});
  faults.item_keys = fault_keys();
  return faults;
}

// trace: which ranks trace.json holds.
KeyDef trace_keys() {
  return section(
      "trace",
      {
          leaf("ranks",
               {set_trace_ranks, "list or string",
                "a list of ranks, or a string of ranks and ranges, e.g. \"0-7, 4095\"",
                [](const S& s) {
                  return s.trace.ranks.empty() ? std::string("every rank (timing mode: 0-7)")
                                               : "\"" + show_ranks(s.trace.ranks) + "\"";
                }},
               {"which ranks trace.json holds (a big world's trace of every rank would be huge); trace.json and "
                "metrics.json name them"}),
      });
}

// checkpoint: where, how often, and whether to resume.
KeyDef checkpoint_keys() {
  return section(
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
                    return Status::invalid_argument(b.status().message() +
                                                    " (or if_present: resume when dir holds a "
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
      });
}

// expect: what must hold after the run.
KeyDef expect_keys() {
  return section(
      "expect",
      {
          leaf("grads_match_unsharded",
               {set_grads_match, "bool or map", "true, false, or {rtol: <number >= 0>, atol: <number >= 0>}",
                show_grads_match},
               {"compare with unsharded training (the oracle); unset: compared but not listed; false: oracle off",
                "torch.testing.assert_close(rtol, atol)"}),
          leaf("max_peak_memory_per_rank",
               {set_peak_memory, "size or null",
                "a number of bytes, or with a unit (B, KB … TB, KiB … TiB), e.g. \"512 MiB\"",
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
      });
}

std::vector<KeyDef> build_schema() {
  std::vector<KeyDef> top = top_level_keys();
  for (KeyDef k : {model_keys(), data_keys(), train_keys(), fsdp_keys(), world_keys(), faults_key(), trace_keys(),
                   checkpoint_keys(), expect_keys()}) {
    top.push_back(std::move(k));
  }
  return top;
}

}  // namespace

const std::vector<KeyDef>& schema() {
  static const std::vector<KeyDef> kSchema = build_schema();
  return kSchema;
}

}  // namespace shardlab::cli::scenario_detail
