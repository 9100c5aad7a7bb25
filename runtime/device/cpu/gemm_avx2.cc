// The AVX2+FMA register tile and packers (gemm_kernels.h, gemm_tile.h) and element-wise
// math (vmath_impl.h). Built with -mavx2
// -mfma -ffp-contract=off; called only where the CPU has both (gemm.cc, vmath.cc).
#include "runtime/device/cpu/gemm_tile.h"
#include "runtime/device/cpu/vmath_impl.h"

namespace shardlab::runtime::device::cpu::gemm_detail {
namespace {

struct Ymm {
  static constexpr int kLanes = 8;
  using type = __m256;
  static type load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, type v) { _mm256_storeu_ps(p, v); }
  static type add(type a, type b) { return _mm256_add_ps(a, b); }
  static type mul(type a, type b) { return _mm256_mul_ps(a, b); }
  static type fma(type a, type b, type c) { return _mm256_fmadd_ps(a, b, c); }
  static type sub(type a, type b) { return _mm256_sub_ps(a, b); }
  static type div(type a, type b) { return _mm256_div_ps(a, b); }
  static type min(type a, type b) { return _mm256_min_ps(a, b); }
  static type max(type a, type b) { return _mm256_max_ps(a, b); }
  static type select_lt(type a, type b, type x, type y) {
    return _mm256_blendv_ps(y, x, _mm256_cmp_ps(a, b, _CMP_LT_OQ));
  }
  static type pow2(type t) {
    const __m256i bits = _mm256_add_epi32(_mm256_castps_si256(t), _mm256_set1_epi32(127));
    return _mm256_castsi256_ps(_mm256_slli_epi32(bits, 23));
  }
  static type set1(float x) { return _mm256_set1_ps(x); }
  static type zero() { return _mm256_setzero_ps(); }
};

constexpr int kMr = 6, kNr = 16;

}  // namespace

KernelInfo avx2_kernel() { return {kMr, kNr, &tile_kernel<Ymm, kMr, kNr>, &pack<kMr, kNr>}; }

}  // namespace shardlab::runtime::device::cpu::gemm_detail

namespace shardlab::runtime::device::cpu::vmath_detail {

Loops avx2_loops() {
  using V = gemm_detail::Ymm;
  return {&gelu_loop<V>, &gelu_backward_loop<V>, &exp_loop<V>};
}

}  // namespace shardlab::runtime::device::cpu::vmath_detail
