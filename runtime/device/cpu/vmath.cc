// vmath.h: the portable path and the choice of path (NOTE [Element-wise math bits]).
// Built with -ffp-contract=off, as the vector paths are.
#include "runtime/device/cpu/vmath.h"

#include "runtime/device/cpu/vmath_impl.h"

namespace shardlab::runtime::device::cpu {
namespace {

using vmath_detail::Scalar;

vmath_detail::Loops loops_for(GemmIsa isa) {
  switch (isa) {
    case GemmIsa::kAvx512: return vmath_detail::avx512_loops();
    case GemmIsa::kAvx2: return vmath_detail::avx2_loops();
    case GemmIsa::kScalar: break;
  }
  return {&vmath_detail::gelu_loop<Scalar>, &vmath_detail::gelu_backward_loop<Scalar>, &vmath_detail::exp_loop<Scalar>};
}

// gemm_isa()'s path; an unusable SHARDLAB_CPU_ISA is refused at start-up
// (check_cpu_settings), so the fallback to the portable path is never a silent choice.
const vmath_detail::Loops& chosen() {
  static const vmath_detail::Loops loops = loops_for(gemm_isa().is_ok() ? *gemm_isa() : GemmIsa::kScalar);
  return loops;
}

}  // namespace

void gelu_erf(const float* x, float* y, std::int64_t n) { chosen().gelu(x, y, n); }
void gelu_erf(const float* x, float* y, std::int64_t n, GemmIsa isa) { loops_for(isa).gelu(x, y, n); }
void gelu_erf_backward(const float* x, const float* dy, float* dx, std::int64_t n) {
  chosen().gelu_backward(x, dy, dx, n);
}
void gelu_erf_backward(const float* x, const float* dy, float* dx, std::int64_t n, GemmIsa isa) {
  loops_for(isa).gelu_backward(x, dy, dx, n);
}

void exp_nonpositive(const float* y, float* out, std::int64_t n) { chosen().exp(y, out, n); }
void exp_nonpositive(const float* y, float* out, std::int64_t n, GemmIsa isa) { loops_for(isa).exp(y, out, n); }

float normal_cdf_f32(float x) { return vmath_detail::cdf_and_gauss<Scalar>(x).cdf; }
float exp_nonpositive_f32(float y) { return vmath_detail::exp_nonpositive<Scalar>(y); }

}  // namespace shardlab::runtime::device::cpu
