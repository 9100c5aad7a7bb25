#include "runtime/io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

namespace shardlab::runtime::io {

namespace {

constexpr std::uint64_t kMaxHeaderBytes = 100u << 20;  // the reference implementation's limit

Status bad(const std::string& path, const std::string& what) {
  return Status::invalid_argument(path + ": " + what);
}

const char* st_dtype_name(DType d) {
  switch (d) {
    case DType::kF32: return "F32";
    case DType::kBF16: return "BF16";
    case DType::kF16: return "F16";
    case DType::kI64: return "I64";
  }
  return "?";
}

}  // namespace

const StoredTensor* SafetensorsFile::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

namespace {

const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "not a regular file";
}

}  // namespace

namespace {

// read_file's rule (NOTE [Safe file input]) into any byte container.
template <class Bytes>
Result<Bytes> read_regular_file(const std::string& path, std::uint64_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return Status::invalid_argument(path + ": cannot open (" + std::strerror(errno) + ")");
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const std::string kind = file_kind(st.st_mode);
    ::close(fd);
    return Status::invalid_argument(path + ": is " + kind + "; give a regular file");
  }
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (size > max_bytes) {
    ::close(fd);
    return Status::invalid_argument(path + ": is " + std::to_string(size) + " bytes; allowed: at most " +
                                    std::to_string(max_bytes));
  }
  Bytes s(static_cast<std::size_t>(size), typename Bytes::value_type{});
  std::size_t done = 0;
  while (done < s.size()) {
    const ssize_t n = ::read(fd, reinterpret_cast<char*>(s.data()) + done, s.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = n < 0 ? std::strerror(errno) : "it shrank while being read";
      ::close(fd);
      return Status::invalid_argument(path + ": read error (" + why + ")");
    }
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
  return s;
}

}  // namespace

Result<std::string> read_file(const std::string& path, std::uint64_t max_bytes) {
  return read_regular_file<std::string>(path, max_bytes);
}

Status check_replaceable(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return Status::ok();  // nothing there (or nothing we may see): create it
  if (S_ISREG(st.st_mode)) return Status::ok();
  return Status::invalid_argument(path + ": is " + std::string(file_kind(st.st_mode)) +
                                  "; shardlab writes only new or regular files and never replaces anything else");
}

Result<SafetensorsFile> read_safetensors(const std::string& path) {
  // Read straight into the buffer the parser takes: the file's size once, plus the
  // tensors parsed out of it (not three copies).
  SHARDLAB_ASSIGN_OR_RETURN(std::vector<std::byte> bytes, read_regular_file<std::vector<std::byte>>(path, kMaxInputFileBytes));
  return parse_safetensors(path, bytes);
}

