// Tests of the hpu backend: the loader, the HpuDevice (memory, streams/events, recipes,
// the launch check, every op against the cpu backend) and the HCCL communicator on one
// rank. By default they run against the TEST DOUBLE (testing/fake_synapse.cc); with
// SHARDLAB_HPU_TEST_TARGET=real (ctest label `hpu`) against libSynapse, skipping without
// a card (testing/hpu_test_target.h).
#include "runtime/platform/hpu/device/device.h"

#include <dlfcn.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "runtime/core/clock.h"
#include "runtime/device/cpu/device.h"
#include "runtime/fsdp/options.h"
#include "runtime/platform/hpu/comm/communicator.h"
#include "runtime/platform/hpu/hpu_runtime.h"
#include "runtime/platform/hpu/testing/hpu_test_target.h"
#include "testing/status_matchers.h"

using shardlab::testlib::IsOk;

namespace shardlab::runtime::device::hpu {
namespace {

using ::testing::HasSubstr;
using testing::real_target;
using testing::use_target_library;

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    const char* old = std::getenv(name);
    if (old) old_ = old;
    had_ = old != nullptr;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (had_)
      setenv(name_, old_.c_str(), 1);
    else
      unsetenv(name_);
  }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

using testing::clear_fake_log;
using testing::fake_log;

int count_calls(const std::string& log, const std::string& call) {
  int n = 0;
  std::size_t pos = 0;
  const std::string line = call + "\n";
  while ((pos = log.find(line, pos)) != std::string::npos) {
    if (pos == 0 || log[pos - 1] == '\n') ++n;
    pos += line.size();
  }
  return n;
}

// ---- loader -------------------------------------------------------------------------------

TEST(HpuLoaderTest, BadPathIsAClearErrorNamingThePathAndTheSimFallback) {
  ScopedEnv env(kSynapseLibEnv, "/nonexistent/habanalabs/libSynapse.so");
  auto lib = SynapseLibrary::open();
  ASSERT_FALSE(lib.is_ok());
  EXPECT_EQ(lib.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(lib.status().message(), HasSubstr("no Gaudi software found"));
  EXPECT_THAT(lib.status().message(), HasSubstr("/nonexistent/habanalabs/libSynapse.so"));
  EXPECT_THAT(lib.status().message(), HasSubstr("--backend sim"));
  EXPECT_THAT(lib.status().message(), HasSubstr(kSynapseLibEnv));

  const HpuProbe probe = probe_hpu();
  EXPECT_FALSE(probe.found);
  EXPECT_EQ(probe.searched, std::vector<std::string>{"/nonexistent/habanalabs/libSynapse.so"});
  EXPECT_THAT(probe.error, HasSubstr("no Gaudi software found"));

  SteadyClock clock;
  auto ctx = open_hpu({}, nullptr, clock);
  ASSERT_FALSE(ctx.is_ok());
  EXPECT_THAT(ctx.status().message(), HasSubstr("--backend sim"));
}

TEST(HpuLoaderTest, DefaultPathIsUsrLibHabanalabs) {
  const char* old = std::getenv(kSynapseLibEnv);
  const std::string saved = old ? old : "";
  unsetenv(kSynapseLibEnv);
  EXPECT_EQ(synapse_search_paths(), std::vector<std::string>{"/usr/lib/habanalabs/libSynapse.so"});
  if (old) setenv(kSynapseLibEnv, saved.c_str(), 1);
}

TEST(HpuLoaderTest, ALibraryThatIsNotSynapseNamesTheMissingSymbol) {
  auto lib = SynapseLibrary::open_path("libm.so.6");
  ASSERT_FALSE(lib.is_ok());
  EXPECT_THAT(lib.status().message(), HasSubstr("does not export synInitialize"));
}

TEST(HpuLoaderTest, LoadsTheDoubleThroughTheOverrideVariable) {
  SHARDLAB_FAKE_ONLY();
  ScopedEnv env(kSynapseLibEnv, SHARDLAB_FAKE_SYNAPSE_PATH);
  auto lib = SynapseLibrary::open();
  ASSERT_THAT(lib, IsOk());
  EXPECT_EQ((*lib)->path(), SHARDLAB_FAKE_SYNAPSE_PATH);
  EXPECT_TRUE((*lib)->has_hccl());
  const HpuProbe probe = probe_hpu();
  EXPECT_TRUE(probe.found) << probe.error;
  EXPECT_EQ(probe.device_count, 8);
  EXPECT_EQ(probe.device_type, "Gaudi2");
}

TEST(HpuLoaderTest, StatusNamesAndHints) {
  EXPECT_EQ(synapse_status_name(20), "synDeviceAlreadyAcquired");
  EXPECT_EQ(synapse_status_name(4), "synOutOfDeviceMemory");
  EXPECT_EQ(synapse_status_name(42), "synTimeout");
  EXPECT_EQ(synapse_status_name(999), "synStatus 999");
  EXPECT_EQ(hccl_result_name(3), "hcclInternalError");
  const Status s = synapse_error("synDeviceAcquireByModuleId", 20, "another process holds module 3");
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_EQ(s.message(),
            "synDeviceAcquireByModuleId: synDeviceAlreadyAcquired (20) \u2014 another process holds module 3");
  EXPECT_EQ(synapse_error("synDeviceMalloc", 4).code(), StatusCode::kOutOfMemory);
  EXPECT_EQ(synapse_error("synLaunchExt", 26).code(), StatusCode::kInternal);
}

TEST(HpuModuleTest, VisibleModulesIndexedByLocalRank) {
  ScopedEnv visible("HABANA_VISIBLE_MODULES", "4,5,6");
  {
    ScopedEnv local("LOCAL_RANK", "1");
    ScopedEnv ompi("OMPI_COMM_WORLD_LOCAL_RANK", "2");  // Open MPI's wins
    auto m = select_module();
    ASSERT_THAT(m, IsOk());
    EXPECT_EQ(*m, 6u);
  }
  {
    ScopedEnv ompi("OMPI_COMM_WORLD_LOCAL_RANK", "3");
    auto m = select_module();
    ASSERT_FALSE(m.is_ok());
    EXPECT_THAT(m.status().message(), HasSubstr("local rank 3 has no module"));
  }
  ScopedEnv bad("HABANA_VISIBLE_MODULES", "0,x");
  ScopedEnv ompi("OMPI_COMM_WORLD_LOCAL_RANK", "0");
  EXPECT_THAT(select_module().status().message(), HasSubstr("'x' is not a module id"));
}

// ---- the device ----------------------------------------------------------------------------

class HpuDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SHARDLAB_SKIP_WITHOUT_GAUDI();
    open();
  }
  void open(HpuOpenOptions options = {}) {
    ctx_.reset();
    auto ctx = open_hpu(options, nullptr, clock_);
    ASSERT_THAT(ctx, IsOk());
    ctx_ = std::move(ctx).value();
  }
  HpuDevice& dev() { return ctx_->hpu_device(); }

