#include "cli/scenario.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "testing/status_matchers.h"

using shardlab::testlib::IsOk;

namespace shardlab::cli {
namespace {

namespace fs = std::filesystem;
using runtime::fsdp::BackwardPrefetch;
using runtime::fsdp::ShardingStrategy;
using runtime::fsdp::StateDictType;
using runtime::model::BertHead;

Result<Scenario> parse(const std::string& text, const ScenarioOverrides& o = {}) {
  return parse_scenario("s.yaml", text, o);
}

// The status is INVALID_ARGUMENT, its message starts with `prefix` (the position) and
// contains every word of `words`.
void expect_error(const Result<Scenario>& r, const std::string& prefix, const std::vector<std::string>& words) {
  ASSERT_FALSE(r.is_ok()) << "expected an error starting with " << prefix;
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().to_string();
  const std::string& m = r.status().message();
  EXPECT_EQ(m.rfind(prefix, 0), 0u) << "message: " << m << "\nexpected prefix: " << prefix;
  for (const auto& w : words) EXPECT_NE(m.find(w), std::string::npos) << "message: " << m << "\nmissing: " << w;
}

// A fresh folder per test for scenario-relative files.
class ScenarioFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("shardlab_scenario_test_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& content) {
    const fs::path p = dir_ / name;
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << content;
    return p.string();
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

// ---------------------------------------------------------------------------------------
// Good input.

TEST(Scenario, NameAloneGivesEveryDefault) {
  auto r = parse("name: smoke\n");
  ASSERT_THAT(r, IsOk());
  const Scenario& s = *r;
  const Scenario d;
  EXPECT_EQ(s.path, "s.yaml");
  EXPECT_EQ(s.name, "smoke");
  EXPECT_EQ(s.seed, 0u);
  EXPECT_EQ(s.model.preset, "bert-tiny");
  EXPECT_EQ(s.model.head, BertHead::kMaskedLM);
  EXPECT_EQ(s.model.weights, "random");
  EXPECT_EQ(s.data.kind, DataKind::kSynthetic);
  EXPECT_EQ(s.data.batch_size_per_rank, 2);
  EXPECT_EQ(s.data.seq_len, 64);
  EXPECT_EQ(s.train.steps, 5);
  EXPECT_EQ(s.train.optimizer.lr, d.train.optimizer.lr);
  EXPECT_EQ(s.train.optimizer.beta2, 0.999);
  EXPECT_EQ(s.fsdp.sharding_strategy, ShardingStrategy::kFullShard);
  EXPECT_EQ(s.fsdp.transformer_layer_cls_to_wrap, std::vector<std::string>{"BertLayer"});
  EXPECT_EQ(s.world.world_size(), 8);
  EXPECT_EQ(s.world.device, "cpu");
  EXPECT_TRUE(s.faults.empty());
  EXPECT_FALSE(s.expect.grads_match_unsharded.has_value());
  EXPECT_FALSE(s.expect.max_peak_memory_per_rank.has_value());
  EXPECT_EQ(to_yaml(s), to_yaml([] {
              Scenario x;
              x.path = "s.yaml";
              x.name = "smoke";
              return x;
            }()));
  // Positions: given keys point at their value; others at the file.
  EXPECT_EQ(s.where("name").to_string(), "s.yaml:1:7");
  EXPECT_EQ(s.where("train.steps").to_string(), "s.yaml");
}

TEST_F(ScenarioFiles, FullScenarioWithEveryKey) {
  write("hf/config.json", R"({"model_type": "bert", "max_position_embeddings": 1024, "hidden_size": 128,
                            "num_attention_heads": 2})");
  write("hf/model.safetensors", "x");
  write("data/batch.safetensors", "x");
  write("profiles/dev.yaml", "name: dev\n");
  write("profiles/topo.json", "{}");
  const std::string text = R"(name: full-run_1.0
description: "every key, none at its default"
seed: 18446744073709551615
model:
  preset: bert-base
  config: hf/config.json
  head: qa
  weights: hf/model.safetensors
data:
  kind: file
  path: data/batch.safetensors
  batch_size_per_rank: 12
  seq_len: 1000
train:
  steps: 7
  grad_accumulation: 3
  max_grad_norm: 0.5
  precision: bf16
  optimizer:
    name: sgd
    lr: 3e-5
    weight_decay: 0.01
    betas: [0.8, 0.95]
    eps: 1e-6
    momentum: 0.9
fsdp:
  sharding_strategy: HYBRID_SHARD
  auto_wrap_policy: size
  transformer_layer_cls_to_wrap: [BertLayer, BertEmbeddings]
  min_num_params: 1000
  backward_prefetch: BACKWARD_POST
  forward_prefetch: true
  limit_all_gathers: false
  async_reduction: false
  use_orig_params: false
  sync_module_states: true
  cpu_offload: true
  activation_checkpointing: true
  state_dict_type: SHARDED_STATE_DICT
  mixed_precision:
    param_dtype: bf16
    reduce_dtype: fp32
    buffer_dtype: fp16
world:
  backend: mpi
  mode: timing
  nodes: 2
  devices_per_node: 4
  device: profiles/dev.yaml
  topology: profiles/topo.json
faults:
  - {kind: crash, rank: 7, step: 6}
  - kind: link_degraded
    link: 0-7
    time_ms: 12.5
    factor: 0.25
  - {kind: straggler, rank: 3, factor: 2}
checkpoint:
  dir: ckpt
  every_steps: 2
  resume: true
expect:
  grads_match_unsharded: {rtol: 1e-4, atol: 1e-6}
  max_peak_memory_per_rank: 2 GiB
  min_samples_per_s: 100
  max_step_time_s: 1.5
  final_loss_below: 9.75
)";
  const std::string file = write("scenario.yaml", text);
  auto r = load_scenario(file);
  ASSERT_THAT(r, IsOk());
  const Scenario& s = *r;
  EXPECT_EQ(s.path, file);
  EXPECT_EQ(s.name, "full-run_1.0");
  EXPECT_EQ(s.description, "every key, none at its default");
  EXPECT_EQ(s.seed, 18446744073709551615ull);
  EXPECT_EQ(s.model.preset, "bert-base");
  // Paths in a file are relative to its folder (NOTE [Relative paths]).
  EXPECT_EQ(s.model.config, path("hf/config.json"));
  EXPECT_EQ(s.model.head, BertHead::kQuestionAnswering);
  EXPECT_EQ(s.model.weights, path("hf/model.safetensors"));
  EXPECT_EQ(s.data.kind, DataKind::kFile);
  EXPECT_EQ(s.data.path, path("data/batch.safetensors"));
  EXPECT_EQ(s.data.batch_size_per_rank, 12);
  EXPECT_EQ(s.data.seq_len, 1000);
  EXPECT_EQ(s.train.steps, 7);
  EXPECT_EQ(s.train.grad_accumulation, 3);
  EXPECT_EQ(s.train.max_grad_norm, 0.5);
  EXPECT_EQ(s.train.precision, DType::kBF16);
  EXPECT_EQ(s.train.optimizer.name, runtime::optim::OptimizerConfig::Kind::kSgd);
  EXPECT_EQ(s.train.optimizer.lr, 3e-5);
  EXPECT_EQ(s.train.optimizer.weight_decay, 0.01);
  EXPECT_EQ(s.train.optimizer.beta1, 0.8);
  EXPECT_EQ(s.train.optimizer.beta2, 0.95);
  EXPECT_EQ(s.train.optimizer.eps, 1e-6);
  EXPECT_EQ(s.train.optimizer.momentum, 0.9);
  EXPECT_EQ(s.fsdp.sharding_strategy, ShardingStrategy::kHybridShard);
  EXPECT_EQ(s.fsdp.auto_wrap_policy, AutoWrapPolicy::kSize);
  EXPECT_EQ(s.fsdp.transformer_layer_cls_to_wrap, (std::vector<std::string>{"BertLayer", "BertEmbeddings"}));
  EXPECT_EQ(s.fsdp.min_num_params, 1000);
  EXPECT_EQ(s.fsdp.backward_prefetch, BackwardPrefetch::kBackwardPost);
  EXPECT_TRUE(s.fsdp.forward_prefetch);
  EXPECT_FALSE(s.fsdp.limit_all_gathers);
  EXPECT_FALSE(s.fsdp.async_reduction);
  EXPECT_FALSE(s.fsdp.use_orig_params);
  EXPECT_TRUE(s.fsdp.sync_module_states);
  EXPECT_TRUE(s.fsdp.cpu_offload);
  EXPECT_TRUE(s.fsdp.activation_checkpointing);
  EXPECT_EQ(s.fsdp.state_dict_type, StateDictType::kSharded);
  EXPECT_EQ(s.fsdp.mixed_precision.param_dtype, DType::kBF16);
  EXPECT_EQ(s.fsdp.mixed_precision.reduce_dtype, DType::kF32);
  EXPECT_EQ(s.fsdp.mixed_precision.buffer_dtype, DType::kF16);
  EXPECT_EQ(s.world.backend->name, "mpi");
  EXPECT_EQ(s.world.mode, RunMode::kTiming);
  EXPECT_EQ(s.world.world_size(), 8);
  EXPECT_EQ(s.world.device, path("profiles/dev.yaml"));
  EXPECT_EQ(s.world.topology, path("profiles/topo.json"));
  ASSERT_EQ(s.faults.size(), 3u);
  EXPECT_EQ(s.faults[0].kind, sim::FaultKind::kCrash);
  EXPECT_EQ(s.faults[0].rank, 7);
  EXPECT_EQ(s.faults[0].step, 6);
  EXPECT_EQ(s.faults[0].time_ms, -1.0);
  EXPECT_EQ(s.faults[0].pos.to_string(), file + ":52:5");
  EXPECT_EQ(s.faults[1].kind, sim::FaultKind::kLinkDegrade);  // the old spelling is an alias
  EXPECT_EQ(s.faults[1].link, "0-7");
  EXPECT_EQ(s.faults[1].rank, -1);
  EXPECT_EQ(s.faults[1].time_ms, 12.5);
  EXPECT_EQ(s.faults[1].factor, 0.25);
  EXPECT_EQ(s.faults[1].pos.to_string(), file + ":53:5");
  EXPECT_EQ(s.faults[2].factor, 2.0);
  EXPECT_EQ(s.checkpoint.dir, path("ckpt"));
  EXPECT_EQ(s.checkpoint.every_steps, 2);
  EXPECT_TRUE(s.checkpoint.resume);
  ASSERT_TRUE(s.expect.grads_match_unsharded.has_value());
  EXPECT_EQ(s.expect.grads_match_unsharded->rtol, 1e-4);
  EXPECT_EQ(s.expect.grads_match_unsharded->atol, 1e-6);
  EXPECT_EQ(s.expect.max_peak_memory_per_rank, std::int64_t{2} << 30);
  EXPECT_EQ(s.expect.min_samples_per_s, 100.0);
  EXPECT_EQ(s.expect.max_step_time_s, 1.5);
  EXPECT_EQ(s.expect.final_loss_below, 9.75);
  EXPECT_EQ(s.where("train.optimizer.lr").to_string(), file + ":21:9");
  EXPECT_EQ(s.where("faults[1].link").to_string(), file + ":54:11");

