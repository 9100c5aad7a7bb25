// The register-tile kernels behind gemm.h, one per instruction set (gemm_avx2.cc and
// gemm_avx512.cc are built with their ISA's flags; gemm.cc holds the scalar one). A kernel
// computes acc[r·nr + j] = the fma chain over k of ap[k·mr + r] · bp[k·nr + j], k = 0 … kc-1
// in order, starting from 0 (NOTE [GEMM bits] in gemm.h): ap is an mr-row strip of A
// packed k-major, bp an nr-column strip of B packed k-major, both zero-padded.
#pragma once

#include <cstdint>

namespace shardlab::runtime::device::cpu::gemm_detail {

using MicroKernel = void (*)(std::int64_t kc, const float* ap, const float* bp, float* acc);

struct KernelInfo {
  int mr = 0, nr = 0;
  MicroKernel run = nullptr;
};

KernelInfo avx2_kernel();    // 6 × 16, ymm
KernelInfo avx512_kernel();  // 8 × 32, zmm

}  // namespace shardlab::runtime::device::cpu::gemm_detail
