// FSDP runtime behaviour that is not a random property: device_id, sync_module_states,
// CPU offload, state-machine misuse, memory release — each pinned by a regression test.
#include "runtime/fsdp/fully_sharded.h"

#include <gtest/gtest.h>
#include <atomic>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>

#include "runtime/fsdp/checkpoint.h"
#include "runtime/io/safetensors.h"

#include "runtime/device/cpu/device.h"
#include "runtime/train/fsdp_train.h"
#include "sim/engine/world.h"
#include "sim/models/device/profiles.h"
#include "testing/sim_world.h"
#include "testing/status_matchers.h"

using shardlab::testlib::IsOk;

namespace shardlab::runtime::fsdp {
namespace {

std::vector<model::ParamSpec> specs() {
  return {{"a.weight", {3, 3}, true, 0, "Linear"},
          {"a.bias", {3}, true, 0, "Linear"},
          {"b.weight", {2, 3}, true, 1, "Linear"}};
}

// Runs `body` on `world` sim ranks with a fresh FullyShardedModel per rank.
std::vector<sim::RankResult> with_fsdp(int world, FsdpOptions options,
                                       const std::function<Status(sim::RankContext&, FullyShardedModel&)>& body,
                                       float init_offset_per_rank = 0.0f) {
  sim::WorldOptions o;
  o.world_size = world;
  sim::World w(o);
  return w.run([&](sim::RankContext& ctx) -> Status {
    SHARDLAB_ASSIGN_OR_RETURN(Tensor init, ctx.device.empty({18}, DType::kF32, MemoryCategory::kOther, "init"));
    for (int i = 0; i < 18; ++i) init.data<float>()[i] = static_cast<float>(i) + init_offset_per_rank * ctx.rank;
    SHARDLAB_ASSIGN_OR_RETURN(
        auto m, FullyShardedModel::create(ctx.comm, ctx.device, specs(), WrapPlan::per_layer(2), options, init));
    return body(ctx, *m);
  });
}

// Module buffers: an fp32 statistic whose values pin bf16 rounding (round to nearest,
// ties to even) and an int64 position-id buffer whose values fp32 could not hold.
constexpr std::uint32_t kStatBits[4] = {
    0x3F808000u,  // 1 + 2^-8: a tie, rounds down to the even 1.0 (bf16 0x3F80)
    0x3F818000u,  // 1 + 3·2^-8: a tie, rounds up to the even 1 + 2^-6 (bf16 0x3F82)
    0x3F808001u,  // just above the tie: rounds up (bf16 0x3F81)
    0xC0490FDBu,  // -π: rounds to -3.140625 (bf16 0xC049)
};
constexpr std::uint16_t kStatBf16[4] = {0x3F80, 0x3F82, 0x3F81, 0xC049};
constexpr std::int64_t kPositionIds[3] = {0, (std::int64_t{1} << 60) + 1, -7};

std::vector<model::BufferSpec> buffer_specs() {
  return {{"bn.running_mean", {2, 2}, DType::kF32, 0}, {"embeddings.position_ids", {1, 3}, DType::kI64, 1}};
}

// Rank r's initial buffers: the values above, plus r·1000 everywhere (so ranks differ).
Result<std::vector<Tensor>> buffer_init(device::Device& dev, int rank) {
  SHARDLAB_ASSIGN_OR_RETURN(Tensor stat, dev.empty({2, 2}, DType::kF32, MemoryCategory::kOther, "stat"));
  SHARDLAB_ASSIGN_OR_RETURN(Tensor ids, dev.empty({1, 3}, DType::kI64, MemoryCategory::kOther, "ids"));
  for (int i = 0; i < 4; ++i) stat.data<float>()[i] = bits_float(kStatBits[i]) + 1000.0f * static_cast<float>(rank);
  for (int i = 0; i < 3; ++i) ids.data<std::int64_t>()[i] = kPositionIds[i] + 1000 * rank;
  return std::vector<Tensor>{stat, ids};
}

Result<std::unique_ptr<FullyShardedModel>> create_with_buffers(sim::RankContext& ctx, const FsdpOptions& options,
                                                               int init_rank) {
  SHARDLAB_ASSIGN_OR_RETURN(Tensor init, ctx.device.zeros({18}, DType::kF32, MemoryCategory::kOther, "init"));
  SHARDLAB_ASSIGN_OR_RETURN(std::vector<Tensor> buffers, buffer_init(ctx.device, init_rank));
  return FullyShardedModel::create(ctx.comm, ctx.device, specs(), WrapPlan::per_layer(2), options, init, buffer_specs(),
                                   buffers);
}

std::vector<std::uint16_t> bf16_bits(const Tensor& t) {
  std::vector<std::uint16_t> v(static_cast<std::size_t>(t.numel()));
  std::memcpy(v.data(), t.bytes(), v.size() * 2);
  return v;
}

std::vector<std::int64_t> int64_values(const Tensor& t) {
  return {t.data<std::int64_t>(), t.data<std::int64_t>() + t.numel()};
}

void expect_ok(const std::vector<sim::RankResult>& results) { EXPECT_THAT(testlib::all_ranks_ok(results), IsOk()); }

TEST(FsdpBuffers, BufferDtypeBf16RoundsFloatingBuffersToNearestEvenAndLeavesInt64Alone) {
  FsdpOptions o;
  o.buffer_dtype = DType::kBF16;
  sim::WorldOptions wo;
  wo.world_size = 2;
  sim::World w(wo);
  expect_ok(w.run([&](sim::RankContext& ctx) -> Status {
    SHARDLAB_ASSIGN_OR_RETURN(auto m, create_with_buffers(ctx, o, 0));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor stat, m->buffer(0));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor ids, m->buffer(1));
    EXPECT_EQ(stat.dtype(), DType::kBF16);
    EXPECT_EQ(stat.shape(), (Shape{2, 2}));
    EXPECT_EQ(bf16_bits(stat), std::vector<std::uint16_t>(std::begin(kStatBf16), std::end(kStatBf16)));
    EXPECT_EQ(ids.dtype(), DType::kI64);
    EXPECT_EQ(int64_values(ids), std::vector<std::int64_t>(std::begin(kPositionIds), std::end(kPositionIds)));
    // The state-dict view is in the declared dtype: the rounded values, widened exactly.
    SHARDLAB_ASSIGN_OR_RETURN(Tensor saved, m->buffer_state(0));
    EXPECT_EQ(saved.dtype(), DType::kF32);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(float_bits(saved.data<float>()[i]), std::uint32_t{kStatBf16[i]} << 16) << i;
    SHARDLAB_ASSIGN_OR_RETURN(Tensor saved_ids, m->buffer_state(1));
    EXPECT_EQ(saved_ids.dtype(), DType::kI64);
    EXPECT_EQ(int64_values(saved_ids), int64_values(ids));
    EXPECT_EQ(m->buffer(2).status().code(), StatusCode::kInvalidArgument);
    return Status::ok();
  }));
}

