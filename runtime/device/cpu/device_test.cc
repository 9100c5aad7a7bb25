// Tests for CpuDevice: memory, streams, copies, casts and the math ops.
//
// Numerics are checked against plain double-precision references. Tolerances are
// stated next to each check and derived from fp32 rounding (eps = 2^-24 ~ 6e-8
// relative per operation) times the length of the reduction.
#include "runtime/device/cpu/device.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>
#include <Eigen/Core>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <numbers>
#include <string>
#include <vector>

#include "runtime/core/rng.h"
#include "runtime/optim/optimizer.h"
#include "testing/tensors.h"

namespace shardlab::runtime::device::cpu {
namespace {

using ::testing::HasSubstr;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

using testlib::fill_random;
using testlib::get;
using testlib::make;
using testlib::make_f32;
using testlib::random_f32;
using testlib::set;

// ---- memory ---------------------------------------------------------------------------------

// NOTE [Launch check] (runtime/device/device.h): a view whose offset was corrupted after it
// was made (the Gaudi1 seed bug's wrapped offset, or past the storage's end) is refused
// with DATA_LOSS naming the op, the tensor, its storage and the offset, before any byte is
// read or written.
TEST(CpuLaunchCheckTest, CorruptViewsAreRefusedBeforeTheKernel) {
  CpuDevice dev;
  Tensor a = make(dev, {2, 3}, DType::kF32, "a"), b = make(dev, {3, 2}, DType::kF32, "b"),
         c = make(dev, {2, 2}, DType::kF32, "c");
  ASSERT_TRUE(dev.fill(c, 7.0f, kComputeStream).is_ok());
  const Tensor wrapped = a.with_unchecked_byte_offset(13835057943613014016ull);
  const Status s = dev.gemm(wrapped, false, b, false, c, 1.0f, 0.0f, kComputeStream);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.to_string();
  EXPECT_THAT(s.message(), ::testing::HasSubstr("launch of gemm: tensor 'a' at byte offset -4611686130096537600 "
                                                "(unsigned 13835057943613014016), extent 24 bytes, in storage"));
  EXPECT_THAT(s.message(), ::testing::HasSubstr("nothing was launched"));
  EXPECT_EQ(c.data<float>()[0], 7.0f) << "the output was touched";
  const Tensor past = c.with_unchecked_byte_offset(static_cast<std::uint64_t>(c.storage()->nbytes()));
  const Status p = dev.fill(past, 1.0f, kComputeStream);
  EXPECT_EQ(p.code(), StatusCode::kDataLoss);
  EXPECT_THAT(p.message(), ::testing::HasSubstr("past the end of its storage"));
  EXPECT_TRUE(check_launch_view("gemm", a).is_ok());
  EXPECT_TRUE(check_launch_view("gemm", Tensor()).is_ok());
}

// NOTE [Host block cache]: a class holds the request, wastes at most 1/8 of it above 1 MiB,
// and sizes never shrink as requests grow.
RC_GTEST_PROP(CpuBlockCacheTest, SizeClassesCoverTheRequestWithBoundedWaste, ()) {
  const auto bytes = *rc::gen::inRange<std::size_t>(1, std::size_t{1} << 34);
  const std::size_t c = CpuDevice::size_class(bytes);
  RC_ASSERT(c >= bytes);
  RC_ASSERT(c % 64 == 0);
  if (bytes > (std::size_t{1} << 20)) RC_ASSERT(c - bytes <= bytes / 8 + 64);
  RC_ASSERT(CpuDevice::size_class(bytes + 1) >= c);
  RC_ASSERT(CpuDevice::size_class(c) == c);
}

// Freed blocks come back for requests of the same class (no fresh pages per step); the
// cache stays within 9/8 of the device's peak of live bytes (above its 256 MiB floor),
// and release_cached_blocks empties it. The accounting sees requested bytes only.
TEST(CpuBlockCacheTest, ReusesBlocksOfAClassAndStaysWithinThePeak) {
  CpuDevice dev;
  const void* first = nullptr;
  {
    Tensor t = make(dev, {3'000'000}, DType::kF32, "a");  // 12 MB
    first = t.data<float>();
  }
  EXPECT_EQ(dev.memory().stats().current_total, 0);
  EXPECT_EQ(dev.cached_bytes(), CpuDevice::size_class(12'000'000));
  {
    Tensor again = make(dev, {2'950'000}, DType::kF32, "b");  // 11.8 MB: the same class
    EXPECT_EQ(static_cast<const void*>(again.data<float>()), first);
    EXPECT_EQ(dev.cached_bytes(), 0u);
    EXPECT_EQ(dev.memory().stats().current_total, 11'800'000);
  }
  // 4 × 100 MiB live at once, then freed: all four stay cached with the 12 MB block (within
  // 9/8 of that peak); a 60 MiB block of another class, live alone and freed, would take
  // cached + live past 9/8 of the peak, so it goes back to the system.
  const std::size_t block = CpuDevice::size_class(std::size_t{100} << 20);
  {
    std::vector<Tensor> big;
    for (int i = 0; i < 4; ++i) big.push_back(make(dev, {25 << 20}, DType::kF32, "big"));
  }
  const std::size_t after_peak = dev.cached_bytes();
  EXPECT_EQ(after_peak, 4 * block + CpuDevice::size_class(12'000'000));
  EXPECT_LE(after_peak, 4 * block + 4 * block / 8);
  { Tensor other = make(dev, {15 << 20}, DType::kF32, "other"); }
  EXPECT_EQ(dev.cached_bytes(), after_peak);
  dev.release_cached_blocks();
  EXPECT_EQ(dev.cached_bytes(), 0u);
  // The seam's empty_cache does the same.
  { Tensor again = make(dev, {25 << 20}, DType::kF32, "again"); }
  EXPECT_GT(dev.cached_bytes(), 0u);
  static_cast<Device&>(dev).empty_cache();
  EXPECT_EQ(dev.cached_bytes(), 0u);
}

// The VmFlags of the mapping holding `p` in /proc/self/smaps ("" when not found).
std::string vm_flags_of(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    unsigned long long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx ", &lo, &hi) == 2 && line.find('-') < line.find(' ')) {
      inside = addr >= lo && addr < hi;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line.substr(8) + " ";
    }
  }
  return "";
}

// set_huge_pages decides whether new large blocks are advised MADV_HUGEPAGE (the "hg"
// VmFlag); small blocks never are.
TEST(CpuBlockCacheTest, HugePagesAreAskedForLargeBlocksOnlyWhenOn) {
  if (!std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled")) GTEST_SKIP() << "kernel without THP";
  CpuDevice on;
  EXPECT_TRUE(on.huge_pages());
  Tensor big_on = make(on, {3 << 20}, DType::kF32, "big");  // 12 MiB
  EXPECT_THAT(vm_flags_of(big_on.data<float>()), testing::HasSubstr(" hg "));
  CpuDevice off;
  off.set_huge_pages(false);
  Tensor big_off = make(off, {3 << 20}, DType::kF32, "big");
  const std::string flags = vm_flags_of(big_off.data<float>());
  EXPECT_THAT(flags, testing::HasSubstr(" rd "));  // the mapping was found
  EXPECT_THAT(flags, testing::Not(testing::HasSubstr(" hg ")));
}

TEST(CpuMemoryTest, AllocateAccountsAndReleasesOnDestruction) {
  CpuDevice dev({"cpu", 0}, 0);
  EXPECT_EQ(dev.id().to_string(), "cpu:0");
  EXPECT_EQ(dev.memory().device_name(), "cpu:0");
  {
    Result<std::shared_ptr<Storage>> s = dev.allocate(1000, MemoryCategory::kParameters, "flat");
    ASSERT_TRUE(s.is_ok());
    EXPECT_EQ((*s)->nbytes(), 1000);
    EXPECT_EQ((*s)->label(), "flat");
    EXPECT_EQ((*s)->device_name(), "cpu:0");
    EXPECT_NE((*s)->host_data(), nullptr);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>((*s)->host_data()) % 64, 0u);  // 64-byte aligned
    std::memset((*s)->host_data(), 1, 1000);                                  // the whole extent is writable
    EXPECT_EQ(dev.memory().stats().current_total, 1000);
  }
  EXPECT_EQ(dev.memory().stats().current_total, 0);
  EXPECT_EQ(dev.memory().stats().peak_total, 1000);
}