  Tensor make(Device& d, const Shape& shape, DType dtype, const std::string& name, std::int64_t offset = 0) {
    const std::int64_t numel = *checked_numel(shape);
    auto storage = d.allocate((numel + offset + 5) * static_cast<std::int64_t>(element_size(dtype)),
                              MemoryCategory::kActivations, name + "_storage");
    SHARDLAB_CHECK_OK(storage.status());
    auto t = Tensor::view_of(*storage, dtype, shape, offset, name);
    SHARDLAB_CHECK_OK(t.status());
    return *t;
  }

  // Host access through the seam (NOTE [Host access]): device memory has no host bytes.
  template <typename T>
  void put(Device& d, const Tensor& t, const std::vector<T>& values) {
    SHARDLAB_CHECK_OK(values_from_host(d, values, t));
  }
  template <typename T>
  std::vector<T> get(Device& d, const Tensor& t) {
    auto v = values_to_host<T>(d, t);
    SHARDLAB_CHECK_OK(v.status());
    return *v;
  }

  SteadyClock clock_;
  std::unique_ptr<HpuContext> ctx_;
};

TEST_F(HpuDeviceTest, IdIsHpu0AndTheIndexlessIdResolvesToIt) {
  EXPECT_EQ(dev().id().to_string(), "hpu:0");
  auto resolved = fsdp::resolve_device_id("hpu", dev().id(), 4);
  ASSERT_THAT(resolved, IsOk());
  EXPECT_EQ(resolved->to_string(), "hpu:0");
  EXPECT_THAT(fsdp::resolve_device_id("hpu:1", dev().id(), 4).status().message(), HasSubstr("hpu:0"));
}

TEST_F(HpuDeviceTest, MemoryIsAccountedPerCategoryAndReleased) {
  const std::int64_t base = dev().memory().stats().current_total;
  {
    auto a = dev().allocate(1 << 20, MemoryCategory::kParameters, "w");
    ASSERT_THAT(a, IsOk());
    auto b = dev().allocate(4096, MemoryCategory::kGradients, "g");
    ASSERT_TRUE(b.is_ok());
    const MemoryStats s = dev().memory().stats();
    EXPECT_EQ(s.current[static_cast<int>(MemoryCategory::kParameters)], 1 << 20);
    EXPECT_EQ(s.current[static_cast<int>(MemoryCategory::kGradients)], 4096);
    EXPECT_EQ((*a)->host_data(), nullptr) << "device memory only (NOTE [HPU device memory])";
    EXPECT_NE((*a)->device_address(), 0u);
  }
  EXPECT_EQ(dev().memory().stats().current_total, base);
}

TEST_F(HpuDeviceTest, OutOfMemoryFromTheTrackerCarriesTheBreakdown) {
  HpuOpenOptions o;
  o.device.capacity_bytes = 1 << 20;
  open(o);
  auto keep = dev().allocate(700 << 10, MemoryCategory::kParameters, "params");
  ASSERT_TRUE(keep.is_ok());
  auto big = dev().allocate(512 << 10, MemoryCategory::kActivations, "acts");
  ASSERT_FALSE(big.is_ok());
  EXPECT_EQ(big.status().code(), StatusCode::kOutOfMemory);
  EXPECT_THAT(big.status().message(), HasSubstr("out of memory on hpu:0"));
  EXPECT_THAT(big.status().message(), HasSubstr("parameters 700.00 KiB"));
}

TEST_F(HpuDeviceTest, OutOfDeviceMemoryFromSynapseNamesTheCallAndTheBreakdown) {
  SHARDLAB_FAKE_ONLY();
  const std::int64_t before = dev().memory().stats().current_total;
  ScopedEnv fail("SHARDLAB_FAKE_SYNAPSE_FAIL", "synDeviceMalloc:4");
  auto s = dev().allocate(4096, MemoryCategory::kOptimizerState, "adam_m");
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.status().code(), StatusCode::kOutOfMemory);
  EXPECT_THAT(s.status().message(), HasSubstr("synDeviceMalloc: synOutOfDeviceMemory (4)"));
  EXPECT_THAT(s.status().message(), HasSubstr("'adam_m' (optimizer_state)"));
  EXPECT_THAT(s.status().message(), HasSubstr("parameters 0 B, gradients 0 B"));  // the breakdown
  EXPECT_EQ(dev().memory().stats().current_total, before) << "a failed allocation must reserve nothing";
}