  // Round trip: the canonical YAML reads back to the same scenario.
  auto again = parse_scenario(file, to_yaml(s));
  ASSERT_THAT(again, IsOk()) << to_yaml(s);
  EXPECT_EQ(to_yaml(*again), to_yaml(s));
  EXPECT_EQ(again->train.optimizer.lr, s.train.optimizer.lr);
  EXPECT_EQ(again->faults[1].link, "0-7");
  EXPECT_EQ(again->expect.max_peak_memory_per_rank, s.expect.max_peak_memory_per_rank);
}

TEST(Scenario, ToYamlRoundTripsAwkwardValues) {
  Scenario s;
  s.path = "s.yaml";
  s.name = "x";
  s.description = "quotes \" and \\ backslash, a: colon, # hash\nsecond line\ttab, ünïcödé, 'single'";
  s.seed = 42;
  s.train.optimizer.lr = 0.1 + 0.2;  // not a short decimal
  s.train.optimizer.eps = 1e-300;
  s.train.max_grad_norm = 1.0 / 3.0;
  s.fsdp.transformer_layer_cls_to_wrap = {"BertLayer", "my.module.Block"};
  s.expect.grads_match_unsharded = Scenario::Tolerance{};
  s.expect.final_loss_below = -2.5;
  s.faults.push_back({sim::FaultKind::kHang, 2, -1, 3.25, "", 1.0, -1, false, -1, Scenario::Fault{}.offset, {}});
  const std::string y = to_yaml(s);
  auto r = parse_scenario("s.yaml", y);
  ASSERT_THAT(r, IsOk()) << y;
  EXPECT_EQ(r->description, s.description);
  EXPECT_EQ(r->train.optimizer.lr, s.train.optimizer.lr);
  EXPECT_EQ(r->train.optimizer.eps, s.train.optimizer.eps);
  EXPECT_EQ(r->train.max_grad_norm, s.train.max_grad_norm);
  EXPECT_EQ(r->fsdp.transformer_layer_cls_to_wrap, s.fsdp.transformer_layer_cls_to_wrap);
  EXPECT_EQ(r->expect.grads_match_unsharded->rtol, Scenario::Tolerance{}.rtol);
  ASSERT_EQ(r->faults.size(), 1u);
  EXPECT_EQ(r->faults[0].time_ms, 3.25);
  EXPECT_EQ(r->faults[0].rank, 2);
  EXPECT_EQ(to_yaml(*r), y);
}

// The resolved scenario keeps "no tolerance stated" (so a replay in the simulator still
// demands bitwise) and only the tolerance keys the file stated.
TEST(Scenario, ToYamlKeepsOnlyTheStatedTolerance) {
  for (const char* expect : {"true", "{atol: 0.001}", "{rtol: 0.01, atol: 0.001}"}) {
    auto s = parse_scenario("s.yaml", std::string("name: a\nexpect:\n  grads_match_unsharded: ") + expect + "\n");
    ASSERT_THAT(s, IsOk());
    const std::string y = to_yaml(*s);
    auto r = parse_scenario("r.yaml", y);
    ASSERT_THAT(r, IsOk()) << y;
    for (const char* key : {"expect.grads_match_unsharded.rtol", "expect.grads_match_unsharded.atol"}) {
      EXPECT_EQ(s->positions.count(key), r->positions.count(key)) << expect << " " << key << "\n" << y;
    }
    EXPECT_EQ(r->expect.grads_match_unsharded->rtol, s->expect.grads_match_unsharded->rtol);
    EXPECT_EQ(r->expect.grads_match_unsharded->atol, s->expect.grads_match_unsharded->atol);
  }
}

// NOTE [Traced ranks]: trace.ranks as a list or a string of ranks and ranges, sorted and
// deduplicated, kept by to_yaml; anything else, or a rank outside the world, exit 2 at
// its position.
TEST(Scenario, TraceRanksChooseWhichRanksTheTraceHolds) {
  auto list = parse("name: a\nworld: {nodes: 512}\ntrace:\n  ranks: [4095, 0, 1, 1]\n");
  ASSERT_THAT(list, IsOk());
  EXPECT_EQ(list->trace.ranks, (std::vector<int>{0, 1, 4095}));
  auto ranges = parse("name: a\nworld: {nodes: 512}\ntrace:\n  ranks: \"0-3, 8, 4094-4095\"\n");
  ASSERT_THAT(ranges, IsOk());
  EXPECT_EQ(ranges->trace.ranks, (std::vector<int>{0, 1, 2, 3, 8, 4094, 4095}));
  auto back = parse(to_yaml(*ranges));
  ASSERT_THAT(back, IsOk());
  EXPECT_EQ(back->trace.ranks, ranges->trace.ranks);
  EXPECT_TRUE(parse("name: a\n")->trace.ranks.empty());  // default: every rank (timing: 0-7)
  expect_error(parse("name: a\ntrace:\n  ranks: [0, 8]\n"), "s.yaml:3:10:", {"rank 8", "world (size 8)", "0 to 7"});
  expect_error(parse("name: a\ntrace:\n  ranks: \"5-2\"\n"), "s.yaml:3:10:", {"'5-2'", "not a rank or a range"});
  expect_error(parse("name: a\ntrace:\n  ranks: [a]\n"), "s.yaml:3:11:", {"'a'", "allowed: a list of ranks"});
  expect_error(parse("name: a\ntrace:\n  ranks: [-1]\n"), "s.yaml:3:11:", {"'-1'"});
  expect_error(parse("name: a\ntrace:\n  ranks: []\n"), "s.yaml:3:10:", {"expected ranks"});
  expect_error(parse("name: a\ntrace:\n  ranks: {a: 1}\n"), "s.yaml:3:10:", {"expected ranks"});
}

// NOTE [Resume]: resume takes true, false or if_present; to_yaml keeps it.
TEST(Scenario, ResumeIfPresent) {
  auto s = parse("name: a\ncheckpoint:\n  dir: c\n  resume: if_present\n");
  ASSERT_THAT(s, IsOk());
  EXPECT_TRUE(s->checkpoint.resume);
  EXPECT_TRUE(s->checkpoint.resume_if_present);
  auto back = parse(to_yaml(*s));
  ASSERT_THAT(back, IsOk());
  EXPECT_TRUE(back->checkpoint.resume_if_present);
  auto plain = parse("name: a\ncheckpoint:\n  dir: c\n  resume: true\n");
  ASSERT_TRUE(plain.is_ok());
  EXPECT_FALSE(plain->checkpoint.resume_if_present);
  expect_error(parse("name: a\ncheckpoint:\n  dir: c\n  resume: maybe\n"), "s.yaml:4:11:", {"if_present"});
}

TEST(Scenario, AccelerateNamesAndNumbers) {
  const char* names[] = {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "_HYBRID_SHARD_ZERO2"};
  const ShardingStrategy strategies[] = {ShardingStrategy::kFullShard, ShardingStrategy::kShardGradOp,
                                         ShardingStrategy::kNoShard, ShardingStrategy::kHybridShard,
                                         ShardingStrategy::kHybridShardZero2};
  for (int i = 1; i <= 5; ++i) {
    auto by_number = parse("name: a\nfsdp:\n  fsdp_sharding_strategy: " + std::to_string(i) + "\n");
    ASSERT_THAT(by_number, IsOk());
    EXPECT_EQ(by_number->fsdp.sharding_strategy, strategies[i - 1]);
    auto quoted = parse("name: a\nfsdp:\n  fsdp_sharding_strategy: \"" + std::to_string(i) + "\"\n");
    ASSERT_THAT(quoted, IsOk());
    EXPECT_EQ(quoted->fsdp.sharding_strategy, strategies[i - 1]);
    auto by_name = parse(std::string("name: a\nfsdp:\n  fsdp_sharding_strategy: ") + names[i - 1] + "\n");
    ASSERT_THAT(by_name, IsOk());
    EXPECT_EQ(by_name->fsdp.sharding_strategy, strategies[i - 1]);
  }
  auto r = parse(R"(name: a
fsdp:
  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP
  fsdp_backward_prefetch_policy: NO_PREFETCH
  fsdp_transformer_layer_cls_to_wrap: "BertLayer, BertEmbeddings"
  fsdp_offload_params: "true"
  fsdp_use_orig_params: "false"
  fsdp_sync_module_states: "True"
  fsdp_forward_prefetch: true
  fsdp_state_dict_type: LOCAL_STATE_DICT
  fsdp_min_num_params: 2000
  fsdp_activation_checkpointing: "true"
  fsdp_cpu_ram_efficient_loading: true
  fsdp_version: 1
)");
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->fsdp.auto_wrap_policy, AutoWrapPolicy::kTransformer);
  EXPECT_EQ(r->fsdp.backward_prefetch, BackwardPrefetch::kNone);
  EXPECT_EQ(r->fsdp.transformer_layer_cls_to_wrap, (std::vector<std::string>{"BertLayer", "BertEmbeddings"}));
  EXPECT_TRUE(r->fsdp.cpu_offload);
  EXPECT_FALSE(r->fsdp.use_orig_params);
  EXPECT_TRUE(r->fsdp.sync_module_states);
  EXPECT_TRUE(r->fsdp.forward_prefetch);
  EXPECT_EQ(r->fsdp.state_dict_type, StateDictType::kLocal);
  EXPECT_EQ(r->fsdp.min_num_params, 2000);
  EXPECT_TRUE(r->fsdp.activation_checkpointing);
  // The canonical name of the key records the position.
  EXPECT_EQ(r->where("fsdp.cpu_offload").to_string(), "s.yaml:6:24");

  auto wrap =
      parse("name: a\nfsdp:\n  fsdp_auto_wrap_policy: SIZE_BASED_WRAP\n  fsdp_backward_prefetch: BACKWARD_PRE\n");
  ASSERT_THAT(wrap, IsOk());
  EXPECT_EQ(wrap->fsdp.auto_wrap_policy, AutoWrapPolicy::kSize);
  auto lower = parse("name: a\nfsdp:\n  sharding_strategy: full_shard\n  backward_prefetch: backward_post\n");
  ASSERT_THAT(lower, IsOk());
  EXPECT_EQ(lower->fsdp.sharding_strategy, ShardingStrategy::kFullShard);
  EXPECT_EQ(lower->fsdp.backward_prefetch, BackwardPrefetch::kBackwardPost);

