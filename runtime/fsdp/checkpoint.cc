#include "runtime/fsdp/checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "runtime/io/safetensors.h"

namespace shardlab::runtime::fsdp {

namespace fs = std::filesystem;
using io::SafetensorsFile;
using io::StoredTensor;
using json = nlohmann::ordered_json;

std::string_view state_dict_type_name(StateDictType t) {
  switch (t) {
    case StateDictType::kFull: return "FULL_STATE_DICT";
    case StateDictType::kSharded: return "SHARDED_STATE_DICT";
    case StateDictType::kLocal: return "LOCAL_STATE_DICT";
  }
  return "?";
}

Result<StateDictType> parse_state_dict_type(std::string_view t) {
  if (t == "FULL_STATE_DICT" || t == "FULL" || t == "full") return StateDictType::kFull;
  if (t == "SHARDED_STATE_DICT" || t == "SHARDED" || t == "sharded") return StateDictType::kSharded;
  if (t == "LOCAL_STATE_DICT" || t == "LOCAL" || t == "local") return StateDictType::kLocal;
  return Status::invalid_argument("unknown state_dict_type '" + std::string(t) +
                                  "'; allowed: FULL_STATE_DICT, SHARDED_STATE_DICT, LOCAL_STATE_DICT");
}

namespace {

std::string step_name(std::int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%08lld", static_cast<long long>(step));
  return buf;
}

std::string rank_file(const char* prefix, int rank) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%s-%05d.safetensors", prefix, rank);
  return buf;
}

StoredTensor stored(std::string name, const Tensor& t, std::int64_t begin, std::int64_t n, Shape shape = {}) {
  StoredTensor s;
  s.name = std::move(name);
  s.dtype = DType::kF32;
  s.shape = shape.empty() ? Shape{n} : std::move(shape);
  s.data.resize(static_cast<std::size_t>(n) * 4);
  if (n > 0) std::memcpy(s.data.data(), t.data<float>() + begin, static_cast<std::size_t>(n) * 4);
  return s;
}

// A whole tensor in its own dtype (buffers).
StoredTensor stored_raw(std::string name, const Tensor& t) {
  StoredTensor s;
  s.name = std::move(name);
  s.dtype = t.dtype();
  s.shape = t.shape();
  s.data.resize(static_cast<std::size_t>(t.nbytes()));
  if (t.nbytes() > 0) std::memcpy(s.data.data(), t.bytes(), s.data.size());
  return s;
}

std::string safetensors_dtype(DType d) {
  switch (d) {
    case DType::kF32: return "F32";
    case DType::kBF16: return "BF16";
    case DType::kF16: return "F16";
    case DType::kI64: return "I64";
  }
  return "?";
}

// Module buffers, in their declared dtype or as they are (NOTE [Buffers in checkpoints]).
Status append_buffers(FullyShardedModel& m, SafetensorsFile& f, bool declared_dtype, bool prefixed) {
  for (int i = 0; i < m.num_buffers(); ++i) {
    const std::string& name = m.buffer_specs()[static_cast<std::size_t>(i)].name;
    SHARDLAB_ASSIGN_OR_RETURN(Tensor t, declared_dtype ? m.buffer_state(i) : m.buffer(i));
    f.tensors.push_back(stored_raw(prefixed ? "buffer/" + name : name, t));
  }
  return Status::ok();
}

std::string piece_key(const std::string& tensor, std::int64_t begin) { return tensor + "@" + std::to_string(begin); }

// The state tensor names and optimizer of the trainable units (all units share one config).
std::vector<std::string> state_names(FullyShardedModel& m) {
  return m.optimizers().empty() ? std::vector<std::string>{} : m.optimizers()[0].state_names();
}

Status write(const CheckpointOptions& o, const std::string& path, const SafetensorsFile& f) {
  if (o.before_write) SHARDLAB_RETURN_IF_ERROR(o.before_write(path));
  return io::write_safetensors(path, f);
}

// The files this rank writes.
Status write_rank_files(FullyShardedModel& m, const std::string& step_dir, const CheckpointOptions& o) {
  const auto names = state_names(m);
  const auto& units = m.units();
  if (o.type == StateDictType::kLocal) {
    SafetensorsFile f;
    for (std::size_t u = 0; u < units.size(); ++u) {
      const std::string unit = "unit" + std::to_string(u);
      f.tensors.push_back(stored(unit + "/flat", units[u].shard, 0, units[u].shard.numel()));
      if (!units[u].has_trainable) continue;
      for (std::size_t k = 0; k < names.size(); ++k) {
        const Tensor& st = m.optimizers()[u].state()[k];
        f.tensors.push_back(stored(unit + "/" + names[k], st, 0, st.numel()));
      }
    }
    SHARDLAB_RETURN_IF_ERROR(append_buffers(m, f, /*declared_dtype=*/false, /*prefixed=*/true));
    return write(o, step_dir + "/" + rank_file("local-rank", m.world().rank()), f);
  }
  if (o.type == StateDictType::kSharded) {
    if (!m.writes_shard_files()) return Status::ok();
    SafetensorsFile f;
    const int r = m.shard_rank();
    for (std::size_t u = 0; u < units.size(); ++u) {
      const FlatParameter& fp = units[u];
      for (const ShardPiece& p : fp.layout.shard(r).pieces) {
        const model::ParamSpec& spec = fp.specs[static_cast<std::size_t>(p.param)];
        f.tensors.push_back(stored(piece_key("model/" + spec.name, p.param_begin), fp.shard, p.offset_in_shard, p.numel()));
        if (!spec.requires_grad) continue;
        for (std::size_t k = 0; k < names.size(); ++k) {
          f.tensors.push_back(stored(piece_key("optim/" + names[k] + "/" + spec.name, p.param_begin),
                                     m.optimizers()[u].state()[k], p.offset_in_shard, p.numel()));
        }
      }
    }
    if (r == 0) SHARDLAB_RETURN_IF_ERROR(append_buffers(m, f, /*declared_dtype=*/true, /*prefixed=*/true));
    return write(o, step_dir + "/" + rank_file("rank", r), f);
  }
  // FULL: gather everything (collective), rank 0 writes.
  device::Device& dev = m.device();
  const std::int64_t total = model::total_numel(m.specs());
  SHARDLAB_ASSIGN_OR_RETURN(Tensor full, dev.empty({total}, DType::kF32, MemoryCategory::kOther, "full_state"));
  SHARDLAB_RETURN_IF_ERROR(m.gather_full_params(full));
  SafetensorsFile model_file, optim_file;
  for (std::size_t i = 0; i < m.specs().size(); ++i) {
    const auto& spec = m.specs()[i];
    model_file.tensors.push_back(stored(spec.name, full, m.model_offset(static_cast<int>(i)), *checked_numel(spec.shape), spec.shape));
  }
  for (std::size_t k = 0; k < names.size(); ++k) {
    SHARDLAB_RETURN_IF_ERROR(m.gather_full_optimizer_state(static_cast<int>(k), full));
    for (std::size_t i = 0; i < m.specs().size(); ++i) {
      const auto& spec = m.specs()[i];
      if (!spec.requires_grad) continue;
      optim_file.tensors.push_back(stored(names[k] + "/" + spec.name, full, m.model_offset(static_cast<int>(i)),
                                          *checked_numel(spec.shape), spec.shape));
    }
  }
  if (m.world().rank() != 0) return Status::ok();
  SHARDLAB_RETURN_IF_ERROR(append_buffers(m, model_file, /*declared_dtype=*/true, /*prefixed=*/false));
  SHARDLAB_RETURN_IF_ERROR(write(o, step_dir + "/model.safetensors", model_file));
  return write(o, step_dir + "/optimizer.safetensors", optim_file);
}

json piece(const std::string& file, const std::string& key, std::int64_t offset, std::int64_t length) {
  return {{"file", file}, {"key", key}, {"offset", offset}, {"length", length}};
}

json make_index(FullyShardedModel& m, std::int64_t step, const CheckpointOptions& o) {
  const auto names = state_names(m);
  json idx;
  idx["format"] = "shardlab-fsdp-checkpoint";
  idx["version"] = 1;
  idx["type"] = state_dict_type_name(o.type);
  idx["step"] = step;
  idx["world_size"] = o.type == StateDictType::kLocal ? m.world().size() : m.units().empty() ? 1 : m.units()[0].layout.world_size();
  idx["optimizer"] = {{"steps", m.optimizers().empty() ? 0 : m.optimizers()[0].steps()}, {"states", names}};
  json tensors = json::object();
  if (o.type == StateDictType::kLocal) {
    json units = json::array();
    // Each unit's layout, so that one process can unflatten the rank files without the
    // model (load_checkpoint_unsharded): [shard rank, parameter, param_begin, length,
    // offset_in_shard]. Shard rank s is world rank s's file: the first shard group is
    // world ranks [0, shard world) under every strategy (NO_SHARD: rank 0).
    for (const auto& fp : m.units()) {
      json pieces = json::array();
      for (const auto& shard : fp.layout.shards()) {
        for (const ShardPiece& p : shard.pieces) {
          pieces.push_back({shard.rank, fp.specs[static_cast<std::size_t>(p.param)].name, p.param_begin, p.numel(),
                            p.offset_in_shard});
        }
      }
      units.push_back({{"shard_numel", fp.layout.shard_numel()}, {"num_params", fp.specs.size()}, {"pieces", pieces}});
    }
    idx["units"] = units;
  } else if (o.type == StateDictType::kFull) {
    for (const auto& spec : m.specs()) {
      const std::int64_t n = *checked_numel(spec.shape);
      tensors["model/" + spec.name] = {{"shape", spec.shape}, {"dtype", "F32"}, {"pieces", {piece("model.safetensors", spec.name, 0, n)}}};
      if (!spec.requires_grad) continue;
      for (const auto& k : names) {
        tensors["optim/" + k + "/" + spec.name] = {
            {"shape", spec.shape}, {"dtype", "F32"}, {"pieces", {piece("optimizer.safetensors", k + "/" + spec.name, 0, n)}}};
      }
    }
  } else {
    for (const auto& fp : m.units()) {
      for (std::size_t i = 0; i < fp.specs.size(); ++i) {
        const auto& spec = fp.specs[i];
        std::vector<std::string> keys = {"model/" + spec.name};
        if (spec.requires_grad)
          for (const auto& k : names) keys.push_back("optim/" + k + "/" + spec.name);
        for (const auto& key : keys) {
          json pieces = json::array();
          for (const auto& shard : fp.layout.shards()) {
            for (const ShardPiece& p : shard.pieces) {
              if (p.param != static_cast<int>(i)) continue;
              pieces.push_back(piece(rank_file("rank", shard.rank), piece_key(key, p.param_begin), p.param_begin, p.numel()));
            }
          }
          tensors[key] = {{"shape", spec.shape}, {"dtype", "F32"}, {"pieces", pieces}};
        }
      }
    }
  }
  if (o.type != StateDictType::kLocal) {
    for (const auto& b : m.buffer_specs()) {
      const bool full = o.type == StateDictType::kFull;
      tensors["buffer/" + b.name] = {
          {"shape", b.shape},
          {"dtype", safetensors_dtype(b.dtype)},
          {"pieces", {piece(full ? "model.safetensors" : rank_file("rank", 0), full ? b.name : "buffer/" + b.name, 0,
                            *checked_numel(b.shape))}}};
    }
  }
  idx["tensors"] = tensors;
  return idx;
}

}  // namespace

