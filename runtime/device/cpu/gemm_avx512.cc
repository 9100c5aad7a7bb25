// The AVX-512 register tile (gemm_kernels.h). Built with -mavx512f -mfma
// -ffp-contract=off; called only where the CPU has AVX-512F (gemm.cc).
#include <immintrin.h>

#include "runtime/device/cpu/gemm_kernels.h"

namespace shardlab::runtime::device::cpu::gemm_detail {
namespace {

constexpr int kMr = 8, kNr = 32;

void kernel(std::int64_t kc, const float* ap, const float* bp, float* acc) {
  __m512 c[kMr][2];
  for (int r = 0; r < kMr; ++r) c[r][0] = c[r][1] = _mm512_setzero_ps();
  for (std::int64_t k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_loadu_ps(bp + k * kNr), b1 = _mm512_loadu_ps(bp + k * kNr + 16);
    for (int r = 0; r < kMr; ++r) {
      const __m512 a = _mm512_set1_ps(ap[k * kMr + r]);
      c[r][0] = _mm512_fmadd_ps(a, b0, c[r][0]);
      c[r][1] = _mm512_fmadd_ps(a, b1, c[r][1]);
    }
  }
  for (int r = 0; r < kMr; ++r) {
    _mm512_storeu_ps(acc + r * kNr, c[r][0]);
    _mm512_storeu_ps(acc + r * kNr + 16, c[r][1]);
  }
}

}  // namespace

KernelInfo avx512_kernel() { return {kMr, kNr, &kernel}; }

}  // namespace shardlab::runtime::device::cpu::gemm_detail