  expect_error(parse("name: a\nfsdp:\n  fsdp_sharding_strategy: 6\n"),
               "s.yaml:3:27:", {"fsdp.sharding_strategy", "'6'", "FULL_SHARD", "1-5"});
  auto v2 = parse("name: a\nfsdp:\n  fsdp_version: 2\n");
  ASSERT_THAT(v2, IsOk());
  EXPECT_EQ(v2->fsdp.version, 2);
  // accelerate's FSDP2 spelling of the strategy: reshard_after_forward on a 1-D mesh.
  for (const auto& [value, strategy] :
       {std::pair{"true", ShardingStrategy::kFullShard}, std::pair{"false", ShardingStrategy::kShardGradOp}}) {
    auto r = parse(std::string("name: a\nfsdp:\n  fsdp_version: 2\n  fsdp_reshard_after_forward: ") + value + "\n");
    ASSERT_THAT(r, IsOk());
    EXPECT_EQ(r->fsdp.sharding_strategy, strategy) << value;
  }
  expect_error(parse("name: a\nfsdp:\n  fsdp_reshard_after_forward: maybe\n"), "s.yaml:3:31:",
               {"fsdp.reshard_after_forward: expected true, false or a group size, got 'maybe'",
                "true (FULL_SHARD), false (SHARD_GRAD_OP)"});
  // Both keys in one file must agree, whichever comes first (NOTE [reshard_after_forward]).
  expect_error(parse("name: a\nfsdp:\n  fsdp_reshard_after_forward: false\n  sharding_strategy: FULL_SHARD\n"),
               "s.yaml:4:22:", {"FULL_SHARD disagrees with fsdp.reshard_after_forward (at s.yaml:3:31)"});
  expect_error(parse("name: a\nfsdp:\n  sharding_strategy: SHARD_GRAD_OP\n  reshard_after_forward: 4\n"),
               "s.yaml:4:26:", {"4 disagrees with fsdp.sharding_strategy SHARD_GRAD_OP (at s.yaml:3:22)"});
  for (const char* agreeing :
       {"FULL_SHARD\n  reshard_after_forward: true", "HYBRID_SHARD\n  reshard_after_forward: true",
        "_HYBRID_SHARD_ZERO2\n  reshard_after_forward: false", "NO_SHARD\n  reshard_after_forward: false"}) {
    EXPECT_THAT(parse(std::string("name: a\nfsdp:\n  sharding_strategy: ") + agreeing + "\n"), IsOk()) << agreeing;
  }
  // An integer: FSDP2's resharding to groups of N ranks after forward.
  auto grouped = parse("name: a\nfsdp:\n  fsdp_version: 2\n  reshard_after_forward: 4\n");
  ASSERT_THAT(grouped, IsOk());
  EXPECT_EQ(grouped->fsdp.sharding_strategy, ShardingStrategy::kFullShard);
  EXPECT_EQ(grouped->fsdp.reshard_after_forward_size, 4);
  // FSDP2's explicit prefetch counts.
  auto prefetching =
      parse("name: a\nfsdp:\n  fsdp_version: 2\n  forward_prefetch_units: 2\n  backward_prefetch_units: 3\n");
  ASSERT_THAT(prefetching, IsOk());
  EXPECT_EQ(prefetching->fsdp.forward_prefetch_units, 2);
  EXPECT_EQ(prefetching->fsdp.backward_prefetch_units, 3);
  expect_error(parse("name: a\nfsdp:\n  backward_prefetch_units: 2\n"),
               "s.yaml:3:28:", {"fsdp.backward_prefetch_units 2 is FSDP2's explicit prefetch; this is fsdp_version 1"});
  // FSDP2's offload_policy spells cpu_offload; the two must agree in one file.
  auto offloaded = parse("name: a\nfsdp:\n  offload_policy: CPUOffloadPolicy\n");
  ASSERT_THAT(offloaded, IsOk());
  EXPECT_TRUE(offloaded->fsdp.cpu_offload);
  EXPECT_THAT(parse("name: a\nfsdp:\n  cpu_offload: false\n  offload_policy: OffloadPolicy\n"), IsOk());
  expect_error(parse("name: a\nfsdp:\n  cpu_offload: false\n  offload_policy: CPUOffloadPolicy\n"),
               "s.yaml:4:19:", {"CPUOffloadPolicy disagrees with fsdp.cpu_offload false (at s.yaml:3:16)"});
  expect_error(parse("name: a\nfsdp:\n  offload_policy: CPUOffloadPolicy\n  fsdp_offload_params: false\n"),
               "s.yaml:4:24:", {"false disagrees with fsdp.offload_policy (at s.yaml:3:19)"});
  expect_error(parse("name: a\nfsdp:\n  offload_policy: GPUOffload\n"),
               "s.yaml:3:19:", {"fsdp.offload_policy", "'GPUOffload'", "CPUOffloadPolicy, OffloadPolicy"});
  expect_error(parse("name: a\nfsdp:\n  reshard_after_forward: 1\n"),
               "s.yaml:3:26:", {"fsdp.reshard_after_forward: 1 is not a group size"});
  expect_error(parse("name: a\nfsdp:\n  reshard_after_forward: 4\n"),
               "s.yaml:3:26:", {"fsdp.reshard_after_forward 4 is FSDP2's (fsdp_version: 2)"});
  expect_error(parse("name: a\nfsdp:\n  fsdp_version: 2\n  reshard_after_forward: 3\n"),
               "s.yaml:4:26:", {"must divide the world size 8 and be smaller", "1 < N < world size"});
  expect_error(parse("name: a\nfsdp:\n  fsdp_version: 2\n  reshard_after_forward: 8\n"),
               "s.yaml:4:26:", {"must divide the world size 8 and be smaller"});
  expect_error(parse("name: a\nfsdp:\n  fsdp_version: 3\n"),
               "s.yaml:3:17:", {"fsdp.fsdp_version", "3 is out of range", "allowed: an integer from 1 to 2"});
  expect_error(parse("name: a\nfsdp:\n  fsdp_offload_params: \"yes\"\n"),
               "s.yaml:3:24:", {"fsdp.cpu_offload", "expected true or false", "'yes'"});
}

TEST(Scenario, BothSpellingsOfOneKeyNameBothPositions) {
  expect_error(
      parse("name: a\nfsdp:\n  sharding_strategy: FULL_SHARD\n  fsdp_sharding_strategy: 2\n"), "s.yaml:4:3:",
      {"'fsdp_sharding_strategy'", "'sharding_strategy'", "s.yaml:3:3", "fsdp.sharding_strategy", "one spelling"});
  // accelerate's two names for backward prefetch are one key too.
  expect_error(
      parse("name: a\nfsdp:\n  fsdp_backward_prefetch: BACKWARD_PRE\n  fsdp_backward_prefetch_policy: BACKWARD_PRE\n"),
      "s.yaml:4:3:", {"s.yaml:3:3", "fsdp.backward_prefetch"});
}

TEST(Scenario, DuplicateKey) {
  expect_error(parse("name: a\ntrain:\n  steps: 1\n  steps: 2\n"),
               "s.yaml:4:3:", {"duplicate key 'steps'", "s.yaml:3:3"});
  expect_error(parse("name: a\nname: b\n"), "s.yaml:2:1:", {"duplicate key 'name'", "s.yaml:1:1"});
}

TEST(Scenario, BackendsModesAndProfileNames) {
  for (const char* backend : {"sim", "mpi", "hpu"}) {
    auto r = parse(std::string("name: a\nworld: {backend: ") + backend + ", mode: timing}\n");
    ASSERT_THAT(r, IsOk());
    EXPECT_EQ(r->world.backend->name, backend);
    EXPECT_EQ(r->world.mode, RunMode::kTiming);
  }
  for (const char* device : {"cpu", "gaudi1", "gaudi2", "gaudi3"}) {
    auto r = parse(std::string("name: a\nworld: {device: ") + device + "}\n");
    ASSERT_THAT(r, IsOk());
  }
  for (const char* topo : {"hls1", "hls2", "hls3", "ring", "fully_connected", "switch"}) {
    auto r = parse(std::string("name: a\nworld: {topology: ") + topo + "}\n");
    ASSERT_THAT(r, IsOk());
  }
  // HYBRID_SHARD on one node is allowed (the hybrid groups are the devices of a node).
  auto hybrid = parse("name: a\nfsdp: {sharding_strategy: HYBRID_SHARD}\nworld: {nodes: 1, devices_per_node: 4}\n");
  ASSERT_THAT(hybrid, IsOk());
}

// ---------------------------------------------------------------------------------------
// One test per error kind.

TEST(ScenarioErrors, YamlSyntax) {
  expect_error(parse("name: a\ntrain: {steps: 1\n"), "s.yaml:", {"YAML syntax error"});
  expect_error(parse("name: a\n  bad: indent\n"), "s.yaml:2:", {"YAML syntax error"});
  expect_error(parse("name: a\ntrain:\n\tsteps: 2\n"), "s.yaml:3:", {"YAML syntax error", "indent with spaces"});
  expect_error(parse("name: a\ndescription: b: c\n"), "s.yaml:2:15:", {"YAML syntax error"});
}

TEST(ScenarioErrors, UnknownKeyWithDidYouMean) {
  expect_error(parse("name: a\nfsdp:\n  sharding_stratgy: FULL_SHARD\n"),
               "s.yaml:3:3:", {"unknown key 'sharding_stratgy' in fsdp", "did you mean 'sharding_strategy'?"});
  expect_error(parse("name: a\nfsdp:\n  fsdp_sharding_stratgy: 1\n"),
               "s.yaml:3:3:", {"did you mean 'fsdp_sharding_strategy'?"});
  expect_error(parse("name: a\ntrain:\n  optimizer:\n    betaz: [0.9, 0.99]\n"),
               "s.yaml:4:5:", {"in train.optimizer", "did you mean 'betas'?"});
}

TEST(ScenarioErrors, UnknownSectionWithDidYouMean) {
  expect_error(parse("name: a\ntrian:\n  steps: 3\n"),
               "s.yaml:2:1:", {"unknown section or key 'trian'", "did you mean 'train'?"});
}

TEST(ScenarioErrors, UnknownKeyListsAllowedOrItsHome) {
  expect_error(parse("name: a\ntrain:\n  lr: 0.1\n"),
               "s.yaml:3:3:", {"unknown key 'lr' in train", "belongs in train.optimizer"});
  expect_error(parse("name: a\nworld:\n  zzzzzzzz: 1\n"), "s.yaml:3:3:",
               {"unknown key 'zzzzzzzz' in world",
                "allowed in world: backend, mode, nodes, devices_per_node, device, topology"});
}

TEST(ScenarioErrors, WrongTypes) {
  expect_error(parse("name: a\ntrain:\n  steps: five\n"),
               "s.yaml:3:10:", {"train.steps", "expected an integer", "'five'"});
  expect_error(parse("name: a\ntrain:\n  steps: 2.5\n"), "s.yaml:3:10:", {"expected an integer"});
  expect_error(parse("name: a\ntrain:\n  optimizer: {lr: fast}\n"),
               "s.yaml:3:19:", {"train.optimizer.lr", "expected a number"});
  expect_error(parse("name: a\nfsdp:\n  forward_prefetch: maybe\n"), "s.yaml:3:21:", {"expected true or false"});
  expect_error(parse("name: a\nfsdp:\n  async_reduction: 2\n"),
               "s.yaml:3:20:", {"fsdp.async_reduction", "expected true or false"});
  expect_error(parse("name: {first: a}\n"), "s.yaml:1:7:", {"name: expected a string, got a map"});
  expect_error(parse("name: a\ntrain: 5\n"), "s.yaml:2:8:", {"train: expected a map of keys", "steps"});
  expect_error(parse("name: a\ntrain:\n  steps:\n"), "s.yaml:", {"train.steps: expected an integer, got nothing"});
  expect_error(parse("name: a\nfaults: {kind: crash}\n"), "s.yaml:2:9:", {"expected a list of faults"});
  expect_error(parse("name: a\ntrain:\n  optimizer:\n    betas: 0.9\n"), "s.yaml:4:12:", {"expected [beta1, beta2]"});
  expect_error(parse("name: a\ntrain:\n  optimizer:\n    betas: [0.9]\n"), "s.yaml:4:12:", {"a list of 1"});
  expect_error(parse("name: a\n? [x]\n: 1\n"), "s.yaml:2:3:", {"a key at the top level is a list"});
}

TEST(ScenarioErrors, IntegerOverflowNamesTheKey) {
  expect_error(parse("name: a\ntrain:\n  steps: 99999999999999999999\n"),
               "s.yaml:3:10:", {"train.steps", "'99999999999999999999'", "overflow"});
  expect_error(parse("name: a\ntrain:\n  steps: 3000000000\n"),
               "s.yaml:3:10:", {"train.steps", "out of range", "2147483647"});
  expect_error(parse("name: a\nseed: 18446744073709551616\n"), "s.yaml:2:7:", {"seed", "overflow"});
  expect_error(parse("name: a\nseed: -1\n"), "s.yaml:2:7:", {"seed", "negative"});
  expect_error(parse("name: a\nfsdp:\n  min_num_params: -99999999999999999999\n"),
               "s.yaml:3:19:", {"fsdp.min_num_params", "overflow"});
  expect_error(parse("name: a\ntrain:\n  optimizer: {lr: 1e999}\n"),
               "s.yaml:3:19:", {"train.optimizer.lr", "does not fit"});
  expect_error(parse("name: a\nexpect:\n  max_peak_memory_per_rank: 99999999999 TiB\n"),
               "s.yaml:3:29:", {"expect.max_peak_memory_per_rank", "overflow"});
}

