#include "sim/timing/op_graph.h"

#include <filesystem>
#include <limits>
#include <map>

#include <nlohmann/json.hpp>

#include "runtime/io/safetensors.h"
#include "sim/engine/communicator.h"

namespace shardlab::sim::timing {

using Json = nlohmann::json;
using runtime::comm::OpKind;
using runtime::comm::ReduceOp;
using runtime::train::TrainMarker;

namespace {

constexpr const char* kFormat = "shardlab-op-graph";
constexpr int kVersion = 2;  // 2: ops carry their tensors' shapes

const char* marker_name(TrainMarker m) {
  switch (m) {
    case TrainMarker::kStepBegin: return "step_begin";
    case TrainMarker::kStepEnd: return "step_end";
    case TrainMarker::kMemorySample: return "memory_sample";
  }
  return "?";
}

const char* node_name(NodeKind k) {
  switch (k) {
    case NodeKind::kCompute: return "c";
    case NodeKind::kIssue: return "i";
    case NodeKind::kWait: return "w";
    case NodeKind::kMarker: return "m";
  }
  return "?";
}

const char* reduce_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMax: return "max";
    default: return "min";
  }
}

constexpr OpKind kKinds[] = {OpKind::kAllGather, OpKind::kReduceScatter, OpKind::kAllReduce, OpKind::kBroadcast,
                             OpKind::kBarrier,   OpKind::kSend,          OpKind::kRecv,      OpKind::kSplit};
constexpr ReduceOp kReduceOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin};
constexpr DType kDTypes[] = {DType::kF32, DType::kBF16, DType::kF16, DType::kI64};
constexpr TrainMarker kMarkers[] = {TrainMarker::kStepBegin, TrainMarker::kStepEnd, TrainMarker::kMemorySample};
constexpr NodeKind kNodeKinds[] = {NodeKind::kCompute, NodeKind::kIssue, NodeKind::kWait, NodeKind::kMarker};

Json stats_json(const MemoryStats& m) {
  Json j;
  j["capacity"] = m.capacity;
  j["peak"] = m.peak;
  j["at_peak"] = m.at_peak;
  j["current"] = m.current;
  j["peak_total"] = m.peak_total;
  j["current_total"] = m.current_total;
  j["allocations"] = m.allocations;
  return j;
}

Json program_json(const RankProgram& p) {
  Json j;
  // Op names and shape lists once, ops as [name index, duration, shapes index or -1].
  std::map<std::string, int> name_ids;
  Json names = Json::array(), ops = Json::array();
  for (const ComputeOp& op : p.ops) {
    auto [it, fresh] = name_ids.emplace(op.name, static_cast<int>(name_ids.size()));
    if (fresh) names.push_back(op.name);
    ops.push_back(Json::array({it->second, op.duration, op.shapes}));
  }
  j["op_names"] = std::move(names);
  j["op_shapes"] = p.shapes;
  j["ops"] = std::move(ops);
  Json cs = Json::array();
  for (const CollectiveDesc& c : p.collectives) {
    cs.push_back({{"kind", std::string(runtime::comm::op_kind_name(c.kind))},
                  {"group", c.group},
                  {"bytes", c.bytes},
                  {"root", c.root},
                  {"dtype", std::string(dtype_name(c.dtype))},
                  {"count", c.count},
                  {"op", reduce_name(c.op)}});
    if (c.stride > 0) {  // NOTE [Groups in timing mode]; absent: the world group
      cs.back()["stride"] = c.stride;
      cs.back()["size"] = c.size;
      cs.back()["split"] = c.split;
    }
  }
  j["collectives"] = std::move(cs);
  Json nodes = Json::array();
  for (const Node& n : p.nodes) nodes.push_back(Json::array({node_name(n.kind), n.index, n.count, n.duration}));
  j["nodes"] = std::move(nodes);
  Json markers = Json::array();
  for (const Marker& m : p.markers) markers.push_back(Json::array({marker_name(m.kind), m.step, m.sample}));
  j["markers"] = std::move(markers);
  Json samples = Json::array();
  for (const auto& s : p.memory_samples) samples.push_back({{"step", s.step}, {"event", s.event}, {"bytes", s.bytes}});
  j["memory_samples"] = std::move(samples);
  j["memory"] = stats_json(p.memory);
  j["num_units"] = p.num_units;
  j["num_trainable_units"] = p.num_trainable_units;
  j["max_live_unsharded"] = p.max_live_unsharded;
  Json counts = Json::array();
  for (const auto& c : p.counts) counts.push_back(Json::array({c.all_gather, c.reduce_scatter, c.all_reduce}));
  j["counts"] = std::move(counts);
  return j;
}