TEST_F(HpuDeviceTest, DeviceAlreadyAcquiredNamesTheModuleAndTheVariable) {
  SHARDLAB_FAKE_ONLY();
  ctx_.reset();
  ScopedEnv held("SHARDLAB_FAKE_SYNAPSE_HELD_MODULES", "3");
  HpuOpenOptions o;
  o.device.module_id = 3;
  auto ctx = open_hpu(o, nullptr, clock_);
  ASSERT_FALSE(ctx.is_ok());
  EXPECT_EQ(ctx.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(ctx.status().message(),
              HasSubstr("synDeviceAcquireByModuleId: synDeviceAlreadyAcquired (20) \u2014 another process holds "
                        "module 3; check HABANA_VISIBLE_MODULES"));
  o.device.module_id = 42;
  EXPECT_THAT(open_hpu(o, nullptr, clock_).status().message(), HasSubstr("synNoDeviceFound (8)"));
}

TEST_F(HpuDeviceTest, CallSequenceAndRecipeCaching) {
  SHARDLAB_FAKE_ONLY();
  Tensor a = make(dev(), {4, 3}, DType::kF32, "a"), b = make(dev(), {3, 5}, DType::kF32, "b"),
         c = make(dev(), {4, 5}, DType::kF32, "c");
  std::vector<float> av(12);
  for (int i = 0; i < 12; ++i) av[static_cast<std::size_t>(i)] = static_cast<float>(i);
  put(dev(), a, av);
  put(dev(), b, std::vector<float>(15, 1.0f));
  clear_fake_log();
  ASSERT_TRUE(dev().gemm(a, false, b, false, c, 1.0f, 0.0f, kComputeStream).is_ok());
  const std::string first = fake_log();
  // The scalar upload, the graph built and compiled once, the launch; the op returns
  // without waiting (NOTE [HPU device memory]), and its operands never cross the host link.
  const std::vector<std::string> order = {"synMemCopyAsync",     "synGraphCreate", "synTensorHandleCreate",
                                          "synSectionCreate",    "synNodeCreate",  "synGraphCompile",
                                          "synWorkspaceGetSize", "synLaunchExt"};
  std::size_t pos = 0;
  for (const std::string& call : order) {
    const std::size_t at = first.find(call + "\n", pos);
    ASSERT_NE(at, std::string::npos) << call << " missing or out of order in:\n" << first;
    pos = at;
  }
  EXPECT_EQ(count_calls(first, "synGraphCompile"), 1);
  EXPECT_EQ(count_calls(first, "synNodeCreate"), 2);  // gemm, then the alpha multiply
  EXPECT_EQ(count_calls(first, "synMemCopyAsync"), 1) << "only alpha crosses";
  EXPECT_EQ(count_calls(first, "synStreamSynchronize"), 0) << "the op is enqueued, not waited for";
  EXPECT_EQ(get<float>(dev(), c)[0], 0.0f + 1.0f + 2.0f);

  clear_fake_log();
  ASSERT_TRUE(dev().gemm(a, false, b, false, c, 2.0f, 0.0f, kComputeStream).is_ok());
  const std::string second = fake_log();
  EXPECT_EQ(count_calls(second, "synGraphCompile"), 0) << "same (op, shapes, dtypes): the cached recipe is reused";
  EXPECT_EQ(count_calls(second, "synGraphCreate"), 0);
  EXPECT_EQ(count_calls(second, "synLaunchExt"), 1);
  EXPECT_EQ(get<float>(dev(), c)[0], 6.0f) << "alpha is an input, not part of the recipe";
  EXPECT_EQ(dev().stats().recipes_compiled, 1);
  EXPECT_EQ(dev().stats().recipe_cache_hits, 1);

  Tensor a2 = make(dev(), {2, 3}, DType::kF32, "a2"), c2 = make(dev(), {2, 5}, DType::kF32, "c2");
  ASSERT_TRUE(dev().gemm(a2, false, b, false, c2, 1.0f, 0.0f, kComputeStream).is_ok());
  EXPECT_EQ(dev().stats().recipes_compiled, 2) << "a new shape compiles a new recipe";
}

// The seed bug's wrapped offset on a parameter view reaches the device: refused before any
// upload, launch or host fallback (NOTE [Launch check] in runtime/device/device.h).
TEST_F(HpuDeviceTest, ACorruptViewNeverReachesSynapse) {
  Tensor a = make(dev(), {3, 3}, DType::kF32, "a"), b = make(dev(), {3, 5}, DType::kF32, "b"),
         c = make(dev(), {3, 5}, DType::kF32, "c");
  clear_fake_log();
  const Tensor wrapped = a.with_unchecked_byte_offset(13835057943613014016ull);
  const Status s = dev().gemm(wrapped, false, b, false, c, 1.0f, 0.0f, kComputeStream);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.to_string();
  EXPECT_THAT(s.message(), HasSubstr("13835057943613014016"));
  EXPECT_THAT(s.message(), HasSubstr("tensor 'a'"));
  EXPECT_EQ(count_calls(fake_log(), "synMemCopyAsync"), 0);
  EXPECT_EQ(count_calls(fake_log(), "synLaunchExt"), 0);
  const Status e = dev().embedding(wrapped, make(dev(), {2}, DType::kI64, "ids"),
                                   make(dev(), {2, 3}, DType::kF32, "out"), kComputeStream);
  EXPECT_EQ(e.code(), StatusCode::kDataLoss) << e.to_string() << " (a host-fallback op)";
}

TEST(HpuLaunchCheckTest, WrappedOffsetIsRejectedNamingTensorOffsetAndStorage) {
  const auto wrapped = static_cast<std::int64_t>(13835057943613014016ull);
  const Status s = check_launch_tensor("gemm_0", "a", "flat_param", wrapped, 64, 4096, 4096, 64);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);  // a runtime failure (exit 3), not bad input
  EXPECT_THAT(s.message(), HasSubstr("tensor 'a'"));
  EXPECT_THAT(s.message(), HasSubstr("13835057943613014016"));
  EXPECT_THAT(s.message(), HasSubstr("storage 'flat_param' of 4096 bytes"));
  EXPECT_THAT(s.message(), HasSubstr("nothing was launched"));
  EXPECT_THAT(check_launch_tensor("r", "x", "s", 4000, 200, 4096, 4096, 200).message(), HasSubstr("past the end"));
  EXPECT_THAT(check_launch_tensor("r", "x", "s", 0, 64, 4096, -1, 64).message(), HasSubstr("not a live allocation"));
  EXPECT_THAT(check_launch_tensor("r", "x", "s", 0, 64, 4096, 32, 64).message(),
              HasSubstr("past the end of its device allocation of 32 bytes"));
  EXPECT_THAT(check_launch_tensor("r", "x", "s", 0, 64, 4096, 4096, 128).message(),
              HasSubstr("compiled for 128 bytes"));
  EXPECT_TRUE(check_launch_tensor("r", "x", "s", 64, 64, 4096, 4096, 64).is_ok());
}

TEST_F(HpuDeviceTest, AViewOutsideItsDeviceAllocationIsNeverLaunched) {
  // A storage that claims more bytes than its device allocation holds (what a stale
  // flat-parameter view after a reallocation looks like to the device).
  auto real = dev().allocate(64, MemoryCategory::kParameters, "flat_param");
  ASSERT_TRUE(real.is_ok());
  auto liar = std::make_shared<Storage>((*real)->host_data(), (*real)->device_address(), 4096,
                                        MemoryCategory::kParameters, "stale_flat_param", "hpu:0", nullptr);
  Tensor view = *Tensor::view_of(liar, DType::kF32, {256}, 0, "w_view");
  const std::int64_t launches = dev().stats().launches;
  const Status s = dev().scale(view, 2.0f, kComputeStream);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.to_string();
  EXPECT_THAT(s.message(), HasSubstr("w_view"));
  EXPECT_THAT(s.message(), HasSubstr("stale_flat_param"));
  EXPECT_THAT(s.message(), HasSubstr("past the end of its device allocation of 64 bytes"));
  EXPECT_EQ(dev().stats().launches, launches);

  cpu::CpuDevice host;
  Tensor foreign = *host.empty({4}, DType::kF32, MemoryCategory::kOther, "host_t");
  EXPECT_THAT(dev().scale(foreign, 2.0f, kComputeStream).message(), HasSubstr("is not in the memory of hpu:0"));
}

TEST_F(HpuDeviceTest, StreamsAndEventsMapOntoSynapse) {
  auto copies = dev().create_stream("copies");
  ASSERT_TRUE(copies.is_ok());
  EXPECT_EQ(*copies, 1);
  Tensor x = make(dev(), {8}, DType::kF32, "x");
  ASSERT_TRUE(dev().fill(x, 1.5f, *copies).is_ok());
  clear_fake_log();
  const auto e = dev().record_event(*copies);
  ASSERT_THAT(e, IsOk());
  ASSERT_TRUE(dev().wait_event(kComputeStream, *e).is_ok());
  ASSERT_TRUE(dev().scale(x, 2.0f, kComputeStream).is_ok());
  ASSERT_TRUE(dev().synchronize(kComputeStream).is_ok());
  EXPECT_EQ(get<float>(dev(), x)[7], 3.0f);
  if (!real_target()) {
    const std::string log = fake_log();
    const std::size_t rec = log.find("synEventRecord\n"), wait = log.find("synStreamWaitEvent\n"),
                      launch = log.find("synLaunchExt\n");
    ASSERT_NE(rec, std::string::npos);
    ASSERT_NE(wait, std::string::npos);
    EXPECT_LT(rec, wait);
    EXPECT_LT(wait, launch);
  }
  EXPECT_EQ(dev().scale(x, 2.0f, 9).code(), StatusCode::kInvalidArgument);
}