Status save_checkpoint(FullyShardedModel& m, const std::string& dir, std::int64_t step, const CheckpointOptions& o) {
  comm::Communicator& world = m.world();
  const std::string step_dir = dir + "/" + step_name(step);
  std::error_code ec;
  fs::create_directories(step_dir, ec);
  Status local = ec ? Status::unavailable(step_dir + ": cannot create (" + ec.message() + ")") : Status::ok();
  if (local.is_ok()) local = write_rank_files(m, step_dir, o);
  // Commit only if every rank wrote its files.
  SHARDLAB_ASSIGN_OR_RETURN(Tensor flag, m.device().empty({1}, DType::kI64, MemoryCategory::kOther, "save_ok"));
  flag.data<std::int64_t>()[0] = local.is_ok() ? 1 : 0;
  SHARDLAB_RETURN_IF_ERROR(
      world.all_reduce(flag, comm::ReduceOp::kMin)->wait(m.options().collective_timeout).with_context("save_checkpoint"));
  if (!local.is_ok()) return local.with_context("save_checkpoint on rank " + std::to_string(world.rank()));
  if (flag.data<std::int64_t>()[0] != 1) {
    return Status::unavailable("save_checkpoint: another rank failed to write its files; " + dir +
                               "/latest still names the previous checkpoint");
  }
  Status commit;
  if (world.rank() == 0) {
    commit = io::write_file_atomic(step_dir + "/index.json", make_index(m, step, o).dump(2) + "\n");
    if (commit.is_ok() && o.before_write) commit = o.before_write(dir + "/latest");
    if (commit.is_ok()) commit = io::write_file_atomic(dir + "/latest", step_name(step) + "\n");
  }
  flag.data<std::int64_t>()[0] = commit.is_ok() ? 1 : 0;
  SHARDLAB_RETURN_IF_ERROR(world.broadcast(flag, 0)->wait(m.options().collective_timeout).with_context("save_checkpoint"));
  if (flag.data<std::int64_t>()[0] != 1) {
    return commit.is_ok() ? Status::unavailable("save_checkpoint: rank 0 could not commit the checkpoint") : commit;
  }
  return Status::ok();
}