TEST(FsdpBuffers, WithoutBufferDtypeEveryBufferKeepsItsDeclaredDtypeAndValue) {
  sim::WorldOptions wo;
  wo.world_size = 2;
  sim::World w(wo);
  expect_ok(w.run([&](sim::RankContext& ctx) -> Status {
    SHARDLAB_ASSIGN_OR_RETURN(auto m, create_with_buffers(ctx, FsdpOptions{}, 0));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor stat, m->buffer(0));
    EXPECT_EQ(stat.dtype(), DType::kF32);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(float_bits(stat.data<float>()[i]), kStatBits[i]) << i;
    SHARDLAB_ASSIGN_OR_RETURN(Tensor ids, m->buffer(1));
    EXPECT_EQ(ids.dtype(), DType::kI64);
    // Writes through buffer() persist (running statistics).
    stat.data<float>()[0] = 42.0f;
    SHARDLAB_ASSIGN_OR_RETURN(Tensor again, m->buffer(0));
    EXPECT_EQ(again.data<float>()[0], 42.0f);
    return Status::ok();
  }));
}

TEST(FsdpBuffers, SyncModuleStatesBroadcastsRankZerosBuffers) {
  for (bool sync : {false, true}) {
    FsdpOptions o;
    o.sync_module_states = sync;
    o.buffer_dtype = DType::kBF16;
    sim::WorldOptions wo;
    wo.world_size = 3;
    sim::World w(wo);
    std::vector<std::vector<std::uint16_t>> stats(3);
    std::vector<std::vector<std::int64_t>> ids(3);
    expect_ok(w.run([&](sim::RankContext& ctx) -> Status {
      SHARDLAB_ASSIGN_OR_RETURN(auto m, create_with_buffers(ctx, o, ctx.rank));
      SHARDLAB_ASSIGN_OR_RETURN(Tensor stat, m->buffer(0));
      SHARDLAB_ASSIGN_OR_RETURN(Tensor id, m->buffer(1));
      stats[static_cast<std::size_t>(ctx.rank)] = bf16_bits(stat);
      ids[static_cast<std::size_t>(ctx.rank)] = int64_values(id);
      return Status::ok();
    }));
    const std::vector<std::int64_t> rank0_ids(std::begin(kPositionIds), std::end(kPositionIds));
    EXPECT_EQ(stats[0], std::vector<std::uint16_t>(std::begin(kStatBf16), std::end(kStatBf16)));
    for (int r = 1; r < 3; ++r) {
      if (sync) {
        EXPECT_EQ(stats[static_cast<std::size_t>(r)], stats[0]) << "rank " << r;
        EXPECT_EQ(ids[static_cast<std::size_t>(r)], rank0_ids) << "rank " << r;
      } else {
        EXPECT_NE(stats[static_cast<std::size_t>(r)], stats[0]) << "rank " << r;
        EXPECT_EQ(ids[static_cast<std::size_t>(r)][0], 1000 * r) << "rank " << r;
      }
    }
  }
}

TEST(FsdpBuffers, BadBufferDtypesAndInitialValuesAreRejectedByName) {
  sim::WorldOptions wo;
  wo.world_size = 1;
  sim::World w(wo);
  expect_ok(w.run([&](sim::RankContext& ctx) -> Status {
    FsdpOptions o;
    o.buffer_dtype = DType::kI64;
    auto bad_option = create_with_buffers(ctx, o, 0);
    EXPECT_EQ(bad_option.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(bad_option.status().message().find("buffer_dtype is int64; allowed: fp32, bf16"), std::string::npos)
        << bad_option.status().message();
    SHARDLAB_ASSIGN_OR_RETURN(Tensor init, ctx.device.zeros({18}, DType::kF32, MemoryCategory::kOther, "init"));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor wrong, ctx.device.zeros({4}, DType::kBF16, MemoryCategory::kOther, "wrong"));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor ids, ctx.device.zeros({3}, DType::kI64, MemoryCategory::kOther, "ids"));
    auto bad_init = FullyShardedModel::create(ctx.comm, ctx.device, specs(), WrapPlan::per_layer(2), FsdpOptions{},
                                              init, buffer_specs(), {wrong, ids});
    EXPECT_EQ(bad_init.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(
        bad_init.status().message().find("initial value of buffer 'bn.running_mean' must be fp32 with 4 elements"),
        std::string::npos)
        << bad_init.status().message();
    auto clash = FullyShardedModel::create(ctx.comm, ctx.device, specs(), WrapPlan::per_layer(2), FsdpOptions{}, init,
                                           {{"a.bias", {3}, DType::kI64, 0}}, {ids});
    EXPECT_NE(clash.status().message().find("buffer 'a.bias' has the name of another parameter"), std::string::npos)
        << clash.status().message();
    auto fp16 = FullyShardedModel::create(ctx.comm, ctx.device, specs(), WrapPlan::per_layer(2), FsdpOptions{}, init,
                                          {{"h", {4}, DType::kF16, 0}}, {wrong});
    EXPECT_NE(fp16.status().message().find("buffer 'h' has dtype fp16; allowed: fp32, bf16, int64"), std::string::npos)
        << fp16.status().message();
    return Status::ok();
  }));
}

// FULL and SHARDED checkpoints hold buffers in their declared dtype; LOCAL holds them as
// they are (bf16). Loading into a model with other buffer values restores the saved ones
// in buffer_dtype, at a different world size for FULL and SHARDED.
TEST(FsdpBuffers, CheckpointsSaveTheDeclaredDtypeAndLoadingCastsToBufferDtype) {
  for (StateDictType type : {StateDictType::kFull, StateDictType::kSharded, StateDictType::kLocal}) {
    SCOPED_TRACE(std::string(state_dict_type_name(type)));
    const std::string dir =
        (std::filesystem::path(::testing::TempDir()) / ("fsdp_buffers_" + std::string(state_dict_type_name(type))))
            .string();
    std::filesystem::remove_all(dir);
    FsdpOptions o;
    o.buffer_dtype = DType::kBF16;
    {
      sim::WorldOptions wo;
      wo.world_size = 2;
      sim::World w(wo);
      expect_ok(w.run([&](sim::RankContext& ctx) -> Status {
        SHARDLAB_ASSIGN_OR_RETURN(auto m, create_with_buffers(ctx, o, 0));
        CheckpointOptions co;
        co.type = type;
        return save_checkpoint(*m, dir, 5, co);
      }));
    }
    if (type == StateDictType::kFull) {
      auto f = io::read_safetensors(dir + "/step-00000005/model.safetensors");
      ASSERT_THAT(f, IsOk());
      const io::StoredTensor* stat = f->find("bn.running_mean");
      ASSERT_NE(stat, nullptr);
      EXPECT_EQ(stat->dtype, DType::kF32);
      EXPECT_EQ(stat->shape, (Shape{2, 2}));
      std::uint32_t first = 0;
      std::memcpy(&first, stat->data.data(), 4);
      EXPECT_EQ(first, std::uint32_t{kStatBf16[0]} << 16);
      ASSERT_NE(f->find("embeddings.position_ids"), nullptr);
      EXPECT_EQ(f->find("embeddings.position_ids")->dtype, DType::kI64);
    }
    const int load_world = type == StateDictType::kLocal ? 2 : 3;
    sim::WorldOptions wo;
    wo.world_size = load_world;
    sim::World w(wo);
    expect_ok(w.run([&](sim::RankContext& ctx) -> Status {
      SHARDLAB_ASSIGN_OR_RETURN(auto m, create_with_buffers(ctx, o, 1));  // other values before the load
      SHARDLAB_ASSIGN_OR_RETURN(std::int64_t step, load_checkpoint(*m, dir));
      EXPECT_EQ(step, 5);
      SHARDLAB_ASSIGN_OR_RETURN(Tensor stat, m->buffer(0));
      SHARDLAB_ASSIGN_OR_RETURN(Tensor ids, m->buffer(1));
      EXPECT_EQ(stat.dtype(), DType::kBF16);
      EXPECT_EQ(bf16_bits(stat), std::vector<std::uint16_t>(std::begin(kStatBf16), std::end(kStatBf16)));
      EXPECT_EQ(int64_values(ids), std::vector<std::int64_t>(std::begin(kPositionIds), std::end(kPositionIds)));
      return Status::ok();
    }));
    std::filesystem::remove_all(dir);
  }
}

