#include "runtime/fsdp/dim0_layout.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "runtime/core/check.h"
#include "runtime/fsdp/shard_layout.h"

namespace shardlab::runtime::fsdp {

Result<Dim0Layout> Dim0Layout::make(const std::vector<Shape>& shapes, int world_size, DType dtype) {
  if (world_size < 1 || world_size > kMaxLayoutWorldSize) {
    return Status::invalid_argument("world size " + std::to_string(world_size) + " is out of range; allowed: 1 to " +
                                    std::to_string(kMaxLayoutWorldSize) + " ranks");
  }
  Dim0Layout l;
  l.world_size_ = world_size;
  l.dtype_ = dtype;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    const std::string which = "parameter " + std::to_string(i);
    if (shapes[i].empty()) {
      return Status::invalid_argument(
          which + " has no dimension; FSDP2 shards every parameter on dim 0, so each needs at least one");
    }
    Dim0Param p;
    p.index = static_cast<int>(i);
    p.shape = shapes[i];
    auto n = checked_numel(shapes[i]);
    if (!n.is_ok()) return n.status().with_context(which);
    p.numel = *n;
    const std::int64_t d0 = shapes[i][0];
    p.row_numel = d0 == 0 ? 0 : p.numel / d0;
    p.padded_rows = d0 / world_size + (d0 % world_size != 0 ? 1 : 0);
    l.input_offset_.push_back(l.input_numel_);
    if (__builtin_add_overflow(l.input_numel_, p.padded_numel(), &l.input_numel_)) {
      return Status::invalid_argument(
          "the all-gather input overflows 64 bits; the parameters are too large to lay out");
    }
    l.params_.push_back(std::move(p));
  }
  return l;
}

Dim0Shard Dim0Layout::shard(int rank, int param) const {
  SHARDLAB_CHECK(rank >= 0 && rank < world_size_);
  SHARDLAB_CHECK(param >= 0 && param < static_cast<int>(params_.size()));
  const Dim0Param& p = params_[static_cast<std::size_t>(param)];
  const std::int64_t d0 = p.shape[0];
  Dim0Shard s;
  s.param = param;
  s.row_begin = std::min(static_cast<std::int64_t>(rank) * p.padded_rows, d0);
  s.row_end = std::min(s.row_begin + p.padded_rows, d0);
  s.offset_in_input = input_offset_[static_cast<std::size_t>(param)];
  return s;
}

Shape Dim0Layout::local_shape(int rank, int param) const {
  Shape shape = params_[static_cast<std::size_t>(param)].shape;
  shape[0] = shard(rank, param).rows();
  return shape;
}

std::string Dim0Layout::to_json() const {
  nlohmann::ordered_json j;
  j["fsdp_version"] = 2;
  j["world_size"] = world_size_;
  j["dtype"] = dtype_name(dtype_);
  j["all_gather_input_numel"] = input_numel_;
  j["params"] = nlohmann::ordered_json::array();
  for (const Dim0Param& p : params_) {
    Shape padded = p.shape;
    padded[0] = p.padded_rows;
    j["params"].push_back({{"index", p.index},
                           {"shape", p.shape},
                           {"numel", p.numel},
                           {"padded_shard_shape", padded},
                           {"offset_in_input", input_offset_[static_cast<std::size_t>(p.index)]}});
  }
  j["shards"] = nlohmann::ordered_json::array();
  for (int r = 0; r < world_size_; ++r) {
    nlohmann::ordered_json params = nlohmann::ordered_json::array();
    for (const Dim0Param& p : params_) {
      const Dim0Shard s = shard(r, p.index);
      params.push_back({{"param", p.index},
                        {"local_shape", local_shape(r, p.index)},
                        {"row_begin", s.row_begin},
                        {"row_end", s.row_end},
                        {"padding_rows", p.padded_rows - s.rows()}});
    }
    j["shards"].push_back({{"rank", r}, {"params", params}});
  }
  return j.dump(2);
}

}  // namespace shardlab::runtime::fsdp
