// Synthetic BERT batches: rows are pure functions of (seed, step, row), shaped like real
// tokenized text, and MLM masking follows Hugging Face's DataCollatorForLanguageModeling.
#include "runtime/model/bert_data.h"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <set>

#include "runtime/device/cpu/device.h"
#include "testing/status_matchers.h"

using shardlab::testlib::IsOk;

namespace shardlab::runtime::model {
namespace {

const BertHead kAllHeads[] = {BertHead::kSequenceClassification, BertHead::kMaskedLM, BertHead::kQuestionAnswering};

BertConfig test_config() {
  BertConfig c;  // V 30522, P 512
  c.num_labels = 5;
  return c;
}

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

Batch make(device::Device& dev, BertHead head, std::int64_t T, std::uint64_t seed, std::int64_t step,
           std::int64_t first_row, std::int64_t rows, const BertConfig& c = test_config()) {
  auto r = synthetic_bert_batch(dev, c, head, T, seed, step, first_row, rows);
  EXPECT_THAT(r, IsOk());
  return r.is_ok() ? *r : Batch{};
}

// The per-row slice [r*width, (r+1)*width) of every tensor.
std::map<std::string, std::vector<double>> row_of(const Batch& b, std::int64_t r) {
  std::map<std::string, std::vector<double>> out;
  for (const auto& [name, t] : b.tensors) {
    const std::int64_t width = t.numel() / b.rows;
    for (std::int64_t k = r * width; k < (r + 1) * width; ++k) {
      out[name].push_back(t.dtype() == DType::kF32 ? t.data<float>()[k]
                                                   : static_cast<double>(t.data<std::int64_t>()[k]));
    }
  }
  return out;
}

TEST(BertSyntheticData, TensorsShapesAndDtypesPassValidation) {
  device::cpu::CpuDevice dev;
  for (BertHead head : kAllHeads) {
    const Batch b = make(dev, head, 24, 1, 0, 0, 6);
    EXPECT_EQ(b.rows, 6);
    EXPECT_EQ(b.get("input_ids")->shape(), (Shape{6, 24}));
    EXPECT_EQ(b.get("input_ids")->dtype(), DType::kI64);
    EXPECT_EQ(b.get("attention_mask")->shape(), (Shape{6, 24}));
    EXPECT_EQ(b.get("attention_mask")->dtype(), DType::kF32);
    EXPECT_EQ(b.get("token_type_ids")->shape(), (Shape{6, 24}));
    std::set<std::string> names;
    for (const auto& [n, t] : b.tensors) names.insert(n);
    switch (head) {
      case BertHead::kSequenceClassification:
        EXPECT_EQ(names, (std::set<std::string>{"input_ids", "attention_mask", "token_type_ids", "labels"}));
        EXPECT_EQ(b.get("labels")->shape(), (Shape{6}));
        break;
      case BertHead::kMaskedLM:
        EXPECT_EQ(names, (std::set<std::string>{"input_ids", "attention_mask", "token_type_ids", "labels"}));
        EXPECT_EQ(b.get("labels")->shape(), (Shape{6, 24}));
        break;
      case BertHead::kQuestionAnswering:
        EXPECT_EQ(names, (std::set<std::string>{"input_ids", "attention_mask", "token_type_ids", "start_positions",
                                                "end_positions"}));
        break;
    }
    BertOptions o;
    o.config = test_config();
    o.head = head;
    const Status v = Bert(o).validate_batch(b);
    EXPECT_THAT(v, IsOk());
  }
}

TEST(BertSyntheticData, DeterministicAndSensitiveToSeedAndStep) {
  device::cpu::CpuDevice dev;
  for (BertHead head : kAllHeads) {
    const Batch a = make(dev, head, 32, 7, 3, 0, 8), b = make(dev, head, 32, 7, 3, 0, 8);
    const Batch other_seed = make(dev, head, 32, 8, 3, 0, 8), other_step = make(dev, head, 32, 7, 4, 0, 8);
    for (std::int64_t r = 0; r < 8; ++r) EXPECT_EQ(row_of(a, r), row_of(b, r)) << r;
    EXPECT_NE(ints(a, "input_ids"), ints(other_seed, "input_ids"));
    EXPECT_NE(ints(a, "input_ids"), ints(other_step, "input_ids"));
  }
}

TEST(BertSyntheticData, RowsMadeSeparatelyEqualRowsMadeTogether) {
  device::cpu::CpuDevice dev;
  for (BertHead head : kAllHeads) {
    const Batch all = make(dev, head, 20, 5, 2, 0, 10);
    const Batch left = make(dev, head, 20, 5, 2, 0, 3), right = make(dev, head, 20, 5, 2, 3, 7);
    for (std::int64_t r = 0; r < 3; ++r) EXPECT_EQ(row_of(all, r), row_of(left, r)) << r;
    for (std::int64_t r = 0; r < 7; ++r) EXPECT_EQ(row_of(all, 3 + r), row_of(right, r)) << r;
    EXPECT_NE(row_of(all, 0), row_of(all, 1));  // rows differ from each other
  }
}

RC_GTEST_PROP(BertSyntheticData, AnyRowRangeMatchesTheFullBatch, ()) {
  const auto seed = *rc::gen::arbitrary<std::uint64_t>();
  const auto step = *rc::gen::inRange<std::int64_t>(0, 1000);
  const auto total = *rc::gen::inRange<std::int64_t>(1, 12);
  const auto first = *rc::gen::inRange<std::int64_t>(0, total);
  const auto rows = *rc::gen::inRange<std::int64_t>(0, total - first + 1);
  const BertHead head = *rc::gen::elementOf(std::vector<BertHead>(std::begin(kAllHeads), std::end(kAllHeads)));
  const auto T = *rc::gen::inRange<std::int64_t>(1, 40);
  device::cpu::CpuDevice dev;
  const auto all = synthetic_bert_batch(dev, test_config(), head, T, seed, step, 0, total);
  const auto part = synthetic_bert_batch(dev, test_config(), head, T, seed, step, first, rows);
  RC_ASSERT(all.is_ok());
  RC_ASSERT(part.is_ok());
  RC_ASSERT(part->rows == rows);
  for (std::int64_t r = 0; r < rows; ++r) RC_ASSERT(row_of(*part, r) == row_of(*all, first + r));
}

// Per row: the real length from the mask, which must be a prefix.
std::vector<std::int64_t> lengths(const Batch& b, std::int64_t T) {
  const auto mask = floats(b, "attention_mask");
  std::vector<std::int64_t> out;
  for (std::int64_t r = 0; r < b.rows; ++r) {
    std::int64_t len = 0;
    while (len < T && mask[static_cast<std::size_t>(r * T + len)] == 1.0f) ++len;
    for (std::int64_t p = len; p < T; ++p) EXPECT_EQ(mask[static_cast<std::size_t>(r * T + p)], 0.0f) << r << "," << p;
    out.push_back(len);
  }
  return out;
}

TEST(BertSyntheticData, RowsLookLikeTokenizedText) {
  device::cpu::CpuDevice dev;
  const std::int64_t T = 30, B = 400;
  const Batch b = make(dev, BertHead::kSequenceClassification, T, 11, 0, 0, B);
  const auto ids = ints(b, "input_ids"), types = ints(b, "token_type_ids"), labels = ints(b, "labels");
  const auto len = lengths(b, T);
  std::set<std::int64_t> seen_len, seen_labels;
  for (std::int64_t r = 0; r < B; ++r) {
    const std::int64_t n = len[static_cast<std::size_t>(r)];
    seen_len.insert(n);
    ASSERT_GE(n, T / 2);
    ASSERT_LE(n, T);
    auto at = [&](const std::vector<std::int64_t>& v, std::int64_t p) {
      return v[static_cast<std::size_t>(r * T + p)];
    };
    EXPECT_EQ(at(ids, 0), kBertClsId);
    EXPECT_EQ(at(ids, n - 1), kBertSepId);
    for (std::int64_t p = 1; p < n - 1; ++p) {
      EXPECT_GE(at(ids, p), kBertMaskId + 1);
      EXPECT_LT(at(ids, p), test_config().vocab_size);
    }
    for (std::int64_t p = 0; p < T; ++p) {
      if (p >= n) {
        EXPECT_EQ(at(ids, p), kBertPadId);
      }
      EXPECT_EQ(at(types, p), p < n && p >= n / 2 ? 1 : 0) << "row " << r << " position " << p << " length " << n;
    }
    seen_labels.insert(labels[static_cast<std::size_t>(r)]);
  }
  EXPECT_EQ(seen_len.size(), static_cast<std::size_t>(T - T / 2 + 1));  // every length in [T/2, T] occurs
  EXPECT_EQ(seen_labels, (std::set<std::int64_t>{0, 1, 2, 3, 4}));
}

TEST(BertSyntheticData, SmallVocabularyAndSingleTokenType) {
  device::cpu::CpuDevice dev;
  BertConfig c = test_config();
  c.vocab_size = 50;  // no [CLS]/[SEP]/[MASK]
  c.type_vocab_size = 1;
  const Batch b = make(dev, BertHead::kQuestionAnswering, 8, 2, 0, 0, 50, c);
  const auto len = lengths(b, 8);
  const auto ids = ints(b, "input_ids");
  for (std::int64_t r = 0; r < 50; ++r) {
    for (std::int64_t p = 0; p < 8; ++p) {
      const std::int64_t id = ids[static_cast<std::size_t>(r * 8 + p)];
      if (p < len[static_cast<std::size_t>(r)]) {
        EXPECT_GE(id, 1);
        EXPECT_LT(id, 50);
      } else {
        EXPECT_EQ(id, kBertPadId);
      }
    }
  }
  for (std::int64_t t : ints(b, "token_type_ids")) EXPECT_EQ(t, 0);
  // Length 1 (T = 1): min length clamps to T.
  const Batch one = make(dev, BertHead::kSequenceClassification, 1, 2, 0, 0, 4, test_config());
  for (float m : floats(one, "attention_mask")) EXPECT_EQ(m, 1.0f);
  for (std::int64_t id : ints(one, "input_ids")) EXPECT_EQ(id, kBertClsId);
}

TEST(BertSyntheticData, QaSpansLieInsideTheRealTokens) {
  device::cpu::CpuDevice dev;
  const std::int64_t T = 16, B = 500;
  const Batch b = make(dev, BertHead::kQuestionAnswering, T, 4, 1, 0, B);
  const auto len = lengths(b, T);
  const auto s = ints(b, "start_positions"), e = ints(b, "end_positions");
  std::int64_t nontrivial = 0, last_position = 0;
  for (std::size_t r = 0; r < static_cast<std::size_t>(B); ++r) {
    ASSERT_GE(s[r], 0);
    ASSERT_LE(s[r], e[r]);
    ASSERT_LT(e[r], len[r]);
    nontrivial += s[r] < e[r] ? 1 : 0;
    last_position += e[r] == len[r] - 1 ? 1 : 0;
  }
  EXPECT_GT(nontrivial, B / 2);
  EXPECT_GT(last_position, 0);
}

TEST(BertSyntheticData, MlmMaskingFollowsHuggingFacesRule) {
  device::cpu::CpuDevice dev;
  const std::int64_t T = 64, B = 2000;
  const Batch mlm = make(dev, BertHead::kMaskedLM, T, 21, 5, 0, B);
  // The same seed's classification batch holds the unmasked tokens (the head changes only
  // labels and masking).
  const Batch plain = make(dev, BertHead::kSequenceClassification, T, 21, 5, 0, B);
  const auto ids = ints(mlm, "input_ids"), labels = ints(mlm, "labels"), original = ints(plain, "input_ids");
  EXPECT_EQ(floats(mlm, "attention_mask"), floats(plain, "attention_mask"));
  const auto len = lengths(mlm, T);
  std::int64_t maskable = 0, selected = 0, masked = 0, random = 0, unchanged = 0, rows_without = 0;
  for (std::int64_t r = 0; r < B; ++r) {
    const std::int64_t n = len[static_cast<std::size_t>(r)];
    std::int64_t row_selected = 0;
    for (std::int64_t p = 0; p < T; ++p) {
      const auto k = static_cast<std::size_t>(r * T + p);
      const bool special = p == 0 || p == n - 1 || p >= n;
      if (special) {  // [CLS], [SEP] and padding are never selected
        ASSERT_EQ(labels[k], -100) << r << "," << p;
        ASSERT_EQ(ids[k], original[k]);
        continue;
      }
      ++maskable;
      if (labels[k] == -100) {
        ASSERT_EQ(ids[k], original[k]);
        continue;
      }
      ++selected;
      ++row_selected;
      ASSERT_EQ(labels[k], original[k]);  // the label is the original token
      if (ids[k] == kBertMaskId)
        ++masked;
      else if (ids[k] == original[k])
        ++unchanged;
      else
        ++random;
    }
    rows_without += row_selected == 0 ? 1 : 0;
  }
  ASSERT_GT(maskable, 80000);
  const double p_sel = static_cast<double>(selected) / static_cast<double>(maskable);
  EXPECT_NEAR(p_sel, 0.15, 0.006);  // ~5σ for ~95k tokens
  const double n = static_cast<double>(selected);
  EXPECT_NEAR(masked / n, 0.8, 0.02);
  EXPECT_NEAR(random / n, 0.1, 0.015);
  EXPECT_NEAR(unchanged / n, 0.1, 0.015);
  // Rows hold >= 30 maskable tokens, so P(no selection) = 0.85^30 < 1% per row: some, not many.
  EXPECT_LT(rows_without, B / 20);
}

TEST(BertSyntheticData, MlmRowsMaySelectNothing) {
  // Short rows (T = 4: two maskable tokens at most) select nothing with p >= 0.85² ≈ 0.72; the
  // generator does not force a selection (Hugging Face does not either).
  device::cpu::CpuDevice dev;
  const Batch b = make(dev, BertHead::kMaskedLM, 4, 3, 0, 0, 200);
  const auto labels = ints(b, "labels");
  std::int64_t empty_rows = 0;
  for (std::size_t r = 0; r < 200; ++r) {
    bool any = false;
    for (std::size_t p = 0; p < 4; ++p) any |= labels[r * 4 + p] != -100;
    empty_rows += any ? 0 : 1;
  }
  EXPECT_GT(empty_rows, 100);
  EXPECT_LT(empty_rows, 200);
}

TEST(BertSyntheticData, BadArgumentsAreInvalidArgument) {
  device::cpu::CpuDevice dev;
  struct Case {
    BertConfig config;
    BertHead head;
    std::int64_t T, step, first_row, rows;
    const char* piece;
  };
  BertConfig tiny = test_config();
  tiny.vocab_size = 104;
  BertConfig broken = test_config();
  broken.num_attention_heads = 3;
  const Case cases[] = {
      {test_config(), BertHead::kSequenceClassification, 0, 0, 0, 1, "seq_len = 0"},
      {test_config(), BertHead::kSequenceClassification, 513, 0, 0, 1, "max_position_embeddings = 512"},
      {test_config(), BertHead::kSequenceClassification, 8, -1, 0, 1, "step (-1)"},
      {test_config(), BertHead::kSequenceClassification, 8, 0, -2, 1, "first_row (-2)"},
      {test_config(), BertHead::kSequenceClassification, 8, 0, 0, -1, "rows (-1)"},
      {tiny, BertHead::kMaskedLM, 8, 0, 0, 1, "vocab_size = 104 must be >= 105"},
      {broken, BertHead::kSequenceClassification, 8, 0, 0, 1, "num_attention_heads (3)"},
  };
  for (const Case& c : cases) {
    auto r = synthetic_bert_batch(dev, c.config, c.head, c.T, 1, c.step, c.first_row, c.rows);
    ASSERT_FALSE(r.is_ok()) << c.piece;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(c.piece), std::string::npos) << r.status().message();
  }
  // A vocabulary without [MASK] is fine for the other heads.
  EXPECT_TRUE(synthetic_bert_batch(dev, tiny, BertHead::kSequenceClassification, 8, 1, 0, 0, 2).is_ok());
}

}  // namespace
}  // namespace shardlab::runtime::model
