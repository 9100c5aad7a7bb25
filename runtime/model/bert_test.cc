// Bert forward/backward: finite differences through the whole model for each head,
// activation checkpointing (bitwise), dropout keyed by row, tied decoder, padding row.
#include "runtime/model/bert.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <memory>

#include "runtime/device/cpu/device.h"
#include "runtime/model/bert_data.h"
#include "testing/status_matchers.h"

using shardlab::testlib::IsOk;

namespace shardlab::runtime::model {
namespace {

BertOptions small(BertHead head, float dropout = 0.1f) {
  BertOptions o;
  o.config.vocab_size = 120;
  o.config.hidden_size = 16;
  o.config.num_attention_heads = 2;
  o.config.intermediate_size = 24;
  o.config.num_hidden_layers = 2;
  o.config.max_position_embeddings = 12;
  o.config.num_labels = 3;
  o.config.layer_norm_eps = 1e-5f;
  o.config.hidden_dropout_prob = dropout;
  o.config.attention_probs_dropout_prob = dropout;
  o.config.initializer_range = 0.2f;  // larger than HF's 0.02 so every path carries signal
  o.head = head;
  o.seq_len = 8;
  return o;
}

// Tests edit a batch's int64 tensors in place (cpu memory); this refreshes the host copy
// the model reads (Batch::ints) from the edited tensor.
void refresh_host_ints(Batch& b, const std::string& name) {
  const Tensor t = *b.get(name);
  b.host_ints[name].assign(t.data<std::int64_t>(), t.data<std::int64_t>() + t.numel());
}

struct Fixture {
  explicit Fixture(BertOptions o) : bert(std::move(o)) {
    const std::int64_t total = total_numel(bert.params());
    params = *dev.empty({total}, DType::kF32, MemoryCategory::kParameters, "params");
    grads = *dev.zeros({total}, DType::kF32, MemoryCategory::kGradients, "grads");
    access = std::make_unique<FlatParamAccess>(bert.params(), params, grads);
    EXPECT_TRUE(bert.init_params(dev, access->params(), 7).is_ok());
    batch = *bert.synthetic_batch(dev, 11, 0, 0, 3);
  }
  // Loss (Σ per-term sums · scale) and, optionally, fresh gradients.
  double run(const std::vector<float>& scale, const ForwardContext& ctx = {5, 0, 0, true}) {
    EXPECT_TRUE(dev.fill(grads, 0.0f).is_ok());
    auto sums = bert.forward_backward(dev, *access, batch, scale, ctx);
    EXPECT_THAT(sums, IsOk());
    double loss = 0;
    for (std::size_t t = 0; t < sums->size(); ++t) loss += scale[t] * (*sums)[t];
    return loss;
  }
  std::vector<float> grad_copy() const { return {grads.data<float>(), grads.data<float>() + grads.numel()}; }

