// The Communicator conformance suite on Open MPI, plus checks specific to the mpi backend.
//
// Run under mpiexec (ctest does: one entry per world size, label `mpi`). Every process is
// one rank; the suite is instantiated with exactly the MPI world size. Only rank 0 prints
// gtest's usual output; other ranks print just their failures, prefixed with the rank,
// and every rank exits with the worst result of the world.
#include "runtime/comm/mpi/communicator.h"

#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "runtime/comm/conformance_test.h"
#include "runtime/core/clock.h"
#include "runtime/device/cpu/device.h"
#include "testing/mpi_gtest.h"
#include "testing/status_matchers.h"

using shardlab::testlib::IsOk;

namespace shardlab::runtime::comm::mpi {
namespace {

using testing::CommHarness;
using testing::RankEnv;

constexpr Nanos kShortTimeout = 300 * kNanosPerMilli;
constexpr Nanos kLong = 60 * kNanosPerSecond;

using testlib::mpi_world_size;

// Each run gets a fresh world communicator (a new MPI_Comm_dup), so requests left
// behind by a failed test cannot match the next test's collectives.
class MpiHarness final : public CommHarness {
 public:
  std::string name() const override { return "Mpi"; }

  void run(int world_size, const std::function<void(RankEnv&)>& body) override {
    ASSERT_EQ(world_size, mpi_world_size())
        << "the mpi harness runs one rank per process: launch with mpiexec -n " << world_size;
    SteadyClock clock;
    device::cpu::CpuDevice device(device::DeviceId{"cpu", device::DeviceId::kNoIndex});
    auto comm = MpiEnvironment::create_world(clock);
    ASSERT_THAT(comm, IsOk());
    RankEnv env{**comm, device, clock, kShortTimeout};
    body(env);
  }
};

}  // namespace
}  // namespace shardlab::runtime::comm::mpi

namespace shardlab::runtime::comm::testing {
// Evaluated by gtest after main() has initialized MPI.
INSTANTIATE_TEST_SUITE_P(Mpi, CommConformance,
                         ::testing::ValuesIn(conformance_params(std::make_shared<mpi::MpiHarness>(),
                                                                {mpi::mpi_world_size()})),
                         conformance_param_name);
}  // namespace shardlab::runtime::comm::testing

namespace shardlab::runtime::comm::mpi {
namespace {

// MPI-specific checks: each test owns a fresh world communicator and a cpu device.
class MpiCommunicatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto world = MpiEnvironment::create_world(clock_);
    ASSERT_THAT(world, IsOk());
    comm_ = std::move(*world);
  }

  Tensor make(std::int64_t n, DType dtype, const std::string& name) {
    auto t = device_.empty({n}, dtype, MemoryCategory::kCommBuffers, name);
    SHARDLAB_CHECK_OK(t.status());
    return *t;
  }

  static void expect_ok(const WorkPtr& w, const std::string& what) {
    const Status s = w->wait(kLong);
    EXPECT_THAT(s, IsOk()) << what;
  }

  // Called by every rank but `late` after its wait timed out: rank 0 collects an ack from
  // each other waiting rank, then sends "go" to the late rank (tag `tag`). Without the acks
  // a rank scheduled late could see the collective complete inside its own timeout.
  void release_late_rank(Tensor& go, int late, int tag) {
    const int ack_tag = tag + 1000;
    if (comm_->rank() == 0) {
      for (int peer = 1; peer < late; ++peer) expect_ok(comm_->recv(go, peer, ack_tag), "recv timed-out ack");
      expect_ok(comm_->send(go, late, tag), "send go");
    } else {
      expect_ok(comm_->send(go, 0, ack_tag), "send timed-out ack");
    }
  }

  // Declared before comm_ so that it outlives the communicator and its pending requests.
  SteadyClock clock_;
  device::cpu::CpuDevice device_{device::DeviceId{"cpu", device::DeviceId::kNoIndex}};
  std::unique_ptr<MpiCommunicator> comm_;
};

