// Dim0Layout: PyTorch FSDP2's per-parameter layout (fully_shard): no flat parameter; every
// parameter is a DTensor sharded on dim 0 (Shard(0)) over the W ranks of its group.
//
// Parameter p of shape [d0, d1, …] is cut as torch.chunk(p, W, dim=0) cuts it, with empty
// chunks for the ranks past the last one (FSDP2's _chunk_with_empty): every chunk but the
// last non-empty one has c = ceil(d0 / W) rows, so rank r holds rows
// [min(r·c, d0), min((r+1)·c, d0)) — its local shard, the DTensor's to_local() shape. For
// the all-gather every rank pads its shard with zero rows to c rows (chunks[0]'s size, the
// padded sharded size), so all ranks send the same number of elements; a unit's
// all-gather input on each rank is its parameters' padded shards, copied one after the
// other into one buffer ("copy-in") and split back into per-parameter views after the
// gather ("copy-out").
//
// Example: shapes 5x3 and 2, W = 4: c = 2 and 1; rank 0 holds rows [0, 2) of p0 and [0, 1)
// of p1, rank 2 rows [4, 5) of p0 (padded with one zero row) and nothing of p1 (padded
// with one zero), rank 3 nothing of either; every rank's all-gather input is 2·3 + 1 = 7
// elements.
//
// Every size is checked for 64-bit overflow; bad input is INVALID_ARGUMENT.
// Thread safety: immutable after make().
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/core/dtype.h"
#include "runtime/core/status.h"
#include "runtime/core/tensor.h"

namespace shardlab::runtime::fsdp {

struct Dim0Param {
  int index = 0;
  Shape shape;  // the unsharded parameter's
  std::int64_t numel = 0;
  std::int64_t row_numel = 0;    // elements per dim-0 row: d1 · d2 · … (1 for a vector)
  std::int64_t padded_rows = 0;  // c = ceil(d0 / W): every rank's all-gather rows
  std::int64_t padded_numel() const { return padded_rows * row_numel; }
};

// What rank r holds of one parameter: rows [row_begin, row_end) of dim 0, at
// offset_in_input elements into the rank's all-gather input (its padded shard starts there).
struct Dim0Shard {
  int param = 0;
  std::int64_t row_begin = 0;
  std::int64_t row_end = 0;
  std::int64_t offset_in_input = 0;
  std::int64_t rows() const { return row_end - row_begin; }
};

class Dim0Layout {
 public:
  // world_size in [1, kMaxLayoutWorldSize] (shard_layout.h); every shape has at least one
  // dimension (FSDP2 shards on dim 0).
  static Result<Dim0Layout> make(const std::vector<Shape>& shapes, int world_size, DType dtype);

  int world_size() const { return world_size_; }
  DType dtype() const { return dtype_; }
  const std::vector<Dim0Param>& params() const { return params_; }
  // Rank r's shard of parameter p.
  Dim0Shard shard(int rank, int param) const;
  // The local (unpadded) shape of rank r's shard of parameter p: [rows, d1, …].
  Shape local_shape(int rank, int param) const;
  // Elements each rank contributes to the unit's all-gather: Σ padded_numel (the same on
  // every rank); the gathered buffer holds W times as many.
  std::int64_t all_gather_input_numel() const { return input_numel_; }

  // The layout as the JSON document `shardlab layout --fsdp-version 2` prints.
  std::string to_json() const;

 private:
  int world_size_ = 1;
  DType dtype_ = DType::kF32;
  std::vector<Dim0Param> params_;
  std::vector<std::int64_t> input_offset_;  // per parameter: where its padded shard starts in the input
  std::int64_t input_numel_ = 0;
};

}  // namespace shardlab::runtime::fsdp
