// Properties 1–3 of the FSDP core: partition, shard-info consistency, round trip.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cstring>

#include "property_tests/fsdp_generators.h"
#include "runtime/device/cpu/device.h"
#include "runtime/fsdp/shard_layout.h"
#include "sim/engine/world.h"
#include "testing/sim_world.h"

namespace shardlab::property {
namespace {

using runtime::fsdp::ShardLayout;

ShardLayout make(const LayoutCase& c) {
  auto l = ShardLayout::make(c.shapes, c.world_size, c.dtype, c.align_bytes);
  RC_ASSERT(l.is_ok());
  return *l;
}

// 1. Shards are disjoint, cover [0, W·S), every parameter element is owned by exactly one
//    rank, and everything else is padding.
RC_GTEST_PROP(FsdpLayout, PartitionCoversEveryElementExactlyOnce, ()) {
  const LayoutCase c = *gen_layout_case();
  const ShardLayout l = make(c);
  const std::int64_t w = c.world_size, s = l.shard_numel();
  RC_ASSERT(l.total_numel() == w * s);
  RC_ASSERT(l.total_numel() >= l.unpadded_numel());
  RC_ASSERT(l.total_numel() - l.unpadded_numel() < w);  // tail padding is less than one row of W
  for (int r = 0; r < c.world_size; ++r) {
    RC_ASSERT(l.shard(r).flat_begin == r * s);
    RC_ASSERT(l.shard(r).flat_end == (r + 1) * s);
  }
  // Mark owners of every flat element from the pieces.
  std::vector<int> owner(static_cast<std::size_t>(l.total_numel()), -1);
  for (const auto& shard : l.shards()) {
    for (const auto& p : shard.pieces) {
      const auto& param = l.params()[static_cast<std::size_t>(p.param)];
      for (std::int64_t i = p.param_begin; i < p.param_end; ++i) {
        const std::int64_t flat = param.flat_offset + i;
        RC_ASSERT(owner[static_cast<std::size_t>(flat)] == -1);  // disjoint
        RC_ASSERT(flat >= shard.flat_begin && flat < shard.flat_end);
        owner[static_cast<std::size_t>(flat)] = shard.rank;
      }
    }
  }
  std::int64_t owned = 0;
  for (const auto& param : l.params()) {
    for (std::int64_t i = 0; i < param.numel; ++i)
      RC_ASSERT(owner[static_cast<std::size_t>(param.flat_offset + i)] >= 0);
    owned += param.numel;
  }
  std::int64_t marked = 0;
  for (int o : owner) marked += o >= 0 ? 1 : 0;
  RC_ASSERT(marked == owned);  // everything not owned by a parameter is padding
}

// 2. Pieces tile each parameter in rank order; offset_in_shard + n <= S; alignment holds;
//    the views they describe never leave their storage.
RC_GTEST_PROP(FsdpLayout, ShardInfoTilesEachParameterInRankOrder, ()) {
  const LayoutCase c = *gen_layout_case();
  const ShardLayout l = make(c);
  const std::int64_t align = c.align_bytes == 0 ? 1 : c.align_bytes / static_cast<std::int64_t>(element_size(c.dtype));
  std::vector<std::int64_t> next(l.params().size(), 0);
  for (std::size_t i = 0; i < l.params().size(); ++i) {
    if (i > 0) RC_ASSERT(l.params()[i].flat_offset % align == 0);
    if (i > 0) RC_ASSERT(l.params()[i].flat_offset >= l.params()[i - 1].flat_offset + l.params()[i - 1].numel);
  }
  runtime::device::cpu::CpuDevice dev;
  auto storage = dev.allocate(l.shard_numel() * static_cast<std::int64_t>(element_size(c.dtype)),
                              MemoryCategory::kParameters, "shard");
  RC_ASSERT(storage.is_ok());
  for (const auto& shard : l.shards()) {
    std::int64_t last_offset = -1;
    for (const auto& p : shard.pieces) {
      RC_ASSERT(p.param_begin == next[static_cast<std::size_t>(p.param)]);  // tiles in rank order
      next[static_cast<std::size_t>(p.param)] = p.param_end;
      RC_ASSERT(p.numel() > 0);
      RC_ASSERT(p.offset_in_shard > last_offset);  // flat order
      RC_ASSERT(p.offset_in_shard + p.numel() <= l.shard_numel());
      last_offset = p.offset_in_shard;
      auto view = Tensor::view_of(*storage, c.dtype, {p.numel()}, p.offset_in_shard, "piece");
      RC_ASSERT(view.is_ok());
    }
  }
  for (std::size_t i = 0; i < l.params().size(); ++i) RC_ASSERT(next[i] == l.params()[i].numel);
}

// 3. All-gathering the shards (sim backend) rebuilds the flat buffer bitwise; a reshard
//    then unshard changes nothing.
RC_GTEST_PROP(FsdpLayout, AllGatherOfShardsRebuildsTheFlatBufferBitwise, ()) {
  LayoutCase c = *gen_layout_case();
  c.world_size = *rc::gen::inRange(1, 9);  // threads per rank: keep it small
  c.dtype = DType::kF32;
  const ShardLayout l = make(c);
  std::vector<float> flat(static_cast<std::size_t>(l.total_numel()), 0.0f);
  Rng rng(*rc::gen::arbitrary<std::uint32_t>());
  for (const auto& p : l.params())
    for (std::int64_t i = 0; i < p.numel; ++i) flat[static_cast<std::size_t>(p.flat_offset + i)] = rng.uniform(-1, 1);
  const auto gathered = testlib::on_sim_ranks(c.world_size, [&](sim::RankContext& ctx) -> Result<std::vector<float>> {
    const std::int64_t s = l.shard_numel();
    SHARDLAB_ASSIGN_OR_RETURN(Tensor shard, ctx.device.zeros({s}, DType::kF32, MemoryCategory::kParameters, "shard"));
    // Fill the shard from the pieces (padding stays zero), as FlatParameter does.
    for (const auto& p : l.shard(ctx.rank).pieces) {
      const auto& param = l.params()[static_cast<std::size_t>(p.param)];
      std::memcpy(shard.data<float>() + p.offset_in_shard, flat.data() + param.flat_offset + p.param_begin,
                  static_cast<std::size_t>(p.numel()) * 4);
    }
    std::vector<float> g;
    for (int round = 0; round < 2; ++round) {  // unshard, reshard (free), unshard again
      SHARDLAB_ASSIGN_OR_RETURN(
          Tensor full, ctx.device.empty({s * ctx.world_size}, DType::kF32, MemoryCategory::kParameters, "full"));
      SHARDLAB_RETURN_IF_ERROR(ctx.comm.all_gather_into(full, shard)->wait(kNanosPerSecond));
      std::vector<float> now(full.data<float>(), full.data<float>() + full.numel());
      if (round == 1 && now != g) return Status::internal("reshard + unshard changed the buffer");
      g = std::move(now);
    }
    return g;
  });
  if (!gathered.is_ok()) RC_FAIL(gathered.status().to_string());
  for (const auto& g : *gathered) {
    RC_ASSERT(g.size() == flat.size());
    RC_ASSERT(std::memcmp(g.data(), flat.data(), flat.size() * 4) == 0);
  }
}

TEST(FsdpLayout, ReferenceExampleThreeTenByTenWeightsOnTwoRanks) {
  auto l = ShardLayout::make({{10, 10}, {10, 10}, {10, 10}}, 2, DType::kF32, 0);
  ASSERT_TRUE(l.is_ok());
  EXPECT_EQ(l->shard_numel(), 150);
  const auto& r0 = l->shard(0).pieces;
  const auto& r1 = l->shard(1).pieces;
  ASSERT_EQ(r0.size(), 2u);
  ASSERT_EQ(r1.size(), 2u);
  EXPECT_EQ(r0[0].param, 0);
  EXPECT_EQ(r0[0].offset_in_shard, 0);
  EXPECT_EQ(r0[0].param_end, 100);
  EXPECT_EQ(r0[1].param, 1);
  EXPECT_EQ(r0[1].offset_in_shard, 100);
  EXPECT_EQ(r0[1].param_end, 50);
  EXPECT_EQ(r1[0].param, 1);
  EXPECT_EQ(r1[0].offset_in_shard, 0);
  EXPECT_EQ(r1[0].param_begin, 50);
  EXPECT_EQ(r1[1].param, 2);
  EXPECT_EQ(r1[1].offset_in_shard, 50);
  EXPECT_EQ(r1[1].param_end, 100);
}

TEST(FsdpLayout, NineElementsOnEightRanksLeavesTrailingRanksWithOnlyPadding) {
  auto l = ShardLayout::make({{3, 3}}, 8, DType::kF32, 0);
  ASSERT_TRUE(l.is_ok());
  EXPECT_EQ(l->shard_numel(), 2);
  const std::int64_t expect[] = {2, 2, 2, 2, 1, 0, 0, 0};
  for (int r = 0; r < 8; ++r) {
    std::int64_t owned = 0;
    for (const auto& p : l->shard(r).pieces) owned += p.numel();
    EXPECT_EQ(owned, expect[r]) << "rank " << r;
  }
}

}  // namespace
}  // namespace shardlab::property
