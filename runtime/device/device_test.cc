// Tests for the backend-independent parts of the Device seam: DeviceId parsing and
// the empty/zeros helpers (run through the cpu backend).
#include "runtime/device/device.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <limits>

#include "runtime/device/cpu/device.h"
#include "testing/status_matchers.h"

using shardlab::testlib::IsOk;

namespace shardlab::runtime::device {
namespace {

using ::testing::HasSubstr;

TEST(DeviceIdTest, ParsesTypeAndOptionalIndex) {
  struct Case {
    const char* text;
    const char* type;
    int index;
  };
  const Case cases[] = {
      {"hpu", "hpu", DeviceId::kNoIndex}, {"hpu:0", "hpu", 0},   {"sim:3", "sim", 3},
      {"cpu", "cpu", DeviceId::kNoIndex}, {"hpu:15", "hpu", 15}, {"sim:65535", "sim", 65535},
  };
  for (const Case& c : cases) {
    const Result<DeviceId> r = DeviceId::parse(c.text);
    ASSERT_THAT(r, IsOk()) << c.text;
    EXPECT_EQ(r->type, c.type) << c.text;
    EXPECT_EQ(r->index, c.index) << c.text;
    EXPECT_EQ(r->has_index(), c.index != DeviceId::kNoIndex) << c.text;
    EXPECT_EQ(r->to_string(), c.text);
  }
}

TEST(DeviceIdTest, RejectsMalformedText) {
  for (const char* text : {"", "HPU", "Hpu:0", "hpu:", "hpu:-1", "hpu:x", ":0", "hpu:0:1", "hpu:1x", "hpu: 1", "hpu:+1",
                           "hpu 0", "hpu2", "hpu:99999999999"}) {
    const Result<DeviceId> r = DeviceId::parse(text);
    ASSERT_FALSE(r.is_ok()) << "'" << text << "' parsed as " << r->to_string();
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(r.status().message(), HasSubstr("device '" + std::string(text) + "'"));
    EXPECT_THAT(r.status().message(), HasSubstr("expected TYPE or TYPE:INDEX"));
  }
  EXPECT_THAT(DeviceId::parse("hpu:-1").status().message(), HasSubstr("'-1' is not a non-negative integer"));
  EXPECT_THAT(DeviceId::parse("HPU").status().message(), HasSubstr("lower-case"));
  EXPECT_THAT(DeviceId::parse("").status().message(), HasSubstr("empty"));
}

TEST(DeviceIdTest, EqualityAndToString) {
  EXPECT_EQ((DeviceId{"hpu", 0}), *DeviceId::parse("hpu:0"));
  EXPECT_NE((DeviceId{"hpu", 0}), *DeviceId::parse("hpu"));  // "hpu:0 vs hpu" is a real difference
  EXPECT_NE((DeviceId{"hpu", 0}), (DeviceId{"sim", 0}));
  EXPECT_EQ((DeviceId{"hpu", DeviceId::kNoIndex}).to_string(), "hpu");
  EXPECT_EQ((DeviceId{"sim", 12}).to_string(), "sim:12");
}

TEST(DeviceEmptyTest, AllocatesTheRightSizeInTheRightCategory) {
  cpu::CpuDevice dev;
  const Result<Tensor> t = dev.empty({3, 5}, DType::kBF16, MemoryCategory::kGradients, "g");
  ASSERT_THAT(t, IsOk());
  EXPECT_EQ(t->shape(), (Shape{3, 5}));
  EXPECT_EQ(t->dtype(), DType::kBF16);
  EXPECT_EQ(t->offset(), 0);
  EXPECT_EQ(t->name(), "g");
  EXPECT_EQ(t->storage()->nbytes(), 30);
  EXPECT_EQ(t->storage()->label(), "g");
  EXPECT_EQ(t->storage()->category(), MemoryCategory::kGradients);
  EXPECT_EQ(t->storage()->device_name(), "cpu");
  EXPECT_EQ(dev.memory().stats().current[static_cast<int>(MemoryCategory::kGradients)], 30);
}

TEST(DeviceEmptyTest, RejectsBadShapesWithoutAllocating) {
  cpu::CpuDevice dev;
  const Result<Tensor> neg = dev.empty({2, -1}, DType::kF32, MemoryCategory::kOther, "n");
  ASSERT_FALSE(neg.is_ok());
  EXPECT_EQ(neg.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(neg.status().message(), HasSubstr("negative"));
  // 2^62 fp32 elements is 2^64 bytes.
  const Result<Tensor> big = dev.empty({1ll << 62}, DType::kF32, MemoryCategory::kOther, "big");
  ASSERT_FALSE(big.is_ok());
  EXPECT_EQ(big.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(big.status().message(), HasSubstr("'big'"));
  EXPECT_THAT(big.status().message(), HasSubstr("2^63 bytes"));
  EXPECT_EQ(dev.memory().stats().allocations, 0);
}

TEST(DeviceEmptyTest, EmptyAndScalarShapes) {
  cpu::CpuDevice dev;
  const Result<Tensor> e = dev.empty({0, 7}, DType::kF32, MemoryCategory::kOther, "e");
  ASSERT_TRUE(e.is_ok());
  EXPECT_EQ(e->numel(), 0);
  EXPECT_FALSE(e->is_phantom());  // zero-byte storages stay host-visible
  const Result<Tensor> s = dev.zeros({}, DType::kI64, MemoryCategory::kOther, "s");
  ASSERT_TRUE(s.is_ok());
  EXPECT_EQ(s->numel(), 1);
  EXPECT_EQ(s->data<std::int64_t>()[0], 0);
}

// The default copy_many: each pair copied (same dtype) or cast (fp32 → bf16) in order.
TEST(DeviceCopyManyTest, CopiesAndCastsEveryPair) {
  cpu::CpuDevice cpu;
  Device& dev = cpu;
  auto a = dev.empty({6}, DType::kF32, MemoryCategory::kOther, "a");
  auto b = dev.empty({6}, DType::kF32, MemoryCategory::kOther, "b");
  auto h = dev.empty({2}, DType::kBF16, MemoryCategory::kOther, "h");
  ASSERT_TRUE(a.is_ok() && b.is_ok() && h.is_ok());
  for (int i = 0; i < 6; ++i) a->data<float>()[i] = 1.0f + static_cast<float>(i) / 3.0f;
  ASSERT_THAT(dev.fill(*b, 0.0f), IsOk());
  const std::vector<Device::CopyPair> pairs = {
      {*a->narrow(0, 2), *b->narrow(4, 2)}, {*a->narrow(2, 2), *b->narrow(0, 2)}, {*a->narrow(4, 2), *h}};
  ASSERT_THAT(dev.copy_many(pairs), IsOk());
  EXPECT_EQ(b->data<float>()[4], a->data<float>()[0]);
  EXPECT_EQ(b->data<float>()[1], a->data<float>()[3]);
  EXPECT_EQ(b->data<float>()[2], 0.0f);
  auto back = dev.empty({2}, DType::kF32, MemoryCategory::kOther, "back");
  ASSERT_TRUE(back.is_ok());
  ASSERT_THAT(dev.cast(*h, *back), IsOk());
  EXPECT_EQ(back->data<float>()[1], round_to_bf16(a->data<float>()[5]));  // rounded on the way
  EXPECT_NE(back->data<float>()[1], a->data<float>()[5]);
  // A pair whose sizes differ is the copy's error.
  const std::vector<Device::CopyPair> bad = {{*a->narrow(0, 3), *b->narrow(0, 2)}};
  EXPECT_FALSE(dev.copy_many(bad).is_ok());
}

TEST(DeviceZerosTest, ZeroesEveryDtype) {
  cpu::CpuDevice dev;
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16, DType::kI64}) {
    // Dirty the allocator's memory first so zeros cannot pass by luck.
    for (int i = 0; i < 4; ++i) {
      Result<Tensor> junk = dev.empty({257}, dtype, MemoryCategory::kOther, "junk");
      ASSERT_TRUE(junk.is_ok());
      std::memset(junk->bytes(), 0xA5, static_cast<std::size_t>(junk->nbytes()));
    }
    const Result<Tensor> z = dev.zeros({257}, dtype, MemoryCategory::kOther, "z");
    ASSERT_TRUE(z.is_ok());
    const std::byte* p = z->bytes();
    for (std::int64_t i = 0; i < z->nbytes(); ++i) ASSERT_EQ(p[i], std::byte{0}) << dtype_name(dtype) << " byte " << i;
  }
}

TEST(DeviceZerosTest, PropagatesOutOfMemory) {
  cpu::CpuDevice dev({"sim", 2}, 100);
  const Result<Tensor> z = dev.zeros({26}, DType::kF32, MemoryCategory::kActivations, "act");
  ASSERT_FALSE(z.is_ok());
  EXPECT_EQ(z.status().code(), StatusCode::kOutOfMemory);
  EXPECT_THAT(z.status().message(), HasSubstr("sim:2"));
  EXPECT_THAT(z.status().message(), HasSubstr("'act'"));
  EXPECT_THAT(z.status().message(), HasSubstr("requested 104 B"));
}

}  // namespace
}  // namespace shardlab::runtime::device