TEST_F(MpiCommunicatorTest, WorldMatchesMpiCommWorld) {
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  EXPECT_EQ(comm_->rank(), rank);
  EXPECT_EQ(comm_->size(), mpi_world_size());
  EXPECT_EQ(comm_->group_name(), "world");
  int cmp = MPI_UNEQUAL;
  MPI_Comm_compare(comm_->mpi_comm(), MPI_COMM_WORLD, &cmp);
  EXPECT_EQ(cmp, MPI_CONGRUENT) << "the world communicator must be a private duplicate of MPI_COMM_WORLD";
}

// Names as the simulator gives them (split_group_name): parent/color, with .N from the
// parent's N-th split on — HYBRID_SHARD's shard group "world/0" and replica group
// "world/0.2" of rank 0 must not share a name in the trace.
TEST_F(MpiCommunicatorTest, SplitNamesGroupsParentSlashColorAndNests) {
  const int r = comm_->rank();
  auto sub = comm_->split(r % 2, r);
  ASSERT_THAT(sub, IsOk());
  ASSERT_NE(*sub, nullptr);
  EXPECT_EQ((*sub)->group_name(), "world/" + std::to_string(r % 2));
  auto nested = (*sub)->split(0, 0);
  ASSERT_THAT(nested, IsOk());
  ASSERT_NE(*nested, nullptr);
  EXPECT_EQ((*nested)->group_name(), "world/" + std::to_string(r % 2) + "/0");
  EXPECT_EQ((*nested)->size(), (*sub)->size());

  auto none = comm_->split(-1, 0);  // the world's second split: no group for anyone
  ASSERT_THAT(none, IsOk());
  EXPECT_EQ(*none, nullptr);
  auto third = comm_->split(r % 2, r);
  ASSERT_THAT(third, IsOk());
  ASSERT_NE(*third, nullptr);
  EXPECT_EQ((*third)->group_name(), "world/" + std::to_string(r % 2) + ".3");
  EXPECT_EQ((*third)->group_name(), split_group_name("world", r % 2, 3));
}

TEST_F(MpiCommunicatorTest, TimeoutNamesOpRankGroupCountAndDtype) {
  const int w = comm_->size(), r = comm_->rank(), late = w - 1;
  Tensor in = make(7, DType::kBF16, "in"), out = make(7 * w, DType::kBF16, "out");
  for (int i = 0; i < 7; ++i) in.data<std::uint16_t>()[i] = float_to_bf16(static_cast<float>(r + i));
  Tensor go = make(1, DType::kI64, "go");
  go.data<std::int64_t>()[0] = 1;
  if (r == late) {
    expect_ok(comm_->recv(go, 0, 7), "recv go");
    expect_ok(comm_->all_gather_into(out, in), "late all_gather");
  } else {
    WorkPtr work = comm_->all_gather_into(out, in);
    const Status s = work->wait(20 * kNanosPerMilli);
    ASSERT_EQ(s.code(), StatusCode::kTimeout) << s.to_string();
    for (const std::string& part : {std::string("all_gather"), "rank " + std::to_string(r), std::string("'world'"),
                                    std::string("7 bf16 elements"), std::string("20 ms")}) {
      EXPECT_NE(s.message().find(part), std::string::npos) << "missing '" << part << "' in: " << s.message();
    }
    if (r == 0) {
      // Only rank 0 knows the late rank has not joined yet (it has not sent "go").
      EXPECT_FALSE(work->is_completed());
    }
    release_late_rank(go, late, 7);
    expect_ok(work, "all_gather after the late peer arrived");
  }
  for (int src = 0; src < w; ++src) {
    ASSERT_EQ(bf16_to_float(out.data<std::uint16_t>()[src * 7 + 3]), static_cast<float>(src + 3));
  }
}

