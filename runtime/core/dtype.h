// Element types and the bf16/fp16 conversions shardlab uses everywhere.
//
// bf16 conversion rounds to nearest, ties to even, and preserves NaN (a NaN never
// rounds into an infinity: its payload is truncated and the quiet bit forced on).
// All conversions are pure integer/IEEE operations, so they give the same bits on
// every platform (see NOTE [Determinism] in sim/engine/world.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "runtime/core/status.h"

namespace shardlab {

enum class DType : std::uint8_t { kF32 = 0, kBF16 = 1, kF16 = 2, kI64 = 3 };

// Bytes per element.
std::size_t element_size(DType dtype);
// Canonical name: "fp32", "bf16", "fp16", "int64".
std::string_view dtype_name(DType dtype);
bool is_floating(DType dtype);
// Accepts the canonical names and common aliases (float32/f32, bfloat16, float16/f16, i64).
Result<DType> parse_dtype(std::string_view text);
// The names parse_dtype accepts, for error messages.
std::string_view dtype_allowed_names();

inline std::uint32_t float_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline float bits_float(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// fp32 -> bf16 bits, round to nearest even, NaN preserved (quiet).
inline std::uint16_t float_to_bf16(float f) {
  std::uint32_t u = float_bits(f);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0) {
    return static_cast<std::uint16_t>((u >> 16) | 0x0040u);  // quiet NaN, sign kept
  }
  std::uint32_t rounding_bias = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>((u + rounding_bias) >> 16);
}
inline float bf16_to_float(std::uint16_t b) { return bits_float(static_cast<std::uint32_t>(b) << 16); }
// Rounds an fp32 value through bf16 and back.
inline float round_to_bf16(float f) { return bf16_to_float(float_to_bf16(f)); }

// IEEE binary16 conversions (round to nearest even, NaN preserved, subnormals handled).
std::uint16_t float_to_fp16(float f);
float fp16_to_float(std::uint16_t h);

}  // namespace shardlab
