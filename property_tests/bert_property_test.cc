// BERT property: for random small BERT configs, heads, world sizes, strategies, prefetch
// modes, dropout, activation checkpointing and accumulation, FSDP on simulated ranks gives
// gradients, parameters and losses bitwise equal to the unsharded oracle.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cmath>

#include "property_tests/fsdp_generators.h"
#include "runtime/device/cpu/device.h"
#include "runtime/train/fsdp_train.h"
#include "sim/engine/world.h"

namespace shardlab::property {
namespace {

using namespace runtime;

struct BertCase {
  int world_size = 1;
  train::FsdpTrainOptions options;
};

std::ostream& operator<<(std::ostream& os, const BertCase& c) {
  const auto& b = c.options.bert;
  return os << "BertCase{W=" << c.world_size << ", head=" << model::bert_head_name(b.head) << ", V="
            << b.config.vocab_size << ", H=" << b.config.hidden_size << ", A=" << b.config.num_attention_heads
            << ", I=" << b.config.intermediate_size << ", L=" << b.config.num_hidden_layers << ", T=" << b.seq_len
            << ", dropout=" << b.config.hidden_dropout_prob << ", ckpt=" << b.activation_checkpointing
            << ", strategy=" << fsdp::strategy_name(c.options.fsdp.strategy)
            << ", dpn=" << c.options.fsdp.devices_per_node
            << ", prefetch=" << fsdp::prefetch_name(c.options.fsdp.backward_prefetch)
            << ", fwd_prefetch=" << c.options.fsdp.forward_prefetch << ", B=" << c.options.global_batch
            << ", accum=" << c.options.grad_accumulation << ", steps=" << c.options.steps
            << ", wrap_none=" << (c.options.wrap == train::WrapPolicy::kNone) << ", seed=" << c.options.seed << "}";
}

rc::Gen<BertCase> gen_bert_case() {
  return rc::gen::exec([] {
    BertCase c;
    auto& o = c.options;
    auto& cfg = o.bert.config;
    c.world_size = *rc::gen::inRange(1, 7);
    o.model_kind = train::ModelKind::kBert;
    o.bert.head = *rc::gen::element(model::BertHead::kSequenceClassification, model::BertHead::kMaskedLM,
                                    model::BertHead::kQuestionAnswering);
    cfg.vocab_size = *rc::gen::inRange<std::int64_t>(105, 160);
    cfg.num_attention_heads = *rc::gen::inRange(1, 4);
    cfg.hidden_size = cfg.num_attention_heads * *rc::gen::element<std::int64_t>(2, 4, 8);
    cfg.intermediate_size = *rc::gen::inRange<std::int64_t>(4, 33);
    cfg.num_hidden_layers = *rc::gen::inRange(0, 4);
    cfg.type_vocab_size = *rc::gen::inRange<std::int64_t>(1, 3);
    cfg.num_labels = *rc::gen::inRange<std::int64_t>(2, 5);
    cfg.hidden_act = *rc::gen::element(device::Activation::kGelu, device::Activation::kGeluTanh);
    const float dropout = *rc::gen::element(0.0f, 0.1f, 0.3f);
    cfg.hidden_dropout_prob = cfg.attention_probs_dropout_prob = dropout;
    o.bert.seq_len = *rc::gen::inRange<std::int64_t>(2, 9);
    cfg.max_position_embeddings = o.bert.seq_len + *rc::gen::inRange<std::int64_t>(0, 4);
    o.bert.activation_checkpointing = *rc::gen::arbitrary<bool>();
    o.grad_accumulation = *rc::gen::inRange(1, 3);
    o.global_batch = static_cast<std::int64_t>(c.world_size) * o.grad_accumulation * *rc::gen::inRange(1, 3);
    o.steps = *rc::gen::inRange(1, 3);
    o.seed = *rc::gen::inRange<std::uint64_t>(0, 1000);
    gen_fsdp_schedule(c.world_size, o.fsdp);
    // The transformer-layer policy (each BertLayer a unit) or no auto-wrap.
    o.wrap = *rc::gen::element(train::WrapPolicy::kByClass, train::WrapPolicy::kNone);
    o.optimizer.kind = *rc::gen::element(optim::OptimizerConfig::Kind::kSgd, optim::OptimizerConfig::Kind::kAdamW);
    o.optimizer.lr = o.optimizer.kind == optim::OptimizerConfig::Kind::kSgd ? 0.1f : 0.01f;
    return c;
  });
}

RC_GTEST_PROP(BertProperty, FsdpEqualsUnshardedOracleBitwise, ()) {
  const BertCase c = *gen_bert_case();
  RC_TAG(model::bert_head_name(c.options.bert.head));
  sim::WorldOptions wo;
  wo.world_size = c.world_size;
  sim::World world(wo);
  train::FsdpTrainResult rank0;
  const auto results = world.run([&](sim::RankContext& ctx) -> Status {
    SHARDLAB_ASSIGN_OR_RETURN(train::FsdpTrainResult r, train::train_fsdp(ctx.comm, ctx.device, ctx.clock, c.options));
    if (ctx.rank == 0) rank0 = std::move(r);
    return Status::ok();
  });
  for (const auto& r : results) {
    if (!r.status.is_ok()) RC_FAIL(r.status.to_string());
  }
  device::cpu::CpuDevice dev;
  auto oracle = train::train_oracle(dev, c.options, c.world_size);
  if (!oracle.is_ok()) RC_FAIL(oracle.status().to_string());
  const train::Comparison cmp = train::compare(rank0, *oracle);
  if (!cmp.bitwise) RC_FAIL(cmp.describe());
  // Finite, except a step whose global batch has no target: NaN, as PyTorch's mean over
  // no targets (NOTE [Loss without targets] in runtime/train/fsdp_train.h).
  const model::Bert bert(c.options.bert);
  for (std::size_t step = 0; step < rank0.losses.size(); ++step) {
    auto batch = bert.synthetic_batch(dev, c.options.seed, static_cast<std::int64_t>(step), 0, c.options.global_batch);
    if (!batch.is_ok()) RC_FAIL(batch.status().to_string());
    auto targets = bert.count_targets(*batch);
    if (!targets.is_ok()) RC_FAIL(targets.status().to_string());
    const bool none = std::any_of(targets->begin(), targets->end(), [](std::int64_t n) { return n == 0; });
    if (none) RC_TAG("a step without targets");
    const bool expected = none ? std::isnan(rank0.losses[step]) : std::isfinite(rank0.losses[step]);
    RC_ASSERT(expected);
  }
}

}  // namespace
}  // namespace shardlab::property
