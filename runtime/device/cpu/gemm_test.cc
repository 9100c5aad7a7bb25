// NOTE [GEMM bits]: every kernel path this CPU has and every thread count give exactly the
// bits of the definition, computed here by the plainest loops.
#include "runtime/device/cpu/gemm.h"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <vector>

#include "runtime/core/rng.h"
#include "runtime/device/cpu/device.h"

namespace shardlab::runtime::device::cpu {
namespace {

// The definition, element by element.
std::vector<float> reference(const GemmArgs& g, const std::vector<float>& c0) {
  std::vector<float> c = c0;
  for (std::int64_t i = 0; i < g.m; ++i) {
    for (std::int64_t j = 0; j < g.n; ++j) {
      float sum = 0.0f;
      for (std::int64_t p = 0; p < g.k; p += kGemmKc) {
        float acc = 0.0f;
        for (std::int64_t k = p; k < std::min(g.k, p + kGemmKc); ++k) {
          const float a = g.trans_a ? g.a[k * g.lda + i] : g.a[i * g.lda + k];
          const float b = g.trans_b ? g.b[j * g.ldb + k] : g.b[k * g.ldb + j];
          acc = std::fma(a, b, acc);
        }
        sum = sum + acc;
      }
      const float scaled = g.alpha * sum;
      if (g.beta == 0.0f) {
        c[i * g.ldc + j] = scaled;
      } else {
        const float kept = g.beta * c[i * g.ldc + j];
        c[i * g.ldc + j] = scaled + kept;
      }
    }
  }
  return c;
}

std::vector<GemmIsa> available() {
  std::vector<GemmIsa> out;
  for (GemmIsa isa : {GemmIsa::kScalar, GemmIsa::kAvx2, GemmIsa::kAvx512}) {
    if (static_cast<int>(isa) <= static_cast<int>(best_gemm_isa())) out.push_back(isa);
  }
  return out;
}

RC_GTEST_PROP(CpuGemmBits, EveryPathAndThreadCountGivesTheDefinitionsBits, ()) {
  const std::int64_t m = *rc::gen::inRange<std::int64_t>(0, 140);
  const std::int64_t n = *rc::gen::inRange<std::int64_t>(0, 140);
  const std::int64_t k =
      *rc::gen::oneOf(rc::gen::inRange<std::int64_t>(0, 40), rc::gen::inRange<std::int64_t>(250, 600));
  GemmArgs g;
  g.m = m;
  g.n = n;
  g.k = k;
  g.trans_a = *rc::gen::arbitrary<bool>();
  g.trans_b = *rc::gen::arbitrary<bool>();
  g.alpha = *rc::gen::element(1.0f, 0.125f, -0.7f);
  g.beta = *rc::gen::element(0.0f, 1.0f, 0.3f);
  g.lda = (g.trans_a ? m : k) + *rc::gen::inRange<std::int64_t>(0, 3);
  g.ldb = (g.trans_b ? k : n) + *rc::gen::inRange<std::int64_t>(0, 3);
  g.ldc = n + *rc::gen::inRange<std::int64_t>(0, 3);
  Rng rng(*rc::gen::arbitrary<std::uint64_t>());
  std::vector<float> a(static_cast<std::size_t>(std::max<std::int64_t>(1, (g.trans_a ? k : m) * g.lda)));
  std::vector<float> b(static_cast<std::size_t>(std::max<std::int64_t>(1, (g.trans_b ? n : k) * g.ldb)));
  std::vector<float> c0(static_cast<std::size_t>(std::max<std::int64_t>(1, m * g.ldc)));
  for (auto& v : a) v = rng.uniform(-1.0f, 1.0f);
  for (auto& v : b) v = rng.uniform(-1.0f, 1.0f);
  for (auto& v : c0) v = rng.uniform(-1.0f, 1.0f);
  g.a = a.data();
  g.b = b.data();
  const std::vector<float> want = reference(g, c0);
  for (GemmIsa isa : available()) {
    for (int threads : {1, 2, 3}) {
      std::vector<float> c = c0;
      g.c = c.data();
      gemm(g, isa, threads);
      RC_ASSERT(std::memcmp(c.data(), want.data(), c.size() * sizeof(float)) == 0);
    }
  }
}

// The batched form splits the batch over the pool; each item keeps the definition's bits.
TEST(CpuGemmBits, BatchedItemsGiveTheDefinitionsBitsOnEveryPath) {
  const std::int64_t batch = 5, m = 37, n = 70, k = 300;
  Rng rng(11);
  std::vector<float> a(batch * m * k), b(batch * k * n), c0(batch * m * n, 0.0f);
  for (auto& v : a) v = rng.uniform(-1.0f, 1.0f);
  for (auto& v : b) v = rng.uniform(-1.0f, 1.0f);
  GemmArgs g = contiguous_gemm(nullptr, false, nullptr, false, nullptr, m, n, k, 1.0f, 0.0f);
  std::vector<float> want;
  for (std::int64_t i = 0; i < batch; ++i) {
    GemmArgs one = g;
    one.a = a.data() + i * m * k;
    one.b = b.data() + i * k * n;
    const std::vector<float> item(static_cast<std::size_t>(m * n), 0.0f);
    const std::vector<float> r = reference(one, item);
    want.insert(want.end(), r.begin(), r.end());
  }
  for (GemmIsa isa : available()) {
    for (int threads : {1, 2}) {
      std::vector<float> c = c0;
      g.a = a.data();
      g.b = b.data();
      g.c = c.data();
      gemm_batched(g, batch, m * k, k * n, m * n, isa, threads);
      EXPECT_EQ(std::memcmp(c.data(), want.data(), c.size() * sizeof(float)), 0)
          << gemm_isa_name(isa) << ", " << threads << " thread(s)";
    }
  }
}

TEST(CpuGemmIsa, NamesParseAndUnknownOnesAreRefused) {
  for (GemmIsa isa : {GemmIsa::kScalar, GemmIsa::kAvx2, GemmIsa::kAvx512}) {
    EXPECT_EQ(*parse_gemm_isa(gemm_isa_name(isa)), isa);
  }
  const auto bad = parse_gemm_isa("sse9");
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("allowed: scalar, avx2, avx512"), std::string::npos);
}

}  // namespace
}  // namespace shardlab::runtime::device::cpu

