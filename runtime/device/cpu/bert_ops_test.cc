// Tests for the CpuDevice ops BERT needs: batched_gemm, layer_norm, attention_softmax,
// embedding (each with its backward) and the tanh activation.
//
// Forward values are checked against plain double-precision references on seeded random
// inputs; tolerances are fp32 rounding (eps = 2^-24 ~ 6e-8 relative per operation) times
// the reduction length, with headroom. Every backward is checked against central finite
// differences of a scalar loss L = sum(w ⊙ outputs) (w fixed random weights), evaluated
// through the device's own fp32 forward in double: with step h = 1e-2 the truncation error
// is O(h²) ~ 1e-4 and the fp32 rounding of L contributes ~ eps·|L|/h ~ 1e-5, so FD and
// analytic gradients must agree to kFdTolerance (absolute, scaled by max(1, |fd|)).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "runtime/core/rng.h"
#include "runtime/device/cpu/device.h"
#include "testing/tensors.h"

namespace shardlab::runtime::device::cpu {
namespace {

using ::testing::HasSubstr;

constexpr float kFdStep = 1e-2f;
constexpr double kFdTolerance = 2e-3;

using testlib::get;
using testlib::make;
using testlib::random_f32;
using testlib::set;

Tensor make_ids(CpuDevice& dev, const std::vector<std::int64_t>& values) {
  Tensor t = make(dev, {static_cast<std::int64_t>(values.size())}, DType::kI64, "ids");
  std::memcpy(t.data<std::int64_t>(), values.data(), values.size() * sizeof(std::int64_t));
  return t;
}

// sum(w ⊙ t) in double: the scalar loss whose gradient with respect to t is w.
double weighted_sum(const Tensor& t, const Tensor& w) {
  double total = 0.0;
  for (std::int64_t i = 0; i < t.numel(); ++i) total += static_cast<double>(t.data<float>()[i]) * w.data<float>()[i];
  return total;
}

// Central differences of loss() with respect to every element of x (x is restored).
std::vector<double> finite_differences(const Tensor& x, const std::function<double()>& loss) {
  std::vector<double> grad(static_cast<std::size_t>(x.numel()));
  float* p = x.data<float>();
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    const float saved = p[i];
    p[i] = saved + kFdStep;
    const double up = loss();
    p[i] = saved - kFdStep;
    const double down = loss();
    p[i] = saved;
    grad[static_cast<std::size_t>(i)] = (up - down) / (2.0 * static_cast<double>(kFdStep));
  }
  return grad;
}

void expect_matches_fd(const Tensor& analytic, const std::vector<double>& fd, const char* what) {
  ASSERT_EQ(analytic.numel(), static_cast<std::int64_t>(fd.size())) << what;
  for (std::size_t i = 0; i < fd.size(); ++i) {
    EXPECT_NEAR(analytic.data<float>()[i], fd[i], kFdTolerance * std::max(1.0, std::abs(fd[i])))
        << what << " element " << i;
  }
}

void expect_invalid(const Status& s, const std::string& op) {
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.message();
  EXPECT_THAT(s.message(), HasSubstr(op + ":"));
}

// ---- batched_gemm -----------------------------------------------------------------------------

// op(a[i]) is [m, k] and op(b[i]) is [k, n]; returns alpha * op(a) op(b) + beta * c0 per batch.
std::vector<double> ref_batched_gemm(const Tensor& a, bool ta, const Tensor& b, bool tb, const std::vector<float>& c0,
                                     std::int64_t batch, std::int64_t m, std::int64_t k, std::int64_t n, double alpha,
                                     double beta) {
  std::vector<double> out(static_cast<std::size_t>(batch * m * n));
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  for (std::int64_t bi = 0; bi < batch; ++bi) {
    for (std::int64_t i = 0; i < m; ++i) {
      for (std::int64_t j = 0; j < n; ++j) {
        double acc = 0.0;
        for (std::int64_t p = 0; p < k; ++p) {
          const double av = ta ? pa[bi * k * m + p * m + i] : pa[bi * m * k + i * k + p];
          const double bv = tb ? pb[bi * n * k + j * k + p] : pb[bi * k * n + p * n + j];
          acc += av * bv;
        }
        const std::size_t idx = static_cast<std::size_t>(bi * m * n + i * n + j);
        out[idx] = alpha * acc + (beta == 0.0 ? 0.0 : beta * c0[idx]);
      }
    }
  }
  return out;
}

TEST(CpuBatchedGemmTest, MatchesDoubleReferenceForEveryTransposeCombination) {
  CpuDevice dev;
  Rng rng(101);
  constexpr std::int64_t kBatch = 3, kM = 4, kK = 5, kN = 2;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const Tensor a = random_f32(dev, ta ? Shape{kBatch, kK, kM} : Shape{kBatch, kM, kK}, rng, "a");
      const Tensor b = random_f32(dev, tb ? Shape{kBatch, kN, kK} : Shape{kBatch, kK, kN}, rng, "b");
      const Tensor c = random_f32(dev, {kBatch, kM, kN}, rng, "c");
      const std::vector<float> c0 = get(c);
      ASSERT_TRUE(dev.batched_gemm(a, ta, b, tb, c, 0.7f, 0.3f, kComputeStream).is_ok());
      const std::vector<double> want = ref_batched_gemm(a, ta, b, tb, c0, kBatch, kM, kK, kN, 0.7, 0.3);
      // K = 5 products of values in [-1, 1]: rounding stays well under 1e-5.
      for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(get(c)[i], want[i], 1e-5) << ta << tb << " at " << i;
    }
  }
}

