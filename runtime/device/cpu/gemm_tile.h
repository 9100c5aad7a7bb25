// The register tile and packers of gemm_kernels.h, written once over a vector type and
// instantiated by gemm_avx2.cc and gemm_avx512.cc, each built with its ISA's flags. Only
// those two files include this header, and everything in it has internal linkage, so no
// AVX code can be merged into a translation unit built for baseline x86-64.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "runtime/device/cpu/gemm_kernels.h"

namespace shardlab::runtime::device::cpu::gemm_detail {
namespace {

// V: the vector traits (kLanes, type, load, store, add, mul, fma, set1, zero).
template <class V, int kMr, int kNr>
void tile_kernel(std::int64_t kc, const float* ap, const float* bp, const TileArgs& t) {
  constexpr int kVecs = kNr / V::kLanes;
  typename V::type c[kMr][kVecs];
  for (int r = 0; r < kMr; ++r)
    for (int v = 0; v < kVecs; ++v) c[r][v] = V::zero();
  for (std::int64_t k = 0; k < kc; ++k) {
    typename V::type b[kVecs];
    for (int v = 0; v < kVecs; ++v) b[v] = V::load(bp + k * kNr + v * V::kLanes);
    for (int r = 0; r < kMr; ++r) {
      const typename V::type a = V::set1(ap[k * kMr + r]);
      for (int v = 0; v < kVecs; ++v) c[r][v] = V::fma(a, b[v], c[r][v]);
    }
  }
  if (t.step == TileStep::kStoreAcc) {
    for (int r = 0; r < kMr; ++r)
      for (int v = 0; v < kVecs; ++v) V::store(t.tile + r * kNr + v * V::kLanes, c[r][v]);
    return;
  }
  const typename V::type alpha = V::set1(t.alpha), beta = V::set1(t.beta);
  for (int r = 0; r < kMr; ++r) {
    float* sum = t.sum + r * t.ldsum;
    for (int v = 0; v < kVecs; ++v) {
      const int j = v * V::kLanes;
      if (t.step == TileStep::kFirst) {
        V::store(sum + j, c[r][v]);
      } else if (t.step == TileStep::kMiddle) {
        V::store(sum + j, V::add(V::load(sum + j), c[r][v]));
      } else {
        float* out = t.out + r * t.ldc + j;
        const typename V::type total = t.first ? c[r][v] : V::add(V::load(sum + j), c[r][v]);
        const typename V::type scaled = V::mul(alpha, total);
        V::store(out, t.step == TileStep::kLast ? scaled : V::add(scaled, V::mul(beta, V::load(out))));
      }
    }
  }
}

// Rows r0 … r7 (8 floats each) → columns: o[i] = (r0[i], …, r7[i]).
inline void transpose8(const float* const* rows, std::int64_t k, float* out, std::int64_t out_stride) {
  __m256 r[8], tl[8], s[8];
  for (int q = 0; q < 8; ++q) r[q] = _mm256_loadu_ps(rows[q] + k);
  for (int q = 0; q < 8; q += 2) {
    tl[q] = _mm256_unpacklo_ps(r[q], r[q + 1]);
    tl[q + 1] = _mm256_unpackhi_ps(r[q], r[q + 1]);
  }
  for (int h = 0; h < 8; h += 4) {
    s[h + 0] = _mm256_shuffle_ps(tl[h + 0], tl[h + 2], _MM_SHUFFLE(1, 0, 1, 0));
    s[h + 1] = _mm256_shuffle_ps(tl[h + 0], tl[h + 2], _MM_SHUFFLE(3, 2, 3, 2));
    s[h + 2] = _mm256_shuffle_ps(tl[h + 1], tl[h + 3], _MM_SHUFFLE(1, 0, 1, 0));
    s[h + 3] = _mm256_shuffle_ps(tl[h + 1], tl[h + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_ps(out + i * out_stride, _mm256_permute2f128_ps(s[i], s[i + 4], 0x20));
    _mm256_storeu_ps(out + (i + 4) * out_stride, _mm256_permute2f128_ps(s[i], s[i + 4], 0x31));
  }
}

// One full strip of W (rows or columns), the packer's contract (gemm_kernels.h).
template <int W>
void pack_full_strip(const float* x, std::int64_t ld, bool along_strip, std::int64_t s, std::int64_t k0,
                     std::int64_t kc, float* out) {
  if (along_strip) {
    for (std::int64_t k = 0; k < kc; ++k) std::memcpy(out + k * W, x + (k0 + k) * ld + s, W * sizeof(float));
    return;
  }
  const float* rows[W];
  for (int j = 0; j < W; ++j) rows[j] = x + (s + j) * ld + k0;
  std::int64_t k = 0;
  if constexpr (W % 8 == 0) {
    for (; k + 8 <= kc; k += 8) {
      for (int jb = 0; jb < W; jb += 8) transpose8(rows + jb, k, out + k * W + jb, W);
    }
  }
  for (; k < kc; ++k) {
    for (int j = 0; j < W; ++j) out[k * W + j] = rows[j][k];
  }
}

template <int kMr, int kNr>
void pack(const float* x, std::int64_t ld, bool along_strip, std::int64_t s0, std::int64_t count, std::int64_t k0,
          std::int64_t kc, int width, float* out) {
  for (std::int64_t ss = 0; ss < count; ss += width, out += kc * width) {
    const std::int64_t w = std::min<std::int64_t>(width, count - ss);
    if (w == width && width == kMr) {
      pack_full_strip<kMr>(x, ld, along_strip, s0 + ss, k0, kc, out);
    } else if (w == width && width == kNr) {
      pack_full_strip<kNr>(x, ld, along_strip, s0 + ss, k0, kc, out);
    } else {
      pack_strips(x, ld, along_strip, s0 + ss, w, k0, kc, width, out);
    }
  }
}

}  // namespace
}  // namespace shardlab::runtime::device::cpu::gemm_detail