namespace shardlab::runtime::device::cpu {
namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() &&
         std::memcmp(a.data<float>(), b.data<float>(), static_cast<std::size_t>(a.nbytes())) == 0;
}

// A fresh fp32 tensor of uniform values in [-bound, bound).
Tensor random_tensor(Device& dev, Rng& rng, const Shape& shape, float bound) {
  Tensor t = *dev.empty(shape, DType::kF32, MemoryCategory::kActivations, "t");
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = rng.uniform(-bound, bound);
  return t;
}

// NOTE [Element-wise ops on the pool]: an op over a large tensor (split over the pool)
// gives the bits of the same op over small slices of it (each below the split's grain, so
// computed in one piece): chunk boundaries change nothing.
TEST(CpuElementwiseSplit, LargeTensorsGiveTheBitsOfTheirSlices) {
  CpuDevice cpu_device;
  Device& dev = cpu_device;  // the seam's default streams
  Rng rng(5);
  const std::int64_t rows = 512, cols = 384;  // 196,608 elements: several chunks
  auto make = [&](const Shape& s) { return random_tensor(dev, rng, s, 3.0f); };
  const Tensor x = make({rows, cols}), dy = make({rows, cols});
  const auto slice = [](const Tensor& t, std::int64_t r) {  // t[r : r+1] along the first dim
    Shape one = t.shape();
    one[0] = 1;
    const std::int64_t per = t.numel() / t.dim(0);
    return *t.narrow(r * per, one, "slice");
  };
  // GELU forward and backward, element-wise multiply.
  {
    const Tensor y = make({rows, cols}), dx = make({rows, cols}), c = make({rows, cols});
    ASSERT_TRUE(dev.activation(Activation::kGelu, x, y).is_ok());
    ASSERT_TRUE(dev.activation_backward(Activation::kGelu, x, dy, dx).is_ok());
    ASSERT_TRUE(dev.multiply(x, dy, c).is_ok());
    const Tensor y1 = make({rows, cols}), dx1 = make({rows, cols}), c1 = make({rows, cols});
    for (std::int64_t r = 0; r < rows; ++r) {
      ASSERT_TRUE(dev.activation(Activation::kGelu, slice(x, r), slice(y1, r)).is_ok());
      ASSERT_TRUE(dev.activation_backward(Activation::kGelu, slice(x, r), slice(dy, r), slice(dx1, r)).is_ok());
      ASSERT_TRUE(dev.multiply(slice(x, r), slice(dy, r), slice(c1, r)).is_ok());
    }
    EXPECT_TRUE(same_bits(y, y1));
    EXPECT_TRUE(same_bits(dx, dx1));
    EXPECT_TRUE(same_bits(c, c1));
  }
  // LayerNorm rows.
  {
    const Tensor g = make({cols}), b = make({cols}), y = make({rows, cols}), mean = make({rows}), rstd = make({rows});
    const Tensor y1 = make({rows, cols}), mean1 = make({rows}), rstd1 = make({rows});
    ASSERT_TRUE(dev.layer_norm(x, g, b, 1e-12f, y, mean, rstd).is_ok());
    for (std::int64_t r = 0; r < rows; ++r) {
      ASSERT_TRUE(dev.layer_norm(slice(x, r), g, b, 1e-12f, slice(y1, r), slice(mean1, r), slice(rstd1, r)).is_ok());
    }
    EXPECT_TRUE(same_bits(y, y1));
    EXPECT_TRUE(same_bits(mean, mean1));
    EXPECT_TRUE(same_bits(rstd, rstd1));
  }
  // Attention softmax over [B, A, T, T] and its backward; dropout rows keep their streams.
  {
    const std::int64_t batch = 4, heads = 4, t = 96;
    const Tensor scores = make({batch, heads, t, t}), dprobs = make({batch, heads, t, t});
    Tensor mask = *dev.empty({batch, t}, DType::kF32, MemoryCategory::kActivations, "mask");
    for (std::int64_t i = 0; i < mask.numel(); ++i) mask.data<float>()[i] = (i % 7) != 3 ? 1.0f : 0.0f;
    const Tensor probs = make({batch, heads, t, t}), ds = make({batch, heads, t, t});
    ASSERT_TRUE(dev.attention_softmax(scores, mask, 0.125f, probs).is_ok());
    ASSERT_TRUE(dev.attention_softmax_backward(probs, dprobs, 0.125f, ds).is_ok());
    const Tensor probs1 = make({batch, heads, t, t}), ds1 = make({batch, heads, t, t});
    for (std::int64_t b = 0; b < batch; ++b) {
      ASSERT_TRUE(dev.attention_softmax(slice(scores, b), slice(mask, b), 0.125f, slice(probs1, b)).is_ok());
      ASSERT_TRUE(dev.attention_softmax_backward(slice(probs, b), slice(dprobs, b), 0.125f, slice(ds1, b)).is_ok());
    }
    EXPECT_TRUE(same_bits(probs, probs1));
    EXPECT_TRUE(same_bits(ds, ds1));
    const Tensor drop = make({rows, cols}), drop1 = make({rows, cols});
    ASSERT_TRUE(dev.dropout_mask(drop, 0.1f, Rng(9), 1000, 3).is_ok());
    for (std::int64_t r = 0; r < rows; ++r)
      ASSERT_TRUE(dev.dropout_mask(slice(drop1, r), 0.1f, Rng(9), 1000 + r, 3).is_ok());
    EXPECT_TRUE(same_bits(drop, drop1));
  }
}

