// Tests for dtypes and the bf16/fp16 conversions.
//
// The conversions are checked three ways: hand-picked bit patterns (ties, NaN, Inf,
// overflow, subnormals), exhaustive round trips over all 65536 16-bit patterns, and
// comparison against independent references (a double-precision nearest-even rounding
// for bf16, the compiler's _Float16 conversion for fp16) over strided scans of all
// 2^32 fp32 bit patterns plus random patterns.
#include "runtime/core/dtype.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "testing/status_matchers.h"

using shardlab::testlib::IsOk;

namespace shardlab {
namespace {

using ::testing::HasSubstr;

bool is_nan_bits_bf16(std::uint16_t b) { return (b & 0x7f80u) == 0x7f80u && (b & 0x007fu) != 0; }
bool is_nan_bits_fp16(std::uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x03ffu) != 0; }

// Reference fp32 -> bf16 for finite or infinite (non-NaN) inputs: pick the nearer of the
// two bf16 neighbours of |f| by exact double arithmetic; on a tie, the one with an even
// last bit. The neighbour above the largest finite bf16 stands for 2^128, which is where
// IEEE rounding to infinity starts counting from.
std::uint16_t reference_bf16(float f) {
  const std::uint32_t u = float_bits(f);
  const std::uint32_t sign = u & 0x80000000u;
  const std::uint32_t mag = u & 0x7fffffffu;
  if (mag >= 0x7f800000u) return static_cast<std::uint16_t>((sign | mag) >> 16);  // inf
  const std::uint32_t lo = mag & 0xffff0000u;
  if (lo == mag) return static_cast<std::uint16_t>((sign | mag) >> 16);  // exact
  const std::uint32_t hi = lo + 0x10000u;
  const double x = static_cast<double>(bits_float(mag));
  const double dlo = static_cast<double>(bits_float(lo));
  const double dhi = hi >= 0x7f800000u ? std::ldexp(1.0, 128) : static_cast<double>(bits_float(hi));
  std::uint32_t pick;
  if (x - dlo < dhi - x) {
    pick = lo;
  } else if (x - dlo > dhi - x) {
    pick = hi;
  } else {
    pick = ((lo >> 16) & 1u) == 0 ? lo : hi;
  }
  return static_cast<std::uint16_t>((sign | pick) >> 16);
}

// ---- names and parsing -----------------------------------------------------------------

TEST(DTypeTest, SizesNamesAndKinds) {
  EXPECT_EQ(element_size(DType::kF32), 4u);
  EXPECT_EQ(element_size(DType::kBF16), 2u);
  EXPECT_EQ(element_size(DType::kF16), 2u);
  EXPECT_EQ(element_size(DType::kI64), 8u);
  EXPECT_EQ(dtype_name(DType::kF32), "fp32");
  EXPECT_EQ(dtype_name(DType::kBF16), "bf16");
  EXPECT_EQ(dtype_name(DType::kF16), "fp16");
  EXPECT_EQ(dtype_name(DType::kI64), "int64");
  EXPECT_TRUE(is_floating(DType::kF32));
  EXPECT_TRUE(is_floating(DType::kBF16));
  EXPECT_TRUE(is_floating(DType::kF16));
  EXPECT_FALSE(is_floating(DType::kI64));
}

TEST(DTypeTest, ParseAcceptsCanonicalNamesAndAliases) {
  const std::pair<const char*, DType> cases[] = {
      {"fp32", DType::kF32},      {"float32", DType::kF32}, {"f32", DType::kF32},     {"bf16", DType::kBF16},
      {"bfloat16", DType::kBF16}, {"fp16", DType::kF16},    {"float16", DType::kF16}, {"f16", DType::kF16},
      {"int64", DType::kI64},     {"i64", DType::kI64},
  };
  for (const auto& [text, dtype] : cases) {
    const Result<DType> r = parse_dtype(text);
    ASSERT_THAT(r, IsOk()) << text;
    EXPECT_EQ(*r, dtype) << text;
  }
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16, DType::kI64}) {
    const Result<DType> r = parse_dtype(dtype_name(d));
    ASSERT_TRUE(r.is_ok());
    EXPECT_EQ(*r, d);
  }
}

TEST(DTypeTest, ParseRejectsUnknownNamesListingTheAllowedOnes) {
  for (const char* text : {"", "float64", "fp8", "int32", "bf16 ", " fp32", "half"}) {
    const Result<DType> r = parse_dtype(text);
    ASSERT_FALSE(r.is_ok()) << "'" << text << "'";
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(r.status().exit_code(), 2);
    EXPECT_THAT(r.status().message(), HasSubstr("unknown dtype '" + std::string(text) + "'"));
    EXPECT_THAT(r.status().message(), HasSubstr(std::string(dtype_allowed_names())));
  }
  for (const char* name : {"fp32", "float32", "f32", "bf16", "bfloat16", "fp16", "float16", "f16", "int64", "i64"}) {
    EXPECT_THAT(std::string(dtype_allowed_names()), HasSubstr(name));
  }
}

