// Tensors for tests on devices whose memory the host reads directly (the cpu backend):
// made, written and read back in one call each. A failed allocation is a broken test, so
// it CHECK-fails instead of returning a Status.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/core/check.h"
#include "runtime/core/rng.h"
#include "runtime/core/tensor.h"
#include "runtime/device/device.h"

namespace shardlab::testlib {

inline Tensor make(runtime::device::Device& dev, const Shape& shape, DType dtype = DType::kF32,
                   const std::string& name = "t", MemoryCategory category = MemoryCategory::kActivations) {
  Result<Tensor> t = dev.empty(shape, dtype, category, name);
  SHARDLAB_CHECK_OK(t.status());
  return *t;
}

// Host memory only: t's fp32 elements ← values (the sizes must match).
inline void set(const Tensor& t, const std::vector<float>& values) {
  SHARDLAB_CHECK_EQ(t.numel(), static_cast<std::int64_t>(values.size()));
  std::memcpy(t.data<float>(), values.data(), values.size() * sizeof(float));
}

// Host memory only: t's fp32 elements.
inline std::vector<float> get(const Tensor& t) {
  const float* p = t.data<float>();
  return std::vector<float>(p, p + t.numel());
}

// Host memory only: uniform values in [lo, hi) from `rng`.
inline void fill_random(const Tensor& t, Rng& rng, float lo = -1.0f, float hi = 1.0f) {
  float* p = t.data<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i) p[i] = rng.uniform(lo, hi);
}

inline Tensor make_f32(runtime::device::Device& dev, const Shape& shape, const std::vector<float>& values,
                       const std::string& name = "t") {
  Tensor t = make(dev, shape, DType::kF32, name);
  set(t, values);
  return t;
}

inline Tensor random_f32(runtime::device::Device& dev, const Shape& shape, Rng& rng, const std::string& name = "r",
                         float lo = -1.0f, float hi = 1.0f) {
  Tensor t = make(dev, shape, DType::kF32, name);
  fill_random(t, rng, lo, hi);
  return t;
}

}  // namespace shardlab::testlib
