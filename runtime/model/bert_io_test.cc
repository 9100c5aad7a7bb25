// Hugging Face BERT files: config.json parsing with transformers' defaults and precise
// errors, safetensors weights (dtypes, name aliases, tied decoder), token batches.
#include "runtime/model/bert_io.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <tuple>

#include "runtime/core/rng.h"
#include "runtime/device/cpu/device.h"
#include "runtime/io/safetensors.h"
#include "testing/status_matchers.h"

using shardlab::testlib::IsOk;

namespace shardlab::runtime::model {
namespace {

using io::SafetensorsFile;
using io::StoredTensor;

std::string temp_path(const std::string& name) {
  return (std::filesystem::path(::testing::TempDir()) / ("bert_io_" + name)).string();
}

// ---- config.json ------------------------------------------------------------------------

std::string config_error(const std::string& text) {
  auto r = parse_bert_config("cfg.json", text);
  EXPECT_FALSE(r.is_ok()) << text;
  if (r.is_ok()) return "";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().to_string();
  return r.status().message();
}

TEST(BertConfigJson, EmptyObjectTakesTransformersDefaults) {
  auto r = parse_bert_config("cfg.json", "{}", BertHead::kQuestionAnswering);
  ASSERT_THAT(r, IsOk());
  const BertConfig& c = r->config;
  EXPECT_EQ(c.vocab_size, 30522);
  EXPECT_EQ(c.hidden_size, 768);
  EXPECT_EQ(c.num_hidden_layers, 12);
  EXPECT_EQ(c.num_attention_heads, 12);
  EXPECT_EQ(c.intermediate_size, 3072);
  EXPECT_EQ(c.hidden_act, device::Activation::kGelu);
  EXPECT_EQ(c.max_position_embeddings, 512);
  EXPECT_EQ(c.type_vocab_size, 2);
  EXPECT_EQ(c.layer_norm_eps, 1e-12f);
  EXPECT_EQ(c.hidden_dropout_prob, 0.1f);
  EXPECT_EQ(c.attention_probs_dropout_prob, 0.1f);
  EXPECT_EQ(c.initializer_range, 0.02f);
  EXPECT_EQ(c.num_labels, 2);
  EXPECT_EQ(r->head, BertHead::kQuestionAnswering);  // no architectures: the default head
}

TEST(BertConfigJson, ReadsEveryKey) {
  const std::string text = R"({
    "architectures": ["BertForMaskedLM"], "model_type": "bert", "attention_probs_dropout_prob": 0.05,
    "hidden_act": "gelu_new", "hidden_dropout_prob": 0, "hidden_size": 256, "initializer_range": 0.5,
    "intermediate_size": 1024, "layer_norm_eps": 1e-5, "max_position_embeddings": 128, "num_attention_heads": 4,
    "num_hidden_layers": 4.0, "type_vocab_size": 1, "vocab_size": 1000, "num_labels": 5,
    "pad_token_id": 0, "position_embedding_type": "absolute", "transformers_version": "4.40.0", "use_cache": true
  })";
  auto r = parse_bert_config("cfg.json", text);
  ASSERT_THAT(r, IsOk());
  const BertConfig& c = r->config;
  EXPECT_EQ(r->head, BertHead::kMaskedLM);
  EXPECT_EQ(c.vocab_size, 1000);
  EXPECT_EQ(c.hidden_size, 256);
  EXPECT_EQ(c.num_hidden_layers, 4);  // an integral float is an integer
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.intermediate_size, 1024);
  EXPECT_EQ(c.hidden_act, device::Activation::kGeluTanh);
  EXPECT_EQ(c.max_position_embeddings, 128);
  EXPECT_EQ(c.type_vocab_size, 1);
  EXPECT_EQ(c.layer_norm_eps, 1e-5f);
  EXPECT_EQ(c.hidden_dropout_prob, 0.0f);
  EXPECT_EQ(c.attention_probs_dropout_prob, 0.05f);
  EXPECT_EQ(c.initializer_range, 0.5f);
  EXPECT_EQ(c.num_labels, 5);
}

TEST(BertConfigJson, HiddenActNames) {
  EXPECT_EQ(parse_bert_config("c", R"({"hidden_act": "gelu"})")->config.hidden_act, device::Activation::kGelu);
  EXPECT_EQ(parse_bert_config("c", R"({"hidden_act": "gelu_new"})")->config.hidden_act, device::Activation::kGeluTanh);
  EXPECT_EQ(parse_bert_config("c", R"({"hidden_act": "gelu_pytorch_tanh"})")->config.hidden_act,
            device::Activation::kGeluTanh);
  const std::string m = config_error(R"({"hidden_act": "relu"})");
  EXPECT_NE(m.find("hidden_act"), std::string::npos) << m;
  EXPECT_NE(m.find("relu"), std::string::npos) << m;
  EXPECT_NE(m.find("gelu_new"), std::string::npos) << m;
  EXPECT_NE(m.find("gelu_pytorch_tanh"), std::string::npos) << m;
  const std::string t = config_error(R"({"hidden_act": 3})");
  EXPECT_NE(t.find("hidden_act"), std::string::npos) << t;
}