TEST(CpuBatchedGemmTest, BetaZeroIgnoresOldContentsEvenNaN) {
  CpuDevice dev;
  Rng rng(102);
  const Tensor a = random_f32(dev, {2, 3, 4}, rng, "a");
  const Tensor b = random_f32(dev, {2, 4, 3}, rng, "b");
  const Tensor c = make(dev, {2, 3, 3}, DType::kF32, "c");
  ASSERT_TRUE(dev.fill(c, std::numeric_limits<float>::quiet_NaN(), kComputeStream).is_ok());
  ASSERT_TRUE(dev.batched_gemm(a, false, b, false, c, 1.0f, 0.0f, kComputeStream).is_ok());
  const std::vector<double> want = ref_batched_gemm(a, false, b, false, get(c), 2, 3, 4, 3, 1.0, 0.0);
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(get(c)[i], want[i], 1e-5);
}

// The backward of c = a·b is two batched_gemms: da = dc·bᵀ, db = aᵀ·dc.
TEST(CpuBatchedGemmTest, TransposedProductsAreTheGradientsByFiniteDifferences) {
  CpuDevice dev;
  Rng rng(103);
  const Tensor a = random_f32(dev, {2, 3, 4}, rng, "a");
  const Tensor b = random_f32(dev, {2, 4, 5}, rng, "b");
  const Tensor c = make(dev, {2, 3, 5}, DType::kF32, "c");
  const Tensor w = random_f32(dev, c.shape(), rng, "w");
  const Tensor da = make(dev, a.shape(), DType::kF32, "da");
  const Tensor db = make(dev, b.shape(), DType::kF32, "db");
  ASSERT_TRUE(dev.batched_gemm(w, false, b, true, da, 1.0f, 0.0f, kComputeStream).is_ok());
  ASSERT_TRUE(dev.batched_gemm(a, true, w, false, db, 1.0f, 0.0f, kComputeStream).is_ok());
  const auto loss = [&] {
    SHARDLAB_CHECK_OK(dev.batched_gemm(a, false, b, false, c, 1.0f, 0.0f, kComputeStream));
    return weighted_sum(c, w);
  };
  expect_matches_fd(da, finite_differences(a, loss), "da");
  expect_matches_fd(db, finite_differences(b, loss), "db");
}

TEST(CpuBatchedGemmTest, RejectsBadShapesAndDtypesWithoutWriting) {
  CpuDevice dev;
  Rng rng(104);
  const Tensor a = random_f32(dev, {2, 3, 4}, rng, "a");
  const Tensor b = random_f32(dev, {3, 4, 5}, rng, "b");  // batch 3 != 2
  const Tensor c = random_f32(dev, {2, 3, 5}, rng, "c");
  const std::vector<float> before = get(c);
  Status s = dev.batched_gemm(a, false, b, false, c, 1.0f, 0.0f, kComputeStream);
  expect_invalid(s, "batched_gemm");
  EXPECT_THAT(s.message(), HasSubstr("[batch, M, K] × [batch, K, N] = c [batch, M, N]"));
  EXPECT_EQ(get(c), before);

  const Tensor b_inner = random_f32(dev, {2, 5, 5}, rng, "b_inner");  // K 5 != 4
  expect_invalid(dev.batched_gemm(a, false, b_inner, false, c, 1.0f, 0.0f, kComputeStream), "batched_gemm");
  const Tensor flat = random_f32(dev, {3, 4}, rng, "flat");
  s = dev.batched_gemm(flat, false, b, false, c, 1.0f, 0.0f, kComputeStream);
  expect_invalid(s, "batched_gemm");
  EXPECT_THAT(s.message(), HasSubstr("must be 3-D"));
  const Tensor half = make(dev, {2, 3, 4}, DType::kBF16, "half");
  s = dev.batched_gemm(half, false, b, false, c, 1.0f, 0.0f, kComputeStream);
  expect_invalid(s, "batched_gemm");
  EXPECT_THAT(s.message(), HasSubstr("must be fp32"));
  EXPECT_EQ(get(c), before);
}

