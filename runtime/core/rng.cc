#include "runtime/core/rng.h"

#include <cmath>

namespace shardlab {

namespace {
constexpr std::uint32_t kMul0 = 0xD2511F53u;
constexpr std::uint32_t kMul1 = 0xCD9E8D57u;
constexpr std::uint32_t kWeyl0 = 0x9E3779B9u;
constexpr std::uint32_t kWeyl1 = 0xBB67AE85u;
}  // namespace

std::array<std::uint32_t, 4> philox4x32(std::array<std::uint32_t, 2> key, std::array<std::uint32_t, 4> ctr) {
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t p0 = static_cast<std::uint64_t>(kMul0) * ctr[0];
    const std::uint64_t p1 = static_cast<std::uint64_t>(kMul1) * ctr[2];
    const std::uint32_t hi0 = static_cast<std::uint32_t>(p0 >> 32), lo0 = static_cast<std::uint32_t>(p0);
    const std::uint32_t hi1 = static_cast<std::uint32_t>(p1 >> 32), lo1 = static_cast<std::uint32_t>(p1);
    ctr = {hi1 ^ ctr[1] ^ key[0], lo1, hi0 ^ ctr[3] ^ key[1], lo0};
    key[0] += kWeyl0;
    key[1] += kWeyl1;
  }
  return ctr;
}

std::uint64_t mix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

Rng::Rng(std::uint64_t seed, std::uint64_t stream) : key_(mix64(mix64(seed) ^ (stream * 0xD6E8FEB86659FD93ull))) {}

Rng Rng::split(std::uint64_t id) const {
  Rng child(0);
  child.key_ = mix64(key_ ^ mix64(id + 0x632BE59BD9B4E019ull));
  return child;
}

std::uint32_t Rng::next_u32() {
  if (buffered_ == 0) {
    const std::array<std::uint32_t, 2> k = {static_cast<std::uint32_t>(key_), static_cast<std::uint32_t>(key_ >> 32)};
    const std::array<std::uint32_t, 4> c = {static_cast<std::uint32_t>(counter_),
                                            static_cast<std::uint32_t>(counter_ >> 32), 0u, 0u};
    buffer_ = philox4x32(k, c);
    ++counter_;
    buffered_ = 4;
  }
  return buffer_[4 - buffered_--];
}

namespace {
// Philox4x32-10 of counters first, first+1, ... (the high 64 bits zero), kLanes at a time:
// independent lanes in structure-of-arrays form, so the rounds interleave (and vectorize).
constexpr int kLanes = 8;
void philox_lanes(std::array<std::uint32_t, 2> key, std::uint64_t first, std::uint32_t* out) {
  std::uint32_t c0[kLanes], c1[kLanes], c2[kLanes], c3[kLanes];
  for (int j = 0; j < kLanes; ++j) {
    const std::uint64_t ctr = first + static_cast<std::uint64_t>(j);
    c0[j] = static_cast<std::uint32_t>(ctr);
    c1[j] = static_cast<std::uint32_t>(ctr >> 32);
    c2[j] = 0u;
    c3[j] = 0u;
  }
  for (int round = 0; round < 10; ++round) {
    for (int j = 0; j < kLanes; ++j) {
      const std::uint64_t p0 = static_cast<std::uint64_t>(kMul0) * c0[j];
      const std::uint64_t p1 = static_cast<std::uint64_t>(kMul1) * c2[j];
      const std::uint32_t n0 = static_cast<std::uint32_t>(p1 >> 32) ^ c1[j] ^ key[0];
      const std::uint32_t n2 = static_cast<std::uint32_t>(p0 >> 32) ^ c3[j] ^ key[1];
      c1[j] = static_cast<std::uint32_t>(p1);
      c3[j] = static_cast<std::uint32_t>(p0);
      c0[j] = n0;
      c2[j] = n2;
    }
    key[0] += kWeyl0;
    key[1] += kWeyl1;
  }
  for (int j = 0; j < kLanes; ++j) {
    out[4 * j + 0] = c0[j];
    out[4 * j + 1] = c1[j];
    out[4 * j + 2] = c2[j];
    out[4 * j + 3] = c3[j];
  }
}
}  // namespace

void Rng::fill_u32(std::uint32_t* out, std::int64_t n) {
  std::int64_t i = 0;
  while (i < n && buffered_ > 0) out[i++] = next_u32();  // what is left of the current block
  const std::array<std::uint32_t, 2> k = {static_cast<std::uint32_t>(key_), static_cast<std::uint32_t>(key_ >> 32)};
  for (; n - i >= 4 * kLanes; i += 4 * kLanes, counter_ += kLanes) philox_lanes(k, counter_, out + i);
  while (i < n) out[i++] = next_u32();  // the rest through the buffer, as single calls would
}

std::uint64_t Rng::next_u64() {
  const std::uint64_t hi = next_u32();
  return (hi << 32) | next_u32();
}

float Rng::uniform01() { return static_cast<float>(next_u32() >> 8) * (1.0f / 16777216.0f); }

float Rng::uniform(float lo, float hi) {
  const float x = lo + (hi - lo) * uniform01();
  // The sum can round up to hi (e.g. lo = 1, hi = 2, u = 1 - 2^-24); keep [lo, hi).
  // nextafter is an exact IEEE operation, so this stays bitwise reproducible.
  return x < hi ? x : std::nextafter(hi, lo);
}

float Rng::normal() {
  // u1 in (0, 1] so the log is finite; 53 random bits each.
  const double u1 = (static_cast<double>(next_u64() >> 11) + 1.0) * 0x1.0p-53;
  const double u2 = static_cast<double>(next_u64() >> 11) * 0x1.0p-53;
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2));
}

void Rng::fill_normal(float* out, std::int64_t n, float stddev) {
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  for (std::int64_t i = 0; i < n; i += 2) {
    const double u1 = (static_cast<double>(next_u64() >> 11) + 1.0) * 0x1.0p-53;
    const double u2 = static_cast<double>(next_u64() >> 11) * 0x1.0p-53;
    const double r = std::sqrt(-2.0 * std::log(u1)) * stddev;
    out[i] = static_cast<float>(r * std::cos(kTwoPi * u2));
    if (i + 1 < n) out[i + 1] = static_cast<float>(r * std::sin(kTwoPi * u2));
  }
}

std::uint64_t Rng::uniform_int(std::uint64_t n) {
  if (n <= 1) return 0;
  const std::uint64_t limit = ~std::uint64_t{0} - (~std::uint64_t{0} % n);
  std::uint64_t x;
  do {
    x = next_u64();
  } while (x >= limit);
  return x % n;
}

}  // namespace shardlab
