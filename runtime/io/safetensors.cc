#include "runtime/io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <utility>

namespace shardlab::runtime::io {

namespace {

constexpr std::uint64_t kMaxHeaderBytes = 100u << 20;  // the reference implementation's limit

Status bad(const std::string& path, const std::string& what) { return Status::invalid_argument(path + ": " + what); }

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

// read_file's rule (NOTE [Safe file input]): an open descriptor of a regular file of at
// most max_bytes, and its size.
Result<int> open_regular_file(const std::string& path, std::uint64_t max_bytes, std::uint64_t* size_out) {
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
  *size_out = size;
  return fd;
}

// Exactly out.size() bytes from `offset`; a file that ends early is an error.
Status read_at(int fd, const std::string& path, std::uint64_t offset, std::span<std::byte> out) {
  std::size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = n < 0 ? std::strerror(errno) : "it shrank while being read";
      return Status::invalid_argument(path + ": read error (" + why + ")");
    }
    done += static_cast<std::size_t>(n);
  }
  return Status::ok();
}

}  // namespace

Result<std::string> read_file(const std::string& path, std::uint64_t max_bytes) {
  std::uint64_t size = 0;
  SHARDLAB_ASSIGN_OR_RETURN(const int fd, open_regular_file(path, max_bytes, &size));
  std::string s(static_cast<std::size_t>(size), '\0');
  const Status read = read_at(fd, path, 0, std::as_writable_bytes(std::span<char>(s)));
  ::close(fd);
  SHARDLAB_RETURN_IF_ERROR(read);
  return s;
}

Status check_replaceable(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return Status::ok();  // nothing there (or nothing we may see): create it
  if (S_ISREG(st.st_mode)) return Status::ok();
  return Status::invalid_argument(path + ": is " + std::string(file_kind(st.st_mode)) +
                                  "; shardlab writes only new or regular files and never replaces anything else");
}

namespace {

// The 8-byte little-endian header length at the start of a file of `size` bytes, checked
// against what follows it.
Result<std::uint64_t> header_length(const std::string& path, const std::byte* first8, std::uint64_t size) {
  if (size < 8) {
    return bad(path,
               "file is " + std::to_string(size) + " bytes; a safetensors file starts with an 8-byte header length");
  }
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<std::uint8_t>(first8[i]);
  const std::uint64_t available = size - 8;
  if (n > available || n > kMaxHeaderBytes) {
    return bad(path, "header length " + std::to_string(n) + " exceeds the " + std::to_string(available) +
                         " bytes after it (limit " + std::to_string(kMaxHeaderBytes) + ")");
  }
  return n;
}

struct ParsedHeader {
  std::vector<TensorEntry> tensors;  // in data order
  std::map<std::string, std::string> metadata;
};

// The n-byte JSON header, every entry checked against a data section of data_size bytes:
// dtypes, shapes, offsets inside the data, byte counts, no overlap, no gap, no trailing bytes.
Result<ParsedHeader> parse_header(const std::string& path, const char* h, std::uint64_t n, std::uint64_t data_size) {
  nlohmann::json header = nlohmann::json::parse(h, h + n, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) {
    return bad(path, "the " + std::to_string(n) + "-byte header is not a JSON object");
  }
  ParsedHeader out;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const auto& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) return bad(path, "__metadata__ must be an object of strings");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) return bad(path, "__metadata__ value for '" + m.key() + "' is not a string");
        out.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor '" + name + "'";
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets")) {
      return bad(path, where + ": expected an object with dtype, shape and data_offsets");
    }
    if (!v["dtype"].is_string()) return bad(path, where + ": dtype is not a string");
    const std::string dt = v["dtype"].get<std::string>();
    TensorEntry t;
    t.name = name;
    if (dt == "F32")
      t.dtype = DType::kF32;
    else if (dt == "BF16")
      t.dtype = DType::kBF16;
    else if (dt == "F16")
      t.dtype = DType::kF16;
    else if (dt == "I64")
      t.dtype = DType::kI64;
    else if (dt == "I32") {
      t.dtype = DType::kI64;
      t.widened_i32 = true;
    } else
      return bad(path, where + ": unknown dtype '" + dt + "'; allowed: F32, BF16, F16, I64, I32");
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
    const std::uint64_t stored_elem = t.widened_i32 ? 4 : element_size(t.dtype);
    std::uint64_t want = 0;
    const bool overflow = __builtin_mul_overflow(static_cast<std::uint64_t>(*numel), stored_elem, &want);
    if (overflow || want != e - b) {
      return bad(path, where + ": shape " + shape_to_string(t.shape) + " × " + dt + " needs " +
                           (overflow ? std::string("more than 2^64") : std::to_string(want)) +
                           " bytes but data_offsets span " + std::to_string(e - b));
    }
    t.begin = b;
    t.end = e;
    out.tensors.push_back(std::move(t));
  }
  // File order = data order (the JSON object's key order is not preserved by the parser).
  std::stable_sort(out.tensors.begin(), out.tensors.end(),
                   [](const TensorEntry& a, const TensorEntry& b) { return a.begin < b.begin; });
  std::uint64_t cursor = 0;
  for (const TensorEntry& r : out.tensors) {
    if (r.begin < cursor) return bad(path, "tensor '" + r.name + "' overlaps the tensor before it");
    if (r.begin > cursor)
      return bad(path, "a gap of " + std::to_string(r.begin - cursor) + " bytes precedes tensor '" + r.name + "'");
    cursor = r.end;
  }
  if (cursor != data_size)
    return bad(path, std::to_string(data_size - cursor) + " trailing bytes follow the last tensor");
  return out;
}