// ---- layer_norm -------------------------------------------------------------------------------

struct LayerNormCase {
  Tensor x, gamma, beta, y, mean, rstd;
};

LayerNormCase make_layer_norm_case(CpuDevice& dev, Rng& rng, std::int64_t n, std::int64_t h) {
  LayerNormCase c;
  c.x = random_f32(dev, {n, h}, rng, "x", -1.0f, 2.0f);  // off-centre so the mean matters
  c.gamma = random_f32(dev, {h}, rng, "gamma", 0.5f, 1.5f);
  c.beta = random_f32(dev, {h}, rng, "beta");
  c.y = make(dev, {n, h}, DType::kF32, "y");
  c.mean = make(dev, {n}, DType::kF32, "mean");
  c.rstd = make(dev, {n}, DType::kF32, "rstd");
  return c;
}

TEST(CpuLayerNormTest, MatchesDoubleReference) {
  CpuDevice dev;
  Rng rng(201);
  constexpr std::int64_t kN = 5, kH = 7;
  constexpr float kEps = 1e-5f;
  const LayerNormCase c = make_layer_norm_case(dev, rng, kN, kH);
  ASSERT_TRUE(dev.layer_norm(c.x, c.gamma, c.beta, kEps, c.y, c.mean, c.rstd, kComputeStream).is_ok());
  const float* x = c.x.data<float>();
  for (std::int64_t r = 0; r < kN; ++r) {
    double mu = 0.0, var = 0.0;
    for (std::int64_t j = 0; j < kH; ++j) mu += x[r * kH + j];
    mu /= kH;
    for (std::int64_t j = 0; j < kH; ++j) var += (x[r * kH + j] - mu) * (x[r * kH + j] - mu);
    var /= kH;  // biased, as PyTorch
    const double rstd = 1.0 / std::sqrt(var + kEps);
    EXPECT_NEAR(c.mean.data<float>()[r], mu, 1e-6);
    EXPECT_NEAR(c.rstd.data<float>()[r], rstd, 1e-5 * rstd);
    for (std::int64_t j = 0; j < kH; ++j) {
      const double want = (x[r * kH + j] - mu) * rstd * c.gamma.data<float>()[j] + c.beta.data<float>()[j];
      EXPECT_NEAR(c.y.data<float>()[r * kH + j], want, 1e-5) << r << ", " << j;
    }
  }
}

TEST(CpuLayerNormTest, InPlaceMatchesOutOfPlace) {
  CpuDevice dev;
  Rng rng(202);
  const LayerNormCase c = make_layer_norm_case(dev, rng, 3, 6);
  ASSERT_TRUE(dev.layer_norm(c.x, c.gamma, c.beta, 1e-12f, c.y, c.mean, c.rstd, kComputeStream).is_ok());
  ASSERT_TRUE(dev.layer_norm(c.x, c.gamma, c.beta, 1e-12f, c.x, c.mean, c.rstd, kComputeStream).is_ok());
  EXPECT_EQ(get(c.x), get(c.y));
}

TEST(CpuLayerNormTest, BackwardMatchesFiniteDifferences) {
  CpuDevice dev;
  Rng rng(203);
  constexpr std::int64_t kN = 4, kH = 6;
  constexpr float kEps = 1e-5f;
  const LayerNormCase c = make_layer_norm_case(dev, rng, kN, kH);
  const Tensor w = random_f32(dev, {kN, kH}, rng, "w");
  const Tensor dx = make(dev, {kN, kH}, DType::kF32, "dx");
  const Tensor dgamma = make(dev, {kH}, DType::kF32, "dgamma");
  const Tensor dbeta = make(dev, {kH}, DType::kF32, "dbeta");
  ASSERT_TRUE(dev.layer_norm(c.x, c.gamma, c.beta, kEps, c.y, c.mean, c.rstd, kComputeStream).is_ok());
  ASSERT_TRUE(
      dev.layer_norm_backward(c.x, w, c.mean, c.rstd, c.gamma, dx, dgamma, dbeta, false, kComputeStream).is_ok());
  const Tensor mean2 = make(dev, {kN}, DType::kF32, "mean2");
  const Tensor rstd2 = make(dev, {kN}, DType::kF32, "rstd2");
  const auto loss = [&] {
    SHARDLAB_CHECK_OK(dev.layer_norm(c.x, c.gamma, c.beta, kEps, c.y, mean2, rstd2, kComputeStream));
    return weighted_sum(c.y, w);
  };
  expect_matches_fd(dx, finite_differences(c.x, loss), "dx");
  expect_matches_fd(dgamma, finite_differences(c.gamma, loss), "dgamma");
  expect_matches_fd(dbeta, finite_differences(c.beta, loss), "dbeta");
}