TEST(ScenarioErrors, OutOfRange) {
  struct Case {
    std::string text, prefix;
    std::vector<std::string> words;
  };
  const std::vector<Case> cases = {
      {"train:\n  steps: 0\n", "s.yaml:3:10:", {"train.steps: 0 is out of range", "from 1"}},
      {"train:\n  grad_accumulation: 0\n", "s.yaml:3:22:", {"train.grad_accumulation"}},
      {"train:\n  optimizer:\n    lr: 0\n", "s.yaml:4:9:", {"train.optimizer.lr", "> 0"}},
      {"train:\n  optimizer:\n    lr: -1e-3\n", "s.yaml:4:9:", {"train.optimizer.lr", "out of range"}},
      {"train:\n  optimizer:\n    lr: nan\n", "s.yaml:4:9:", {"train.optimizer.lr", "expected a number"}},
      {"train:\n  optimizer:\n    lr: .inf\n", "s.yaml:4:9:", {"train.optimizer.lr", "expected a number"}},
      {"train:\n  optimizer:\n    betas: [0.9, 1.0]\n", "s.yaml:4:18:", {"train.optimizer.betas[1]", "[0, 1)"}},
      {"train:\n  optimizer:\n    betas: [-0.1, 0.9]\n", "s.yaml:4:13:", {"train.optimizer.betas[0]"}},
      {"train:\n  optimizer:\n    eps: 0\n", "s.yaml:4:10:", {"train.optimizer.eps"}},
      {"train:\n  optimizer:\n    weight_decay: -0.1\n", "s.yaml:4:19:", {"train.optimizer.weight_decay"}},
      {"train:\n  optimizer:\n    momentum: 1\n", "s.yaml:4:15:", {"train.optimizer.momentum", "[0, 1)"}},
      {"train:\n  max_grad_norm: -0.5\n", "s.yaml:3:18:", {"train.max_grad_norm", ">= 0"}},
      {"world:\n  nodes: 0\n", "s.yaml:3:10:", {"world.nodes"}},
      {"world:\n  devices_per_node: 0\n", "s.yaml:3:21:", {"world.devices_per_node"}},
      {"world:\n  devices_per_node: 65537\n", "s.yaml:3:21:", {"world.devices_per_node", "65536"}},
      {"world:\n  collective_timeout_s: 0\n",
       "s.yaml:3:25:",
       {"world.collective_timeout_s", "out of range", "seconds from 1e-6 to 1e6"}},
      {"world:\n  collective_timeout_s: 2e6\n", "s.yaml:3:25:", {"world.collective_timeout_s", "out of range"}},
      {"world:\n  collective_timeout_s: soon\n", "s.yaml:3:25:", {"world.collective_timeout_s", "expected a number"}},
      {"world:\n  nodes: 1024\n  devices_per_node: 128\n", "s.yaml:3:10:", {"world size", "131072", "at most 65536"}},
      {"data:\n  batch_size_per_rank: 0\n", "s.yaml:3:24:", {"data.batch_size_per_rank"}},
      {"data:\n  seq_len: 0\n", "s.yaml:3:12:", {"data.seq_len"}},
      {"fsdp:\n  min_num_params: -1\n", "s.yaml:3:19:", {"fsdp.min_num_params"}},
      {"checkpoint:\n  dir: c\n  every_steps: -1\n", "s.yaml:4:16:", {"checkpoint.every_steps"}},
      {"expect:\n  min_samples_per_s: 0\n", "s.yaml:3:22:", {"expect.min_samples_per_s"}},
      {"expect:\n  grads_match_unsharded: {rtol: -1}\n", "s.yaml:3:33:", {"expect.grads_match_unsharded.rtol"}},
      {"expect:\n  max_peak_memory_per_rank: 0\n", "s.yaml:3:29:", {"expect.max_peak_memory_per_rank", "out of range"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.text);
    expect_error(parse("name: a\n" + c.text), c.prefix, c.words);
  }
}

TEST(ScenarioErrors, EnumValuesListWhatIsAllowed) {
  struct Case {
    std::string text, prefix;
    std::vector<std::string> words;
  };
  const std::vector<Case> cases = {
      {"fsdp:\n  sharding_strategy: FIVE_SHARD\n",
       "s.yaml:3:22:",
       {"'FIVE_SHARD'", "FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD, _HYBRID_SHARD_ZERO2"}},
      {"fsdp:\n  sharding_strategy: FULL_SHRAD\n", "s.yaml:3:22:", {"did you mean 'FULL_SHARD'?"}},
      {"fsdp:\n  backward_prefetch: SIDEWAYS\n", "s.yaml:3:22:", {"BACKWARD_PRE, BACKWARD_POST, NONE"}},
      {"fsdp:\n  auto_wrap_policy: everything\n", "s.yaml:3:21:", {"transformer, size, none"}},
      {"fsdp:\n  state_dict_type: FULL\n", "s.yaml:3:20:", {"FULL_STATE_DICT, SHARDED_STATE_DICT, LOCAL_STATE_DICT"}},
      {"fsdp:\n  mixed_precision: {param_dtype: fp8}\n",
       "s.yaml:3:34:",
       {"fsdp.mixed_precision.param_dtype", "fp32, bf16, fp16"}},
      {"model:\n  preset: bert-huge\n", "s.yaml:3:11:", {"model.preset", "bert-tiny", "bert-large", "mlp"}},
      {"model:\n  head: ner\n", "s.yaml:3:9:", {"model.head", "classification, mlm, qa"}},
      {"data:\n  kind: stream\n", "s.yaml:3:9:", {"data.kind", "synthetic, file"}},
      {"train:\n  precision: fp8\n", "s.yaml:3:14:", {"train.precision", "fp32, bf16"}},
      {"train:\n  optimizer: {name: lamb}\n", "s.yaml:3:21:", {"train.optimizer.name", "adamw, sgd"}},
      {"world:\n  backend: gpu\n", "s.yaml:3:12:", {"world.backend", "sim, mpi, hpu"}},
      {"world:\n  mode: fast\n", "s.yaml:3:9:", {"world.mode", "numerics, timing"}},
      {"world:\n  device: gaudi4\n",
       "s.yaml:3:11:",
       {"unknown device profile 'gaudi4'", "cpu, gaudi1, gaudi2, gaudi3"}},
      {"world:\n  topology: mesh\n",
       "s.yaml:3:13:",
       {"unknown topology profile 'mesh'", "fully_connected, hls1, hls2, hls3, ring, switch"}},
      {"faults:\n  - {kind: meteor, rank: 0, step: 1}\n",
       "s.yaml:3:12:",
       {"faults[0].kind", "'meteor'", "crash, hang"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.text);
    expect_error(parse("name: a\n" + c.text), c.prefix, c.words);
  }
}

TEST(ScenarioErrors, DataKindAndPathMustAgree) {
  expect_error(parse("name: a\ndata:\n  kind: file\n"),
               "s.yaml:3:9:", {"data.kind is file but data.path is not given"});
  expect_error(parse("name: a\ndata:\n  path: b.safetensors\n"),
               "s.yaml:3:9:", {"data.path is given but data.kind is synthetic"});
  expect_error(parse("name: a\ndata:\n  kind: file\n  path: missing.safetensors\n"),
               "s.yaml:4:9:", {"data.path", "'missing.safetensors' not found"});
}

TEST(ScenarioErrors, SeqLenBeyondPresetPositions) {
  expect_error(parse("name: a\ndata:\n  seq_len: 513\n"), "s.yaml:3:12:",
               {"data.seq_len = 513 exceeds max_position_embeddings = 512", "bert-tiny", "from 1 to 512"});
  EXPECT_TRUE(parse("name: a\ndata:\n  seq_len: 512\n").is_ok());
}

TEST_F(ScenarioFiles, SeqLenBeyondConfigPositions) {
  write("config.json", "{\n  \"max_position_embeddings\": 128\n}\n");
  const std::string file = path("s.yaml");
  expect_error(parse_scenario(file, "name: a\nmodel:\n  config: config.json\ndata:\n  seq_len: 200\n"),
               file + ":5:12:", {"exceeds max_position_embeddings = 128", "/config.json'"});
  // The default seq_len (64) against a smaller config: the config's position.
  write("small.json", "{\"max_position_embeddings\": 32}");
  expect_error(parse_scenario(file, "name: a\nmodel:\n  config: small.json\n"), file + ":3:11:", {"= 32"});
  EXPECT_TRUE(parse_scenario(file, "name: a\nmodel:\n  config: config.json\ndata:\n  seq_len: 128\n").is_ok());
}

TEST_F(ScenarioFiles, ModelConfigMissingOrBroken) {
  const std::string file = path("s.yaml");
  expect_error(
      parse_scenario(file, "name: a\nmodel:\n  config: nope/config.json\n"), file + ":3:11:",
      {"model.config", "'" + path("nope/config.json") + "' not found", "relative to the scenario file's folder"});
  const std::string cfg = write("bad.json", "{\n  \"max_position_embeddings\": ,\n}\n");
  expect_error(parse_scenario(file, "name: a\nmodel:\n  config: bad.json\n"),
               cfg + ":2:30:", {"invalid JSON", "model config"});
  write("neg.json", "{\"max_position_embeddings\": -4}");
  expect_error(parse_scenario(file, "name: a\nmodel:\n  config: neg.json\n"),
               file + ":3:11:", {"max_position_embeddings", "'-4'"});
  expect_error(parse_scenario(file, "name: a\nmodel:\n  weights: w.safetensors\n"),
               file + ":3:12:", {"model.weights", "not found", "random"});
}

TEST(ScenarioErrors, BatchNotDivisibleByAccumulation) {
  expect_error(parse("name: a\ndata:\n  batch_size_per_rank: 6\ntrain:\n  grad_accumulation: 4\n"),
               "s.yaml:3:24:", {"batch_size_per_rank = 6 is not divisible by train.grad_accumulation = 4"});
  expect_error(parse("name: a\ntrain:\n  grad_accumulation: 3\n"), "s.yaml:3:22:", {"batch_size_per_rank = 2"});
}

TEST(ScenarioErrors, Faults) {
  struct Case {
    std::string faults, prefix;
    std::vector<std::string> words;
  };
  // world size 8, train.steps 5 (defaults); "faults:" is line 2, the first item line 3.
  const std::vector<Case> cases = {
      {"  - {kind: crash, rank: 8, step: 1}\n", "s.yaml:3:25:", {"faults[0].rank = 8", "size 8", "0 to 7"}},
      {"  - {kind: crash, rank: -1, step: 1}\n", "s.yaml:3:25:", {"faults[0].rank: -1 is out of range"}},
      {"  - {kind: crash, rank: 1, step: 6}\n", "s.yaml:3:34:", {"faults[0].step = 6", "train.steps = 5", "1 to 5"}},
      {"  - {kind: crash, rank: 1, step: 0}\n", "s.yaml:3:34:", {"faults[0].step: 0 is out of range"}},
      {"  - {kind: crash, rank: 1, step: -2}\n", "s.yaml:3:34:", {"faults[0].step"}},
      {"  - {kind: link_down, link: 0to1, step: 1}\n", "s.yaml:3:29:", {"faults[0].link", "malformed link '0to1'"}},
      {"  - {kind: link_down, link: 3-3, step: 1}\n", "s.yaml:3:29:", {"malformed link '3-3'"}},
      {"  - {kind: link_down, link: 0-8, step: 1}\n",
       "s.yaml:3:29:",
       {"faults[0].link '0-8' names a rank outside the world"}},
      {"  - {kind: link_down, step: 1}\n", "s.yaml:3:5:", {"faults[0] (link_down) has no link"}},
      {"  - {kind: link_down, rank: 1, link: 0-1, step: 1}\n", "s.yaml:3:29:", {"names a rank"}},
      {"  - {kind: crash, link: 0-1, step: 1}\n", "s.yaml:3:25:", {"(crash) names a link"}},
      {"  - {kind: crash, step: 1}\n", "s.yaml:3:5:", {"faults[0] (crash) has no rank"}},
      {"  - {rank: 1, step: 1}\n", "s.yaml:3:5:", {"faults[0] has no kind"}},
      {"  - {kind: hang, rank: 1}\n", "s.yaml:3:5:", {"faults[0] (hang) has neither step nor time_ms"}},
      {"  - {kind: corrupt, rank: 1}\n", "s.yaml:3:5:", {"(corrupt) has no collective", "collective: N"}},
      {"  - {kind: corrupt, rank: 1, collective: 2, step: 1}\n", "s.yaml:3:51:", {"(corrupt) takes no step"}},
      {"  - {kind: corrupt, rank: 1, collective: -1}\n", "s.yaml:3:42:", {"faults[0].collective"}},
      {"  - {kind: straggler, rank: 1, factor: 2, time_ms: 3}\n", "s.yaml:3:52:", {"(straggler) takes no time_ms"}},
      {"  - {kind: crash, rank: 1, step: 1, collective: 3}\n", "s.yaml:3:49:", {"(crash) takes no collective"}},
      {"  - {kind: crash, rank: 1, step: 1, integrity_check: true}\n", "s.yaml:3:54:", {"takes no integrity_check"}},
      {"  - {kind: hang, rank: 1, step: 1, factor: 2}\n", "s.yaml:3:44:", {"(hang) takes no factor"}},
      {"  - {kind: timeout, rank: 1, step: 1}\n", "s.yaml:3:12:", {"faults[0].kind", "'timeout'", "crash, hang"}},
      {"  - {kind: crash, rank: 0, time_ms: -5}\n",
       "s.yaml:3:37:",
       {"faults[0].time_ms", "from the start of the run, initialization included"}},
      {"  - {kind: straggler, rank: 0, factor: 0.5}\n", "s.yaml:3:40:", {"faults[0].factor = 0.5", "[1, 1e6]"}},
      {"  - {kind: straggler, rank: 0, factor: 1e300}\n",
       "s.yaml:3:40:",
       {"factor = 1e+300 is out of range", "[1, 1e6]"}},
      {"  - {kind: link_degrade, link: 0-1, time_ms: 0, factor: 2}\n",
       "s.yaml:3:57:",
       {"faults[0].factor = 2 ", "[1e-6, 1]"}},
      {"  - {kind: link_degrade, link: 0-1, time_ms: 0, factor: 1e-300}\n",
       "s.yaml:3:57:",
       {"factor = 1e-300 is out of range", "[1e-6, 1] (0 is link_down)"}},
      {"  - {kind: crash, rank: 0, step: 1, severity: 3}\n", "s.yaml:3:37:", {"unknown key 'severity' in faults[0]"}},
      {"  - crash\n", "s.yaml:3:5:", {"faults[0]: expected a map"}},
      {"  - {kind: crash, rank: 0, step: 1}\n  - {kind: crash, rank: 9, step: 1}\n",
       "s.yaml:4:25:",
       {"faults[1].rank = 9"}},
      // view_offset (NOTE [Faults] in sim/faults/faults.h).
      {"  - {kind: view_offset, rank: 1, step: 1}\n", "s.yaml:3:5:", {"(view_offset) needs step and unit"}},
      {"  - {kind: view_offset, rank: 1, unit: 1}\n", "s.yaml:3:5:", {"(view_offset) needs step and unit"}},
      {"  - {kind: view_offset, step: 1, unit: 1}\n", "s.yaml:3:5:", {"(view_offset) has no rank"}},
      {"  - {kind: view_offset, rank: 1, step: 1, unit: 1, offset: 6}\n",
       "s.yaml:3:60:",
       {"faults[0].offset: '6' is not a byte offset that is a multiple of 4", "0x-hexadecimal"}},
      {"  - {kind: view_offset, rank: 1, step: 1, unit: 1, offset: 18446744073709551616}\n",
       "s.yaml:3:60:",
       {"is not a byte offset"}},
      {"  - {kind: view_offset, rank: 1, step: 1, unit: 1, offset: -4}\n", "s.yaml:3:60:", {"is not a byte offset"}},
      {"  - {kind: view_offset, rank: 1, step: 1, unit: 1, time_ms: 2}\n", "s.yaml:3:61:", {"takes no time_ms"}},
      {"  - {kind: view_offset, rank: 1, step: 1, unit: 1, factor: 2}\n", "s.yaml:3:60:", {"takes no factor"}},
      {"  - {kind: crash, rank: 1, step: 1, unit: 2}\n", "s.yaml:3:43:", {"(crash) takes no unit", "only view_offset"}},
      {"  - {kind: hang, rank: 1, step: 1, offset: 8}\n", "s.yaml:3:44:", {"(hang) takes no offset"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.faults);
    expect_error(parse("name: a\nfaults:\n" + c.faults), c.prefix, c.words);
  }
  auto view = parse(
      "name: a\nfaults:\n  - {kind: view_offset, rank: 2, step: 3, unit: 1, offset: 0xC000000000000000}\n"
      "  - {kind: view_offset, rank: 3, step: 1, unit: 0}\n");
  ASSERT_THAT(view, IsOk());
  EXPECT_EQ(view->faults[0].offset, 0xC000000000000000ull);
  EXPECT_EQ(view->faults[0].unit, 1);
  EXPECT_EQ(view->faults[1].offset, 13835057943613014016ull);  // the seed bug's, by default
  auto ok = parse(
      "name: a\nfaults:\n  - {kind: corrupt, rank: 2, collective: 4, integrity_check: true}\n"
      "  - {kind: hang, rank: 1, time_ms: 0}\n  - {kind: link_down, link: 0-1}\n");
  ASSERT_THAT(ok, IsOk());
  ASSERT_EQ(ok->faults.size(), 3u);
  for (const char* link : {"3-net", "leaf0-spine", "7-0"}) {
    auto l = parse(std::string("name: a\nfaults:\n  - {kind: link_down, link: ") + link + "}\n");
    EXPECT_THAT(l, IsOk()) << link;
  }
  for (const char* link : {"leafx-spine", "3-nett", "net-3", "8-net", "-net"}) {
    auto l = parse(std::string("name: a\nfaults:\n  - {kind: link_down, link: ") + link + "}\n");
    EXPECT_FALSE(l.is_ok()) << link;
  }
  EXPECT_EQ(ok->faults[0].collective, 4);
  EXPECT_TRUE(ok->faults[0].integrity_check);
}

TEST_F(ScenarioFiles, ProfilePathsMustExist) {
  const std::string file = path("s.yaml");
  expect_error(parse_scenario(file, "name: a\nworld:\n  device: profiles/gaudi9.yaml\n"),
               file + ":3:11:", {"world.device", "'" + path("profiles/gaudi9.yaml") + "' not found", "gaudi3"});
  expect_error(parse_scenario(file, "name: a\nworld:\n  topology: my_topo.json\n"),
               file + ":3:13:", {"world.topology", "not found", "fully_connected"});
  write("profiles/gaudi9.yaml", "x: 1\n");
  EXPECT_TRUE(parse_scenario(file, "name: a\nworld:\n  device: profiles/gaudi9.yaml\n").is_ok());
}

// world.offload_host: a device profile file for the simulated host under CPU offload; set
// without offload, on a real backend, or pointing nowhere, it is an error at its line.
TEST_F(ScenarioFiles, OffloadHostProfile) {
  const std::string file = path("s.yaml");
  write("profiles/xeon.json", "{}\n");
  auto ok = parse_scenario(file, "name: a\nfsdp: {cpu_offload: true}\nworld:\n  offload_host: profiles/xeon.json\n");
  ASSERT_THAT(ok, IsOk());
  EXPECT_EQ(ok->world.offload_host, path("profiles/xeon.json"));
  EXPECT_EQ(parse("name: a\n")->world.offload_host, "host");
  expect_error(parse_scenario(file, "name: a\nworld:\n  offload_host: profiles/xeon.json\n"),
               file + ":3:17:", {"world.offload_host is set but fsdp.cpu_offload is false", "fsdp.cpu_offload: true"});
  expect_error(parse_scenario(file,
                              "name: a\nfsdp: {cpu_offload: true}\nworld:\n  backend: mpi\n"
                              "  offload_host: profiles/xeon.json\n"),
               file + ":5:17:", {"world.offload_host models the host in the simulator", "world.backend: sim"});
  expect_error(parse_scenario(file, "name: a\nfsdp: {cpu_offload: true}\nworld:\n  offload_host: xeon.json\n"),
               file + ":4:17:", {"world.offload_host", "/xeon.json' not found", "allowed: host"});
  expect_error(parse_scenario(file, "name: a\nfsdp: {cpu_offload: true}\nworld:\n  offload_host: xeon\n"),
               file + ":4:17:", {"unknown device profile 'xeon'", "allowed: host, or a path"});
}

TEST(ScenarioErrors, NameMissingOrInvalid) {
  expect_error(parse("train:\n  steps: 2\n"), "s.yaml:1:1:", {"missing required key `name`"});
  expect_error(parse("name: my run\n"), "s.yaml:1:7:", {"'my run' is not a valid folder name", "letters, digits"});
  expect_error(parse("name: a/b\n"), "s.yaml:1:7:", {"not a valid folder name"});
  expect_error(parse("name: ..\n"), "s.yaml:1:7:", {"not '.' or '..'"});
  expect_error(parse("name: \"\"\n"), "s.yaml:1:7:", {"not a valid folder name"});
}

TEST(ScenarioErrors, TopLevelNotAMap) {
  expect_error(parse("- name: a\n"), "s.yaml:1:1:", {"top level is a list, not a map"});
  expect_error(parse("just text\n"), "s.yaml:1:1:", {"top level is 'just text', not a map"});
}

TEST(ScenarioErrors, SecondDocument) {
  expect_error(parse("name: a\n---\nname: b\n"), "s.yaml:", {"a second YAML document"});
}

TEST(ScenarioErrors, CheckpointNeedsDir) {
  expect_error(parse("name: a\ncheckpoint:\n  every_steps: 2\n"), "s.yaml:3:16:", {"checkpoint.dir is not"});
  expect_error(parse("name: a\ncheckpoint:\n  resume: true\n"), "s.yaml:3:11:", {"checkpoint.dir is not set"});
}

TEST(ScenarioErrors, TransformerWrapNeedsClasses) {
  expect_error(parse("name: a\nfsdp:\n  transformer_layer_cls_to_wrap: []\n"),
               "s.yaml:3:34:", {"transformer_layer_cls_to_wrap is empty"});
  expect_error(parse("name: a\nfsdp:\n  transformer_layer_cls_to_wrap: \"BertLayer,,X\"\n"),
               "s.yaml:3:34:", {"'' is not a class name"});
  EXPECT_TRUE(parse("name: a\nfsdp:\n  auto_wrap_policy: none\n  transformer_layer_cls_to_wrap: []\n").is_ok());
}

TEST(Scenario, ExpectFormsAndNulls) {
  auto t = parse("name: a\nexpect:\n  grads_match_unsharded: true\n  max_peak_memory_per_rank: 1073741824\n");
  ASSERT_THAT(t, IsOk());
  EXPECT_EQ(t->expect.grads_match_unsharded->atol, Scenario::Tolerance{}.atol);
  EXPECT_EQ(t->expect.max_peak_memory_per_rank, 1073741824);
  auto f = parse("name: a\nexpect:\n  grads_match_unsharded: false\n  max_peak_memory_per_rank: null\n");
  ASSERT_THAT(f, IsOk());
  EXPECT_FALSE(f->expect.grads_match_unsharded.has_value());
  EXPECT_TRUE(f->expect.oracle_off);  // NOTE [The oracle by default]: off only when said so
  EXPECT_FALSE(f->expect.max_peak_memory_per_rank.has_value());
  EXPECT_FALSE(t->expect.oracle_off);
  auto unset = parse("name: a\n");
  ASSERT_THAT(unset, IsOk());
  EXPECT_FALSE(unset->expect.oracle_off);
  EXPECT_FALSE(unset->expect.grads_match_unsharded.has_value());
  auto null_off = parse("name: a\nexpect: {grads_match_unsharded: null}\n");
  ASSERT_THAT(null_off, IsOk());
  EXPECT_TRUE(null_off->expect.oracle_off);
  auto nulls = parse(
      "name: a\ndescription:\nmodel: {config: ~}\ndata: {path: null}\ncheckpoint: {dir: }\nexpect: {min_samples_per_s: "
      "null}\n");
  ASSERT_THAT(nulls, IsOk());
  EXPECT_EQ(nulls->description, "");
  EXPECT_EQ(nulls->model.config, "");
  EXPECT_FALSE(nulls->expect.min_samples_per_s.has_value());
  expect_error(parse("name: a\nmodel: {weights: null}\n"),
               "s.yaml:2:18:", {"model.weights: expected a string, got nothing"});
  auto partial = parse("name: a\nexpect:\n  grads_match_unsharded: {atol: 0}\n");
  ASSERT_THAT(partial, IsOk());
  EXPECT_EQ(partial->expect.grads_match_unsharded->rtol, Scenario::Tolerance{}.rtol);
  EXPECT_EQ(partial->expect.grads_match_unsharded->atol, 0.0);
  const std::pair<const char*, std::int64_t> sizes[] = {
      {"512 MiB", 512ll << 20}, {"2 GiB", 2ll << 30},        {"1.5 GB", 1500000000}, {"4096", 4096},
      {"64KiB", 65536},         {"\"3 TB\"", 3000000000000}, {"1.5 KiB", 1536},      {"10 B", 10}};
  for (const auto& [text, bytes] : sizes) {
    auto r = parse(std::string("name: a\nexpect:\n  max_peak_memory_per_rank: ") + text + "\n");
    ASSERT_THAT(r, IsOk()) << text;
    EXPECT_EQ(r->expect.max_peak_memory_per_rank, bytes) << text;
  }
  expect_error(parse("name: a\nexpect:\n  max_peak_memory_per_rank: 12 parsecs\n"),
               "s.yaml:3:29:", {"unknown unit 'parsecs'", "MiB"});
  expect_error(parse("name: a\nexpect:\n  max_peak_memory_per_rank: lots\n"),
               "s.yaml:3:29:", {"expected a size in bytes"});
  expect_error(parse("name: a\nexpect:\n  grads_match_unsharded: sometimes\n"),
               "s.yaml:3:26:", {"expected true, false or {rtol, atol}"});
  expect_error(parse("name: a\nexpect:\n  grads_match_unsharded: {rtol: 1, atlo: 2}\n"),
               "s.yaml:3:36:", {"in expect.grads_match_unsharded", "did you mean 'atol'?"});
}

// ---------------------------------------------------------------------------------------
// --fsdp-config and --set.

TEST_F(ScenarioFiles, FsdpConfigJsonOverridesTheFile) {
  const std::string json = write("fsdp_config.json", R"({
  "fsdp_sharding_strategy": 2,
  "fsdp_transformer_layer_cls_to_wrap": "BertLayer",
  "fsdp_backward_prefetch": "BACKWARD_POST",
  "fsdp_offload_params": "false",
  "fsdp_use_orig_params": "true",
  "fsdp_sync_module_states": true,
  "fsdp_state_dict_type": "SHARDED_STATE_DICT",
  "fsdp_forward_prefetch": "true",
  "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
  "fsdp_cpu_ram_efficient_loading": "true",
  "limit_all_gathers": false
}
)");
  ScenarioOverrides o;
  o.fsdp_config = json;
  auto r = parse(
      "name: a\nfsdp:\n  sharding_strategy: NO_SHARD\n  cpu_offload: true\n  activation_checkpointing: true\n", o);
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->fsdp.sharding_strategy, ShardingStrategy::kShardGradOp);
  EXPECT_EQ(r->fsdp.backward_prefetch, BackwardPrefetch::kBackwardPost);
  EXPECT_FALSE(r->fsdp.cpu_offload);
  EXPECT_TRUE(r->fsdp.activation_checkpointing);  // from the file: the JSON does not set it
  EXPECT_TRUE(r->fsdp.sync_module_states);
  EXPECT_TRUE(r->fsdp.forward_prefetch);
  EXPECT_FALSE(r->fsdp.limit_all_gathers);
  EXPECT_EQ(r->fsdp.state_dict_type, StateDictType::kSharded);
  EXPECT_EQ(r->where("fsdp.sharding_strategy").to_string(), json + ":2:29");

  // Nested under "fsdp_config" (trainer style), with the trainer's other keys left alone.
  const std::string nested = write(
      "nested.json",
      R"({"fsdp": "full_shard auto_wrap", "fsdp_config": {"fsdp_sharding_strategy": "HYBRID_SHARD", "backward_prefetch": "backward_pre"}})");
  o.fsdp_config = nested;
  auto n = parse("name: a\n", o);
  ASSERT_THAT(n, IsOk());
  EXPECT_EQ(n->fsdp.sharding_strategy, ShardingStrategy::kHybridShard);
  EXPECT_EQ(n->fsdp.backward_prefetch, BackwardPrefetch::kBackwardPre);

  // --set wins over --fsdp-config.
  o.fsdp_config = json;
  o.set = {"fsdp.sharding_strategy=FULL_SHARD"};
  auto s = parse("name: a\n", o);
  ASSERT_THAT(s, IsOk());
  EXPECT_EQ(s->fsdp.sharding_strategy, ShardingStrategy::kFullShard);
  EXPECT_EQ(s->where("fsdp.sharding_strategy").to_string(), "--set:1:24");
}

TEST_F(ScenarioFiles, FsdpConfigJsonErrors) {
  ScenarioOverrides o;
  o.fsdp_config = write("syntax.json", "{\n  \"fsdp_sharding_strategy\": 1,\n  \"fsdp_offload_params\" false\n}\n");
  expect_error(parse("name: a\n", o), o.fsdp_config + ":3:29:", {"invalid JSON", "expected ':'"});
  o.fsdp_config = write("unknown.json", "{\n  \"fsdp_sharding_stratgy\": 1\n}\n");
  expect_error(parse("name: a\n", o), o.fsdp_config + ":2:3:",
               {"unknown key 'fsdp_sharding_stratgy' in fsdp", "did you mean 'fsdp_sharding_strategy'?"});
  o.fsdp_config = write("value.json", "{\"fsdp_sharding_strategy\": 9}");
  expect_error(parse("name: a\n", o), o.fsdp_config + ":1:28:", {"fsdp.sharding_strategy", "'9'"});
  o.fsdp_config = write("array.json", "[1, 2]");
  expect_error(parse("name: a\n", o), o.fsdp_config + ":1:1:", {"expected a JSON object", "got a list"});
  o.fsdp_config = write("both.json", "{\"fsdp_sharding_strategy\": 1, \"sharding_strategy\": 2}");
  expect_error(parse("name: a\n", o),
               o.fsdp_config + ":1:31:", {"both set fsdp.sharding_strategy", o.fsdp_config + ":1:2"});
  o.fsdp_config = write("deep.json", std::string(100, '[') + std::string(100, ']'));
  expect_error(parse("name: a\n", o), o.fsdp_config + ":1:1:", {"nesting deeper than 32"});
  o.fsdp_config = path("missing.json");
  expect_error(parse("name: a\n", o), o.fsdp_config + ":", {"cannot open --fsdp-config file"});
}

TEST(ScenarioSet, ScalarsListsAndNestedKeys) {
  ScenarioOverrides o;
  o.set = {"train.optimizer.lr=3e-5",
           "fsdp.mixed_precision.param_dtype=bf16",
           "world.nodes=64",
           "fsdp.transformer_layer_cls_to_wrap=[BertLayer, BertEmbeddings]",
           "train.optimizer.betas=[0.5, 0.75]",
           "fsdp.fsdp_sharding_strategy=4",
           "name=renamed",
           "description=a = b",
           "faults=[{kind: crash, rank: 500, step: 1}]",
           "world.device=gaudi2",
           "expect.max_peak_memory_per_rank=512 MiB",
           "fsdp.mixed_precision={reduce_dtype: bf16}"};
  auto r = parse("name: a\ntrain:\n  steps: 3\n  optimizer:\n    lr: 1\n", o);
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->train.optimizer.lr, 3e-5);
  EXPECT_EQ(r->train.steps, 3);
  EXPECT_EQ(r->fsdp.mixed_precision.param_dtype, DType::kBF16);
  EXPECT_EQ(r->fsdp.mixed_precision.reduce_dtype, DType::kBF16);
  EXPECT_EQ(r->world.nodes, 64);
  EXPECT_EQ(r->world.world_size(), 512);
  EXPECT_EQ(r->fsdp.transformer_layer_cls_to_wrap, (std::vector<std::string>{"BertLayer", "BertEmbeddings"}));
  EXPECT_EQ(r->train.optimizer.beta1, 0.5);
  EXPECT_EQ(r->fsdp.sharding_strategy, ShardingStrategy::kHybridShard);
  EXPECT_EQ(r->name, "renamed");
  EXPECT_EQ(r->description, "a = b");
  ASSERT_EQ(r->faults.size(), 1u);
  EXPECT_EQ(r->faults[0].rank, 500);
  EXPECT_EQ(r->faults[0].pos.to_string(), "--set:9:9");
  EXPECT_EQ(r->world.device, "gaudi2");
  EXPECT_EQ(r->expect.max_peak_memory_per_rank, 512ll << 20);
  EXPECT_EQ(r->where("train.optimizer.lr").to_string(), "--set:1:20");
  EXPECT_EQ(r->where("world.nodes").to_string(), "--set:3:13");
}

