// `shardlab grads` end to end: a Hugging Face-style model folder and batch file written
// here, gradients at world size 4 (every strategy) against world size 1, and each kind of
// bad input → exit 2 with a message naming the problem.
#include "cli/grads_command.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>

#include "runtime/device/cpu/device.h"
#include "runtime/io/safetensors.h"
#include "runtime/model/bert_io.h"

namespace shardlab::cli {
namespace {

namespace fs = std::filesystem;
namespace io = runtime::io;
using runtime::model::BertHead;

io::StoredTensor int_tensor(const std::string& name, const Shape& shape, const std::vector<std::int64_t>& v) {
  io::StoredTensor t;
  t.name = name;
  t.dtype = DType::kI64;
  t.shape = shape;
  t.data.resize(v.size() * sizeof(std::int64_t));
  std::memcpy(t.data.data(), v.data(), t.data.size());
  return t;
}

// A small BERT checkpoint folder and an 8-row batch for `head`.
struct Files {
  explicit Files(BertHead head, const std::string& tag) {
    dir = fs::path(::testing::TempDir()) / ("grads_" + tag);
    fs::create_directories(dir);
    const char* arch = head == BertHead::kMaskedLM            ? "BertForMaskedLM"
                       : head == BertHead::kQuestionAnswering ? "BertForQuestionAnswering"
                                                              : "BertForSequenceClassification";
    std::ofstream(dir / "config.json") << R"({"model_type": "bert", "architectures": [")" << arch << R"("],
      "vocab_size": 200, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
      "intermediate_size": 64, "hidden_act": "gelu", "max_position_embeddings": 16, "type_vocab_size": 2,
      "layer_norm_eps": 1e-12, "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
      "num_labels": 3, "initializer_range": 0.1})";
    runtime::model::BertOptions o;
    o.config = runtime::model::read_bert_config((dir / "config.json").string())->config;
    o.head = head;
    runtime::model::Bert bert(o);
    runtime::device::cpu::CpuDevice cpu;
    runtime::device::Device& dev = cpu;
    const std::int64_t total = runtime::model::total_numel(bert.params());
    Tensor p = *dev.empty({total}, DType::kF32, MemoryCategory::kParameters, "p");
    Tensor g = *dev.empty({total}, DType::kF32, MemoryCategory::kGradients, "g");
    runtime::model::FlatParamAccess views(bert.params(), p, g);
    EXPECT_TRUE(bert.init_params(dev, views.params(), 17).is_ok());
    EXPECT_TRUE(
        runtime::model::save_bert_tensors((dir / "model.safetensors").string(), bert.params(), views.params()).is_ok());
    // The batch: synthetic rows written as a user's file would hold them.
    o.seq_len = 12;
    runtime::model::Bert sized(o);
    auto batch = *sized.synthetic_batch(dev, 23, 0, 0, 8);
    io::SafetensorsFile f;
    for (const auto& [name, t] : batch.tensors) {
      std::vector<std::int64_t> v(static_cast<std::size_t>(t.numel()));
      for (std::int64_t i = 0; i < t.numel(); ++i) {
        v[static_cast<std::size_t>(i)] =
            t.dtype() == DType::kF32 ? static_cast<std::int64_t>(t.data<float>()[i]) : t.data<std::int64_t>()[i];
      }
      f.tensors.push_back(int_tensor(name, t.shape(), v));
    }
    EXPECT_TRUE(io::write_safetensors((dir / "batch.safetensors").string(), f).is_ok());
  }
  GradsArgs args(int world, const std::string& out) const {
    GradsArgs a;
    a.model_dir = dir.string();
    a.inputs = (dir / "batch.safetensors").string();
    a.out = (dir / out).string();
    a.world_size = world;
    a.quiet = true;
    return a;
  }
  fs::path dir;
};