// Stored bytes → the entry's in-memory bytes (I32 widened to I64).
void unpack(const TensorEntry& t, const std::byte* stored, std::byte* out) {
  if (!t.widened_i32) {
    std::memcpy(out, stored, t.end - t.begin);
    return;
  }
  const std::uint64_t count = (t.end - t.begin) / 4;
  for (std::uint64_t i = 0; i < count; ++i) {
    std::int32_t x;
    std::memcpy(&x, stored + 4 * i, 4);
    const std::int64_t y = x;
    std::memcpy(out + 8 * i, &y, 8);
  }
}

StoredTensor stored_tensor(const TensorEntry& t) {
  StoredTensor s;
  s.name = t.name;
  s.dtype = t.dtype;
  s.shape = t.shape;
  s.data.resize(static_cast<std::size_t>(t.nbytes()));
  return s;
}

}  // namespace

Result<SafetensorsFile> read_safetensors(const std::string& path) {
  SHARDLAB_ASSIGN_OR_RETURN(SafetensorsReader reader, SafetensorsReader::open(path));
  SafetensorsFile file;
  file.metadata = reader.metadata();
  file.tensors.reserve(reader.tensors().size());
  for (const TensorEntry& t : reader.tensors()) {
    StoredTensor s = stored_tensor(t);
    SHARDLAB_RETURN_IF_ERROR(reader.read(t, s.data));
    file.tensors.push_back(std::move(s));
  }
  return file;
}

Result<SafetensorsFile> parse_safetensors(const std::string& path, const std::vector<std::byte>& bytes) {
  SHARDLAB_ASSIGN_OR_RETURN(const std::uint64_t n, header_length(path, bytes.data(), bytes.size()));
  SHARDLAB_ASSIGN_OR_RETURN(ParsedHeader parsed, parse_header(path, reinterpret_cast<const char*>(bytes.data() + 8), n,
                                                              bytes.size() - 8 - n));
  SafetensorsFile file;
  file.metadata = std::move(parsed.metadata);
  for (const TensorEntry& t : parsed.tensors) {
    StoredTensor s = stored_tensor(t);
    unpack(t, bytes.data() + 8 + n + t.begin, s.data.data());
    file.tensors.push_back(std::move(s));
  }
  return file;
}