TEST(FsdpBuffers, LoadingACheckpointWithoutTheBufferNamesIt) {
  const std::string dir = (std::filesystem::path(::testing::TempDir()) / "fsdp_buffers_missing").string();
  std::filesystem::remove_all(dir);
  expect_ok(with_fsdp(2, FsdpOptions{}, [&](sim::RankContext&, FullyShardedModel& m) {
    CheckpointOptions co;
    co.type = StateDictType::kFull;
    return save_checkpoint(m, dir, 1, co);
  }));
  sim::WorldOptions wo;
  wo.world_size = 2;
  sim::World w(wo);
  expect_ok(w.run([&](sim::RankContext& ctx) -> Status {
    SHARDLAB_ASSIGN_OR_RETURN(auto m, create_with_buffers(ctx, FsdpOptions{}, 0));
    const auto loaded = load_checkpoint(*m, dir);
    EXPECT_EQ(loaded.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(loaded.status().message().find("buffer 'bn.running_mean' is missing"), std::string::npos)
        << loaded.status().message();
    return Status::ok();
  }));
  std::filesystem::remove_all(dir);
}

TEST(FsdpDeviceId, AnIndexLessDeviceResolvesToTheCurrentOne) {
  FsdpOptions o;
  o.device_id = "sim";
  for (const auto& r : with_fsdp(4, o, [](sim::RankContext&, FullyShardedModel&) { return Status::ok(); })) {
    EXPECT_THAT(r.status, IsOk());
  }
  auto id = resolve_device_id("hpu", {"hpu", 0}, 4);
  ASSERT_TRUE(id.is_ok());
  EXPECT_EQ(id->to_string(), "hpu:0");
}

TEST(FsdpDeviceId, AMismatchNamesBothDevicesAndTheRank) {
  FsdpOptions o;
  o.device_id = "sim:2";
  const auto results = with_fsdp(4, o, [](sim::RankContext&, FullyShardedModel&) { return Status::ok(); });
  EXPECT_THAT(results[2].status, IsOk());
  const Status& s = results[3].status;
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("Inconsistent compute device and `device_id` on rank 3: sim:3 vs sim:2"),
            std::string::npos)
      << s.message();
  // The Gaudi seed bug: "hpu:0 vs hpu" must never be reported for the same card.
  auto wrong_type = resolve_device_id("hpu", {"sim", 0}, 0);
  EXPECT_EQ(wrong_type.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(wrong_type.status().message().find("on rank 0: sim:0 vs hpu (device_id 'hpu' has no index)"),
            std::string::npos)
      << wrong_type.status().message();
  EXPECT_EQ(resolve_device_id("hpu:x", {"hpu", 0}, 0).status().code(), StatusCode::kInvalidArgument);
}

TEST(FsdpSyncModuleStates, BroadcastsRankZerosInitialValues) {
  for (bool sync : {false, true}) {
    FsdpOptions o;
    o.sync_module_states = sync;
    std::vector<std::vector<float>> full(3);
    const auto results = with_fsdp(
        3, o,
        [&](sim::RankContext& ctx, FullyShardedModel& m) -> Status {
          SHARDLAB_ASSIGN_OR_RETURN(Tensor out, ctx.device.empty({18}, DType::kF32, MemoryCategory::kOther, "out"));
          SHARDLAB_RETURN_IF_ERROR(m.gather_full_params(out));
          full[static_cast<std::size_t>(ctx.rank)].assign(out.data<float>(), out.data<float>() + 18);
          return Status::ok();
        },
        /*init_offset_per_rank=*/100.0f);
    for (const auto& r : results) ASSERT_THAT(r.status, IsOk());
    if (sync) {
      for (const auto& f : full) {
        for (int i = 0; i < 18; ++i) EXPECT_EQ(f[static_cast<std::size_t>(i)], static_cast<float>(i));
      }
    } else {
      // Without sync each rank keeps its own values for the pieces it owns: inconsistent.
      EXPECT_NE(full[0], std::vector<float>(18, 0.0f));
      bool any_from_other_rank = false;
      for (float v : full[0]) any_from_other_rank |= v >= 100.0f;
      EXPECT_TRUE(any_from_other_rank);
    }
  }
}

TEST(FsdpStateMachine, UsingAParameterOutsideItsUnitsHooksIsAnError) {
  const auto results = with_fsdp(2, FsdpOptions{}, [](sim::RankContext&, FullyShardedModel& m) -> Status {
    auto p = m.param(0);
    if (p.status().code() != StatusCode::kFailedPrecondition) return Status::internal("expected FAILED_PRECONDITION");
    if (p.status().message().find("'a.weight' was used while unit 0 is sharded") == std::string::npos) {
      return Status::internal("message: " + p.status().message());
    }
    if (m.pre_forward(0).code() != StatusCode::kFailedPrecondition) return Status::internal("forward before begin");
    if (m.end_iteration().code() != StatusCode::kFailedPrecondition) return Status::internal("end before backward");
    return Status::ok();
  });
  for (const auto& r : results) EXPECT_THAT(r.status, IsOk());
}

// A communicator whose all-gathers behave like an accelerator's: wait_on_compute only
// orders the compute stream (here: completes the inner operation, so the data is there)
// and the Work still reports "not completed" to the host until wait() is called. Every
// call lands in `log`; `fail_wait` makes the host wait of all-gathers fail.
class StreamOrderedComm final : public comm::Communicator {
 public:
  StreamOrderedComm(comm::Communicator& inner, std::vector<std::string>& log, bool fail_wait)
      : inner_(inner), log_(log), fail_wait_(fail_wait) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  const std::string& group_name() const override { return inner_.group_name(); }
  comm::WorkPtr all_gather_into(const Tensor& output, const Tensor& input) override {
    log_.push_back("all_gather");
    return std::make_shared<DeviceWork>(inner_.all_gather_into(output, input), log_, fail_wait_);
  }
  comm::WorkPtr reduce_scatter(const Tensor& o, const Tensor& i, comm::ReduceOp op) override {
    return inner_.reduce_scatter(o, i, op);
  }
  comm::WorkPtr all_reduce(const Tensor& t, comm::ReduceOp op) override { return inner_.all_reduce(t, op); }
  comm::WorkPtr broadcast(const Tensor& t, int root) override { return inner_.broadcast(t, root); }
  comm::WorkPtr barrier() override { return inner_.barrier(); }
  comm::WorkPtr send(const Tensor& t, int peer, int tag) override { return inner_.send(t, peer, tag); }
  comm::WorkPtr recv(const Tensor& t, int peer, int tag) override { return inner_.recv(t, peer, tag); }
  Result<std::unique_ptr<comm::Communicator>> split(int color, int key) override { return inner_.split(color, key); }

 private:
  class DeviceWork final : public comm::Work {
   public:
    DeviceWork(comm::WorkPtr inner, std::vector<std::string>& log, bool fail)
        : inner_(std::move(inner)), log_(log), fail_(fail) {}
    Status wait_on_compute(Nanos timeout) override {
      log_.push_back("wait_on_compute");
      return inner_->wait(timeout);
    }
    Status wait(Nanos timeout) override {
      log_.push_back("wait");
      waited_ = true;
      const Status s = inner_->wait(timeout);
      return s.is_ok() && fail_ ? Status::timeout("all_gather: the peer never arrived") : s;
    }
    bool is_completed() override { return waited_; }

   private:
    comm::WorkPtr inner_;
    std::vector<std::string>& log_;
    bool fail_;
    bool waited_ = false;
  };
  comm::Communicator& inner_;
  std::vector<std::string>& log_;
  bool fail_wait_;
};

// NOTE [Unshard wait on the compute stream]: a unit's parameters are usable after
// wait_on_compute alone; the host waits for the all-gather only when the unit reshards,
// and a failure found there stops the iteration with the unit named.
TEST(FsdpUnshardWait, TheComputeStreamWaitsAndTheHostWaitsOnlyAtReshard) {
  for (const bool fail : {false, true}) {
    SCOPED_TRACE(fail ? "host wait fails" : "host wait succeeds");
    std::vector<std::string> log;
    const auto results = with_fsdp(2, FsdpOptions{}, [&](sim::RankContext& ctx, FullyShardedModel&) -> Status {
      std::vector<std::string> mine;
      StreamOrderedComm comm(ctx.comm, mine, fail);
      SHARDLAB_ASSIGN_OR_RETURN(Tensor init, ctx.device.empty({18}, DType::kF32, MemoryCategory::kOther, "init"));
      for (int i = 0; i < 18; ++i) init.data<float>()[i] = static_cast<float>(i);
      SHARDLAB_ASSIGN_OR_RETURN(
          auto m, FullyShardedModel::create(comm, ctx.device, specs(), WrapPlan::per_layer(2), FsdpOptions{}, init));
      mine.clear();
      SHARDLAB_RETURN_IF_ERROR(m->begin_iteration());
      SHARDLAB_RETURN_IF_ERROR(m->pre_forward(0));
      mine.push_back("pre_forward");
      SHARDLAB_ASSIGN_OR_RETURN(Tensor w, m->param(0));
      if (w.data<float>()[4] != 4.0f) return Status::internal("a.weight[1][1] is not the gathered value");
      mine.push_back("param");
      const Status post = m->post_forward(0);
      if (ctx.rank == 0) log = mine;
      if (!fail) return post;
      if (post.code() != StatusCode::kTimeout || post.message().find("FSDP unshard of unit 0") == std::string::npos) {
        return Status::internal("post_forward returned " + post.to_string());
      }
      return Status::ok();
    });
    expect_ok(results);
    EXPECT_EQ(log, (std::vector<std::string>{"all_gather", "wait_on_compute", "pre_forward", "param", "wait"}));
  }
}

train::FsdpTrainOptions small_run() {
  train::FsdpTrainOptions o;
  o.model.num_hidden_layers = 2;
  o.global_batch = 16;
  o.steps = 3;
  o.optimizer.kind = optim::OptimizerConfig::Kind::kAdamW;
  o.optimizer.lr = 0.01f;
  return o;
}

// FSDP2's explicit prefetch: N units ahead in forward and in backward are all-gathered
// together (no rate limiter), with the same bits as the implicit prefetch; FSDP1 refuses it.
TEST(FsdpExplicitPrefetch, PrefetchesNUnitsAheadWithTheSameBits) {
  std::vector<std::vector<float>> params;
  for (const int units : {0, 1, 3}) {
    sim::WorldOptions wo;
    wo.world_size = 2;
    sim::World w(wo);
    train::FsdpTrainOptions o = small_run();
    o.model.num_hidden_layers = 5;
    o.fsdp.version = 2;
    o.fsdp.forward_prefetch_units = units;
    o.fsdp.backward_prefetch_units = units;
    std::vector<train::FsdpTrainResult> got(2);
    const auto results = w.run([&](sim::RankContext& ctx) -> Status {
      SHARDLAB_ASSIGN_OR_RETURN(got[static_cast<std::size_t>(ctx.rank)],
                                train::train_fsdp(ctx.comm, ctx.device, ctx.clock, o));
      return Status::ok();
    });
    for (const auto& r : results) ASSERT_THAT(r.status, IsOk());
    // Implicit (BACKWARD_PRE): a unit and the next; explicit N: a unit and N more.
    EXPECT_EQ(got[0].max_live_unsharded, units == 0 ? 2 : 1 + units) << units;
    params.push_back(got[0].final_params);
  }
  EXPECT_EQ(params[1], params[0]);
  EXPECT_EQ(params[2], params[0]);
  sim::WorldOptions wo;
  wo.world_size = 2;
  sim::World w(wo);
  train::FsdpTrainOptions o = small_run();
  o.fsdp.forward_prefetch_units = 2;
  const auto results = w.run(
      [&](sim::RankContext& ctx) -> Status { return train::train_fsdp(ctx.comm, ctx.device, ctx.clock, o).status(); });
  EXPECT_THAT(results[0].status.message(), ::testing::HasSubstr("needs FSDP2"));
}

// Regression: memory not freed after backward. After every iteration the compute device
// holds no unsharded parameters or gradients; with CPU offload it holds no shards either,
// and the results are bitwise those of the run without offload.
TEST(FsdpMemory, UnshardedBuffersAreFreedAndCpuOffloadKeepsShardsOnTheHost) {
  std::vector<float> plain_params, offload_params;
  std::int64_t plain_param_peak = 0, offload_param_peak = 0, host_optimizer_bytes = 0;
  for (bool offload : {false, true}) {
    sim::WorldOptions wo;
    wo.world_size = 4;
    sim::World w(wo);
    const auto results = w.run([&](sim::RankContext& ctx) -> Status {
      device::cpu::CpuDevice host({"cpu", ctx.rank});
      train::FsdpTrainOptions o = small_run();
      if (offload) o.fsdp.offload_device = &host;
      SHARDLAB_ASSIGN_OR_RETURN(train::FsdpTrainResult r, train::train_fsdp(ctx.comm, ctx.device, ctx.clock, o));
      const MemoryStats now = ctx.device.memory().stats();
      if (now.current[static_cast<int>(MemoryCategory::kGradients)] != 0)
        return Status::internal("gradients not freed");
      if (offload && now.current[static_cast<int>(MemoryCategory::kParameters)] != 0) {
        return Status::internal("parameters left on the compute device with offload");
      }
      if (ctx.rank == 0) {
        (offload ? offload_params : plain_params) = r.final_params;
        (offload ? offload_param_peak : plain_param_peak) =
            r.memory.peak[static_cast<int>(MemoryCategory::kParameters)];
        if (offload)
          host_optimizer_bytes = host.memory().stats().peak[static_cast<int>(MemoryCategory::kOptimizerState)];
      }
      return Status::ok();
    });
    for (const auto& r : results) ASSERT_THAT(r.status, IsOk());
  }
  EXPECT_EQ(plain_params, offload_params);
  EXPECT_LT(offload_param_peak, plain_param_peak);
  EXPECT_GT(host_optimizer_bytes, 0);
}

// Initial parameters handed over to train_fsdp are freed once every rank has built its
// model, before the first step (FsdpTrainOptions::initial_params); a caller that keeps its
// reference keeps them.
TEST(FsdpMemory, GivenInitialParametersAreFreedBeforeTheFirstStep) {
  for (bool keep : {false, true}) {
    train::FsdpTrainOptions o = small_run();
    o.steps = 1;
    auto init = std::make_shared<std::vector<float>>(
        static_cast<std::size_t>(model::total_numel(model::Mlp(o.model).params())), 0.01f);
    std::weak_ptr<const std::vector<float>> watch = init;
    std::vector<train::FsdpTrainOptions> per_rank(2, o);
    for (auto& r : per_rank) r.initial_params = init;
    std::shared_ptr<const std::vector<float>> kept = keep ? init : nullptr;
    init.reset();
    std::atomic<int> alive_at_step{0};
    sim::WorldOptions wo;
    wo.world_size = 2;
    sim::World w(wo);
    expect_ok(w.run([&](sim::RankContext& ctx) -> Status {
      train::FsdpTrainOptions mine = std::move(per_rank[static_cast<std::size_t>(ctx.rank)]);
      // Every rank has built its model once its first collective of the step is issued;
      // checked at the step's end, after the step's collectives.
      mine.on_marker = [&](train::TrainMarker m, int) {
        if (m == train::TrainMarker::kStepEnd && !watch.expired()) ++alive_at_step;
      };
      return train::train_fsdp(ctx.comm, ctx.device, ctx.clock, std::move(mine)).status();
    }));
    EXPECT_EQ(alive_at_step.load(), keep ? 2 : 0) << (keep ? "kept by the caller" : "handed over");
  }
}

// NO_SHARD computes each unit's gradient in its gradient shard (the whole unit) and
// all-reduces it there, as PyTorch does with the flat parameter's .grad: the device never
// holds a second copy of the gradients, and the parameters are bitwise FULL_SHARD's, with
// and without micro-batches accumulated under no_sync.
TEST(FsdpMemory, NoShardReducesInTheGradientShard) {
  for (int accumulation : {1, 2}) {
    std::vector<float> final_params[2];
    std::int64_t grad_peak = 0, grad_shards = 0;
    for (ShardingStrategy strategy : {ShardingStrategy::kFullShard, ShardingStrategy::kNoShard}) {
      sim::WorldOptions wo;
      wo.world_size = 4;
      sim::World w(wo);
      const bool no_shard = strategy == ShardingStrategy::kNoShard;
      expect_ok(w.run([&](sim::RankContext& ctx) -> Status {
        train::FsdpTrainOptions o = small_run();
        o.fsdp.strategy = strategy;
        o.grad_accumulation = accumulation;
        SHARDLAB_ASSIGN_OR_RETURN(train::FsdpTrainResult r, train::train_fsdp(ctx.comm, ctx.device, ctx.clock, o));
        if (ctx.rank == 0) {
          final_params[no_shard ? 1 : 0] = r.final_params;
          if (no_shard) {
            grad_peak = r.memory.peak[static_cast<int>(MemoryCategory::kGradients)];
            grad_shards = 4 * static_cast<std::int64_t>(r.final_params.size());
          }
        }
        return Status::ok();
      }));
    }
    EXPECT_EQ(final_params[0], final_params[1]) << "grad_accumulation " << accumulation;
    EXPECT_FALSE(final_params[1].empty());
    // One fp32 gradient per parameter (the MLP's units need no alignment padding).
    EXPECT_EQ(grad_peak, grad_shards) << "grad_accumulation " << accumulation;
  }
}

// NOTE [Initialization unit by unit]: a model built on the host moves to the device one
// unit at a time, so the device's parameter peak during create() is the largest of
// (shards made so far + the unit's moved parameters + its padded flat parameter), never
// the whole model; and sync_module_states still gives every rank rank 0's values.
TEST(FsdpMemory, InitializationMovesOneUnitAtATime) {
  std::vector<model::ParamSpec> layers;
  for (int l = 0; l < 4; ++l) {
    layers.push_back({"l" + std::to_string(l) + ".weight", {40, 40}, true, l, "Linear"});
    layers.push_back({"l" + std::to_string(l) + ".bias", {40}, true, l, "Linear"});
  }
  const std::int64_t total = 4 * (40 * 40 + 40);
  FsdpOptions o;
  o.sync_module_states = true;
  sim::WorldOptions wo;
  wo.world_size = 4;
  sim::World w(wo);
  expect_ok(w.run([&](sim::RankContext& ctx) -> Status {
    device::cpu::CpuDevice host({"cpu", ctx.rank});
    SHARDLAB_ASSIGN_OR_RETURN(Tensor init, host.empty({total}, DType::kF32, MemoryCategory::kParameters, "init"));
    for (std::int64_t i = 0; i < total; ++i) init.data<float>()[i] = static_cast<float>(i + 100000 * ctx.rank);
    SHARDLAB_ASSIGN_OR_RETURN(auto m,
                              FullyShardedModel::create(ctx.comm, ctx.device, layers, WrapPlan::per_layer(4), o, init));
    std::int64_t expected = 0, shards = 0;
    for (const FlatParameter& u : m->units()) {
      std::int64_t moved = 0;
      for (const LayoutParam& p : u.layout.params()) moved += p.numel;
      expected = std::max(expected, 4 * (shards + moved + u.layout.total_numel()));
      shards += u.layout.shard_numel();
    }
    const MemoryStats s = ctx.device.memory().stats();
    const std::int64_t peak = s.peak[static_cast<int>(MemoryCategory::kParameters)];
    EXPECT_EQ(peak, expected) << "rank " << ctx.rank;
    EXPECT_LT(s.peak_total, 4 * total) << "rank " << ctx.rank << ": the whole model was on the device";
    EXPECT_EQ(s.current[static_cast<int>(MemoryCategory::kParameters)], 4 * shards);
    // Rank 0's values everywhere: each shard piece is rank 0's init at the parameter's offset.
    for (const FlatParameter& u : m->units()) {
      for (const ShardPiece& piece : u.layout.shard(ctx.rank).pieces) {
        const std::int64_t at =
            m->model_offset(u.param_indices[static_cast<std::size_t>(piece.param)]) + piece.param_begin;
        for (std::int64_t i = 0; i < piece.numel(); ++i) {
          const float got = u.shard.data<float>()[piece.offset_in_shard + i];
          if (got != static_cast<float>(at + i)) {
            return Status::internal("rank " + std::to_string(ctx.rank) + " unit " + std::to_string(u.unit) +
                                    ": shard element " + std::to_string(piece.offset_in_shard + i) + " is " +
                                    std::to_string(got) + ", expected rank 0's " + std::to_string(at + i));
          }
        }
      }
    }
    return Status::ok();
  }));
}

// The trainer builds the model on the host (NOTE [Initialization unit by unit]): a model
// of 16 equal Linear units on 8 ranks trains with a device peak below the size of its fp32
// parameters alone (the whole model and a scratch copy are never on the device at once).
TEST(FsdpMemory, TrainerPeakStaysBelowTheFullModel) {
  train::FsdpTrainOptions o = small_run();
  o.model.input_dim = 64;
  o.model.hidden_dim = 64;
  o.model.num_hidden_layers = 16;
  o.wrap = train::WrapPolicy::kPerLayer;
  o.fsdp.sync_module_states = true;
  sim::WorldOptions wo;
  wo.world_size = 8;
  sim::World w(wo);
  const std::int64_t model_bytes = 4 * model::total_numel(model::Mlp(o.model).params());
  const auto results = w.run([&](sim::RankContext& ctx) -> Status {
    SHARDLAB_ASSIGN_OR_RETURN(train::FsdpTrainResult r, train::train_fsdp(ctx.comm, ctx.device, ctx.clock, o));
    if (r.memory.peak_total >= model_bytes) {
      return Status::internal("rank " + std::to_string(ctx.rank) + ": device peak " +
                              format_bytes(r.memory.peak_total) + " >= the model's fp32 parameters " +
                              format_bytes(model_bytes) + " (" + r.memory.breakdown(MemoryStats::Of::kAtPeak) + ")");
    }
    return Status::ok();
  });
  for (const auto& r : results) EXPECT_THAT(r.status, IsOk());
}

// NOTE [Asynchronous gradient reduction]: a unit's reduction is waited for only after the
// next unit's reduction has been issued (so it overlaps that unit's backward), the last
// ones at the end of backward; every reduction is waited for exactly once per stage, and
// never more than two units' unsharded gradients are in flight.
TEST(FsdpAsyncReduction, EachReductionOverlapsTheNextUnitsBackward) {
  for (const bool hybrid : {false, true}) {
    SCOPED_TRACE(hybrid ? "HYBRID_SHARD" : "FULL_SHARD");
    sim::WorldOptions wo;
    wo.world_size = 4;
    sim::World w(wo);
    struct Seen {
      std::string name, collective;
      int unit;
    };
    std::vector<Seen> seen;  // rank 0's reduction events of the last step, begins only
    int step = 0;
    train::FsdpTrainOptions o = small_run();
    o.model.num_hidden_layers = 4;
    if (hybrid) {
      o.fsdp.strategy = ShardingStrategy::kHybridShard;
      o.fsdp.devices_per_node = 2;
    }
    const auto results = w.run([&](sim::RankContext& ctx) -> Status {
      train::FsdpTrainOptions mine = o;
      if (ctx.rank == 0) {
        mine.before_step = [&](int s) {
          step = s;
          seen.clear();
          return Status::ok();
        };
        mine.fsdp.on_fsdp_event = [&](const FsdpEvent& e) {
          const std::string name = e.name;
          if (e.begin && name.starts_with("reduce_grad")) seen.push_back({name, e.collective, e.unit});
        };
      }
      return train::train_fsdp(ctx.comm, ctx.device, ctx.clock, mine).status();
    });
    for (const auto& r : results) ASSERT_THAT(r.status, IsOk());
    ASSERT_EQ(step, o.steps - 1);
    const char* first = "reduce_scatter";
    std::vector<int> issued;
    int in_flight = 0, most = 0;
    std::map<std::pair<int, std::string>, int> issues, waits;
    for (std::size_t i = 0; i < seen.size(); ++i) {
      const Seen& e = seen[i];
      const auto key = std::make_pair(e.unit, e.collective);
      if (e.name == "reduce_grad") {
        ++issues[key];
        if (e.collective == std::string(first)) ++in_flight, issued.push_back(e.unit);
        most = std::max(most, in_flight);
        continue;
      }
      ASSERT_EQ(e.name, "reduce_grad_wait");
      ++waits[key];
      if (e.collective == std::string(first)) --in_flight;
      if (e.collective != std::string(first)) continue;
      // The wait for unit u's reduce-scatter comes after the next unit's was issued,
      // unless u's was the last one issued (then it is the end of backward's drain).
      const auto pos = std::find(issued.begin(), issued.end(), e.unit);
      ASSERT_NE(pos, issued.end()) << "waited before it was issued: unit " << e.unit;
      const bool later_issued = pos + 1 != issued.end();
      const bool drain = std::none_of(seen.begin() + static_cast<std::ptrdiff_t>(i), seen.end(), [](const Seen& x) {
        return x.name == "reduce_grad" && x.collective == "reduce_scatter";
      });
      EXPECT_TRUE(later_issued || drain) << "unit " << e.unit
                                         << "'s reduce-scatter was waited for before another was issued";
    }
    EXPECT_GE(issued.size(), 3u);
    EXPECT_EQ(issues, waits) << "every reduction (and stage) is waited for exactly once";
    EXPECT_LE(most, 2) << "at most two units' unsharded gradients in flight";
    EXPECT_EQ(in_flight, 0);
  }
}

// FsdpOptions::async_reduction = false waits for each reduction where it is issued (the
// A/B switch for measuring the overlap): the same bits, step times no shorter.
TEST(FsdpAsyncReduction, TurnedOffEachReductionIsWaitedWhereItIsIssuedWithTheSameBits) {
  struct Run {
    std::vector<std::string> events;  // rank 0: reduce_grad / reduce_grad_wait begins
    std::vector<double> losses;
    std::vector<float> params, grads;
    Nanos last_step = 0;
  };
  auto run = [](bool async) {
    Run out;
    sim::WorldOptions wo;
    wo.world_size = 4;
    sim::World w(wo);
    train::FsdpTrainOptions o = small_run();
    o.model.num_hidden_layers = 4;
    o.gather_results = true;
    o.fsdp.async_reduction = async;
    const auto results = w.run([&](sim::RankContext& ctx) -> Status {
      train::FsdpTrainOptions mine = o;
      if (ctx.rank == 0) {
        mine.fsdp.on_fsdp_event = [&](const FsdpEvent& e) {
          const std::string name = e.name;
          if (e.begin && name.starts_with("reduce_grad")) out.events.push_back(name + ":" + std::to_string(e.unit));
        };
      }
      SHARDLAB_ASSIGN_OR_RETURN(train::FsdpTrainResult r, train::train_fsdp(ctx.comm, ctx.device, ctx.clock, mine));
      if (ctx.rank == 0) {
        out.losses = r.losses;
        out.params = r.final_params;
        out.grads = r.last_grads;
        out.last_step = r.step_times.back();
      }
      return Status::ok();
    });
    for (const auto& r : results) EXPECT_THAT(r.status, IsOk());
    return out;
  };
  const Run async = run(true), blocking = run(false);
  ASSERT_FALSE(blocking.events.empty());
  for (std::size_t i = 0; i < blocking.events.size(); i += 2) {
    const std::string issued = blocking.events[i];
    ASSERT_TRUE(issued.starts_with("reduce_grad:")) << issued;
    ASSERT_LT(i + 1, blocking.events.size());
    EXPECT_EQ(blocking.events[i + 1], "reduce_grad_wait:" + issued.substr(issued.find(':') + 1))
        << "event " << i + 1 << ": the reduction is not waited for right after it is issued";
  }
  EXPECT_NE(async.events, blocking.events);
  EXPECT_EQ(async.losses, blocking.losses);
  EXPECT_EQ(async.params, blocking.params);
  EXPECT_EQ(async.grads, blocking.grads);
  EXPECT_GE(blocking.last_step, async.last_step);
}

// small_run with 256-wide layers: shards large enough that transfers show.
train::FsdpTrainOptions wide_run() {
  train::FsdpTrainOptions o = small_run();
  o.model.input_dim = 256;
  o.model.hidden_dim = 256;
  return o;
}

// Where wide_run keeps its FSDP state: on the device, on a CpuDevice host (off the
// simulated clock), or on a SimDevice host on the rank's clock (what `shardlab run` makes,
// sim::offload_host_profile()).
enum class OffloadHost { kNone, kCpu, kSim };
struct OffloadRun {
  Nanos last_step = 0;                     // rank 0's last step time
  Nanos host_busy_in_last_step = 0;        // rank 0's SimDevice host's busy time in it (kSim)
  std::int64_t host_bytes_last_step = -1;  // rank 0's host_transfer_bytes of its last step
};
// wide_run on 2 simulated ranks whose device has a host link of `link` bytes/s.
OffloadRun run_offload(double link, OffloadHost where) {
  OffloadRun out;
  sim::WorldOptions wo;
  wo.world_size = 2;
  wo.device.host_link_bytes_per_s = link;
  sim::World w(wo);
  const auto results = w.run([&](sim::RankContext& ctx) -> Status {
    device::cpu::CpuDevice cpu_host({"cpu", ctx.rank});
    sim::SimDevice sim_host({"host", ctx.rank}, sim::offload_host_profile(), &ctx.clock);
    train::FsdpTrainOptions o = wide_run();
    if (where == OffloadHost::kCpu) o.fsdp.offload_device = &cpu_host;
    if (where == OffloadHost::kSim) o.fsdp.offload_device = &sim_host;
    std::vector<Nanos> busy;
    o.on_step = [&](const train::FsdpTrainResult&) { busy.push_back(sim_host.busy_time()); };
    SHARDLAB_ASSIGN_OR_RETURN(train::FsdpTrainResult r, train::train_fsdp(ctx.comm, ctx.device, ctx.clock, o));
    if (ctx.rank == 0) out = {r.step_times.back(), busy.back() - busy[busy.size() - 2], r.host_transfer_bytes.back()};
    return Status::ok();
  });
  for (const auto& r : results) EXPECT_THAT(r.status, IsOk());
  return out;
}

// NOTE [Host link] (sim/models/device/cost_model.h): on a profile with a host link, CPU offload pays it
// for the shards and gradients that cross every step, not a device memory copy's cost
// (with which offloading would look free on Gaudi).
TEST(FsdpOffload, OffloadPaysTheHostLinkEveryStep) {
  const Nanos plain = run_offload(1e9, OffloadHost::kNone).last_step;
  const Nanos offloaded = run_offload(1e9, OffloadHost::kCpu).last_step;
  const Nanos no_link = run_offload(0.0, OffloadHost::kNone).last_step;
  // Each step the parameter shard crosses in and the gradient shard out: 8 bytes an
  // element, 8 ns at 1 GB/s. The host's optimizer step is not on the device's clock, which
  // saves at most AdamW's ~28 bytes an element at cpu-sim's 20 GB/s (1.4 ns): offloading
  // must cost over 4 ns an element of the rank's shard.
  const std::int64_t shard = model::total_numel(model::Mlp(wide_run().model).params()) / 2;
  EXPECT_GT(offloaded - plain, 4 * shard) << "offloaded " << offloaded << " ns, plain " << plain << " ns";
  // Without offload only the step's inputs and scalars cross (NOTE [Host access] in
  // runtime/device/device.h): the rank's batch (x fp32 [rows, 256] and int64 labels), the
  // target counts and the loss sum in and out, and the model's read of its loss.
  const train::FsdpTrainOptions o = wide_run();
  ASSERT_EQ(o.grad_accumulation, 1);
  const std::int64_t rows = o.global_batch / 2;
  const std::int64_t inputs = rows * (o.model.input_dim * 4 + 8) + 2 * 8 + 2 * 4 + 4;
  EXPECT_EQ(run_offload(1e9, OffloadHost::kNone).host_bytes_last_step, inputs);
  EXPECT_GT(plain, no_link) << "the inputs cross the link";
  // With offload the parameter shard crosses in at each unshard (forward, and backward
  // under FULL_SHARD) and the gradient shard out (fp32, padding included): 12 bytes an
  // element more.
  const std::int64_t crossed = run_offload(1e9, OffloadHost::kCpu).host_bytes_last_step - inputs;
  EXPECT_GE(crossed, 12 * shard);
  EXPECT_LE(crossed, 12 * (shard + 64));
}

// In a simulated run the offload host is a SimDevice on the rank's clock: the optimizer's
// steps over the host shards take host time, which a plain CpuDevice host left off the
// clock — the last step grows by exactly the host's busy time in it.
TEST(FsdpOffload, TheHostsOptimizerStepIsOnTheRanksClock) {
  const OffloadRun cpu_host = run_offload(1e9, OffloadHost::kCpu);
  const OffloadRun sim_host = run_offload(1e9, OffloadHost::kSim);
  EXPECT_EQ(cpu_host.host_busy_in_last_step, 0);
  EXPECT_GT(sim_host.host_busy_in_last_step, 0);
  EXPECT_EQ(sim_host.last_step - cpu_host.last_step, sim_host.host_busy_in_last_step);
}

// Regression: a completed all-gather kept references to every member's buffers until the
// rank that moved the data returned, so a rank that resharded and unsharded again quickly
// allocated a second full buffer while the first was still accounted: its peak parameter
// memory depended on host thread timing (seen on most runs at 4 ranks).
TEST(FsdpMemory, PeakOfRepeatedUnshardsIsOneFullBufferWhateverTheHostTiming) {
  for (std::uint64_t seed : {0u, 1u, 2u}) {
    sim::WorldOptions wo;
    wo.world_size = 4;
    wo.perturb_seed = seed;
    sim::World w(wo);
    expect_ok(w.run([&](sim::RankContext& ctx) -> Status {
      SHARDLAB_ASSIGN_OR_RETURN(Tensor init, ctx.device.zeros({18}, DType::kF32, MemoryCategory::kOther, "init"));
      SHARDLAB_ASSIGN_OR_RETURN(
          auto m, FullyShardedModel::create(ctx.comm, ctx.device, specs(), WrapPlan::single(2), FsdpOptions{}, init));
      ctx.device.memory().reset_peaks();  // initialization's own peak is another test's
      for (int i = 0; i < 20; ++i) {
        SHARDLAB_RETURN_IF_ERROR(m->summon_full_params(true));
        SHARDLAB_RETURN_IF_ERROR(m->summon_full_params(false));
      }
      const FlatParameter& u = m->units()[0];
      const std::int64_t expected = (u.layout.shard_numel() + u.layout.total_numel()) * 4;
      const std::int64_t peak = ctx.device.memory().stats().peak[static_cast<int>(MemoryCategory::kParameters)];
      if (peak != expected) {
        return Status::internal("rank " + std::to_string(ctx.rank) + " (perturb seed " + std::to_string(seed) +
                                "): peak parameter bytes " + std::to_string(peak) +
                                ", expected shard + full buffer = " + std::to_string(expected));
      }
      return Status::ok();
    }));
  }
}

// A unit big enough (700 001 fp32 elements on 3 ranks) that the simulator splits every
// collective's data movement into chunks shared by the waiting ranks (NOTE [Shared data
// movement] in sim/engine/communicator.cc): sync_module_states' broadcast, the unshard
// all-gathers (in place), the gradient reduce-scatter (fp32 and bf16) and NO_SHARD's
// all-reduce. Parameters and reduced gradients must be bitwise what one thread computes
// in rank order, under any host timing.
TEST(FsdpLargeUnit, SharedDataMovementIsBitwiseTheRankOrderResult) {
  constexpr std::int64_t kBig = 700001;
  constexpr int kWorld = 3;
  const auto init_value = [](std::int64_t i, int rank) {
    return static_cast<float>(i % 1009) * 0.25f - 100.0f + 1000.0f * static_cast<float>(rank);
  };
  const auto grad_value = [](std::int64_t i, int rank) {
    return static_cast<float>((i * 7 + rank * 13) % 101) * 0.37f - 17.0f + static_cast<float>(rank) * 1e-3f;
  };
  struct Config {
    ShardingStrategy strategy;
    DType reduce_dtype;
  };
  for (const Config c :
       {Config{ShardingStrategy::kFullShard, DType::kF32}, Config{ShardingStrategy::kFullShard, DType::kBF16},
        Config{ShardingStrategy::kNoShard, DType::kF32}}) {
    SCOPED_TRACE(std::string(strategy_name(c.strategy)) + " reduce_dtype " + std::string(dtype_name(c.reduce_dtype)));
    // What one thread computes: pre-divide, sum in rank order (in reduce_dtype), post-divide.
    const auto [pre, post] = divide_factors(kWorld);
    std::vector<float> expected(static_cast<std::size_t>(kBig));
    for (std::int64_t i = 0; i < kBig; ++i) {
      float acc = 0.0f;
      for (int r = 0; r < kWorld; ++r) {
        float g = grad_value(i, r) * static_cast<float>(1.0 / pre);
        if (c.reduce_dtype == DType::kBF16) g = round_to_bf16(g);
        acc = r == 0 ? g : acc + g;
        if (c.reduce_dtype == DType::kBF16) acc = round_to_bf16(acc);
      }
      expected[static_cast<std::size_t>(i)] = acc * static_cast<float>(1.0 / post);
    }
    for (std::uint64_t seed : {0u, 7u}) {
      sim::WorldOptions wo;
      wo.world_size = kWorld;
      wo.perturb_seed = seed;
      sim::World w(wo);
      FsdpOptions o;
      o.strategy = c.strategy;
      o.reduce_dtype = c.reduce_dtype;
      o.sync_module_states = true;
      std::vector<std::vector<float>> grads(kWorld);
      expect_ok(w.run([&](sim::RankContext& ctx) -> Status {
        SHARDLAB_ASSIGN_OR_RETURN(Tensor init, ctx.device.empty({kBig}, DType::kF32, MemoryCategory::kOther, "init"));
        for (std::int64_t i = 0; i < kBig; ++i) init.data<float>()[i] = init_value(i, ctx.rank);
        SHARDLAB_ASSIGN_OR_RETURN(
            auto m, FullyShardedModel::create(ctx.comm, ctx.device, {{"big.weight", {kBig}, true, 0, "Linear"}},
                                              WrapPlan::per_layer(1), o, init));
        SHARDLAB_RETURN_IF_ERROR(m->begin_iteration());
        SHARDLAB_RETURN_IF_ERROR(m->pre_forward(0));
        SHARDLAB_ASSIGN_OR_RETURN(Tensor param, m->param(0));
        for (std::int64_t i = 0; i < kBig; ++i) {
          if (param.data<float>()[i] != init_value(i, 0)) {
            return Status::internal("rank " + std::to_string(ctx.rank) + ": parameter element " + std::to_string(i) +
                                    " is " + std::to_string(param.data<float>()[i]) + ", rank 0's value is " +
                                    std::to_string(init_value(i, 0)));
          }
        }
        SHARDLAB_RETURN_IF_ERROR(m->post_forward(0));
        SHARDLAB_RETURN_IF_ERROR(m->pre_backward(0));
        SHARDLAB_ASSIGN_OR_RETURN(Tensor grad, m->grad(0));
        for (std::int64_t i = 0; i < kBig; ++i) grad.data<float>()[i] = grad_value(i, ctx.rank);
        SHARDLAB_RETURN_IF_ERROR(m->post_backward(0));
        SHARDLAB_RETURN_IF_ERROR(m->end_iteration());
        SHARDLAB_ASSIGN_OR_RETURN(Tensor out, ctx.device.empty({kBig}, DType::kF32, MemoryCategory::kOther, "out"));
        SHARDLAB_RETURN_IF_ERROR(m->gather_full_grads(out));
        grads[static_cast<std::size_t>(ctx.rank)].assign(out.data<float>(), out.data<float>() + kBig);
        return Status::ok();
      }));
      for (int r = 0; r < kWorld; ++r) {
        const auto& g = grads[static_cast<std::size_t>(r)];
        ASSERT_EQ(g.size(), expected.size()) << "rank " << r << ", perturb seed " << seed;
        for (std::int64_t i = 0; i < kBig; ++i) {
          ASSERT_EQ(float_bits(g[static_cast<std::size_t>(i)]), float_bits(expected[static_cast<std::size_t>(i)]))
              << "rank " << r << ", perturb seed " << seed << ", element " << i;
        }
      }
    }
  }
}

TEST(FsdpWrapPlan, TransformerLayerPolicyWrapsTheNamedClassAndLeavesTheRestToTheRoot) {
  std::vector<model::ParamSpec> s = {{"emb", {4}, true, 0, "Embedding"},
                                     {"l0", {4}, true, 1, "Layer"},
                                     {"l1", {4}, true, 2, "Layer"},
                                     {"head", {4}, true, 3, "Head"}};
  const WrapPlan p = WrapPlan::by_class(s, 4, {"Layer"});
  EXPECT_EQ(p.unit_of_layer, (std::vector<int>{-1, 1, 2, -1}));
  const WrapPlan q = WrapPlan::by_size(s, 4, 8);
  EXPECT_EQ(q.unit_of_layer, (std::vector<int>{0, 0, 1, 1}));
}

TEST(FsdpDivideFactors, MirrorPyTorchsLoop) {
  EXPECT_EQ(divide_factors(1), std::make_pair(1.0, 1.0));
  EXPECT_EQ(divide_factors(2), std::make_pair(2.0, 1.0));
  EXPECT_EQ(divide_factors(3), std::make_pair(2.0, 1.5));
  EXPECT_EQ(divide_factors(4), std::make_pair(2.0, 2.0));
  EXPECT_EQ(divide_factors(8), std::make_pair(4.0, 2.0));
  EXPECT_EQ(divide_factors(16), std::make_pair(4.0, 4.0));
  EXPECT_EQ(divide_factors(64), std::make_pair(8.0, 8.0));
}

TEST(FsdpOptionsParsing, AcceptsPyTorchNamesAndAccelerateNumbers) {
  EXPECT_EQ(*parse_strategy("full_shard"), ShardingStrategy::kFullShard);
  EXPECT_EQ(*parse_strategy("2"), ShardingStrategy::kShardGradOp);
  EXPECT_EQ(*parse_strategy("4"), ShardingStrategy::kHybridShard);
  EXPECT_EQ(*parse_strategy("5"), ShardingStrategy::kHybridShardZero2);
  EXPECT_EQ(*parse_strategy("_hybrid_shard_zero2"), ShardingStrategy::kHybridShardZero2);
  EXPECT_EQ(strategy_name(ShardingStrategy::kHybridShardZero2), "_HYBRID_SHARD_ZERO2");
  EXPECT_NE(parse_strategy("6").status().message().find("allowed: FULL_SHARD (1)"), std::string::npos);
  EXPECT_NE(parse_strategy("6").status().message().find("_HYBRID_SHARD_ZERO2 (5)"), std::string::npos);
  EXPECT_EQ(*parse_prefetch("backward_post"), BackwardPrefetch::kBackwardPost);
  EXPECT_EQ(parse_prefetch("x").status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shardlab::runtime::fsdp