TEST(CpuMemoryTest, ViewsKeepTheStorageAlive) {
  CpuDevice dev;
  Tensor slice;
  {
    const Tensor t = make(dev, {100}, DType::kF32, "t", MemoryCategory::kGradients);
    slice = *t.narrow(10, 5);
  }
  EXPECT_EQ(dev.memory().stats().current[static_cast<int>(MemoryCategory::kGradients)], 400);
  slice = Tensor();
  EXPECT_EQ(dev.memory().stats().current_total, 0);
}

TEST(CpuMemoryTest, OutOfMemoryThroughCapacity) {
  CpuDevice dev({"hpu", 1}, 1024);
  Result<Tensor> params = dev.empty({200}, DType::kF32, MemoryCategory::kParameters, "params");
  ASSERT_TRUE(params.is_ok());
  const Result<Tensor> act = dev.empty({57}, DType::kF32, MemoryCategory::kActivations, "mlp.out");
  ASSERT_FALSE(act.is_ok());
  EXPECT_EQ(act.status().code(), StatusCode::kOutOfMemory);
  EXPECT_EQ(act.status().exit_code(), 3);
  const std::string& m = act.status().message();
  EXPECT_THAT(m, HasSubstr("out of memory on hpu:1"));
  EXPECT_THAT(m, HasSubstr("requested 228 B"));
  EXPECT_THAT(m, HasSubstr("'mlp.out'"));
  EXPECT_THAT(m, HasSubstr("(activations)"));
  EXPECT_THAT(m, HasSubstr("capacity 1.00 KiB"));
  EXPECT_THAT(m, HasSubstr("parameters 800 B"));
  EXPECT_EQ(dev.memory().stats().current_total, 800);

  // Freeing the parameters makes room.
  params = Status::internal("dropped");
  EXPECT_TRUE(dev.empty({57}, DType::kF32, MemoryCategory::kActivations, "mlp.out").is_ok());
}

TEST(CpuMemoryTest, ZeroAndNegativeSizes) {
  CpuDevice dev;
  Result<std::shared_ptr<Storage>> zero = dev.allocate(0, MemoryCategory::kOther, "zero");
  ASSERT_TRUE(zero.is_ok());
  EXPECT_NE((*zero)->host_data(), nullptr);
  const Result<std::shared_ptr<Storage>> neg = dev.allocate(-1, MemoryCategory::kOther, "neg");
  ASSERT_FALSE(neg.is_ok());
  EXPECT_EQ(neg.status().code(), StatusCode::kInvalidArgument);
}

TEST(CpuMemoryTest, HostAllocationFailureIsOutOfMemoryAndReservesNothing) {
  // Under ASan this relies on allocator_may_return_null=1 (set by the asan test preset).
  CpuDevice dev;  // unlimited capacity, so only the host allocator can refuse
  const Result<std::shared_ptr<Storage>> s =
      dev.allocate(std::numeric_limits<std::int64_t>::max() / 2, MemoryCategory::kOther, "absurd");
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.status().code(), StatusCode::kOutOfMemory);
  EXPECT_THAT(s.status().message(), HasSubstr("'absurd'"));
  EXPECT_EQ(dev.memory().stats().current_total, 0);
}

// ---- streams --------------------------------------------------------------------------------

TEST(CpuStreamTest, StreamsAndEvents) {
  CpuDevice dev;
  EXPECT_EQ(*dev.create_stream("comm"), 1);
  EXPECT_EQ(*dev.create_stream("copy"), 2);
  const EventId e1 = *dev.record_event(kComputeStream);
  const EventId e2 = *dev.record_event(1);
  EXPECT_LT(e1.value, e2.value);
  EXPECT_TRUE(dev.wait_event(2, e1).is_ok());
  EXPECT_TRUE(dev.synchronize(1).is_ok());

  const Tensor t = make(dev, {4});
  EXPECT_TRUE(dev.fill(t, 1.0f, 2).is_ok());
  for (StreamId bad : {3, -1}) {
    const Status s = dev.fill(t, 1.0f, bad);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("unknown stream " + std::to_string(bad)));
    EXPECT_THAT(s.message(), HasSubstr("streams are 0..2"));
  }
  EXPECT_FALSE(dev.scale(t, 2.0f, 7).is_ok());
  EXPECT_EQ(get(t), (std::vector<float>{1, 1, 1, 1}));  // the failed scale wrote nothing
}

// ---- copy / fill / cast / axpy / scale -------------------------------------------------------

