// NOTE [Element-wise math bits]: accuracy against the exact functions, and the same bits
// on every path this CPU has.
#include "runtime/device/cpu/vmath.h"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace shardlab::runtime::device::cpu {
namespace {

// Every float from `lo` to `hi` (0 <= lo < hi) whose bits are lo's plus a multiple of
// `stride`, then hi.
template <class F>
void sweep(float lo, float hi, std::uint32_t stride, F&& f) {
  for (std::uint32_t b = std::bit_cast<std::uint32_t>(lo); std::bit_cast<float>(b) < hi; b += stride) {
    f(std::bit_cast<float>(b));
  }
  f(hi);
}

// Φ(x) = erfc(-x/√2)/2 in double (std::erfc keeps the negative tail's relative accuracy).
double exact_cdf(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }

TEST(VmathCdf, RelativelyAccurateInBothTails) {
  double worst = 0;
  float at = 0;
  sweep(0.0f, 13.0f, 8009, [&](float a) {
    for (float x : {a, -a}) {
      const double exact = exact_cdf(x);
      if (exact < 1.2e-38) continue;  // below the normal range: flushed to 0 (next test)
      const double err = std::fabs(static_cast<double>(normal_cdf_f32(x)) - exact) / exact;
      if (err > worst) worst = err, at = x;
    }
  });
  EXPECT_LE(worst, 1e-6) << "at x = " << at;
  EXPECT_EQ(normal_cdf_f32(0.0f), 0.5f);
  EXPECT_EQ(normal_cdf_f32(20.0f), 1.0f);
  EXPECT_EQ(normal_cdf_f32(-20.0f), 0.0f);
  EXPECT_EQ(normal_cdf_f32(std::numeric_limits<float>::infinity()), 1.0f);
  EXPECT_EQ(normal_cdf_f32(-std::numeric_limits<float>::infinity()), 0.0f);
}

TEST(VmathExp, WithinOneUlpAndZeroBelowTheNormalRange) {
  double worst_ulp = 0;
  float at = 0;
  sweep(1e-30f, 87.33f, 1201, [&](float a) {
    const float y = -a;
    const double exact = std::exp(static_cast<double>(y));
    const double ulp = std::ldexp(1.0, std::ilogb(exact) - 23);
    const double err = std::fabs(static_cast<double>(exp_nonpositive_f32(y)) - exact) / ulp;
    if (err > worst_ulp) worst_ulp = err, at = y;
  });
  EXPECT_LE(worst_ulp, 1.0) << "at y = " << at;
  EXPECT_EQ(exp_nonpositive_f32(0.0f), 1.0f);
  EXPECT_EQ(exp_nonpositive_f32(-0.0f), 1.0f);
  EXPECT_EQ(exp_nonpositive_f32(-87.34f), 0.0f);
  EXPECT_EQ(exp_nonpositive_f32(-1e30f), 0.0f);
  EXPECT_EQ(exp_nonpositive_f32(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_TRUE(std::isnan(exp_nonpositive_f32(std::numeric_limits<float>::quiet_NaN())));
}

TEST(VmathGelu, ForwardAndBackwardNearTheExactFunctions) {
  std::vector<float> x;
  sweep(0.0f, 12.0f, 4099, [&](float v) {
    x.push_back(v);
    x.push_back(-v);
  });
  std::vector<float> y(x.size()), ones(x.size(), 1.0f), dx(x.size());
  gelu_erf(x.data(), y.data(), static_cast<std::int64_t>(x.size()));
  gelu_erf_backward(x.data(), ones.data(), dx.data(), static_cast<std::int64_t>(x.size()));
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    const double cdf = exact_cdf(v);
    const double pdf = std::exp(-0.5 * v * v) / std::sqrt(2.0 * M_PI);
    // Relative: both tails keep their accuracy (no 1 + erf cancellation).
    EXPECT_NEAR(y[i], v * cdf, 1e-6 * std::fabs(v * cdf) + 1e-30) << "x = " << v;
    // The sum cancels near x = -0.75: a few ulp of its larger term.
    EXPECT_NEAR(dx[i], cdf + v * pdf,
                1e-6 * std::fabs(cdf + v * pdf) + 4e-7 * std::max(cdf, std::fabs(v * pdf)) + 1e-30)
        << "x = " << v;
  }
}

// Specials and edges, then random values: every path this CPU has gives the portable
// path's bits, whatever the length (vector body and scalar tail).
std::vector<float> edge_values() {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> v = {0.0f,   -0.0f,   inf,        -inf,     nan,       1e-45f, -1e-45f, 1e-38f,
                          3.925f, -3.925f, 3.9250002f, 13.2166f, -13.2167f, 13.3f,  1e30f,   -1e30f,
                          0.5f,   -0.5f,   1.0f,       -1.0f,    2.75f,     -5.5f};
  return v;
}

void expect_paths_agree(const std::vector<float>& x, const std::vector<float>& dy) {
  const auto n = static_cast<std::int64_t>(x.size());
  std::vector<float> ref(x.size()), dref(x.size());
  gelu_erf(x.data(), ref.data(), n, GemmIsa::kScalar);
  gelu_erf_backward(x.data(), dy.data(), dref.data(), n, GemmIsa::kScalar);
  for (GemmIsa isa : {GemmIsa::kAvx2, GemmIsa::kAvx512}) {
    if (static_cast<int>(isa) > static_cast<int>(best_gemm_isa())) continue;  // the CPU lacks it
    std::vector<float> got(x.size()), dgot(x.size());
    gelu_erf(x.data(), got.data(), n, isa);
    gelu_erf_backward(x.data(), dy.data(), dgot.data(), n, isa);
    for (std::size_t i = 0; i < x.size(); ++i) {
      RC_ASSERT(std::bit_cast<std::uint32_t>(got[i]) == std::bit_cast<std::uint32_t>(ref[i]));
      RC_ASSERT(std::bit_cast<std::uint32_t>(dgot[i]) == std::bit_cast<std::uint32_t>(dref[i]));
    }
  }
  // e^y on y = -|x| (and the specials as they are: NaN and -Inf included).
  std::vector<float> y(x.size()), eref(x.size()), egot(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) y[i] = x[i] > 0 ? -x[i] * 7.0f : x[i] * 7.0f;
  exp_nonpositive(y.data(), eref.data(), n, GemmIsa::kScalar);
  for (GemmIsa isa : {GemmIsa::kAvx2, GemmIsa::kAvx512}) {
    if (static_cast<int>(isa) > static_cast<int>(best_gemm_isa())) continue;
    exp_nonpositive(y.data(), egot.data(), n, isa);
    for (std::size_t i = 0; i < x.size(); ++i) {
      RC_ASSERT(std::bit_cast<std::uint32_t>(egot[i]) == std::bit_cast<std::uint32_t>(eref[i]));
    }
  }
}

RC_GTEST_PROP(VmathPaths, EveryPathGivesThePortableBits, ()) {
  const auto edges = edge_values();
  const auto n = *rc::gen::inRange<std::size_t>(0, 70);
  std::vector<float> x, dy;
  for (std::size_t i = 0; i < n; ++i) {
    const bool edge = *rc::gen::inRange(0, 4) == 0;
    x.push_back(edge ? edges[*rc::gen::inRange<std::size_t>(0, edges.size())]
                     : static_cast<float>(*rc::gen::inRange(-800000, 800000)) / 50000.0f);
    dy.push_back(static_cast<float>(*rc::gen::inRange(-1000, 1000)) / 250.0f);
  }
  expect_paths_agree(x, dy);
}

}  // namespace
}  // namespace shardlab::runtime::device::cpu