// Largest |a - b| over every tensor of two gradient files, and the largest |b|.
std::pair<double, double> max_diff(const std::string& a, const std::string& b) {
  auto fa = io::read_safetensors(a), fb = io::read_safetensors(b);
  EXPECT_TRUE(fa.is_ok() && fb.is_ok());
  double worst = 0, scale = 0;
  EXPECT_EQ(fa->tensors.size(), fb->tensors.size());
  for (const auto& t : fa->tensors) {
    const io::StoredTensor* u = fb->find(t.name);
    EXPECT_NE(u, nullptr) << t.name;
    if (u == nullptr) continue;
    EXPECT_EQ(t.dtype, DType::kF32);
    const auto* x = reinterpret_cast<const float*>(t.data.data());
    const auto* y = reinterpret_cast<const float*>(u->data.data());
    for (std::size_t i = 0; i < t.data.size() / 4; ++i) {
      worst = std::max(worst, static_cast<double>(std::fabs(x[i] - y[i])));
      scale = std::max(scale, static_cast<double>(std::fabs(y[i])));
    }
  }
  return {worst, scale};
}

class GradsCommand : public ::testing::TestWithParam<BertHead> {};

TEST_P(GradsCommand, FourShardedRanksEqualOneRankForEveryStrategy) {
  const BertHead head = GetParam();
  Files files(head, std::string(runtime::model::bert_head_name(head)));
  ASSERT_EQ(grads_command(files.args(1, "g1.safetensors")), 0);
  auto g1 = io::read_safetensors((files.dir / "g1.safetensors").string());
  ASSERT_TRUE(g1.is_ok());
  ASSERT_TRUE(g1->metadata.count("loss"));
  const double loss = std::stod(g1->metadata.at("loss"));
  EXPECT_GT(loss, 0.0);
  EXPECT_NE(g1->find("bert.encoder.layer.1.attention.self.query.weight"), nullptr);
  for (auto strategy : {runtime::fsdp::ShardingStrategy::kFullShard, runtime::fsdp::ShardingStrategy::kShardGradOp,
                        runtime::fsdp::ShardingStrategy::kNoShard, runtime::fsdp::ShardingStrategy::kHybridShard}) {
    GradsArgs a = files.args(4, "g4.safetensors");
    a.strategy = strategy;
    ASSERT_EQ(grads_command(a), 0);
    const auto [diff, scale] =
        max_diff((files.dir / "g4.safetensors").string(), (files.dir / "g1.safetensors").string());
    EXPECT_GT(scale, 0.0);
    // fp32, summation order differs by rank: a few ulps of the largest gradient.
    EXPECT_LE(diff, 1e-6 * scale + 1e-9) << runtime::fsdp::strategy_name(strategy) << " max |Δ| " << diff;
    std::printf("[ %s %s ] max |grad(W=4) - grad(W=1)| = %.3g (max |grad| %.3g)\n",
                std::string(runtime::model::bert_head_name(head)).c_str(),
                std::string(runtime::fsdp::strategy_name(strategy)).c_str(), diff, scale);
    auto g4 = io::read_safetensors((files.dir / "g4.safetensors").string());
    EXPECT_NEAR(std::stod(g4->metadata.at("loss")), loss, 1e-6 * loss);
  }
}

// One rank: FSDP runs NO_SHARD whatever was asked, as PyTorch FSDP does, and says so.
TEST_P(GradsCommand, OneRankRunsNoShardAndSaysSo) {
  const BertHead head = GetParam();
  Files files(head, std::string(runtime::model::bert_head_name(head)) + "_one_rank");
  GradsArgs a = files.args(1, "full.safetensors");
  a.quiet = false;
  a.strategy = runtime::fsdp::ShardingStrategy::kFullShard;
  ::testing::internal::CaptureStdout();
  const int rc = grads_command(a);
  const std::string said = ::testing::internal::GetCapturedStdout();
  ASSERT_EQ(rc, 0);
  EXPECT_NE(said.find("FSDP NO_SHARD"), std::string::npos) << said;
  EXPECT_NE(said.find("note: FSDP runs NO_SHARD instead of FULL_SHARD since the world size is 1"), std::string::npos)
      << said;
  EXPECT_NE(said.find("forward + backward + gradient reduction: "), std::string::npos) << said;
  a.strategy = runtime::fsdp::ShardingStrategy::kNoShard;
  a.out = (files.dir / "no.safetensors").string();
  ::testing::internal::CaptureStdout();
  ASSERT_EQ(grads_command(a), 0);
  EXPECT_EQ(::testing::internal::GetCapturedStdout().find("note:"), std::string::npos);
  EXPECT_EQ(*io::read_file((files.dir / "full.safetensors").string()), *io::read_file(a.out));
}

