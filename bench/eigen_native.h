// The benchmarks' GEMM reference: Eigen built for this host's vector units (-march=native,
// bench/CMakeLists.txt) and run on every core (the columns of C split across threads) —
// the machine's practical SGEMM peak, measured in the same run as what it judges.
// Eigen's namespace is renamed inside eigen_native.cc, so these instantiations never
// mix with the runtime's baseline-built Eigen code.
#pragma once

#include <cstdint>

namespace shardlab::bench {

// c[m, n] = op(a) · op(b), row-major and contiguous (a is [m, k], or [k, m] when trans_a;
// b is [k, n], or [n, k] when trans_b), on `threads` threads.
void eigen_native_gemm(const float* a, bool trans_a, const float* b, bool trans_b, float* c, std::int64_t m,
                       std::int64_t n, std::int64_t k, int threads);
// `batch` such products, operands consecutive; the batch is split across the threads.
void eigen_native_gemm_batched(const float* a, bool trans_a, const float* b, bool trans_b, float* c, std::int64_t batch,
                               std::int64_t m, std::int64_t n, std::int64_t k, int threads);

}  // namespace shardlab::bench