TEST(CpuLayerNormTest, BackwardAccumulatesAndAllowsDxToAliasDy) {
  CpuDevice dev;
  Rng rng(204);
  constexpr std::int64_t kN = 3, kH = 5;
  const LayerNormCase c = make_layer_norm_case(dev, rng, kN, kH);
  ASSERT_TRUE(dev.layer_norm(c.x, c.gamma, c.beta, 1e-5f, c.y, c.mean, c.rstd, kComputeStream).is_ok());
  const Tensor dy = random_f32(dev, {kN, kH}, rng, "dy");
  const Tensor dx = make(dev, {kN, kH}, DType::kF32, "dx");
  const Tensor dgamma = make(dev, {kH}, DType::kF32, "dgamma");
  const Tensor dbeta = make(dev, {kH}, DType::kF32, "dbeta");
  ASSERT_TRUE(
      dev.layer_norm_backward(c.x, dy, c.mean, c.rstd, c.gamma, dx, dgamma, dbeta, false, kComputeStream).is_ok());
  const std::vector<float> g1 = get(dgamma), b1 = get(dbeta);
  ASSERT_TRUE(
      dev.layer_norm_backward(c.x, dy, c.mean, c.rstd, c.gamma, dy, dgamma, dbeta, true, kComputeStream).is_ok());
  EXPECT_EQ(get(dy), get(dx));  // in place (dx = dy) gives the same dx
  // The second pass adds row by row onto the first total, so the sums differ from 2·g1 only
  // by fp32 rounding of a 3-term reduction.
  for (std::int64_t j = 0; j < kH; ++j) {
    EXPECT_NEAR(dgamma.data<float>()[j], 2.0 * g1[j], 1e-6 * std::max(1.0f, std::abs(g1[j])));
    EXPECT_NEAR(dbeta.data<float>()[j], 2.0 * b1[j], 1e-6 * std::max(1.0f, std::abs(b1[j])));
  }
}

TEST(CpuLayerNormTest, RejectsBadShapesAndDtypesWithoutWriting) {
  CpuDevice dev;
  Rng rng(205);
  LayerNormCase c = make_layer_norm_case(dev, rng, 3, 4);
  ASSERT_TRUE(dev.fill(c.y, 7.0f, kComputeStream).is_ok());
  const Tensor short_gamma = random_f32(dev, {3}, rng, "short_gamma");
  Status s = dev.layer_norm(c.x, short_gamma, c.beta, 1e-5f, c.y, c.mean, c.rstd, kComputeStream);
  expect_invalid(s, "layer_norm");
  EXPECT_THAT(s.message(), HasSubstr("short_gamma"));
  EXPECT_THAT(s.message(), HasSubstr("must be [4]"));
  const Tensor short_mean = make(dev, {2}, DType::kF32, "short_mean");
  s = dev.layer_norm(c.x, c.gamma, c.beta, 1e-5f, c.y, short_mean, c.rstd, kComputeStream);
  expect_invalid(s, "layer_norm");
  EXPECT_THAT(s.message(), HasSubstr("one mean per row"));
  const Tensor half = make(dev, {3, 4}, DType::kBF16, "half");
  s = dev.layer_norm(half, c.gamma, c.beta, 1e-5f, c.y, c.mean, c.rstd, kComputeStream);
  expect_invalid(s, "layer_norm");
  EXPECT_THAT(s.message(), HasSubstr("must be fp32"));
  EXPECT_EQ(get(c.y), std::vector<float>(12, 7.0f));

  const Tensor dx = make(dev, {3, 4}, DType::kF32, "dx");
  const Tensor dgamma = make(dev, {4}, DType::kF32, "dgamma");
  const Tensor wrong_dbeta = make(dev, {5}, DType::kF32, "wrong_dbeta");
  ASSERT_TRUE(dev.fill(dgamma, 3.0f, kComputeStream).is_ok());
  s = dev.layer_norm_backward(c.x, c.y, c.mean, c.rstd, c.gamma, dx, dgamma, wrong_dbeta, false, kComputeStream);
  expect_invalid(s, "layer_norm_backward");
  EXPECT_THAT(s.message(), HasSubstr("wrong_dbeta"));
  EXPECT_EQ(get(dgamma), std::vector<float>(4, 3.0f));
}

