// BERT under FSDP on simulated ranks: equal to the unsharded oracle bitwise for every
// head and strategy (with dropout, gradient accumulation and activation checkpointing),
// loss normalization by the global target count, tied-weight wrap check, bf16.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "runtime/device/cpu/device.h"
#include "runtime/model/bert_data.h"
#include "runtime/train/fsdp_train.h"
#include "sim/engine/world.h"
#include "testing/sim_world.h"
#include "testing/status_matchers.h"

using shardlab::testlib::IsOk;

namespace shardlab::runtime::train {
namespace {

using model::BertHead;

FsdpTrainOptions bert_run(BertHead head) {
  FsdpTrainOptions o;
  o.model_kind = ModelKind::kBert;
  o.bert.config.vocab_size = 128;
  o.bert.config.hidden_size = 16;
  o.bert.config.num_attention_heads = 2;
  o.bert.config.intermediate_size = 32;
  o.bert.config.num_hidden_layers = 2;
  o.bert.config.max_position_embeddings = 16;
  o.bert.config.num_labels = 3;
  o.bert.head = head;
  o.bert.seq_len = 8;
  o.global_batch = 8;
  o.grad_accumulation = 2;
  o.steps = 2;
  o.seed = 3;
  o.wrap = WrapPolicy::kByClass;
  o.optimizer.kind = optim::OptimizerConfig::Kind::kAdamW;
  o.optimizer.lr = 1e-3f;
  return o;
}

Result<FsdpTrainResult> run_sim(const FsdpTrainOptions& o, int world, std::uint64_t perturb_seed = 0) {
  sim::WorldOptions wo;
  wo.world_size = world;
  wo.perturb_seed = perturb_seed;
  SHARDLAB_ASSIGN_OR_RETURN(auto ranks, testlib::train_fsdp_on_sim(o, wo));
  return std::move(ranks[0]);
}

struct Case {
  BertHead head;
  fsdp::ShardingStrategy strategy;
};

class BertFsdp : public ::testing::TestWithParam<Case> {};

TEST_P(BertFsdp, EqualsTheUnshardedOracleBitwise) {
  FsdpTrainOptions o = bert_run(GetParam().head);
  o.fsdp.strategy = GetParam().strategy;
  o.fsdp.devices_per_node = 2;
  auto sharded = run_sim(o, 4);
  ASSERT_THAT(sharded, IsOk());
  device::cpu::CpuDevice dev;
  auto oracle = train_oracle(dev, o, 4);
  ASSERT_THAT(oracle, IsOk());
  const Comparison c = compare(*sharded, *oracle);
  EXPECT_TRUE(c.bitwise) << c.describe();
  for (double l : sharded->losses) EXPECT_TRUE(std::isfinite(l) && l > 0) << l;
  ASSERT_EQ(sharded->num_units, 3);  // root (embeddings + head) and two BertLayers
}

INSTANTIATE_TEST_SUITE_P(HeadsAndStrategies, BertFsdp,
                         ::testing::Values(Case{BertHead::kSequenceClassification, fsdp::ShardingStrategy::kFullShard},
                                           Case{BertHead::kMaskedLM, fsdp::ShardingStrategy::kFullShard},
                                           Case{BertHead::kQuestionAnswering, fsdp::ShardingStrategy::kFullShard},
                                           Case{BertHead::kMaskedLM, fsdp::ShardingStrategy::kShardGradOp},
                                           Case{BertHead::kQuestionAnswering, fsdp::ShardingStrategy::kNoShard},
                                           Case{BertHead::kSequenceClassification,
                                                fsdp::ShardingStrategy::kHybridShard},
                                           Case{BertHead::kMaskedLM, fsdp::ShardingStrategy::kHybridShardZero2}),
                         [](const auto& info) {
                           return std::string(model::bert_head_name(info.param.head)) + "_" +
                                  std::to_string(static_cast<int>(info.param.strategy));
                         });

TEST(BertFsdp, ShardedGradientsEqualSingleRankGradientsWithinFp32Tolerance) {
  // World size changes the summation order (per-rank partial sums), so equality is to
  // fp32 tolerance; dropout masks are keyed by global row, so they agree exactly.
  for (BertHead head : {BertHead::kSequenceClassification, BertHead::kMaskedLM, BertHead::kQuestionAnswering}) {
    FsdpTrainOptions o = bert_run(head);
    o.steps = 1;
    // SGD keeps parameters linear in the gradients (AdamW's g/√v amplifies last-bit
    // differences of near-zero gradients into lr-sized steps).
    o.optimizer.kind = optim::OptimizerConfig::Kind::kSgd;
    auto one = run_sim(o, 1);
    auto four = run_sim(o, 4);
    ASSERT_TRUE(one.is_ok() && four.is_ok());
    const Comparison c = compare(*four, *one, 1e-4, 1e-6);
    EXPECT_TRUE(c.within_tolerance) << model::bert_head_name(head) << ": " << c.describe();
    EXPECT_NEAR(four->losses[0], one->losses[0], 1e-5 * one->losses[0]);
  }
}

TEST(BertFsdp, ARankWithoutMaskedTargetsContributesZerosNotNaN) {
  // Rows of rank 1 (rows 2..3 of 8) have no MLM target: the global count normalizes.
  FsdpTrainOptions o = bert_run(BertHead::kMaskedLM);
  o.grad_accumulation = 1;
  const model::Bert bert(o.bert);
  o.data = [&](device::Device& dev, std::int64_t step, std::int64_t first, std::int64_t rows) -> Result<model::Batch> {
    SHARDLAB_ASSIGN_OR_RETURN(model::Batch b, bert.synthetic_batch(dev, o.seed, step, first, rows));
    Tensor labels = *b.get("labels");
    for (std::int64_t r = 0; r < rows; ++r) {
      if (first + r == 2 || first + r == 3) {
        for (std::int64_t t = 0; t < labels.dim(1); ++t) labels.data<std::int64_t>()[r * labels.dim(1) + t] = -100;
      }
    }
    return b;
  };
  auto sharded = run_sim(o, 4);
  ASSERT_THAT(sharded, IsOk());
  for (float g : sharded->last_grads) ASSERT_TRUE(std::isfinite(g));
  device::cpu::CpuDevice dev;
  auto oracle = train_oracle(dev, o, 4);
  ASSERT_TRUE(oracle.is_ok());
  EXPECT_TRUE(compare(*sharded, *oracle).bitwise) << compare(*sharded, *oracle).describe();
  o.optimizer.kind = optim::OptimizerConfig::Kind::kSgd;
  auto single = run_sim(o, 1);
  sharded = run_sim(o, 4);
  ASSERT_TRUE(sharded.is_ok());
  ASSERT_TRUE(single.is_ok());
  EXPECT_TRUE(compare(*sharded, *single, 1e-4, 1e-6).within_tolerance)
      << compare(*sharded, *single, 1e-4, 1e-6).describe();
}

// NOTE [Loss without targets]: a step whose global batch has no target (every label -100)
// has loss NaN, as PyTorch's mean cross-entropy, and zero gradients; the oracle agrees
// (bitwise, NaN losses compare equal), and the next step with targets is finite again.
TEST(BertFsdp, AStepWithoutAnyTargetHasLossNaNAndZeroGradientsLikePyTorch) {
  FsdpTrainOptions o = bert_run(BertHead::kMaskedLM);
  o.optimizer.kind = optim::OptimizerConfig::Kind::kSgd;  // zero gradients leave SGD's parameters as they are
  const model::Bert bert(o.bert);
  o.data = [&](device::Device& dev, std::int64_t step, std::int64_t first, std::int64_t rows) -> Result<model::Batch> {
    SHARDLAB_ASSIGN_OR_RETURN(model::Batch b, bert.synthetic_batch(dev, o.seed, step, first, rows));
    if (step == 0) {
      Tensor labels = *b.get("labels");
      std::vector<std::int64_t> none(static_cast<std::size_t>(labels.numel()), -100);
      SHARDLAB_RETURN_IF_ERROR(device::values_from_host(dev, none, labels));
      b.host_ints["labels"] = none;
    }
    return b;
  };
  o.steps = 1;
  auto sharded = run_sim(o, 4);
  ASSERT_THAT(sharded, IsOk());
  ASSERT_EQ(sharded->losses.size(), 1u);
  EXPECT_TRUE(std::isnan(sharded->losses[0])) << sharded->losses[0];
  for (float g : sharded->last_grads) ASSERT_EQ(g, 0.0f);
  device::cpu::CpuDevice dev;
  auto oracle = train_oracle(dev, o, 4);
  ASSERT_TRUE(oracle.is_ok());
  EXPECT_TRUE(std::isnan(oracle->losses[0]));
  EXPECT_TRUE(compare(*sharded, *oracle).bitwise) << compare(*sharded, *oracle).describe();
  EXPECT_TRUE(compare(*sharded, *oracle).within_tolerance);
  o.steps = 2;
  sharded = run_sim(o, 4);
  ASSERT_TRUE(sharded.is_ok());
  EXPECT_TRUE(std::isnan(sharded->losses[0]));
  EXPECT_TRUE(std::isfinite(sharded->losses[1])) << sharded->losses[1];
}

// Regression: BACKWARD_POST prefetch once followed "the next unit by layer", so after the
// root unit (embeddings + head, first in forward order) finished its backward it
// re-unsharded a BertLayer and the iteration ended with that unit unsharded.
// NOTE [Host memory plan]: a numerics run whose parameters alone (16 bytes each at least)
// pass the host's memory is refused before anything is allocated, naming both numbers.
TEST(BertFsdp, NumericsRunsThatCannotFitTheHostAreRefusedBeforeAllocating) {
  FsdpTrainOptions o = bert_run(BertHead::kMaskedLM);
  o.bert.config = *model::bert_preset("bert-large");
  const std::int64_t params = *model::bert_param_count(o.bert.config, o.bert.head);  // 335 M
  const std::int64_t gib = std::int64_t{1} << 30;
  const Status s = check_numerics_host_memory(o, 4 * gib);
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find(std::to_string(params) + " parameters"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("more than the host's 4.0 GiB"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("world.mode: timing"), std::string::npos) << s.message();
  EXPECT_TRUE(check_numerics_host_memory(o, params * kNumericsBytesPerParameter).is_ok());
  EXPECT_TRUE(check_numerics_host_memory(o, 0).is_ok());  // unknown: no check
  EXPECT_GT(host_memory_bytes(), 0);
}

// A NaN max_grad_norm would turn clipping off without a word (every `norm > max` is false).
TEST(BertFsdp, MaxGradNormMustBeFiniteAndNonNegative) {
  FsdpTrainOptions o = bert_run(BertHead::kMaskedLM);
  for (double bad : {std::nan(""), std::numeric_limits<double>::infinity(), -1.0}) {
    o.max_grad_norm = bad;
    const Status s = validate(o, 2);
    ASSERT_FALSE(s.is_ok()) << bad;
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("finite number >= 0"), std::string::npos) << s.message();
  }
  o.max_grad_norm = 0.0;
  EXPECT_TRUE(validate(o, 2).is_ok());
}

TEST(BertFsdp, BackwardPostPrefetchWithARootSpanningEmbeddingsAndHead) {
  for (auto prefetch : {fsdp::BackwardPrefetch::kBackwardPost, fsdp::BackwardPrefetch::kBackwardPre}) {
    FsdpTrainOptions o = bert_run(BertHead::kMaskedLM);
    o.fsdp.backward_prefetch = prefetch;
    o.fsdp.forward_prefetch = true;
    auto sharded = run_sim(o, 2);
    ASSERT_THAT(sharded, IsOk());
    device::cpu::CpuDevice dev;
    auto oracle = train_oracle(dev, o, 2);
    ASSERT_TRUE(oracle.is_ok());
    EXPECT_TRUE(compare(*sharded, *oracle).bitwise);
    EXPECT_LE(sharded->max_live_unsharded, 2);
  }
}

TEST(BertFsdp, MemoryTimelineSamplesEveryHookWithoutChangingResults) {
  FsdpTrainOptions o = bert_run(BertHead::kSequenceClassification);
  o.steps = 2;
  o.grad_accumulation = 1;
  auto plain = run_sim(o, 2);
  o.record_memory_timeline = true;
  auto sampled = run_sim(o, 2);
  ASSERT_TRUE(plain.is_ok() && sampled.is_ok());
  EXPECT_TRUE(compare(*sampled, *plain).bitwise);
  const auto& t = sampled->memory_timeline;
  // Per step: 4 layers × (pre/post forward + pre/post backward) + the optimizer step.
  ASSERT_EQ(t.size(), 2u * (4 * 4 + 1));
  EXPECT_EQ(t.front().event, "pre_forward:0");
  EXPECT_EQ(t[16].event, "optimizer_step");
  // Every hook names its own layer, in both steps (the names are made once and reused).
  std::vector<std::string> hooks;
  for (std::size_t i = 0; i < 16; ++i) hooks.push_back(t[i].event);
  for (const char* name : {"pre_forward:3", "post_forward:2", "pre_backward:1", "post_backward:0"}) {
    EXPECT_EQ(std::count(hooks.begin(), hooks.end(), name), 1) << name;
  }
  for (std::size_t i = 0; i < 17; ++i) EXPECT_EQ(t[17 + i].event, t[i].event) << "sample " << i;
  EXPECT_EQ(t.back().step, 1);
  const int act = static_cast<int>(MemoryCategory::kActivations), grads = static_cast<int>(MemoryCategory::kGradients);
  std::int64_t peak_act = 0;
  for (std::size_t i = 1; i < t.size(); ++i) {
    EXPECT_GE(t[i].time, t[i - 1].time);
    peak_act = std::max(peak_act, t[i].bytes[static_cast<std::size_t>(act)]);
  }
  EXPECT_GT(peak_act, 0);
  EXPECT_EQ(t[16].bytes[static_cast<std::size_t>(act)], 0);           // activations freed after the step
  EXPECT_EQ(t[16].bytes[static_cast<std::size_t>(grads)] > 0, true);  // gradient shards kept for the optimizer
}

// The timeline covers the first memory_timeline_steps steps only (later steps are not
// sampled); what it holds is exactly the full timeline's first steps, and nothing else
// about the run changes.
TEST(BertFsdp, MemoryTimelineKeepsOnlyTheFirstSteps) {
  FsdpTrainOptions o = bert_run(BertHead::kSequenceClassification);
  o.steps = 4;
  o.grad_accumulation = 1;
  o.record_memory_timeline = true;
  o.memory_timeline_steps = 4;
  auto full = run_sim(o, 2);
  o.memory_timeline_steps = 2;
  auto first = run_sim(o, 2);
  o.memory_timeline_steps = 0;
  auto none = run_sim(o, 2);
  ASSERT_TRUE(full.is_ok() && first.is_ok() && none.is_ok());
  EXPECT_TRUE(compare(*first, *full).bitwise);
  EXPECT_TRUE(compare(*none, *full).bitwise);
  EXPECT_EQ(first->memory.peak, full->memory.peak);
  EXPECT_EQ(first->step_times, full->step_times);  // virtual time: sampling is free on the simulator
  const std::size_t per_step = 4 * 4 + 1;
  ASSERT_EQ(full->memory_timeline.size(), 4 * per_step);
  ASSERT_EQ(first->memory_timeline.size(), 2 * per_step);
  for (std::size_t i = 0; i < first->memory_timeline.size(); ++i) {
    EXPECT_EQ(first->memory_timeline[i].step, full->memory_timeline[i].step);
    EXPECT_EQ(first->memory_timeline[i].event, full->memory_timeline[i].event);
    EXPECT_EQ(first->memory_timeline[i].time, full->memory_timeline[i].time);
    EXPECT_EQ(first->memory_timeline[i].bytes, full->memory_timeline[i].bytes);
  }
  EXPECT_EQ(first->memory_timeline.back().step, 1);
  EXPECT_TRUE(none->memory_timeline.empty());
  o.memory_timeline_steps = -1;
  const Status bad = validate(o, 2);
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("memory_timeline_steps"), std::string::npos) << bad.message();
}

// The full gradients and parameters are gathered for the checks after training — not in
// its last step, not in its memory peaks (two full-model fp32 buffers and their
// all-gathers must not be charged to the last step) — and not at all without gather_results.
TEST(BertFsdp, ResultGathersAreNotPartOfTraining) {
  FsdpTrainOptions o = bert_run(BertHead::kMaskedLM);
  o.steps = 2;
  auto with = run_sim(o, 4);
  o.gather_results = false;
  auto without = run_sim(o, 4);
  ASSERT_TRUE(with.is_ok() && without.is_ok());
  EXPECT_EQ(with->step_times, without->step_times);
  EXPECT_EQ(with->memory.peak, without->memory.peak);
  EXPECT_EQ(with->memory.peak_total, without->memory.peak_total);
  EXPECT_EQ(with->losses, without->losses);
  EXPECT_FALSE(with->last_grads.empty());
  EXPECT_FALSE(with->final_params.empty());
  EXPECT_TRUE(without->last_grads.empty());
  EXPECT_TRUE(without->final_params.empty());
  // What is gathered after the last step is that step's gradients: the oracle's.
  device::cpu::CpuDevice dev;
  o.gather_results = true;
  auto oracle = train_oracle(dev, o, 4);
  ASSERT_TRUE(oracle.is_ok());
  EXPECT_TRUE(compare(*with, *oracle).bitwise);
}

// `shardlab grads`'s run: the last step's gradients, gathered alone, without the
// optimizer step after them — the same gradients as a full run's, and the parameters the
// step found (a one-step run's: the initial ones).
TEST(BertFsdp, GradientsOnlyRunsSkipTheLastUpdateAndTheParameterGather) {
  FsdpTrainOptions o = bert_run(BertHead::kMaskedLM);
  o.steps = 2;
  auto full = run_sim(o, 2);
  o.gather_params = false;
  o.skip_last_optimizer_step = true;
  auto grads_only = run_sim(o, 2);
  ASSERT_TRUE(full.is_ok() && grads_only.is_ok()) << grads_only.status().to_string();
  EXPECT_EQ(full->losses, grads_only->losses);
  ASSERT_FALSE(grads_only->last_grads.empty());
  EXPECT_TRUE(std::equal(
      full->last_grads.begin(), full->last_grads.end(), grads_only->last_grads.begin(), grads_only->last_grads.end(),
      [](float a, float b) { return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b); }));
  EXPECT_TRUE(grads_only->final_params.empty());
  // Gathered anyway, the parameters are those the last step started from: given initial
  // parameters (a full run's result), a 1-step gradients-only run ends with them exactly.
  o.steps = 1;
  o.gather_params = true;
  o.initial_params = std::make_shared<const std::vector<float>>(full->final_params);
  auto kept = run_sim(o, 2);
  o.skip_last_optimizer_step = false;
  auto moved = run_sim(o, 2);
  ASSERT_TRUE(kept.is_ok() && moved.is_ok());
  EXPECT_EQ(kept->final_params, full->final_params);
  EXPECT_NE(moved->final_params, full->final_params);
  EXPECT_EQ(kept->last_grads, moved->last_grads);
  // Checkpoints would save the step without its update: refused.
  o.skip_last_optimizer_step = true;
  o.checkpoint.dir = "/tmp/never_written";
  EXPECT_EQ(validate(o, 2).code(), StatusCode::kInvalidArgument);
}

