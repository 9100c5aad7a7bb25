// safetensors files (Hugging Face's format): read hardened, write atomically.
//
// Layout: u64 little-endian header length N; N bytes of JSON mapping each tensor name to
// {"dtype", "shape", "data_offsets": [begin, end]} (relative to the end of the header),
// plus an optional "__metadata__" of string → string; then the raw little-endian data.
//
// The reader rejects, with a message naming the file, the tensor and the values:
// a file shorter than 8 bytes, N larger than the file, a header that is not a JSON
// object, unknown dtypes, malformed shapes, offsets out of range, overlapping or leaving
// gaps, and shape × dtype size ≠ byte length. It never reads outside the file.
// Supported dtypes: F32, BF16, F16, I64 (I32 is widened to I64 on read).
//
// Writes go to a temporary file in the same folder, then rename(2): a crash never leaves
// a half-written file under the final name.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "runtime/core/dtype.h"
#include "runtime/core/status.h"
#include "runtime/core/tensor.h"

namespace shardlab::runtime::io {

struct StoredTensor {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  std::vector<std::byte> data;  // little-endian, element_size(dtype) × numel bytes
};

struct SafetensorsFile {
  std::vector<StoredTensor> tensors;  // in file order
  std::map<std::string, std::string> metadata;
  const StoredTensor* find(const std::string& name) const;
};

// NOTE [Safe file input]: every file shardlab reads (models, batches, configs,
// checkpoints, graphs, profiles) is read by read_file: a regular file only — a FIFO, a
// device, a socket or a directory is refused (INVALID_ARGUMENT naming the path and what
// it is) without blocking on it (opened O_NONBLOCK, then checked with fstat) — and at
// most `max_bytes`, checked before reading.
inline constexpr std::uint64_t kMaxInputFileBytes = std::uint64_t{64} << 30;  // 64 GiB: a large model's weights
Result<std::string> read_file(const std::string& path, std::uint64_t max_bytes = kMaxInputFileBytes);

// Reads the whole file (every tensor's data) into memory.
Result<SafetensorsFile> read_safetensors(const std::string& path);

// A tensor's place in a file: its dtype (I32 is read as I64, widened_i32), shape and byte
// range [begin, end) in the data section (after the header).
struct TensorEntry {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  std::uint64_t begin = 0, end = 0;
  bool widened_i32 = false;
  std::uint64_t nbytes() const { return widened_i32 ? 2 * (end - begin) : end - begin; }  // once read
};

// A file opened for reading tensor by tensor, straight into the caller's memory (a model's
// weights need no second copy of the file). open() reads and checks the header exactly as
// read_safetensors does (NOTE [Safe file input], every rule above); read() fills `out`,
// which must hold entry.nbytes() bytes, and fails with INVALID_ARGUMENT if the file shrank.
class SafetensorsReader {
 public:
  static Result<SafetensorsReader> open(const std::string& path);
  SafetensorsReader(SafetensorsReader&& other) noexcept;
  SafetensorsReader& operator=(SafetensorsReader&&) = delete;
  ~SafetensorsReader();
  const std::vector<TensorEntry>& tensors() const { return tensors_; }  // in file order
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const TensorEntry* find(const std::string& name) const;
  Status read(const TensorEntry& t, std::span<std::byte> out) const;

 private:
  SafetensorsReader() = default;
  std::string path_;
  int fd_ = -1;
  std::uint64_t data_start_ = 0;
  std::vector<TensorEntry> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Parses an in-memory image (the whole file); `path` is only used in messages.
Result<SafetensorsFile> parse_safetensors(const std::string& path, const std::vector<std::byte>& bytes);
Status write_safetensors(const std::string& path, const SafetensorsFile& file);
// The same file, written from the callers' buffers in order (no copy of the data).
struct TensorRef {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  std::span<const std::byte> data;  // element_size(dtype) × numel bytes
};
Status write_safetensors(const std::string& path, const std::vector<TensorRef>& tensors,
                         const std::map<std::string, std::string>& metadata);
// The file's bytes, as write_safetensors writes them.
std::string serialize_safetensors(const SafetensorsFile& file);

// Writes `bytes` to path atomically (temporary file + fsync + rename). NOTE [Safe file
// output]: only a regular file is ever replaced — a path that names a device, a FIFO, a
// directory or a symbolic link is refused (INVALID_ARGUMENT), so `--dump-graph /dev/null`
// cannot turn /dev/null into a file.
Status write_file_atomic(const std::string& path, const std::string& bytes);
// INVALID_ARGUMENT unless `path` does not exist or is a regular file (not a link).
Status check_replaceable(const std::string& path);

}  // namespace shardlab::runtime::io