TEST(BertConfigJson, ArchitecturePicksTheHead) {
  EXPECT_EQ(parse_bert_config("c", R"({"architectures": ["BertForSequenceClassification"]})")->head,
            BertHead::kSequenceClassification);
  EXPECT_EQ(parse_bert_config("c", R"({"architectures": ["BertForMaskedLM"]})")->head, BertHead::kMaskedLM);
  EXPECT_EQ(parse_bert_config("c", R"({"architectures": ["BertForQuestionAnswering"]})")->head,
            BertHead::kQuestionAnswering);
  EXPECT_EQ(parse_bert_config("c", R"({"architectures": []})", BertHead::kMaskedLM)->head, BertHead::kMaskedLM);
  for (const char* text : {R"({"architectures": ["RobertaForMaskedLM"]})",
                           R"({"architectures": ["BertForPreTraining"]})", R"({"architectures": ["mlm"]})"}) {
    const std::string m = config_error(text);
    EXPECT_NE(m.find("architectures"), std::string::npos) << m;
    EXPECT_NE(m.find("BertForSequenceClassification, BertForMaskedLM, BertForQuestionAnswering"), std::string::npos)
        << m;
  }
  const std::string m = config_error(R"({"architectures": "BertForMaskedLM"})");
  EXPECT_NE(m.find("architectures"), std::string::npos) << m;
  EXPECT_NE(m.find("a string"), std::string::npos) << m;
}

TEST(BertConfigJson, RejectsOtherModelTypes) {
  const std::string m = config_error(R"({"model_type": "roberta"})");
  EXPECT_NE(m.find("model_type"), std::string::npos) << m;
  EXPECT_NE(m.find("roberta"), std::string::npos) << m;
  EXPECT_NE(m.find("\"bert\""), std::string::npos) << m;
  const std::string p = config_error(R"({"position_embedding_type": "relative_key"})");
  EXPECT_NE(p.find("position_embedding_type"), std::string::npos) << p;
  EXPECT_NE(p.find("relative_key"), std::string::npos) << p;
}

struct BadValue {
  const char* text;
  const char* key;
  const char* found;    // a piece of the message describing what was there
  const char* allowed;  // a piece of the message saying what is allowed
};

TEST(BertConfigJson, WrongTypesAndRangesNameKeyFoundAndAllowed) {
  const BadValue cases[] = {
      {R"({"hidden_size": "big"})", "hidden_size", "\"big\" (a string)", "an integer in [1, "},
      {R"({"hidden_size": -768})", "hidden_size", "-768 (a negative integer)", "an integer in [1, "},
      {R"({"hidden_size": 7.5})", "hidden_size", "7.5 (a number), not an integer", "an integer in [1, "},
      {R"({"hidden_size": true})", "hidden_size", "true (a boolean)", "an integer"},
      {R"({"hidden_size": null})", "hidden_size", "null", "an integer"},
      {R"({"hidden_size": [768]})", "hidden_size", "(an array)", "an integer"},
      {R"({"vocab_size": 99999999999999999999})", "vocab_size", "out of range", "an integer in [1, 4194304]"},
      {R"({"vocab_size": 18446744073709551615})", "vocab_size", "out of range", "an integer in [1, 4194304]"},
      {R"({"vocab_size": 1e30})", "vocab_size", "out of range", "an integer in [1, "},
      {R"({"vocab_size": 1e400})", "vocab_size", "overflow", "a finite number"},
      {R"({"num_hidden_layers": 3000000000})", "num_hidden_layers", "out of range", "[0, 1000]"},
      {R"({"num_hidden_layers": -1})", "num_hidden_layers", "-1", "[0, 1000]"},
      {R"({"num_attention_heads": 0})", "num_attention_heads", "0 (an integer), out of range", "[1, 65536]"},
      {R"({"num_labels": 0})", "num_labels", "out of range", "an integer in [1, "},
      {R"({"layer_norm_eps": "1e-12"})", "layer_norm_eps", "(a string)", "a number > 0"},
      {R"({"layer_norm_eps": 0})", "layer_norm_eps", "out of range", "a number > 0"},
      {R"({"layer_norm_eps": 1e-60})", "layer_norm_eps", "rounds to 0", "a number > 0"},
      {R"({"hidden_dropout_prob": 1.5})", "hidden_dropout_prob", "1.5", "a number in [0, 1)"},
      {R"({"attention_probs_dropout_prob": -0.1})", "attention_probs_dropout_prob", "-0.1", "[0, 1)"},
      {R"({"initializer_range": 1e300})", "initializer_range", "fp32 range", "a number >= 0"},
      {R"({"id2label": ["a", "b"]})", "id2label", "(an array)", "an object"},
      {R"({"model_type": 7})", "model_type", "7 (an integer)", "\"bert\""},
  };
  for (const BadValue& c : cases) {
    const std::string m = config_error(c.text);
    EXPECT_NE(m.find("cfg.json"), std::string::npos) << m;
    EXPECT_NE(m.find(std::string("'") + c.key + "'"), std::string::npos) << c.text << " → " << m;
    EXPECT_NE(m.find(c.found), std::string::npos) << c.text << " → " << m;
    EXPECT_NE(m.find(c.allowed), std::string::npos) << c.text << " → " << m;
  }
}

