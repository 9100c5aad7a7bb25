// See eigen_native.h. Built with -march=native; Eigen's namespace is renamed here so its
// template instantiations cannot be merged with the baseline-built ones elsewhere.
#define Eigen EigenNative
#include <Eigen/Core>
#undef Eigen

#include "bench/eigen_native.h"

#include <algorithm>
#include <thread>
#include <vector>

namespace shardlab::bench {
namespace {

using Matrix = EigenNative::Matrix<float, EigenNative::Dynamic, EigenNative::Dynamic, EigenNative::RowMajor>;
using ConstMap = EigenNative::Map<const Matrix>;
using Map = EigenNative::Map<Matrix>;

// Columns [lo, hi) of one product.
void product(const float* a, bool trans_a, const float* b, bool trans_b, float* c, std::int64_t m, std::int64_t n,
             std::int64_t k, std::int64_t lo, std::int64_t hi) {
  const ConstMap A(a, trans_a ? k : m, trans_a ? m : k), B(b, trans_b ? n : k, trans_b ? k : n);
  Map C(c, m, n);
  auto out = C.middleCols(lo, hi - lo);
  if (!trans_a && !trans_b)
    out.noalias() = A * B.middleCols(lo, hi - lo);
  else if (trans_a && !trans_b)
    out.noalias() = A.transpose() * B.middleCols(lo, hi - lo);
  else if (!trans_a && trans_b)
    out.noalias() = A * B.middleRows(lo, hi - lo).transpose();
  else
    out.noalias() = A.transpose() * B.middleRows(lo, hi - lo).transpose();
}

template <typename F>
void on_threads(int threads, const F& f) {
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(f, t);
  f(0);
  for (auto& th : pool) th.join();
}

}  // namespace

void eigen_native_gemm(const float* a, bool trans_a, const float* b, bool trans_b, float* c, std::int64_t m,
                       std::int64_t n, std::int64_t k, int threads) {
  const int t = static_cast<int>(std::max<std::int64_t>(1, std::min<std::int64_t>(threads, n)));
  on_threads(t, [&](int i) { product(a, trans_a, b, trans_b, c, m, n, k, n * i / t, n * (i + 1) / t); });
}

void eigen_native_gemm_batched(const float* a, bool trans_a, const float* b, bool trans_b, float* c, std::int64_t batch,
                               std::int64_t m, std::int64_t n, std::int64_t k, int threads) {
  const int t = static_cast<int>(std::max<std::int64_t>(1, std::min<std::int64_t>(threads, batch)));
  on_threads(t, [&](int i) {
    for (std::int64_t x = batch * i / t; x < batch * (i + 1) / t; ++x) {
      product(a + x * m * k, trans_a, b + x * k * n, trans_b, c + x * m * n, m, n, k, 0, n);
    }
  });
}

}  // namespace shardlab::bench