// Reading: every access checked, errors name the field.
class Reader {
 public:
  explicit Reader(std::string what) : what_(std::move(what)) {}

  Status fail(const std::string& field, const std::string& why) const {
    return Status::invalid_argument(what_ + ": " + field + ": " + why);
  }
  Result<const Json*> get(const Json& j, const std::string& key, const std::string& field) const {
    if (!j.is_object() || !j.contains(key)) return fail(field + key, "missing");
    return &j[key];
  }
  // An integer that fits T exactly (a value out of T's range is an error, not a wrap).
  template <typename T>
  Result<T> num(const Json& j, const std::string& field) const {
    if (!j.is_number_integer()) return fail(field, "expected an integer, got " + std::string(j.type_name()));
    const bool fits = j.is_number_unsigned()
                          ? j.get<std::uint64_t>() <= static_cast<std::uint64_t>(std::numeric_limits<T>::max())
                          : j.get<std::int64_t>() >= static_cast<std::int64_t>(std::numeric_limits<T>::min()) &&
                                j.get<std::int64_t>() <= static_cast<std::int64_t>(std::numeric_limits<T>::max());
    if (!fits)
      return fail(field, j.dump() + " is out of range (" + std::to_string(std::numeric_limits<T>::min()) + " to " +
                             std::to_string(std::numeric_limits<T>::max()) + ")");
    return j.get<T>();
  }
  template <typename T>
  Result<T> num_at(const Json& j, const std::string& key, const std::string& field) const {
    SHARDLAB_ASSIGN_OR_RETURN(const Json* v, get(j, key, field));
    return num<T>(*v, field + key);
  }
  Result<std::string> str_at(const Json& j, const std::string& key, const std::string& field) const {
    SHARDLAB_ASSIGN_OR_RETURN(const Json* v, get(j, key, field));
    if (!v->is_string()) return fail(field + key, "expected a string");
    return v->get<std::string>();
  }
  Result<const Json*> array_at(const Json& j, const std::string& key, const std::string& field) const {
    SHARDLAB_ASSIGN_OR_RETURN(const Json* v, get(j, key, field));
    if (!v->is_array()) return fail(field + key, "expected an array");
    return v;
  }
  Result<std::array<std::int64_t, kNumMemoryCategories>> categories(const Json& j, const std::string& field) const {
    if (!j.is_array() || j.size() != kNumMemoryCategories) {
      return fail(field, "expected " + std::to_string(kNumMemoryCategories) + " byte counts (one per category)");
    }
    std::array<std::int64_t, kNumMemoryCategories> out{};
    for (int c = 0; c < kNumMemoryCategories; ++c) {
      SHARDLAB_ASSIGN_OR_RETURN(out[static_cast<std::size_t>(c)],
                                num<std::int64_t>(j[static_cast<std::size_t>(c)], field));
    }
    return out;
  }

 private:
  std::string what_;
};

