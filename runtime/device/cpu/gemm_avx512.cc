// The AVX-512 register tile and packers (gemm_kernels.h, gemm_tile.h). Built with
// -mavx512f -mfma -ffp-contract=off; called only where the CPU has AVX-512F (gemm.cc).
#include "runtime/device/cpu/gemm_tile.h"

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
  static type set1(float x) { return _mm512_set1_ps(x); }
  static type zero() { return _mm512_setzero_ps(); }
};

constexpr int kMr = 8, kNr = 32;

}  // namespace

KernelInfo avx512_kernel() { return {kMr, kNr, &tile_kernel<Zmm, kMr, kNr>, &pack<kMr, kNr>}; }

}  // namespace shardlab::runtime::device::cpu::gemm_detail
