// The cpu backend's fp32 GEMM: packed, register-blocked, dispatched at run time to the
// host's vector units (AVX-512, AVX2+FMA, or portable scalar code), spread over a fixed
// pool of threads — with the same bits on every path.
//
// NOTE [GEMM bits]
// Every path computes, for each output element c[i][j]:
//   P = 0
//   for each k-panel p = [p·kGemmKc, min(K, (p+1)·kGemmKc)) in ascending order:
//     acc = 0; for k in p ascending: acc = fma(a[i][k], b[k][j], acc)   (fused, one rounding)
//     P = P + acc
//   c[i][j] = beta == 0 ? alpha·P : alpha·P + beta·c[i][j]   (each product rounded, then the sum)
// (alpha = 1 and beta = 1 multiply exactly.) Applying alpha and beta once at the end is
// what a Gaudi graph does with an MME product (alpha 1, beta 0) followed by TPC mult and
// add kernels, so the hpu backend's composition has these bits too.
// A vector lane holds one output element and walks k in order, so the vector width, the
// register tile, the cache blocking (other than kGemmKc) and the way threads split M and N
// (never K) do not change a bit. The scalar path uses std::fma, so a host without FMA
// units still gets the same bits (slowly). The files that hold the paths are built with
// -ffp-contract=off so that the compiler fuses nothing the definition does not.
//
// Thread safety: gemm may be called from any number of threads; the pool runs one
// caller's work at a time and a caller that finds it busy computes alone (simulated ranks
// that are threads then share the cores instead of oversubscribing them).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "runtime/core/status.h"

namespace shardlab::runtime::device::cpu {

inline constexpr std::int64_t kGemmKc = 256;  // part of NOTE [GEMM bits]

enum class GemmIsa { kScalar, kAvx2, kAvx512 };
std::string_view gemm_isa_name(GemmIsa isa);
// "scalar", "avx2", "avx512"; INVALID_ARGUMENT naming the allowed values otherwise.
Result<GemmIsa> parse_gemm_isa(std::string_view text);
// The best path this CPU supports.
GemmIsa best_gemm_isa();
// The path gemm uses: best_gemm_isa(), or the lower level SHARDLAB_CPU_ISA names
// (scalar, avx2, avx512). A value that is unknown or above what the CPU supports is an
// error, reported once by the first caller (the cli exits 2 with it).
Result<GemmIsa> gemm_isa();
// Threads the pool offers one caller: SHARDLAB_CPU_THREADS when set (1 … 1024), else the
// cores this process may run on.
int gemm_threads();
// INVALID_ARGUMENT naming the variable and what is allowed when SHARDLAB_CPU_ISA or
// SHARDLAB_CPU_THREADS is bad (the cli checks this first and exits 2).
Status check_cpu_settings();

struct GemmArgs {
  const float* a = nullptr;  // row-major; op(a) is [m, k]: a is [m, k] (lda ≥ k) or, trans_a, [k, m] (lda ≥ m)
  std::int64_t lda = 0;
  bool trans_a = false;
  const float* b = nullptr;  // op(b) is [k, n]: b is [k, n] (ldb ≥ n) or, trans_b, [n, k] (ldb ≥ k)
  std::int64_t ldb = 0;
  bool trans_b = false;
  float* c = nullptr;  // [m, n], ldc ≥ n; must not overlap a or b
  std::int64_t ldc = 0;
  std::int64_t m = 0, n = 0, k = 0;
  float alpha = 1.0f, beta = 0.0f;
};

// The GemmArgs of contiguous row-major operands: a is [m, k] ([k, m] when trans_a), b is
// [k, n] ([n, k] when trans_b), c is [m, n].
GemmArgs contiguous_gemm(const float* a, bool trans_a, const float* b, bool trans_b, float* c, std::int64_t m,
                         std::int64_t n, std::int64_t k, float alpha = 1.0f, float beta = 0.0f);

// c = beta·c + alpha·op(a)·op(b) per NOTE [GEMM bits], on `isa` with up to `threads`
// threads of the pool (1: the calling thread only).
void gemm(const GemmArgs& args, GemmIsa isa, int threads);
// Runs body(begin, end) over [0, n) split into at most gemm_threads() contiguous chunks of
// at least `grain` indices, on the pool (or all on the calling thread when the pool is
// busy or n < 2·grain). For loops whose iterations are independent — element-wise ops and
// per-row reductions — so the bits never depend on the split.
void parallel_for(std::int64_t n, std::int64_t grain, const std::function<void(std::int64_t, std::int64_t)>& body);

// While one lives, gemm and parallel_for called from this thread run on it alone (tests
// compare that with the pool's result, bit for bit).
class SerialScope {
 public:
  SerialScope();
  ~SerialScope();
  SerialScope(const SerialScope&) = delete;
  SerialScope& operator=(const SerialScope&) = delete;

 private:
  bool previous_;
};

// `batch` independent products whose operands are `stride_*` floats apart; the pool
// splits the batch first.
void gemm_batched(const GemmArgs& args, std::int64_t batch, std::int64_t stride_a, std::int64_t stride_b,
                  std::int64_t stride_c, GemmIsa isa, int threads);

}  // namespace shardlab::runtime::device::cpu