// Ops with reductions across rows (LayerNorm's dgamma/dbeta, bias gradients) split by
// columns: on the pool they give the bits of the same call on one thread (SerialScope).
TEST(CpuElementwiseSplit, ColumnReductionsOnThePoolGiveTheSerialBits) {
  CpuDevice cpu_device;
  Device& dev = cpu_device;
  Rng rng(6);
  const std::int64_t rows = 1024, cols = 768;
  auto make = [&](const Shape& s) { return random_tensor(dev, rng, s, 2.0f); };
  const Tensor x = make({rows, cols}), dy = make({rows, cols}), gamma = make({cols}), beta = make({cols});
  const Tensor y = make({rows, cols}), mean = make({rows}), rstd = make({rows});
  ASSERT_TRUE(dev.layer_norm(x, gamma, beta, 1e-12f, y, mean, rstd).is_ok());
  struct Out {
    Tensor dx, dgamma, dbeta, dbias;
  };
  const auto run = [&](bool serial) {
    Out o{make({rows, cols}), make({cols}), make({cols}), make({cols})};
    std::optional<SerialScope> scope;
    if (serial) scope.emplace();
    EXPECT_TRUE(dev.layer_norm_backward(x, dy, mean, rstd, gamma, o.dx, o.dgamma, o.dbeta, false).is_ok());
    EXPECT_TRUE(dev.bias_grad(dy, o.dbias, false).is_ok());
    return o;
  };
  const Out pooled = run(false), alone = run(true);
  EXPECT_TRUE(same_bits(pooled.dx, alone.dx));
  EXPECT_TRUE(same_bits(pooled.dgamma, alone.dgamma));
  EXPECT_TRUE(same_bits(pooled.dbeta, alone.dbeta));
  EXPECT_TRUE(same_bits(pooled.dbias, alone.dbias));
}