TEST(CpuCopyTest, CopiesBetweenDevicesAndShapes) {
  CpuDevice host({"cpu", DeviceId::kNoIndex}, 0);
  CpuDevice sim({"sim", 0}, 0);
  const Tensor src = make_f32(host, {2, 3}, {1, 2, 3, 4, 5, 6}, "src");
  const Tensor dst = make(sim, {6}, DType::kF32, "dst");
  ASSERT_TRUE(sim.copy(src, dst, kComputeStream).is_ok());
  EXPECT_EQ(get(dst), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  // And back again through the other device.
  set(dst, {6, 5, 4, 3, 2, 1});
  ASSERT_TRUE(host.copy(dst, src, kComputeStream).is_ok());
  EXPECT_EQ(get(src), (std::vector<float>{6, 5, 4, 3, 2, 1}));
  // int64 and bf16 bytes copy verbatim.
  const Tensor a = make(host, {3}, DType::kI64, "a"), b = make(sim, {3}, DType::kI64, "b");
  a.data<std::int64_t>()[0] = -1;
  a.data<std::int64_t>()[1] = 1ll << 60;
  a.data<std::int64_t>()[2] = 7;
  ASSERT_TRUE(sim.copy(a, b, kComputeStream).is_ok());
  EXPECT_EQ(std::memcmp(a.bytes(), b.bytes(), 24), 0);
}

TEST(CpuCopyTest, OverlappingRangesOfOneStorage) {
  CpuDevice dev;
  const Tensor t = make_f32(dev, {8}, {0, 1, 2, 3, 4, 5, 6, 7});
  ASSERT_TRUE(dev.copy(*t.narrow(0, 6), *t.narrow(2, 6), kComputeStream).is_ok());
  EXPECT_EQ(get(t), (std::vector<float>{0, 1, 0, 1, 2, 3, 4, 5}));
  ASSERT_TRUE(dev.copy(t, t, kComputeStream).is_ok());  // a no-op
  EXPECT_EQ(get(t), (std::vector<float>{0, 1, 0, 1, 2, 3, 4, 5}));
}

TEST(CpuCopyTest, RejectsMismatches) {
  CpuDevice dev;
  const Tensor f = make_f32(dev, {4}, {1, 2, 3, 4}, "f");
  const Tensor b = make(dev, {4}, DType::kBF16, "b");
  const Tensor f5 = make(dev, {5}, DType::kF32, "f5");
  const Status dtype = dev.copy(f, b, kComputeStream);
  EXPECT_EQ(dtype.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(dtype.message(), HasSubstr("use cast"));
  const Status numel = dev.copy(f, f5, kComputeStream);
  EXPECT_EQ(numel.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(numel.message(), HasSubstr("'f5'"));
  EXPECT_THAT(numel.message(), HasSubstr("has 5 elements; expected 4"));
  EXPECT_FALSE(dev.copy(f, Tensor(), kComputeStream).is_ok());
  // A phantom tensor has no bytes to copy.
  auto phantom = std::make_shared<Storage>(nullptr, 0, 16, MemoryCategory::kOther, "ph", "sim", nullptr);
  const Tensor p = *Tensor::view_of(phantom, DType::kF32, {4}, 0, "p");
  EXPECT_FALSE(dev.copy(f, p, kComputeStream).is_ok());
  EXPECT_FALSE(dev.fill(p, 1.0f, kComputeStream).is_ok());
  EXPECT_FALSE(dev.scale(p, 1.0f, kComputeStream).is_ok());
}

TEST(CpuFillTest, EveryDtype) {
  CpuDevice dev;
  const Tensor f = make(dev, {3});
  ASSERT_TRUE(dev.fill(f, -2.5f, kComputeStream).is_ok());
  EXPECT_EQ(get(f), (std::vector<float>{-2.5f, -2.5f, -2.5f}));

  const Tensor i = make(dev, {4}, DType::kI64);
  ASSERT_TRUE(dev.fill(i, -100.0f, kComputeStream).is_ok());
  for (int k = 0; k < 4; ++k) EXPECT_EQ(i.data<std::int64_t>()[k], -100);
  ASSERT_TRUE(dev.fill(i, 3.9f, kComputeStream).is_ok());
  EXPECT_EQ(i.data<std::int64_t>()[0], 3);  // truncated, not rounded
  ASSERT_TRUE(dev.fill(i, -2.5f, kComputeStream).is_ok());
  EXPECT_EQ(i.data<std::int64_t>()[3], -2);
  ASSERT_TRUE(dev.fill(i, 1099511627776.0f, kComputeStream).is_ok());  // 2^40, beyond int32
  EXPECT_EQ(i.data<std::int64_t>()[1], 1ll << 40);

  const Tensor b = make(dev, {2}, DType::kBF16);
  ASSERT_TRUE(dev.fill(b, 1.0f / 3.0f, kComputeStream).is_ok());
  EXPECT_EQ(b.data<std::uint16_t>()[1], float_to_bf16(1.0f / 3.0f));
  EXPECT_EQ(b.data<std::uint16_t>()[1], 0x3eab);
  const Tensor h = make(dev, {2}, DType::kF16);
  ASSERT_TRUE(dev.fill(h, 1.0f / 3.0f, kComputeStream).is_ok());
  EXPECT_EQ(h.data<std::uint16_t>()[0], 0x3555);

  // Fill writes exactly the view, not its neighbours.
  const Tensor whole = make_f32(dev, {6}, {0, 0, 0, 0, 0, 0});
  ASSERT_TRUE(dev.fill(*whole.narrow(2, 3), 9.0f, kComputeStream).is_ok());
  EXPECT_EQ(get(whole), (std::vector<float>{0, 0, 9, 9, 9, 0}));
}

TEST(CpuCastTest, Fp32ToBf16RoundsTiesToEvenAndKeepsSpecials) {
  CpuDevice dev;
  const std::vector<float> in = {bits_float(0x3f808000u),
                                 bits_float(0x3f818000u),
                                 bits_float(0x3f808001u),
                                 bits_float(0x7f800001u),
                                 kInf,
                                 -kInf,
                                 -0.0f,
                                 bits_float(0x7f7f8000u)};
  const std::vector<std::uint16_t> want = {0x3f80, 0x3f82, 0x3f81, 0x7fc0, 0x7f80, 0xff80, 0x8000, 0x7f80};
  const Tensor src = make_f32(dev, {8}, in);
  const Tensor dst = make(dev, {2, 4}, DType::kBF16);
  ASSERT_TRUE(dev.cast(src, dst, kComputeStream).is_ok());
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_EQ(dst.data<std::uint16_t>()[i], want[i]) << i;

  // bf16 -> fp32 is exact.
  const Tensor back = make(dev, {8});
  ASSERT_TRUE(dev.cast(dst, back, kComputeStream).is_ok());
  const std::vector<float> out = get(back);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], 1.0f + 2 * 0.0078125f);
  EXPECT_TRUE(std::isnan(out[3]));
  EXPECT_EQ(out[4], kInf);
  EXPECT_TRUE(std::signbit(out[6]));
}

TEST(CpuCastTest, Fp16AndBetweenHalfTypes) {
  CpuDevice dev;
  const Tensor src = make_f32(dev, {4}, {1.0f + 0.00048828125f, 65520.0f, std::ldexp(1.0f, -24), 0.1f});
  const Tensor h = make(dev, {4}, DType::kF16);
  ASSERT_TRUE(dev.cast(src, h, kComputeStream).is_ok());
  EXPECT_EQ(h.data<std::uint16_t>()[0], 0x3c00);  // tie to even
  EXPECT_EQ(h.data<std::uint16_t>()[1], 0x7c00);  // overflow to inf
  EXPECT_EQ(h.data<std::uint16_t>()[2], 0x0001);  // smallest subnormal
  // fp16 -> bf16 goes through the exact fp32 value.
  const Tensor b = make(dev, {4}, DType::kBF16);
  ASSERT_TRUE(dev.cast(h, b, kComputeStream).is_ok());
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(b.data<std::uint16_t>()[i], float_to_bf16(fp16_to_float(h.data<std::uint16_t>()[i]))) << i;
  }
  // Same dtype is a copy.
  const Tensor b2 = make(dev, {4}, DType::kBF16);
  ASSERT_TRUE(dev.cast(b, b2, kComputeStream).is_ok());
  EXPECT_EQ(std::memcmp(b.bytes(), b2.bytes(), 8), 0);
}

TEST(CpuCastTest, RejectsIntegersOverlapAndCountMismatch) {
  CpuDevice dev;
  const Tensor f = make_f32(dev, {4}, {1, 2, 3, 4});
  const Tensor i = make(dev, {4}, DType::kI64, "i");
  const Status s = dev.cast(f, i, kComputeStream);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("only fp32, bf16 and fp16"));
  EXPECT_FALSE(dev.cast(i, f, kComputeStream).is_ok());
  EXPECT_FALSE(dev.cast(f, make(dev, {3}, DType::kBF16), kComputeStream).is_ok());
  // An in-place cast over the same bytes would read values it already overwrote.
  const Tensor bf_view = *Tensor::view_of(f.storage(), DType::kBF16, {4}, 2, "bf_view");
  const Status overlap = dev.cast(f, bf_view, kComputeStream);
  EXPECT_EQ(overlap.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(overlap.message(), HasSubstr("overlap"));
  EXPECT_EQ(get(f), (std::vector<float>{1, 2, 3, 4}));
}

TEST(CpuAxpyScaleTest, ValuesAndErrors) {
  CpuDevice dev;
  const Tensor x = make_f32(dev, {4}, {1, 2, 3, 4}, "x");
  const Tensor y = make_f32(dev, {2, 2}, {10, 20, 30, 40}, "y");
  ASSERT_TRUE(dev.axpy(0.5f, x, y, kComputeStream).is_ok());
  EXPECT_EQ(get(y), (std::vector<float>{10.5f, 21, 31.5f, 42}));
  ASSERT_TRUE(dev.scale(y, -2.0f, kComputeStream).is_ok());
  EXPECT_EQ(get(y), (std::vector<float>{-21, -42, -63, -84}));
  ASSERT_TRUE(dev.axpy(1.0f, x, x, kComputeStream).is_ok());  // x += x
  EXPECT_EQ(get(x), (std::vector<float>{2, 4, 6, 8}));

  const Status count = dev.axpy(1.0f, x, make(dev, {5}, DType::kF32, "y5"), kComputeStream);
  EXPECT_EQ(count.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(count.message(), HasSubstr("'y5'"));
  const Status dtype = dev.axpy(1.0f, make(dev, {4}, DType::kBF16, "xb"), y, kComputeStream);
  EXPECT_EQ(dtype.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(dtype.message(), HasSubstr("'xb'"));
  EXPECT_THAT(dtype.message(), HasSubstr("must be fp32"));
  EXPECT_FALSE(dev.scale(make(dev, {4}, DType::kI64), 2.0f, kComputeStream).is_ok());
}

// ---- gemm -----------------------------------------------------------------------------------

// Naive double-precision c = alpha * op(a) op(b) + beta * c (beta == 0 ignores c).
std::vector<double> reference_gemm(const std::vector<float>& a, bool ta, const std::vector<float>& b, bool tb,
                                   const std::vector<float>& c, std::int64_t m, std::int64_t n, std::int64_t k,
                                   float alpha, float beta) {
  std::vector<double> out(static_cast<std::size_t>(m * n));
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (std::int64_t p = 0; p < k; ++p) {
        const double av = ta ? a[static_cast<std::size_t>(p * m + i)] : a[static_cast<std::size_t>(i * k + p)];
        const double bv = tb ? b[static_cast<std::size_t>(j * k + p)] : b[static_cast<std::size_t>(p * n + j)];
        acc += av * bv;
      }
      const double prev = beta == 0.0f ? 0.0 : static_cast<double>(beta) * c[static_cast<std::size_t>(i * n + j)];
      out[static_cast<std::size_t>(i * n + j)] = static_cast<double>(alpha) * acc + prev;
    }
  }
  return out;
}

