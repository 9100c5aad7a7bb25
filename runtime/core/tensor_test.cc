// Tests for Storage and bounds-checked Tensor views.
#include "runtime/core/tensor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "testing/status_matchers.h"

using shardlab::testlib::IsOk;

namespace shardlab {
namespace {

using ::testing::HasSubstr;

constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();
// Exact arithmetic for the reference bounds (products of int64 values overflow int64).
__extension__ using Int128 = __int128;

// A host storage backed by a vector owned by its release callback; `releases` counts
// how many times the storage released itself.
std::shared_ptr<Storage> host_storage(std::int64_t nbytes, const std::string& label = "buf", int* releases = nullptr) {
  auto bytes = std::make_shared<std::vector<std::byte>>(static_cast<std::size_t>(nbytes) + 1);
  return std::make_shared<Storage>(bytes->data(), 0, nbytes, MemoryCategory::kOther, label, "test",
                                   [bytes, releases](Storage&) {
                                     if (releases) ++*releases;
                                   });
}

// A storage without host bytes (timing mode); any size is fine.
std::shared_ptr<Storage> phantom_storage(std::int64_t nbytes, const std::string& label = "phantom") {
  return std::make_shared<Storage>(nullptr, 0, nbytes, MemoryCategory::kParameters, label, "test", nullptr);
}

Tensor view(std::shared_ptr<Storage> s, DType dtype, Shape shape, std::int64_t offset, const std::string& name) {
  Result<Tensor> r = Tensor::view_of(std::move(s), dtype, std::move(shape), offset, name);
  SHARDLAB_CHECK_OK(r.status());
  return *r;
}

// ---- shapes ----------------------------------------------------------------------------

TEST(ShapeTest, ToStringAndNumel) {
  EXPECT_EQ(shape_to_string({}), "[]");
  EXPECT_EQ(shape_to_string({7}), "[7]");
  EXPECT_EQ(shape_to_string({7, 3}), "[7, 3]");
  EXPECT_EQ(*checked_numel({}), 1);  // a scalar
  EXPECT_EQ(*checked_numel({7, 3}), 21);
  EXPECT_EQ(*checked_numel({7, 0, 3}), 0);
  EXPECT_EQ(*checked_numel({kInt64Max}), kInt64Max);
}

TEST(ShapeTest, NumelRejectsNegativeDimsAndOverflow) {
  const Result<std::int64_t> neg = checked_numel({4, -2});
  ASSERT_FALSE(neg.is_ok());
  EXPECT_EQ(neg.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(neg.status().message(), HasSubstr("[4, -2]"));
  EXPECT_THAT(neg.status().message(), HasSubstr("negative"));

  const Result<std::int64_t> big = checked_numel({1ll << 32, 1ll << 32});
  ASSERT_FALSE(big.is_ok());
  EXPECT_THAT(big.status().message(), HasSubstr("2^63"));
}

// ---- view_of ---------------------------------------------------------------------------

// host_floats views a caller's buffer in place, 1-D fp32, and keeps `keep_alive` alive
// as long as any view of it.
TEST(ViewTest, HostFloatsViewsACallersBufferInPlace) {
  auto values = std::make_shared<std::vector<float>>(std::vector<float>{1.0f, 2.0f, 3.0f});
  std::weak_ptr<std::vector<float>> watch = values;
  Tensor t = Tensor::host_floats(values->data(), 3, MemoryCategory::kOther, "v", "cpu:0", values);
  EXPECT_EQ(t.shape(), (Shape{3}));
  EXPECT_EQ(t.dtype(), DType::kF32);
  EXPECT_EQ(t.data<float>(), values->data());
  EXPECT_EQ(t.nbytes(), 12);
  values.reset();
  EXPECT_FALSE(watch.expired());  // held by the storage
  EXPECT_EQ(t.data<float>()[2], 3.0f);
  t = Tensor();
  EXPECT_TRUE(watch.expired());
  std::vector<float> plain(4, 0.5f);
  const Tensor u = Tensor::host_floats(plain.data(), 4, MemoryCategory::kOther, "u", "cpu:0");
  EXPECT_EQ(u.data<float>(), plain.data());
}

TEST(ViewTest, ValidViewReportsItsGeometry) {
  auto s = host_storage(400, "params");
  const Tensor t = view(s, DType::kF32, {4, 8}, 10, "w1");
  EXPECT_TRUE(t.defined());
  EXPECT_FALSE(t.is_phantom());
  EXPECT_EQ(t.dtype(), DType::kF32);
  EXPECT_EQ(t.shape(), (Shape{4, 8}));
  EXPECT_EQ(t.ndim(), 2);
  EXPECT_EQ(t.dim(0), 4);
  EXPECT_EQ(t.dim(1), 8);
  EXPECT_EQ(t.dim(-1), 8);
  EXPECT_EQ(t.dim(-2), 4);
  EXPECT_EQ(t.numel(), 32);
  EXPECT_EQ(t.nbytes(), 128);
  EXPECT_EQ(t.offset(), 10);
  EXPECT_EQ(t.byte_offset(), 40);
  EXPECT_EQ(t.name(), "w1");
  EXPECT_EQ(t.storage(), s);
  EXPECT_EQ(t.bytes(), s->host_data() + 40);
  EXPECT_EQ(reinterpret_cast<std::byte*>(t.data<float>()), s->host_data() + 40);
  EXPECT_EQ(t.describe(), "'w1' fp32 [4, 8] @ offset 10 in 'params' (400 B)");
}

TEST(ViewTest, DimOutOfRangeIsACheckFailure) {
  const Tensor t = view(host_storage(64), DType::kF32, {2, 3}, 0, "t");
  EXPECT_THROW((void)t.dim(2), CheckFailure);
  EXPECT_THROW((void)t.dim(-3), CheckFailure);
}

TEST(ViewTest, UndefinedTensor) {
  const Tensor t;
  EXPECT_FALSE(t.defined());
  EXPECT_FALSE(t.is_phantom());
  EXPECT_EQ(t.describe(), "undefined tensor");
  EXPECT_THROW((void)t.bytes(), CheckFailure);
  const Result<Tensor> r = Tensor::view_of(nullptr, DType::kF32, {1}, 0, "nothing");
  ASSERT_FALSE(r.is_ok());
  EXPECT_THAT(r.status().message(), HasSubstr("'nothing'"));
  EXPECT_THAT(r.status().message(), HasSubstr("no storage"));
}

TEST(ViewTest, DataChecksTheElementType) {
  const Tensor f = view(host_storage(64), DType::kF32, {4}, 0, "f");
  EXPECT_THROW((void)f.data<std::int64_t>(), CheckFailure);
  EXPECT_THROW((void)f.data<std::uint16_t>(), CheckFailure);
  const Tensor b = view(host_storage(64), DType::kBF16, {4}, 0, "b");
  EXPECT_NO_THROW((void)b.data<std::uint16_t>());
  EXPECT_THROW((void)b.data<float>(), CheckFailure);
  const Tensor h = view(host_storage(64), DType::kF16, {4}, 0, "h");
  EXPECT_NO_THROW((void)h.data<std::uint16_t>());
  const Tensor i = view(host_storage(64), DType::kI64, {4}, 0, "i");
  EXPECT_NO_THROW((void)i.data<std::int64_t>());
  EXPECT_THROW((void)i.data<float>(), CheckFailure);
}

TEST(ViewTest, PhantomStorageHasNoHostData) {
  const Tensor t = view(phantom_storage(1ll << 40), DType::kF32, {1ll << 20, 1ll << 18}, 0, "huge");
  EXPECT_TRUE(t.is_phantom());
  EXPECT_EQ(t.nbytes(), 1ll << 40);
  EXPECT_THROW((void)t.bytes(), CheckFailure);
  EXPECT_THROW((void)t.data<float>(), CheckFailure);
}

// The Gaudi bug class: a wrapped negative offset must never reach a kernel.
TEST(ViewTest, NegativeOffsetNamesTheOffsetAndItsUnsignedWrap) {
  // The offset from the Gaudi report: as uint64 it prints as 13835057943613014016.
  const std::int64_t offset = -4611686130096537600;
  const Result<Tensor> r = Tensor::view_of(host_storage(4096, "flat_param"), DType::kBF16, {16}, offset, "layer0.w");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  const std::string& m = r.status().message();
  EXPECT_THAT(m, HasSubstr("'layer0.w'"));
  EXPECT_THAT(m, HasSubstr("'flat_param'"));
  EXPECT_THAT(m, HasSubstr("offset -4611686130096537600"));
  EXPECT_THAT(m, HasSubstr("(unsigned 13835057943613014016)"));
  EXPECT_THAT(m, HasSubstr("storage 4096 bytes"));
  EXPECT_THAT(m, HasSubstr("negative"));

  const Result<Tensor> minus_2_62 = Tensor::view_of(host_storage(64), DType::kF32, {1}, -(1ll << 62), "t");
  ASSERT_FALSE(minus_2_62.is_ok());
  EXPECT_THAT(minus_2_62.status().message(), HasSubstr("offset -4611686018427387904 (unsigned 13835058055282163712)"));

  const Result<Tensor> minus_one = Tensor::view_of(host_storage(64), DType::kF32, {1}, -1, "t");
  ASSERT_FALSE(minus_one.is_ok());
  EXPECT_THAT(minus_one.status().message(), HasSubstr("18446744073709551615"));
}

TEST(ViewTest, ExtentPastStorageEndNamesTensorOffsetExtentAndStorageSize) {
  auto s = host_storage(40, "grads");  // 10 fp32 elements
  const Result<Tensor> r = Tensor::view_of(s, DType::kF32, {3}, 8, "bias");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  const std::string& m = r.status().message();
  EXPECT_THAT(m, HasSubstr("'bias'"));
  EXPECT_THAT(m, HasSubstr("'grads'"));
  EXPECT_THAT(m, HasSubstr("offset 8"));
  EXPECT_THAT(m, HasSubstr("extent 3 elements"));
  EXPECT_THAT(m, HasSubstr("storage 40 bytes"));
  EXPECT_THAT(m, HasSubstr("ends at byte 44"));
  EXPECT_THAT(m, HasSubstr("<= 10 elements"));
}

// view_of tests the bounds with view_in_bounds and builds the message only on failure
// (views are made on every op): the fast test must accept exactly what check_view_bounds
// accepts, overflow and negative values included.
RC_GTEST_PROP(ViewTest, FastBoundsTestAgreesWithTheCheckedOne, ()) {
  const std::int64_t big = std::numeric_limits<std::int64_t>::max();
  const auto edge =
      rc::gen::element<std::int64_t>(0, 1, 7, 10, 11, -1, -(std::int64_t{1} << 62), big, big / 2, big / 4 + 1);
  const auto small = rc::gen::inRange<std::int64_t>(-3, 60);
  const std::int64_t offset = *rc::gen::weightedOneOf<std::int64_t>({{1, edge}, {3, small}});
  const std::int64_t numel = *rc::gen::weightedOneOf<std::int64_t>({{1, edge}, {3, small}});
  const std::size_t element_bytes = *rc::gen::element<std::size_t>(1, 2, 4, 8);
  // Often right at the view's end (± a few bytes), where an off-by-one would show.
  std::int64_t end = 0;
  const bool fits = !__builtin_add_overflow(offset, numel, &end) &&
                    !__builtin_mul_overflow(end, static_cast<std::int64_t>(element_bytes), &end) && end >= 2;
  const std::int64_t storage_bytes = fits && *rc::gen::inRange(0, 4) != 0
                                         ? end + *rc::gen::element<std::int64_t>(-2, -1, 0, 0, 1)
                                         : *rc::gen::oneOf(edge, rc::gen::inRange<std::int64_t>(0, 200));
  RC_ASSERT(view_in_bounds(offset, numel, element_bytes, storage_bytes) ==
            check_view_bounds("t", offset, numel, element_bytes, storage_bytes).is_ok());
}

TEST(ViewTest, ViewsExactlyAtTheBoundary) {
  auto s = host_storage(40);  // 10 fp32
  EXPECT_TRUE(Tensor::view_of(s, DType::kF32, {3}, 7, "last3").is_ok());
  EXPECT_TRUE(Tensor::view_of(s, DType::kF32, {10}, 0, "all").is_ok());
  EXPECT_TRUE(Tensor::view_of(s, DType::kF32, {0}, 10, "empty_at_end").is_ok());
  EXPECT_FALSE(Tensor::view_of(s, DType::kF32, {0}, 11, "empty_past_end").is_ok());
  EXPECT_FALSE(Tensor::view_of(s, DType::kF32, {11}, 0, "one_too_many").is_ok());
  EXPECT_FALSE(Tensor::view_of(s, DType::kI64, {5}, 1, "i64").is_ok());  // 48 > 40 bytes
  EXPECT_TRUE(Tensor::view_of(s, DType::kI64, {5}, 0, "i64").is_ok());
  EXPECT_TRUE(Tensor::view_of(s, DType::kBF16, {20}, 0, "bf16").is_ok());
  EXPECT_FALSE(Tensor::view_of(s, DType::kBF16, {20}, 1, "bf16").is_ok());
  // A scalar (shape []) has one element.
  EXPECT_TRUE(Tensor::view_of(s, DType::kF32, {}, 9, "scalar").is_ok());
  EXPECT_FALSE(Tensor::view_of(s, DType::kF32, {}, 10, "scalar").is_ok());
  // A zero-byte storage holds only empty views at offset 0.
  auto empty = host_storage(0);
  EXPECT_TRUE(Tensor::view_of(empty, DType::kF32, {0}, 0, "e").is_ok());
  EXPECT_FALSE(Tensor::view_of(empty, DType::kF32, {1}, 0, "e").is_ok());
}

TEST(ViewTest, OffsetTimesElementSizeOverflowingIsAnError) {
  // Without the overflow check 2^62 * 4 wraps to 0 and the view would look in bounds.
  auto s = phantom_storage(kInt64Max, "big");
  const std::pair<DType, std::int64_t> cases[] = {
      {DType::kF32, 1ll << 62}, {DType::kI64, 1ll << 61}, {DType::kBF16, 1ll << 62}, {DType::kF32, kInt64Max}};
  for (const auto& [dtype, offset] : cases) {
    const Result<Tensor> r = Tensor::view_of(s, dtype, {1}, offset, "w");
    ASSERT_FALSE(r.is_ok()) << dtype_name(dtype) << " offset " << offset;
    EXPECT_THAT(r.status().message(), HasSubstr("overflows 64 bits"));
    EXPECT_THAT(r.status().message(), HasSubstr("offset " + std::to_string(offset)));
  }
  // The extent can overflow too, and so can their sum.
  const Result<Tensor> extent = Tensor::view_of(s, DType::kI64, {1ll << 61}, 0, "w");
  ASSERT_FALSE(extent.is_ok());
  EXPECT_THAT(extent.status().message(), HasSubstr("overflows 64 bits"));
  const Result<Tensor> sum = Tensor::view_of(s, DType::kF32, {(1ll << 61) - 1}, 1ll << 61, "w");
  ASSERT_FALSE(sum.is_ok());
  EXPECT_THAT(sum.status().message(), HasSubstr("overflows 64 bits"));
}

TEST(ViewTest, NegativeDimsAreRejected) {
  const Result<Tensor> r = Tensor::view_of(host_storage(64), DType::kF32, {2, -3}, 0, "w");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("view 'w'"));
  EXPECT_THAT(r.status().message(), HasSubstr("[2, -3]"));
  EXPECT_THAT(r.status().message(), HasSubstr("negative"));
}

// ---- narrow / reshape -------------------------------------------------------------------

TEST(NarrowTest, StaysInsideTheTensorsOwnExtent) {
  auto s = host_storage(80);                              // 20 fp32: plenty of room past the tensor
  const Tensor t = view(s, DType::kF32, {2, 3}, 2, "t");  // elements [2, 8)
  const Result<Tensor> ok = t.narrow(4, 2);
  ASSERT_THAT(ok, IsOk());
  EXPECT_EQ(ok->offset(), 6);
  EXPECT_EQ(ok->shape(), (Shape{2}));
  EXPECT_EQ(ok->name(), "t[4:+2]");
  EXPECT_EQ(ok->storage(), s);
  EXPECT_TRUE(t.narrow(0, 6, "all").is_ok());
  EXPECT_TRUE(t.narrow(6, 0, "empty_end").is_ok());
  EXPECT_EQ(t.narrow(1, 1, "named")->name(), "named");

  // In bounds of the storage, but past the end of t: must fail.
  const Result<Tensor> past = t.narrow(5, 2, "tail");
  ASSERT_FALSE(past.is_ok());
  EXPECT_EQ(past.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(past.status().message(), HasSubstr("'tail'"));
  EXPECT_THAT(past.status().message(), HasSubstr("outside 't' of 6 elements"));
  EXPECT_THAT(past.status().message(), HasSubstr("[5, 5 + 2)"));
}

TEST(NarrowTest, RejectsNegativeAndOverflowingRanges) {
  const Tensor t = view(host_storage(80), DType::kF32, {6}, 2, "t");
  EXPECT_FALSE(t.narrow(-1, 2).is_ok());
  EXPECT_FALSE(t.narrow(0, -1).is_ok());
  EXPECT_FALSE(t.narrow(kInt64Max, 1).is_ok());
  EXPECT_FALSE(t.narrow(1, kInt64Max).is_ok());
  EXPECT_FALSE(t.narrow(7, 0).is_ok());
  EXPECT_FALSE(Tensor().narrow(0, 0).is_ok());
}

// narrow with a shape: the same range as narrow(begin, numel(shape)) then reshape, as one view.
TEST(NarrowTest, WithAShapeIsNarrowThenReshape) {
  const Tensor t = view(host_storage(80), DType::kF32, {6}, 2, "t");
  const Result<Tensor> w = t.narrow(1, Shape{2, 2}, "w");
  ASSERT_THAT(w, IsOk());
  const Tensor two_step = *t.narrow(1, 4, "w")->reshape({2, 2});
  EXPECT_TRUE(w->same_view(two_step));
  EXPECT_EQ(w->shape(), two_step.shape());
  EXPECT_EQ(w->name(), "w");
  // Past the end of t (in bounds of the storage): narrow's error.
  const Result<Tensor> past = t.narrow(3, Shape{2, 2}, "tail");
  ASSERT_FALSE(past.is_ok());
  EXPECT_THAT(past.status().message(), HasSubstr("[3, 3 + 4) is outside 't' of 6 elements"));
  EXPECT_FALSE(t.narrow(-1, Shape{2}, "neg").is_ok());
  EXPECT_FALSE(t.narrow(0, Shape{-2, 2}, "bad").is_ok());
  EXPECT_FALSE(Tensor().narrow(0, Shape{1}, "none").is_ok());
}

TEST(NarrowTest, NarrowOfNarrowComposesOffsets) {
  const Tensor t = view(host_storage(400), DType::kI64, {40}, 5, "t");
  const Tensor a = *t.narrow(10, 20);
  const Tensor b = *a.narrow(3, 4);
  EXPECT_EQ(b.offset(), 5 + 10 + 3);
  EXPECT_EQ(b.byte_offset(), 8 * 18);
  EXPECT_FALSE(a.narrow(17, 4).is_ok());  // inside t, outside a
}

TEST(ReshapeTest, KeepsElementsAndChecksCounts) {
  const Tensor t = view(host_storage(96), DType::kF32, {4, 6}, 0, "x");
  const Result<Tensor> r = t.reshape({2, 3, 4});
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(r->numel(), 24);
  EXPECT_TRUE(r->same_view(t));
  EXPECT_EQ(r->name(), "x");
  EXPECT_EQ(t.shape(), (Shape{4, 6}));  // the original is unchanged

  const Result<Tensor> bad = t.reshape({5, 5});
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("reshape 'x' from [4, 6] to [5, 5]"));
  EXPECT_THAT(bad.status().message(), HasSubstr("(24 vs 25)"));
  EXPECT_FALSE(t.reshape({-4, -6}).is_ok());
}

// ---- same_view / overlaps ---------------------------------------------------------------

TEST(OverlapTest, SameViewAndOverlaps) {
  auto s = host_storage(400);
  const Tensor a = view(s, DType::kF32, {10}, 0, "a");  // bytes [0, 40)
  const Tensor a2 = view(s, DType::kF32, {2, 5}, 0, "a2");
  const Tensor b = view(s, DType::kF32, {10}, 10, "b");            // bytes [40, 80): adjacent
  const Tensor c = view(s, DType::kF32, {10}, 5, "c");             // bytes [20, 60)
  const Tensor a_bf16 = view(s, DType::kBF16, {20}, 0, "a_bf16");  // bytes [0, 40)
  const Tensor empty = view(s, DType::kF32, {0}, 3, "empty");
  const Tensor other = view(host_storage(400), DType::kF32, {10}, 0, "other");

  EXPECT_TRUE(a.same_view(a2));
  EXPECT_TRUE(a.same_view(a_bf16));
  EXPECT_FALSE(a.same_view(b));
  EXPECT_FALSE(a.same_view(c));
  EXPECT_FALSE(a.same_view(other));

  EXPECT_TRUE(a.overlaps(a2));
  EXPECT_TRUE(a.overlaps(c));
  EXPECT_TRUE(c.overlaps(b));
  EXPECT_TRUE(c.overlaps(a));
  EXPECT_FALSE(a.overlaps(b));
  EXPECT_FALSE(b.overlaps(a));
  EXPECT_FALSE(a.overlaps(other));
  EXPECT_FALSE(a.overlaps(empty));
  EXPECT_FALSE(empty.overlaps(a));
  EXPECT_FALSE(Tensor().overlaps(Tensor()));
  // Partial element overlap across dtypes: bf16 element 19 is bytes [38, 40).
  const Tensor last_half = view(s, DType::kBF16, {1}, 19, "h");
  EXPECT_TRUE(last_half.overlaps(a));
  EXPECT_FALSE(last_half.overlaps(b));
}

// ---- storage lifetime -------------------------------------------------------------------

TEST(StorageTest, ReleasesOnceWhenTheLastViewDies) {
  int releases = 0;
  {
    auto s = host_storage(64, "buf", &releases);
    Tensor narrowed;
    {
      const Tensor t = view(s, DType::kF32, {16}, 0, "t");
      s.reset();
      narrowed = *t.narrow(2, 4);
    }
    EXPECT_EQ(releases, 0);  // narrowed still holds it
    EXPECT_EQ(narrowed.storage()->nbytes(), 64);
  }
  EXPECT_EQ(releases, 1);
}

TEST(StorageTest, Accessors) {
  Storage s(nullptr, 0xabcd, 128, MemoryCategory::kGradients, "g", "sim:3", nullptr);
  EXPECT_EQ(s.nbytes(), 128);
  EXPECT_EQ(s.host_data(), nullptr);
  EXPECT_EQ(s.device_address(), 0xabcdu);
  EXPECT_EQ(s.category(), MemoryCategory::kGradients);
  EXPECT_EQ(s.label(), "g");
  EXPECT_EQ(s.device_name(), "sim:3");
}

// ---- properties -------------------------------------------------------------------------

// Offsets and sizes concentrated where bugs live: small values, near boundaries,
// and huge or negative values whose byte sizes overflow.
rc::Gen<std::int64_t> interesting_int64() {
  return rc::gen::oneOf(
      rc::gen::inRange<std::int64_t>(-8, 64), rc::gen::arbitrary<std::int64_t>(),
      rc::gen::map(rc::gen::inRange(0, 63), [](int k) { return static_cast<std::int64_t>(1ull << k); }),
      rc::gen::map(rc::gen::inRange(0, 63), [](int k) { return static_cast<std::int64_t>((1ull << k) - 1); }),
      rc::gen::map(rc::gen::inRange(0, 63), [](int k) { return -static_cast<std::int64_t>(1ull << k); }));
}

RC_GTEST_PROP(ViewProperty, ViewSucceedsIffInBounds, ()) {
  const auto dtype = *rc::gen::element(DType::kF32, DType::kBF16, DType::kF16, DType::kI64);
  const std::int64_t storage_bytes =
      *rc::gen::oneOf(rc::gen::inRange<std::int64_t>(0, 256), rc::gen::inRange<std::int64_t>(0, kInt64Max));
  const std::int64_t offset = *interesting_int64();
  const std::int64_t numel = *rc::gen::oneOf(rc::gen::inRange<std::int64_t>(0, 64), interesting_int64());
  RC_PRE(numel >= 0);
  const auto es = static_cast<Int128>(element_size(dtype));
  const bool in_bounds = offset >= 0 && (static_cast<Int128>(offset) + numel) * es <= storage_bytes;

  const Result<Tensor> r = Tensor::view_of(phantom_storage(storage_bytes), dtype, {numel}, offset, "p");
  RC_ASSERT(r.is_ok() == in_bounds);
  if (r.is_ok()) {
    RC_ASSERT(r->offset() == offset);
    RC_ASSERT(r->byte_offset() + r->nbytes() <= storage_bytes);
  } else {
    RC_ASSERT(r.status().code() == StatusCode::kInvalidArgument);
    RC_ASSERT(r.status().message().find("offset " + std::to_string(offset)) != std::string::npos);
    RC_ASSERT(r.status().message().find("storage " + std::to_string(storage_bytes) + " bytes") != std::string::npos);
  }
}

RC_GTEST_PROP(ViewProperty, NarrowSucceedsIffInsideTheTensor, ()) {
  const std::int64_t storage_elems = *rc::gen::inRange<std::int64_t>(0, 64);
  const std::int64_t offset = *rc::gen::inRange<std::int64_t>(0, storage_elems + 1);
  const std::int64_t numel = *rc::gen::inRange<std::int64_t>(0, storage_elems - offset + 1);
  const Tensor t = view(phantom_storage(storage_elems * 4), DType::kF32, {numel}, offset, "t");
  const std::int64_t begin = *rc::gen::oneOf(rc::gen::inRange<std::int64_t>(-2, 70), interesting_int64());
  const std::int64_t count = *rc::gen::oneOf(rc::gen::inRange<std::int64_t>(-2, 70), interesting_int64());
  const bool inside = begin >= 0 && count >= 0 && static_cast<Int128>(begin) + count <= numel;
  const Result<Tensor> n = t.narrow(begin, count);
  RC_ASSERT(n.is_ok() == inside);
  if (inside) {
    RC_ASSERT(n->offset() == offset + begin);
    RC_ASSERT(n->numel() == count);
    RC_ASSERT(count == 0 || n->overlaps(t));
  }
}

RC_GTEST_PROP(ViewProperty, OverlapsMatchesByteIntervalIntersection, ()) {
  auto s = phantom_storage(1024);
  const auto d1 = *rc::gen::element(DType::kF32, DType::kBF16, DType::kI64);
  const auto d2 = *rc::gen::element(DType::kF32, DType::kBF16, DType::kI64);
  const auto es1 = static_cast<std::int64_t>(element_size(d1)), es2 = static_cast<std::int64_t>(element_size(d2));
  const std::int64_t o1 = *rc::gen::inRange<std::int64_t>(0, 1024 / es1 + 1);
  const std::int64_t n1 = *rc::gen::inRange<std::int64_t>(0, 1024 / es1 - o1 + 1);
  const std::int64_t o2 = *rc::gen::inRange<std::int64_t>(0, 1024 / es2 + 1);
  const std::int64_t n2 = *rc::gen::inRange<std::int64_t>(0, 1024 / es2 - o2 + 1);
  const Tensor a = view(s, d1, {n1}, o1, "a"), b = view(s, d2, {n2}, o2, "b");
  bool any_shared_byte = false;
  for (std::int64_t byte = 0; byte < 1024; ++byte) {
    const bool in_a = byte >= o1 * es1 && byte < (o1 + n1) * es1;
    const bool in_b = byte >= o2 * es2 && byte < (o2 + n2) * es2;
    any_shared_byte = any_shared_byte || (in_a && in_b);
  }
  RC_ASSERT(a.overlaps(b) == any_shared_byte);
  RC_ASSERT(b.overlaps(a) == any_shared_byte);
  RC_ASSERT(a.same_view(b) == (o1 * es1 == o2 * es2 && n1 * es1 == n2 * es2));
}

}  // namespace
}  // namespace shardlab
