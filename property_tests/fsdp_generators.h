// rapidcheck generators for the FSDP domain: shard layouts and small FSDP training runs
// (MLP and BERT).
// The domain's one generators header (one per domain, so properties share their
// generators); every property in property_tests/ draws from here.
#pragma once

#include <rapidcheck.h>

#include <ostream>
#include <vector>

#include "runtime/fsdp/options.h"
#include "runtime/train/fsdp_train.h"

namespace shardlab::property {

struct LayoutCase {
  std::vector<Shape> shapes;
  int world_size = 1;
  DType dtype = DType::kF32;
  std::int64_t align_bytes = 0;
};

inline std::ostream& operator<<(std::ostream& os, const LayoutCase& c) {
  os << "LayoutCase{world=" << c.world_size << ", dtype=" << dtype_name(c.dtype) << ", align=" << c.align_bytes
     << ", shapes=";
  for (const auto& s : c.shapes) os << shape_to_string(s);
  return os << "}";
}

// Parameter shapes including 1-element and tiny ones, so that W > numel (ranks owning
// only padding) comes up often; world sizes 1–64.
inline rc::Gen<Shape> gen_shape() {
  return rc::gen::oneOf(rc::gen::container<Shape>(1, rc::gen::inRange<std::int64_t>(1, 4)),
                        rc::gen::container<Shape>(2, rc::gen::inRange<std::int64_t>(1, 12)),
                        rc::gen::container<Shape>(1, rc::gen::inRange<std::int64_t>(1, 200)));
}

inline rc::Gen<LayoutCase> gen_layout_case() {
  return rc::gen::build<LayoutCase>(
      rc::gen::set(&LayoutCase::shapes,
                   rc::gen::resize(12, rc::gen::nonEmpty(rc::gen::container<std::vector<Shape>>(gen_shape())))),
      rc::gen::set(&LayoutCase::world_size, rc::gen::inRange(1, 65)),
      rc::gen::set(&LayoutCase::dtype, rc::gen::element(DType::kF32, DType::kBF16, DType::kF16, DType::kI64)),
      rc::gen::set(&LayoutCase::align_bytes, rc::gen::element<std::int64_t>(0, 16)));
}

struct FsdpCase {
  runtime::train::FsdpTrainOptions options;
  int world_size = 1;
};

inline std::ostream& operator<<(std::ostream& os, const FsdpCase& c) {
  const auto& o = c.options;
  return os << "FsdpCase{world=" << c.world_size << ", fsdp" << o.fsdp.version
            << ", strategy=" << runtime::fsdp::strategy_name(o.fsdp.strategy)
            << ", reshard_after_forward_size=" << o.fsdp.reshard_after_forward_size
            << ", prefetch_units=" << o.fsdp.forward_prefetch_units << "/" << o.fsdp.backward_prefetch_units
            << ", prefetch=" << runtime::fsdp::prefetch_name(o.fsdp.backward_prefetch)
            << ", forward_prefetch=" << o.fsdp.forward_prefetch << ", limit=" << o.fsdp.limit_all_gathers
            << ", dpn=" << o.fsdp.devices_per_node << ", align=" << o.fsdp.align_bytes << ", mlp=" << o.model.input_dim
            << "/" << o.model.hidden_dim << "x" << o.model.num_hidden_layers << "/" << o.model.num_classes
            << ", batch=" << o.global_batch << ", accum=" << o.grad_accumulation << ", steps=" << o.steps
            << ", wrap=" << static_cast<int>(o.wrap) << ", min_params=" << o.min_num_params
            << ", optimizer=" << runtime::optim::optimizer_name(o.optimizer.kind)
            << ", frozen_mask=" << o.model.frozen_mask << ", seed=" << o.seed << "}";
}

// Inside a gen::exec: FSDP1 or FSDP2, every sharding strategy (hybrid ones with a random
// devices_per_node dividing the world size), prefetch mode, forward prefetch and
// all-gather limit.
inline void gen_fsdp_schedule(int world_size, runtime::fsdp::FsdpOptions& o) {
  using runtime::fsdp::BackwardPrefetch;
  using runtime::fsdp::ShardingStrategy;
  o.strategy =
      *rc::gen::element(ShardingStrategy::kFullShard, ShardingStrategy::kShardGradOp, ShardingStrategy::kNoShard,
                        ShardingStrategy::kHybridShard, ShardingStrategy::kHybridShardZero2);
  if (runtime::fsdp::is_hybrid(o.strategy)) {
    std::vector<int> divisors;
    for (int d = 1; d <= world_size; ++d)
      if (world_size % d == 0) divisors.push_back(d);
    o.devices_per_node = *rc::gen::elementOf(divisors);
  }
  o.backward_prefetch =
      *rc::gen::element(BackwardPrefetch::kNone, BackwardPrefetch::kBackwardPre, BackwardPrefetch::kBackwardPost);
  o.forward_prefetch = *rc::gen::arbitrary<bool>();
  o.limit_all_gathers = *rc::gen::arbitrary<bool>();
  o.version = *rc::gen::element(1, 2);
  // FSDP2's reshard_after_forward=N: a divisor of the world size strictly between 1 and it.
  std::vector<int> groups;
  for (int d = 2; d < world_size; ++d)
    if (world_size % d == 0) groups.push_back(d);
  if (o.version == 2 && o.strategy == ShardingStrategy::kFullShard && !groups.empty() && *rc::gen::arbitrary<bool>())
    o.reshard_after_forward_size = *rc::gen::elementOf(groups);
  // FSDP2's explicit prefetch of 0 (not set) to 3 units each way.
  if (o.version == 2) {
    o.forward_prefetch_units = *rc::gen::inRange(0, 4);
    o.backward_prefetch_units = *rc::gen::inRange(0, 4);
  }
}

// A small random FSDP run: MLP dims, world size 1–8, every strategy and prefetch mode,
// gradient accumulation, wrap policies, SGD (with momentum/weight decay) or AdamW.
inline rc::Gen<FsdpCase> gen_fsdp_case() {
  using namespace runtime;
  return rc::gen::exec([] {
    FsdpCase c;
    auto& o = c.options;
    c.world_size = *rc::gen::inRange(1, 9);
    o.model.input_dim = *rc::gen::inRange<std::int64_t>(1, 9);
    o.model.hidden_dim = *rc::gen::inRange<std::int64_t>(1, 12);
    o.model.num_classes = *rc::gen::inRange<std::int64_t>(2, 5);
    o.model.num_hidden_layers = *rc::gen::inRange(0, 4);
    o.model.activation =
        *rc::gen::element(device::Activation::kRelu, device::Activation::kGelu, device::Activation::kGeluTanh);
    // Frozen parameters (LoRA-style mixed requires_grad) in a quarter of the cases.
    o.model.frozen_mask = *rc::gen::weightedOneOf<std::uint64_t>(
        {{3, rc::gen::just<std::uint64_t>(0)}, {1, rc::gen::inRange<std::uint64_t>(0, 1u << 10)}});
    o.grad_accumulation = *rc::gen::inRange(1, 3);
    o.global_batch = static_cast<std::int64_t>(c.world_size) * o.grad_accumulation * *rc::gen::inRange(1, 4);
    o.steps = *rc::gen::inRange(1, 4);
    o.seed = *rc::gen::inRange<std::uint64_t>(0, 1000);
    gen_fsdp_schedule(c.world_size, o.fsdp);
    o.fsdp.align_bytes = *rc::gen::element<std::int64_t>(0, 16);
    o.wrap = *rc::gen::element(train::WrapPolicy::kPerLayer, train::WrapPolicy::kNone, train::WrapPolicy::kBySize,
                               train::WrapPolicy::kByClass);
    o.min_num_params = *rc::gen::inRange<std::int64_t>(1, 200);
    o.optimizer.kind = *rc::gen::element(optim::OptimizerConfig::Kind::kSgd, optim::OptimizerConfig::Kind::kAdamW);
    o.optimizer.lr = o.optimizer.kind == optim::OptimizerConfig::Kind::kSgd ? 0.1f : 0.01f;
    o.optimizer.momentum = *rc::gen::element(0.0f, 0.9f);
    o.optimizer.weight_decay = *rc::gen::element(0.0f, 0.01f);
    return c;
  });
}

struct BertCase {
  int world_size = 1;
  runtime::train::FsdpTrainOptions options;
};

inline std::ostream& operator<<(std::ostream& os, const BertCase& c) {
  using namespace runtime;
  const auto& b = c.options.bert;
  return os << "BertCase{W=" << c.world_size << ", head=" << model::bert_head_name(b.head)
            << ", V=" << b.config.vocab_size << ", H=" << b.config.hidden_size << ", A=" << b.config.num_attention_heads
            << ", I=" << b.config.intermediate_size << ", L=" << b.config.num_hidden_layers << ", T=" << b.seq_len
            << ", dropout=" << b.config.hidden_dropout_prob << ", ckpt=" << b.activation_checkpointing << ", fsdp"
            << c.options.fsdp.version << ", strategy=" << fsdp::strategy_name(c.options.fsdp.strategy)
            << ", reshard_after_forward_size=" << c.options.fsdp.reshard_after_forward_size
            << ", dpn=" << c.options.fsdp.devices_per_node
            << ", prefetch=" << fsdp::prefetch_name(c.options.fsdp.backward_prefetch)
            << ", fwd_prefetch=" << c.options.fsdp.forward_prefetch << ", B=" << c.options.global_batch
            << ", accum=" << c.options.grad_accumulation << ", steps=" << c.options.steps
            << ", wrap_none=" << (c.options.wrap == train::WrapPolicy::kNone) << ", seed=" << c.options.seed << "}";
}

// A small random BERT FSDP run: every head, sizes from a few to a few dozen, dropout,
// activation checkpointing, gradient accumulation, every strategy and prefetch mode, the
// transformer-layer policy (each BertLayer a unit) or no auto-wrap, SGD or AdamW.
inline rc::Gen<BertCase> gen_bert_case() {
  return rc::gen::exec([] {
    using namespace runtime;
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

}  // namespace shardlab::property