// NOTE [HPU device memory]: tensors stay on the device; host_transfer_bytes counts only
// what crosses — a scale's fp32 factor, an explicit to_host/from_host, a DMA copy nothing.
TEST_F(HpuDeviceTest, HostTransferIsOnlyWhatCrossesTheSeam) {
  SHARDLAB_FAKE_ONLY();
  Tensor x = make(dev(), {1024}, DType::kF32, "x"), y = make(dev(), {1024}, DType::kF32, "y");
  ASSERT_TRUE(dev().fill(x, 1.0f, kComputeStream).is_ok());
  std::int64_t before = dev().host_transfer_bytes();
  ASSERT_TRUE(dev().scale(x, 2.0f, kComputeStream).is_ok());
  ASSERT_TRUE(dev().copy(x, y, kComputeStream).is_ok());
  EXPECT_EQ(dev().host_transfer_bytes() - before, 4) << "the factor; the operands stay on the device";
  before = dev().host_transfer_bytes();
  EXPECT_EQ(get<float>(dev(), y), std::vector<float>(1024, 2.0f));
  put(dev(), x, std::vector<float>(1024, 3.0f));
  EXPECT_EQ(dev().host_transfer_bytes() - before, 2 * x.nbytes());
}

// Code above the seam that dereferences device memory dies naming the tensor (NOTE [Host
// access] in runtime/device/device.h): every run on the double enforces the rule.
TEST_F(HpuDeviceTest, HostAccessToDeviceMemoryIsACheckFailure) {
  Tensor x = make(dev(), {16}, DType::kF32, "weights");
  EXPECT_FALSE(x.storage()->host_visible());
  try {
    (void)x.data<float>();
    ADD_FAILURE() << "data() on device memory returned";
  } catch (const CheckFailure& e) {
    EXPECT_THAT(e.what(), HasSubstr("host access to 'weights'"));
    EXPECT_THAT(e.what(), HasSubstr("no host bytes"));
  }
}

// Host tensors cross the seam through copy (the contract in device.h), counted both ways.
TEST_F(HpuDeviceTest, CopiesBetweenHostAndDeviceTensors) {
  cpu::CpuDevice host;
  Tensor h = *host.empty({6}, DType::kF32, MemoryCategory::kOther, "h"),
         back = *host.empty({6}, DType::kF32, MemoryCategory::kOther, "back");
  for (int i = 0; i < 6; ++i) h.data<float>()[i] = static_cast<float>(i) - 2.5f;
  Tensor d = make(dev(), {6}, DType::kF32, "d");
  const std::int64_t before = dev().host_transfer_bytes();
  ASSERT_TRUE(dev().copy(h, d, kComputeStream).is_ok());
  ASSERT_TRUE(dev().copy(d, back, kComputeStream).is_ok());
  EXPECT_EQ(dev().host_transfer_bytes() - before, 2 * d.nbytes());
  for (int i = 0; i < 6; ++i) EXPECT_EQ(back.data<float>()[i], h.data<float>()[i]);
  Tensor wrong = *host.empty({5}, DType::kF32, MemoryCategory::kOther, "wrong");
  EXPECT_THAT(dev().copy(wrong, d, kComputeStream).message(), HasSubstr("expected 5"));
  std::vector<std::byte> small(8);
  EXPECT_THAT(dev().to_host(d, small, kComputeStream).message(), HasSubstr("holds 24 bytes; the host buffer holds 8"));
  EXPECT_THAT(dev().from_host(small, h, kComputeStream).message(), HasSubstr("holds 24 bytes"));
}

// The test double hands out device addresses tagged like Gaudi2's DRAM base, which the
// host cannot dereference: a host read of device memory faults instead of silently working.
TEST_F(HpuDeviceTest, DeviceAddressesAreNotHostPointers) {
  SHARDLAB_FAKE_ONLY();
  Tensor x = make(dev(), {16}, DType::kF32, "x");
  const std::uint64_t address = x.storage()->device_address();
  EXPECT_EQ(address >> 48, 0x1001u) << std::hex << address;
  EXPECT_DEATH({ std::printf("%d", static_cast<int>(*reinterpret_cast<volatile const char*>(address))); }, "");
}