// NOTE [Roll call]: the rank that does not communicate is named; ranks waiting in a
// collective answer with what they wait in.
TEST_F(MpiCommunicatorTest, RollCallNamesTheRankThatDoesNotAnswer) {
  const int w = comm_->size(), r = comm_->rank(), silent = w - 1;
  if (r == silent) ::usleep(1500 * 1000);  // busy elsewhere: no MPI call, so no answer
  WorkPtr barrier = comm_->barrier();
  if (r == 0) {
    EXPECT_EQ(barrier->wait(20 * kNanosPerMilli).code(), StatusCode::kTimeout);
    const std::string report = comm_->roll_call("a test asks", 500 * kNanosPerMilli);
    EXPECT_NE(report.find("roll call of " + std::to_string(w) + " ranks"), std::string::npos) << report;
    EXPECT_NE(report.find("never answered (ranks): " + std::to_string(silent) + " — hung, dead"), std::string::npos)
        << report;
    for (int peer = 1; peer < silent; ++peer) {
      EXPECT_NE(report.find("rank " + std::to_string(peer) + ": waiting in barrier on rank " + std::to_string(peer)),
                std::string::npos)
          << report;
    }
  }
  expect_ok(barrier, "barrier after the roll call");
}

// Regression guard: a Work dropped while pending must keep its buffers alive and its
// request progressing, or the late rank would hang or read freed memory.
TEST_F(MpiCommunicatorTest, DroppedPendingWorkStillCompletesForThePeers) {
  const int w = comm_->size(), r = comm_->rank(), late = w - 1;
  Tensor t = make(1024, DType::kF32, "t");
  for (int i = 0; i < 1024; ++i) t.data<float>()[i] = static_cast<float>(r + 1);
  Tensor go = make(1, DType::kI64, "go");
  go.data<std::int64_t>()[0] = 1;
  if (r == late) {
    expect_ok(comm_->recv(go, 0, 3), "recv go");
    expect_ok(comm_->all_reduce(t, ReduceOp::kSum), "late all_reduce");
    EXPECT_EQ(t.data<float>()[1023], static_cast<float>(w * (w + 1) / 2));
  } else {
    {
      WorkPtr work = comm_->all_reduce(t, ReduceOp::kSum);
      EXPECT_EQ(work->wait(10 * kNanosPerMilli).code(), StatusCode::kTimeout);
    }              // dropped while pending
    t = Tensor();  // the caller lets go of its tensor too
    release_late_rank(go, late, 3);
  }
  // Later operations progress the orphan and the group stays in step.
  expect_ok(comm_->barrier(), "barrier");
  Tensor u = make(2, DType::kI64, "u");
  u.data<std::int64_t>()[0] = r;
  u.data<std::int64_t>()[1] = 1;
  expect_ok(comm_->all_reduce(u, ReduceOp::kSum), "all_reduce after the orphan");
  EXPECT_EQ(u.data<std::int64_t>()[0], static_cast<std::int64_t>(w) * (w - 1) / 2);
  EXPECT_EQ(u.data<std::int64_t>()[1], w);
}

TEST_F(MpiCommunicatorTest, InPlaceReduceScatterAvgBf16MovesResultIntoOwnChunk) {
  const int w = comm_->size(), r = comm_->rank();
  const std::int64_t n = 9;
  Tensor buf = make(n * w, DType::kBF16, "buf");
  for (std::int64_t i = 0; i < n * w; ++i) buf.data<std::uint16_t>()[i] = float_to_bf16(static_cast<float>(4 * r + i));
  Tensor mine = *buf.narrow(n * r, n);
  expect_ok(comm_->reduce_scatter(mine, buf, ReduceOp::kAvg), "reduce_scatter avg in place");
  for (std::int64_t i = 0; i < n; ++i) {
    float sum = 0;
    for (int q = 0; q < w; ++q) sum += static_cast<float>(4 * q + r * n + i);
    EXPECT_NEAR(bf16_to_float(mine.data<std::uint16_t>()[i]), round_to_bf16(sum / static_cast<float>(w)), 0.5)
        << "i=" << i;
  }
}

