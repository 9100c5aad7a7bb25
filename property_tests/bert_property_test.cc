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
#include "testing/sim_world.h"

namespace shardlab::property {
namespace {

using namespace runtime;

RC_GTEST_PROP(BertProperty, FsdpEqualsUnshardedOracleBitwise, ()) {
  const BertCase c = *gen_bert_case();
  RC_TAG(model::bert_head_name(c.options.bert.head));
  sim::WorldOptions wo;
  wo.world_size = c.world_size;
  auto ranks = testlib::train_fsdp_on_sim(c.options, wo);
  if (!ranks.is_ok()) RC_FAIL(ranks.status().to_string());
  const train::FsdpTrainResult& rank0 = (*ranks)[0];
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