TEST_P(GradsCommand, DropoutZeroAndBf16Run) {
  const BertHead head = GetParam();
  Files files(head, std::string(runtime::model::bert_head_name(head)) + "_bf16");
  GradsArgs a = files.args(2, "fp32.safetensors");
  a.dropout = 0.0f;
  ASSERT_EQ(grads_command(a), 0);
  a.dtype = "bf16";
  a.out = (files.dir / "bf16.safetensors").string();
  ASSERT_EQ(grads_command(a), 0);
  const auto [diff, scale] = max_diff(a.out, (files.dir / "fp32.safetensors").string());
  EXPECT_GT(diff, 0.0);          // bf16 really rounds
  EXPECT_LT(diff, 0.1 * scale);  // and stays close (bf16 keeps 8 bits)
}

// --dropout-masks: one mask per Dropout module by its Hugging Face name, with that
// module's shape, values 0 or 1/(1-p) at about rate p; a row's mask is the same whichever
// slice of the batch draws it (what lets another framework apply them to the whole batch).
TEST_P(GradsCommand, DropoutMasksByModuleName) {
  const BertHead head = GetParam();
  Files files(head, std::string(runtime::model::bert_head_name(head)) + "_masks");
  GradsArgs a = files.args(2, "g.safetensors");
  a.dropout = 0.25f;
  a.seed = 9;
  a.dropout_masks = (files.dir / "masks.safetensors").string();
  ASSERT_EQ(grads_command(a), 0);
  const io::SafetensorsFile masks = *io::read_safetensors(a.dropout_masks);
  std::map<std::string, Shape> want = {{"bert.embeddings.dropout", {8, 12, 32}}};
  for (const std::string l : {"0", "1"}) {
    want["bert.encoder.layer." + l + ".attention.self.dropout"] = {8, 4, 12, 12};
    want["bert.encoder.layer." + l + ".attention.output.dropout"] = {8, 12, 32};
    want["bert.encoder.layer." + l + ".output.dropout"] = {8, 12, 32};
  }
  if (head == BertHead::kSequenceClassification) want["dropout"] = {8, 32};
  std::map<std::string, Shape> got;
  std::int64_t zeros = 0, total = 0;
  for (const auto& t : masks.tensors) {
    got[t.name] = t.shape;
    ASSERT_EQ(t.dtype, DType::kF32) << t.name;
    const auto* v = reinterpret_cast<const float*>(t.data.data());
    for (std::size_t i = 0; i < t.data.size() / sizeof(float); ++i, ++total) {
      ASSERT_TRUE(v[i] == 0.0f || v[i] == 1.0f / 0.75f) << t.name << "[" << i << "] = " << v[i];
      zeros += v[i] == 0.0f;
    }
  }
  EXPECT_EQ(got, want);
  EXPECT_NEAR(static_cast<double>(zeros) / static_cast<double>(total), 0.25, 0.02);
  // Rows 4..7 drawn alone (as rank 1 of 2 draws them) are rows 4..7 of the file's.
  runtime::model::BertOptions o;
  o.config = runtime::model::read_bert_config((files.dir / "config.json").string())->config;
  o.config.hidden_dropout_prob = o.config.attention_probs_dropout_prob = 0.25f;
  o.head = head;
  runtime::device::cpu::CpuDevice cpu;
  const auto half = *runtime::model::Bert(o).dropout_masks(cpu, {9, 0, 4, true}, 4, 12);
  ASSERT_EQ(half.size(), masks.tensors.size());
  for (std::size_t i = 0; i < half.size(); ++i) {
    const auto& [name, mask] = half[i];
    ASSERT_EQ(name, masks.tensors[i].name);
    const std::size_t bytes = static_cast<std::size_t>(mask.numel()) * sizeof(float);
    EXPECT_EQ(std::memcmp(mask.data<float>(), masks.tensors[i].data.data() + bytes, bytes), 0) << name;
  }
  // Without dropout there is no mask to write: exit 2, saying how to get one.
  a.dropout = 0.0f;
  testing::internal::CaptureStderr();
  EXPECT_EQ(grads_command(a), 2);
  EXPECT_NE(testing::internal::GetCapturedStderr().find("the step draws no dropout mask"), std::string::npos);
  // An output path that cannot be written (its folder does not exist): exit 2 naming the
  // flag and the path, before the step, and nothing written.
  a.dropout = 0.25f;
  a.dropout_masks = (files.dir / "no_such_dir" / "masks.safetensors").string();
  a.out = (files.dir / "never.safetensors").string();
  for (int which = 0; which < 2; ++which) {
    SCOPED_TRACE(which == 0 ? "--dropout-masks" : "--out");
    if (which == 1) std::swap(a.dropout_masks, a.out);
    testing::internal::CaptureStderr();
    EXPECT_EQ(grads_command(a), 2);
    const std::string err = testing::internal::GetCapturedStderr();
    const std::string& bad = which == 0 ? a.dropout_masks : a.out;
    EXPECT_NE(err.find((which == 0 ? "--dropout-masks " : "--out ") + bad + ": the folder"), std::string::npos) << err;
    EXPECT_FALSE(std::filesystem::exists(which == 0 ? a.out : a.dropout_masks));
  }
}

