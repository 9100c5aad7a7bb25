#include "runtime/fsdp/checkpoint.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

#include "runtime/io/safetensors.h"
#include "runtime/io/sha256.h"

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

// NOTE [Checkpoint integrity]: version 2 indexes list every file with its SHA-256 and
// size and carry their own checksum; version 1 had neither and is refused.
constexpr int kIndexVersion = 2;
constexpr std::uint64_t kMaxIndexBytes = 256u << 20;
constexpr std::uint64_t kMaxLatestBytes = 4096;

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

// Appends elements [begin, begin + n) of fp32 `t` to `f` as `name` (read with to_host).
Status store(device::Device& dev, SafetensorsFile& f, std::string name, const Tensor& t, std::int64_t begin,
             std::int64_t n, Shape shape = {}) {
  StoredTensor s;
  s.name = std::move(name);
  s.dtype = DType::kF32;
  s.shape = shape.empty() ? Shape{n} : std::move(shape);
  s.data.resize(static_cast<std::size_t>(n) * 4);
  SHARDLAB_ASSIGN_OR_RETURN(Tensor part, t.narrow(begin, n));
  SHARDLAB_RETURN_IF_ERROR(dev.to_host(part, s.data));
  f.tensors.push_back(std::move(s));
  return Status::ok();
}

// Appends a whole tensor in its own dtype (buffers).
Status store_raw(device::Device& dev, SafetensorsFile& f, std::string name, const Tensor& t) {
  StoredTensor s;
  s.name = std::move(name);
  s.dtype = t.dtype();
  s.shape = t.shape();
  s.data.resize(static_cast<std::size_t>(t.nbytes()));
  SHARDLAB_RETURN_IF_ERROR(dev.to_host(t, s.data));
  f.tensors.push_back(std::move(s));
  return Status::ok();
}