TEST(ScenarioSet, Errors) {
  auto with = [](std::vector<std::string> set) {
    ScenarioOverrides o;
    o.set = std::move(set);
    return parse("name: a\n", o);
  };
  expect_error(with({"train.steps=2", "train.steps"}), "--set:2:1:", {"has no '='", "section.key=value"});
  expect_error(with({"=3"}), "--set:1:1:", {"no key before '='"});
  expect_error(with({"trian.steps=3"}), "--set:1:1:", {"unknown section or key 'trian'", "did you mean 'train'?"});
  expect_error(with({"train.stesp=3"}), "--set:1:7:", {"unknown key 'stesp' in train", "did you mean 'steps'?"});
  expect_error(with({"fsdp.sharding_stratgy=1"}), "--set:1:6:", {"did you mean 'sharding_strategy'?"});
  expect_error(with({"train.steps.max=3"}), "--set:1:13:", {"train.steps is a key, not a section"});
  expect_error(with({"train..steps=3"}), "--set:1:7:", {"empty key part"});
  expect_error(with({"train.steps=five"}), "--set:1:13:", {"train.steps", "expected an integer", "'five'"});
  expect_error(with({"x=1", "train.steps=99999999999999999999"}), "--set:1:1:", {"unknown"});
  expect_error(with({"train.steps=99999999999999999999"}), "--set:1:13:", {"train.steps", "overflow"});
  expect_error(with({"train.optimizer.betas=[0.9, 0.99"}), "--set:1:", {"YAML syntax error"});
  expect_error(with({"train.optimizer.betas=[&a 0.9, *a]"}), "--set:1:32:", {"alias"});
  expect_error(with({"world.nodes=100000"}), "--set:1:13:", {"world.nodes", "out of range"});
  expect_error(with({"train=5"}), "--set:1:7:", {"train: expected a map of keys"});
  expect_error(with({std::string("description=a\0b", 15)}), "--set:1:", {"NUL byte"});
  // Cross-key checks point at the --set that broke them.
  expect_error(with({"train.grad_accumulation=4"}), "--set:1:25:", {"not divisible"});
}