INSTANTIATE_TEST_SUITE_P(Heads, GradsCommand,
                         ::testing::Values(BertHead::kSequenceClassification, BertHead::kMaskedLM,
                                           BertHead::kQuestionAnswering),
                         [](const auto& info) { return std::string(runtime::model::bert_head_name(info.param)); });

TEST(GradsCommandErrors, BadInputsExitTwo) {
  Files files(BertHead::kSequenceClassification, "errors");
  testing::internal::CaptureStderr();
  GradsArgs a = files.args(3, "x.safetensors");  // 8 rows do not split over 3 ranks
  EXPECT_EQ(grads_command(a), 2);
  a = files.args(1, "x.safetensors");
  a.model_dir = (files.dir / "missing").string();
  EXPECT_EQ(grads_command(a), 2);
  a = files.args(1, "x.safetensors");
  a.inputs = (files.dir / "config.json").string();  // not a safetensors file
  EXPECT_EQ(grads_command(a), 2);
  a = files.args(1, "x.safetensors");
  a.dtype = "fp8";
  EXPECT_EQ(grads_command(a), 2);
  a = files.args(1, "x.safetensors");
  a.dropout = 1.5f;
  EXPECT_EQ(grads_command(a), 2);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("B = 8 rows, which do not split evenly over --world-size 3"), std::string::npos) << err;
  EXPECT_NE(err.find("config.json"), std::string::npos) << err;
  EXPECT_NE(err.find("--dtype must be fp32 or bf16"), std::string::npos) << err;
  EXPECT_NE(err.find("--dropout"), std::string::npos) << err;
}