TEST_F(MpiCommunicatorTest, LargeAllGatherAndReduceScatterTakeTheRendezvousPath) {
  const int w = comm_->size(), r = comm_->rank();
  const std::int64_t n = 1 << 20;  // 4 MiB per rank: beyond every eager limit
  Tensor in = make(n, DType::kF32, "in"), out = make(n * w, DType::kF32, "out");
  for (std::int64_t i = 0; i < n; ++i) in.data<float>()[i] = static_cast<float>(r);
  expect_ok(comm_->all_gather_into(out, in), "all_gather 4 MiB");
  for (int q = 0; q < w; ++q) ASSERT_EQ(out.data<float>()[q * n + n - 1], static_cast<float>(q));
  Tensor rs = make(n, DType::kF32, "rs");
  expect_ok(comm_->reduce_scatter(rs, out, ReduceOp::kSum), "reduce_scatter 4 MiB");
  EXPECT_EQ(rs.data<float>()[n / 2], static_cast<float>(w * r));
}

TEST_F(MpiCommunicatorTest, RecvOfAShorterMessageIsAnError) {
  const int r = comm_->rank();
  if (r == 0) {
    Tensor small = make(3, DType::kF32, "small");
    for (int i = 0; i < 3; ++i) small.data<float>()[i] = 1.0f;
    expect_ok(comm_->send(small, 1, 11), "send 3 elements");
  } else if (r == 1) {
    Tensor big = make(5, DType::kF32, "big");
    const Status s = comm_->recv(big, 0, 11)->wait(kLong);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
    EXPECT_NE(s.message().find("received 3 elements; expected 5"), std::string::npos) << s.message();
  }
  expect_ok(comm_->barrier(), "barrier");
}

TEST_F(MpiCommunicatorTest, BadTagAndPhantomTensorAreRejectedLocally) {
  const int w = comm_->size(), r = comm_->rank();
  Tensor t = make(2, DType::kF32, "t");
  Status s = comm_->send(t, (r + 1) % w, -1)->wait(kLong);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("tag -1"), std::string::npos) << s.message();
  int* tag_ub = nullptr;
  int flag = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &flag);
  ASSERT_TRUE(flag && tag_ub != nullptr);
  if (*tag_ub < std::numeric_limits<int>::max()) {
    s = comm_->recv(t, (r + 1) % w, *tag_ub + 1)->wait(kLong);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  }

  auto phantom_storage =
      std::make_shared<Storage>(nullptr, 0, 64, MemoryCategory::kCommBuffers, "phantom", "cpu", [](Storage&) {});
  auto phantom = Tensor::view_of(phantom_storage, DType::kF32, {16}, 0, "phantom");
  ASSERT_THAT(phantom, IsOk());
  s = comm_->all_reduce(*phantom, ReduceOp::kSum)->wait(kLong);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("phantom"), std::string::npos) << s.message();
  expect_ok(comm_->barrier(), "barrier after local errors");
}

// On ranks other than 0: print only failures, prefixed with the rank.
}  // namespace
}  // namespace shardlab::runtime::comm::mpi

int main(int argc, char** argv) {
  using shardlab::runtime::comm::mpi::MpiEnvironment;
  auto env = MpiEnvironment::initialize(&argc, &argv);
  if (!env.is_ok()) {
    std::fprintf(stderr, "comm_mpi_test: %s\n", env.status().to_string().c_str());
    return 3;
  }
  ::testing::InitGoogleTest(&argc, argv);
  shardlab::testlib::print_only_failures_off_rank_0((*env)->world_rank());
  const int worst = shardlab::testlib::worst_over_ranks(RUN_ALL_TESTS(), "comm_mpi_test");
  env->reset();
  return worst;
}
