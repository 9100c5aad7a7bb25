#include "runtime/model/bert_data.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "runtime/core/rng.h"

namespace shardlab::runtime::model {

namespace {

constexpr std::uint64_t kBertDataStream = 0x4245525444415441ull;  // "BERTDATA"
// Child streams of a row: the tokens do not depend on the head, so a classification and an
// MLM batch of one seed hold the same sentences.
constexpr std::uint64_t kTokenStream = 0, kLabelStream = 1;
// DataCollatorForLanguageModeling's defaults.
constexpr float kMlmProbability = 0.15f, kMaskFraction = 0.8f, kRandomFraction = 0.1f;

// [CLS]/[SEP]/[MASK] exist (and normal ids start after [MASK]) only when the vocabulary
// also holds at least one normal id after them: V > 104.
bool has_special_tokens(const BertConfig& c) { return c.vocab_size > kBertMaskId + 1; }

}  // namespace

Result<Batch> synthetic_bert_batch(device::Device& dev, const BertConfig& config, BertHead head, std::int64_t seq_len,
                                   std::uint64_t seed, std::int64_t step, std::int64_t first_row, std::int64_t rows) {
  SHARDLAB_RETURN_IF_ERROR(config.validate());
  auto bad = [](const std::string& m) { return Status::invalid_argument("synthetic BERT batch: " + m); };
  if (seq_len < 1 || seq_len > config.max_position_embeddings) {
    return bad("seq_len = " + std::to_string(seq_len) +
               " must be in [1, max_position_embeddings = " + std::to_string(config.max_position_embeddings) + "]");
  }
  if (step < 0 || first_row < 0 || rows < 0) {
    return bad("step (" + std::to_string(step) + "), first_row (" + std::to_string(first_row) + ") and rows (" +
               std::to_string(rows) + ") must be >= 0");
  }
  const bool specials = has_special_tokens(config);
  if (head == BertHead::kMaskedLM && !specials) {
    return bad("the mlm head needs [MASK] (id " + std::to_string(kBertMaskId) +
               ") and a normal token after it: vocab_size = " + std::to_string(config.vocab_size) +
               " must be >= " + std::to_string(kBertMaskId + 2));
  }
  const std::int64_t V = config.vocab_size, T = seq_len, B = rows;
  // Without special tokens every id but [PAD] is a normal token (all of them when V == 1).
  const std::int64_t first_normal_id = specials ? kBertMaskId + 1 : std::min<std::int64_t>(1, V - 1);
  const std::int64_t min_len = std::min<std::int64_t>(std::max<std::int64_t>(2, T / 2), T);

  // Padding as a tokenizer pads: with the config's pad_token_id (the vocabulary's [PAD]
  // when the config has no padding row).
  const std::int64_t pad_id = config.pad_token_id >= 0 ? config.pad_token_id : kBertPadId;
  std::vector<std::int64_t> ids(static_cast<std::size_t>(B * T), pad_id), types(ids.size(), 0);
  std::vector<float> mask(ids.size(), 0.0f);
  std::vector<std::int64_t> labels, starts, ends;
  if (head == BertHead::kMaskedLM) labels.assign(ids.size(), -100);
  if (head == BertHead::kSequenceClassification) labels.assign(static_cast<std::size_t>(B), 0);
  if (head == BertHead::kQuestionAnswering) {
    starts.assign(static_cast<std::size_t>(B), 0);
    ends.assign(static_cast<std::size_t>(B), 0);
  }

  const Rng step_rng = Rng(seed, kBertDataStream).split(static_cast<std::uint64_t>(step));
  for (std::int64_t r = 0; r < B; ++r) {
    const Rng row_rng = step_rng.split(static_cast<std::uint64_t>(first_row + r));
    Rng tok = row_rng.split(kTokenStream), lab = row_rng.split(kLabelStream);
    const std::size_t base = static_cast<std::size_t>(r * T);
    std::int64_t* row = ids.data() + base;
    const std::int64_t len =
        min_len + static_cast<std::int64_t>(tok.uniform_int(static_cast<std::uint64_t>(T - min_len + 1)));
    for (std::int64_t p = 0; p < len; ++p) {
      mask[base + static_cast<std::size_t>(p)] = 1.0f;
      if (config.type_vocab_size > 1 && p >= len / 2) types[base + static_cast<std::size_t>(p)] = 1;
    }
    // Positions [first, last) hold normal tokens; [CLS] and [SEP] frame them.
    std::int64_t first = 0, last = len;
    if (specials) {
      row[0] = kBertClsId;
      first = 1;
      if (len >= 2) {
        row[len - 1] = kBertSepId;
        last = len - 1;
      }
    }
    for (std::int64_t p = first; p < last; ++p) {
      row[p] =
          first_normal_id + static_cast<std::int64_t>(tok.uniform_int(static_cast<std::uint64_t>(V - first_normal_id)));
    }

    switch (head) {
      case BertHead::kSequenceClassification:
        labels[static_cast<std::size_t>(r)] =
            static_cast<std::int64_t>(lab.uniform_int(static_cast<std::uint64_t>(config.num_labels)));
        break;
      case BertHead::kQuestionAnswering: {
        const auto a = static_cast<std::int64_t>(lab.uniform_int(static_cast<std::uint64_t>(len)));
        const auto b = static_cast<std::int64_t>(lab.uniform_int(static_cast<std::uint64_t>(len)));
        starts[static_cast<std::size_t>(r)] = std::min(a, b);
        ends[static_cast<std::size_t>(r)] = std::max(a, b);
        break;
      }
      case BertHead::kMaskedLM:
        // Hugging Face: selected ~ Bernoulli(0.15) over real non-special tokens; of those,
        // Bernoulli(0.8) → [MASK], then Bernoulli(0.5) of the rest → a random id in [0, V),
        // the remainder unchanged. A row may select nothing; the trainer counts targets.
        for (std::int64_t p = first; p < last; ++p) {
          if (!(lab.uniform01() < kMlmProbability)) continue;
          labels[base + static_cast<std::size_t>(p)] = row[p];
          const float u = lab.uniform01();
          if (u < kMaskFraction) {
            row[p] = kBertMaskId;
          } else if (u < kMaskFraction + kRandomFraction) {
            row[p] = static_cast<std::int64_t>(lab.uniform_int(static_cast<std::uint64_t>(V)));
          }
        }
        break;
    }
  }

  Batch batch;
  batch.rows = B;
  SHARDLAB_RETURN_IF_ERROR(batch.put(dev, "input_ids", {B, T}, std::move(ids)));
  SHARDLAB_RETURN_IF_ERROR(batch.put(dev, "token_type_ids", {B, T}, std::move(types)));
  switch (head) {
    case BertHead::kSequenceClassification:
      SHARDLAB_RETURN_IF_ERROR(batch.put(dev, "labels", {B}, std::move(labels)));
      break;
    case BertHead::kMaskedLM: SHARDLAB_RETURN_IF_ERROR(batch.put(dev, "labels", {B, T}, std::move(labels))); break;
    case BertHead::kQuestionAnswering:
      SHARDLAB_RETURN_IF_ERROR(batch.put(dev, "start_positions", {B}, std::move(starts)));
      SHARDLAB_RETURN_IF_ERROR(batch.put(dev, "end_positions", {B}, std::move(ends)));
      break;
  }
  SHARDLAB_RETURN_IF_ERROR(batch.put(dev, "attention_mask", {B, T}, mask));
  return batch;
}

}  // namespace shardlab::runtime::model