TEST(GradsCommandErrors, TokenOutsideTheVocabularyAndTooLongSequences) {
  Files files(BertHead::kSequenceClassification, "vocab");
  io::SafetensorsFile f = *io::read_safetensors((files.dir / "batch.safetensors").string());
  for (auto& t : f.tensors) {
    if (t.name == "input_ids") reinterpret_cast<std::int64_t*>(t.data.data())[5] = 200;
  }
  ASSERT_TRUE(io::write_safetensors((files.dir / "bad.safetensors").string(), f).is_ok());
  GradsArgs a = files.args(1, "x.safetensors");
  a.inputs = (files.dir / "bad.safetensors").string();
  testing::internal::CaptureStderr();
  EXPECT_EQ(grads_command(a), 2);
  // T = 20 > max_position_embeddings = 16.
  io::SafetensorsFile longer;
  longer.tensors.push_back(int_tensor("input_ids", {1, 20}, std::vector<std::int64_t>(20, 5)));
  longer.tensors.push_back(int_tensor("attention_mask", {1, 20}, std::vector<std::int64_t>(20, 1)));
  longer.tensors.push_back(int_tensor("labels", {1}, {0}));
  ASSERT_TRUE(io::write_safetensors((files.dir / "long.safetensors").string(), longer).is_ok());
  a.inputs = (files.dir / "long.safetensors").string();
  EXPECT_EQ(grads_command(a), 2);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("input_ids[0, 5] = 200"), std::string::npos) << err;
  EXPECT_NE(err.find("max_position_embeddings"), std::string::npos) << err;
}

// config.json's pad_token_id is nn.Embedding's padding_idx: with it set to 7 and the batch
// padded with 7, row 7 of the word embeddings gets no gradient — though the QA head reads
// the padding positions' logits, which reach row 7 when the config's padding row is 0.
TEST(GradsCommandPadding, ConfigPadTokenIdIsThePaddingRow) {
  Files files(BertHead::kQuestionAnswering, "pad");
  io::SafetensorsFile batch = *io::read_safetensors((files.dir / "batch.safetensors").string());
  const io::StoredTensor* mask = batch.find("attention_mask");
  ASSERT_NE(mask, nullptr);
  std::vector<std::int64_t> m(mask->data.size() / 8);
  std::memcpy(m.data(), mask->data.data(), mask->data.size());
  int padded = 0;
  for (auto& t : batch.tensors) {
    if (t.name != "input_ids") continue;
    auto* ids = reinterpret_cast<std::int64_t*>(t.data.data());
    for (std::size_t i = 0; i < m.size(); ++i) {
      if (m[i] == 0) {
        ids[i] = 7;
        ++padded;
      }
    }
  }
  ASSERT_GT(padded, 0);
  ASSERT_TRUE(io::write_safetensors((files.dir / "batch.safetensors").string(), batch).is_ok());
  const auto row7 = [&](const std::string& out) {
    auto g = io::read_safetensors((files.dir / out).string());
    EXPECT_TRUE(g.is_ok());
    const io::StoredTensor* w = g->find("bert.embeddings.word_embeddings.weight");
    EXPECT_NE(w, nullptr);
    double sum = 0;
    for (int h = 0; h < 32; ++h) sum += std::fabs(reinterpret_cast<const float*>(w->data.data())[7 * 32 + h]);
    return sum;
  };
  ASSERT_EQ(grads_command(files.args(2, "pad0.safetensors")), 0);  // the config's default padding row, 0
  EXPECT_GT(row7("pad0.safetensors"), 0.0);
  std::string config;
  {
    std::ifstream in(files.dir / "config.json");
    config.assign(std::istreambuf_iterator<char>(in), {});
  }
  config.insert(config.rfind('}'), ", \"pad_token_id\": 7");
  std::ofstream(files.dir / "config.json") << config;
  ASSERT_EQ(grads_command(files.args(2, "pad7.safetensors")), 0);
  EXPECT_EQ(row7("pad7.safetensors"), 0.0);
}