  device::cpu::CpuDevice cpu;
  device::Device& dev = cpu;
  Bert bert;
  Tensor params, grads;
  std::unique_ptr<FlatParamAccess> access;
  Batch batch;
};

class BertHeads : public ::testing::TestWithParam<BertHead> {};

// Central differences on the 40 largest-gradient entries and 40 spread over all parameters.
TEST_P(BertHeads, GradientsMatchFiniteDifferences) {
  Fixture f(small(GetParam()));
  const std::vector<float> scale(f.bert.loss_term_weights().size(), 1.0f);
  f.run(scale);
  const std::vector<float> g = f.grad_copy();
  std::vector<std::int64_t> idx(g.size());
  for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<std::int64_t>(i);
  std::partial_sort(idx.begin(), idx.begin() + 40, idx.end(),
                    [&](std::int64_t a, std::int64_t b) { return std::fabs(g[a]) > std::fabs(g[b]); });
  idx.resize(40);
  // Spread entries start past the word embeddings' padding row: nn.Embedding(padding_idx)
  // gives it no gradient even where padded positions reach the loss (QA logits), so a
  // finite difference there disagrees by design (checked in its own test).
  for (std::int64_t k = 0; k < 40; ++k) idx.push_back(k * static_cast<std::int64_t>(g.size()) / 40 + 16 + 3);
  float* p = f.params.data<float>();
  int checked = 0;
  for (std::int64_t i : idx) {
    const float saved = p[i];
    const float eps = 1e-2f;
    p[i] = saved + eps;
    const double up = f.run(scale);
    p[i] = saved - eps;
    const double down = f.run(scale);
    p[i] = saved;
    const double fd = (up - down) / (2.0 * eps);
    EXPECT_NEAR(fd, g[static_cast<std::size_t>(i)], 4e-3 + 3e-2 * std::fabs(fd))
        << "parameter element " << i << " (head " << bert_head_name(GetParam()) << ")";
    ++checked;
  }
  EXPECT_EQ(checked, 80);
}

// The real bert-tiny (V 30522, H 128, L 2, A 2, I 512) with HF's init, dropout on:
// central differences on the 12 largest-gradient entries of each head.
TEST_P(BertHeads, BertTinyGradientsMatchFiniteDifferences) {
  BertOptions o;
  o.config = *bert_preset("bert-tiny");
  o.config.num_labels = 3;
  o.head = GetParam();
  o.seq_len = 12;
  Fixture f(o);
  const std::vector<float> scale(f.bert.loss_term_weights().size(), 1.0f);
  f.run(scale);
  const std::vector<float> g = f.grad_copy();
  std::vector<std::int64_t> idx(g.size());
  for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<std::int64_t>(i);
  std::partial_sort(idx.begin(), idx.begin() + 12, idx.end(),
                    [&](std::int64_t a, std::int64_t b) { return std::fabs(g[a]) > std::fabs(g[b]); });
  float* p = f.params.data<float>();
  for (int k = 0; k < 12; ++k) {
    const std::int64_t i = idx[static_cast<std::size_t>(k)];
    const float saved = p[i], eps = 1e-2f;
    p[i] = saved + eps;
    const double up = f.run(scale);
    p[i] = saved - eps;
    const double down = f.run(scale);
    p[i] = saved;
    const double fd = (up - down) / (2.0 * eps);
    EXPECT_NEAR(fd, g[static_cast<std::size_t>(i)], 5e-3 + 3e-2 * std::fabs(fd)) << "parameter element " << i;
  }
}

TEST_P(BertHeads, ActivationCheckpointingLeavesGradientsBitwiseUnchanged) {
  Fixture plain(small(GetParam()));
  BertOptions o = small(GetParam());
  o.activation_checkpointing = true;
  Fixture ckpt(o);
  const std::vector<float> scale(plain.bert.loss_term_weights().size(), 0.25f);
  const double a = plain.run(scale), b = ckpt.run(scale);
  EXPECT_EQ(a, b);
  const auto ga = plain.grad_copy(), gb = ckpt.grad_copy();
  ASSERT_EQ(ga.size(), gb.size());
  EXPECT_EQ(std::memcmp(ga.data(), gb.data(), ga.size() * sizeof(float)), 0);
}

INSTANTIATE_TEST_SUITE_P(AllHeads, BertHeads,
                         ::testing::Values(BertHead::kSequenceClassification, BertHead::kMaskedLM,
                                           BertHead::kQuestionAnswering),
                         [](const auto& info) { return std::string(bert_head_name(info.param)); });

TEST(Bert, DropoutMasksAreKeyedByGlobalRowNotBatchPosition) {
  // Rows 1..2 of a 3-row batch equal a 2-row batch starting at global row 1.
  Fixture whole(small(BertHead::kSequenceClassification, 0.3f));
  whole.run({1.0f}, {5, 2, 0, true});
  BertOptions o = small(BertHead::kSequenceClassification, 0.3f);
  Fixture part(o);
  part.batch = *part.bert.synthetic_batch(part.dev, 11, 0, 1, 2);
  Fixture first(o);
  first.batch = *first.bert.synthetic_batch(first.dev, 11, 0, 0, 1);
  const double l_part = part.run({1.0f}, {5, 2, 1, true});
  const double l_first = first.run({1.0f}, {5, 2, 0, true});
  const double l_whole = whole.run({1.0f}, {5, 2, 0, true});
  EXPECT_NEAR(l_part + l_first, l_whole, 1e-5 * std::fabs(l_whole));
  // A different step draws different masks; no dropout at evaluation.
  const double other_step = whole.run({1.0f}, {5, 3, 0, true});
  EXPECT_NE(other_step, l_whole);
  BertOptions no_drop = small(BertHead::kSequenceClassification, 0.0f);
  Fixture eval(o), zero(no_drop);
  EXPECT_EQ(eval.run({1.0f}, {5, 2, 0, false}), zero.run({1.0f}, {5, 2, 0, true}));
}

TEST(Bert, PaddingRowOfTheWordEmbeddingsGetsNoGradientFromTheLookup) {
  Fixture f(small(BertHead::kSequenceClassification));
  // Synthetic rows have padding (id 0) after their length, and id 0 is never a real token.
  bool has_pad = false;
  const Tensor ids = *f.batch.get("input_ids");
  for (std::int64_t i = 0; i < ids.numel(); ++i) has_pad |= ids.data<std::int64_t>()[i] == 0;
  ASSERT_TRUE(has_pad);
  f.run({1.0f});
  const float* g = f.grads.data<float>();  // word embeddings come first; row 0 is the padding row
  for (std::int64_t h = 0; h < 16; ++h) EXPECT_EQ(g[h], 0.0f) << h;
  double other = 0;
  for (std::int64_t h = 16 * 101; h < 16 * 102; ++h) other += std::fabs(g[h]);  // [CLS]
  EXPECT_GT(other, 0.0);
}

// The config's pad_token_id is the padding row: zero at init (Hugging Face's _init_weights),
// no gradient from the lookup, and what synthetic batches pad with. The QA head reads every
// position, padding included, so only padding_idx keeps that row's gradient at zero.
TEST(Bert, PadTokenIdPicksThePaddingRow) {
  BertOptions o = small(BertHead::kQuestionAnswering);
  o.config.pad_token_id = 5;
  Fixture f(o);
  const float* p = f.params.data<float>();
  for (std::int64_t h = 0; h < 16; ++h) {
    EXPECT_EQ(p[5 * 16 + h], 0.0f) << h;  // the padding row
  }
  double row0 = 0;
  for (std::int64_t h = 0; h < 16; ++h) row0 += std::fabs(p[h]);
  EXPECT_GT(row0, 0.0);  // id 0 is an ordinary row now
  const Tensor ids = *f.batch.get("input_ids");
  const Tensor mask = *f.batch.get("attention_mask");
  bool padded = false;
  for (std::int64_t i = 0; i < ids.numel(); ++i) {
    if (mask.data<float>()[i] == 0.0f) {
      EXPECT_EQ(ids.data<std::int64_t>()[i], 5) << i;
      padded = true;
    }
  }
  ASSERT_TRUE(padded);
  f.run({1.0f, 1.0f});
  const float* g = f.grads.data<float>();
  for (std::int64_t h = 0; h < 16; ++h) EXPECT_EQ(g[5 * 16 + h], 0.0f) << h;
  // The same batch with padding_idx 0 (ids unchanged): the padding positions' QA logits now
  // reach row 5 through the lookup.
  BertOptions unpadded = o;
  unpadded.config.pad_token_id = 0;
  Fixture u(unpadded);
  for (const auto& [name, t] : f.batch.tensors) {
    std::memcpy(u.batch.tensors.at(name).bytes(), t.bytes(), static_cast<std::size_t>(t.nbytes()));
  }
  u.batch.host_ints = f.batch.host_ints;
  u.run({1.0f, 1.0f});
  double reached = 0;
  for (std::int64_t h = 0; h < 16; ++h) reached += std::fabs(u.grads.data<float>()[5 * 16 + h]);
  EXPECT_GT(reached, 0.0);
}

TEST(Bert, MaskedLmWithoutTargetsContributesNothingAndNoNaN) {
  Fixture f(small(BertHead::kMaskedLM));
  Tensor labels = *f.batch.get("labels");
  for (std::int64_t i = 0; i < labels.numel(); ++i) labels.data<std::int64_t>()[i] = -100;
  refresh_host_ints(f.batch, "labels");
  const double loss = f.run({1.0f});
  EXPECT_EQ(loss, 0.0);
  for (float v : f.grad_copy()) ASSERT_EQ(v, 0.0f);
}

// NOTE [Static masked-LM shape]: the decoder runs on ⌈0.15·T⌉ rows a sequence however many
// tokens are labeled (here 3 sequences of 8: 6 rows), and on every labeled one when there
// are more — none is dropped.
TEST(Bert, MaskedLmDecoderShapeDoesNotDependOnHowManyTokensAreMasked) {
  EXPECT_EQ(mlm_decoder_rows(3, 8, 0), 6);
  EXPECT_EQ(mlm_decoder_rows(3, 8, 6), 6);
  EXPECT_EQ(mlm_decoder_rows(3, 8, 7), 7);
  EXPECT_EQ(mlm_decoder_rows(8, 128, 100), 160);  // max_predictions_per_seq 20 at T = 128
  EXPECT_EQ(mlm_decoder_rows(1, 512, 0), 77);
  // A batch whose positions [from, to) are labeled (ids in range), the others ignored.
  auto labeled = [](std::int64_t from, std::int64_t to) {
    BertOptions o = small(BertHead::kMaskedLM, 0.0f);
    o.config.vocab_size = 4096;  // the decoder's logits [rows, V] set the activations' peak
    auto f = std::make_unique<Fixture>(o);
    Tensor labels = *f->batch.get("labels");
    for (std::int64_t i = 0; i < labels.numel(); ++i) {
      labels.data<std::int64_t>()[i] = i >= from && i < to ? 104 + i % 16 : -100;
    }
    refresh_host_ints(f->batch, "labels");
    return f;
  };
  const int act = static_cast<int>(MemoryCategory::kActivations);
  auto peak_act = [&](Fixture& f) { return f.dev.memory().stats().peak[static_cast<std::size_t>(act)]; };
  auto one = labeled(0, 1), six = labeled(0, 6), all = labeled(0, 24), first = labeled(0, 12), second = labeled(12, 24);
  const double l1 = one->run({1.0f}), l6 = six->run({1.0f});
  EXPECT_GT(l1, 0.0);
  EXPECT_GT(l6, l1);
  EXPECT_EQ(peak_act(*one), peak_act(*six)) << "1 and 6 labeled tokens: the same decoder shape";
  const double la = all->run({1.0f}), l_first = first->run({1.0f}), l_second = second->run({1.0f});
  EXPECT_GT(peak_act(*all), peak_act(*six)) << "24 labeled tokens need 24 decoder rows";
  // Every labeled token counts: the loss over all 24 is the sum over the two halves (a
  // dropped token would be off by ~ln 4096 = 8.3).
  EXPECT_NEAR(la, l_first + l_second, 1e-6 * std::fabs(la)) << la << " vs " << l_first << " + " << l_second;
}

TEST(Bert, TiedDecoderGradientReachesWordRowsThatAreOnlyTargets) {
  Fixture f(small(BertHead::kMaskedLM, 0.0f));
  // Make every target the id 119, which never appears as an input: its embedding row's
  // gradient can only come from the decoder.
  Tensor labels = *f.batch.get("labels"), ids = *f.batch.get("input_ids");
  int targets = 0;
  for (std::int64_t i = 0; i < labels.numel(); ++i) {
    ASSERT_NE(ids.data<std::int64_t>()[i], 119) << "pick another id for this seed";
    if (labels.data<std::int64_t>()[i] != -100) {
      labels.data<std::int64_t>()[i] = 119;
      ++targets;
    }
  }
  ASSERT_GT(targets, 0);
  refresh_host_ints(f.batch, "labels");
  f.run({1.0f});
  double row = 0;
  for (std::int64_t h = 16 * 119; h < 16 * 120; ++h) row += std::fabs(f.grads.data<float>()[h]);
  EXPECT_GT(row, 0.0);
}

TEST(Bert, BatchValidationNamesTheProblem) {
  Fixture f(small(BertHead::kSequenceClassification));
  Tensor ids = *f.batch.get("input_ids");
  ids.data<std::int64_t>()[4] = 120;
  refresh_host_ints(f.batch, "input_ids");
  auto r = f.bert.forward_backward(f.dev, *f.access, f.batch, {1.0f}, {});
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("input_ids[0, 4] = 120"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("[0, 120)"), std::string::npos) << r.status().message();
}

TEST(Bert, SpecsFollowHuggingFaceNamesAndLayers) {
  BertConfig c = *bert_preset("bert-base");
  const auto specs = bert_param_specs(c, BertHead::kMaskedLM);
  std::int64_t total = total_numel(specs);
  // bert-base-uncased BertForMaskedLM: 109,514,298 parameters (decoder tied).
  EXPECT_EQ(total, 109514298);
  EXPECT_EQ(specs.front().name, "bert.embeddings.word_embeddings.weight");
  EXPECT_EQ(specs[5].name, "bert.encoder.layer.0.attention.self.query.weight");
  EXPECT_EQ(specs[5].module_class, "BertLayer");
  EXPECT_EQ(specs.back().name, "cls.predictions.bias");
  EXPECT_EQ(specs.back().layer, 13);
  EXPECT_FALSE(bert_preset("bert-huge").is_ok());
}

// bert_param_count is bert_param_specs' total, without building the specs.
TEST(Bert, ParamCountMatchesTheSpecsForEveryPresetAndHead) {
  for (const std::string& name : bert_preset_names()) {
    for (BertHead head : {BertHead::kSequenceClassification, BertHead::kMaskedLM, BertHead::kQuestionAnswering}) {
      BertConfig c = *bert_preset(name);
      c.num_labels = 7;
      const auto n = bert_param_count(c, head);
      ASSERT_THAT(n, IsOk());
      EXPECT_EQ(*n, total_numel(bert_param_specs(c, head))) << name << " " << bert_head_name(head);
    }
  }
  EXPECT_EQ(*bert_param_count(*bert_preset("bert-base"), BertHead::kMaskedLM), 109514298);
}

// NOTE [BERT size limits]: validate() refuses each size past its limit, and a parameter
// count past its own, naming the number and the limit; the count never overflows.
TEST(Bert, ValidateBoundsEverySizeAndTheParameterCount) {
  EXPECT_TRUE(bert_preset("bert-large")->validate().is_ok());
  struct Case {
    std::function<void(BertConfig&)> set;
    std::string words;
  };
  const std::int64_t huge = std::int64_t{1} << 62;
  const Case cases[] = {
      {[&](BertConfig& c) { c.vocab_size = huge; }, "vocab_size = 4611686018427387904 is above the limit of 4,194,304"},
      {[&](BertConfig& c) { c.hidden_size = std::int64_t{1} << 40; },
       "hidden_size = 1099511627776 is above the limit of 65,536"},
      {[&](BertConfig& c) { c.intermediate_size = huge; },
       "intermediate_size = 4611686018427387904 is above the limit of 262,144"},
      {[&](BertConfig& c) { c.num_hidden_layers = 1000000; },
       "num_hidden_layers = 1000000 is above the limit of 1,000"},
      {[&](BertConfig& c) { c.max_position_embeddings = huge; }, "max_position_embeddings = 4611686018427387904"},
      {[&](BertConfig& c) { c.type_vocab_size = huge; }, "type_vocab_size = 4611686018427387904"},
      {[&](BertConfig& c) { c.num_labels = huge; }, "num_labels = 4611686018427387904"},
      {[&](BertConfig& c) {
         c.hidden_size = 65536;
         c.num_attention_heads = 16;
         c.num_hidden_layers = 10;
       },
       "above the limit of 4,000,000,000"},
  };
  for (const Case& k : cases) {
    BertConfig c;
    k.set(c);
    const Status s = c.validate();
    ASSERT_FALSE(s.is_ok()) << k.words;
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find(k.words), std::string::npos) << s.message();
  }
  BertConfig overflow;
  overflow.vocab_size = overflow.hidden_size = huge;
  EXPECT_FALSE(bert_param_count(overflow, BertHead::kMaskedLM).is_ok());
}

}  // namespace
}  // namespace shardlab::runtime::model