TEST(CpuGemmTest, SmallKnownProduct) {
  CpuDevice dev;
  const Tensor a = make_f32(dev, {2, 3}, {1, 2, 3, 4, 5, 6}, "a");
  const Tensor b = make_f32(dev, {3, 2}, {7, 8, 9, 10, 11, 12}, "b");
  const Tensor c = make_f32(dev, {2, 2}, {1, 1, 1, 1}, "c");
  ASSERT_TRUE(dev.gemm(a, false, b, false, c, 1.0f, 0.0f, kComputeStream).is_ok());
  EXPECT_EQ(get(c), (std::vector<float>{58, 64, 139, 154}));
  ASSERT_TRUE(dev.gemm(a, false, b, false, c, 2.0f, 1.0f, kComputeStream).is_ok());
  EXPECT_EQ(get(c), (std::vector<float>{174, 192, 417, 462}));
  // aᵀ aᵀ... op(a) = aᵀ [3, 2] times op(b) = bᵀ [2, 3] is [3, 3].
  const Tensor c33 = make(dev, {3, 3}, DType::kF32, "c33");
  ASSERT_TRUE(dev.gemm(a, true, b, true, c33, 1.0f, 0.0f, kComputeStream).is_ok());
  EXPECT_EQ(get(c33), (std::vector<float>{39, 49, 59, 54, 68, 82, 69, 87, 105}));
}

RC_GTEST_PROP(CpuGemmProperty, AllTransposeCombosMatchNaiveLoop, ()) {
  const std::int64_t m = *rc::gen::inRange<std::int64_t>(0, 9);
  const std::int64_t n = *rc::gen::inRange<std::int64_t>(0, 9);
  const std::int64_t k = *rc::gen::inRange<std::int64_t>(0, 40);
  const bool ta = *rc::gen::arbitrary<bool>();
  const bool tb = *rc::gen::arbitrary<bool>();
  const float alpha = *rc::gen::element(1.0f, -0.5f, 2.0f, 0.0f);
  const float beta = *rc::gen::element(0.0f, 1.0f, -1.5f);
  Rng rng(*rc::gen::arbitrary<std::uint64_t>());

  CpuDevice dev;
  const Tensor a = random_f32(dev, ta ? Shape{k, m} : Shape{m, k}, rng, "a");
  const Tensor b = random_f32(dev, tb ? Shape{n, k} : Shape{k, n}, rng, "b");
  const Tensor c = random_f32(dev, {m, n}, rng, "c");
  const auto want = reference_gemm(get(a), ta, get(b), tb, get(c), m, n, k, alpha, beta);
  RC_ASSERT(dev.gemm(a, ta, b, tb, c, alpha, beta, kComputeStream).is_ok());
  const auto got = get(c);
  for (std::size_t i = 0; i < got.size(); ++i) {
    // |a|, |b|, |c| <= 1: each term is <= 2 in magnitude; fp32 error <= (k + 2) * eps * 2 * |terms|.
    const double tol = 1e-6 * static_cast<double>(k + 2) * 4.0;
    RC_ASSERT(std::abs(static_cast<double>(got[i]) - want[i]) <= tol);
  }
}

TEST(CpuGemmTest, BetaZeroIgnoresNaNAndInfInC) {
  CpuDevice dev;
  const Tensor a = make_f32(dev, {2, 2}, {1, 2, 3, 4}, "a");
  const Tensor b = make_f32(dev, {2, 2}, {1, 0, 0, 1}, "b");
  const Tensor c = make_f32(dev, {2, 2}, {kNaN, kInf, -kInf, kNaN}, "c");
  ASSERT_TRUE(dev.gemm(a, false, b, false, c, 1.0f, 0.0f, kComputeStream).is_ok());
  EXPECT_EQ(get(c), (std::vector<float>{1, 2, 3, 4}));
  // Also when the product is empty (K = 0): c becomes exactly zero.
  const Tensor a0 = make(dev, {2, 0}, DType::kF32, "a0");
  const Tensor b0 = make(dev, {0, 2}, DType::kF32, "b0");
  set(c, {kNaN, kNaN, kNaN, kNaN});
  ASSERT_TRUE(dev.gemm(a0, false, b0, false, c, 1.0f, 0.0f, kComputeStream).is_ok());
  EXPECT_EQ(get(c), (std::vector<float>{0, 0, 0, 0}));
  // K = 0 with beta != 0 scales c.
  set(c, {1, 2, 3, 4});
  ASSERT_TRUE(dev.gemm(a0, false, b0, false, c, 1.0f, 3.0f, kComputeStream).is_ok());
  EXPECT_EQ(get(c), (std::vector<float>{3, 6, 9, 12}));
}

TEST(CpuGemmTest, ShapeMismatchNamesTheShapesAndWritesNothing) {
  CpuDevice dev;
  const Tensor a = make_f32(dev, {2, 3}, {1, 2, 3, 4, 5, 6}, "a");
  const Tensor b = make(dev, {4, 5}, DType::kF32, "b");
  const Tensor c = make_f32(dev, {2, 5}, std::vector<float>(10, 7.0f), "c");
  const Status s = dev.gemm(a, false, b, false, c, 1.0f, 0.0f, kComputeStream);
  ASSERT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("op(a) is [2, 3], op(b) is [4, 5], c is [2, 5]"));
  EXPECT_THAT(s.message(), HasSubstr("expected op(a) [M, K] × op(b) [K, N] = c [M, N]"));
  EXPECT_EQ(get(c), std::vector<float>(10, 7.0f));

  // Transposes count: aᵀ is [3, 2].
  EXPECT_THAT(dev.gemm(a, true, b, false, c, 1.0f, 0.0f, kComputeStream).message(),
              HasSubstr("op(a) is [3, 2], op(b) is [4, 5]"));
  // c of the wrong shape.
  const Tensor b35 = make(dev, {3, 5}, DType::kF32, "b35");
  EXPECT_THAT(dev.gemm(a, false, b35, false, make(dev, {5, 2}), 1.0f, 0.0f, kComputeStream).message(),
              HasSubstr("c is [5, 2]"));
  // Not 2-D, or not fp32.
  const Status rank = dev.gemm(make(dev, {6}, DType::kF32, "flat"), false, b, false, c, 1, 0, kComputeStream);
  EXPECT_THAT(rank.message(), HasSubstr("'flat'"));
  EXPECT_THAT(rank.message(), HasSubstr("must be 2-D"));
  EXPECT_THAT(dev.gemm(make(dev, {2, 3}, DType::kBF16, "ab"), false, b35, false, c, 1, 0, kComputeStream).message(),
              HasSubstr("must be fp32"));
}

TEST(CpuGemmTest, OutputOverlappingAnInputIsRejected) {
  CpuDevice dev;
  const Tensor buf = make_f32(dev, {8}, {1, 2, 3, 4, 5, 6, 7, 8}, "buf");
  const Tensor a = *buf.narrow(0, 4)->reshape({2, 2});
  const Tensor c = *buf.narrow(2, 4)->reshape({2, 2});
  const Tensor b = make_f32(dev, {2, 2}, {1, 0, 0, 1}, "b");
  const Status s = dev.gemm(a, false, b, false, c, 1.0f, 0.0f, kComputeStream);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("overlaps"));
  EXPECT_EQ(get(buf), (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}));
  // The same tensor as both inputs is fine (a aᵀ).
  const Tensor c2 = make(dev, {2, 2}, DType::kF32, "c2");
  ASSERT_TRUE(dev.gemm(a, false, a, true, c2, 1.0f, 0.0f, kComputeStream).is_ok());
  EXPECT_EQ(get(c2), (std::vector<float>{5, 11, 11, 25}));
}