Result<MemoryStats> read_stats(const Reader& r, const Json& j, const std::string& f) {
  MemoryStats m;
  SHARDLAB_ASSIGN_OR_RETURN(m.capacity, r.num_at<std::int64_t>(j, "capacity", f));
  SHARDLAB_ASSIGN_OR_RETURN(const Json* peak, r.get(j, "peak", f));
  SHARDLAB_ASSIGN_OR_RETURN(m.peak, r.categories(*peak, f + "peak"));
  if (j.contains("at_peak")) {  // what the peak was made of (graphs of earlier builds lack it)
    SHARDLAB_ASSIGN_OR_RETURN(m.at_peak, r.categories(j["at_peak"], f + "at_peak"));
  }
  SHARDLAB_ASSIGN_OR_RETURN(const Json* cur, r.get(j, "current", f));
  SHARDLAB_ASSIGN_OR_RETURN(m.current, r.categories(*cur, f + "current"));
  SHARDLAB_ASSIGN_OR_RETURN(m.peak_total, r.num_at<std::int64_t>(j, "peak_total", f));
  SHARDLAB_ASSIGN_OR_RETURN(m.current_total, r.num_at<std::int64_t>(j, "current_total", f));
  SHARDLAB_ASSIGN_OR_RETURN(m.allocations, r.num_at<std::int64_t>(j, "allocations", f));
  return m;
}