// A Synapse failure in an event or synchronize call is a Status naming the call (exit 3
// from the CLI), not an internal-error abort; a bad stream is INVALID_ARGUMENT.
TEST_F(HpuDeviceTest, EventAndSynchronizeFailuresAreStatusesNamingTheCall) {
  SHARDLAB_FAKE_ONLY();
  for (const char* call : {"synEventRecord", "synStreamWaitEvent", "synStreamSynchronize"}) {
    SCOPED_TRACE(call);
    const auto ok_event = dev().record_event(kComputeStream);
    ASSERT_THAT(ok_event, IsOk());
    ScopedEnv fail("SHARDLAB_FAKE_SYNAPSE_FAIL", std::string(call) + ":1");
    Status s;
    if (std::string(call) == "synEventRecord") s = dev().record_event(kComputeStream).status();
    if (std::string(call) == "synStreamWaitEvent") s = dev().wait_event(kComputeStream, *ok_event);
    if (std::string(call) == "synStreamSynchronize") s = dev().synchronize(kComputeStream);
    ASSERT_FALSE(s.is_ok());
    EXPECT_THAT(s.message(), HasSubstr(call));
  }
  EXPECT_EQ(dev().record_event(9).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(dev().wait_event(9, EventId{0}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(dev().synchronize(9).code(), StatusCode::kInvalidArgument);
}

// A stream that waits on an event runs only after the awaited work: checked on the
// double in lazy mode (nothing runs until synchronized), through the declared API.
TEST_F(HpuDeviceTest, EventOrderingAcrossStreams) {
  SHARDLAB_FAKE_ONLY();
  ScopedEnv lazy("SHARDLAB_FAKE_SYNAPSE_LAZY", "1");
  const SynapseApi& api = dev().library().api();
  synStreamHandle a = nullptr, b = nullptr;
  ASSERT_EQ(api.synStreamCreateGeneric(&a, dev().synapse_device(), 0), synSuccess);
  ASSERT_EQ(api.synStreamCreateGeneric(&b, dev().synapse_device(), 0), synSuccess);
  Tensor t = make(dev(), {1}, DType::kF32, "t");
  float in = 42.0f, out = 0.0f;
  ASSERT_EQ(api.synMemCopyAsync(a, reinterpret_cast<std::uint64_t>(&in), 4, HpuDevice::device_address(t), HOST_TO_DRAM),
            synSuccess);
  synEventHandle ev = nullptr;
  ASSERT_EQ(api.synEventCreate(&ev, dev().synapse_device(), 0), synSuccess);
  ASSERT_EQ(api.synEventRecord(ev, a), synSuccess);
  EXPECT_EQ(api.synEventQuery(ev), synSuccess) << "a lazily queried event runs its stream";
  in = 7.0f;  // the H2D above already ran; this one is ordered by the wait below
  ASSERT_EQ(api.synMemCopyAsync(a, reinterpret_cast<std::uint64_t>(&in), 4, HpuDevice::device_address(t), HOST_TO_DRAM),
            synSuccess);
  ASSERT_EQ(api.synEventRecord(ev, a), synSuccess);
  ASSERT_EQ(api.synStreamWaitEvent(b, ev, 0), synSuccess);
  ASSERT_EQ(
      api.synMemCopyAsync(b, HpuDevice::device_address(t), 4, reinterpret_cast<std::uint64_t>(&out), DRAM_TO_HOST),
      synSuccess);
  ASSERT_EQ(api.synStreamSynchronize(b), synSuccess);  // only b: a runs because b waits on it
  EXPECT_EQ(out, 7.0f);
  api.synEventDestroy(ev);
  api.synStreamDestroy(a);
  api.synStreamDestroy(b);
}

TEST_F(HpuDeviceTest, ArgumentErrorsLaunchNothing) {
  Tensor a = make(dev(), {4, 3}, DType::kF32, "a"), b = make(dev(), {4, 5}, DType::kF32, "b"),
         c = make(dev(), {4, 5}, DType::kF32, "c");
  const std::int64_t launches = dev().stats().launches;
  Status s = dev().gemm(a, false, b, false, c, 1.0f, 0.0f, kComputeStream);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("must be [4, 5]"));
  Tensor ids = make(dev(), {3}, DType::kI64, "ids"), out = make(dev(), {3, 5}, DType::kF32, "out");
  put(dev(), ids, std::vector<std::int64_t>{0, 9, 1});
  s = dev().embedding(b, ids, out, kComputeStream);
  EXPECT_THAT(s.message(), HasSubstr("id 9 at index 1"));
  Tensor loss = make(dev(), {1}, DType::kF32, "loss"), dlogits = make(dev(), {3, 5}, DType::kF32, "dlogits");
  put(dev(), ids, std::vector<std::int64_t>{0, 5, -100});
  s = dev().softmax_cross_entropy(out, ids, loss, dlogits, 1.0f, -100, kComputeStream);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("label 5 at row 1 is outside [0, 5)"));
  EXPECT_EQ(dev().stats().launches, launches);
}

// ---- every op against the cpu backend ------------------------------------------------------
// Tolerances: the double runs the cpu backend's math kernel by kernel, so results must be
// bitwise equal (the bitwise oracle check of hpu runs depends on it). On hardware (label hpu) MME/TPC arithmetic
// differs (fp32 GEMM may use reduced-precision passes, other summation orders): 2e-2 relative + 1e-3 absolute.

struct Operand {
  Shape shape;
  DType dtype = DType::kF32;
  std::int64_t id_range = 0;  // > 0: integer ids in [0, id_range) (one -100 when negative_id)
  bool negative_id = false;
};

class HpuOpsTest : public HpuDeviceTest {
 protected:
  using Fn = std::function<Status(Device&, std::vector<Tensor>&)>;

  // Runs `fn` on identical operands of the hpu device and a cpu device and compares every
  // operand afterwards (outputs, and inputs that must be unchanged). Operands are views
  // 3 elements into larger storages, so byte offsets are exercised.
  // Where an op runs on the hpu device: a graph launch, a host op (NOTE [HPU host ops]), or
  // a DMA that neither launches nor crosses the host link.
  enum class Runs { kLaunch, kHostOp, kDma };
  void compare(const std::string& name, const std::vector<Operand>& operands, const Fn& fn, Runs runs = Runs::kLaunch) {
    SCOPED_TRACE(name);
    std::mt19937 gen(static_cast<unsigned>(std::hash<std::string>{}(name)));
    std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
    std::vector<Tensor> h, c;
    for (std::size_t i = 0; i < operands.size(); ++i) {
      const Operand& o = operands[i];
      h.push_back(make(dev(), o.shape, o.dtype, name + "_" + std::to_string(i), 3));
      c.push_back(make(cpu_, o.shape, o.dtype, name + "_" + std::to_string(i), 3));
      std::vector<std::byte> init(static_cast<std::size_t>(h.back().nbytes()));
      for (std::int64_t k = 0; k < h.back().numel(); ++k) {
        std::byte* at = init.data() + k * static_cast<std::int64_t>(element_size(o.dtype));
        switch (o.dtype) {
          case DType::kF32: {
            const float v = dist(gen);
            std::memcpy(at, &v, 4);
            break;
          }
          case DType::kBF16:
          case DType::kF16: {
            const std::uint16_t v = float_to_bf16(dist(gen));
            std::memcpy(at, &v, 2);
            break;
          }
          case DType::kI64: {
            const std::int64_t v =
                o.negative_id && k == 1 ? -100 : static_cast<std::int64_t>(gen() % static_cast<unsigned>(o.id_range));
            std::memcpy(at, &v, 8);
            break;
          }
        }
      }
      ASSERT_TRUE(dev().from_host(init, h.back(), kComputeStream).is_ok());
      ASSERT_TRUE(cpu_.from_host(init, c.back(), kComputeStream).is_ok());
    }
    const HpuDevice::Stats before = dev().stats();
    const Status hs = fn(dev(), h);
    const HpuDevice::Stats after = dev().stats();
    const Status cs = fn(cpu_, c);
    ASSERT_THAT(cs, IsOk());
    ASSERT_THAT(hs, IsOk());
    switch (runs) {
      case Runs::kLaunch: EXPECT_GT(after.launches, before.launches) << "expected a graph launch"; break;
      case Runs::kHostOp: EXPECT_GT(after.host_fallback_ops, before.host_fallback_ops) << "expected a host op"; break;
      case Runs::kDma:
        EXPECT_EQ(after.launches, before.launches);
        EXPECT_EQ(after.host_fallback_ops, before.host_fallback_ops);
        EXPECT_EQ(after.bytes_to_device + after.bytes_to_host, before.bytes_to_device + before.bytes_to_host);
        break;
    }
    const double rel = real_target() ? 2e-2 : 0.0, abs = real_target() ? 1e-3 : 0.0;  // the double: bitwise
    for (std::size_t i = 0; i < h.size(); ++i) {
      std::vector<std::byte> hb(static_cast<std::size_t>(h[i].nbytes())), cb(hb.size());
      ASSERT_TRUE(dev().to_host(h[i], hb, kComputeStream).is_ok());
      ASSERT_TRUE(cpu_.to_host(c[i], cb, kComputeStream).is_ok());
      const auto at = [&](const std::vector<std::byte>& b, std::int64_t k) -> double {
        const std::byte* p = b.data() + k * static_cast<std::int64_t>(element_size(h[i].dtype()));
        switch (h[i].dtype()) {
          case DType::kF32: {
            float v;
            std::memcpy(&v, p, 4);
            return v;
          }
          case DType::kBF16: {
            std::uint16_t v;
            std::memcpy(&v, p, 2);
            return bf16_to_float(v);
          }
          case DType::kF16: {
            std::uint16_t v;
            std::memcpy(&v, p, 2);
            return fp16_to_float(v);
          }
          case DType::kI64: {
            std::int64_t v;
            std::memcpy(&v, p, 8);
            return static_cast<double>(v);
          }
        }
        return 0.0;
      };
      for (std::int64_t k = 0; k < h[i].numel(); ++k) {
        const double x = at(hb, k), y = at(cb, k);
        if (std::isnan(y)) {
          EXPECT_TRUE(std::isnan(x)) << "operand " << i << " element " << k;
          continue;
        }
        ASSERT_NEAR(x, y, abs + rel * std::fabs(y)) << "operand " << i << " element " << k;
      }
    }
  }

  cpu::CpuDevice cpu_{DeviceId{"cpu", DeviceId::kNoIndex}};
};

TEST_F(HpuOpsTest, GemmAndBatchedGemmEveryTransposeAndBeta) {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (float beta : {0.0f, 0.5f}) {
        const std::string tag = std::to_string(ta) + std::to_string(tb) + std::to_string(beta > 0);
        compare("gemm" + tag, {{ta ? Shape{7, 5} : Shape{5, 7}}, {tb ? Shape{3, 7} : Shape{7, 3}}, {{5, 3}}},
                [&](Device& d, std::vector<Tensor>& t) { return d.gemm(t[0], ta, t[1], tb, t[2], 1.5f, beta, 0); });
        compare(
            "bgemm" + tag,
            {{ta ? Shape{2, 7, 5} : Shape{2, 5, 7}}, {tb ? Shape{2, 3, 7} : Shape{2, 7, 3}}, {{2, 5, 3}}},
            [&](Device& d, std::vector<Tensor>& t) { return d.batched_gemm(t[0], ta, t[1], tb, t[2], 0.5f, beta, 0); });
      }
    }
  }
}

