// Hugging Face files for BERT: config.json, model.safetensors, token batches.
//
// Every malformed input is INVALID_ARGUMENT naming the file and what is wrong (and, for
// JSON syntax errors, line:col) — never a crash or a silent default.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "runtime/model/bert.h"

namespace shardlab::runtime::model {

struct HfBertConfig {
  BertConfig config;
  BertHead head = BertHead::kSequenceClassification;  // from architectures[0]
};

// Reads a Hugging Face config.json (model_type "bert"; keys of bert.md; missing keys take
// transformers' BertConfig defaults; architectures[0] picks the head, and must be one of the
// three supported when present — absent means `default_head`).
Result<HfBertConfig> read_bert_config(const std::string& path,
                                      BertHead default_head = BertHead::kSequenceClassification);
// The same from JSON text (`path` only names it in messages).
Result<HfBertConfig> parse_bert_config(const std::string& path, const std::string& text,
                                       BertHead default_head = BertHead::kSequenceClassification);

// Loads model.safetensors into `params` (fp32 views in `specs` order, as from
// bert_param_specs). Accepts F32, BF16 and F16 tensors; names with or without the "bert."
// prefix; LayerNorm "gamma"/"beta" for "weight"/"bias"; the MLM decoder tied to the word
// embeddings (cls.predictions.decoder.weight may be absent; "cls.predictions.decoder.bias"
// is accepted for "cls.predictions.bias"). Extra tensors (e.g. position_ids buffers, other
// heads) are ignored. A missing parameter or a shape mismatch is an error naming the tensor,
// the expected and the found shape.
Status load_bert_weights(const std::string& path, const std::vector<ParamSpec>& specs,
                         const std::vector<Tensor>& params);

// Writes one F32 tensor per spec (values from `tensors`, fp32 views in spec order) under its
// Hugging Face name, with `metadata` in __metadata__. Atomic (temp file + rename).
Status save_bert_tensors(const std::string& path, const std::vector<ParamSpec>& specs,
                         const std::vector<Tensor>& tensors, const std::map<std::string, std::string>& metadata = {});

// Reads a token batch: input_ids [B, T] (I64, or I32 widened), attention_mask [B, T] (any
// integer or float dtype; becomes fp32 0/1), optional token_type_ids (zeros when absent),
// and labels ([B] for classification, [B, T] for MLM with -100 ignored) or start_positions +
// end_positions [B] for QA. Tensors go to `dev` (int64 ids/labels, fp32 mask). Checked
// against `bert.validate_batch`.
Result<Batch> read_bert_batch(const std::string& path, const Bert& bert, device::Device& dev);

}  // namespace shardlab::runtime::model