namespace {

class Loader {
 public:
  Loader(std::string dir) : dir_(std::move(dir)) {}

  // The stored tensor `key` of `file`, any dtype.
  Result<const StoredTensor*> raw(const std::string& file, const std::string& key) {
    auto it = files_.find(file);
    if (it == files_.end()) {
      SHARDLAB_ASSIGN_OR_RETURN(SafetensorsFile f, io::read_safetensors(dir_ + "/" + file));
      it = files_.emplace(file, std::move(f)).first;
    }
    const StoredTensor* t = it->second.find(key);
    if (!t) return Status::invalid_argument(dir_ + "/" + file + ": tensor '" + key + "' named by index.json is missing");
    return t;
  }

  Result<const StoredTensor*> tensor(const std::string& file, const std::string& key) {
    SHARDLAB_ASSIGN_OR_RETURN(const StoredTensor* t, raw(file, key));
    if (t->dtype != DType::kF32) return Status::invalid_argument(dir_ + "/" + file + ": tensor '" + key + "' is not F32");
    return t;
  }

  // Loads every buffer of `m` from its "buffer/<name>" entry (see NOTE [Buffers in checkpoints]).
  Status load_buffers(const json& index, FullyShardedModel& m) {
    for (int i = 0; i < m.num_buffers(); ++i) {
      const model::BufferSpec& spec = m.buffer_specs()[static_cast<std::size_t>(i)];
      const std::string key = "buffer/" + spec.name;
      const std::string where = dir_ + "/index.json: buffer '" + spec.name + "'";
      if (!index["tensors"].contains(key)) return Status::invalid_argument(where + " is missing");
      const json& entry = index["tensors"][key];
      if (!entry.contains("shape") || entry["shape"].get<Shape>() != spec.shape) {
        return Status::invalid_argument(where + " has shape " + (entry.contains("shape") ? entry["shape"].dump() : "?") +
                                        " but the model expects " + shape_to_string(spec.shape));
      }
      if (entry["pieces"].size() != 1) return Status::invalid_argument(where + " must be stored in one piece");
      const json& p = entry["pieces"][0];
      SHARDLAB_ASSIGN_OR_RETURN(const StoredTensor* t, raw(p["file"].get<std::string>(), p["key"].get<std::string>()));
      if (t->dtype != spec.dtype || t->shape != spec.shape) {
        return Status::invalid_argument(where + " is stored as " + safetensors_dtype(t->dtype) + " " +
                                        shape_to_string(t->shape) + " but the model declares " +
                                        safetensors_dtype(spec.dtype) + " " + shape_to_string(spec.shape));
      }
      SHARDLAB_ASSIGN_OR_RETURN(Tensor value, m.device().empty(spec.shape, spec.dtype, MemoryCategory::kOther, key));
      if (!t->data.empty()) std::memcpy(value.bytes(), t->data.data(), t->data.size());
      SHARDLAB_RETURN_IF_ERROR(m.load_buffer(i, value));
    }
    return Status::ok();
  }