// ---- bias ------------------------------------------------------------------------------------

TEST(CpuBiasTest, AddBiasOverTheLastDim) {
  CpuDevice dev;
  const Tensor x = make_f32(dev, {2, 3}, {1, 2, 3, 4, 5, 6}, "x");
  const Tensor bias = make_f32(dev, {3}, {10, 20, 30}, "bias");
  ASSERT_TRUE(dev.add_bias(x, bias, kComputeStream).is_ok());
  EXPECT_EQ(get(x), (std::vector<float>{11, 22, 33, 14, 25, 36}));
  // Any leading shape works.
  const Tensor x3 = make_f32(dev, {2, 1, 3}, {0, 0, 0, 1, 1, 1}, "x3");
  ASSERT_TRUE(dev.add_bias(x3, bias, kComputeStream).is_ok());
  EXPECT_EQ(get(x3), (std::vector<float>{10, 20, 30, 11, 21, 31}));

  const Status s = dev.add_bias(x, make(dev, {2}, DType::kF32, "b2"), kComputeStream);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("'x'"));
  EXPECT_THAT(s.message(), HasSubstr("bias size 2"));
  EXPECT_EQ(get(x), (std::vector<float>{11, 22, 33, 14, 25, 36}));
}

TEST(CpuBiasTest, BiasGradSumsRowsOverwritingOrAccumulating) {
  CpuDevice dev;
  const Tensor dy = make_f32(dev, {3, 2}, {1, 2, 3, 4, 5, 6}, "dy");
  const Tensor db = make_f32(dev, {2}, {100, 100}, "db");
  ASSERT_TRUE(dev.bias_grad(dy, db, /*accumulate=*/false, kComputeStream).is_ok());
  EXPECT_EQ(get(db), (std::vector<float>{9, 12}));
  ASSERT_TRUE(dev.bias_grad(dy, db, /*accumulate=*/true, kComputeStream).is_ok());
  EXPECT_EQ(get(db), (std::vector<float>{18, 24}));
  // Zero rows: overwrite gives zeros.
  ASSERT_TRUE(dev.bias_grad(make(dev, {0, 2}), db, false, kComputeStream).is_ok());
  EXPECT_EQ(get(db), (std::vector<float>{0, 0}));
  const Status s = dev.bias_grad(dy, make(dev, {3}, DType::kF32, "db3"), false, kComputeStream);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("bias size 3"));
}

TEST(CpuBiasTest, BiasGradSumsInRowOrder) {
  // 1e8 + 1 + ... + 1 in fp32 stays at 1e8 when added row by row (each +1 rounds away);
  // a pairwise or reordered sum would differ. The documented order is rows first to last.
  CpuDevice dev;
  const int rows = 17;
  std::vector<float> v(rows, 1.0f);
  v[0] = 1e8f;
  const Tensor dy = make_f32(dev, {rows, 1}, v, "dy");
  const Tensor db = make(dev, {1}, DType::kF32, "db");
  ASSERT_TRUE(dev.bias_grad(dy, db, false, kComputeStream).is_ok());
  float want = 0.0f;
  for (float x : v) want += x;
  EXPECT_EQ(get(db)[0], want);
}

// ---- activations -----------------------------------------------------------------------------

double ref_act(Activation act, double x) {
  switch (act) {
    case Activation::kRelu: return x > 0 ? x : 0;
    case Activation::kGelu: return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case Activation::kGeluTanh: {
      const double c = std::sqrt(2.0 / std::numbers::pi);
      return 0.5 * x * (1.0 + std::tanh(c * (x + 0.044715 * x * x * x)));
    }
    case Activation::kTanh: return std::tanh(x);
  }
  return 0;
}

std::vector<float> run_act(CpuDevice& dev, Activation act, const std::vector<float>& xs) {
  const Tensor x = make_f32(dev, {static_cast<std::int64_t>(xs.size())}, xs, "x");
  const Tensor y = make(dev, x.shape(), DType::kF32, "y");
  SHARDLAB_CHECK_OK(dev.activation(act, x, y, kComputeStream));
  return get(y);
}

TEST(CpuActivationTest, ValuesAtKnownPoints) {
  CpuDevice dev;
  EXPECT_EQ(run_act(dev, Activation::kRelu, {-1.5f, 0.0f, 2.25f}), (std::vector<float>{0, 0, 2.25f}));
  const auto g = run_act(dev, Activation::kGelu, {1.0f, -1.0f, 0.0f, 3.0f});
  EXPECT_NEAR(g[0], 0.8413447460685429, 1e-6);
  EXPECT_NEAR(g[1], -0.15865525393145707, 1e-6);
  EXPECT_EQ(g[2], 0.0f);
  EXPECT_NEAR(g[3], 2.99595030590511, 1e-6);  // 3 * Phi(3)
  const auto t = run_act(dev, Activation::kGeluTanh, {1.0f, -1.0f, 0.0f});
  EXPECT_NEAR(t[0], 0.8411919906082768, 1e-6);
  EXPECT_NEAR(t[1], -0.15880800939172324, 1e-6);
  EXPECT_EQ(t[2], 0.0f);
}

TEST(CpuActivationTest, ForwardMatchesDoubleReferenceOverARange) {
  CpuDevice dev;
  std::vector<float> xs;
  for (int i = -800; i <= 800; ++i) xs.push_back(static_cast<float>(i) / 100.0f);
  for (Activation act : {Activation::kRelu, Activation::kGelu, Activation::kGeluTanh}) {
    const auto ys = run_act(dev, act, xs);
    for (std::size_t i = 0; i < xs.size(); ++i) {
      const double want = ref_act(act, xs[i]);
      // A few fp32 roundings of values up to 8: 1e-6 relative plus 1e-7 absolute.
      ASSERT_NEAR(ys[i], want, 1e-6 * std::abs(want) + 1e-7) << static_cast<int>(act) << " x=" << xs[i];
    }
  }
}

// Regression: relu(NaN) was 0 (`x > 0 ? x : 0` is false for NaN), which hid diverged
// activations. PyTorch propagates NaN through relu; so do we.
TEST(CpuActivationTest, NaNPropagatesThroughEveryActivation) {
  CpuDevice dev;
  for (Activation act : {Activation::kRelu, Activation::kGelu, Activation::kGeluTanh}) {
    const auto y = run_act(dev, act, {kNaN});
    EXPECT_TRUE(std::isnan(y[0])) << static_cast<int>(act);
  }
  EXPECT_EQ(run_act(dev, Activation::kRelu, {kInf, -kInf}), (std::vector<float>{kInf, 0}));
}

TEST(CpuActivationTest, InPlaceForward) {
  CpuDevice dev;
  const Tensor x = make_f32(dev, {3}, {-1, 0.5f, 2}, "x");
  ASSERT_TRUE(dev.activation(Activation::kRelu, x, x, kComputeStream).is_ok());
  EXPECT_EQ(get(x), (std::vector<float>{0, 0.5f, 2}));
  EXPECT_FALSE(dev.activation(Activation::kRelu, x, make(dev, {4}), kComputeStream).is_ok());
}

