// BERT as Hugging Face transformers defines it (modeling_bert.py): the same
// function and parameter names as BertForSequenceClassification, BertForMaskedLM and
// BertForQuestionAnswering, written against the Device op set.
//
// Layers (FSDP hook granularity): 0 = embeddings ("BertEmbeddings"), 1..L = encoder
// layers ("BertLayer", the transformer wrap class), L+1 = the head. The MLM decoder is
// tied to the word embeddings, so under FSDP the embeddings and the MLM head must share
// a unit (the root unit of the transformer policy), as in PyTorch.
//
// Dropout masks come from Rng(seed) keyed by (step, global row, layer, site), so a row
// sees the same mask on any world size and any backend.
//
// Compute: fp32, or bf16 (every activation stored rounded to bf16, accumulation in fp32;
// parameters arrive rounded by FSDP's param_dtype).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/model/model.h"

namespace shardlab::runtime::model {

enum class BertHead { kSequenceClassification, kMaskedLM, kQuestionAnswering };
std::string_view bert_head_name(BertHead head);  // "classification", "mlm", "qa"

// NOTE [Static masked-LM shape]
// The masked-LM decoder runs on the labeled positions only (the others contribute nothing
// to the loss or the gradients), gathered into rows — and padded with ignored rows (label
// −100, zero loss and zero gradients) up to `mlm_decoder_rows`: ⌈0.15·T⌉ a sequence, the
// max_predictions_per_seq of BERT's pretraining pipelines (20 at T = 128, as Google's,
// NVIDIA's and MLPerf's BERT), or the labeled count when a batch has more. So the decoder's
// shape does not depend on how many tokens the data happened to mask: a graph-compiled
// device (Gaudi) compiles it once, and every rank of a synthetic run issues the same
// program (timing mode captures one and replays it across any world size).
std::int64_t mlm_decoder_rows(std::int64_t batch_rows, std::int64_t seq_len, std::int64_t labeled);
std::string_view bert_architecture_name(BertHead head);  // "BertForSequenceClassification", …
// Accepts the short names and the Hugging Face architecture names.
Result<BertHead> parse_bert_head(std::string_view name);

// NOTE [BERT size limits]
// Every dimension of a BertConfig and its parameter count are bounded, and checked (in
// overflow-safe arithmetic) before anything is sized or allocated from them: a config.json
// with vocab_size 2^62 or a million layers is INVALID_ARGUMENT naming the number and the
// limit, not an abort or an allocation of gigabytes. The limits sit far above any BERT in
// use (bert-large: V 30522, H 1024, I 4096, L 24, 335 M parameters; multilingual
// vocabularies ~250 k): a transformer this harness can train is well inside them.
inline constexpr std::int64_t kMaxBertVocabSize = std::int64_t{1} << 22;  // 4,194,304 word ids
inline constexpr std::int64_t kMaxBertHiddenSize = 65536;
inline constexpr std::int64_t kMaxBertIntermediateSize = 262144;  // 4 × the largest hidden size
inline constexpr int kMaxBertLayers = 1000;
inline constexpr std::int64_t kMaxBertPositions = std::int64_t{1} << 20;  // 1,048,576 (--seq-len's limit)
inline constexpr std::int64_t kMaxBertTypeVocabSize = 65536;
inline constexpr std::int64_t kMaxBertLabels = std::int64_t{1} << 20;
inline constexpr std::int64_t kMaxBertParameters = 4'000'000'000;  // 16 GB in fp32

struct BertConfig {
  std::int64_t vocab_size = 30522;
  std::int64_t hidden_size = 128;
  int num_hidden_layers = 2;
  int num_attention_heads = 2;
  std::int64_t intermediate_size = 512;
  device::Activation hidden_act = device::Activation::kGelu;  // "gelu" (erf) or "gelu_new" (kGeluTanh)
  std::int64_t max_position_embeddings = 512;
  std::int64_t type_vocab_size = 2;
  float layer_norm_eps = 1e-12f;
  float hidden_dropout_prob = 0.1f;
  float attention_probs_dropout_prob = 0.1f;
  std::int64_t num_labels = 2;
  // nn.Embedding(padding_idx): the row is zero at init and gets no gradient from the
  // lookup (the tied MLM decoder still reaches it, as in PyTorch); -1: no padding row
  // (config.json's null). Synthetic batches pad with it.
  std::int64_t pad_token_id = 0;
  float initializer_range = 0.02f;
  // Checks the invariants (positive sizes within NOTE [BERT size limits], heads dividing
  // hidden, probabilities in [0, 1), the parameter count of every head within the limit).
  Status validate() const;
};

// The number of parameters bert_param_specs(config, head) holds, computed without building
// them and without overflow: INVALID_ARGUMENT when a size is not positive or the count
// passes INT64_MAX. Does not apply the limits (validate() does).
Result<std::int64_t> bert_param_count(const BertConfig& config, BertHead head);

// bert-tiny, bert-mini, bert-small, bert-base, bert-large (bert.md); anything else is
// INVALID_ARGUMENT listing the presets.
Result<BertConfig> bert_preset(std::string_view name);
std::vector<std::string> bert_preset_names();

struct BertOptions {
  BertConfig config;
  BertHead head = BertHead::kSequenceClassification;
  std::int64_t seq_len = 32;              // synthetic batches
  bool activation_checkpointing = false;  // recompute each BertLayer's forward in backward
  DType compute_dtype = DType::kF32;      // kF32 or kBF16
};

// Parameter specs in forward order with Hugging Face names (no decoder weight: tied).
std::vector<ParamSpec> bert_param_specs(const BertConfig& config, BertHead head);

class Bert final : public Model {
 public:
  explicit Bert(BertOptions options);
  const BertOptions& options() const { return options_; }
  const BertConfig& config() const { return options_.config; }

