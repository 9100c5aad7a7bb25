// The functions of vmath.h written once over a vector type V (gemm_tile.h's traits plus
// sub, div, min, max, select_lt, pow2) and instantiated by vmath.cc (Scalar), gemm_avx2.cc
// and gemm_avx512.cc, each built with -ffp-contract=off. NOTE [Element-wise math bits] in
// vmath.h: every operation here rounds once, in the same order on every path.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace shardlab::runtime::device::cpu::vmath_detail {
namespace {

// One lane. min/max/select follow the x86 instructions exactly (minps(a, b) is
// a < b ? a : b, NaN included), so the scalar tail matches the vector lanes bit for bit.
struct Scalar {
  static constexpr int kLanes = 1;
  using type = float;
  static type load(const float* p) { return *p; }
  static void store(float* p, type v) { *p = v; }
  static type add(type a, type b) { return a + b; }
  static type sub(type a, type b) { return a - b; }
  static type mul(type a, type b) { return a * b; }
  static type div(type a, type b) { return a / b; }
  static type fma(type a, type b, type c) { return std::fma(a, b, c); }
  static type min(type a, type b) { return a < b ? a : b; }
  static type max(type a, type b) { return a > b ? a : b; }
  static type select_lt(type a, type b, type x, type y) { return a < b ? x : y; }
  // 2^n from t = n + 1.5·2^23 (NOTE in exp_nonpositive): the float with exponent bits n + 127.
  static type pow2(type t) {
    std::uint32_t bits;
    std::memcpy(&bits, &t, sizeof bits);
    bits = (bits + 127u) << 23;
    float r;
    std::memcpy(&r, &bits, sizeof r);
    return r;
  }
  static type set1(float x) { return x; }
};

// e^y for y <= 0: y = n·ln2 + r with n = round(y·log2 e) (adding 1.5·2^23 rounds to an
// integer and leaves n in the low mantissa bits, which pow2 turns into 2^n), r by
// Cody–Waite in two steps, e^r = 1 + r + r²·S(r) with S a degree-4 fit on |r| <= ln2/2.
// Below ln(FLT_MIN) the result would be subnormal: it is 0.
template <class V>
typename V::type exp_nonpositive(typename V::type y) {
  using T = typename V::type;
  const T magic = V::set1(12582912.0f);
  const T t = V::fma(y, V::set1(1.442695022f), magic);
  const T n = V::sub(t, magic);
  T r = V::fma(n, V::set1(-0.693359375f), y);
  r = V::fma(n, V::set1(2.121944417e-04f), r);
  T s = V::set1(1.381446258e-03f);
  s = V::fma(s, r, V::set1(8.368780836e-03f));
  s = V::fma(s, r, V::set1(4.166839272e-02f));
  s = V::fma(s, r, V::set1(1.666651964e-01f));
  s = V::fma(s, r, V::set1(4.999999404e-01f));
  const T e = V::add(V::fma(V::mul(r, r), s, r), V::set1(1.0f));
  return V::select_lt(y, V::set1(-87.33654f), V::set1(0.0f), V::mul(e, V::pow2(t)));
}

// Φ(x), the standard normal CDF, and e^(-x²/2): with u = x/√2 and a = |u|,
// Φ = (1 + erf(u))/2 = erfc(-u)/2. For a < 1, erf(u) = u·S(u²) (S a degree-6 fit of
// erf(u)/u, relative error 1.2e-9); for a >= 1, erfc(a) = e^(-a²)·P(a)/Q(a) (a (4, 5)
// rational fit of erfc(a)·e^(a²) on [1, 10], 1e-10), which keeps Φ's relative accuracy in
// the negative tail, where 1 + erf(u) would cancel. a² = x²/2 is taken from x as hi + lo
// (fma) so that e^(-a²) inherits neither u's rounding nor hi's. a is clamped to 10 (Φ is
// 0 or 1 there in fp32) so ±Inf give 0 and 1, and NaN a finite Φ: gelu multiplies by x,
// which keeps the NaN. Beyond |x| ≈ 13.2, e^(-x²/2) is 0 (exp_nonpositive).
template <class V>
struct CdfAndGauss {
  typename V::type cdf;    // Φ(x)
  typename V::type gauss;  // e^(-x²/2)
};

template <class V>
CdfAndGauss<V> cdf_and_gauss(typename V::type x) {
  using T = typename V::type;
  const T zero = V::set1(0.0f), one = V::set1(1.0f), half = V::set1(0.5f);
  const T u = V::mul(x, V::set1(0.70710678118654752f));
  const T a = V::min(V::max(u, V::sub(zero, u)), V::set1(10.0f));
  const T limit = V::set1(14.25f);  // e^(-x²/2) is 0 from |x| = 13.22; keeps Inf out of lo
  const T xc = V::min(V::max(x, V::sub(zero, limit)), limit);
  const T xx = V::mul(xc, xc);
  const T hi = V::mul(half, xx);                                // a² = x²/2: halving is exact,
  const T lo = V::mul(half, V::fma(xc, xc, V::sub(zero, xx)));  // and u's rounding stays out
  T e = exp_nonpositive<V>(V::sub(zero, hi));
  e = V::fma(V::sub(zero, lo), e, e);
  T s = V::set1(7.854063006e-05f);
  s = V::fma(s, hi, V::set1(-8.010259480e-04f));
  s = V::fma(s, hi, V::set1(5.188336130e-03f));
  s = V::fma(s, hi, V::set1(-2.685381658e-02f));
  s = V::fma(s, hi, V::set1(1.128358543e-01f));
  s = V::fma(s, hi, V::set1(-3.761262596e-01f));
  s = V::fma(s, hi, V::set1(1.128379107e+00f));
  const T small = V::fma(half, V::mul(u, s), half);
  T p = V::set1(5.574646592e-02f);
  p = V::fma(p, a, V::set1(3.152872622e-01f));
  p = V::fma(p, a, V::set1(8.966611624e-01f));
  p = V::fma(p, a, V::set1(1.377783537e+00f));
  p = V::fma(p, a, V::set1(1.000102520e+00f));
  T q = V::set1(9.880790859e-02f);
  q = V::fma(q, a, V::set1(5.588380098e-01f));
  q = V::fma(q, a, V::set1(1.638574839e+00f));
  q = V::fma(q, a, V::set1(2.722892523e+00f));
  q = V::fma(q, a, V::set1(2.506894588e+00f));
  q = V::fma(q, a, one);
  const T half_erfc = V::mul(half, V::div(V::mul(e, p), q));
  const T tail = V::select_lt(u, zero, half_erfc, V::sub(one, half_erfc));
  return {V::select_lt(a, one, small, tail), e};
}

template <class V>
typename V::type gelu(typename V::type x) {
  return V::mul(x, cdf_and_gauss<V>(x).cdf);
}

// Φ(x) + x·φ(x), φ(x) = e^(-x²/2)/√(2π).
template <class V>
typename V::type gelu_grad(typename V::type x) {
  const CdfAndGauss<V> g = cdf_and_gauss<V>(x);
  return V::fma(x, V::mul(V::set1(0.39894228040143268f), g.gauss), g.cdf);
}

template <class V>
void gelu_loop(const float* x, float* y, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + V::kLanes <= n; i += V::kLanes) V::store(y + i, gelu<V>(V::load(x + i)));
  for (; i < n; ++i) y[i] = gelu<Scalar>(x[i]);
}

template <class V>
void exp_loop(const float* y, float* out, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + V::kLanes <= n; i += V::kLanes) V::store(out + i, exp_nonpositive<V>(V::load(y + i)));
  for (; i < n; ++i) out[i] = exp_nonpositive<Scalar>(y[i]);
}

template <class V>
void gelu_backward_loop(const float* x, const float* dy, float* dx, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + V::kLanes <= n; i += V::kLanes) {
    V::store(dx + i, V::mul(V::load(dy + i), gelu_grad<V>(V::load(x + i))));
  }
  for (; i < n; ++i) dx[i] = dy[i] * gelu_grad<Scalar>(x[i]);
}

}  // namespace

// One path's loops (vmath.cc picks one by GemmIsa).
struct Loops {
  void (*gelu)(const float* x, float* y, std::int64_t n) = nullptr;
  void (*gelu_backward)(const float* x, const float* dy, float* dx, std::int64_t n) = nullptr;
  void (*exp)(const float* y, float* out, std::int64_t n) = nullptr;
};
Loops avx2_loops();
Loops avx512_loops();

}  // namespace shardlab::runtime::device::cpu::vmath_detail