// NaN and ±Inf weights compute (as in PyTorch), and the non-finite result is a failure,
// exit 3, saying how many gradients are not finite, where, and that the weights are why —
// never "max |grad| 0" and exit 0.
TEST(GradsCommandErrors, NonFiniteWeightsGiveExitThreeNamingCountsAndTensors) {
  Files files(BertHead::kSequenceClassification, "nonfinite");
  const std::string model = (files.dir / "model.safetensors").string();
  io::SafetensorsFile f = *io::read_safetensors(model);
  for (auto& t : f.tensors) {
    auto* v = reinterpret_cast<float*>(t.data.data());
    if (t.name == "bert.embeddings.LayerNorm.weight") v[3] = std::nanf("");
    if (t.name == "bert.encoder.layer.1.output.dense.bias") v[0] = INFINITY;
  }
  ASSERT_TRUE(io::write_safetensors(model, f).is_ok());
  GradsArgs a = files.args(2, "g.safetensors");
  testing::internal::CaptureStderr();
  EXPECT_EQ(grads_command(a), 3);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("non-finite result"), std::string::npos) << err;
  EXPECT_NE(err.find("  loss: nan"), std::string::npos) << err;
  EXPECT_NE(err.find("  gradients: "), std::string::npos) << err;
  EXPECT_NE(err.find(" NaN, "), std::string::npos) << err;
  EXPECT_NE(err.find("bert.embeddings.word_embeddings.weight ("), std::string::npos) << err;
  EXPECT_NE(err.find("cause: the weights in " + files.dir.string() + "/model.safetensors are not finite: 2 of "),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("(1 NaN, 1 ±Inf) in 2 of "), std::string::npos) << err;
  EXPECT_NE(err.find("bert.embeddings.LayerNorm.weight (1 of 32, first at [3])"), std::string::npos) << err;
  EXPECT_NE(err.find("bert.encoder.layer.1.output.dense.bias (1 of 32, first at [0])"), std::string::npos) << err;
  EXPECT_TRUE(fs::exists(files.dir / "g.safetensors"));  // written, for inspection
  // Finite weights: exit 0, nothing said about non-finite values.
  Files fine(BertHead::kSequenceClassification, "finite");
  testing::internal::CaptureStderr();
  EXPECT_EQ(grads_command(fine.args(2, "g.safetensors")), 0);
  EXPECT_EQ(testing::internal::GetCapturedStderr().find("non-finite"), std::string::npos);
}

// NOTE [Loss without targets]: a batch whose labels are all -100 has loss NaN, as PyTorch's
// mean cross-entropy; grads says so (exit 3) and why. Its gradients are zero, not NaN.
TEST(GradsCommandErrors, ABatchWithoutTargetsIsANaNLossSaidWithItsCause) {
  Files files(BertHead::kSequenceClassification, "no_targets");
  io::SafetensorsFile batch = *io::read_safetensors((files.dir / "batch.safetensors").string());
  for (auto& t : batch.tensors) {
    if (t.name != "labels") continue;
    auto* v = reinterpret_cast<std::int64_t*>(t.data.data());
    for (std::size_t i = 0; i < t.data.size() / 8; ++i) v[i] = -100;
  }
  ASSERT_TRUE(io::write_safetensors((files.dir / "batch.safetensors").string(), batch).is_ok());
  testing::internal::CaptureStderr();
  EXPECT_EQ(grads_command(files.args(2, "g.safetensors")), 3);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("  loss: nan"), std::string::npos) << err;
  EXPECT_EQ(err.find("  gradients: "), std::string::npos) << err;  // all zero, all finite
  EXPECT_NE(err.find("has no targets (every label ignored, e.g. -100)"), std::string::npos) << err;
  auto g = io::read_safetensors((files.dir / "g.safetensors").string());
  ASSERT_TRUE(g.is_ok());
  EXPECT_EQ(g->metadata.at("loss"), "nan");
  for (const auto& t : g->tensors) {
    const auto* v = reinterpret_cast<const float*>(t.data.data());
    for (std::size_t i = 0; i < t.data.size() / 4; ++i) ASSERT_EQ(v[i], 0.0f) << t.name;
  }
}

}  // namespace
}  // namespace shardlab::cli