// Regression: a collective's operation kept references to the members' buffers until the
// last host thread let go of it, so per-category memory peaks (comm_buffers) differed
// between identical runs. Under random host interleavings they must not.
TEST(BertFsdp, MemoryPeaksDoNotDependOnHostScheduling) {
  FsdpTrainOptions o = bert_run(BertHead::kMaskedLM);
  o.record_memory_timeline = true;
  auto base = run_sim(o, 4);
  ASSERT_TRUE(base.is_ok());
  for (std::uint64_t seed : {1u, 2u, 3u}) {
    auto other = run_sim(o, 4, seed);
    ASSERT_TRUE(other.is_ok());
    EXPECT_EQ(other->memory.peak, base->memory.peak) << "perturb seed " << seed;
    ASSERT_EQ(other->memory_timeline.size(), base->memory_timeline.size());
    for (std::size_t i = 0; i < base->memory_timeline.size(); ++i) {
      ASSERT_EQ(other->memory_timeline[i].bytes, base->memory_timeline[i].bytes) << base->memory_timeline[i].event;
      ASSERT_EQ(other->memory_timeline[i].time, base->memory_timeline[i].time);
    }
  }
}

TEST(BertFsdp, ActivationCheckpointingChangesNothing) {
  FsdpTrainOptions o = bert_run(BertHead::kQuestionAnswering);
  auto plain = run_sim(o, 2);
  o.bert.activation_checkpointing = true;
  auto ckpt = run_sim(o, 2);
  ASSERT_TRUE(plain.is_ok() && ckpt.is_ok());
  EXPECT_TRUE(compare(*ckpt, *plain).bitwise) << compare(*ckpt, *plain).describe();
  EXPECT_LT(ckpt->memory.peak[static_cast<int>(MemoryCategory::kActivations)],
            plain->memory.peak[static_cast<int>(MemoryCategory::kActivations)]);
}