TEST(CpuActivationTest, BackwardMatchesCentralFiniteDifferences) {
  // The derivative is compared with central differences of the double reference,
  // h = 1e-4 (truncation error ~h^2 * f''' / 6 < 1e-8): tolerance 2e-6 absolute plus
  // 2e-6 relative covers fp32 evaluation of erf/exp/tanh in the kernel.
  CpuDevice dev;
  std::vector<float> xs;
  for (int i = -600; i <= 600; i += 7) xs.push_back(static_cast<float>(i) / 100.0f + 0.003f);
  const auto n = static_cast<std::int64_t>(xs.size());
  const Tensor x = make_f32(dev, {n}, xs, "x");
  std::vector<float> dys;
  Rng rng(5);
  for (std::int64_t i = 0; i < n; ++i) dys.push_back(rng.uniform(-2.0f, 2.0f));
  const Tensor dy = make_f32(dev, {n}, dys, "dy");
  const Tensor dx = make(dev, {n}, DType::kF32, "dx");
  for (Activation act : {Activation::kRelu, Activation::kGelu, Activation::kGeluTanh}) {
    ASSERT_TRUE(dev.activation_backward(act, x, dy, dx, kComputeStream).is_ok());
    const auto got = get(dx);
    for (std::int64_t i = 0; i < n; ++i) {
      const double h = 1e-4;
      const double xd = xs[static_cast<std::size_t>(i)];
      const double fd = (ref_act(act, xd + h) - ref_act(act, xd - h)) / (2 * h);
      const double want = fd * dys[static_cast<std::size_t>(i)];
      ASSERT_NEAR(got[static_cast<std::size_t>(i)], want, 2e-6 + 2e-6 * std::abs(want))
          << static_cast<int>(act) << " x=" << xd;
    }
  }
}

TEST(CpuActivationTest, BackwardAtKnownPointsAndAliasing) {
  CpuDevice dev;
  const Tensor x = make_f32(dev, {3}, {-1, 0, 1}, "x");
  const Tensor dy = make_f32(dev, {3}, {1, 1, 1}, "dy");
  ASSERT_TRUE(dev.activation_backward(Activation::kRelu, x, dy, dy, kComputeStream).is_ok());  // dx aliases dy
  EXPECT_EQ(get(dy), (std::vector<float>{0, 0, 1}));                                           // relu'(0) = 0
  set(dy, {1, 1, 1});
  ASSERT_TRUE(dev.activation_backward(Activation::kGelu, x, dy, dy, kComputeStream).is_ok());
  const auto g = get(dy);
  EXPECT_NEAR(g[0], -0.0833154705876864, 1e-6);  // gelu'(-1) = Phi(-1) - phi(1)
  EXPECT_NEAR(g[1], 0.5, 1e-7);
  EXPECT_NEAR(g[2], 1.0833154705876864, 1e-6);
  const Status s = dev.activation_backward(Activation::kGelu, x, make(dev, {2}), dy, kComputeStream);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
}

// ---- softmax cross-entropy -------------------------------------------------------------------

// Double-precision loss sum over valid rows.
double reference_loss(const std::vector<float>& z, const std::vector<std::int64_t>& labels, std::int64_t c,
                      std::int64_t ignore_index, const std::vector<double>* override_z = nullptr) {
  double total = 0;
  for (std::size_t r = 0; r < labels.size(); ++r) {
    if (labels[r] == ignore_index) continue;
    auto at = [&](std::int64_t j) {
      const std::size_t idx = r * static_cast<std::size_t>(c) + static_cast<std::size_t>(j);
      return override_z ? (*override_z)[idx] : static_cast<double>(z[idx]);
    };
    double mx = at(0);
    for (std::int64_t j = 1; j < c; ++j) mx = std::max(mx, at(j));
    double sum = 0;
    for (std::int64_t j = 0; j < c; ++j) sum += std::exp(at(j) - mx);
    total += std::log(sum) + mx - at(labels[r]);
  }
  return total;
}

struct CeSetup {
  Tensor logits, labels, loss, dlogits;
};

CeSetup make_ce(CpuDevice& dev, const std::vector<float>& z, const std::vector<std::int64_t>& labels, std::int64_t c) {
  const auto n = static_cast<std::int64_t>(labels.size());
  CeSetup s;
  s.logits = make_f32(dev, {n, c}, z, "logits");
  s.labels = make(dev, {n}, DType::kI64, "labels");
  std::memcpy(s.labels.data<std::int64_t>(), labels.data(), labels.size() * sizeof(std::int64_t));
  s.loss = make_f32(dev, {1}, {-1.0f}, "loss");
  s.dlogits = make_f32(dev, {n, c}, std::vector<float>(static_cast<std::size_t>(n * c), 123.0f), "dlogits");
  return s;
}

TEST(CpuCrossEntropyTest, UniformLogitsGiveLogC) {
  CpuDevice dev;
  CeSetup s = make_ce(dev, std::vector<float>(8, 0.0f), {0, 3}, 4);
  ASSERT_TRUE(dev.softmax_cross_entropy(s.logits, s.labels, s.loss, s.dlogits, 1.0f, -100, kComputeStream).is_ok());
  EXPECT_NEAR(get(s.loss)[0], 2 * std::log(4.0), 1e-6);
  EXPECT_EQ(get(s.dlogits), (std::vector<float>{-0.75f, 0.25f, 0.25f, 0.25f, 0.25f, 0.25f, 0.25f, -0.75f}));
}

RC_GTEST_PROP(CpuCrossEntropyProperty, LossAndGradientMatchReferences, ()) {
  const std::int64_t n = *rc::gen::inRange<std::int64_t>(1, 6);
  const std::int64_t c = *rc::gen::inRange<std::int64_t>(1, 9);
  const float grad_scale = *rc::gen::element(1.0f, 0.25f, -2.0f);
  Rng rng(*rc::gen::arbitrary<std::uint64_t>());
  std::vector<float> z;
  for (std::int64_t i = 0; i < n * c; ++i) z.push_back(rng.uniform(-4.0f, 4.0f));
  std::vector<std::int64_t> labels;
  for (std::int64_t r = 0; r < n; ++r) {
    labels.push_back(
        rng.uniform_int(4) == 0 ? -100 : static_cast<std::int64_t>(rng.uniform_int(static_cast<std::uint64_t>(c))));
  }
  CpuDevice dev;
  CeSetup s = make_ce(dev, z, labels, c);
  RC_ASSERT(dev.softmax_cross_entropy(s.logits, s.labels, s.loss, s.dlogits, grad_scale, -100, kComputeStream).is_ok());

  // Loss: per row a few fp32 roundings of values up to ~log(C) + 8: 1e-5 per row.
  const double want = reference_loss(z, labels, c, -100);
  RC_ASSERT(std::abs(get(s.loss)[0] - want) <= 1e-5 * static_cast<double>(n) + 1e-6 * std::abs(want));

  // dlogits vs central differences of the double loss (h = 1e-4, error ~1e-8), scaled.
  std::vector<double> zd(z.begin(), z.end());
  const auto got = get(s.dlogits);
  for (std::size_t i = 0; i < zd.size(); ++i) {
    const double keep = zd[i];
    zd[i] = keep + 1e-4;
    const double up = reference_loss(z, labels, c, -100, &zd);
    zd[i] = keep - 1e-4;
    const double down = reference_loss(z, labels, c, -100, &zd);
    zd[i] = keep;
    const double fd = (up - down) / 2e-4 * grad_scale;
    RC_ASSERT(std::abs(got[i] - fd) <= 2e-6 * std::abs(grad_scale) + 1e-6);
  }
  // Each valid row of the gradient sums to zero; ignored rows are exactly zero.
  for (std::int64_t r = 0; r < n; ++r) {
    double row = 0;
    for (std::int64_t j = 0; j < c; ++j) {
      const float g = got[static_cast<std::size_t>(r * c + j)];
      if (labels[static_cast<std::size_t>(r)] == -100) RC_ASSERT(g == 0.0f);
      row += g;
    }
    RC_ASSERT(std::abs(row) <= 1e-6 * static_cast<double>(c) * std::abs(grad_scale));
  }
}