TEST_F(HpuOpsTest, ElementwiseOps) {
  compare("add_bias", {{{2, 3, 6}}, {{6}}},
          [](Device& d, std::vector<Tensor>& t) { return d.add_bias(t[0], t[1], 0); });
  compare("multiply", {{{33}}, {{33}}, {{33}}},
          [](Device& d, std::vector<Tensor>& t) { return d.multiply(t[0], t[1], t[2], 0); });
  compare("multiply_in_place", {{{33}}, {{33}}},
          [](Device& d, std::vector<Tensor>& t) { return d.multiply(t[0], t[1], t[0], 0); });
  compare("scale", {{{19}}}, [](Device& d, std::vector<Tensor>& t) { return d.scale(t[0], -0.75f, 0); });
  compare("axpy", {{{19}}, {{19}}}, [](Device& d, std::vector<Tensor>& t) { return d.axpy(0.25f, t[0], t[1], 0); });
  compare("fill_f32", {{{9}}}, [](Device& d, std::vector<Tensor>& t) { return d.fill(t[0], 2.5f, 0); });
  compare("fill_bf16", {{{9}, DType::kBF16}},
          [](Device& d, std::vector<Tensor>& t) { return d.fill(t[0], -1.25f, 0); });
  compare(
      "fill_i64", {{{9}, DType::kI64, 5}}, [](Device& d, std::vector<Tensor>& t) { return d.fill(t[0], 3.0f, 0); },
      Runs::kHostOp);
  compare("cast_to_bf16", {{{17}}, {{17}, DType::kBF16}},
          [](Device& d, std::vector<Tensor>& t) { return d.cast(t[0], t[1], 0); });
  compare("cast_from_bf16", {{{17}, DType::kBF16}, {{17}}},
          [](Device& d, std::vector<Tensor>& t) { return d.cast(t[0], t[1], 0); });
  compare("transpose_1_2", {{{2, 3, 4, 5}}, {{2, 4, 3, 5}}},
          [](Device& d, std::vector<Tensor>& t) { return d.transpose_1_2(t[0], t[1], 0); });
}

TEST_F(HpuOpsTest, ActivationsForwardBackwardAndInPlace) {
  for (Activation act : {Activation::kRelu, Activation::kGelu, Activation::kGeluTanh, Activation::kTanh}) {
    const std::string tag = std::to_string(static_cast<int>(act));
    compare("act" + tag, {{{37}}, {{37}}},
            [act](Device& d, std::vector<Tensor>& t) { return d.activation(act, t[0], t[1], 0); });
    compare("act_inplace" + tag, {{{37}}},
            [act](Device& d, std::vector<Tensor>& t) { return d.activation(act, t[0], t[0], 0); });
    compare("act_bwd" + tag, {{{37}}, {{37}}, {{37}}},
            [act](Device& d, std::vector<Tensor>& t) { return d.activation_backward(act, t[0], t[1], t[2], 0); });
  }
}

TEST_F(HpuOpsTest, LayerNormForwardAndBackward) {
  compare("layer_norm", {{{6, 10}}, {{10}}, {{10}}, {{6, 10}}, {{6}}, {{6}}},
          [](Device& d, std::vector<Tensor>& t) { return d.layer_norm(t[0], t[1], t[2], 1e-5f, t[3], t[4], t[5], 0); });
  for (bool accumulate : {false, true}) {
    compare(accumulate ? "ln_bwd_acc" : "ln_bwd",
            {{{6, 10}}, {{6, 10}}, {{6}}, {{6}}, {{10}}, {{6, 10}}, {{10}}, {{10}}},
            [accumulate](Device& d, std::vector<Tensor>& t) {
              // mean/rstd from a forward pass so the inputs are consistent
              Status s = d.layer_norm(t[0], t[4], t[6], 1e-5f, t[5], t[2], t[3], 0);
              if (!s.is_ok()) return s;
              return d.layer_norm_backward(t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], accumulate, 0);
            });
  }
}