TEST(BertFsdp, Bf16StaysCloseToFp32) {
  FsdpTrainOptions o = bert_run(BertHead::kSequenceClassification);
  o.steps = 1;
  auto fp32 = run_sim(o, 2);
  o.bert.compute_dtype = DType::kBF16;
  o.fsdp.param_dtype = DType::kBF16;
  auto bf16 = run_sim(o, 2);
  ASSERT_TRUE(fp32.is_ok() && bf16.is_ok());
  double max_g = 0;
  for (float g : fp32->last_grads) max_g = std::max(max_g, static_cast<double>(std::fabs(g)));
  const Comparison c = compare(*bf16, *fp32, 0.0, 5e-2 * max_g + 1e-3);
  EXPECT_FALSE(c.bitwise);
  EXPECT_LT(c.max_grad_diff, 5e-2 * max_g + 1e-3) << c.describe();
  EXPECT_NEAR(bf16->losses[0], fp32->losses[0], 2e-2 * fp32->losses[0]);
}

// The oracle follows the precision policy (param_dtype rounding of the compute copy,
// the reduction in reduce_dtype in the collectives' order, keep_low_precision_grads'
// rounding of the stored gradient), so a bf16 run on the simulator matches it bitwise —
// across 4 ranks, where a bf16 sum's order shows in the last bit.
struct PrecisionCase {
  fsdp::ShardingStrategy strategy;
  DType param, reduce;
  bool keep_low_grads;
  bool bf16_compute;
};
class BertFsdpPrecision : public ::testing::TestWithParam<PrecisionCase> {};