Result<RankProgram> read_program(const Reader& r, const Json& j, const std::string& f) {
  RankProgram p;
  SHARDLAB_ASSIGN_OR_RETURN(const Json* names, r.array_at(j, "op_names", f));
  std::vector<std::string> name_table;
  for (const Json& n : *names) {
    if (!n.is_string()) return r.fail(f + "op_names", "expected strings");
    name_table.push_back(n.get<std::string>());
  }
  // The shape lists before the ops that refer to them: lists of shapes of dimensions >= 0.
  SHARDLAB_ASSIGN_OR_RETURN(const Json* shape_lists, r.array_at(j, "op_shapes", f));
  for (std::size_t i = 0; i < shape_lists->size(); ++i) {
    const std::string sf = f + "op_shapes[" + std::to_string(i) + "]";
    const Json& list = (*shape_lists)[i];
    if (!list.is_array()) return r.fail(sf, "expected a list of shapes (lists of dimensions >= 0)");
    std::vector<std::vector<std::int64_t>> shapes;
    for (const Json& shape : list) {
      if (!shape.is_array()) return r.fail(sf, "expected a list of shapes (lists of dimensions >= 0)");
      std::vector<std::int64_t> dims;
      for (const Json& d : shape) {
        SHARDLAB_ASSIGN_OR_RETURN(auto v, r.num<std::int64_t>(d, sf));
        if (v < 0) return r.fail(sf, "dimension " + std::to_string(v) + " is negative");
        dims.push_back(v);
      }
      shapes.push_back(std::move(dims));
    }
    p.shapes.push_back(std::move(shapes));
  }
  SHARDLAB_ASSIGN_OR_RETURN(const Json* ops, r.array_at(j, "ops", f));
  for (std::size_t i = 0; i < ops->size(); ++i) {
    const Json& o = (*ops)[i];
    const std::string of = f + "ops[" + std::to_string(i) + "]";
    if (!o.is_array() || o.size() != 3) return r.fail(of, "expected [name index, duration, shapes]");
    SHARDLAB_ASSIGN_OR_RETURN(auto name, r.num<std::int64_t>(o[0], of));
    SHARDLAB_ASSIGN_OR_RETURN(auto dur, r.num<Nanos>(o[1], of));
    if (name < 0 || name >= static_cast<std::int64_t>(name_table.size()) || dur < 0) {
      return r.fail(of, "name index or duration out of range");
    }
    SHARDLAB_ASSIGN_OR_RETURN(auto shapes, r.num<std::int32_t>(o[2], of));
    if (shapes < -1 || shapes >= static_cast<std::int64_t>(p.shapes.size())) {
      return r.fail(of, "shapes index " + std::to_string(shapes) + " is outside -1.." +
                            std::to_string(static_cast<std::int64_t>(p.shapes.size()) - 1));
    }
    p.ops.push_back({name_table[static_cast<std::size_t>(name)], dur, shapes});
  }
  SHARDLAB_ASSIGN_OR_RETURN(const Json* cs, r.array_at(j, "collectives", f));
  for (std::size_t i = 0; i < cs->size(); ++i) {
    const Json& c = (*cs)[i];
    const std::string cf = f + "collectives[" + std::to_string(i) + "].";
    CollectiveDesc d;
    SHARDLAB_ASSIGN_OR_RETURN(std::string kind, r.str_at(c, "kind", cf));
    bool found = false;
    for (OpKind k : kKinds) {
      if (runtime::comm::op_kind_name(k) == kind) d.kind = k, found = true;
    }
    if (!found || d.kind == OpKind::kSend || d.kind == OpKind::kRecv) {
      return r.fail(cf + "kind",
                    "'" + kind + "' is not one of all_gather, reduce_scatter, all_reduce, broadcast, barrier, split");
    }
    SHARDLAB_ASSIGN_OR_RETURN(d.group, r.str_at(c, "group", cf));
    if (c.is_object() && c.contains("stride")) {
      SHARDLAB_ASSIGN_OR_RETURN(d.stride, r.num_at<int>(c, "stride", cf));
      SHARDLAB_ASSIGN_OR_RETURN(d.size, r.num_at<int>(c, "size", cf));
      SHARDLAB_ASSIGN_OR_RETURN(d.split, r.num_at<int>(c, "split", cf));
      if (d.stride < 1 || d.size < 1 || d.split < 1)
        return r.fail(cf + "stride", "stride, size and split must be >= 1");
    }
    SHARDLAB_ASSIGN_OR_RETURN(d.bytes, r.num_at<std::int64_t>(c, "bytes", cf));
    SHARDLAB_ASSIGN_OR_RETURN(d.root, r.num_at<int>(c, "root", cf));
    SHARDLAB_ASSIGN_OR_RETURN(d.count, r.num_at<std::int64_t>(c, "count", cf));
    if (d.bytes < 0 || d.count < 0) return r.fail(cf + "bytes", "negative");
    SHARDLAB_ASSIGN_OR_RETURN(std::string dt, r.str_at(c, "dtype", cf));
    found = false;
    for (DType t : kDTypes) {
      if (dtype_name(t) == dt) d.dtype = t, found = true;
    }
    if (!found) return r.fail(cf + "dtype", "unknown dtype '" + dt + "'");
    SHARDLAB_ASSIGN_OR_RETURN(std::string op, r.str_at(c, "op", cf));
    found = false;
    for (ReduceOp o : kReduceOps) {
      if (op == reduce_name(o)) d.op = o, found = true;
    }
    if (!found) return r.fail(cf + "op", "unknown reduce op '" + op + "'");
    p.collectives.push_back(std::move(d));
  }
  SHARDLAB_ASSIGN_OR_RETURN(const Json* nodes, r.array_at(j, "nodes", f));
  for (std::size_t i = 0; i < nodes->size(); ++i) {
    const Json& n = (*nodes)[i];
    const std::string nf = f + "nodes[" + std::to_string(i) + "]";
    if (!n.is_array() || n.size() != 4 || !n[0].is_string())
      return r.fail(nf, "expected [kind, index, count, duration]");
    Node node;
    bool found = false;
    for (NodeKind k : kNodeKinds) {
      if (n[0].get<std::string>() == node_name(k)) node.kind = k, found = true;
    }
    if (!found) return r.fail(nf, "kind must be one of c, i, w, m");
    SHARDLAB_ASSIGN_OR_RETURN(node.index, r.num<std::int32_t>(n[1], nf));
    SHARDLAB_ASSIGN_OR_RETURN(node.count, r.num<std::int32_t>(n[2], nf));
    SHARDLAB_ASSIGN_OR_RETURN(node.duration, r.num<Nanos>(n[3], nf));
    p.nodes.push_back(node);
  }
  SHARDLAB_ASSIGN_OR_RETURN(const Json* markers, r.array_at(j, "markers", f));
  for (std::size_t i = 0; i < markers->size(); ++i) {
    const Json& m = (*markers)[i];
    const std::string mf = f + "markers[" + std::to_string(i) + "]";
    if (!m.is_array() || m.size() != 3 || !m[0].is_string()) return r.fail(mf, "expected [kind, step, sample]");
    Marker mk;
    bool found = false;
    for (TrainMarker k : kMarkers) {
      if (m[0].get<std::string>() == marker_name(k)) mk.kind = k, found = true;
    }
    if (!found) return r.fail(mf, "kind must be one of step_begin, step_end, memory_sample");
    SHARDLAB_ASSIGN_OR_RETURN(mk.step, r.num<int>(m[1], mf));
    SHARDLAB_ASSIGN_OR_RETURN(mk.sample, r.num<int>(m[2], mf));
    p.markers.push_back(mk);
  }
  SHARDLAB_ASSIGN_OR_RETURN(const Json* samples, r.array_at(j, "memory_samples", f));
  for (std::size_t i = 0; i < samples->size(); ++i) {
    const Json& s = (*samples)[i];
    const std::string sf = f + "memory_samples[" + std::to_string(i) + "].";
    runtime::train::MemorySample m;
    SHARDLAB_ASSIGN_OR_RETURN(m.step, r.num_at<int>(s, "step", sf));
    SHARDLAB_ASSIGN_OR_RETURN(m.event, r.str_at(s, "event", sf));
    SHARDLAB_ASSIGN_OR_RETURN(const Json* bytes, r.get(s, "bytes", sf));
    SHARDLAB_ASSIGN_OR_RETURN(m.bytes, r.categories(*bytes, sf + "bytes"));
    p.memory_samples.push_back(std::move(m));
  }
  SHARDLAB_ASSIGN_OR_RETURN(const Json* mem, r.get(j, "memory", f));
  SHARDLAB_ASSIGN_OR_RETURN(p.memory, read_stats(r, *mem, f + "memory."));
  SHARDLAB_ASSIGN_OR_RETURN(p.num_units, r.num_at<int>(j, "num_units", f));
  SHARDLAB_ASSIGN_OR_RETURN(p.num_trainable_units, r.num_at<int>(j, "num_trainable_units", f));
  SHARDLAB_ASSIGN_OR_RETURN(p.max_live_unsharded, r.num_at<int>(j, "max_live_unsharded", f));
  SHARDLAB_ASSIGN_OR_RETURN(const Json* counts, r.array_at(j, "counts", f));
  for (const Json& c : *counts) {
    if (!c.is_array() || c.size() != 3)
      return r.fail(f + "counts", "expected [all_gather, reduce_scatter, all_reduce]");
    runtime::fsdp::CollectiveCounts cc;
    SHARDLAB_ASSIGN_OR_RETURN(cc.all_gather, r.num<int>(c[0], f + "counts"));
    SHARDLAB_ASSIGN_OR_RETURN(cc.reduce_scatter, r.num<int>(c[1], f + "counts"));
    SHARDLAB_ASSIGN_OR_RETURN(cc.all_reduce, r.num<int>(c[2], f + "counts"));
    p.counts.push_back(cc);
  }
  return p;
}

}  // namespace