Result<SafetensorsFile> parse_safetensors(const std::string& path, const std::vector<std::byte>& bytes) {
  if (bytes.size() < 8) {
    return bad(path, "file is " + std::to_string(bytes.size()) + " bytes; a safetensors file starts with an 8-byte header length");
  }
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<std::uint8_t>(bytes[static_cast<std::size_t>(i)]);
  const std::uint64_t available = bytes.size() - 8;
  if (n > available || n > kMaxHeaderBytes) {
    return bad(path, "header length " + std::to_string(n) + " exceeds the " + std::to_string(available) +
                         " bytes after it (limit " + std::to_string(kMaxHeaderBytes) + ")");
  }
  const char* h = reinterpret_cast<const char*>(bytes.data() + 8);
  nlohmann::json header = nlohmann::json::parse(h, h + n, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) {
    return bad(path, "the " + std::to_string(n) + "-byte header is not a JSON object");
  }
  const std::uint64_t data_size = available - n;
  const std::byte* data = bytes.data() + 8 + n;
  SafetensorsFile file;
  struct Range {
    std::uint64_t begin, end;
    std::string name;
  };
  std::vector<Range> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const auto& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) return bad(path, "__metadata__ must be an object of strings");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) return bad(path, "__metadata__ value for '" + m.key() + "' is not a string");
        file.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor '" + name + "'";
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets")) {
      return bad(path, where + ": expected an object with dtype, shape and data_offsets");
    }
    if (!v["dtype"].is_string()) return bad(path, where + ": dtype is not a string");
    const std::string dt = v["dtype"].get<std::string>();
    StoredTensor t;
    t.name = name;
    bool widen_i32 = false;
    if (dt == "F32") t.dtype = DType::kF32;
    else if (dt == "BF16") t.dtype = DType::kBF16;
    else if (dt == "F16") t.dtype = DType::kF16;
    else if (dt == "I64") t.dtype = DType::kI64;
    else if (dt == "I32") { t.dtype = DType::kI64; widen_i32 = true; }
    else return bad(path, where + ": unknown dtype '" + dt + "'; allowed: F32, BF16, F16, I64, I32");
    if (!v["shape"].is_array()) return bad(path, where + ": shape is not an array");
    for (const auto& d : v["shape"]) {
      if (!d.is_number_unsigned() || d.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)) {
        return bad(path, where + ": shape " + v["shape"].dump() + " must hold non-negative integers");
      }
      t.shape.push_back(d.get<std::int64_t>());
    }
    auto numel = checked_numel(t.shape);
    if (!numel.is_ok()) return bad(path, where + ": " + numel.status().message());
    const auto& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
      return bad(path, where + ": data_offsets must be [begin, end] of non-negative integers");
    }
    const std::uint64_t b = off[0].get<std::uint64_t>(), e = off[1].get<std::uint64_t>();
    if (b > e || e > data_size) {
      return bad(path, where + ": data_offsets [" + std::to_string(b) + ", " + std::to_string(e) +
                           "] are outside the " + std::to_string(data_size) + " data bytes");
    }
    const std::uint64_t stored_elem = widen_i32 ? 4 : element_size(t.dtype);
    std::uint64_t want = 0;
    const bool overflow = __builtin_mul_overflow(static_cast<std::uint64_t>(*numel), stored_elem, &want);
    if (overflow || want != e - b) {
      return bad(path, where + ": shape " + shape_to_string(t.shape) + " × " + dt + " needs " +
                           (overflow ? std::string("more than 2^64") : std::to_string(want)) +
                           " bytes but data_offsets span " + std::to_string(e - b));
    }
    if (widen_i32) {
      t.data.resize(static_cast<std::size_t>(*numel) * 8);
      for (std::int64_t i = 0; i < *numel; ++i) {
        std::int32_t x;
        std::memcpy(&x, data + b + 4 * static_cast<std::uint64_t>(i), 4);
        const std::int64_t y = x;
        std::memcpy(t.data.data() + 8 * i, &y, 8);
      }
    } else {
      t.data.assign(data + b, data + e);
    }
    ranges.push_back({b, e, name});
    file.tensors.push_back(std::move(t));
  }
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
  std::uint64_t cursor = 0;
  for (const Range& r : ranges) {
    if (r.begin < cursor) return bad(path, "tensor '" + r.name + "' overlaps the tensor before it");
    if (r.begin > cursor) return bad(path, "a gap of " + std::to_string(r.begin - cursor) + " bytes precedes tensor '" + r.name + "'");
    cursor = r.end;
  }
  if (cursor != data_size) return bad(path, std::to_string(data_size - cursor) + " trailing bytes follow the last tensor");
  // File order = data order (the JSON object's key order is not preserved by the parser).
  std::vector<StoredTensor> ordered;
  for (const Range& r : ranges) {
    for (auto& t : file.tensors) {
      if (t.name == r.name) {
        ordered.push_back(std::move(t));
        break;
      }
    }
  }
  file.tensors = std::move(ordered);
  return file;
}

Status write_file_atomic(const std::string& path, const std::string& bytes) {
  SHARDLAB_RETURN_IF_ERROR(check_replaceable(path));
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return Status::unavailable(tmp + ": cannot create (" + std::strerror(errno) + ")");
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      const std::string why = std::strerror(errno);
      ::close(fd);
      ::unlink(tmp.c_str());
      return Status::unavailable(tmp + ": write failed (" + why + ")");
    }
    done += static_cast<std::size_t>(w);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    ::unlink(tmp.c_str());
    return Status::unavailable(tmp + ": fsync/close failed (" + std::string(std::strerror(errno)) + ")");
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    return Status::unavailable(path + ": rename failed (" + why + ")");
  }
  return Status::ok();
}

Status write_safetensors(const std::string& path, const SafetensorsFile& file) {
  return write_file_atomic(path, serialize_safetensors(file));
}

std::string serialize_safetensors(const SafetensorsFile& file) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!file.metadata.empty()) header["__metadata__"] = file.metadata;
  std::uint64_t offset = 0;
  for (const auto& t : file.tensors) {
    const std::uint64_t n = t.data.size();
    header[t.name] = {{"dtype", st_dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  std::string h = header.dump();
  while ((8 + h.size()) % 8 != 0) h += ' ';  // align the data to 8 bytes, as the reference writer does
  std::string out(8, '\0');
  const std::uint64_t len = h.size();
  for (int i = 0; i < 8; ++i) out[static_cast<std::size_t>(i)] = static_cast<char>((len >> (8 * i)) & 0xff);
  out += h;
  for (const auto& t : file.tensors) out.append(reinterpret_cast<const char*>(t.data.data()), t.data.size());
  return out;
}

}  // namespace shardlab::runtime::io