// ---------------------------------------------------------------------------------------
// Hostile input: each is rejected quickly (ctest's TIMEOUT bounds the whole suite).

TEST(ScenarioHostile, BillionLaughs) {
  const std::string bomb = R"(name: lol
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
)";
  expect_error(parse(bomb), "s.yaml:3:8:", {"YAML alias (*name)", "not allowed"});
  // Even where the key would be valid.
  expect_error(parse("name: &n a\ndescription: *n\n"), "s.yaml:2:14:", {"alias"});
}

TEST(ScenarioHostile, DeepNesting) {
  expect_error(parse("name: a\nx: " + std::string(10000, '[') + std::string(10000, ']') + "\n"),
               "s.yaml:2:", {"nesting deeper than 32"});
  expect_error(parse("name: a\nx: " + std::string(10000, '{')), "s.yaml:2:", {"nesting deeper than 32"});
  std::string block = "name: a\n";
  for (int i = 0; i < 200; ++i) block += std::string(static_cast<std::size_t>(i), ' ') + "k:\n";
  expect_error(parse(block), "s.yaml:", {"nesting deeper than 32"});
  // 32 levels are fine for the parser (the key is still unknown, which is the next check).
  expect_error(parse("name: a\nx: " + std::string(31, '[') + std::string(31, ']') + "\n"), "s.yaml:2:1:", {"unknown"});
}