  // Fills dst[0, end - begin) with elements [begin, end) of the flattened checkpoint tensor `key`.
  Status fill(const json& index, const std::string& key, const Shape& shape, std::int64_t begin, std::int64_t end,
              float* dst) {
    const std::string where = dir_ + "/index.json: tensor '" + key + "'";
    if (!index["tensors"].contains(key)) return Status::invalid_argument(where + " is missing");
    const json& entry = index["tensors"][key];
    if (!entry.contains("shape") || entry["shape"].get<Shape>() != shape) {
      return Status::invalid_argument(where + " has shape " + (entry.contains("shape") ? entry["shape"].dump() : "?") +
                                      " but the model expects " + shape_to_string(shape));
    }
    std::int64_t covered = 0;
    for (const json& p : entry["pieces"]) {
      const std::int64_t off = p["offset"].get<std::int64_t>(), len = p["length"].get<std::int64_t>();
      const std::int64_t lo = std::max(off, begin), hi = std::min(off + len, end);
      if (lo >= hi) continue;
      SHARDLAB_ASSIGN_OR_RETURN(const StoredTensor* t, tensor(p["file"].get<std::string>(), p["key"].get<std::string>()));
      if (static_cast<std::int64_t>(t->data.size()) != len * 4) {
        return Status::data_loss(where + ": piece '" + p["key"].get<std::string>() + "' holds " +
                                 std::to_string(t->data.size() / 4) + " elements, index says " + std::to_string(len));
      }
      std::memcpy(dst + (lo - begin), t->data.data() + (lo - off) * 4, static_cast<std::size_t>(hi - lo) * 4);
      covered += hi - lo;
    }
    if (covered != end - begin) {
      return Status::data_loss(where + ": the saved pieces cover " + std::to_string(covered) + " of the " +
                               std::to_string(end - begin) + " elements [" + std::to_string(begin) + ", " +
                               std::to_string(end) + ") this rank needs");
    }
    return Status::ok();
  }