// One int64 flag through `dev` (the collectives of the save protocol).
Status set_flag(device::Device& dev, const Tensor& flag, std::int64_t value) {
  return device::values_from_host(dev, std::vector<std::int64_t>{value}, flag);
}
Result<std::int64_t> get_flag(device::Device& dev, const Tensor& flag) {
  SHARDLAB_ASSIGN_OR_RETURN(const std::vector<std::int64_t> v, device::values_to_host<std::int64_t>(dev, flag));
  return v[0];
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
    SHARDLAB_RETURN_IF_ERROR(store_raw(m.device(), f, prefixed ? "buffer/" + name : name, t));
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
  device::Device& dev = m.device();
  if (o.type == StateDictType::kLocal) {
    SafetensorsFile f;
    for (std::size_t u = 0; u < units.size(); ++u) {
      const std::string unit = "unit" + std::to_string(u);
      SHARDLAB_RETURN_IF_ERROR(store(dev, f, unit + "/flat", units[u].shard, 0, units[u].shard.numel()));
      if (!units[u].has_trainable) continue;
      for (std::size_t k = 0; k < names.size(); ++k) {
        const Tensor& st = m.optimizers()[u].state()[k];
        SHARDLAB_RETURN_IF_ERROR(store(dev, f, unit + "/" + names[k], st, 0, st.numel()));
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
        SHARDLAB_RETURN_IF_ERROR(
            store(dev, f, piece_key("model/" + spec.name, p.param_begin), fp.shard, p.offset_in_shard, p.numel()));
        if (!spec.requires_grad) continue;
        for (std::size_t k = 0; k < names.size(); ++k) {
          SHARDLAB_RETURN_IF_ERROR(store(dev, f, piece_key("optim/" + names[k] + "/" + spec.name, p.param_begin),
                                         m.optimizers()[u].state()[k], p.offset_in_shard, p.numel()));
        }
      }
    }
    if (r == 0) SHARDLAB_RETURN_IF_ERROR(append_buffers(m, f, /*declared_dtype=*/true, /*prefixed=*/true));
    return write(o, step_dir + "/" + rank_file("rank", r), f);
  }
  // FULL: gather everything (collective); rank 0 reads it to the host and writes.
  const bool writer = m.world().rank() == 0;
  const std::int64_t total = model::total_numel(m.specs());
  SHARDLAB_ASSIGN_OR_RETURN(Tensor full, dev.empty({total}, DType::kF32, MemoryCategory::kOther, "full_state"));
  SHARDLAB_RETURN_IF_ERROR(m.gather_full_params(full));
  SafetensorsFile model_file, optim_file;
  for (std::size_t i = 0; i < m.specs().size(); ++i) {
    const auto& spec = m.specs()[i];
    if (!writer) break;
    SHARDLAB_RETURN_IF_ERROR(store(dev, model_file, spec.name, full, m.model_offset(static_cast<int>(i)),
                                   *checked_numel(spec.shape), spec.shape));
  }
  for (std::size_t k = 0; k < names.size(); ++k) {
    SHARDLAB_RETURN_IF_ERROR(m.gather_full_optimizer_state(static_cast<int>(k), full));
    for (std::size_t i = 0; i < m.specs().size(); ++i) {
      const auto& spec = m.specs()[i];
      if (!writer) break;
      if (!spec.requires_grad) continue;
      SHARDLAB_RETURN_IF_ERROR(store(dev, optim_file, names[k] + "/" + spec.name, full,
                                     m.model_offset(static_cast<int>(i)), *checked_numel(spec.shape), spec.shape));
    }
  }
  if (!writer) return Status::ok();
  SHARDLAB_RETURN_IF_ERROR(append_buffers(m, model_file, /*declared_dtype=*/true, /*prefixed=*/false));
  // Hugging Face's from_pretrained loads a safetensors file only when its metadata says
  // "format": "pt" (what save_pretrained writes); then model.safetensors beside the
  // config.json loads there as it is.
  model_file.metadata["format"] = "pt";
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
  idx["version"] = kIndexVersion;
  idx["type"] = state_dict_type_name(o.type);
  idx["step"] = step;
  idx["world_size"] = o.type == StateDictType::kLocal ? m.world().size()
                      : m.units().empty()             ? 1
                                                      : m.units()[0].layout.world_size();
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
      tensors["model/" + spec.name] = {
          {"shape", spec.shape}, {"dtype", "F32"}, {"pieces", {piece("model.safetensors", spec.name, 0, n)}}};
      if (!spec.requires_grad) continue;
      for (const auto& k : names) {
        tensors["optim/" + k + "/" + spec.name] = {
            {"shape", spec.shape},
            {"dtype", "F32"},
            {"pieces", {piece("optimizer.safetensors", k + "/" + spec.name, 0, n)}}};
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
              pieces.push_back(
                  piece(rank_file("rank", shard.rank), piece_key(key, p.param_begin), p.param_begin, p.numel()));
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
      tensors["buffer/" + b.name] = {{"shape", b.shape},
                                     {"dtype", safetensors_dtype(b.dtype)},
                                     {"pieces",
                                      {piece(full ? "model.safetensors" : rank_file("rank", 0),
                                             full ? b.name : "buffer/" + b.name, 0, *checked_numel(b.shape))}}};
    }
  }
  idx["tensors"] = tensors;
  return idx;
}

}  // namespace

namespace {

// NOTE [Checkpoint writers]: one run at a time writes into a checkpoint directory. Rank 0
// takes an exclusive flock on DIR/.lock at its first save and keeps it until the process
// ends; a second run (another process) fails its save with a clear error instead of
// mixing its files with the first's. Within one process (simulated ranks, tests) the lock
// is taken once per directory.
Status lock_checkpoint_dir(const std::string& dir) {
  static std::mutex mu;
  static std::map<std::string, int> held;  // canonical directory -> the open lock file
  std::error_code ec;
  const std::string key = fs::weakly_canonical(dir, ec).string();
  std::lock_guard<std::mutex> lock(mu);
  if (held.count(key) != 0) return Status::ok();
  const std::string path = dir + "/.lock";
  SHARDLAB_RETURN_IF_ERROR(io::check_replaceable(path));
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return Status::unavailable(path + ": cannot open the checkpoint lock (" + std::strerror(errno) + ")");
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd);
    if (err == EWOULDBLOCK) {
      return Status::invalid_argument(dir + ": another run is writing checkpoints here (it holds " + path +
                                      "); give each run its own checkpoint.dir");
    }
    return Status::unavailable(path + ": cannot lock (" + std::strerror(err) + ")");
  }
  held.emplace(key, fd);
  return Status::ok();
}