TEST_F(HpuOpsTest, LookupsSoftmaxAndLossOnTheDeviceAndHostOps) {
  compare("embedding", {{{11, 4}}, {{7}, DType::kI64, 11}, {{7, 4}}},
          [](Device& d, std::vector<Tensor>& t) { return d.embedding(t[0], t[1], t[2], 0); });
  compare("embedding_backward", {{{7, 4}}, {{7}, DType::kI64, 11}, {{11, 4}}},
          [](Device& d, std::vector<Tensor>& t) { return d.embedding_backward(t[0], t[1], t[2], true, 0); });
  compare("embedding_backward_overwrite", {{{7, 4}}, {{7}, DType::kI64, 3}, {{11, 4}}},
          [](Device& d, std::vector<Tensor>& t) { return d.embedding_backward(t[0], t[1], t[2], false, 0); });
  // Composed on the device from public kernels with the cpu backend's bits (NOTE [HPU
  // cross entropy] and the ops' comments in device.cc).
  for (const bool accumulate : {false, true}) {
    compare(std::string("bias_grad") + (accumulate ? "_accumulate" : ""), {{{5, 6}}, {{6}}},
            [accumulate](Device& d, std::vector<Tensor>& t) { return d.bias_grad(t[0], t[1], accumulate, 0); });
  }
  // Row 0 of batch 1 is fully masked (uniform probabilities); the mask holds a 0.5 too.
  const auto softmax = [](bool in_place) {
    return [in_place](Device& d, std::vector<Tensor>& t) {
      std::vector<float> mask(10);
      for (std::size_t k = 0; k < mask.size(); ++k) mask[k] = k >= 5 ? 0.0f : k % 4 == 0 ? 0.5f : 1.0f;
      if (Status s = values_from_host(d, mask, t[1]); !s.is_ok()) return s;
      return d.attention_softmax(t[0], t[1], 0.5f, in_place ? t[0] : t[2], 0);
    };
  };
  compare("attention_softmax", {{{2, 2, 3, 5}}, {{2, 5}}, {{2, 2, 3, 5}}}, softmax(false));
  compare("attention_softmax_in_place", {{{2, 2, 3, 5}}, {{2, 5}}, {{2, 2, 3, 5}}}, softmax(true));
  compare("attention_softmax_backward", {{{2, 2, 3, 5}}, {{2, 2, 3, 5}}, {{2, 2, 3, 5}}},
          [](Device& d, std::vector<Tensor>& t) { return d.attention_softmax_backward(t[0], t[1], 0.5f, t[2], 0); });
  compare("attention_softmax_backward_in_place", {{{2, 2, 3, 5}}, {{2, 2, 3, 5}}},
          [](Device& d, std::vector<Tensor>& t) { return d.attention_softmax_backward(t[0], t[1], 0.5f, t[1], 0); });
  // Row 1 carries the ignore index (-100): its dlogits are zero and it adds no loss.
  compare(
      "cross_entropy", {{{6, 5}}, {{6}, DType::kI64, 5, true}, {{1}}, {{6, 5}}},
      [](Device& d, std::vector<Tensor>& t) { return d.softmax_cross_entropy(t[0], t[1], t[2], t[3], 0.5f, -100, 0); });
  compare("cross_entropy_all_ignored", {{{3, 5}}, {{3}, DType::kI64, 5}, {{1}}, {{3, 5}}},
          [](Device& d, std::vector<Tensor>& t) {
            if (Status s = values_from_host(d, std::vector<std::int64_t>{7, 7, 7}, t[1]); !s.is_ok()) return s;
            return d.softmax_cross_entropy(t[0], t[1], t[2], t[3], 0.25f, 7, 0);
          });
  // A grad_scale whose sign could make a -0 the composition cannot reproduce: a host op.
  compare(
      "cross_entropy_negative_scale", {{{6, 5}}, {{6}, DType::kI64, 5, true}, {{1}}, {{6, 5}}},
      [](Device& d, std::vector<Tensor>& t) { return d.softmax_cross_entropy(t[0], t[1], t[2], t[3], -1.0f, -100, 0); },
      Runs::kHostOp);
  compare(
      "copy", {{{13}}, {{13}}}, [](Device& d, std::vector<Tensor>& t) { return d.copy(t[0], t[1], 0); }, Runs::kDma);
  compare(
      "copy_overlapping", {{{13}}},
      [](Device& d, std::vector<Tensor>& t) {
        SHARDLAB_ASSIGN_OR_RETURN(Tensor from, t[0].narrow(0, 9));
        SHARDLAB_ASSIGN_OR_RETURN(Tensor to, t[0].narrow(4, 9));
        return d.copy(from, to, 0);
      },
      Runs::kHostOp);
  compare(
      "dropout_mask", {{{3, 2, 5}}},
      [](Device& d, std::vector<Tensor>& t) { return d.dropout_mask(t[0], 0.25f, Rng(7, 3), 11, 5, 0); },
      Runs::kHostOp);
}

// NOTE [HPU optimizer step]: the update is a graph of elementwise kernels with the cpu
// backend's bits, for every optimizer form and on views inside a larger buffer (the runs
// Optimizer::step updates when parameters are frozen or padded).
TEST_F(HpuOpsTest, OptimizerStepOnTheDevice) {
  for (std::int64_t step : {1, 2, 7}) {
    for (float decay : {0.0f, 0.01f}) {
      const std::string tag = std::to_string(step) + (decay > 0 ? "_wd" : "");
      OptimizerUpdate adamw;
      adamw.kind = OptimizerKind::kAdamW;
      adamw.lr = 1e-2f;
      adamw.weight_decay = decay;
      adamw.step = step;
      compare("adamw" + tag, {{{10}}, {{10}}, {{10}}, {{10}}}, [adamw](Device& d, std::vector<Tensor>& t) {
        // v must be >= 0 (a running mean of squares).
        if (Status s = d.axpy(0.0f, t[3], t[3], 0); !s.is_ok()) return s;
        if (Status s = d.multiply(t[3], t[3], t[3], 0); !s.is_ok()) return s;
        return d.optimizer_step(adamw, t[0], t[1], t[2], t[3], 0);
      });
      OptimizerUpdate sgd;
      sgd.lr = 0.05f;
      sgd.weight_decay = decay;
      sgd.momentum = 0.9f;
      sgd.step = step;
      compare("sgd_momentum" + tag, {{{10}}, {{10}}, {{10}}}, [sgd](Device& d, std::vector<Tensor>& t) {
        return d.optimizer_step(sgd, t[0], t[1], t[2], Tensor(), 0);
      });
      sgd.momentum = 0.0f;
      compare("sgd" + tag, {{{10}}, {{10}}}, [sgd](Device& d, std::vector<Tensor>& t) {
        return d.optimizer_step(sgd, t[0], t[1], Tensor(), Tensor(), 0);
      });
    }
  }
  OptimizerUpdate adamw;
  adamw.kind = OptimizerKind::kAdamW;
  compare("adamw_run", {{{10}}, {{10}}, {{10}}, {{10}}}, [adamw](Device& d, std::vector<Tensor>& t) {
    if (Status s = d.multiply(t[3], t[3], t[3], 0); !s.is_ok()) return s;
    std::vector<Tensor> run;
    for (const Tensor& whole : t) run.push_back(*whole.narrow(3, 4));
    return d.optimizer_step(adamw, run[0], run[1], run[2], run[3], 0);
  });
  Tensor p = make(dev(), {4}, DType::kF32, "p"), g = make(dev(), {4}, DType::kF32, "g");
  EXPECT_THAT(dev().optimizer_step(adamw, p, g, Tensor(), Tensor(), 0).message(),
              HasSubstr("AdamW needs 2 state tensor(s)"));
}