// ---- bf16 ---------------------------------------------------------------------------------

TEST(Bf16Test, ExactValuesConvertExactly) {
  EXPECT_EQ(float_to_bf16(0.0f), 0x0000);
  EXPECT_EQ(float_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16(-2.0f), 0xc000);
  EXPECT_EQ(bf16_to_float(0x3f80), 1.0f);
  EXPECT_EQ(bf16_to_float(0x4049), 3.140625f);
  EXPECT_EQ(round_to_bf16(3.14159265f), 3.140625f);
}

TEST(Bf16Test, RoundsToNearestTiesToEven) {
  // 1 + 2^-8 is exactly halfway between 1.0 (0x3f80, even) and 1 + 2^-7 (0x3f81, odd).
  EXPECT_EQ(float_to_bf16(bits_float(0x3f808000u)), 0x3f80);
  // 1 + 3*2^-8 is halfway between 0x3f81 (odd) and 0x3f82 (even): rounds up.
  EXPECT_EQ(float_to_bf16(bits_float(0x3f818000u)), 0x3f82);
  // One ulp either side of the tie decides by distance.
  EXPECT_EQ(float_to_bf16(bits_float(0x3f807fffu)), 0x3f80);
  EXPECT_EQ(float_to_bf16(bits_float(0x3f808001u)), 0x3f81);
  EXPECT_EQ(float_to_bf16(bits_float(0x3f817fffu)), 0x3f81);
  // Negative values mirror positive ones.
  EXPECT_EQ(float_to_bf16(bits_float(0xbf808000u)), 0xbf80);
  EXPECT_EQ(float_to_bf16(bits_float(0xbf818000u)), 0xbf82);
  EXPECT_EQ(float_to_bf16(bits_float(0xbf808001u)), 0xbf81);
  // A carry out of the mantissa bumps the exponent: 2 - 2^-9 is closer to 2 than to 2 - 2^-7.
  EXPECT_EQ(float_to_bf16(bits_float(0x3fffc000u)), 0x4000);
  // Subnormals round the same way.
  EXPECT_EQ(float_to_bf16(bits_float(0x00008000u)), 0x0000);
  EXPECT_EQ(float_to_bf16(bits_float(0x00018000u)), 0x0002);
  EXPECT_EQ(float_to_bf16(bits_float(0x00008001u)), 0x0001);
}

TEST(Bf16Test, NanStaysNanAndKeepsItsSign) {
  // Payloads that live only in the low 16 bits would truncate to an infinity pattern.
  const std::uint32_t nans[] = {0x7f800001u, 0x7f80ffffu, 0x7fc00000u, 0x7fffffffu, 0x7fbfffffu,
                                0xff800001u, 0xffc00000u, 0xffffffffu, 0xff80ffffu};
  for (std::uint32_t u : nans) {
    const std::uint16_t b = float_to_bf16(bits_float(u));
    EXPECT_TRUE(is_nan_bits_bf16(b)) << std::hex << u << " -> " << b;
    EXPECT_NE(b & 0x7fffu, 0x7f80u) << std::hex << u << " became an infinity";
    EXPECT_EQ(b & 0x8000u, (u >> 16) & 0x8000u) << std::hex << u << " lost its sign";
    EXPECT_NE(b & 0x0040u, 0u) << std::hex << u << " is not quiet";
    EXPECT_TRUE(std::isnan(bf16_to_float(b)));
  }
  EXPECT_EQ(float_to_bf16(bits_float(0x7f800001u)), 0x7fc0);
  EXPECT_EQ(float_to_bf16(bits_float(0xff800001u)), 0xffc0);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::quiet_NaN()) & 0x7fffu, 0x7fc0);
}

TEST(Bf16Test, InfinityIsPreserved) {
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(float_to_bf16(-std::numeric_limits<float>::infinity()), 0xff80);
  EXPECT_EQ(bf16_to_float(0x7f80), std::numeric_limits<float>::infinity());
  EXPECT_EQ(bf16_to_float(0xff80), -std::numeric_limits<float>::infinity());
}

TEST(Bf16Test, OverflowNearMaxRoundsToInfinity) {
  // The largest finite bf16 is 0x7f7f; the halfway point to 2^128 is fp32 0x7f7f8000.
  EXPECT_EQ(float_to_bf16(bits_float(0x7f7f7fffu)), 0x7f7f);  // below the halfway point
  EXPECT_EQ(float_to_bf16(bits_float(0x7f7f8000u)), 0x7f80);  // tie; 0x7f7f is odd -> up, to inf
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(float_to_bf16(-std::numeric_limits<float>::max()), 0xff80);
  EXPECT_EQ(float_to_bf16(bits_float(0x7f7f0000u)), 0x7f7f);  // exact max stays finite
}