// Removes what killed saves left behind: temporary files ("*.tmp.<pid>") and unfinished
// step directories (".step-*.partial"). Only under the lock, so no live writer's files.
void clean_leftovers(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const bool partial = name.rfind(".step-", 0) == 0 && name.size() > 8 && name.substr(name.size() - 8) == ".partial";
    if (name.find(".tmp.") != std::string::npos || partial) fs::remove_all(e.path(), ec);
  }
}

// NOTE [Checkpoint integrity]: the files of a step, each with its SHA-256 and size.
Result<json> file_checksums(const std::string& step_dir) {
  json files = json::object();
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(step_dir, ec)) names.push_back(e.path().filename().string());
  if (ec) return Status::unavailable(step_dir + ": cannot list (" + ec.message() + ")");
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    if (name == "index.json") continue;
    SHARDLAB_ASSIGN_OR_RETURN(std::string bytes, io::read_file(step_dir + "/" + name));
    files[name] = {{"sha256", io::sha256_hex(bytes)}, {"bytes", bytes.size()}};
  }
  return files;
}

// The index's own checksum: SHA-256 of its compact JSON without the "checksum" key.
std::string index_checksum(json index) {
  index.erase("checksum");
  return io::sha256_hex(index.dump());
}

}  // namespace

Status save_checkpoint(FullyShardedModel& m, const std::string& dir, std::int64_t step, const CheckpointOptions& o) {
  comm::Communicator& world = m.world();
  const Nanos timeout = m.options().collective_timeout;
  const std::string final_dir = dir + "/" + step_name(step);
  // NOTE [Checkpoint writers]: every file goes into a fresh DIR/.step-N.partial, which is
  // renamed into place only when complete; an existing step directory is swapped out
  // whole (renameat2 RENAME_EXCHANGE) and removed, never rewritten file by file.
  const std::string step_dir = dir + "/." + step_name(step) + ".partial";
  SHARDLAB_ASSIGN_OR_RETURN(Tensor flag, m.device().empty({1}, DType::kI64, MemoryCategory::kOther, "save_ok"));
  // Rank 0 prepares the directory (lock, leftovers, a fresh partial directory); the others
  // write only once it has.
  Status prepared;
  if (world.rank() == 0) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    prepared = ec ? Status::unavailable(dir + ": cannot create (" + ec.message() + ")") : lock_checkpoint_dir(dir);
    if (prepared.is_ok()) {
      clean_leftovers(dir);
      fs::create_directories(step_dir, ec);
      if (ec) prepared = Status::unavailable(step_dir + ": cannot create (" + ec.message() + ")");
    }
  }
  SHARDLAB_RETURN_IF_ERROR(set_flag(m.device(), flag, prepared.is_ok() ? 1 : 0));
  SHARDLAB_RETURN_IF_ERROR(world.broadcast(flag, 0)->wait(timeout).with_context("save_checkpoint"));
  if (!prepared.is_ok()) return prepared.with_context("save_checkpoint");
  SHARDLAB_ASSIGN_OR_RETURN(std::int64_t agreed, get_flag(m.device(), flag));
  if (agreed != 1) {
    return Status::unavailable("save_checkpoint: rank 0 could not prepare " + dir + " (its error says why)");
  }
  Status local = write_rank_files(m, step_dir, o);
  // Commit only if every rank wrote its files.
  SHARDLAB_RETURN_IF_ERROR(set_flag(m.device(), flag, local.is_ok() ? 1 : 0));
  SHARDLAB_RETURN_IF_ERROR(world.all_reduce(flag, comm::ReduceOp::kMin)->wait(timeout).with_context("save_checkpoint"));
  if (!local.is_ok()) return local.with_context("save_checkpoint on rank " + std::to_string(world.rank()));
  SHARDLAB_ASSIGN_OR_RETURN(agreed, get_flag(m.device(), flag));
  if (agreed != 1) {
    return Status::unavailable("save_checkpoint: another rank failed to write its files; " + dir +
                               "/latest still names the previous checkpoint");
  }
  Status commit;
  if (world.rank() == 0) {
    commit = [&]() -> Status {
      json index = make_index(m, step, o);
      SHARDLAB_ASSIGN_OR_RETURN(index["files"], file_checksums(step_dir));
      if (!o.run.empty()) index["run"] = json::parse(o.run);
      index["checksum"] = index_checksum(index);
      if (o.before_write) SHARDLAB_RETURN_IF_ERROR(o.before_write(step_dir + "/index.json"));
      SHARDLAB_RETURN_IF_ERROR(io::write_file_atomic(step_dir + "/index.json", index.dump(2) + "\n"));
      std::error_code ec;
      if (fs::exists(fs::symlink_status(final_dir, ec))) {
        if (::renameat2(AT_FDCWD, step_dir.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) != 0) {
          return Status::unavailable(final_dir + ": cannot replace (" + std::strerror(errno) + ")");
        }
        fs::remove_all(step_dir, ec);  // now the replaced step
      } else if (::rename(step_dir.c_str(), final_dir.c_str()) != 0) {
        return Status::unavailable(final_dir + ": cannot rename into place (" + std::strerror(errno) + ")");
      }
      if (o.before_write) SHARDLAB_RETURN_IF_ERROR(o.before_write(dir + "/latest"));
      return io::write_file_atomic(dir + "/latest", step_name(step) + "\n");
    }();
  }
  SHARDLAB_RETURN_IF_ERROR(set_flag(m.device(), flag, commit.is_ok() ? 1 : 0));
  SHARDLAB_RETURN_IF_ERROR(world.broadcast(flag, 0)->wait(timeout).with_context("save_checkpoint"));
  SHARDLAB_ASSIGN_OR_RETURN(agreed, get_flag(m.device(), flag));
  if (agreed != 1) {
    return commit.is_ok() ? Status::unavailable("save_checkpoint: rank 0 could not commit the checkpoint") : commit;
  }
  return Status::ok();
}