// ---- attention_softmax ------------------------------------------------------------------------

TEST(CpuAttentionSoftmaxTest, MatchesDoubleReferenceWithMaskedKeys) {
  CpuDevice dev;
  Rng rng(301);
  constexpr std::int64_t kB = 2, kA = 2, kT = 5;
  constexpr float kScale = 0.5f;
  const Tensor scores = random_f32(dev, {kB, kA, kT, kT}, rng, "scores", -3.0f, 3.0f);
  const Tensor mask = make(dev, {kB, kT}, DType::kF32, "mask");
  set(mask, {1, 1, 1, 0, 0, /* batch 1 */ 1, 0, 1, 1, 1});
  const Tensor probs = make(dev, scores.shape(), DType::kF32, "probs");
  ASSERT_TRUE(dev.attention_softmax(scores, mask, kScale, probs, kComputeStream).is_ok());
  for (std::int64_t b = 0; b < kB; ++b) {
    for (std::int64_t r = 0; r < kA * kT; ++r) {
      const std::int64_t off = (b * kA * kT + r) * kT;
      double z[kT], mx = -1e300, sum = 0.0;
      for (std::int64_t j = 0; j < kT; ++j) {
        const bool attend = mask.data<float>()[b * kT + j] == 1.0f;
        z[j] = attend ? kScale * static_cast<double>(scores.data<float>()[off + j]) : -1e300;
        mx = std::max(mx, z[j]);
      }
      for (std::int64_t j = 0; j < kT; ++j) sum += std::exp(z[j] - mx);
      for (std::int64_t j = 0; j < kT; ++j) {
        EXPECT_NEAR(probs.data<float>()[off + j], std::exp(z[j] - mx) / sum, 1e-6) << b << ", " << r << ", " << j;
      }
    }
  }
}

TEST(CpuAttentionSoftmaxTest, FullyMaskedRowIsFiniteAndUniform) {
  CpuDevice dev;
  Rng rng(302);
  const Tensor scores = random_f32(dev, {2, 1, 3, 4}, rng, "scores", -5.0f, 5.0f);
  const Tensor mask = make(dev, {2, 4}, DType::kF32, "mask");
  set(mask, {0, 0, 0, 0, /* batch 1 */ 1, 1, 0, 1});
  const Tensor probs = make(dev, scores.shape(), DType::kF32, "probs");
  ASSERT_TRUE(dev.attention_softmax(scores, mask, 1.0f, probs, kComputeStream).is_ok());
  for (std::int64_t i = 0; i < 12; ++i) {
    ASSERT_TRUE(std::isfinite(probs.data<float>()[i]));
    EXPECT_EQ(probs.data<float>()[i], 0.25f) << i;
  }
  for (std::int64_t i = 12; i < 24; ++i) ASSERT_TRUE(std::isfinite(probs.data<float>()[i]));
}

TEST(CpuAttentionSoftmaxTest, InPlaceMatchesOutOfPlace) {
  CpuDevice dev;
  Rng rng(303);
  const Tensor scores = random_f32(dev, {1, 2, 3, 3}, rng, "scores");
  const Tensor mask = make(dev, {1, 3}, DType::kF32, "mask");
  set(mask, {1, 0, 1});
  const Tensor probs = make(dev, scores.shape(), DType::kF32, "probs");
  ASSERT_TRUE(dev.attention_softmax(scores, mask, 0.125f, probs, kComputeStream).is_ok());
  ASSERT_TRUE(dev.attention_softmax(scores, mask, 0.125f, scores, kComputeStream).is_ok());
  EXPECT_EQ(get(scores), get(probs));
}