TEST_P(BertFsdpPrecision, OracleFollowsThePrecisionPolicyBitwise) {
  const PrecisionCase& p = GetParam();
  FsdpTrainOptions o = bert_run(BertHead::kQuestionAnswering);
  o.fsdp.strategy = p.strategy;
  o.fsdp.devices_per_node = 2;
  o.fsdp.param_dtype = p.param;
  o.fsdp.reduce_dtype = p.reduce;
  o.fsdp.keep_low_precision_grads = p.keep_low_grads;
  if (p.bf16_compute) o.bert.compute_dtype = DType::kBF16;
  auto sharded = run_sim(o, 4);
  ASSERT_THAT(sharded, IsOk());
  device::cpu::CpuDevice dev;
  auto oracle = train_oracle(dev, o, 4);
  ASSERT_THAT(oracle, IsOk());
  const Comparison c = compare(*sharded, *oracle);
  EXPECT_TRUE(c.bitwise) << c.describe();
  if (p.keep_low_grads) {  // the stored gradients hold bf16 values only
    for (float g : sharded->last_grads) ASSERT_EQ(bf16_to_float(float_to_bf16(g)), g);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Policies, BertFsdpPrecision,
    ::testing::Values(PrecisionCase{fsdp::ShardingStrategy::kFullShard, DType::kBF16, DType::kBF16, false, true},
                      PrecisionCase{fsdp::ShardingStrategy::kFullShard, DType::kF32, DType::kBF16, false, false},
                      PrecisionCase{fsdp::ShardingStrategy::kFullShard, DType::kBF16, DType::kF32, true, false},
                      PrecisionCase{fsdp::ShardingStrategy::kShardGradOp, DType::kBF16, DType::kBF16, true, true},
                      PrecisionCase{fsdp::ShardingStrategy::kNoShard, DType::kBF16, DType::kBF16, false, false},
                      PrecisionCase{fsdp::ShardingStrategy::kHybridShard, DType::kBF16, DType::kBF16, true, true}));

// Resume at another world size: the oracle starts from the checkpoint the run loaded,
// loaded unsharded, so the resumed run matches it bit for bit; an oracle retrained from
// step 0 at the resumed world size does not (its first steps reduce in another order).
struct ResumeCase {
  int saved_world, resumed_world;
  fsdp::StateDictType type;
};
class BertFsdpResume : public ::testing::TestWithParam<ResumeCase> {};

TEST_P(BertFsdpResume, OracleStartsFromTheSameCheckpoint) {
  const ResumeCase& p = GetParam();
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      ("shardlab-resume-" + std::to_string(::getpid()) + "-" + std::to_string(p.saved_world) + "-" +
       std::to_string(p.resumed_world) + "-" + std::string(fsdp::state_dict_type_name(p.type)));
  std::filesystem::remove_all(dir);
  FsdpTrainOptions o = bert_run(BertHead::kQuestionAnswering);
  o.global_batch = 24;  // divisible by 8, 4, 3 and 1
  o.grad_accumulation = 1;
  o.steps = 2;
  o.checkpoint.dir = dir.string();
  o.checkpoint.type = p.type;
  auto saved = run_sim(o, p.saved_world);
  ASSERT_THAT(saved, IsOk());
  o.steps = 4;
  o.checkpoint.resume = true;
  o.checkpoint.every_steps = 1;  // the run moves `latest` on; the oracle must still start at step 2
  auto resumed = run_sim(o, p.resumed_world);
  ASSERT_THAT(resumed, IsOk());
  ASSERT_EQ(resumed->first_step, 2);
  ASSERT_EQ(resumed->resumed_from, (dir / "step-00000002").string());
  device::cpu::CpuDevice dev;
  auto oracle = train_oracle(dev, o, p.resumed_world, resumed->resumed_from);
  ASSERT_THAT(oracle, IsOk());
  EXPECT_EQ(oracle->first_step, 2);
  EXPECT_EQ(oracle->losses.size(), 2u);
  const Comparison c = compare(*resumed, *oracle);
  EXPECT_TRUE(c.bitwise) << c.describe();
  if (p.saved_world != p.resumed_world) {
    auto from_scratch = train_oracle(dev, o, p.resumed_world);
    ASSERT_TRUE(from_scratch.is_ok());
    EXPECT_FALSE(compare(*resumed, *from_scratch).bitwise) << "the case does not tell the two oracles apart";
  }
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(
    WorldSizes, BertFsdpResume,
    ::testing::Values(ResumeCase{8, 4, fsdp::StateDictType::kFull}, ResumeCase{8, 4, fsdp::StateDictType::kSharded},
                      ResumeCase{8, 3, fsdp::StateDictType::kFull}, ResumeCase{8, 3, fsdp::StateDictType::kSharded},
                      ResumeCase{4, 8, fsdp::StateDictType::kFull}, ResumeCase{4, 8, fsdp::StateDictType::kSharded},
                      ResumeCase{8, 1, fsdp::StateDictType::kSharded}, ResumeCase{4, 4, fsdp::StateDictType::kLocal}));

// A LOCAL_STATE_DICT index that records no layout cannot be unflattened: a clear error.
TEST(BertFsdp, OracleRefusesALocalCheckpointWithoutItsLayout) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("shardlab-resume-local-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  FsdpTrainOptions o = bert_run(BertHead::kQuestionAnswering);
  o.steps = 1;
  o.checkpoint.dir = dir.string();
  o.checkpoint.type = fsdp::StateDictType::kLocal;
  ASSERT_TRUE(run_sim(o, 2).is_ok());
  const std::filesystem::path index = dir / "step-00000001" / "index.json";
  std::ifstream in(index);
  nlohmann::json j = nlohmann::json::parse(in);
  in.close();
  for (auto& unit : j["units"]) unit.erase("pieces");
  std::ofstream(index) << j.dump();
  ASSERT_TRUE(fsdp::reseal_index((dir / "step-00000001").string()).is_ok());
  device::cpu::CpuDevice dev;
  auto oracle = train_oracle(dev, o, 2, (dir / "step-00000001").string());
  ASSERT_FALSE(oracle.is_ok());
  EXPECT_NE(oracle.status().message().find("records no layout"), std::string::npos) << oracle.status().message();
  std::filesystem::remove_all(dir);
}

// NOTE [Default tolerance]: any bf16 in the policy gives torch.testing.assert_close's bf16
// pair, otherwise its fp32 pair.
TEST(BertFsdp, DefaultToleranceFollowsTheDtypes) {
  FsdpTrainOptions o = bert_run(BertHead::kQuestionAnswering);
  EXPECT_EQ(default_tolerance(o).dtype, "fp32");
  EXPECT_DOUBLE_EQ(default_tolerance(o).rtol, 1.3e-6);
  EXPECT_DOUBLE_EQ(default_tolerance(o).atol, 1e-5);
  for (int which = 0; which < 3; ++which) {
    FsdpTrainOptions b = o;
    if (which == 0) b.fsdp.param_dtype = DType::kBF16;
    if (which == 1) b.fsdp.reduce_dtype = DType::kBF16;
    if (which == 2) b.bert.compute_dtype = DType::kBF16;
    const Tolerance t = default_tolerance(b);
    EXPECT_EQ(t.dtype, "bf16") << which;
    EXPECT_DOUBLE_EQ(t.rtol, 1.6e-2) << which;
    EXPECT_DOUBLE_EQ(t.atol, 1e-5) << which;
  }
}

TEST(BertFsdp, PerLayerWrappingOfTheTiedMlmModelIsAClearError) {
  FsdpTrainOptions o = bert_run(BertHead::kMaskedLM);
  o.wrap = WrapPolicy::kPerLayer;
  auto r = run_sim(o, 2);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("tied to the word embeddings"), std::string::npos) << r.status().message();
}

TEST(BertFsdp, SequenceLongerThanThePositionTableIsRejected) {
  FsdpTrainOptions o = bert_run(BertHead::kSequenceClassification);
  o.bert.seq_len = 17;
  auto r = run_sim(o, 2);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("max_position_embeddings"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace shardlab::runtime::train