namespace {

// NOTE [Checkpoint integrity]: a checkpoint names only plain entries of its own
// directories — a regular file (or, for a step, a directory), never a symbolic link, a
// device, a FIFO or a socket.
Status plain_entry(const std::string& path, bool directory) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    return Status::invalid_argument(path + ": missing (" + std::string(std::strerror(errno)) + ")");
  }
  const bool ok = directory ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode);
  if (!ok) {
    const char* kind = S_ISLNK(st.st_mode)                          ? "a symbolic link"
                       : S_ISDIR(st.st_mode)                        ? "a directory"
                       : S_ISFIFO(st.st_mode)                       ? "a FIFO"
                       : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device"
                                                                    : "not a regular file";
    return Status::invalid_argument(path + ": is " + kind + "; a checkpoint holds only plain " +
                                    (directory ? "directories" : "files") + " of its own");
  }
  return Status::ok();
}

// A file name a step directory may hold: letters, digits, '.', '_', '-', not starting with
// '.' (so no "..", no path, no hidden file).
bool plain_name(const std::string& n) {
  return !n.empty() && n.size() <= 255 && n[0] != '.' && std::all_of(n.begin(), n.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
  });
}

bool is_int(const json& j) { return j.is_number_integer() || j.is_number_unsigned(); }