TEST(CpuCrossEntropyTest, DlogitsMatchFiniteDifferencesOfTheDevicesOwnLoss) {
  // The kernel's own fp32 loss, differenced with h = 1e-2: truncation ~h^2 = 1e-4 and
  // fp32 noise ~eps * loss / h ~ 1e-5, so 1e-3 absolute.
  CpuDevice dev;
  Rng rng(31);
  const std::int64_t n = 3, c = 5;
  std::vector<float> z;
  for (int i = 0; i < n * c; ++i) z.push_back(rng.uniform(-2.0f, 2.0f));
  const std::vector<std::int64_t> labels = {4, 0, 2};
  CeSetup s = make_ce(dev, z, labels, c);
  ASSERT_TRUE(dev.softmax_cross_entropy(s.logits, s.labels, s.loss, s.dlogits, 1.0f, -100, kComputeStream).is_ok());
  const auto grad = get(s.dlogits);
  const float h = 1e-2f;
  for (std::size_t i = 0; i < z.size(); ++i) {
    auto loss_at = [&](float delta) {
      std::vector<float> zz = z;
      zz[i] += delta;
      CeSetup t = make_ce(dev, zz, labels, c);
      SHARDLAB_CHECK_OK(dev.softmax_cross_entropy(t.logits, t.labels, t.loss, t.dlogits, 1.0f, -100, kComputeStream));
      return static_cast<double>(get(t.loss)[0]);
    };
    const double fd = (loss_at(h) - loss_at(-h)) / (2.0 * h);
    EXPECT_NEAR(grad[i], fd, 1e-3) << "logit " << i;
  }
}

TEST(CpuCrossEntropyTest, IgnoredRowsContributeNothingAndGetZeroGradient) {
  CpuDevice dev;
  const std::vector<float> z = {1, 2, 3, 50, -50, 7, 0.5f, 0.25f, 0};
  CeSetup s = make_ce(dev, z, {2, -100, 0}, 3);
  ASSERT_TRUE(dev.softmax_cross_entropy(s.logits, s.labels, s.loss, s.dlogits, 0.5f, -100, kComputeStream).is_ok());
  EXPECT_NEAR(get(s.loss)[0], reference_loss(z, {2, -100, 0}, 3, -100), 1e-5);
  const auto g = get(s.dlogits);
  EXPECT_EQ(g[3], 0.0f);
  EXPECT_EQ(g[4], 0.0f);
  EXPECT_EQ(g[5], 0.0f);
  EXPECT_NE(g[0], 0.0f);

  // A custom ignore index inside [0, C) ignores that class's rows.
  CeSetup t = make_ce(dev, z, {1, 1, 2}, 3);
  ASSERT_TRUE(dev.softmax_cross_entropy(t.logits, t.labels, t.loss, t.dlogits, 1.0f, 1, kComputeStream).is_ok());
  EXPECT_NEAR(get(t.loss)[0], reference_loss(z, {1, 1, 2}, 3, 1), 1e-5);
  for (int j = 0; j < 6; ++j) EXPECT_EQ(get(t.dlogits)[static_cast<std::size_t>(j)], 0.0f) << j;

  // Every row ignored: zero loss, zero gradient.
  CeSetup u = make_ce(dev, z, {-100, -100, -100}, 3);
  ASSERT_TRUE(dev.softmax_cross_entropy(u.logits, u.labels, u.loss, u.dlogits, 1.0f, -100, kComputeStream).is_ok());
  EXPECT_EQ(get(u.loss)[0], 0.0f);
  EXPECT_EQ(get(u.dlogits), std::vector<float>(9, 0.0f));
}

TEST(CpuCrossEntropyTest, LargeLogitsAreStable) {
  CpuDevice dev;
  CeSetup s = make_ce(dev, {1000.0f, 0.0f, -1000.0f, 0.0f, 1000.0f, 0.0f}, {0, 0}, 3);
  ASSERT_TRUE(dev.softmax_cross_entropy(s.logits, s.labels, s.loss, s.dlogits, 1.0f, -100, kComputeStream).is_ok());
  EXPECT_NEAR(get(s.loss)[0], 1000.0, 1e-3);  // row 0 ~0, row 1 ~1000
  for (float g : get(s.dlogits)) EXPECT_TRUE(std::isfinite(g));
}

TEST(CpuCrossEntropyTest, OutOfRangeLabelNamesRowAndValueAndWritesNothing) {
  CpuDevice dev;
  CeSetup s = make_ce(dev, std::vector<float>(16, 0.0f), {0, 3, 4, 1}, 4);
  const Status st = dev.softmax_cross_entropy(s.logits, s.labels, s.loss, s.dlogits, 1.0f, -100, kComputeStream);
  ASSERT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("label 4 at row 2"));
  EXPECT_THAT(st.message(), HasSubstr("outside [0, 4)"));
  EXPECT_THAT(st.message(), HasSubstr("ignore index -100"));
  EXPECT_EQ(get(s.loss)[0], -1.0f);
  EXPECT_EQ(get(s.dlogits), std::vector<float>(16, 123.0f));

  CeSetup neg = make_ce(dev, std::vector<float>(8, 0.0f), {-1, 0}, 4);
  EXPECT_THAT(
      dev.softmax_cross_entropy(neg.logits, neg.labels, neg.loss, neg.dlogits, 1.0f, -100, kComputeStream).message(),
      HasSubstr("label -1 at row 0"));
}

TEST(CpuCrossEntropyTest, RejectsBadOperands) {
  CpuDevice dev;
  CeSetup s = make_ce(dev, std::vector<float>(6, 0.0f), {0, 1}, 3);
  const Tensor labels3 = make(dev, {3}, DType::kI64, "labels3");
  EXPECT_THAT(dev.softmax_cross_entropy(s.logits, labels3, s.loss, s.dlogits, 1.0f, -100, kComputeStream).message(),
              HasSubstr("one label per row"));
  const Tensor f_labels = make(dev, {2}, DType::kF32, "f_labels");
  EXPECT_THAT(dev.softmax_cross_entropy(s.logits, f_labels, s.loss, s.dlogits, 1.0f, -100, kComputeStream).message(),
              HasSubstr("must be int64"));
  EXPECT_FALSE(
      dev.softmax_cross_entropy(s.logits, s.labels, make(dev, {2}), s.dlogits, 1.0f, -100, kComputeStream).is_ok());
  EXPECT_FALSE(
      dev.softmax_cross_entropy(s.logits, s.labels, s.loss, make(dev, {5}), 1.0f, -100, kComputeStream).is_ok());
}

TEST(CpuGemmTest, EigenBlocksForThePinnedCacheSizesWhateverTheHost) {
  // NOTE [Pinned GEMM blocking]: the k-panel size, hence every GEMM's summation order,
  // must not come from this machine's CPUID.
  const CpuDevice dev;
  EXPECT_EQ(Eigen::l1CacheSize(), kPinnedL1Bytes);
  EXPECT_EQ(Eigen::l2CacheSize(), kPinnedL2Bytes);
  EXPECT_EQ(Eigen::l3CacheSize(), kPinnedL3Bytes);
}

// ---- optimizer_step -------------------------------------------------------------------------

TEST(CpuOptimizerStepTest, AdamWFirstStepIsLrTimesTheSignAndElementsOutsideTheViewStay) {
  CpuDevice dev;
  const Tensor p = make_f32(dev, {4}, {1.0f, 2.0f, -1.0f, 0.5f}, "p");
  const Tensor g = make_f32(dev, {4}, {0.5f, -2.0f, 1e-3f, 0.25f}, "g");
  const Tensor m = make_f32(dev, {4}, {0, 0, 0, 0}, "m"), v = make_f32(dev, {4}, {0, 0, 0, 0}, "v");
  OptimizerUpdate u;
  u.kind = OptimizerKind::kAdamW;
  u.lr = 0.1f;
  u.weight_decay = 0.01f;
  u.step = 1;
  const auto first3 = [](const Tensor& t) { return *t.narrow(0, 3); };
  ASSERT_TRUE(dev.optimizer_step(u, first3(p), first3(g), first3(m), first3(v), kComputeStream).is_ok());
  // Step 1: bias correction makes m̂ = g and v̂ = g², so p ← p·(1 − lr·wd) − lr·g / (|g| + eps).
  const std::vector<float> gs = {0.5f, -2.0f, 1e-3f};
  const std::vector<float> ps = {1.0f, 2.0f, -1.0f};
  for (int i = 0; i < 3; ++i) {
    const double expect = ps[i] * (1.0 - 0.1 * 0.01) - 0.1 * gs[i] / (std::fabs(gs[i]) + 1e-8);
    EXPECT_NEAR(get(p)[i], expect, 2e-6) << i;
    EXPECT_NEAR(get(m)[i], 0.1 * gs[i], 1e-7) << i;
    EXPECT_NEAR(get(v)[i], 0.001 * gs[i] * gs[i], 2e-5 * 0.001 * gs[i] * gs[i]) << i;  // 1 - 0.999f in fp32
  }
  EXPECT_EQ(get(p)[3], 0.5f);  // outside the view: untouched, state included
  EXPECT_EQ(get(m)[3], 0.0f);
  EXPECT_EQ(get(v)[3], 0.0f);
}