std::string group_name_of(const CollectiveDesc& d, int rank) {
  return d.stride == 0 ? d.group : runtime::comm::split_group_name("world", group_color_of(d, rank), d.split);
}

bool has_payload(const CollectiveDesc& d, int rank) {
  return d.kind != OpKind::kBarrier && d.kind != OpKind::kSplit &&
         (d.kind != OpKind::kBroadcast || d.root != group_rank_of(d, rank));
}

bool RankProgram::same_program(const RankProgram& o) const {
  return nodes == o.nodes && ops == o.ops && shapes == o.shapes && collectives == o.collectives &&
         markers == o.markers && memory.peak == o.memory.peak && memory.current == o.memory.current &&
         memory.capacity == o.memory.capacity && memory_samples.size() == o.memory_samples.size() &&
         std::equal(
             memory_samples.begin(), memory_samples.end(), o.memory_samples.begin(),
             [](const auto& a, const auto& b) { return a.step == b.step && a.event == b.event && a.bytes == b.bytes; });
}

Status OpGraph::validate() const {
  const auto bad = [](const std::string& why) { return Status::invalid_argument("op graph: " + why); };
  if (world_size < 1) return bad("world_size " + std::to_string(world_size) + " must be >= 1");
  if (programs.empty()) return bad("no programs");
  if (!program_of_rank.empty()) {
    if (static_cast<int>(program_of_rank.size()) != world_size) {
      return bad("program_of_rank has " + std::to_string(program_of_rank.size()) + " entries for " +
                 std::to_string(world_size) + " ranks");
    }
    for (int p : program_of_rank) {
      if (p < 0 || p >= static_cast<int>(programs.size()))
        return bad("program_of_rank names program " + std::to_string(p));
    }
  }
  std::map<int, std::pair<int, int>> split_layouts;  // split -> (stride, size)
  for (std::size_t pi = 0; pi < programs.size(); ++pi) {
    const RankProgram& p = programs[pi];
    const std::string where = "programs[" + std::to_string(pi) + "]";
    std::vector<int> issued(p.collectives.size(), 0);
    std::int64_t next_issue = 0;
    for (std::size_t i = 0; i < p.nodes.size(); ++i) {
      const Node& n = p.nodes[i];
      const std::string nw = where + ".nodes[" + std::to_string(i) + "]";
      switch (n.kind) {
        case NodeKind::kCompute: {
          if (n.index < 0 || n.count < 0 ||
              static_cast<std::size_t>(n.index) + static_cast<std::size_t>(n.count) > p.ops.size()) {
            return bad(nw + ": ops [" + std::to_string(n.index) + ", +" + std::to_string(n.count) + ") outside the " +
                       std::to_string(p.ops.size()) + " ops");
          }
          Nanos sum = 0;
          for (int k = 0; k < n.count; ++k) sum += p.ops[static_cast<std::size_t>(n.index + k)].duration;
          if (sum != n.duration || n.duration < 0)
            return bad(nw + ": duration " + std::to_string(n.duration) + " is not the sum of its ops (" +
                       std::to_string(sum) + ")");
          break;
        }
        case NodeKind::kIssue:
          // Collectives are issued in sequence order (their index is their sequence number).
          if (n.index != next_issue)
            return bad(nw + ": issues collective " + std::to_string(n.index) + ", expected " +
                       std::to_string(next_issue));
          if (n.index >= static_cast<int>(p.collectives.size())) {
            return bad(nw + ": issues collective " + std::to_string(n.index) + " of only " +
                       std::to_string(p.collectives.size()));
          }
          ++next_issue;
          issued[static_cast<std::size_t>(n.index)] = 1;
          break;
        case NodeKind::kWait:
          if (n.index < 0 || n.index >= static_cast<int>(p.collectives.size()) ||
              !issued[static_cast<std::size_t>(n.index)]) {
            return bad(nw + ": waits for collective " + std::to_string(n.index) + ", which was not issued before");
          }
          break;
        case NodeKind::kMarker:
          if (n.index < 0 || n.index >= static_cast<int>(p.markers.size()))
            return bad(nw + ": no marker " + std::to_string(n.index));
          break;
      }
    }
    if (next_issue != static_cast<std::int64_t>(p.collectives.size())) {
      return bad(where + ": " + std::to_string(p.collectives.size()) + " collectives but " +
                 std::to_string(next_issue) + " issued");
    }
    for (const CollectiveDesc& c : p.collectives) {
      if (c.stride == 0 && c.group != "world") {
        return bad(where + ": group '" + c.group +
                   "' has no layout (stride, size): only the world group and groups of "
                   "split_strided are supported");
      }
      if (c.stride > 0) {
        if (Status s = runtime::comm::validate_strided(world_size, c.stride, c.size); !s.is_ok()) {
          return bad(where + ": group '" + c.group + "': " + s.message());
        }
        if (c.kind == runtime::comm::OpKind::kSplit) return bad(where + ": a split of group '" + c.group + "'");
        if (c.split < 1 || static_cast<std::size_t>(c.split) > p.collectives.size()) {  // each split is a collective
          return bad(where + ": group '" + c.group + "': split " + std::to_string(c.split) + " outside 1.." +
                     std::to_string(p.collectives.size()));
        }
        // A split names one layout in the graph.
        auto [it, fresh] = split_layouts.try_emplace(c.split, std::make_pair(c.stride, c.size));
        if (!fresh && it->second != std::make_pair(c.stride, c.size)) {
          return bad(where + ": split " + std::to_string(c.split) + " of group '" + c.group + "' has stride " +
                     std::to_string(c.stride) + " and size " + std::to_string(c.size) + ", elsewhere stride " +
                     std::to_string(it->second.first) + " and size " + std::to_string(it->second.second));
        }
      }
      if (c.kind == runtime::comm::OpKind::kBroadcast && (c.root < 0 || c.root >= group_size_of(c, world_size))) {
        return bad(where + ": broadcast root " + std::to_string(c.root) + " outside its group");
      }
    }
    for (const Marker& m : p.markers) {
      if (m.kind == TrainMarker::kMemorySample &&
          (m.sample < 0 || m.sample >= static_cast<int>(p.memory_samples.size()))) {
        return bad(where + ": a marker names memory sample " + std::to_string(m.sample));
      }
    }
  }
  return Status::ok();
}