// NOTE [Checkpoint integrity]: every number, name and piece of the index is checked before
// anything is read through it: non-negative offsets and lengths inside their tensor
// (no overflow), files the index lists, and pieces that tile each tensor exactly.
Status validate_index(const json& idx, const std::string& step_dir) {
  const std::string where = step_dir + "/index.json";
  const auto bad = [&](const std::string& what) { return Status::invalid_argument(where + ": " + what); };
  const auto nonneg = [&](const json& j, const char* key, const std::string& ctx,
                          std::int64_t max) -> Result<std::int64_t> {
    if (!j.is_object() || !j.contains(key) || !is_int(j[key])) return bad(ctx + key + " is not an integer");
    if (j[key].is_number_unsigned() && j[key].get<std::uint64_t>() > static_cast<std::uint64_t>(max)) {
      return bad(ctx + key + " = " + j[key].dump() + " is out of range (0 to " + std::to_string(max) + ")");
    }
    const std::int64_t v = j[key].get<std::int64_t>();
    if (v < 0 || v > max)
      return bad(ctx + key + " = " + std::to_string(v) + " is out of range (0 to " + std::to_string(max) + ")");
    return v;
  };
  constexpr std::int64_t kMaxElements = std::int64_t{1} << 40;
  if (!idx.contains("files") || !idx["files"].is_object()) return bad("no \"files\" list");
  for (const auto& [name, f] : idx["files"].items()) {
    if (!plain_name(name))
      return bad("file '" + name.substr(0, 64) + "' is not a plain file name of the step directory");
    if (!f.is_object() || !f.contains("sha256") || !f["sha256"].is_string() ||
        f["sha256"].get<std::string>().size() != 64) {
      return bad("file '" + name + "' has no sha256");
    }
    SHARDLAB_RETURN_IF_ERROR(nonneg(f, "bytes", "file '" + name + "': ", std::int64_t{1} << 46).status());
  }
  const json& files = idx["files"];
  SHARDLAB_RETURN_IF_ERROR(nonneg(idx, "step", "", std::int64_t{1} << 40).status());
  if (!idx["optimizer"].is_object()) return bad("optimizer is not an object");
  SHARDLAB_RETURN_IF_ERROR(nonneg(idx["optimizer"], "steps", "optimizer.", std::int64_t{1} << 40).status());
  SHARDLAB_ASSIGN_OR_RETURN(const std::int64_t world, nonneg(idx, "world_size", "", std::int64_t{1} << 20));
  if (world < 1) return bad("world_size is 0");
  if (!idx["tensors"].is_object()) return bad("tensors is not an object");
  for (const auto& [key, t] : idx["tensors"].items()) {
    const std::string ctx = "tensor '" + key + "': ";
    if (!t.is_object() || !t.contains("shape") || !t["shape"].is_array()) return bad(ctx + "no shape");
    std::int64_t numel = 1;
    for (const json& d : t["shape"]) {
      if (!is_int(d) || d.get<std::int64_t>() < 0 || d.get<std::int64_t>() > kMaxElements)
        return bad(ctx + "bad shape " + t["shape"].dump());
      const std::int64_t n = d.get<std::int64_t>();
      if (n != 0 && numel > kMaxElements / n)
        return bad(ctx + "shape " + t["shape"].dump() + " has more than 2^40 elements");
      numel *= n;
    }
    if (!t.contains("pieces") || !t["pieces"].is_array() || t["pieces"].empty()) return bad(ctx + "no pieces");
    std::vector<std::pair<std::int64_t, std::int64_t>> spans;
    for (const json& p : t["pieces"]) {
      if (!p.is_object() || !p.contains("file") || !p["file"].is_string() || !p.contains("key") ||
          !p["key"].is_string()) {
        return bad(ctx + "a piece without file and key");
      }
      const std::string file = p["file"].get<std::string>();
      if (!files.contains(file))
        return bad(ctx + "piece file '" + file.substr(0, 64) + "' is not one of the checkpoint's files");
      SHARDLAB_ASSIGN_OR_RETURN(const std::int64_t off, nonneg(p, "offset", ctx, numel));
      SHARDLAB_ASSIGN_OR_RETURN(const std::int64_t len, nonneg(p, "length", ctx, numel - off));
      spans.emplace_back(off, len);
    }
    std::sort(spans.begin(), spans.end());
    std::int64_t at = 0;
    for (const auto& [off, len] : spans) {
      if (off != at || (len == 0 && numel != 0)) {
        return bad(ctx + "its pieces do not tile it: " + (off < at ? "overlap" : "gap") + " at element " +
                   std::to_string(std::min(off, at)));
      }
      at = off + len;
    }
    if (at != numel)
      return bad(ctx + "its pieces cover " + std::to_string(at) + " of its " + std::to_string(numel) + " elements");
  }
  if (idx.value("type", "") == "LOCAL_STATE_DICT") {
    if (!idx.contains("units") || !idx["units"].is_array()) return bad("a LOCAL_STATE_DICT index without units");
    for (std::size_t u = 0; u < idx["units"].size(); ++u) {
      const json& unit = idx["units"][u];
      const std::string ctx = "unit " + std::to_string(u) + ": ";
      SHARDLAB_ASSIGN_OR_RETURN(const std::int64_t shard, nonneg(unit, "shard_numel", ctx, kMaxElements));
      if (!unit.contains("pieces")) continue;  // refused by whoever needs the layout
      if (!unit["pieces"].is_array()) return bad(ctx + "pieces is not a list");
      for (const json& p : unit["pieces"]) {
        if (!p.is_array() || p.size() != 5 || !is_int(p[0]) || !p[1].is_string() || !is_int(p[2]) || !is_int(p[3]) ||
            !is_int(p[4])) {
          return bad(ctx + "a piece is not [shard rank, name, begin, length, offset]");
        }
        const std::int64_t rank = p[0].get<std::int64_t>(), begin = p[2].get<std::int64_t>(),
                           len = p[3].get<std::int64_t>(), off = p[4].get<std::int64_t>();
        if (rank < 0 || rank >= world || begin < 0 || begin > kMaxElements || len < 0 || off < 0 || off > shard ||
            len > shard - off) {
          return bad(ctx + "piece " + p.dump().substr(0, 120) + " is outside its shard of " + std::to_string(shard));
        }
        if (!files.contains(rank_file("local-rank", static_cast<int>(rank)))) {
          return bad(ctx + "piece names rank " + std::to_string(rank) + ", whose file is not listed");
        }
      }
    }
  }
  return Status::ok();
}