// ---- the HCCL communicator on one rank ------------------------------------------------------

// A bootstrap group of one (no MPI): broadcast and split are trivial.
class SoloCommunicator final : public comm::Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const std::string& group_name() const override { return name_; }
  comm::WorkPtr all_gather_into(const Tensor&, const Tensor&) override { return comm::completed_work(Status::ok()); }
  comm::WorkPtr reduce_scatter(const Tensor&, const Tensor&, comm::ReduceOp) override {
    return comm::completed_work(Status::ok());
  }
  comm::WorkPtr all_reduce(const Tensor&, comm::ReduceOp) override { return comm::completed_work(Status::ok()); }
  comm::WorkPtr broadcast(const Tensor&, int) override { return comm::completed_work(Status::ok()); }
  comm::WorkPtr barrier() override { return comm::completed_work(Status::ok()); }
  comm::WorkPtr send(const Tensor&, int, int) override { return comm::completed_work(Status::internal("solo")); }
  comm::WorkPtr recv(const Tensor&, int, int) override { return comm::completed_work(Status::internal("solo")); }
  Result<std::unique_ptr<comm::Communicator>> split(int color, int) override {
    if (color < 0) return std::unique_ptr<comm::Communicator>();
    return std::unique_ptr<comm::Communicator>(new SoloCommunicator());
  }

 private:
  std::string name_ = "world";
};

class HcclSoloTest : public HpuDeviceTest {
 protected:
  void SetUp() override {
    HpuDeviceTest::SetUp();
    if (IsSkipped()) return;
    auto c = comm::hccl::HcclCommunicator::create(dev(), std::make_unique<SoloCommunicator>(), clock_);
    ASSERT_THAT(c, IsOk());
    comm_ = std::move(c).value();
  }
  void TearDown() override { comm_.reset(); }
  std::unique_ptr<comm::hccl::HcclCommunicator> comm_;
};

TEST_F(HcclSoloTest, CollectivesOfOneRankRoundTripThroughTheDevice) {
  Tensor t = make(dev(), {5}, DType::kF32, "t");
  put(dev(), t, std::vector<float>{0, 1, 2, 3, 4});
  clear_fake_log();
  ASSERT_TRUE(comm_->all_reduce(t, comm::ReduceOp::kAvg)->wait(comm::kDefaultTimeout).is_ok());
  EXPECT_EQ(get<float>(dev(), t)[4], 4.0f);
  if (!real_target()) {
    const std::string log = fake_log();
    EXPECT_EQ(count_calls(log, "hcclAllReduce"), 1);
    EXPECT_EQ(count_calls(log, "synStreamWaitEvent"), 1) << "ordered after the compute stream";
  }
  Tensor out = make(dev(), {5}, DType::kF32, "out");
  ASSERT_TRUE(comm_->all_gather_into(out, t)->wait(comm::kDefaultTimeout).is_ok());
  EXPECT_EQ(get<float>(dev(), out)[3], 3.0f);
  ASSERT_TRUE(comm_->barrier()->wait(comm::kDefaultTimeout).is_ok());
  auto sub = comm_->split(0, 0);
  ASSERT_THAT(sub, IsOk());
  ASSERT_NE(*sub, nullptr);
  ASSERT_TRUE((*sub)->broadcast(t, 0)->wait(comm::kDefaultTimeout).is_ok());
  cpu::CpuDevice host;
  Tensor foreign = *host.empty({5}, DType::kF32, MemoryCategory::kOther, "host_t");
  EXPECT_THAT(comm_->all_reduce(foreign, comm::ReduceOp::kSum)->wait(comm::kDefaultTimeout).message(),
              HasSubstr("not in the memory of hpu:0"));
}

TEST_F(HcclSoloTest, AFailingHcclCallAbortsTheCommunicator) {
  SHARDLAB_FAKE_ONLY();
  Tensor t = make(dev(), {5}, DType::kF32, "t");
  {
    ScopedEnv fail("SHARDLAB_FAKE_SYNAPSE_FAIL", "hcclAllReduce:3");
    const Status s = comm_->all_reduce(t, comm::ReduceOp::kSum)->wait(comm::kDefaultTimeout);
    EXPECT_EQ(s.code(), StatusCode::kInternal);
    EXPECT_THAT(s.message(),
                HasSubstr("hcclAllReduce (all_reduce (sum) of 5 fp32 elements on rank 0 of group 'world'"));
    EXPECT_THAT(s.message(), HasSubstr("hcclInternalError (3)"));
    EXPECT_THAT(s.message(), HasSubstr("hcclCommAbort"));
  }
  EXPECT_TRUE(comm_->aborted());
  EXPECT_THAT(fake_log(), HasSubstr("hcclCommAbort\n"));
  const Status later = comm_->barrier()->wait(comm::kDefaultTimeout);
  EXPECT_EQ(later.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(later.message(), HasSubstr("aborted earlier"));
}

TEST_F(HcclSoloTest, AnAsynchronousHcclErrorAbortsInsteadOfHanging) {
  SHARDLAB_FAKE_ONLY();
  Tensor t = make(dev(), {5}, DType::kF32, "t");
  ScopedEnv fail("SHARDLAB_FAKE_SYNAPSE_ASYNC_FAIL", "hcclAllReduce");
  comm::WorkPtr w = comm_->all_reduce(t, comm::ReduceOp::kSum);
  const Status s = w->wait(comm::kDefaultTimeout);
  EXPECT_EQ(s.code(), StatusCode::kInternal) << s.to_string();
  EXPECT_THAT(s.message(), HasSubstr("hcclCommGetAsyncError during all_reduce"));
  EXPECT_THAT(s.message(), HasSubstr("hcclRemoteError (6)"));
  EXPECT_TRUE(comm_->aborted());
}

TEST_F(HcclSoloTest, InitFailureNamesTheCall) {
  SHARDLAB_FAKE_ONLY();
  ScopedEnv fail("SHARDLAB_FAKE_SYNAPSE_FAIL", "hcclCommInitRank:2");
  auto c = comm::hccl::HcclCommunicator::create(dev(), std::make_unique<SoloCommunicator>(), clock_);
  ASSERT_FALSE(c.is_ok());
  EXPECT_THAT(c.status().message(), HasSubstr("hcclCommInitRank: hcclSystemError (2)"));
  EXPECT_THAT(c.status().message(), HasSubstr("rank 0 of group 'world' (size 1)"));
}

}  // namespace
}  // namespace shardlab::runtime::device::hpu