 private:
  std::string dir_;
  std::map<std::string, SafetensorsFile> files_;
};

}  // namespace

namespace {
Result<std::int64_t> load_checkpoint_impl(FullyShardedModel& m, const std::string& dir);
Result<UnshardedCheckpoint> load_unsharded_impl(const std::string& step_dir, const std::vector<model::ParamSpec>& specs,
                                                const std::vector<std::string>& names);
}  // namespace

Result<UnshardedCheckpoint> load_checkpoint_unsharded(const std::string& step_dir,
                                                      const std::vector<model::ParamSpec>& specs,
                                                      const std::vector<std::string>& state_names) {
  try {
    return load_unsharded_impl(step_dir, specs, state_names);
  } catch (const nlohmann::json::exception& e) {
    return Status::invalid_argument(step_dir + ": malformed checkpoint index.json: " + e.what());
  }
}

Result<std::int64_t> load_checkpoint(FullyShardedModel& m, const std::string& dir) {
  // A malformed index.json (wrong types, missing fields) surfaces as a json exception
  // somewhere in the walk; it is bad input, reported as such.
  try {
    return load_checkpoint_impl(m, dir);
  } catch (const nlohmann::json::exception& e) {
    return Status::invalid_argument(dir + ": malformed checkpoint index.json: " + e.what());
  }
}

Result<std::string> latest_step_dir(const std::string& dir) {
  SHARDLAB_ASSIGN_OR_RETURN(std::string latest, io::read_file(dir + "/latest"));
  while (!latest.empty() && (latest.back() == '\n' || latest.back() == ' ')) latest.pop_back();
  if (latest.rfind("step-", 0) != 0 || latest.find('/') != std::string::npos) {
    return Status::invalid_argument(dir + "/latest: '" + latest + "' is not a step directory name (step-NNNNNNNN)");
  }
  return dir + "/" + latest;
}

