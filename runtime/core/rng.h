// Rng: shardlab's own seeded, splittable, counter-based PRNG (Philox4x32-10).
//
// Why our own: std:: distributions differ between standard libraries, and a shared
// stateful generator makes results depend on call order across threads. A Philox
// stream is a pure function of (key, counter), so every platform produces the same
// bits, and `split(id)` derives independent child streams without touching the parent
// (e.g. one per (seed, step, rank, layer, site)). See NOTE [Determinism] in sim/engine/world.h.
//
// Floating outputs use only exact integer->float conversions and IEEE multiplications,
// never libm, so they are bitwise reproducible too.
//
// Thread safety: an Rng is a value; do not share one instance between threads
// (split instead).
#pragma once

#include <array>
#include <cstdint>

namespace shardlab {

// One Philox4x32-10 block: 128 random bits for (key, counter).
std::array<std::uint32_t, 4> philox4x32(std::array<std::uint32_t, 2> key, std::array<std::uint32_t, 4> counter);

// SplitMix64 finalizer, used to derive keys.
std::uint64_t mix64(std::uint64_t x);

class Rng {
 public:
  explicit Rng(std::uint64_t seed, std::uint64_t stream = 0);

  // A child stream identified by `id`; the parent is unchanged. Children with
  // different ids (or of different parents) are independent.
  Rng split(std::uint64_t id) const;

  std::uint32_t next_u32();
  // out[0 .. n) = the next n values of next_u32(), leaving the stream where n calls
  // would; whole Philox blocks are computed several counters at a time (faster, the same
  // integers).
  void fill_u32(std::uint32_t* out, std::int64_t n);
  std::uint64_t next_u64();
  // Uniform in [0, 1) with 24 random bits.
  float uniform01();
  // Uniform in [lo, hi).
  float uniform(float lo, float hi);
  // Uniform integer in [0, n), n > 0 (unbiased, by rejection).
  std::uint64_t uniform_int(std::uint64_t n);
  // Standard normal N(0, 1) by Box–Muller from two uniforms (one value per call; the
  // computation is done in double and rounded, so it is identical wherever libm's log,
  // sqrt and cos are correctly rounded — glibc's are).
  float normal();
  // out[i] = stddev · N(0, 1) for i < n, using both values of each Box–Muller pair (twice
  // as fast as calling normal() n times; a different, equally reproducible stream).
  void fill_normal(float* out, std::int64_t n, float stddev);

  std::uint64_t key() const { return key_; }

 private:
  std::uint64_t key_;
  std::uint64_t counter_ = 0;
  std::array<std::uint32_t, 4> buffer_{};
  int buffered_ = 0;
};

}  // namespace shardlab
