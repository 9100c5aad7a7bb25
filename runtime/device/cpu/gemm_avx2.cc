// The AVX2+FMA register tile (gemm_kernels.h). Built with -mavx2 -mfma -ffp-contract=off;
// called only where the CPU has both (gemm.cc).
#include <immintrin.h>

#include "runtime/device/cpu/gemm_kernels.h"

namespace shardlab::runtime::device::cpu::gemm_detail {
namespace {

constexpr int kMr = 6, kNr = 16;

void kernel(std::int64_t kc, const float* ap, const float* bp, float* acc) {
  __m256 c[kMr][2];
  for (int r = 0; r < kMr; ++r) c[r][0] = c[r][1] = _mm256_setzero_ps();
  for (std::int64_t k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_loadu_ps(bp + k * kNr), b1 = _mm256_loadu_ps(bp + k * kNr + 8);
    for (int r = 0; r < kMr; ++r) {
      const __m256 a = _mm256_broadcast_ss(ap + k * kMr + r);
      c[r][0] = _mm256_fmadd_ps(a, b0, c[r][0]);
      c[r][1] = _mm256_fmadd_ps(a, b1, c[r][1]);
    }
  }
  for (int r = 0; r < kMr; ++r) {
    _mm256_storeu_ps(acc + r * kNr, c[r][0]);
    _mm256_storeu_ps(acc + r * kNr + 8, c[r][1]);
  }
}

}  // namespace

KernelInfo avx2_kernel() { return {kMr, kNr, &kernel}; }

}  // namespace shardlab::runtime::device::cpu::gemm_detail