TEST(ScenarioHostile, OversizedTextAndFile) {
  std::string big = "name: a\ndescription: \"" + std::string(2 << 20, 'x') + "\"\n";
  expect_error(parse(big), "s.yaml:1:1:", {"bytes", "at most 1 MiB"});
  const fs::path p = fs::temp_directory_path() / ("shardlab_scenario_big_" + std::to_string(::getpid()) + ".yaml");
  std::ofstream(p, std::ios::binary) << big;
  expect_error(load_scenario(p.string()), p.string() + ":1:1:", {"at most 1 MiB"});
  fs::remove(p);
}

TEST(ScenarioHostile, TooManyNodes) {
  std::string many = "name: a\nx: [";
  for (int i = 0; i < 150000; ++i) many += "0,";
  many += "0]\n";
  expect_error(parse(many), "s.yaml:2:", {"more than 100000 YAML nodes"});
}

TEST(ScenarioHostile, BinaryJunkAndNul) {
  std::mt19937 rng(20261202);
  for (int trial = 0; trial < 50; ++trial) {
    std::string junk(4096, '\0');
    for (char& c : junk) c = static_cast<char>(rng() & 0xff);
    auto r = parse(junk);
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(r.status().message().rfind("s.yaml:", 0), 0u) << r.status().message();
  }
  expect_error(parse(std::string("name: a\nseed: 1\0\n", 17)), "s.yaml:2:8:", {"NUL byte", "UTF-8 text"});
  expect_error(parse("name: a\n\x01"), "s.yaml:2:1:", {"control byte 0x01"});
  expect_error(parse("name: \xff\xfe\n"), "s.yaml:1:7:", {"invalid UTF-8"});
  expect_error(parse("name: \xc3\n"), "s.yaml:1:7:", {"UTF-8"});
  expect_error(parse("\xed\xa0\x80: 1\n"), "s.yaml:1:1:", {"invalid UTF-8 sequence"});  // a surrogate
}

TEST(ScenarioHostile, EmptyOrOnlyComments) {
  for (const char* text : {"", "\n\n", "# just a comment\n   # another\n", "---\n", "~\n"}) {
    expect_error(parse(text), "s.yaml:1:1:", {"empty scenario; a scenario needs at least `name:`"});
  }
}

// Random edits of a valid scenario never crash: each result is OK or INVALID_ARGUMENT
// with a positioned message.
TEST(ScenarioHostile, MutatedScenariosNeverCrash) {
  const std::string base = R"(name: m
train: {steps: 3, optimizer: {lr: 1e-3, betas: [0.9, 0.99]}}
fsdp:
  fsdp_sharding_strategy: 1
  mixed_precision: {param_dtype: bf16}
world: {nodes: 2, devices_per_node: 2}
faults:
  - {kind: crash, rank: 1, step: 1}
expect: {grads_match_unsharded: {rtol: 1e-5}, max_peak_memory_per_rank: 1 GiB}
)";
  const std::string alphabet = "[]{}:,-&*!|>'\"#%@`?\n \t0123456789.eE+-_abcxyz~";
  std::mt19937 rng(7);
  for (int trial = 0; trial < 3000; ++trial) {
    std::string t = base;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const std::size_t at = rng() % (t.size() + 1);
      switch (rng() % 3) {
        case 0: t.insert(at, 1, alphabet[rng() % alphabet.size()]); break;
        case 1:
          if (at < t.size()) t.erase(at, 1);
          break;
        default:
          if (at < t.size()) t[at] = alphabet[rng() % alphabet.size()];
      }
    }
    auto r = parse(t);
    if (!r.is_ok()) {
      ASSERT_EQ(r.status().code(), StatusCode::kInvalidArgument) << t;
      ASSERT_EQ(r.status().message().rfind("s.yaml", 0), 0u) << r.status().message();
    }
  }
}

TEST_F(ScenarioFiles, LoadScenarioFileErrors) {
  expect_error(load_scenario(path("missing.yaml")), path("missing.yaml") + ":", {"cannot open scenario file"});
  expect_error(load_scenario(dir_.string()), dir_.string() + ":", {"not a regular file"});
  const std::string file = write("ok.yaml", "name: from-disk\n");
  auto r = load_scenario(file);
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->name, "from-disk");
}

// ---------------------------------------------------------------------------------------
// NOTE [Every error]: every problem of a file, one line each, at most 20.

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

TEST(ScenarioErrors, EveryProblemOfAFileIsReported) {
  auto r = parse(
      "name: a\ntrain:\n  steps: many\nfsdp:\n  sharding_stratgy: FULL_SHARD\nworld:\n  nodes: 0\n"
      "checkpoint:\n  resume: true\n");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  const auto lines = lines_of(r.status().message());
  ASSERT_EQ(lines.size(), 4u) << r.status().message();
  EXPECT_EQ(lines[0].rfind("s.yaml:3:10: train.steps: expected an integer", 0), 0u) << lines[0];
  EXPECT_EQ(lines[1].rfind("s.yaml:5:3: unknown key 'sharding_stratgy' in fsdp", 0), 0u) << lines[1];
  EXPECT_EQ(lines[2].rfind("s.yaml:7:10: world.nodes: 0 is out of range", 0), 0u) << lines[2];
  EXPECT_EQ(lines[3].rfind("s.yaml:9:11: checkpoint.resume is true but checkpoint.dir is not set", 0), 0u) << lines[3];
}

TEST(ScenarioErrors, ARefusedNameIsNotAlsoMissing) {
  auto r = parse("name: [a, b]\n");
  ASSERT_FALSE(r.is_ok());
  const auto lines = lines_of(r.status().message());
  ASSERT_EQ(lines.size(), 1u) << r.status().message();
  EXPECT_NE(lines[0].find("s.yaml:1:7: name: expected a string"), std::string::npos) << lines[0];
}

TEST(ScenarioErrors, ErrorsInFaultsAndOverridesAreEachReported) {
  ScenarioOverrides o;
  o.set = {"train.stepz=2", "world.nodes=x"};
  auto r = parse("name: a\nfaults:\n  - {kind: crash, rank: 1}\n  - {kind: boom, rank: 1}\n", o);
  ASSERT_FALSE(r.is_ok());
  const std::string& m = r.status().message();
  EXPECT_NE(m.find("s.yaml:4:12: faults[1].kind: unknown value 'boom'"), std::string::npos) << m;
  EXPECT_NE(m.find("--set:1:7: unknown key 'stepz' in train"), std::string::npos) << m;
  EXPECT_NE(m.find("--set:2:13: world.nodes: expected an integer"), std::string::npos) << m;
  EXPECT_NE(m.find("s.yaml:3:5: faults[0] (crash) has neither step nor time_ms"), std::string::npos) << m;
  EXPECT_EQ(m.find("faults[1] has no kind"), std::string::npos) << m;  // its refused kind says it already
}

TEST(ScenarioErrors, AtMostTwentyAreShownAndTheRestCounted) {
  std::string text = "name: a\nfaults:\n";
  for (int i = 0; i < 25; ++i) text += "  - {kind: crash, step: 1}\n";
  auto r = parse(text);
  ASSERT_FALSE(r.is_ok());
  const auto lines = lines_of(r.status().message());
  ASSERT_EQ(lines.size(), 21u) << r.status().message();
  EXPECT_EQ(lines[0].rfind("s.yaml:3:5: faults[0] (crash) has no rank", 0), 0u) << lines[0];
  EXPECT_EQ(lines[19].rfind("s.yaml:22:5: faults[19] (crash) has no rank", 0), 0u) << lines[19];
  EXPECT_NE(lines[20].find("and 5 more errors not shown"), std::string::npos) << lines[20];
}

// ---------------------------------------------------------------------------------------
// NOTE [Relative paths].

TEST_F(ScenarioFiles, PathsInAFileAreRelativeToItsFolder) {
  write("sub/dev.json", "{}");
  const std::string file =
      write("sub/s.yaml", "name: a\nworld: {device: dev.json}\ncheckpoint: {dir: ckpt}\nmodel: {weights: random}\n");
  auto r = load_scenario(file);
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->world.device, path("sub/dev.json"));
  EXPECT_EQ(r->checkpoint.dir, path("sub/ckpt"));
  EXPECT_EQ(r->model.weights, "random");  // not a path
  // An absolute path stays as it is.
  const std::string abs = write("abs.yaml", "name: a\ncheckpoint: {dir: " + path("elsewhere") + "}\n");
  auto a = load_scenario(abs);
  ASSERT_THAT(a, IsOk());
  EXPECT_EQ(a->checkpoint.dir, path("elsewhere"));
}

TEST_F(ScenarioFiles, PathsGivenWithSetAreRelativeToTheCurrentDirectory) {
  write("sub/dev.json", "{}");
  const std::string file = write("sub/s.yaml", "name: a\n");
  ScenarioOverrides o;
  o.set = {"checkpoint.dir=run/ckpt", "world.device=sub/dev.json"};
  const fs::path before = fs::current_path();
  fs::current_path(dir_);  // sub/dev.json exists relative to here, not to the file's folder
  auto r = load_scenario(file, o);
  fs::current_path(before);
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->checkpoint.dir, "run/ckpt");
  EXPECT_EQ(r->world.device, "sub/dev.json");
  // Looked for from the current directory, and the error says so.
  o.set = {"world.device=nowhere/dev.json"};
  auto missing = load_scenario(file, o);
  expect_error(missing, "--set:1:14:", {"world.device: file 'nowhere/dev.json' not found", "the current directory"});
}