std::string graph_to_json_string(const OpGraph& g) {
  Json j;
  j["format"] = kFormat;
  j["version"] = kVersion;
  j["description"] = g.description;
  j["approximation"] = g.approximation;
  j["world_size"] = g.world_size;
  j["steps"] = g.steps;
  j["device"] = g.device;
  if (g.network) {
    j["network"] = {{"topology", g.network->topology},
                    {"nodes", g.network->nodes},
                    {"devices_per_node", g.network->devices_per_node},
                    {"model", g.network->model},
                    {"algorithm", g.network->algorithm}};
  } else {
    j["network"] = nullptr;
  }
  // NOTE [Software stack]: a graph captured under another stack than ideal carries it (its
  // device costs already include the stack's graph compiler; the replay adds its host).
  if (!g.stack.ideal()) j["stack"] = Json::parse(stack_to_json(g.stack));
  Json programs = Json::array();
  for (const RankProgram& p : g.programs) programs.push_back(program_json(p));
  j["programs"] = std::move(programs);
  j["program_of_rank"] = g.program_of_rank;
  return j.dump() + "\n";
}

Result<OpGraph> graph_from_json_string(const std::string& text, const std::string& what) {
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  const Reader r(what);
  if (j.is_discarded()) return r.fail("(document)", "not valid JSON");
  SHARDLAB_ASSIGN_OR_RETURN(std::string format, r.str_at(j, "format", ""));
  if (format != kFormat) return r.fail("format", "'" + format + "', expected '" + kFormat + "'");
  SHARDLAB_ASSIGN_OR_RETURN(int version, r.num_at<int>(j, "version", ""));
  if (version != kVersion)
    return r.fail("version", std::to_string(version) + ", this build reads version " + std::to_string(kVersion));
  OpGraph g;
  SHARDLAB_ASSIGN_OR_RETURN(g.description, r.str_at(j, "description", ""));
  SHARDLAB_ASSIGN_OR_RETURN(g.approximation, r.str_at(j, "approximation", ""));
  SHARDLAB_ASSIGN_OR_RETURN(g.world_size, r.num_at<int>(j, "world_size", ""));
  SHARDLAB_ASSIGN_OR_RETURN(g.steps, r.num_at<int>(j, "steps", ""));
  if (g.world_size < 1 || g.world_size > kMaxGraphWorldSize) {
    return r.fail("world_size", std::to_string(g.world_size) + " is outside 1.." + std::to_string(kMaxGraphWorldSize));
  }
  if (g.steps < 0) return r.fail("steps", "negative");
  // Written by this build from version 1 on; a graph without them replays on the default network.
  if (j.contains("device")) {
    SHARDLAB_ASSIGN_OR_RETURN(g.device, r.str_at(j, "device", ""));
  }
  if (j.contains("network") && !j["network"].is_null()) {
    const Json& n = j["network"];
    CapturedNetwork net;
    SHARDLAB_ASSIGN_OR_RETURN(net.topology, r.str_at(n, "topology", "network."));
    SHARDLAB_ASSIGN_OR_RETURN(net.nodes, r.num_at<int>(n, "nodes", "network."));
    SHARDLAB_ASSIGN_OR_RETURN(net.devices_per_node, r.num_at<int>(n, "devices_per_node", "network."));
    SHARDLAB_ASSIGN_OR_RETURN(net.model, r.str_at(n, "model", "network."));
    SHARDLAB_ASSIGN_OR_RETURN(net.algorithm, r.str_at(n, "algorithm", "network."));
    if (net.nodes < 1 || net.devices_per_node < 1 ||
        static_cast<std::int64_t>(net.nodes) * net.devices_per_node != g.world_size) {
      return r.fail("network.nodes", std::to_string(net.nodes) + " nodes x " + std::to_string(net.devices_per_node) +
                                         " devices is not the graph's world of " + std::to_string(g.world_size));
    }
    g.network = std::move(net);
  }
  if (j.contains("stack")) {
    if (!j["stack"].is_object()) return r.fail("stack", "not an object (a software stack, sim/models/device/stack.h)");
    auto stack = parse_stack(j["stack"].dump(), what + ": stack");
    if (!stack.is_ok()) return Status::invalid_argument(stack.status().message());
    g.stack = *stack;
  }
  SHARDLAB_ASSIGN_OR_RETURN(const Json* programs, r.array_at(j, "programs", ""));
  for (std::size_t i = 0; i < programs->size(); ++i) {
    SHARDLAB_ASSIGN_OR_RETURN(RankProgram p, read_program(r, (*programs)[i], "programs[" + std::to_string(i) + "]."));
    g.programs.push_back(std::move(p));
  }
  SHARDLAB_ASSIGN_OR_RETURN(const Json* por, r.array_at(j, "program_of_rank", ""));
  for (const Json& v : *por) {
    SHARDLAB_ASSIGN_OR_RETURN(int p, r.num<int>(v, "program_of_rank"));
    g.program_of_rank.push_back(p);
  }
  if (Status s = g.validate(); !s.is_ok()) return Status::invalid_argument(what + ": " + s.message());
  return g;
}

Status write_graph_json(const OpGraph& graph, const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (ec) return Status::invalid_argument(path + ": cannot create its folder (" + ec.message() + ")");
  return runtime::io::write_file_atomic(path, graph_to_json_string(graph));
}

Result<OpGraph> read_graph_json(const std::string& path) {
  SHARDLAB_ASSIGN_OR_RETURN(std::string text, runtime::io::read_file(path));
  return graph_from_json_string(text, path);
}

}  // namespace shardlab::sim::timing