TEST(Bf16Test, ExhaustiveRoundTripIsIdentityForEveryNonNanPattern) {
  int nans = 0;
  for (std::uint32_t i = 0; i < 65536; ++i) {
    const auto b = static_cast<std::uint16_t>(i);
    const float f = bf16_to_float(b);
    const std::uint16_t back = float_to_bf16(f);
    if (is_nan_bits_bf16(b)) {
      ++nans;
      ASSERT_TRUE(std::isnan(f));
      ASSERT_EQ(back, b | 0x0040u) << std::hex << i;  // quieted, payload and sign kept
    } else {
      ASSERT_EQ(back, b) << std::hex << i;
    }
  }
  EXPECT_EQ(nans, 2 * 127);
}

TEST(Bf16Test, MatchesReferenceOnStridedScanOfAllFloats) {
  // Stride 257 visits ~16.7M patterns spread over every exponent and the low mantissa bits.
  for (std::uint64_t u = 0; u <= 0xffffffffull; u += 257) {
    const float f = bits_float(static_cast<std::uint32_t>(u));
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_bf16(f), reference_bf16(f)) << std::hex << u;
  }
}

RC_GTEST_PROP(Bf16Property, MatchesNearestEvenReference, (std::uint32_t bits)) {
  const float f = bits_float(bits);
  const std::uint16_t got = float_to_bf16(f);
  if (std::isnan(f)) {
    RC_ASSERT(is_nan_bits_bf16(got));
    RC_ASSERT((got & 0x8000u) == ((bits >> 16) & 0x8000u));
  } else {
    RC_ASSERT(got == reference_bf16(f));
  }
}

RC_GTEST_PROP(Bf16Property, RoundingIsMonotonic, (std::uint32_t a_bits, std::uint32_t b_bits)) {
  const float a = bits_float(a_bits), b = bits_float(b_bits);
  RC_PRE(!std::isnan(a) && !std::isnan(b));
  const float lo = std::min(a, b), hi = std::max(a, b);
  RC_ASSERT(round_to_bf16(lo) <= round_to_bf16(hi));
}

// ---- fp16 ---------------------------------------------------------------------------------

TEST(Fp16Test, KnownValues) {
  EXPECT_EQ(float_to_fp16(0.0f), 0x0000);
  EXPECT_EQ(float_to_fp16(-0.0f), 0x8000);
  EXPECT_EQ(float_to_fp16(1.0f), 0x3c00);
  EXPECT_EQ(float_to_fp16(-2.0f), 0xc000);
  EXPECT_EQ(float_to_fp16(0.5f), 0x3800);
  EXPECT_EQ(float_to_fp16(65504.0f), 0x7bff);  // largest finite
  EXPECT_EQ(fp16_to_float(0x7bff), 65504.0f);
  EXPECT_EQ(fp16_to_float(0x3555), 0.333251953125f);
  EXPECT_EQ(float_to_fp16(1.0f / 3.0f), 0x3555);
}