// NOTE [BERT size limits]: sizes that would overflow or exhaust memory are refused with the
// number and the limit, before anything is sized from them (never an abort).
TEST(BertConfigJson, HugeSizesAreRefusedWithTheNumberAndTheLimit) {
  const BadValue cases[] = {
      {R"({"vocab_size": 4611686018427387904})", "vocab_size", "4611686018427387904 (an integer), out of range",
       "an integer in [1, 4194304]"},
      {R"({"hidden_size": 1099511627776, "num_attention_heads": 16})", "hidden_size", "1099511627776",
       "an integer in [1, 65536]"},
      {R"({"intermediate_size": 4611686018427387904})", "intermediate_size", "4611686018427387904",
       "an integer in [1, 262144]"},
      {R"({"num_hidden_layers": 1000000})", "num_hidden_layers", "1000000", "an integer in [0, 1000]"},
      {R"({"max_position_embeddings": 4611686018427387904})", "max_position_embeddings", "4611686018427387904",
       "an integer in [1, 1048576]"},
      {R"({"type_vocab_size": 4611686018427387904})", "type_vocab_size", "4611686018427387904",
       "an integer in [1, 65536]"},
      {R"({"num_labels": 4611686018427387904})", "num_labels", "4611686018427387904", "an integer in [1, 1048576]"},
  };
  for (const BadValue& c : cases) {
    const std::string m = config_error(c.text);
    EXPECT_NE(m.find(std::string("'") + c.key + "'"), std::string::npos) << c.text << " → " << m;
    EXPECT_NE(m.find(c.found), std::string::npos) << c.text << " → " << m;
    EXPECT_NE(m.find(c.allowed), std::string::npos) << c.text << " → " << m;
  }
  // Every size within its limit, the parameter count beyond its own: 4,194,304 × 4096 word embeddings.
  const std::string m = config_error(R"({"vocab_size": 4194304, "hidden_size": 4096, "num_attention_heads": 16})");
  EXPECT_NE(m.find("parameters"), std::string::npos) << m;
  EXPECT_NE(m.find("above the limit of 4,000,000,000"), std::string::npos) << m;
  // At the limits of the sizes that stay within the parameter count: accepted.
  EXPECT_TRUE(parse_bert_config("c", R"({"num_hidden_layers": 1000, "hidden_size": 256, "num_attention_heads": 4,
                                          "intermediate_size": 1024})")
                  .is_ok());
}

// nn.Embedding(padding_idx=config.pad_token_id): read, not assumed 0; null means no
// padding row.
TEST(BertConfigJson, PadTokenIdIsReadAndNullMeansNoPaddingRow) {
  EXPECT_EQ(parse_bert_config("c", "{}")->config.pad_token_id, 0);
  EXPECT_EQ(parse_bert_config("c", R"({"pad_token_id": 7})")->config.pad_token_id, 7);
  EXPECT_EQ(parse_bert_config("c", R"({"pad_token_id": null})")->config.pad_token_id, -1);
  EXPECT_EQ(parse_bert_config("c", R"({"vocab_size": 50, "pad_token_id": 49})")->config.pad_token_id, 49);
  for (const char* bad :
       {R"({"vocab_size": 50, "pad_token_id": 50})", R"({"pad_token_id": -1})", R"({"pad_token_id": "0"})"}) {
    const std::string m = config_error(bad);
    EXPECT_NE(m.find("'pad_token_id'"), std::string::npos) << bad << " → " << m;
    EXPECT_NE(m.find("allowed: an integer in [0, "), std::string::npos) << bad << " → " << m;
  }
}

TEST(BertConfigJson, NumLabelsFromId2Label) {
  auto r = parse_bert_config("c", R"({"id2label": {"0": "NEG", "1": "NEU", "2": "POS"}})");
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->config.num_labels, 3);
  auto both = parse_bert_config("c", R"({"id2label": {"0": "A", "1": "B", "2": "C"}, "num_labels": 3})");
  ASSERT_THAT(both, IsOk());
  EXPECT_EQ(both->config.num_labels, 3);
  const std::string m = config_error(R"({"id2label": {"0": "A", "1": "B", "2": "C"}, "num_labels": 4})");
  EXPECT_NE(m.find("num_labels"), std::string::npos) << m;
  EXPECT_NE(m.find("id2label"), std::string::npos) << m;
  EXPECT_NE(m.find("3 entries"), std::string::npos) << m;
}

TEST(BertConfigJson, SyntaxErrorsReportFileLineAndColumn) {
  const std::string m = config_error("{\n  \"hidden_size\": 768,\n  \"vocab_size\": ]\n}");
  EXPECT_NE(m.find("cfg.json:3:17: JSON syntax error"), std::string::npos) << m;
  EXPECT_NE(m.find("unexpected ']'"), std::string::npos) << m;
  EXPECT_EQ(m.find("json.exception"), std::string::npos) << m;  // our position, not nlohmann's prefix
  const std::string eof = config_error("{\n  \"hidden_size\": 768,");
  EXPECT_NE(eof.find("cfg.json:2:22:"), std::string::npos) << eof;
  const std::string empty = config_error("");
  EXPECT_NE(empty.find("cfg.json:1:1:"), std::string::npos) << empty;
  const std::string not_object = config_error("[1, 2]");
  EXPECT_NE(not_object.find("JSON object"), std::string::npos) << not_object;
}

TEST(BertConfigJson, FinishesWithValidate) {
  const std::string m = config_error(R"({"hidden_size": 100, "num_attention_heads": 12})");
  EXPECT_NE(m.find("cfg.json"), std::string::npos) << m;
  EXPECT_NE(m.find("num_attention_heads (12)"), std::string::npos) << m;
}

TEST(BertConfigJson, ReadsFromAFile) {
  const std::string path = temp_path("config.json");
  std::ofstream(path)
      << R"({"architectures": ["BertForQuestionAnswering"], "hidden_size": 64, "num_attention_heads": 2})";
  auto r = read_bert_config(path);
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->head, BertHead::kQuestionAnswering);
  EXPECT_EQ(r->config.hidden_size, 64);
  std::filesystem::remove(path);
  auto missing = read_bert_config(path);
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(missing.status().message().find(path), std::string::npos);
}

