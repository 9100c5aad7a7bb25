// The AVX-512 register tile and packers (gemm_kernels.h, gemm_tile.h) and element-wise
// math (vmath_impl.h). Built with
// -mavx512f -mfma -ffp-contract=off; called only where the CPU has AVX-512F (gemm.cc, vmath.cc).
#include "runtime/device/cpu/gemm_tile.h"
#include "runtime/device/cpu/vmath_impl.h"

namespace shardlab::runtime::device::cpu::gemm_detail {
namespace {

struct Zmm {
  static constexpr int kLanes = 16;
  using type = __m512;
  static type load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, type v) { _mm512_storeu_ps(p, v); }
  static type add(type a, type b) { return _mm512_add_ps(a, b); }
  static type mul(type a, type b) { return _mm512_mul_ps(a, b); }
  static type fma(type a, type b, type c) { return _mm512_fmadd_ps(a, b, c); }
  static type sub(type a, type b) { return _mm512_sub_ps(a, b); }
  static type div(type a, type b) { return _mm512_div_ps(a, b); }
  // min, max and the shift in pow2 use the masked forms with every lane selected: GCC 12's
  // unmasked ones start from an "undefined" vector and warn (-Wmaybe-uninitialized, GCC
  // bug 105593). Same results.
  static type min(type a, type b) { return _mm512_mask_min_ps(a, 0xFFFF, a, b); }
  static type max(type a, type b) { return _mm512_mask_max_ps(a, 0xFFFF, a, b); }
  static type select_lt(type a, type b, type x, type y) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_LT_OQ), y, x);
  }
  static type pow2(type t) {
    const __m512i bits = _mm512_add_epi32(_mm512_castps_si512(t), _mm512_set1_epi32(127));
    return _mm512_castsi512_ps(_mm512_mask_slli_epi32(bits, 0xFFFF, bits, 23));
  }
  static type set1(float x) { return _mm512_set1_ps(x); }
  static type zero() { return _mm512_setzero_ps(); }
};

constexpr int kMr = 8, kNr = 32;

}  // namespace

KernelInfo avx512_kernel() { return {kMr, kNr, &tile_kernel<Zmm, kMr, kNr>, &pack<kMr, kNr>}; }

}  // namespace shardlab::runtime::device::cpu::gemm_detail

namespace shardlab::runtime::device::cpu::vmath_detail {

Loops avx512_loops() {
  using V = gemm_detail::Zmm;
  return {&gelu_loop<V>, &gelu_backward_loop<V>, &exp_loop<V>};
}

}  // namespace shardlab::runtime::device::cpu::vmath_detail