  const std::vector<ParamSpec>& params() const override { return specs_; }
  int num_layers() const override { return options_.config.num_hidden_layers + 2; }
  std::vector<std::string> default_wrap_classes() const override { return {"BertLayer"}; }
  // Hugging Face's _init_weights: N(0, initializer_range) for Linear and Embedding weights,
  // zero biases, LayerNorm weight 1 and bias 0.
  Status init_params(device::Device& dev, const std::vector<Tensor>& params, std::uint64_t seed) const override;
  std::vector<double> loss_term_weights() const override;
  Result<std::vector<std::int64_t>> count_targets(const Batch& batch) const override;
  Result<Batch> synthetic_batch(device::Device& dev, std::uint64_t seed, std::int64_t step, std::int64_t first_row,
                                std::int64_t rows) const override;
  Result<std::vector<double>> forward_backward(device::Device& dev, ParamAccess& access, const Batch& batch,
                                               const std::vector<float>& term_scale,
                                               const ForwardContext& ctx) const override;
  // The dropout masks one training forward at `ctx` draws for `rows` batch rows of `seq`
  // tokens, each under the Hugging Face name of the Dropout module that applies it (eager
  // attention): "bert.embeddings.dropout" [rows, T, H]; per layer i
  // "bert.encoder.layer.{i}.attention.self.dropout" [rows, A, T, T],
  // "….attention.output.dropout" and "….output.dropout" [rows, T, H]; "dropout" [rows, H]
  // for sequence classification (on the pooled output). Values 0 or 1/(1-p); sites whose p
  // is 0 are left out. fp32 tensors on `dev`, bitwise the masks forward_backward applies.
  Result<std::vector<std::pair<std::string, Tensor>>> dropout_masks(device::Device& dev, const ForwardContext& ctx,
                                                                    std::int64_t rows, std::int64_t seq) const;
  // Checks a batch's tensors against the config and head: names, dtypes, shapes, token
  // ids inside the vocabulary, T <= max_position_embeddings, labels in range.
  Status validate_batch(const Batch& batch) const;

 private:
  BertOptions options_;
  std::vector<ParamSpec> specs_;
};

}  // namespace shardlab::runtime::model