class Loader {
 public:
  // `listed`: the index's "files" (validated), what may be read and its checksums.
  Loader(std::string dir, json listed) : dir_(std::move(dir)), listed_(std::move(listed)) {}

  // A file of the step, verified against its size and SHA-256 (NOTE [Checkpoint integrity]).
  Result<const SafetensorsFile*> file(const std::string& name) {
    auto it = files_.find(name);
    if (it != files_.end()) return &it->second;
    const std::string path = dir_ + "/" + name;
    if (!listed_.contains(name)) return Status::invalid_argument(path + ": not one of the files index.json lists");
    SHARDLAB_RETURN_IF_ERROR(plain_entry(path, /*directory=*/false));
    const auto size = listed_[name]["bytes"].get<std::uint64_t>();
    SHARDLAB_ASSIGN_OR_RETURN(std::string bytes, io::read_file(path, size));
    if (bytes.size() != size || io::sha256_hex(bytes) != listed_[name]["sha256"].get<std::string>()) {
      const std::string how =
          bytes.size() != size ? std::to_string(bytes.size()) + " bytes where index.json says " + std::to_string(size)
                               : "its SHA-256 is not the one index.json records";
      return Status::invalid_argument(path + ": checksum mismatch (" + how +
                                      "): the file changed after the checkpoint was saved");
    }
    std::vector<std::byte> raw_bytes(bytes.size());
    if (!bytes.empty()) std::memcpy(raw_bytes.data(), bytes.data(), bytes.size());
    bytes = std::string();
    SHARDLAB_ASSIGN_OR_RETURN(SafetensorsFile f, io::parse_safetensors(path, raw_bytes));
    return &files_.emplace(name, std::move(f)).first->second;
  }

  // The stored tensor `key` of `file`, any dtype.
  Result<const StoredTensor*> raw(const std::string& file_name, const std::string& key) {
    SHARDLAB_ASSIGN_OR_RETURN(const SafetensorsFile* f, file(file_name));
    const std::string& file = file_name;
    const StoredTensor* t = f->find(key);
    if (!t)
      return Status::invalid_argument(dir_ + "/" + file + ": tensor '" + key + "' named by index.json is missing");
    return t;
  }

