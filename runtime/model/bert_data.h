// Seeded synthetic BERT batches: row i of step s is a pure function of (seed, step, i),
// so any rank can make its own rows of the global batch and the oracle makes the same.
//
// Per row: a length in [max(2, T/2), T] (padding after it: attention_mask 0, id 0
// [PAD]); ids uniform in [first_normal_id, V) with [CLS] (101) first and [SEP] (102) last
// when V > 103; token_type_ids 0 for the first half of the real tokens, 1 after (when
// type_vocab_size > 1).
// Labels per head:
//   classification: labels [B] uniform in [0, num_labels)
//   mlm: Hugging Face's DataCollatorForLanguageModeling rule — each real, non-special token
//        is selected with p = 0.15; labels [B, T] = original id where selected, else -100;
//        of the selected: 80% → [MASK] (103), 10% → random id, 10% unchanged
//   qa: start_positions <= end_positions inside the real tokens [B]
// Tensors: input_ids/token_type_ids/labels/start_positions/end_positions int64,
// attention_mask fp32 (1 attend, 0 pad).
#pragma once

#include <cstdint>

#include "runtime/model/bert.h"

namespace shardlab::runtime::model {

constexpr std::int64_t kBertPadId = 0, kBertClsId = 101, kBertSepId = 102, kBertMaskId = 103;

Result<Batch> synthetic_bert_batch(device::Device& dev, const BertConfig& config, BertHead head, std::int64_t seq_len,
                                   std::uint64_t seed, std::int64_t step, std::int64_t first_row, std::int64_t rows);

}  // namespace shardlab::runtime::model