TEST(CpuAttentionSoftmaxTest, BackwardMatchesFiniteDifferences) {
  CpuDevice dev;
  Rng rng(304);
  constexpr std::int64_t kB = 2, kA = 1, kT = 4;
  constexpr float kScale = 0.7f;
  const Tensor scores = random_f32(dev, {kB, kA, kT, kT}, rng, "scores");
  const Tensor mask = make(dev, {kB, kT}, DType::kF32, "mask");
  set(mask, {1, 1, 0, 1, /* batch 1 */ 1, 1, 1, 1});
  const Tensor probs = make(dev, scores.shape(), DType::kF32, "probs");
  const Tensor w = random_f32(dev, scores.shape(), rng, "w");
  const Tensor dscores = make(dev, scores.shape(), DType::kF32, "dscores");
  ASSERT_TRUE(dev.attention_softmax(scores, mask, kScale, probs, kComputeStream).is_ok());
  ASSERT_TRUE(dev.attention_softmax_backward(probs, w, kScale, dscores, kComputeStream).is_ok());
  const auto loss = [&] {
    SHARDLAB_CHECK_OK(dev.attention_softmax(scores, mask, kScale, probs, kComputeStream));
    return weighted_sum(probs, w);
  };
  expect_matches_fd(dscores, finite_differences(scores, loss), "dscores");
  // Masked keys get no gradient.
  for (std::int64_t r = 0; r < kA * kT; ++r) EXPECT_EQ(dscores.data<float>()[r * kT + 2], 0.0f);
  // dscores may alias dprobs (probs first recomputed from the restored scores).
  ASSERT_TRUE(dev.attention_softmax(scores, mask, kScale, probs, kComputeStream).is_ok());
  ASSERT_TRUE(dev.attention_softmax_backward(probs, w, kScale, w, kComputeStream).is_ok());
  EXPECT_EQ(get(w), get(dscores));
}

TEST(CpuAttentionSoftmaxTest, RejectsBadShapesAndDtypesWithoutWriting) {
  CpuDevice dev;
  Rng rng(305);
  const Tensor scores = random_f32(dev, {2, 1, 3, 3}, rng, "scores");
  const Tensor probs = make(dev, scores.shape(), DType::kF32, "probs");
  ASSERT_TRUE(dev.fill(probs, 5.0f, kComputeStream).is_ok());
  const Tensor wrong_mask = make(dev, {2, 4}, DType::kF32, "wrong_mask");
  Status s = dev.attention_softmax(scores, wrong_mask, 1.0f, probs, kComputeStream);
  expect_invalid(s, "attention_softmax");
  EXPECT_THAT(s.message(), HasSubstr("must be [2, 3]"));
  const Tensor int_mask = make(dev, {2, 3}, DType::kI64, "int_mask");
  s = dev.attention_softmax(scores, int_mask, 1.0f, probs, kComputeStream);
  expect_invalid(s, "attention_softmax");
  EXPECT_THAT(s.message(), HasSubstr("must be fp32"));
  const Tensor flat = random_f32(dev, {2, 3, 3}, rng, "flat");
  const Tensor mask = make(dev, {2, 3}, DType::kF32, "mask");
  s = dev.attention_softmax(flat, mask, 1.0f, probs, kComputeStream);
  expect_invalid(s, "attention_softmax");
  EXPECT_THAT(s.message(), HasSubstr("4-D [B, A, Tq, Tk]"));
  EXPECT_EQ(get(probs), std::vector<float>(18, 5.0f));

  const Tensor wrong_dprobs = random_f32(dev, {2, 1, 3, 2}, rng, "wrong_dprobs");
  s = dev.attention_softmax_backward(probs, wrong_dprobs, 1.0f, scores, kComputeStream);
  expect_invalid(s, "attention_softmax_backward");
  EXPECT_THAT(s.message(), HasSubstr("wrong_dprobs"));
}

// ---- embedding --------------------------------------------------------------------------------

TEST(CpuEmbeddingTest, GathersRows) {
  CpuDevice dev;
  Rng rng(401);
  constexpr std::int64_t kV = 6, kH = 3;
  const Tensor table = random_f32(dev, {kV, kH}, rng, "table");
  const std::vector<std::int64_t> id_values = {4, 0, 4, 5, 2};
  const Tensor ids = make_ids(dev, id_values);
  const Tensor out = make(dev, {5, kH}, DType::kF32, "out");
  ASSERT_TRUE(dev.embedding(table, ids, out, kComputeStream).is_ok());
  for (std::size_t n = 0; n < id_values.size(); ++n) {
    for (std::int64_t j = 0; j < kH; ++j) {
      EXPECT_EQ(out.data<float>()[static_cast<std::int64_t>(n) * kH + j], table.data<float>()[id_values[n] * kH + j]);
    }
  }
}