namespace {
// step_dir/index.json, checked to be a shardlab index whose optimizer state is `names`.
Result<json> read_index(const std::string& step_dir, const std::vector<std::string>& names) {
  SHARDLAB_ASSIGN_OR_RETURN(std::string text, io::read_file(step_dir + "/index.json"));
  json index = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (index.is_discarded() || !index.is_object() || index.value("format", "") != "shardlab-fsdp-checkpoint" ||
      !index.contains("type") || !index.contains("step") || !index.contains("tensors") || !index.contains("optimizer")) {
    return Status::invalid_argument(step_dir + "/index.json: not a shardlab FSDP checkpoint index");
  }
  const auto saved_states = index["optimizer"]["states"].get<std::vector<std::string>>();
  if (saved_states != names) {
    return Status::invalid_argument(step_dir + "/index.json: the checkpoint's optimizer state is " +
                                    index["optimizer"]["states"].dump() + " but the optimizer needs " + json(names).dump());
  }
  return index;
}

Result<UnshardedCheckpoint> load_unsharded_impl(const std::string& step_dir, const std::vector<model::ParamSpec>& specs,
                                                const std::vector<std::string>& names) {
  SHARDLAB_ASSIGN_OR_RETURN(json index, read_index(step_dir, names));
  SHARDLAB_ASSIGN_OR_RETURN(StateDictType type, parse_state_dict_type(index["type"].get<std::string>()));
  UnshardedCheckpoint out;
  out.step = index["step"].get<std::int64_t>();
  out.optimizer_steps = index["optimizer"]["steps"].get<std::int64_t>();
  const std::int64_t total = model::total_numel(specs);
  out.params.assign(static_cast<std::size_t>(total), 0.0f);
  out.optimizer_state.assign(names.size(), std::vector<float>(static_cast<std::size_t>(total), 0.0f));
  if (type == StateDictType::kLocal) {
    // Unflatten each rank file's shards with the layout the index records.
    struct Place {
      std::int64_t offset, numel;
      bool trainable;
    };
    std::map<std::string, Place> where;  // parameter name -> its place in the flat vectors
    std::int64_t at = 0;
    for (const auto& spec : specs) {
      const std::int64_t n = *checked_numel(spec.shape);
      where[spec.name] = {at, n, spec.requires_grad};
      at += n;
    }
    std::vector<std::uint8_t> seen(static_cast<std::size_t>(total), 0);
    Loader loader(step_dir);
    const json& units = index["units"];
    for (std::size_t u = 0; u < units.size(); ++u) {
      if (!units[u].contains("pieces")) {
        return Status::invalid_argument(step_dir + "/index.json: unit " + std::to_string(u) +
                                        " records no layout; this LOCAL_STATE_DICT checkpoint can only be loaded by "
                                        "the same world size and layout");
      }
      for (const json& p : units[u]["pieces"]) {
        const int rank = p.at(0).get<int>();
        const std::string name = p.at(1).get<std::string>();
        const std::int64_t begin = p.at(2).get<std::int64_t>(), len = p.at(3).get<std::int64_t>(),
                           off = p.at(4).get<std::int64_t>();
        const auto w = where.find(name);
        const std::string what = step_dir + "/index.json: unit " + std::to_string(u) + " piece of '" + name + "'";
        if (w == where.end()) return Status::invalid_argument(what + ": the model has no such parameter");
        const std::string file = rank_file("local-rank", rank);
        auto copy = [&](const std::string& key, std::vector<float>& dst) -> Status {
          SHARDLAB_ASSIGN_OR_RETURN(const StoredTensor* t, loader.tensor(file, key));
          const std::int64_t held = static_cast<std::int64_t>(t->data.size() / 4);
          if (off < 0 || len < 0 || off > held || len > held - off || begin < 0 || begin > w->second.numel ||
              len > w->second.numel - begin) {
            return Status::data_loss(what + ": [" + std::to_string(off) + ", +" + std::to_string(len) +
                                     ") is outside " + file + ":" + key + " (" + std::to_string(held) + " elements)");
          }
          std::memcpy(dst.data() + w->second.offset + begin, t->data.data() + off * 4, static_cast<std::size_t>(len) * 4);
          return Status::ok();
        };
        SHARDLAB_RETURN_IF_ERROR(copy("unit" + std::to_string(u) + "/flat", out.params));
        if (w->second.trainable) {
          for (std::size_t k = 0; k < names.size(); ++k) {
            SHARDLAB_RETURN_IF_ERROR(copy("unit" + std::to_string(u) + "/" + names[k], out.optimizer_state[k]));
          }
        }
        std::fill(seen.begin() + w->second.offset + begin, seen.begin() + w->second.offset + begin + len, 1);
      }
    }
    if (std::find(seen.begin(), seen.end(), 0) != seen.end()) {
      return Status::data_loss(step_dir + "/index.json: the LOCAL_STATE_DICT layout does not cover every parameter");
    }
    return out;
  }
  Loader loader(step_dir);
  std::int64_t at = 0;
  for (const auto& spec : specs) {
    const std::int64_t n = *checked_numel(spec.shape);
    SHARDLAB_RETURN_IF_ERROR(loader.fill(index, "model/" + spec.name, spec.shape, 0, n, out.params.data() + at));
    if (spec.requires_grad) {
      for (std::size_t k = 0; k < names.size(); ++k) {
        SHARDLAB_RETURN_IF_ERROR(loader.fill(index, "optim/" + names[k] + "/" + spec.name, spec.shape, 0, n,
                                             out.optimizer_state[k].data() + at));
      }
    }
    at += n;
  }
  return out;
}

Result<std::int64_t> load_checkpoint_impl(FullyShardedModel& m, const std::string& dir) {
  SHARDLAB_ASSIGN_OR_RETURN(const std::string step_dir, latest_step_dir(dir));
  const auto names = state_names(m);
  SHARDLAB_ASSIGN_OR_RETURN(json index, read_index(step_dir, names));
  SHARDLAB_ASSIGN_OR_RETURN(StateDictType type, parse_state_dict_type(index["type"].get<std::string>()));
  auto& units = m.units();
  if (type == StateDictType::kLocal) {
    const int saved_world = index["world_size"].get<int>();
    const json& saved_units = index["units"];
    bool same = saved_world == m.world().size() && saved_units.size() == units.size();
    for (std::size_t u = 0; same && u < units.size(); ++u) {
      same = saved_units[u]["shard_numel"].get<std::int64_t>() == units[u].layout.shard_numel();
    }
    if (!same) {
      return Status::invalid_argument(step_dir + ": LOCAL_STATE_DICT was saved at world size " +
                                      std::to_string(saved_world) + " with other shard sizes; load it at world size " +
                                      std::to_string(saved_world) + ", or save SHARDED_STATE_DICT to change the world size");
    }
    SHARDLAB_ASSIGN_OR_RETURN(SafetensorsFile f, io::read_safetensors(step_dir + "/" + rank_file("local-rank", m.world().rank())));
    for (std::size_t u = 0; u < units.size(); ++u) {
      std::vector<std::pair<std::string, Tensor>> targets = {{"unit" + std::to_string(u) + "/flat", units[u].shard}};
      if (units[u].has_trainable)
        for (std::size_t k = 0; k < names.size(); ++k)
          targets.push_back({"unit" + std::to_string(u) + "/" + names[k], m.optimizers()[u].state()[k]});
      for (auto& [key, t] : targets) {
        const StoredTensor* s = f.find(key);
        if (!s || static_cast<std::int64_t>(s->data.size()) != t.nbytes()) {
          return Status::data_loss(step_dir + ": local tensor '" + key + "' is missing or has the wrong size");
        }
        std::memcpy(t.bytes(), s->data.data(), s->data.size());
      }
    }
    for (int i = 0; i < m.num_buffers(); ++i) {
      const std::string key = "buffer/" + m.buffer_specs()[static_cast<std::size_t>(i)].name;
      SHARDLAB_ASSIGN_OR_RETURN(Tensor live, m.buffer(i));
      const StoredTensor* s = f.find(key);
      if (!s || s->dtype != live.dtype() || static_cast<std::int64_t>(s->data.size()) != live.nbytes()) {
        return Status::data_loss(step_dir + ": local buffer '" + key + "' is missing or has another dtype or size than " +
                                 live.describe());
      }
      if (!s->data.empty()) std::memcpy(live.bytes(), s->data.data(), s->data.size());
    }
  } else {
    Loader loader(step_dir);
    const int r = m.shard_rank();
    for (std::size_t u = 0; u < units.size(); ++u) {
      const FlatParameter& fp = units[u];
      for (const ShardPiece& p : fp.layout.shard(r).pieces) {
        const model::ParamSpec& spec = fp.specs[static_cast<std::size_t>(p.param)];
        SHARDLAB_RETURN_IF_ERROR(loader.fill(index, "model/" + spec.name, spec.shape, p.param_begin, p.param_end,
                                             fp.shard.data<float>() + p.offset_in_shard));
        if (!spec.requires_grad) continue;
        for (std::size_t k = 0; k < names.size(); ++k) {
          SHARDLAB_RETURN_IF_ERROR(loader.fill(index, "optim/" + names[k] + "/" + spec.name, spec.shape, p.param_begin,
                                               p.param_end, m.optimizers()[u].state()[k].data<float>() + p.offset_in_shard));
        }
      }
    }
    SHARDLAB_RETURN_IF_ERROR(loader.load_buffers(index, m));
  }
  for (auto& o : m.mutable_optimizers()) o.set_steps(index["optimizer"]["steps"].get<std::int64_t>());
  return index["step"].get<std::int64_t>();
}
}  // namespace

}  // namespace shardlab::runtime::fsdp