// ---- weights ------------------------------------------------------------------------------

BertConfig small_config() {
  BertConfig c;
  c.vocab_size = 40;
  c.hidden_size = 8;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 2;
  c.intermediate_size = 12;
  c.max_position_embeddings = 16;
  c.type_vocab_size = 2;
  c.num_labels = 3;
  return c;
}

// Host fp32 parameter tensors for `specs`, one storage each.
struct Params {
  device::cpu::CpuDevice dev;
  std::vector<Tensor> tensors;
  explicit Params(const std::vector<ParamSpec>& specs, float fill = 0.0f) {
    for (const auto& s : specs) {
      Tensor t = *dev.empty(s.shape, DType::kF32, MemoryCategory::kParameters, s.name);
      std::fill_n(t.data<float>(), t.numel(), fill);
      tensors.push_back(t);
    }
  }
  void randomize(std::uint64_t seed) {
    Rng rng(seed);
    for (auto& t : tensors)
      for (std::int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = rng.uniform(-2.0f, 2.0f);
  }
  std::vector<float> values(std::size_t i) const {
    const Tensor& t = tensors[i];
    return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
  }
};

StoredTensor stored(const std::string& name, const Shape& shape, DType dtype, const std::vector<float>& values) {
  StoredTensor t;
  t.name = name;
  t.dtype = dtype;
  t.shape = shape;
  t.data.resize(values.size() * element_size(dtype));
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::kF32) {
      std::memcpy(t.data.data() + 4 * i, &values[i], 4);
    } else {
      const std::uint16_t h = dtype == DType::kBF16 ? float_to_bf16(values[i]) : float_to_fp16(values[i]);
      std::memcpy(t.data.data() + 2 * i, &h, 2);
    }
  }
  return t;
}

StoredTensor stored_ints(const std::string& name, const Shape& shape, const std::vector<std::int64_t>& values) {
  StoredTensor t;
  t.name = name;
  t.dtype = DType::kI64;
  t.shape = shape;
  t.data.resize(values.size() * 8);
  if (!values.empty()) std::memcpy(t.data.data(), values.data(), t.data.size());
  return t;
}

// A checkpoint holding `params` under names produced by `rename`, in `dtype`.
SafetensorsFile checkpoint(const std::vector<ParamSpec>& specs, const Params& params, DType dtype,
                           const std::function<std::string(const std::string&)>& rename = nullptr) {
  SafetensorsFile f;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    f.tensors.push_back(
        stored(rename ? rename(specs[i].name) : specs[i].name, specs[i].shape, dtype, params.values(i)));
  }
  return f;
}

const BertHead kAllHeads[] = {BertHead::kSequenceClassification, BertHead::kMaskedLM, BertHead::kQuestionAnswering};

TEST(BertWeights, SaveLoadRoundTripsF32BitwiseForEveryHead) {
  for (BertHead head : kAllHeads) {
    const auto specs = bert_param_specs(small_config(), head);
    Params a(specs);
    a.randomize(7);
    const std::string path = temp_path("roundtrip.safetensors");
    ASSERT_TRUE(save_bert_tensors(path, specs, a.tensors, {{"step", "12"}, {"format", "pt"}}).is_ok());
    auto file = io::read_safetensors(path);
    ASSERT_THAT(file, IsOk());
    EXPECT_EQ(file->metadata.at("step"), "12");
    EXPECT_EQ(file->metadata.at("format"), "pt");
    ASSERT_EQ(file->tensors.size(), specs.size());
    for (std::size_t i = 0; i < specs.size(); ++i) {  // spec order, F32, spec shapes
      EXPECT_EQ(file->tensors[i].name, specs[i].name);
      EXPECT_EQ(file->tensors[i].dtype, DType::kF32);
      EXPECT_EQ(file->tensors[i].shape, specs[i].shape);
    }
    Params b(specs, -1.0f);
    const Status s = load_bert_weights(path, specs, b.tensors);
    ASSERT_THAT(s, IsOk());
    for (std::size_t i = 0; i < specs.size(); ++i) EXPECT_EQ(a.values(i), b.values(i)) << specs[i].name;
    std::filesystem::remove(path);
  }
}

TEST(BertWeights, Bf16AndF16AreWidenedWithTheirRounding) {
  const auto specs = bert_param_specs(small_config(), BertHead::kSequenceClassification);
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    Params a(specs);
    a.randomize(11);
    // 1 + 3·2^-9 rounds up to 1 + 2^-7 in bf16 (truncation would give 1); 0.1 is 0.0999755859375 in fp16.
    a.tensors[0].data<float>()[0] = 1.005859375f;
    a.tensors[0].data<float>()[1] = 0.1f;
    const std::string path = temp_path("half.safetensors");
    ASSERT_TRUE(io::write_safetensors(path, checkpoint(specs, a, dtype)).is_ok());
    Params b(specs);
    const Status s = load_bert_weights(path, specs, b.tensors);
    ASSERT_THAT(s, IsOk());
    for (std::size_t i = 0; i < specs.size(); ++i) {
      const auto want = a.values(i), got = b.values(i);
      for (std::size_t k = 0; k < want.size(); ++k) {
        const float expected = dtype == DType::kBF16 ? round_to_bf16(want[k]) : fp16_to_float(float_to_fp16(want[k]));
        ASSERT_EQ(got[k], expected) << specs[i].name << "[" << k << "]";
      }
    }
    if (dtype == DType::kBF16) {
      EXPECT_EQ(b.tensors[0].data<float>()[0], 1.0078125f);
    } else {
      EXPECT_EQ(b.tensors[0].data<float>()[1], 0.0999755859375f);
    }
    std::filesystem::remove(path);
  }
}

