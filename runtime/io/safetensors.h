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

Result<SafetensorsFile> read_safetensors(const std::string& path);
// Parses an in-memory image (the whole file); `path` is only used in messages.
Result<SafetensorsFile> parse_safetensors(const std::string& path, const std::vector<std::byte>& bytes);
Status write_safetensors(const std::string& path, const SafetensorsFile& file);

// Writes `bytes` to path atomically (temporary file + fsync + rename).
Status write_file_atomic(const std::string& path, const std::string& bytes);
Result<std::string> read_file(const std::string& path);

}  // namespace shardlab::runtime::io
