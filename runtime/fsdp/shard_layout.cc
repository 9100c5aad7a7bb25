#include "runtime/fsdp/shard_layout.h"

#include <charconv>
#include <nlohmann/json.hpp>

#include "runtime/fsdp/dim0_layout.h"

namespace shardlab::runtime::fsdp {

namespace {

// Rank r's range of the all-gathered buffer, [r·S, (r+1)·S), before its pieces are listed.
RankShard rank_range(int rank, std::int64_t shard) { return {rank, rank * shard, (rank + 1) * shard, {}}; }

Status overflow(const std::string& what) {
  return Status::invalid_argument(what + " overflows 64 bits; the parameters are too large to lay out");
}

}  // namespace

Result<ShardLayout> ShardLayout::make(const std::vector<Shape>& shapes, int world_size, DType dtype,
                                      std::int64_t align_bytes) {
  if (world_size < 1 || world_size > kMaxLayoutWorldSize) {
    return Status::invalid_argument("world size " + std::to_string(world_size) + " is out of range; allowed: 1 to " +
                                    std::to_string(kMaxLayoutWorldSize) + " ranks");
  }
  const auto es = static_cast<std::int64_t>(element_size(dtype));
  if (align_bytes < 0 || (align_bytes != 0 && align_bytes % es != 0)) {
    return Status::invalid_argument("alignment " + std::to_string(align_bytes) + " bytes is not a multiple of the " +
                                    std::string(dtype_name(dtype)) + " element size (" + std::to_string(es) +
                                    " bytes); allowed: 0 or a positive multiple of " + std::to_string(es));
  }
  ShardLayout l;
  l.world_size_ = world_size;
  l.dtype_ = dtype;
  l.align_bytes_ = align_bytes;
  const std::int64_t align = align_bytes == 0 ? 1 : align_bytes / es;
  std::int64_t cursor = 0;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    LayoutParam p;
    p.index = static_cast<int>(i);
    p.shape = shapes[i];
    auto n = checked_numel(shapes[i]);
    if (!n.is_ok()) return n.status().with_context("parameter " + std::to_string(i));
    p.numel = *n;
    if (i > 0 && cursor % align != 0) {
      if (__builtin_add_overflow(cursor, align - cursor % align, &cursor)) return overflow("the flat offset");
    }
    p.flat_offset = cursor;
    if (__builtin_add_overflow(cursor, p.numel, &cursor)) return overflow("the flat size");
    l.params_.push_back(std::move(p));
  }
  l.unpadded_ = cursor;
  // Tail padding to a multiple of the world size; S = ceil(unpadded / W).
  l.shard_ = cursor / world_size + (cursor % world_size != 0 ? 1 : 0);
  if (__builtin_mul_overflow(l.shard_, static_cast<std::int64_t>(world_size), &l.total_)) return overflow("W · S");
  for (int r = 0; r < world_size; ++r) {
    RankShard s = rank_range(r, l.shard_);
    for (const LayoutParam& p : l.params_) {
      const std::int64_t begin = std::max(p.flat_offset, s.flat_begin);
      const std::int64_t end = std::min(p.flat_offset + p.numel, s.flat_end);
      if (begin >= end) continue;
      s.pieces.push_back({p.index, begin - s.flat_begin, begin - p.flat_offset, end - p.flat_offset});
    }
    l.shards_.push_back(std::move(s));
  }
  return l;
}

Result<ShardLayout> ShardLayout::make_per_parameter(const std::vector<Shape>& shapes, int world_size, DType dtype) {
  SHARDLAB_ASSIGN_OR_RETURN(Dim0Layout d, Dim0Layout::make(shapes, world_size, dtype));
  ShardLayout l;
  l.world_size_ = world_size;
  l.dtype_ = dtype;
  l.per_parameter_ = true;
  std::int64_t cursor = 0;
  for (const Dim0Param& p : d.params()) {
    l.params_.push_back({p.index, p.shape, p.numel, cursor});
    if (__builtin_add_overflow(cursor, p.numel, &cursor)) return overflow("the unsharded size");
  }
  l.unpadded_ = cursor;
  l.shard_ = d.all_gather_input_numel();
  if (__builtin_mul_overflow(l.shard_, static_cast<std::int64_t>(world_size), &l.total_)) return overflow("W · S");
  for (int r = 0; r < world_size; ++r) {
    RankShard s = rank_range(r, l.shard_);
    for (const Dim0Param& p : d.params()) {
      const Dim0Shard c = d.shard(r, p.index);
      if (c.rows() == 0) continue;
      s.pieces.push_back({p.index, c.offset_in_input, c.row_begin * p.row_numel, c.row_end * p.row_numel});
    }
    l.shards_.push_back(std::move(s));
  }
  return l;
}

std::string ShardLayout::to_json() const {
  nlohmann::ordered_json j;
  j["world_size"] = world_size_;
  j["dtype"] = dtype_name(dtype_);
  j["align_bytes"] = align_bytes_;
  j["total_numel"] = total_;
  j["unpadded_numel"] = unpadded_;
  j["shard_numel"] = shard_;
  j["params"] = nlohmann::ordered_json::array();
  for (const LayoutParam& p : params_) {
    j["params"].push_back({{"index", p.index}, {"shape", p.shape}, {"numel", p.numel}, {"flat_offset", p.flat_offset}});
  }
  j["shards"] = nlohmann::ordered_json::array();
  for (const RankShard& s : shards_) {
    nlohmann::ordered_json pieces = nlohmann::ordered_json::array();
    for (const ShardPiece& q : s.pieces) {
      pieces.push_back({{"param", q.param},
                        {"offset_in_shard", q.offset_in_shard},
                        {"param_begin", q.param_begin},
                        {"param_end", q.param_end}});
    }
    j["shards"].push_back(
        {{"rank", s.rank}, {"flat_begin", s.flat_begin}, {"flat_end", s.flat_end}, {"pieces", pieces}});
  }
  return j.dump(2);
}

Result<std::vector<Shape>> parse_shapes(const std::string& text) {
  const auto bad = [&](const std::string& why) {
    return Status::invalid_argument(
        "--shapes '" + text + "': " + why +
        "; expected comma-separated shapes of positive integers joined by 'x', e.g. 7x3,5x7,5");
  };
  std::vector<Shape> shapes;
  if (text.empty()) return bad("no shapes given");
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const std::size_t comma = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, comma - pos);
    if (item.empty()) return bad("shape " + std::to_string(shapes.size() + 1) + " is empty");
    Shape shape;
    std::size_t p = 0;
    while (p <= item.size()) {
      const std::size_t x = std::min(item.find('x', p), item.size());
      const std::string dim = item.substr(p, x - p);
      std::int64_t v = 0;
      const auto [ptr, ec] = std::from_chars(dim.data(), dim.data() + dim.size(), v);
      if (dim.empty() || ptr != dim.data() + dim.size()) {
        return bad("'" + dim + "' in shape '" + item + "' is not an integer");
      }
      if (ec == std::errc::result_out_of_range) return bad("dimension '" + dim + "' overflows 64 bits");
      if (v <= 0) return bad("dimension " + dim + " in shape '" + item + "' must be positive");
      shape.push_back(v);
      p = x + 1;
    }
    if (auto n = checked_numel(shape); !n.is_ok()) return bad("shape '" + item + "' has more than 2^63 elements");
    shapes.push_back(std::move(shape));
    pos = comma + 1;
  }
  return shapes;
}

}  // namespace shardlab::runtime::fsdp