// ---------------------------------------------------------------------------------------
// NOTE [accelerate config files]: the YAML `accelerate config` writes.

constexpr const char* kAccelerateYaml = R"(compute_environment: LOCAL_MACHINE
debug: false
distributed_type: FSDP
downcast_bf16: 'no'
fsdp_config:
  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP
  fsdp_backward_prefetch: BACKWARD_PRE
  fsdp_cpu_ram_efficient_loading: true
  fsdp_forward_prefetch: false
  fsdp_offload_params: true
  fsdp_sharding_strategy: HYBRID_SHARD
  fsdp_state_dict_type: FULL_STATE_DICT
  fsdp_sync_module_states: true
  fsdp_transformer_layer_cls_to_wrap: BertLayer
  fsdp_use_orig_params: false
machine_rank: 0
main_training_function: main
mixed_precision: bf16
num_machines: 2
num_processes: 8
rdzv_backend: static
same_network: true
use_cpu: false
)";

TEST_F(ScenarioFiles, AccelerateYamlConfigIsHonoured) {
  ScenarioOverrides o;
  o.fsdp_config = write("default_config.yaml", kAccelerateYaml);
  auto r = parse("name: a\n", o);
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->fsdp.sharding_strategy, ShardingStrategy::kHybridShard);
  EXPECT_TRUE(r->fsdp.cpu_offload);
  EXPECT_FALSE(r->fsdp.use_orig_params);
  EXPECT_TRUE(r->fsdp.sync_module_states);
  EXPECT_EQ(r->train.precision, DType::kBF16);
  EXPECT_EQ(r->world.nodes, 2);
  EXPECT_EQ(r->world.devices_per_node, 4);
  EXPECT_EQ(r->where("world.devices_per_node").to_string(), o.fsdp_config + ":20:16");
  EXPECT_EQ(r->where("fsdp.sharding_strategy").to_string(), o.fsdp_config + ":11:27");
  ASSERT_EQ(r->notes.size(), 1u);
  EXPECT_NE(r->notes[0].find("ignored (no effect on what a step computes): compute_environment, debug, downcast_bf16, "
                             "machine_rank, main_training_function, rdzv_backend, same_network, use_cpu, "
                             "fsdp_cpu_ram_efficient_loading"),
            std::string::npos)
      << r->notes[0];
  // --set still wins.
  o.set = {"world.devices_per_node=2"};
  auto s = parse("name: a\n", o);
  ASSERT_THAT(s, IsOk());
  EXPECT_EQ(s->world.devices_per_node, 2);
}

// NOTE [accelerate's defaults]: a key the YAML leaves out is accelerate's default, not the
// scenario's value, and the note names each replaced value.
TEST_F(ScenarioFiles, AccelerateYamlConfigLeavesOutKeysAtAcceleratesDefaults) {
  ScenarioOverrides o;
  o.fsdp_config = write("sparse.yaml",
                        "distributed_type: FSDP\nmixed_precision: 'no'\nfsdp_config:\n  fsdp_sharding_strategy: "
                        "SHARD_GRAD_OP\n");
  const char* scenario =
      "name: a\nfsdp:\n  backward_prefetch: BACKWARD_POST\n  use_orig_params: true\n  activation_checkpointing: "
      "true\n  auto_wrap_policy: transformer\n  state_dict_type: SHARDED_STATE_DICT\n  async_reduction: false\n";
  auto r = parse(scenario, o);
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->fsdp.sharding_strategy, ShardingStrategy::kShardGradOp);  // the file's
  EXPECT_EQ(r->fsdp.backward_prefetch, BackwardPrefetch::kNone);         // accelerate's defaults
  EXPECT_FALSE(r->fsdp.use_orig_params);
  EXPECT_FALSE(r->fsdp.activation_checkpointing);
  EXPECT_EQ(r->fsdp.auto_wrap_policy, AutoWrapPolicy::kNone);
  EXPECT_EQ(r->fsdp.state_dict_type, StateDictType::kFull);
  EXPECT_FALSE(r->fsdp.async_reduction);                                   // no accelerate key: the scenario's
  EXPECT_EQ(r->where("fsdp.use_orig_params").to_string(), o.fsdp_config);  // the file, no line: its defaults
  const std::string notes = ::testing::PrintToString(r->notes);
  EXPECT_NE(notes.find("accelerate's defaults for the fsdp keys it leaves out"), std::string::npos) << notes;
  for (const char* replaced :
       {"fsdp.auto_wrap_policy none (the scenario: transformer)",
        "fsdp.backward_prefetch NONE (the scenario: "
        "BACKWARD_POST)",
        "fsdp.use_orig_params false (the scenario: true)", "fsdp.activation_checkpointing false (the scenario: true)",
        "fsdp.state_dict_type FULL_STATE_DICT (the scenario: SHARDED_STATE_DICT)"}) {
    EXPECT_NE(notes.find(replaced), std::string::npos) << replaced << " in " << notes;
  }
  EXPECT_EQ(notes.find("async_reduction"), std::string::npos) << notes;
  // FSDP2's plugin defaults to sharded state dicts; a state dict type the file gives wins.
  o.fsdp_config = write("sparse2.yaml", "distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 2\n");
  auto v2 = parse("name: a\n", o);
  ASSERT_THAT(v2, IsOk());
  EXPECT_EQ(v2->fsdp.state_dict_type, StateDictType::kSharded);
  o.fsdp_config =
      write("sparse2_full.yaml",
            "distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 2\n  fsdp_state_dict_type: FULL_STATE_DICT\n");
  auto v2_full = parse("name: a\n", o);
  ASSERT_THAT(v2_full, IsOk());
  EXPECT_EQ(v2_full->fsdp.state_dict_type, StateDictType::kFull);
  o.fsdp_config = write("sparse.yaml",
                        "distributed_type: FSDP\nmixed_precision: 'no'\nfsdp_config:\n  fsdp_sharding_strategy: "
                        "SHARD_GRAD_OP\n");
  // --set still wins over a default.
  o.set = {"fsdp.use_orig_params=true"};
  auto s = parse(scenario, o);
  ASSERT_THAT(s, IsOk());
  EXPECT_TRUE(s->fsdp.use_orig_params);
  // A JSON fragment overlays the scenario instead.
  o.set.clear();
  o.fsdp_config = write("sparse.json", R"({"fsdp_sharding_strategy": "SHARD_GRAD_OP"})");
  auto j = parse(scenario, o);
  ASSERT_THAT(j, IsOk());
  EXPECT_EQ(j->fsdp.backward_prefetch, BackwardPrefetch::kBackwardPost);
  EXPECT_TRUE(j->fsdp.use_orig_params);
}

TEST_F(ScenarioFiles, AccelerateYamlConfigRefusesWhatWouldChangeTheRun) {
  ScenarioOverrides o;
  const std::string base = kAccelerateYaml;
  auto edit = [](std::string t, const std::string& from, const std::string& to) {
    t.replace(t.find(from), from.size(), to);
    return t;
  };
  auto with = [&](const std::string& from, const std::string& to) { return edit(base, from, to); };
  o.fsdp_config = write("multi_gpu.yaml", with("distributed_type: FSDP", "distributed_type: MULTI_GPU"));
  expect_error(parse("name: a\n", o),
               o.fsdp_config + ":3:19:", {"distributed_type: unknown value 'MULTI_GPU'", "allowed: FSDP"});
  o.fsdp_config = write("fp16.yaml", with("mixed_precision: bf16", "mixed_precision: fp16"));
  expect_error(parse("name: a\n", o), o.fsdp_config + ":18:18:", {"fp16 is not modeled", "allowed: no, bf16"});
  o.fsdp_config = write("uneven.yaml", with("num_processes: 8", "num_processes: 7"));
  expect_error(parse("name: a\n", o), o.fsdp_config + ":20:16:", {"do not split evenly over 2 machines"});
  o.fsdp_config = write("v3.yaml", with("fsdp_config:\n", "fsdp_config:\n  fsdp_version: 3\n"));
  expect_error(parse("name: a\n", o),
               o.fsdp_config + ":6:17:", {"fsdp.fsdp_version", "allowed: an integer from 1 to 2"});
  o.fsdp_config = write("typo.yaml", with("mixed_precision: bf16", "mixed_precison: bf16"));
  expect_error(parse("name: a\n", o), o.fsdp_config + ":18:1:", {"did you mean 'mixed_precision'?"});
  o.fsdp_config = write("newer.yaml", with("use_cpu: false", "use_cpu: false\nsome_future_key: 3"));
  auto newer = parse("name: a\n", o);
  ASSERT_THAT(newer, IsOk());
  ASSERT_EQ(newer->notes.size(), 2u);
  EXPECT_NE(newer->notes[1].find("ignored (not accelerate keys shardlab knows; check the spelling): some_future_key"),
            std::string::npos)
      << newer->notes[1];
  o.fsdp_config = write("syntax.yaml", "distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: [FULL_SHARD\n");
  expect_error(parse("name: a\n", o), o.fsdp_config + ":", {"YAML syntax error"});
  // Every problem of the file at once.
  o.fsdp_config = write("two.yaml", edit(with("mixed_precision: bf16", "mixed_precision: fp8"),
                                         "fsdp_use_orig_params: false", "fsdp_use_orig_params: maybe"));
  auto two = parse("name: a\n", o);
  ASSERT_FALSE(two.is_ok());
  EXPECT_EQ(lines_of(two.status().message()).size(), 2u) << two.status().message();
}

// ---------------------------------------------------------------------------------------
// NOTE [One schema]: the reference comes from the parser's table.

TEST(ScenarioSchema, ReferenceListsEveryKeyWithDefaultsAndEquivalents) {
  const std::string md = schema_reference(/*markdown=*/true);
  EXPECT_NE(md.find("| `fsdp.sharding_strategy` | name | `FULL_SHARD` | FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, "
                    "HYBRID_SHARD, _HYBRID_SHARD_ZERO2 (or accelerate's numbers 1-5, in that order) |"),
            std::string::npos);
  EXPECT_NE(md.find("| `fsdp.reshard_after_forward` | bool or integer | `true` |"), std::string::npos);
  EXPECT_NE(md.find("accelerate fsdp_reshard_after_forward | fsdp_reshard_after_forward |"), std::string::npos);
  EXPECT_NE(md.find("| `train.steps` | integer | `5` |"), std::string::npos);
  EXPECT_NE(md.find("| `world.device` | name or path | `cpu` | cpu, gaudi1, gaudi2, gaudi3, or a path"),
            std::string::npos);
  EXPECT_NE(md.find("| `faults[].kind` | name | `\"\"` |"), std::string::npos) << md;
  EXPECT_NE(md.find("| `train.optimizer.betas` | list | `[0.9, 0.999]` |"), std::string::npos);
  // Every key of the canonical YAML (what `validate --print` writes) is in the reference.
  const Scenario d;
  std::istringstream yaml(to_yaml(d));
  std::vector<std::string> stack;
  for (std::string line; std::getline(yaml, line);) {
    const std::size_t indent = line.find_first_not_of(' ');
    const std::size_t colon = line.find(':');
    if (indent == std::string::npos || colon == std::string::npos || line[indent] == '#' || line[indent] == '-')
      continue;
    stack.resize(indent / 2);
    const std::string key = line.substr(indent, colon - indent);
    std::string full;
    for (const auto& part : stack) full += part + ".";
    full += key;
    stack.push_back(key);
    const bool section = colon + 1 == line.size();
    if (!section) {
      EXPECT_NE(md.find("| `" + full + "` |"), std::string::npos) << "missing from the reference: " << full;
    }
  }
}

}  // namespace
}  // namespace shardlab::cli
