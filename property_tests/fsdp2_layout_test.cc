// FSDP2's per-parameter dim-0 layout (runtime/fsdp/dim0_layout.h): the shards are
// torch.chunk's chunks, every rank all-gathers the same padded size, and copy-in →
// all-gather → copy-out gives every parameter back bit for bit.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cstring>

#include "property_tests/fsdp_generators.h"
#include "runtime/core/rng.h"
#include "runtime/fsdp/dim0_layout.h"
#include "testing/sim_world.h"

namespace shardlab::property {
namespace {

using runtime::fsdp::Dim0Layout;

Dim0Layout make(const LayoutCase& c) {
  auto l = Dim0Layout::make(c.shapes, c.world_size, c.dtype);
  RC_ASSERT(l.is_ok());
  return *l;
}

// torch.chunk(p, W, dim=0): chunks of ceil(d0 / W) rows in rank order, the last one
// shorter, and none for the ranks past it; every rank's padded shard has chunk 0's rows.
RC_GTEST_PROP(Fsdp2Layout, ShardsAreTorchChunksPaddedToTheFirst, ()) {
  const LayoutCase c = *gen_layout_case();
  const Dim0Layout l = make(c);
  std::int64_t input = 0;
  for (const auto& p : l.params()) {
    const std::int64_t d0 = p.shape[0];
    const std::int64_t chunk = (d0 + c.world_size - 1) / c.world_size;
    RC_ASSERT(p.padded_rows == chunk);
    std::int64_t next_row = 0;
    for (int r = 0; r < c.world_size; ++r) {
      const auto s = l.shard(r, p.index);
      RC_ASSERT(s.row_begin == next_row);  // contiguous, in rank order
      RC_ASSERT(s.rows() >= 0 && s.rows() <= p.padded_rows);
      RC_ASSERT(s.rows() == std::max<std::int64_t>(0, std::min(chunk, d0 - r * chunk)));
      RC_ASSERT(s.offset_in_input == input);
      const Shape local = l.local_shape(r, p.index);
      RC_ASSERT(local[0] == s.rows());
      RC_ASSERT(std::equal(local.begin() + 1, local.end(), p.shape.begin() + 1));
      next_row = s.row_end;
    }
    RC_ASSERT(next_row == d0);  // the chunks cover dim 0
    input += p.padded_numel();
  }
  RC_ASSERT(l.all_gather_input_numel() == input);
}

// Copy-in (each rank's local rows, zero rows up to the padded size), one all-gather, and
// copy-out (each rank's first local rows of each parameter) rebuild every parameter.
RC_GTEST_PROP(Fsdp2Layout, CopyInAllGatherCopyOutRoundTrips, ()) {
  LayoutCase c = *gen_layout_case();
  c.dtype = DType::kF32;
  const Dim0Layout l = make(c);
  Rng rng(*rc::gen::arbitrary<std::uint32_t>());
  std::vector<std::vector<float>> full;
  for (const auto& p : l.params()) {
    std::vector<float> v(static_cast<std::size_t>(p.numel));
    for (float& x : v) x = rng.uniform(-1, 1);
    full.push_back(std::move(v));
  }
  const std::int64_t in = l.all_gather_input_numel();
  auto rebuilt =
      testlib::on_sim_ranks(c.world_size, [&](sim::RankContext& ctx) -> Result<std::vector<std::vector<float>>> {
        SHARDLAB_ASSIGN_OR_RETURN(Tensor input, ctx.device.empty({std::max<std::int64_t>(in, 1)}, DType::kF32,
                                                                 MemoryCategory::kParameters, "input"));
        std::fill(input.data<float>(), input.data<float>() + input.numel(), 7.0f);  // never read as data below
        for (const auto& p : l.params()) {
          const auto s = l.shard(ctx.rank, p.index);
          float* dst = input.data<float>() + s.offset_in_input;
          std::memcpy(dst, full[static_cast<std::size_t>(p.index)].data() + s.row_begin * p.row_numel,
                      static_cast<std::size_t>(s.rows() * p.row_numel) * sizeof(float));
          std::fill(dst + s.rows() * p.row_numel, dst + p.padded_numel(), 0.0f);
        }
        SHARDLAB_ASSIGN_OR_RETURN(Tensor gathered, ctx.device.empty({input.numel() * ctx.world_size}, DType::kF32,
                                                                    MemoryCategory::kParameters, "gathered"));
        SHARDLAB_RETURN_IF_ERROR(ctx.comm.all_gather_into(gathered, input)->wait(kNanosPerSecond));
        std::vector<std::vector<float>> out;
        for (const auto& p : l.params()) {
          std::vector<float> v;
          for (int q = 0; q < ctx.world_size; ++q) {
            const auto s = l.shard(q, p.index);
            const float* from = gathered.data<float>() + q * input.numel() + s.offset_in_input;
            v.insert(v.end(), from, from + s.rows() * p.row_numel);
          }
          out.push_back(std::move(v));
        }
        return out;
      });
  if (!rebuilt.is_ok()) RC_FAIL(rebuilt.status().to_string());
  for (const auto& rank : *rebuilt) {
    RC_ASSERT(rank.size() == full.size());
    for (std::size_t i = 0; i < full.size(); ++i) {
      RC_ASSERT(rank[i].size() == full[i].size());
      RC_ASSERT(std::memcmp(rank[i].data(), full[i].data(), full[i].size() * sizeof(float)) == 0);
    }
  }
}

TEST(Fsdp2Layout, HeaderExampleFiveByThreeAndTwoOnFourRanks) {
  auto l = Dim0Layout::make({{5, 3}, {2}}, 4, DType::kF32);
  ASSERT_TRUE(l.is_ok());
  EXPECT_EQ(l->all_gather_input_numel(), 7);
  EXPECT_EQ(l->local_shape(0, 0), (Shape{2, 3}));
  EXPECT_EQ(l->local_shape(2, 0), (Shape{1, 3}));
  EXPECT_EQ(l->local_shape(3, 0), (Shape{0, 3}));
  EXPECT_EQ(l->local_shape(0, 1), (Shape{1}));
  EXPECT_EQ(l->local_shape(2, 1), (Shape{0}));
  EXPECT_EQ(l->shard(1, 1).offset_in_input, 6);
}

TEST(Fsdp2Layout, RefusesAScalarAndAWorldOutOfRange) {
  EXPECT_FALSE(Dim0Layout::make({{}}, 2, DType::kF32).is_ok());
  EXPECT_FALSE(Dim0Layout::make({{4}}, 0, DType::kF32).is_ok());
  EXPECT_FALSE(Dim0Layout::make({{4}}, runtime::fsdp::kMaxLayoutWorldSize + 1, DType::kF32).is_ok());
}

}  // namespace
}  // namespace shardlab::property