std::string legacy_name(const std::string& name) {
  std::string n = name.rfind("bert.", 0) == 0 ? name.substr(5) : name;
  for (const auto& [from, to] : {std::pair<std::string, std::string>{"LayerNorm.weight", "LayerNorm.gamma"},
                                 {"LayerNorm.bias", "LayerNorm.beta"}}) {
    if (n.size() >= from.size() && n.compare(n.size() - from.size(), from.size(), from) == 0) {
      n = n.substr(0, n.size() - from.size()) + to;
    }
  }
  if (n == "cls.predictions.bias") n = "cls.predictions.decoder.bias";
  return n;
}

TEST(BertWeights, AcceptsEveryAlias) {
  using Rename = std::function<std::string(const std::string&)>;
  const Rename no_prefix = [](const std::string& n) { return n.rfind("bert.", 0) == 0 ? n.substr(5) : n; };
  const Rename gamma_beta = [](const std::string& n) {
    const std::string w = "LayerNorm.weight", b = "LayerNorm.bias";
    if (n.size() > w.size() && n.compare(n.size() - w.size(), w.size(), w) == 0)
      return n.substr(0, n.size() - 6) + "gamma";
    if (n.size() > b.size() && n.compare(n.size() - b.size(), b.size(), b) == 0)
      return n.substr(0, n.size() - 4) + "beta";
    return n;
  };
  const Rename decoder_bias = [](const std::string& n) {
    return n == "cls.predictions.bias" ? std::string("cls.predictions.decoder.bias") : n;
  };
  const std::vector<std::pair<std::string, Rename>> renames = {
      {"no bert. prefix", no_prefix}, {"gamma/beta", gamma_beta}, {"decoder.bias", decoder_bias}, {"all", legacy_name}};
  for (BertHead head : kAllHeads) {
    const auto specs = bert_param_specs(small_config(), head);
    for (const auto& [what, rename] : renames) {
      Params a(specs);
      a.randomize(3);
      SafetensorsFile f = checkpoint(specs, a, DType::kF32, rename);
      int renamed = 0;
      for (std::size_t i = 0; i < specs.size(); ++i) renamed += f.tensors[i].name != specs[i].name ? 1 : 0;
      const bool applies = what != "decoder.bias" || head == BertHead::kMaskedLM;
      EXPECT_EQ(renamed > 0, applies) << what;  // the alias is really exercised
      const std::string path = temp_path("alias.safetensors");
      ASSERT_TRUE(io::write_safetensors(path, f).is_ok());
      Params b(specs, -3.0f);
      const Status s = load_bert_weights(path, specs, b.tensors);
      ASSERT_THAT(s, IsOk()) << what;
      for (std::size_t i = 0; i < specs.size(); ++i)
        EXPECT_EQ(a.values(i), b.values(i)) << what << " " << specs[i].name;
      std::filesystem::remove(path);
    }
  }
  // The fully legacy names really differ from the canonical ones for every LayerNorm.
  EXPECT_EQ(legacy_name("bert.encoder.layer.0.output.LayerNorm.weight"), "encoder.layer.0.output.LayerNorm.gamma");
  EXPECT_EQ(legacy_name("cls.predictions.transform.LayerNorm.bias"), "cls.predictions.transform.LayerNorm.beta");
}

TEST(BertWeights, CanonicalNameWinsOverAnAlias) {
  const auto specs = bert_param_specs(small_config(), BertHead::kMaskedLM);
  Params a(specs);
  a.randomize(5);
  SafetensorsFile f = checkpoint(specs, a, DType::kF32);
  const std::size_t bias = specs.size() - 1;
  ASSERT_EQ(specs[bias].name, "cls.predictions.bias");
  f.tensors.push_back(stored("cls.predictions.decoder.bias", specs[bias].shape, DType::kF32,
                             std::vector<float>(static_cast<std::size_t>(small_config().vocab_size), 9.0f)));
  const std::string path = temp_path("canonical.safetensors");
  ASSERT_TRUE(io::write_safetensors(path, f).is_ok());
  Params b(specs);
  ASSERT_TRUE(load_bert_weights(path, specs, b.tensors).is_ok());
  EXPECT_EQ(b.values(bias), a.values(bias));
  std::filesystem::remove(path);
}

TEST(BertWeights, TiedDecoderMayBeAbsentOrPresentAndExtrasAreIgnored) {
  const BertConfig c = small_config();
  const auto specs = bert_param_specs(c, BertHead::kMaskedLM);
  for (bool with_decoder : {false, true}) {
    Params a(specs);
    a.randomize(9);
    SafetensorsFile f = checkpoint(specs, a, DType::kF32);
    if (with_decoder) {  // differs from the word embeddings: those win
      f.tensors.push_back(stored("cls.predictions.decoder.weight", {c.vocab_size, c.hidden_size}, DType::kF32,
                                 std::vector<float>(static_cast<std::size_t>(c.vocab_size * c.hidden_size), 42.0f)));
    }
    f.tensors.push_back(stored_ints("bert.embeddings.position_ids", {1, c.max_position_embeddings},
                                    std::vector<std::int64_t>(static_cast<std::size_t>(c.max_position_embeddings), 1)));
    f.tensors.push_back(
        stored("classifier.weight", {7, 3}, DType::kF32, std::vector<float>(21, 1.0f)));  // wrong shape, unused
    const std::string path = temp_path("tied.safetensors");
    ASSERT_TRUE(io::write_safetensors(path, f).is_ok());
    Params b(specs);
    const Status s = load_bert_weights(path, specs, b.tensors);
    ASSERT_THAT(s, IsOk());
    for (std::size_t i = 0; i < specs.size(); ++i) EXPECT_EQ(a.values(i), b.values(i)) << specs[i].name;
    std::filesystem::remove(path);
  }
  // The specs never ask for the decoder weight.
  for (const auto& s : specs) EXPECT_NE(s.name, "cls.predictions.decoder.weight");
}

