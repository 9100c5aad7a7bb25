// The Communicator conformance suite on the hccl backend, one rank per process (ctest
// launches it through mpiexec: label `mpi` against the TEST DOUBLE, label `hpu` against
// libSynapse with SHARDLAB_HPU_TEST_TARGET=real, skipped without a card). Each process
// opens its HpuDevice once; every test builds a fresh HcclCommunicator over a fresh MPI
// bootstrap communicator. Only rank 0 prints gtest's output; every rank exits with the
// worst result of the world.
#include "runtime/platform/hpu/comm/communicator.h"

#include <mpi.h>

#include <cstdio>
#include <memory>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "runtime/comm/conformance_test.h"
#include "runtime/comm/mpi/communicator.h"
#include "runtime/platform/hpu/hpu_runtime.h"
#include "runtime/platform/hpu/testing/hpu_test_target.h"
#include "testing/mpi_gtest.h"
#include "testing/status_matchers.h"

using shardlab::testlib::IsOk;

namespace shardlab::runtime::comm::hccl {
namespace {

using testing::CommHarness;
using ::testing::HasSubstr;
using testing::RankEnv;

constexpr Nanos kShortTimeout = 300 * kNanosPerMilli;
constexpr Nanos kLong = 60 * kNanosPerSecond;

using testlib::mpi_world_size;

// The process's device (opened in main, closed before MPI_Finalize).
struct Process {
  SteadyClock clock;
  std::unique_ptr<device::hpu::HpuContext> context;
  std::string skip_reason;
};
Process* g_process = nullptr;  // test-binary state owned by main()

Result<std::unique_ptr<HcclCommunicator>> make_world() {
  auto boot = mpi::MpiEnvironment::create_world(g_process->clock);
  if (!boot.is_ok()) return boot.status();
  return HcclCommunicator::create(g_process->context->hpu_device(), std::move(boot).value(), g_process->clock);
}

class HcclHarness final : public CommHarness {
 public:
  std::string name() const override { return "Hccl"; }
  void run(int world_size, const std::function<void(RankEnv&)>& body) override {
    if (!g_process->skip_reason.empty()) GTEST_SKIP() << g_process->skip_reason;
    ASSERT_EQ(world_size, mpi_world_size()) << "launch with mpiexec -n " << world_size;
    auto comm = make_world();
    ASSERT_THAT(comm, IsOk());
    RankEnv env{**comm, g_process->context->device(), g_process->clock, kShortTimeout};
    body(env);
  }
};

}  // namespace
}  // namespace shardlab::runtime::comm::hccl

namespace shardlab::runtime::comm::testing {
INSTANTIATE_TEST_SUITE_P(Hccl, CommConformance,
                         ::testing::ValuesIn(conformance_params(std::make_shared<hccl::HcclHarness>(),
                                                                {hccl::mpi_world_size()})),
                         conformance_param_name);
}  // namespace shardlab::runtime::comm::testing

namespace shardlab::runtime::comm::hccl {
namespace {

class HcclCommunicatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!g_process->skip_reason.empty()) GTEST_SKIP() << g_process->skip_reason;
    auto c = make_world();
    ASSERT_THAT(c, IsOk());
    comm_ = std::move(c).value();
  }
  Tensor make(std::int64_t n, DType dtype, const std::string& name) {
    auto t = g_process->context->device().empty({n}, dtype, MemoryCategory::kCommBuffers, name);
    SHARDLAB_CHECK_OK(t.status());
    return *t;
  }
  std::unique_ptr<HcclCommunicator> comm_;
};

TEST_F(HcclCommunicatorTest, GroupNamesFollowTheBootstrapAndSplitsNest) {
  const int r = comm_->rank();
  EXPECT_EQ(comm_->group_name(), "world");
  auto sub = comm_->split(r % 2, r);
  ASSERT_THAT(sub, IsOk());
  ASSERT_NE(*sub, nullptr);
  EXPECT_EQ((*sub)->group_name(), "world/" + std::to_string(r % 2));
  Tensor t = make(3, DType::kF32, "t");
  device::Device& dev = g_process->context->device();
  ASSERT_TRUE(device::values_from_host(dev, std::vector<float>(3, 1.0f), t).is_ok());
  ASSERT_TRUE((*sub)->all_reduce(t, ReduceOp::kSum)->wait(kLong).is_ok());
  EXPECT_EQ((*device::values_to_host<float>(dev, t))[2], static_cast<float>((*sub)->size()));
}

