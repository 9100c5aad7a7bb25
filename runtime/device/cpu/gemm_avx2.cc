// The AVX2+FMA register tile and packers (gemm_kernels.h, gemm_tile.h). Built with -mavx2
// -mfma -ffp-contract=off; called only where the CPU has both (gemm.cc).
#include "runtime/device/cpu/gemm_tile.h"

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
  static type set1(float x) { return _mm256_set1_ps(x); }
  static type zero() { return _mm256_setzero_ps(); }
};

constexpr int kMr = 6, kNr = 16;

}  // namespace

KernelInfo avx2_kernel() { return {kMr, kNr, &tile_kernel<Ymm, kMr, kNr>, &pack<kMr, kNr>}; }

}  // namespace shardlab::runtime::device::cpu::gemm_detail