  Result<const StoredTensor*> tensor(const std::string& file, const std::string& key) {
    SHARDLAB_ASSIGN_OR_RETURN(const StoredTensor* t, raw(file, key));
    if (t->dtype != DType::kF32)
      return Status::invalid_argument(dir_ + "/" + file + ": tensor '" + key + "' is not F32");
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
        return Status::invalid_argument(where + " has shape " +
                                        (entry.contains("shape") ? entry["shape"].dump() : "?") +
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
      SHARDLAB_RETURN_IF_ERROR(m.device().from_host(t->data, value));
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
      SHARDLAB_ASSIGN_OR_RETURN(const StoredTensor* t,
                                tensor(p["file"].get<std::string>(), p["key"].get<std::string>()));
      // Offsets and lengths were validated against the tensor (validate_index).
      if (t->data.size() % 4 != 0 || t->data.size() / 4 != static_cast<std::uint64_t>(len)) {
        return Status::invalid_argument(where + ": piece '" + p["key"].get<std::string>() + "' holds " +
                                        std::to_string(t->data.size() / 4) + " elements, index says " +
                                        std::to_string(len));
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
  json listed_;
  std::map<std::string, SafetensorsFile> files_;
};

}  // namespace

namespace {
// step_dir/index.json after every check (NOTE [Checkpoint integrity]); with `names`, its
// optimizer state must be those.
Result<json> read_index(const std::string& step_dir, const std::vector<std::string>* names);
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

Result<std::string> describe_checkpoint(const std::string& step_dir) {
  try {
    SHARDLAB_ASSIGN_OR_RETURN(json index, read_index(step_dir, nullptr));
    std::string out = "step " + index["step"].dump() + ", " + index["type"].get<std::string>() +
                      " saved at world size " + index["world_size"].dump();
    if (index.contains("run")) out += " by " + index["run"].dump();
    return out;
  } catch (const nlohmann::json::exception& e) {
    return Status::invalid_argument(step_dir + ": malformed checkpoint index.json: " + e.what());
  }
}

Status reseal_index(const std::string& step_dir) {
  const std::string path = step_dir + "/index.json";
  SHARDLAB_ASSIGN_OR_RETURN(std::string text, io::read_file(path, kMaxIndexBytes));
  json index = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (index.is_discarded() || !index.is_object()) return Status::invalid_argument(path + ": not a JSON object");
  index["checksum"] = index_checksum(index);
  return io::write_file_atomic(path, index.dump(2) + "\n");
}

Result<std::string> latest_step_dir(const std::string& dir) {
  // NOTE [Checkpoint integrity]: `latest` is a plain file naming a plain step directory.
  SHARDLAB_RETURN_IF_ERROR(plain_entry(dir + "/latest", /*directory=*/false));
  SHARDLAB_ASSIGN_OR_RETURN(std::string latest, io::read_file(dir + "/latest", kMaxLatestBytes));
  while (!latest.empty() && (latest.back() == '\n' || latest.back() == ' ')) latest.pop_back();
  const bool digits = latest.size() >= 13 && latest.size() <= 24 &&
                      std::all_of(latest.begin() + 5, latest.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (latest.rfind("step-", 0) != 0 || !digits) {
    std::string shown = latest.substr(0, 64);
    for (char& c : shown)
      if (static_cast<unsigned char>(c) < 32 || static_cast<unsigned char>(c) > 126) c = '?';
    return Status::invalid_argument(dir + "/latest: '" + shown + "' is not a step directory name (step-NNNNNNNN)");
  }
  SHARDLAB_RETURN_IF_ERROR(plain_entry(dir + "/" + latest, /*directory=*/true));
  return dir + "/" + latest;
}

namespace {
// step_dir/index.json, checked to be a shardlab index whose optimizer state is `names`.
Result<json> read_index(const std::string& step_dir, const std::vector<std::string>* names) {
  const std::string path = step_dir + "/index.json";
  SHARDLAB_RETURN_IF_ERROR(plain_entry(path, /*directory=*/false));
  SHARDLAB_ASSIGN_OR_RETURN(std::string text, io::read_file(path, kMaxIndexBytes));
  json index = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (index.is_discarded() || !index.is_object() || index.value("format", "") != "shardlab-fsdp-checkpoint" ||
      !index.contains("type") || !index.contains("step") || !index.contains("tensors") ||
      !index.contains("optimizer")) {
    return Status::invalid_argument(path + ": not a shardlab FSDP checkpoint index");
  }
  if (!index.contains("version") || !is_int(index["version"]) ||
      index["version"].get<std::int64_t>() != kIndexVersion) {
    return Status::invalid_argument(path + ": version " + (index.contains("version") ? index["version"].dump() : "?") +
                                    "; this build reads version " + std::to_string(kIndexVersion) +
                                    " (with checksums); save the checkpoint again with this build");
  }
  if (!index.contains("checksum") || !index["checksum"].is_string() ||
      index["checksum"].get<std::string>() != index_checksum(index)) {
    return Status::invalid_argument(path + ": checksum mismatch: the index was edited or damaged after it was saved");
  }
  SHARDLAB_RETURN_IF_ERROR(validate_index(index, step_dir));
  if (!index["optimizer"].contains("states") || !index["optimizer"]["states"].is_array()) {
    return Status::invalid_argument(path + ": optimizer.states is not a list");
  }
  const auto saved_states = index["optimizer"]["states"].get<std::vector<std::string>>();
  if (names != nullptr && saved_states != *names) {
    return Status::invalid_argument(path + ": the checkpoint's optimizer state is " +
                                    index["optimizer"]["states"].dump() + " but the optimizer needs " +
                                    json(*names).dump());
  }
  return index;
}

Result<UnshardedCheckpoint> load_unsharded_impl(const std::string& step_dir, const std::vector<model::ParamSpec>& specs,
                                                const std::vector<std::string>& names) {
  SHARDLAB_ASSIGN_OR_RETURN(json index, read_index(step_dir, &names));
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
    Loader loader(step_dir, index["files"]);
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
          std::memcpy(dst.data() + w->second.offset + begin, t->data.data() + off * 4,
                      static_cast<std::size_t>(len) * 4);
          return Status::ok();
        };
        SHARDLAB_RETURN_IF_ERROR(copy("unit" + std::to_string(u) + "/flat", out.params));
        if (w->second.trainable) {
          for (std::size_t k = 0; k < names.size(); ++k) {
            SHARDLAB_RETURN_IF_ERROR(copy("unit" + std::to_string(u) + "/" + names[k], out.optimizer_state[k]));
          }
        }
        const auto first = seen.begin() + w->second.offset + begin;
        if (std::find(first, first + len, 1) != first + len) {
          return Status::invalid_argument(what + ": overlaps another piece of the same parameter");
        }
        std::fill(first, first + len, 1);
      }
    }
    if (std::find(seen.begin(), seen.end(), 0) != seen.end()) {
      return Status::data_loss(step_dir + "/index.json: the LOCAL_STATE_DICT layout does not cover every parameter");
    }
    return out;
  }
  Loader loader(step_dir, index["files"]);
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
  SHARDLAB_ASSIGN_OR_RETURN(json index, read_index(step_dir, &names));
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
      return Status::invalid_argument(
          step_dir + ": LOCAL_STATE_DICT was saved at world size " + std::to_string(saved_world) +
          " with other shard sizes (FSDP1's flat shards and FSDP2's per-parameter shards differ too); load it at "
          "world size " +
          std::to_string(saved_world) +
          " with the FSDP version that saved it, or save SHARDED_STATE_DICT to change the world size or the version");
    }
    Loader loader(step_dir, index["files"]);
    SHARDLAB_ASSIGN_OR_RETURN(const SafetensorsFile* file, loader.file(rank_file("local-rank", m.world().rank())));
    const SafetensorsFile& f = *file;
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
        SHARDLAB_RETURN_IF_ERROR(m.device().from_host(s->data, t));
      }
    }
    for (int i = 0; i < m.num_buffers(); ++i) {
      const std::string key = "buffer/" + m.buffer_specs()[static_cast<std::size_t>(i)].name;
      SHARDLAB_ASSIGN_OR_RETURN(Tensor live, m.buffer(i));
      const StoredTensor* s = f.find(key);
      if (!s || s->dtype != live.dtype() || static_cast<std::int64_t>(s->data.size()) != live.nbytes()) {
        return Status::data_loss(step_dir + ": local buffer '" + key +
                                 "' is missing or has another dtype or size than " + live.describe());
      }
      SHARDLAB_RETURN_IF_ERROR(m.device().from_host(s->data, live));
    }
  } else {
    Loader loader(step_dir, index["files"]);
    const int r = m.shard_rank();
    for (std::size_t u = 0; u < units.size(); ++u) {
      const FlatParameter& fp = units[u];
      for (const ShardPiece& p : fp.layout.shard(r).pieces) {
        const model::ParamSpec& spec = fp.specs[static_cast<std::size_t>(p.param)];
        // The piece's elements on the host, then into the shard (NOTE [Host access]).
        std::vector<float> values(static_cast<std::size_t>(p.numel()));
        const auto load = [&](const std::string& key, const Tensor& into) -> Status {
          SHARDLAB_RETURN_IF_ERROR(loader.fill(index, key, spec.shape, p.param_begin, p.param_end, values.data()));
          SHARDLAB_ASSIGN_OR_RETURN(Tensor part, into.narrow(p.offset_in_shard, p.numel()));
          return device::values_from_host(m.device(), values, part);
        };
        SHARDLAB_RETURN_IF_ERROR(load("model/" + spec.name, fp.shard));
        if (!spec.requires_grad) continue;
        for (std::size_t k = 0; k < names.size(); ++k) {
          SHARDLAB_RETURN_IF_ERROR(load("optim/" + names[k] + "/" + spec.name, m.optimizers()[u].state()[k]));
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