TEST(Fp16Test, RoundsToNearestTiesToEven) {
  // 1 + 2^-11 is halfway between 1.0 (0x3c00) and 1 + 2^-10 (0x3c01): even wins.
  EXPECT_EQ(float_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(float_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(float_to_fp16(std::nextafter(1.0f + std::ldexp(1.0f, -11), 2.0f)), 0x3c01);
}

TEST(Fp16Test, OverflowAndInfinity) {
  // The halfway point between 65504 and 65536 is 65520: a tie with an odd mantissa -> inf.
  EXPECT_EQ(float_to_fp16(65519.996f), 0x7bff);
  EXPECT_EQ(float_to_fp16(65520.0f), 0x7c00);
  EXPECT_EQ(float_to_fp16(-65520.0f), 0xfc00);
  EXPECT_EQ(float_to_fp16(1e10f), 0x7c00);
  EXPECT_EQ(float_to_fp16(std::numeric_limits<float>::max()), 0x7c00);
  EXPECT_EQ(float_to_fp16(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(float_to_fp16(-std::numeric_limits<float>::infinity()), 0xfc00);
  EXPECT_EQ(fp16_to_float(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(fp16_to_float(0xfc00), -std::numeric_limits<float>::infinity());
}

TEST(Fp16Test, NanStaysNanAndKeepsItsSign) {
  for (std::uint32_t u : {0x7f800001u, 0x7fc00000u, 0x7fffffffu, 0xff800001u, 0xffc00000u, 0x7f801fffu}) {
    const std::uint16_t h = float_to_fp16(bits_float(u));
    EXPECT_TRUE(is_nan_bits_fp16(h)) << std::hex << u << " -> " << h;
    EXPECT_EQ(h & 0x8000u, (u >> 16) & 0x8000u) << std::hex << u;
    EXPECT_TRUE(std::isnan(fp16_to_float(h)));
  }
  EXPECT_TRUE(std::isnan(fp16_to_float(0x7c01)));
  EXPECT_TRUE(std::signbit(fp16_to_float(0xfe00)));
}

TEST(Fp16Test, Subnormals) {
  const float tiny = std::ldexp(1.0f, -24);  // smallest fp16 subnormal
  EXPECT_EQ(fp16_to_float(0x0001), tiny);
  EXPECT_EQ(fp16_to_float(0x8001), -tiny);
  EXPECT_EQ(fp16_to_float(0x03ff), 1023 * tiny);            // largest subnormal
  EXPECT_EQ(fp16_to_float(0x0400), std::ldexp(1.0f, -14));  // smallest normal
  EXPECT_EQ(fp16_to_float(0x0200), std::ldexp(1.0f, -15));
  for (std::uint16_t m = 1; m < 0x400; ++m) {
    ASSERT_EQ(fp16_to_float(m), static_cast<float>(m) * tiny) << m;
    ASSERT_EQ(float_to_fp16(static_cast<float>(m) * tiny), m) << m;
  }
  EXPECT_EQ(float_to_fp16(tiny), 0x0001);
  // Half the smallest subnormal is a tie between 0 (even) and 1: rounds to zero.
  EXPECT_EQ(float_to_fp16(tiny / 2), 0x0000);
  EXPECT_EQ(float_to_fp16(-tiny / 2), 0x8000);
  EXPECT_EQ(float_to_fp16(std::nextafter(tiny / 2, 1.0f)), 0x0001);
  // 1.5 * tiny is a tie between 1 (odd) and 2: rounds to 2. 2.5 * tiny -> 2.
  EXPECT_EQ(float_to_fp16(1.5f * tiny), 0x0002);
  EXPECT_EQ(float_to_fp16(2.5f * tiny), 0x0002);
  // Far below the subnormal range flushes to signed zero.
  EXPECT_EQ(float_to_fp16(1e-10f), 0x0000);
  EXPECT_EQ(float_to_fp16(-1e-10f), 0x8000);
  // Rounding up out of the subnormal range yields the smallest normal.
  EXPECT_EQ(float_to_fp16(std::ldexp(1.0f, -14) - tiny / 4), 0x0400);
}

TEST(Fp16Test, ExhaustiveRoundTripIsIdentityForEveryNonNanPattern) {
  int nans = 0;
  for (std::uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<std::uint16_t>(i);
    const float f = fp16_to_float(h);
    const std::uint16_t back = float_to_fp16(f);
    if (is_nan_bits_fp16(h)) {
      ++nans;
      ASSERT_TRUE(std::isnan(f)) << std::hex << i;
      ASSERT_EQ(back, h | 0x0200u) << std::hex << i;  // quieted, payload and sign kept
    } else {
      ASSERT_EQ(back, h) << std::hex << i;
    }
  }
  EXPECT_EQ(nans, 2 * 1023);
}

#if defined(__FLT16_MANT_DIG__)
std::uint16_t compiler_fp16(float f) {
  const auto h = static_cast<_Float16>(f);
  std::uint16_t out;
  std::memcpy(&out, &h, sizeof out);
  return out;
}

TEST(Fp16Test, MatchesCompilerConversionOnStridedScanOfAllFloats) {
  // Stride 4099 (~1M patterns); the compiler's conversion is a slow software path here.
  for (std::uint64_t u = 0; u <= 0xffffffffull; u += 4099) {
    const float f = bits_float(static_cast<std::uint32_t>(u));
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_fp16(f), compiler_fp16(f)) << std::hex << u;
  }
}

RC_GTEST_PROP(Fp16Property, MatchesCompilerConversion, (std::uint32_t bits)) {
  const float f = bits_float(bits);
  const std::uint16_t got = float_to_fp16(f);
  if (std::isnan(f)) {
    RC_ASSERT(is_nan_bits_fp16(got));
  } else {
    RC_ASSERT(got == compiler_fp16(f));
  }
}

RC_GTEST_PROP(Fp16Property, MatchesCompilerConversionNearTheSubnormalRange, (std::uint32_t mant, bool negative)) {
  // Exponents 100..115 cover flush-to-zero, the subnormals and the first normals.
  const std::uint32_t exp = *rc::gen::inRange<std::uint32_t>(100, 116);
  const float f = bits_float((negative ? 0x80000000u : 0u) | (exp << 23) | (mant & 0x7fffffu));
  RC_ASSERT(float_to_fp16(f) == compiler_fp16(f));
}
#endif

}  // namespace
}  // namespace shardlab