TEST(CpuEmbeddingTest, BackwardScatterAddsInRowOrderAndMatchesFiniteDifferences) {
  CpuDevice dev;
  Rng rng(402);
  constexpr std::int64_t kV = 5, kH = 3;
  const Tensor table = random_f32(dev, {kV, kH}, rng, "table");
  const std::vector<std::int64_t> id_values = {1, 3, 1, 1, 0, 4};  // 2 is never used
  const Tensor ids = make_ids(dev, id_values);
  const std::int64_t n = static_cast<std::int64_t>(id_values.size());
  const Tensor out = make(dev, {n, kH}, DType::kF32, "out");
  const Tensor w = random_f32(dev, {n, kH}, rng, "w");
  const Tensor dtable = make(dev, {kV, kH}, DType::kF32, "dtable");
  ASSERT_TRUE(dev.fill(dtable, 9.0f, kComputeStream).is_ok());  // overwritten without accumulate
  ASSERT_TRUE(dev.embedding_backward(w, ids, dtable, false, kComputeStream).is_ok());
  // Same summation order in fp32 gives bit-identical results.
  std::vector<float> want(static_cast<std::size_t>(kV * kH), 0.0f);
  for (std::int64_t i = 0; i < n; ++i) {
    for (std::int64_t j = 0; j < kH; ++j)
      want[static_cast<std::size_t>(id_values[i] * kH + j)] += w.data<float>()[i * kH + j];
  }
  EXPECT_EQ(get(dtable), want);
  const auto loss = [&] {
    SHARDLAB_CHECK_OK(dev.embedding(table, ids, out, kComputeStream));
    return weighted_sum(out, w);
  };
  expect_matches_fd(dtable, finite_differences(table, loss), "dtable");

  ASSERT_TRUE(dev.embedding_backward(w, ids, dtable, true, kComputeStream).is_ok());
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_EQ(dtable.data<float>()[i], want[i] + want[i]);
}

TEST(CpuEmbeddingTest, OutOfRangeIdNamesIndexValueAndVocabWithoutWriting) {
  CpuDevice dev;
  Rng rng(403);
  const Tensor table = random_f32(dev, {6, 2}, rng, "table");
  const Tensor out = make(dev, {3, 2}, DType::kF32, "out");
  ASSERT_TRUE(dev.fill(out, 8.0f, kComputeStream).is_ok());
  Status s = dev.embedding(table, make_ids(dev, {0, 5, 6}), out, kComputeStream);
  expect_invalid(s, "embedding");
  EXPECT_THAT(s.message(), HasSubstr("id 6 at index 2"));
  EXPECT_THAT(s.message(), HasSubstr("outside [0, 6)"));
  s = dev.embedding(table, make_ids(dev, {-1, 0, 0}), out, kComputeStream);
  expect_invalid(s, "embedding");
  EXPECT_THAT(s.message(), HasSubstr("id -1 at index 0"));
  EXPECT_EQ(get(out), std::vector<float>(6, 8.0f));

  const Tensor dtable = make(dev, {6, 2}, DType::kF32, "dtable");
  ASSERT_TRUE(dev.fill(dtable, 4.0f, kComputeStream).is_ok());
  s = dev.embedding_backward(out, make_ids(dev, {1, 60, 2}), dtable, false, kComputeStream);
  expect_invalid(s, "embedding_backward");
  EXPECT_THAT(s.message(), HasSubstr("id 60 at index 1"));
  EXPECT_EQ(get(dtable), std::vector<float>(12, 4.0f));
}

TEST(CpuEmbeddingTest, RejectsBadShapesAndDtypes) {
  CpuDevice dev;
  Rng rng(404);
  const Tensor table = random_f32(dev, {6, 2}, rng, "table");
  const Tensor ids = make_ids(dev, {0, 1, 2});
  const Tensor wide_out = make(dev, {3, 3}, DType::kF32, "wide_out");
  Status s = dev.embedding(table, ids, wide_out, kComputeStream);
  expect_invalid(s, "embedding");
  EXPECT_THAT(s.message(), HasSubstr("wide_out"));
  const Tensor float_ids = make(dev, {3}, DType::kF32, "float_ids");
  s = dev.embedding(table, float_ids, make(dev, {3, 2}), kComputeStream);
  expect_invalid(s, "embedding");
  EXPECT_THAT(s.message(), HasSubstr("must be int64"));
  const Tensor flat_table = make(dev, {12}, DType::kF32, "flat_table");
  s = dev.embedding_backward(make(dev, {3, 2}), ids, flat_table, false, kComputeStream);
  expect_invalid(s, "embedding_backward");
  EXPECT_THAT(s.message(), HasSubstr("must be 2-D"));
}

