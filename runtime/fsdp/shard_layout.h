// ShardLayout: PyTorch FSDP's flat-parameter layout, computed once per FSDP unit.
//
// Parameters are laid out in order in one flat buffer. With alignment (PyTorch's
// use_orig_params mode) every parameter after the first starts at a multiple of
// align_bytes / element_size elements (the gap is zero padding). The total is then padded
// up to a multiple of the world size W. Shard size S = total / W (= ceil(unpadded / W)
// after padding); rank r owns flat range [r·S, (r+1)·S) — the torch.chunk rule, so
// trailing ranks may own only padding.
//
// For each rank, `pieces` list the parameters intersecting its range in flat order, with
// the contract  shard[offset_in_shard : offset_in_shard + n] == param.flatten()[param_begin : param_end],
// n = param_end - param_begin. Padding never appears in any piece.
//
// Example (reference/fsdp-semantics.md): three 10×10 weights, W = 2, no alignment:
// S = 150; rank 0 holds p0[0:100) at 0 and p1[0:50) at 100; rank 1 holds p1[50:100) at 0
// and p2[0:100) at 50.
//
// FSDP2 (make_per_parameter): the same description of a different cut. Each parameter is
// sharded on its own dim 0 (Dim0Layout, dim0_layout.h); a rank's shard is its padded
// dim-0 chunks one after the other, S = their total, and its pieces say which rows
// (a contiguous range of the flattened parameter) sit where. flat_offset is then the
// parameter's place in the unsharded buffer the model views — the parameters one after the
// other, no alignment — which is not the all-gathered buffer: the all-gather yields the W
// shards rank after rank ([r·S, (r+1)·S) is rank r's), and FSDP2 copies them out into the
// unsharded buffer (and gradients in, before the reduce-scatter).
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

struct LayoutParam {
  int index = 0;
  Shape shape;
  std::int64_t numel = 0;
  std::int64_t flat_offset = 0;  // where it starts in the flat buffer (after alignment padding)
};

struct ShardPiece {
  int param = 0;
  std::int64_t offset_in_shard = 0;
  std::int64_t param_begin = 0;  // [param_begin, param_end) inside the flattened parameter
  std::int64_t param_end = 0;
  std::int64_t numel() const { return param_end - param_begin; }
};

struct RankShard {
  int rank = 0;
  std::int64_t flat_begin = 0;  // [flat_begin, flat_end) of the padded flat buffer
  std::int64_t flat_end = 0;
  std::vector<ShardPiece> pieces;
};

// The largest world a layout is made for: the simulator's (timing mode, 65,536 ranks). A
// layout holds one RankShard per rank, so a larger W is refused (INVALID_ARGUMENT) rather
// than allocated.
inline constexpr int kMaxLayoutWorldSize = 65536;

class ShardLayout {
 public:
  // align_bytes: 0 (none) or a positive multiple of the element size; world_size in
  // [1, kMaxLayoutWorldSize].
  static Result<ShardLayout> make(const std::vector<Shape>& shapes, int world_size, DType dtype,
                                  std::int64_t align_bytes);
  // FSDP2's per-parameter dim-0 sharding (every shape needs a dimension).
  static Result<ShardLayout> make_per_parameter(const std::vector<Shape>& shapes, int world_size, DType dtype);

  int world_size() const { return world_size_; }
  DType dtype() const { return dtype_; }
  std::int64_t align_bytes() const { return align_bytes_; }
  std::int64_t unpadded_numel() const { return unpadded_; }  // end of the last parameter
  std::int64_t total_numel() const { return total_; }        // W · S
  std::int64_t shard_numel() const { return shard_; }        // S
  // FSDP2's layout: the all-gathered buffer is copied out into the unsharded one.
  bool per_parameter() const { return per_parameter_; }
  // Elements of the buffer the parameters are viewed in while unsharded: W · S for FSDP1
  // (the all-gathered buffer itself), the parameters' total for FSDP2.
  std::int64_t unsharded_numel() const { return per_parameter_ ? unpadded_ : total_; }
  const std::vector<LayoutParam>& params() const { return params_; }
  const RankShard& shard(int rank) const { return shards_[static_cast<std::size_t>(rank)]; }
  const std::vector<RankShard>& shards() const { return shards_; }

  // The layout as the JSON document `shardlab layout` prints.
  std::string to_json() const;

 private:
  int world_size_ = 1;
  DType dtype_ = DType::kF32;
  std::int64_t align_bytes_ = 0;
  std::int64_t unpadded_ = 0, total_ = 0, shard_ = 0;
  bool per_parameter_ = false;
  std::vector<LayoutParam> params_;
  std::vector<RankShard> shards_;
};

// Parses "7x3,5x7,5x5" (dims > 0, 'x' between dims, ',' between shapes).
Result<std::vector<Shape>> parse_shapes(const std::string& text);

}  // namespace shardlab::runtime::fsdp
