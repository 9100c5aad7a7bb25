// The register-tile kernels and packers behind gemm.h, one set per instruction set
// (gemm_avx2.cc and gemm_avx512.cc are built with their ISA's flags; gemm.cc holds the
// scalar one). A kernel computes acc[r·nr + j] = the fma chain over k of
// ap[k·mr + r] · bp[k·nr + j], k = 0 … kc-1 in order, starting from 0 (NOTE [GEMM bits]
// in gemm.h): ap is an mr-row strip of A packed k-major, bp an nr-column strip of B packed
// k-major, both zero-padded. It then applies one panel step of NOTE [GEMM bits] to a full
// mr × nr tile in its registers (TileStep), or stores acc for the driver (kStoreAcc: tiles
// cut by the edge of C). Every step is one IEEE operation per element, the same on every
// path (no contraction: the files are built with -ffp-contract=off).
#pragma once

#include <cstdint>

namespace shardlab::runtime::device::cpu::gemm_detail {

enum class TileStep {
  kStoreAcc,  // tile[r·nr + j] = acc
  kFirst,     // sum = acc                        (first panel of several)
  kMiddle,    // sum = sum + acc
  kLast,      // out = alpha·(sum + acc), or alpha·acc when it is also the first panel
  kLastBeta,  // out = alpha·(sum + acc) + beta·out, or alpha·acc + beta·out likewise
};

struct TileArgs {
  TileStep step = TileStep::kStoreAcc;
  bool first = false;     // kLast / kLastBeta: no running sum yet (a single panel)
  float* tile = nullptr;  // kStoreAcc
  float* sum = nullptr;   // the running panel sum P (may be out itself when beta == 0)
  std::int64_t ldsum = 0;
  float* out = nullptr;
  std::int64_t ldc = 0;
  float alpha = 1.0f, beta = 0.0f;
};

using MicroKernel = void (*)(std::int64_t kc, const float* ap, const float* bp, const TileArgs& t);
// Packs a [count × kc] slice of an operand as strips of `width` (rows of A, columns of B),
// each k-major and zero-padded to `width`: element (s, k) of the operand is x[k·ld + s]
// when `along_strip` (contiguous across the strip), else x[s·ld + k] (contiguous along k).
// Data movement only: any packer gives the same bytes.
using Packer = void (*)(const float* x, std::int64_t ld, bool along_strip, std::int64_t s0, std::int64_t count,
                        std::int64_t k0, std::int64_t kc, int width, float* out);

struct KernelInfo {
  int mr = 0, nr = 0;
  MicroKernel run = nullptr;
  Packer pack = nullptr;
};

KernelInfo avx2_kernel();    // 6 × 16, ymm
KernelInfo avx512_kernel();  // 8 × 32, zmm

// The portable packer (gemm.cc); the ISA packers use it for strips cut by an edge.
void pack_strips(const float* x, std::int64_t ld, bool along_strip, std::int64_t s0, std::int64_t count,
                 std::int64_t k0, std::int64_t kc, int width, float* out);

}  // namespace shardlab::runtime::device::cpu::gemm_detail