// ---- tanh activation --------------------------------------------------------------------------

TEST(CpuTanhActivationTest, ValuesAndBackwardMatchReferenceAndFiniteDifferences) {
  CpuDevice dev;
  Rng rng(501);
  const Tensor x = random_f32(dev, {11}, rng, "x", -3.0f, 3.0f);
  const Tensor y = make(dev, {11}, DType::kF32, "y");
  const Tensor w = random_f32(dev, {11}, rng, "w");
  const Tensor dx = make(dev, {11}, DType::kF32, "dx");
  ASSERT_TRUE(dev.activation(Activation::kTanh, x, y, kComputeStream).is_ok());
  ASSERT_TRUE(dev.activation_backward(Activation::kTanh, x, w, dx, kComputeStream).is_ok());
  for (std::int64_t i = 0; i < 11; ++i) {
    const double t = std::tanh(static_cast<double>(x.data<float>()[i]));
    EXPECT_NEAR(y.data<float>()[i], t, 1e-6);
    EXPECT_NEAR(dx.data<float>()[i], w.data<float>()[i] * (1.0 - t * t), 1e-6);
  }
  const auto loss = [&] {
    SHARDLAB_CHECK_OK(dev.activation(Activation::kTanh, x, y, kComputeStream));
    return weighted_sum(y, w);
  };
  expect_matches_fd(dx, finite_differences(x, loss), "dx");
}

// ---- transpose_1_2 and multiply (head split and dropout) --------------------------

TEST(BertOps, Transpose12SwapsTheMiddleDimsAndIsItsOwnInverse) {
  CpuDevice dev;
  Rng rng(41);
  const std::int64_t P = 2, Q = 3, R = 4, S = 5;
  Tensor x = random_f32(dev, {P, Q, R, S}, rng, "x");
  Tensor y = make(dev, {P, R, Q, S}, DType::kF32, "y");
  ASSERT_TRUE(dev.transpose_1_2(x, y, kComputeStream).is_ok());
  for (std::int64_t p = 0; p < P; ++p)
    for (std::int64_t q = 0; q < Q; ++q)
      for (std::int64_t r = 0; r < R; ++r)
        for (std::int64_t s = 0; s < S; ++s)
          ASSERT_EQ(y.data<float>()[((p * R + r) * Q + q) * S + s], x.data<float>()[((p * Q + q) * R + r) * S + s]);
  Tensor back = make(dev, {P, Q, R, S}, DType::kF32, "back");
  ASSERT_TRUE(dev.transpose_1_2(y, back, kComputeStream).is_ok());
  EXPECT_EQ(get(back), get(x));
}

TEST(BertOps, Transpose12RejectsWrongShapesAndOverlap) {
  CpuDevice dev;
  Tensor x = make(dev, {1, 2, 3, 4}), wrong = make(dev, {1, 2, 3, 4}), three = make(dev, {2, 3, 4});
  Status s = dev.transpose_1_2(x, wrong, kComputeStream);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("[P, R, Q, S]"));
  EXPECT_EQ(dev.transpose_1_2(three, wrong, kComputeStream).code(), StatusCode::kInvalidArgument);
  Tensor sq = make(dev, {1, 2, 2, 1});
  EXPECT_THAT(dev.transpose_1_2(sq, sq, kComputeStream).message(), HasSubstr("overlaps"));
}

TEST(BertOps, MultiplyIsElementwiseAndMayWorkInPlace) {
  CpuDevice dev;
  Rng rng(42);
  Tensor a = random_f32(dev, {3, 7}, rng, "a"), b = random_f32(dev, {21}, rng, "b"), c = make(dev, {21});
  ASSERT_TRUE(dev.multiply(a, b, c, kComputeStream).is_ok());
  for (int i = 0; i < 21; ++i) EXPECT_EQ(c.data<float>()[i], a.data<float>()[i] * b.data<float>()[i]);
  const std::vector<float> expected = get(c);
  ASSERT_TRUE(dev.multiply(a, b, a, kComputeStream).is_ok());
  EXPECT_EQ(get(a), expected);
  Tensor short_one = make(dev, {20});
  EXPECT_THAT(dev.multiply(a, short_one, c, kComputeStream).message(), HasSubstr("element count"));
  Tensor shifted = *c.narrow(1, 20);
  Tensor base = *c.narrow(0, 20);
  EXPECT_THAT(dev.multiply(base, short_one, shifted, kComputeStream).message(), HasSubstr("partially overlaps"));
}

}  // namespace
}  // namespace shardlab::runtime::device::cpu