// Cross-entropy rows (the loss summed in row order afterwards), the head transpose,
// copies, fills, scale and axpy on the pool: the bits of one thread.
TEST(CpuElementwiseSplit, RowOpsCopiesAndFillsOnThePoolGiveTheSerialBits) {
  CpuDevice cpu_device;
  Device& dev = cpu_device;
  Rng rng(7);
  const std::int64_t rows = 256, classes = 3001;
  auto make = [&](const Shape& s) { return random_tensor(dev, rng, s, 4.0f); };
  const Tensor logits = make({rows, classes});
  Tensor labels = *dev.empty({rows}, DType::kI64, MemoryCategory::kActivations, "labels");
  for (std::int64_t r = 0; r < rows; ++r) labels.data<std::int64_t>()[r] = r % 5 == 2 ? -100 : (r * 37) % classes;
  const Tensor heads = make({4, 96, 12, 64});
  struct Out {
    Tensor loss, dlogits, transposed, copied, filled, scaled, summed;
  };
  const auto run = [&](bool serial) {
    Out o{make({1}),
          make({rows, classes}),
          make({4, 12, 96, 64}),
          make({rows, classes}),
          make({rows, classes}),
          make({rows, classes}),
          make({rows, classes})};
    std::optional<SerialScope> scope;
    if (serial) scope.emplace();
    EXPECT_TRUE(dev.softmax_cross_entropy(logits, labels, o.loss, o.dlogits, 0.01f, -100).is_ok());
    EXPECT_TRUE(dev.transpose_1_2(heads, o.transposed).is_ok());
    EXPECT_TRUE(dev.copy(logits, o.copied).is_ok());
    EXPECT_TRUE(dev.fill(o.filled, 0.375f).is_ok());
    EXPECT_TRUE(dev.copy(logits, o.scaled).is_ok());
    EXPECT_TRUE(dev.scale(o.scaled, -0.3f).is_ok());
    EXPECT_TRUE(dev.copy(logits, o.summed).is_ok());
    EXPECT_TRUE(dev.axpy(0.7f, o.dlogits, o.summed).is_ok());
    return o;
  };
  const Out pooled = run(false), alone = run(true);
  EXPECT_TRUE(same_bits(pooled.loss, alone.loss));
  EXPECT_TRUE(same_bits(pooled.dlogits, alone.dlogits));
  EXPECT_TRUE(same_bits(pooled.transposed, alone.transposed));
  EXPECT_TRUE(same_bits(pooled.copied, logits));
  EXPECT_TRUE(same_bits(pooled.filled, alone.filled));
  EXPECT_TRUE(same_bits(pooled.scaled, alone.scaled));
  EXPECT_TRUE(same_bits(pooled.summed, alone.summed));
  // The transpose moved each row where the definition puts it.
  for (std::int64_t b = 0; b < 4; ++b)
    for (std::int64_t q = 0; q < 96; q += 31)
      for (std::int64_t r = 0; r < 12; r += 5)
        EXPECT_EQ(pooled.transposed.data<float>()[((b * 12 + r) * 96 + q) * 64 + 3],
                  heads.data<float>()[((b * 96 + q) * 12 + r) * 64 + 3]);
}

}  // namespace
}  // namespace shardlab::runtime::device::cpu