// Writes `f`, loads it into fresh params (filled with 5) and returns the error message; the
// params must be untouched.
std::string weights_error(const std::vector<ParamSpec>& specs, const SafetensorsFile& f) {
  const std::string path = temp_path("bad_weights.safetensors");
  EXPECT_TRUE(io::write_safetensors(path, f).is_ok());
  Params b(specs, 5.0f);
  const Status s = load_bert_weights(path, specs, b.tensors);
  std::filesystem::remove(path);
  EXPECT_FALSE(s.is_ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  for (std::size_t i = 0; i < specs.size(); ++i) {
    for (float v : b.values(i)) {
      if (v != 5.0f) {
        ADD_FAILURE() << "a failed load wrote " << specs[i].name;
        break;
      }
    }
  }
  EXPECT_NE(s.message().find(path), std::string::npos) << s.message();
  return s.message();
}

TEST(BertWeights, MissingParameterNamesItAndTheAliasesTried) {
  const auto specs = bert_param_specs(small_config(), BertHead::kSequenceClassification);
  Params a(specs);
  SafetensorsFile f = checkpoint(specs, a, DType::kF32);
  f.tensors.erase(f.tensors.begin() + 3);  // bert.embeddings.LayerNorm.weight
  const std::string m = weights_error(specs, f);
  EXPECT_NE(m.find("missing parameter 'bert.embeddings.LayerNorm.weight' [8]"), std::string::npos) << m;
  EXPECT_NE(m.find("embeddings.LayerNorm.gamma"), std::string::npos) << m;
}

TEST(BertWeights, ShapeMismatchNamesTensorExpectedAndFound) {
  const auto specs = bert_param_specs(small_config(), BertHead::kQuestionAnswering);
  Params a(specs);
  SafetensorsFile f = checkpoint(specs, a, DType::kF32, legacy_name);
  for (auto& t : f.tensors) {
    if (t.name == "encoder.layer.1.intermediate.dense.weight") t.shape = {8, 12};  // transposed
  }
  const std::string m = weights_error(specs, f);
  EXPECT_NE(
      m.find(
          "tensor 'encoder.layer.1.intermediate.dense.weight' (for 'bert.encoder.layer.1.intermediate.dense.weight')"),
      std::string::npos)
      << m;
  EXPECT_NE(m.find("has shape [8, 12]; expected [12, 8]"), std::string::npos) << m;
}

TEST(BertWeights, IntegerDtypeForAFloatParameterIsRejected) {
  const auto specs = bert_param_specs(small_config(), BertHead::kQuestionAnswering);
  Params a(specs);
  SafetensorsFile f = checkpoint(specs, a, DType::kF32);
  f.tensors.back() = stored_ints("qa_outputs.bias", {2}, {1, 2});
  const std::string m = weights_error(specs, f);
  EXPECT_NE(m.find("tensor 'qa_outputs.bias' has dtype I64"), std::string::npos) << m;
  EXPECT_NE(m.find("expected a float dtype (F32, BF16 or F16)"), std::string::npos) << m;
}

TEST(BertWeights, WrongParamViewsAndBadFilesAreErrors) {
  const auto specs = bert_param_specs(small_config(), BertHead::kSequenceClassification);
  Params a(specs);
  std::vector<Tensor> fewer(a.tensors.begin(), a.tensors.end() - 1);
  const std::string path = temp_path("views.safetensors");
  const Status count = save_bert_tensors(path, specs, fewer);
  EXPECT_EQ(count.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(count.message().find("tensors for " + std::to_string(specs.size()) + " parameters"), std::string::npos);
  std::vector<Tensor> swapped = a.tensors;
  std::swap(swapped[0], swapped[1]);  // word embeddings [40, 8] vs position embeddings [16, 8]
  const Status size = load_bert_weights(path, specs, swapped);
  EXPECT_EQ(size.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(size.message().find("bert.embeddings.word_embeddings.weight"), std::string::npos) << size.message();
  // Not a safetensors file at all.
  std::ofstream(path) << "not safetensors";
  const Status garbage = load_bert_weights(path, specs, a.tensors);
  EXPECT_EQ(garbage.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(garbage.message().find(path), std::string::npos);
  std::filesystem::remove(path);
}

// ---- batches --------------------------------------------------------------------------------

// Builds a safetensors image by hand (so dtypes the writer does not produce, like I32,
// can be tested).
void write_raw(const std::string& path,
               const std::vector<std::tuple<std::string, std::string, Shape, std::string>>& ts) {
  std::string header = "{", data;
  for (const auto& [name, dtype, shape, bytes] : ts) {
    std::string dims;
    for (auto d : shape) dims += (dims.empty() ? "" : ",") + std::to_string(d);
    header += (header.size() > 1 ? "," : "") + std::string("\"") + name + "\":{\"dtype\":\"" + dtype +
              "\",\"shape\":[" + dims + "],\"data_offsets\":[" + std::to_string(data.size()) + "," +
              std::to_string(data.size() + bytes.size()) + "]}";
    data += bytes;
  }
  header += "}";
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<std::size_t>(i)] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  std::ofstream(path, std::ios::binary) << out << header << data;
}

template <typename T>
std::string raw_bytes(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

Bert small_bert(BertHead head) {
  BertOptions o;
  o.config = small_config();
  o.head = head;
  return Bert(o);
}

// B = 2, T = 4.
const std::vector<std::int64_t> kIds = {1, 5, 7, 2, 1, 9, 0, 0};
const std::vector<std::int64_t> kMask = {1, 1, 1, 1, 1, 1, 0, 0};

std::vector<std::int64_t> ints(const Batch& b, const std::string& name) {
  const Tensor t = *b.get(name);
  EXPECT_EQ(t.dtype(), DType::kI64) << name;
  return std::vector<std::int64_t>(t.data<std::int64_t>(), t.data<std::int64_t>() + t.numel());
}
std::vector<float> floats(const Batch& b, const std::string& name) {
  const Tensor t = *b.get(name);
  EXPECT_EQ(t.dtype(), DType::kF32) << name;
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

TEST(BertBatchFile, ReadsEachHead) {
  device::cpu::CpuDevice dev;
  const std::string path = temp_path("batch.safetensors");
  SafetensorsFile f;
  f.tensors = {stored_ints("input_ids", {2, 4}, kIds), stored_ints("attention_mask", {2, 4}, kMask),
               stored_ints("token_type_ids", {2, 4}, {0, 0, 1, 1, 0, 1, 0, 0}), stored_ints("labels", {2}, {2, 0})};
  ASSERT_TRUE(io::write_safetensors(path, f).is_ok());
  auto cls = read_bert_batch(path, small_bert(BertHead::kSequenceClassification), dev);
  ASSERT_THAT(cls, IsOk());
  EXPECT_EQ(cls->rows, 2);
  EXPECT_EQ(ints(*cls, "input_ids"), kIds);
  EXPECT_EQ(cls->tensors.at("input_ids").shape(), (Shape{2, 4}));
  EXPECT_EQ(floats(*cls, "attention_mask"), (std::vector<float>{1, 1, 1, 1, 1, 1, 0, 0}));
  EXPECT_EQ(ints(*cls, "token_type_ids"), (std::vector<std::int64_t>{0, 0, 1, 1, 0, 1, 0, 0}));
  EXPECT_EQ(ints(*cls, "labels"), (std::vector<std::int64_t>{2, 0}));
  EXPECT_GT(dev.memory().stats().current[static_cast<std::size_t>(MemoryCategory::kActivations)], 0);

  // MLM: [B, T] labels with -100; token_type_ids absent → zeros; a float mask.
  f.tensors = {stored_ints("input_ids", {2, 4}, kIds),
               stored("attention_mask", {2, 4}, DType::kBF16, {1, 1, 1, 1, 1, 0, 0, 0}),
               stored_ints("labels", {2, 4}, {-100, 6, -100, -100, -100, 39, -100, -100})};
  ASSERT_TRUE(io::write_safetensors(path, f).is_ok());
  auto mlm = read_bert_batch(path, small_bert(BertHead::kMaskedLM), dev);
  ASSERT_THAT(mlm, IsOk());
  EXPECT_EQ(ints(*mlm, "token_type_ids"), std::vector<std::int64_t>(8, 0));
  EXPECT_EQ(floats(*mlm, "attention_mask"), (std::vector<float>{1, 1, 1, 1, 1, 0, 0, 0}));
  EXPECT_EQ(ints(*mlm, "labels")[5], 39);

  // QA from an I32 file (widened), positions may be past T (Hugging Face clamps them).
  const std::vector<std::int32_t> ids32(kIds.begin(), kIds.end()), mask32(kMask.begin(), kMask.end());
  write_raw(
      path,
      {{"input_ids", "I32", {2, 4}, raw_bytes(ids32)},
       {"attention_mask", "F16", {2, 4}, raw_bytes(std::vector<std::uint16_t>{0x3c00, 0x3c00, 0, 0, 0x3c00, 0, 0, 0})},
       {"start_positions", "I32", {2}, raw_bytes(std::vector<std::int32_t>{1, 9})},
       {"end_positions", "I64", {2}, raw_bytes(std::vector<std::int64_t>{2, 9})}});
  auto qa = read_bert_batch(path, small_bert(BertHead::kQuestionAnswering), dev);
  ASSERT_THAT(qa, IsOk());
  EXPECT_EQ(ints(*qa, "input_ids"), kIds);
  EXPECT_EQ(floats(*qa, "attention_mask"), (std::vector<float>{1, 1, 0, 0, 1, 0, 0, 0}));
  EXPECT_EQ(ints(*qa, "start_positions"), (std::vector<std::int64_t>{1, 9}));
  EXPECT_EQ(ints(*qa, "end_positions"), (std::vector<std::int64_t>{2, 9}));
  EXPECT_FALSE(qa->has("labels"));
  std::filesystem::remove(path);
}

struct BadBatch {
  const char* what;
  BertHead head;
  std::vector<StoredTensor> tensors;
  std::vector<std::string> pieces;  // must all appear in the message
};

TEST(BertBatchFile, RejectsMalformedBatchesNamingTensorAndValues) {
  const auto ids = stored_ints("input_ids", {2, 4}, kIds);
  const auto mask = stored_ints("attention_mask", {2, 4}, kMask);
  const auto cls_labels = stored_ints("labels", {2}, {1, 0});
  const auto start = stored_ints("start_positions", {2}, {0, 1});
  const std::vector<BadBatch> cases = {
      {"no input_ids",
       BertHead::kSequenceClassification,
       {mask, cls_labels},
       {"missing tensor 'input_ids'", "attention_mask, labels"}},
      {"rank-1 ids",
       BertHead::kSequenceClassification,
       {stored_ints("input_ids", {8}, kIds), mask, cls_labels},
       {"'input_ids' has shape [8] (rank 1)", "rank 2"}},
      {"float ids",
       BertHead::kSequenceClassification,
       {stored("input_ids", {2, 4}, DType::kF32, {1, 5, 7, 2, 1, 9, 0, 0}), mask, cls_labels},
       {"'input_ids' has dtype F32", "integer dtype"}},
      {"no mask", BertHead::kSequenceClassification, {ids, cls_labels}, {"missing tensor 'attention_mask'", "[2, 4]"}},
      {"mask T mismatch",
       BertHead::kSequenceClassification,
       {ids, stored_ints("attention_mask", {2, 5}, std::vector<std::int64_t>(10, 1)), cls_labels},
       {"'attention_mask' has shape [2, 5]; expected [B, T] = [2, 4]", "B = 2, T = 4 from input_ids"}},
      {"types B mismatch",
       BertHead::kSequenceClassification,
       {ids, mask, stored_ints("token_type_ids", {3, 4}, std::vector<std::int64_t>(12, 0)), cls_labels},
       {"'token_type_ids' has shape [3, 4]; expected [B, T] = [2, 4]"}},
      {"float token types",
       BertHead::kSequenceClassification,
       {ids, mask, stored("token_type_ids", {2, 4}, DType::kF32, std::vector<float>(8, 0.0f)), cls_labels},
       {"'token_type_ids' has dtype F32"}},
      {"mask value 2",
       BertHead::kSequenceClassification,
       {ids, stored_ints("attention_mask", {2, 4}, {1, 1, 1, 1, 1, 2, 0, 0}), cls_labels},
       {"attention_mask[1, 1] = 2", "allowed: 0 or 1"}},
      {"mask value 0.5",
       BertHead::kSequenceClassification,
       {ids, stored("attention_mask", {2, 4}, DType::kF32, {1, 1, 0.5f, 1, 1, 1, 0, 0}), cls_labels},
       {"attention_mask[0, 2] = 0.5", "allowed: 0 or 1"}},
      {"no labels (classification)",
       BertHead::kSequenceClassification,
       {ids, mask},
       {"missing tensor 'labels' [B] = [2] for the classification head"}},
      {"no labels (mlm)",
       BertHead::kMaskedLM,
       {ids, mask},
       {"missing tensor 'labels' [B, T] = [2, 4] for the mlm head"}},
      {"no end_positions (qa)",
       BertHead::kQuestionAnswering,
       {ids, mask, start},
       {"missing tensor 'end_positions' [B] = [2] for the qa head"}},
      {"mlm labels [B]",
       BertHead::kMaskedLM,
       {ids, mask, cls_labels},
       {"'labels' has shape [2]; expected [B, T] = [2, 4] (rank 2, got rank 1)", "mlm head"}},
      {"float labels",
       BertHead::kSequenceClassification,
       {ids, mask, stored("labels", {2}, DType::kF32, {1, 0})},
       {"'labels' has dtype F32"}},
      {"label out of range",
       BertHead::kSequenceClassification,
       {ids, mask, stored_ints("labels", {2}, {1, 3})},
       {"labels element 1 = 3", "[0, 3)"}},
      {"id outside the vocabulary",
       BertHead::kSequenceClassification,
       {stored_ints("input_ids", {2, 4}, {1, 5, 7, 2, 1, 40, 0, 0}), mask, cls_labels},
       {"input_ids[1, 1] = 40", "[0, 40)"}},
      {"T beyond max_position_embeddings",
       BertHead::kSequenceClassification,
       {stored_ints("input_ids", {1, 17}, std::vector<std::int64_t>(17, 1)),
        stored_ints("attention_mask", {1, 17}, std::vector<std::int64_t>(17, 1)), stored_ints("labels", {1}, {0})},
       {"T = 17", "max_position_embeddings = 16"}},
  };
  device::cpu::CpuDevice dev;
  const std::string path = temp_path("bad_batch.safetensors");
  for (const BadBatch& c : cases) {
    SafetensorsFile f;
    f.tensors = c.tensors;
    ASSERT_TRUE(io::write_safetensors(path, f).is_ok()) << c.what;
    auto r = read_bert_batch(path, small_bert(c.head), dev);
    ASSERT_FALSE(r.is_ok()) << c.what;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << c.what;
    const std::string& m = r.status().message();
    EXPECT_NE(m.find(path), std::string::npos) << c.what << ": " << m;
    for (const auto& piece : c.pieces) EXPECT_NE(m.find(piece), std::string::npos) << c.what << ": " << m;
  }
  std::filesystem::remove(path);
  EXPECT_EQ(dev.memory().stats().current[static_cast<std::size_t>(MemoryCategory::kActivations)], 0);  // nothing leaked
}

}  // namespace
}  // namespace shardlab::runtime::model
