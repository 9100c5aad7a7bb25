// Element-wise transcendental math of the cpu backend, vectorized and with the same bits on
// every path.
//
// NOTE [Element-wise math bits]: GELU (erf), its derivative and the softmaxes' e^y are
// computed from polynomials and a rational function, with only IEEE-754 operations that round
// correctly (add, multiply, divide, fused multiply-add), compare/select and exponent-bit
// arithmetic. Each element takes the same sequence of operations whether it runs in an
// AVX-512 lane, an AVX2 lane or the portable scalar code (std::fma), so every path gives
// the same bits, and no result depends on the host's libm (whose erff/expf may differ
// between versions). Accuracy against the exact functions (vmath_test.cc): Φ within 1e-6
// relative in both tails (the old 0.5·(1 + erff) lost the negative tail to cancellation);
// e^y for y <= 0 within 1 ulp, 0 below ln(FLT_MIN).
#pragma once

#include <cstdint>

#include "runtime/device/cpu/gemm.h"

namespace shardlab::runtime::device::cpu {

// y[i] = 0.5·x[i]·(1 + erf(x[i]/√2)) (in place allowed), on gemm_isa()'s path or `isa`'s.
void gelu_erf(const float* x, float* y, std::int64_t n);
void gelu_erf(const float* x, float* y, std::int64_t n, GemmIsa isa);
// dx[i] = dy[i]·(Φ(x[i]) + x[i]·φ(x[i])), the derivative of gelu_erf (dx may alias dy).
void gelu_erf_backward(const float* x, const float* dy, float* dx, std::int64_t n);
void gelu_erf_backward(const float* x, const float* dy, float* dx, std::int64_t n, GemmIsa isa);

// out[i] = e^y[i] for y[i] <= 0 (in place allowed): the softmaxes' exponentials.
void exp_nonpositive(const float* y, float* out, std::int64_t n);
void exp_nonpositive(const float* y, float* out, std::int64_t n, GemmIsa isa);

// The scalar functions behind them, for tests: Φ(x), the standard normal CDF, and e^y
// for y <= 0 (NaN → NaN).
float normal_cdf_f32(float x);
float exp_nonpositive_f32(float y);

}  // namespace shardlab::runtime::device::cpu