// The update loop is vectorized (CpuDevice::optimizer_step); every element must still get
// the bits of the element-by-element formula, NaN and inf included. Odd sizes exercise the
// loop tails. With a mask (Optimizer::step: the runs of kept elements, one device update
// each) a frozen element keeps its bits exactly, state included.
RC_GTEST_PROP(CpuOptimizerStepTest, VectorizedAdamWEqualsTheScalarFormulaBitwise, ()) {
  const std::int64_t n = *rc::gen::inRange<std::int64_t>(1, 300);
  const int step = *rc::gen::inRange(1, 50);
  Rng rng(*rc::gen::arbitrary<std::uint64_t>());
  CpuDevice dev;
  const Tensor p0 = random_f32(dev, {n}, rng, "p0"), g = random_f32(dev, {n}, rng, "g");
  const Tensor m0 = random_f32(dev, {n}, rng, "m0"), v0 = random_f32(dev, {n}, rng, "v0");
  for (std::int64_t i = 0; i < n; ++i) v0.data<float>()[i] = std::fabs(v0.data<float>()[i]);  // a second moment
  std::vector<std::uint8_t> mask(static_cast<std::size_t>(n));
  for (auto& b : mask) b = static_cast<std::uint8_t>(*rc::gen::inRange(0, 3) != 0);
  optim::OptimizerConfig config;
  config.kind = OptimizerKind::kAdamW;
  config.lr = 1e-3f;
  config.weight_decay = 0.01f;
  p0.data<float>()[0] = std::numeric_limits<float>::quiet_NaN();  // frozen or not, NaN stays NaN
  if (n > 1) p0.data<float>()[1] = std::numeric_limits<float>::infinity();
  OptimizerUpdate u;
  u.kind = OptimizerKind::kAdamW;
  u.lr = 1e-3f;
  u.weight_decay = 0.01f;
  u.step = step;
  // The formula element by element (as the loop was before it was vectorized).
  const double bc1 = 1.0 - std::pow(static_cast<double>(u.beta1), static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(u.beta2), static_cast<double>(step));
  const float step_size = static_cast<float>(u.lr / bc1), bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  const auto copy_of = [&](const Tensor& t, const char* name) {
    Tensor c = *dev.empty({n}, DType::kF32, MemoryCategory::kOther, name);
    std::memcpy(c.data<float>(), t.data<float>(), static_cast<std::size_t>(n) * 4);
    return c;
  };
  for (const bool masked : {false, true}) {
    const Tensor p = copy_of(p0, "p");
    auto opt = optim::Optimizer::create(dev, config, n, "opt");
    RC_ASSERT(opt.is_ok());
    const Tensor m = opt->state()[0], v = opt->state()[1];
    std::memcpy(m.data<float>(), m0.data<float>(), static_cast<std::size_t>(n) * 4);
    std::memcpy(v.data<float>(), v0.data<float>(), static_cast<std::size_t>(n) * 4);
    opt->set_steps(step - 1);
    RC_ASSERT(opt->step(p, g, masked ? &mask : nullptr).is_ok());
    for (std::int64_t i = 0; i < n; ++i) {
      float pe = p0.data<float>()[i], me = m0.data<float>()[i], ve = v0.data<float>()[i];
      if (!masked || mask[static_cast<std::size_t>(i)]) {
        const float gi = g.data<float>()[i];
        pe *= 1.0f - u.lr * u.weight_decay;
        me = u.beta1 * me + (1.0f - u.beta1) * gi;
        ve = u.beta2 * ve + (1.0f - u.beta2) * gi * gi;
        const float denom = std::sqrt(ve) / bc2_sqrt + u.eps;
        pe -= step_size * me / denom;
      }
      RC_ASSERT(std::memcmp(&p.data<float>()[i], &pe, 4) == 0);
      RC_ASSERT(std::memcmp(&m.data<float>()[i], &me, 4) == 0);
      RC_ASSERT(std::memcmp(&v.data<float>()[i], &ve, 4) == 0);
    }
  }
}

TEST(CpuOptimizerStepTest, SgdMomentumStartsFromTheGradient) {
  CpuDevice dev;
  const Tensor p = make_f32(dev, {1}, {1.0f}, "p"), g = make_f32(dev, {1}, {0.5f}, "g");
  const Tensor buf = make_f32(dev, {1}, {123.0f}, "buf");  // step 1 overwrites whatever is there
  OptimizerUpdate u;
  u.kind = OptimizerKind::kSgd;
  u.lr = 0.1f;
  u.momentum = 0.9f;
  ASSERT_TRUE(dev.optimizer_step(u, p, g, buf, Tensor(), kComputeStream).is_ok());
  EXPECT_FLOAT_EQ(get(buf)[0], 0.5f);
  EXPECT_FLOAT_EQ(get(p)[0], 0.95f);
  u.step = 2;
  ASSERT_TRUE(dev.optimizer_step(u, p, g, buf, Tensor(), kComputeStream).is_ok());
  EXPECT_FLOAT_EQ(get(buf)[0], 0.95f);
  EXPECT_FLOAT_EQ(get(p)[0], 0.855f);
}

TEST(CpuOptimizerStepTest, RejectsBadOperandsWithoutWriting) {
  CpuDevice dev;
  const Tensor p = make_f32(dev, {3}, {1, 2, 3}, "p"), g = make_f32(dev, {3}, {1, 1, 1}, "g");
  const Tensor m = make_f32(dev, {3}, {0, 0, 0}, "m"), v2 = make_f32(dev, {2}, {0, 0}, "v2");
  const Tensor v = make_f32(dev, {3}, {0, 0, 0}, "v");
  const Tensor b = make(dev, {3}, DType::kBF16, "b");
  OptimizerUpdate adamw;
  adamw.kind = OptimizerKind::kAdamW;
  const auto msg = [&](const Status& s) { return s.is_ok() ? std::string("ok") : s.to_string(); };
  EXPECT_THAT(msg(dev.optimizer_step(adamw, p, g, m, Tensor(), kComputeStream)),
              HasSubstr("AdamW needs 2 state tensor(s)"));
  EXPECT_THAT(msg(dev.optimizer_step(adamw, p, g, m, v2, kComputeStream)), HasSubstr("expected 3"));
  EXPECT_THAT(msg(dev.optimizer_step(adamw, p, b, m, v, kComputeStream)), HasSubstr("must be fp32"));
  EXPECT_THAT(msg(dev.optimizer_step(adamw, p, g, m, m, kComputeStream)), HasSubstr("overlaps"));
  OptimizerUpdate sgd;
  EXPECT_THAT(msg(dev.optimizer_step(sgd, p, g, m, Tensor(), kComputeStream)),
              HasSubstr("SGD needs 0 state tensor(s)"));
  sgd.step = 0;
  EXPECT_THAT(msg(dev.optimizer_step(sgd, p, g, Tensor(), Tensor(), kComputeStream)), HasSubstr("step must be >= 1"));
  EXPECT_THAT(msg(dev.optimizer_step(sgd, p, g, Tensor(), Tensor(), 7)), HasSubstr("stream"));
  EXPECT_EQ(get(p), (std::vector<float>{1, 2, 3}));
}

}  // namespace
}  // namespace shardlab::runtime::device::cpu