TEST_F(HcclCommunicatorTest, AnAsynchronousFailureAbortsOnEveryRankWithoutHanging) {
  if (device::hpu::testing::real_target()) GTEST_SKIP() << "fake-only: drives the test double's knobs";
  setenv("SHARDLAB_FAKE_SYNAPSE_ASYNC_FAIL", "hcclReduceScatter", 1);
  const int w = comm_->size();
  Tensor in = make(4 * w, DType::kF32, "in"), out = make(4, DType::kF32, "out");
  const Status s = comm_->reduce_scatter(out, in, ReduceOp::kSum)->wait(kLong);
  unsetenv("SHARDLAB_FAKE_SYNAPSE_ASYNC_FAIL");
  EXPECT_EQ(s.code(), StatusCode::kInternal) << s.to_string();
  EXPECT_THAT(s.message(), HasSubstr("hcclRemoteError"));
  EXPECT_TRUE(comm_->aborted());
  EXPECT_EQ(comm_->all_reduce(out, ReduceOp::kSum)->wait(kLong).code(), StatusCode::kFailedPrecondition);
}

using device::hpu::testing::clear_fake_log;
using device::hpu::testing::fake_log;

// wait_on_compute orders the compute stream after the collective on the device: the
// host never polls the completion event, and with the double's lazy streams (nothing
// runs before a synchronize) the compute stream's next op still reads the gathered data.
TEST_F(HcclCommunicatorTest, WaitOnComputeMakesTheComputeStreamWaitWithoutTheHost) {
  if (device::hpu::testing::real_target()) GTEST_SKIP() << "fake-only: reads the test double's call log";
  setenv("SHARDLAB_FAKE_SYNAPSE_LAZY", "1", 1);
  const int w = comm_->size(), r = comm_->rank();
  device::Device& dev = g_process->context->device();
  Tensor in = make(3, DType::kF32, "in"), out = make(3 * w, DType::kF32, "out");
  ASSERT_TRUE(device::values_from_host(dev, std::vector<float>(3, static_cast<float>(r + 1)), in).is_ok());
  clear_fake_log();
  const WorkPtr work = comm_->all_gather_into(out, in);
  const Status ordered = work->wait_on_compute(kLong);
  const std::string log = fake_log();
  ASSERT_THAT(ordered, IsOk());
  EXPECT_THAT(log, HasSubstr("hcclAllGather\nsynEventCreate\nsynEventRecord\nsynStreamWaitEvent\n"));
  EXPECT_THAT(log, ::testing::Not(HasSubstr("synEventQuery")));
  EXPECT_THAT(log, ::testing::Not(HasSubstr("synStreamSynchronize")));
  ASSERT_TRUE(dev.scale(out, 2.0f).is_ok());
  const auto got = device::values_to_host<float>(dev, out);
  unsetenv("SHARDLAB_FAKE_SYNAPSE_LAZY");
  ASSERT_THAT(got, IsOk());
  for (int src = 0; src < w; ++src) EXPECT_EQ((*got)[static_cast<std::size_t>(3 * src + 2)], 2.0f * (src + 1));
  EXPECT_TRUE(work->wait(kLong).is_ok());
}

TEST_F(HcclCommunicatorTest, HcclCommIdReplacesTheUniqueIdBroadcast) {
  setenv("HCCL_COMM_ID", "127.0.0.1:5555", 1);
  auto c = make_world();
  unsetenv("HCCL_COMM_ID");
  ASSERT_THAT(c, IsOk());
  Tensor t = make(2, DType::kI64, "t");
  device::Device& dev = g_process->context->device();
  ASSERT_TRUE(device::values_from_host(dev, std::vector<std::int64_t>{(*c)->rank(), 0}, t).is_ok());
  ASSERT_TRUE((*c)->all_reduce(t, ReduceOp::kSum)->wait(kLong).is_ok());
  const int w = (*c)->size();
  EXPECT_EQ((*device::values_to_host<std::int64_t>(dev, t))[0], w * (w - 1) / 2);
}

// Only rank 0 prints gtest's usual output (the mpi test's convention).
}  // namespace
}  // namespace shardlab::runtime::comm::hccl

int main(int argc, char** argv) {
  using namespace shardlab::runtime;
  auto env = comm::mpi::MpiEnvironment::initialize(&argc, &argv);
  if (!env.is_ok()) {
    std::fprintf(stderr, "%s\n", env.status().to_string().c_str());
    return 1;
  }
  ::testing::InitGoogleTest(&argc, argv);
  const int rank = (*env)->world_rank();
  auto process = std::make_unique<comm::hccl::Process>();
  comm::hccl::g_process = process.get();
  process->skip_reason = device::hpu::testing::gaudi_missing_reason();
  if (process->skip_reason.empty()) {
    auto ctx = device::hpu::open_hpu({}, nullptr, process->clock);
    if (!ctx.is_ok()) {
      std::fprintf(stderr, "[rank %d] open_hpu: %s\n", rank, ctx.status().to_string().c_str());
      return 1;
    }
    process->context = std::move(ctx).value();
  }
  shardlab::testlib::print_only_failures_off_rank_0(rank);
  const int result = RUN_ALL_TESTS();
  process.reset();
  comm::hccl::g_process = nullptr;
  return shardlab::testlib::worst_over_ranks(result, "comm_hccl_test");
}