const TensorEntry* SafetensorsReader::find(const std::string& name) const {
  for (const auto& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

SafetensorsReader::SafetensorsReader(SafetensorsReader&& o) noexcept
    : path_(std::move(o.path_)),
      fd_(std::exchange(o.fd_, -1)),
      data_start_(o.data_start_),
      tensors_(std::move(o.tensors_)),
      metadata_(std::move(o.metadata_)) {}

SafetensorsReader::~SafetensorsReader() {
  if (fd_ >= 0) ::close(fd_);
}

Result<SafetensorsReader> SafetensorsReader::open(const std::string& path) {
  SafetensorsReader r;
  r.path_ = path;
  std::uint64_t size = 0;
  SHARDLAB_ASSIGN_OR_RETURN(r.fd_, open_regular_file(path, kMaxInputFileBytes, &size));
  std::byte first8[8] = {};
  SHARDLAB_RETURN_IF_ERROR(read_at(r.fd_, path, 0, std::span<std::byte>(first8, size < 8 ? size : 8)));
  SHARDLAB_ASSIGN_OR_RETURN(const std::uint64_t n, header_length(path, first8, size));
  std::string header(static_cast<std::size_t>(n), '\0');
  SHARDLAB_RETURN_IF_ERROR(read_at(r.fd_, path, 8, std::as_writable_bytes(std::span<char>(header))));
  SHARDLAB_ASSIGN_OR_RETURN(ParsedHeader parsed, parse_header(path, header.data(), n, size - 8 - n));
  r.data_start_ = 8 + n;
  r.tensors_ = std::move(parsed.tensors);
  r.metadata_ = std::move(parsed.metadata);
  return r;
}

Status SafetensorsReader::read(const TensorEntry& t, std::span<std::byte> out) const {
  if (out.size() != t.nbytes()) {
    return Status::invalid_argument(path_ + ": tensor '" + t.name + "' holds " + std::to_string(t.nbytes()) +
                                    " bytes; the destination has " + std::to_string(out.size()));
  }
  if (!t.widened_i32) return read_at(fd_, path_, data_start_ + t.begin, out);
  std::vector<std::byte> stored(static_cast<std::size_t>(t.end - t.begin));
  SHARDLAB_RETURN_IF_ERROR(read_at(fd_, path_, data_start_ + t.begin, stored));
  unpack(t, stored.data(), out.data());
  return Status::ok();
}

namespace {

// Writes the pieces, in order, to path atomically (NOTE [Safe file output]).
Status write_pieces_atomic(const std::string& path, const std::vector<std::span<const std::byte>>& pieces) {
  SHARDLAB_RETURN_IF_ERROR(check_replaceable(path));
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return Status::unavailable(tmp + ": cannot create (" + std::strerror(errno) + ")");
  for (const auto& piece : pieces) {
    std::size_t done = 0;
    while (done < piece.size()) {
      const ssize_t w = ::write(fd, piece.data() + done, piece.size() - done);
      if (w < 0) {
        if (errno == EINTR) continue;
        const std::string why = std::strerror(errno);
        ::close(fd);
        ::unlink(tmp.c_str());
        return Status::unavailable(tmp + ": write failed (" + why + ")");
      }
      done += static_cast<std::size_t>(w);
    }
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

// The 8-byte length and the JSON header (padded so the data starts 8-byte aligned, as the
// reference writer does) of a file holding `tensors` back to back in order.
std::string header_image(const std::vector<TensorRef>& tensors, const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::uint64_t offset = 0;
  for (const auto& t : tensors) {
    const std::uint64_t n = t.data.size();
    header[t.name] = {{"dtype", st_dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  std::string h = header.dump();
  while ((8 + h.size()) % 8 != 0) h += ' ';
  std::string out(8, '\0');
  const std::uint64_t len = h.size();
  for (int i = 0; i < 8; ++i) out[static_cast<std::size_t>(i)] = static_cast<char>((len >> (8 * i)) & 0xff);
  return out + h;
}

std::vector<TensorRef> refs_of(const SafetensorsFile& file) {
  std::vector<TensorRef> refs;
  refs.reserve(file.tensors.size());
  for (const auto& t : file.tensors) refs.push_back({t.name, t.dtype, t.shape, t.data});
  return refs;
}

}  // namespace

Status write_file_atomic(const std::string& path, const std::string& bytes) {
  return write_pieces_atomic(path, {std::as_bytes(std::span<const char>(bytes))});
}

Status write_safetensors(const std::string& path, const std::vector<TensorRef>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  const std::string header = header_image(tensors, metadata);
  std::vector<std::span<const std::byte>> pieces{std::as_bytes(std::span<const char>(header))};
  for (const auto& t : tensors) pieces.push_back(t.data);
  return write_pieces_atomic(path, pieces);
}

Status write_safetensors(const std::string& path, const SafetensorsFile& file) {
  return write_safetensors(path, refs_of(file), file.metadata);
}

std::string serialize_safetensors(const SafetensorsFile& file) {
  std::string out = header_image(refs_of(file), file.metadata);
  for (const auto& t : file.tensors) out.append(reinterpret_cast<const char*>(t.data.data()), t.data.size());
  return out;
}

}  // namespace shardlab::runtime::io
