#include "runtime/model/bert.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace shardlab::runtime::model {

std::int64_t mlm_decoder_rows(std::int64_t batch_rows, std::int64_t seq_len, std::int64_t labeled) {
  const std::int64_t per_sequence = (15 * seq_len + 99) / 100;  // ⌈0.15·T⌉ in integers
  return std::max(labeled, batch_rows * per_sequence);
}

std::string_view bert_head_name(BertHead head) {
  switch (head) {
    case BertHead::kSequenceClassification: return "classification";
    case BertHead::kMaskedLM: return "mlm";
    case BertHead::kQuestionAnswering: return "qa";
  }
  return "?";
}

std::string_view bert_architecture_name(BertHead head) {
  switch (head) {
    case BertHead::kSequenceClassification: return "BertForSequenceClassification";
    case BertHead::kMaskedLM: return "BertForMaskedLM";
    case BertHead::kQuestionAnswering: return "BertForQuestionAnswering";
  }
  return "?";
}

Result<BertHead> parse_bert_head(std::string_view name) {
  for (BertHead h : {BertHead::kSequenceClassification, BertHead::kMaskedLM, BertHead::kQuestionAnswering}) {
    if (name == bert_head_name(h) || name == bert_architecture_name(h)) return h;
  }
  return Status::invalid_argument("unknown BERT head '" + std::string(name) +
                                  "'; allowed: classification, mlm, qa (or BertForSequenceClassification, "
                                  "BertForMaskedLM, BertForQuestionAnswering)");
}

namespace {

// Checked int64 arithmetic: once an operation overflows, `ok` stays false.
struct Checked {
  bool ok = true;
  std::int64_t add(std::int64_t a, std::int64_t b) {
    std::int64_t r = 0;
    ok = ok && !__builtin_add_overflow(a, b, &r);
    return r;
  }
  std::int64_t mul(std::int64_t a, std::int64_t b) {
    std::int64_t r = 0;
    ok = ok && !__builtin_mul_overflow(a, b, &r);
    return r;
  }
};

std::string with_commas(std::int64_t v) {
  std::string digits = std::to_string(v), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0 && digits[i - 1] != '-') out += ',';
    out += digits[i];
  }
  return out;
}

}  // namespace

Result<std::int64_t> bert_param_count(const BertConfig& c, BertHead head) {
  const std::int64_t H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size;
  if (H < 1 || I < 1 || V < 1 || c.max_position_embeddings < 1 || c.type_vocab_size < 1 || c.num_labels < 1 ||
      c.num_hidden_layers < 0) {
    return Status::invalid_argument("BERT parameter count: every size must be positive");
  }
  // bert_param_specs, term by term: the embeddings (V + P + TV rows of H, LayerNorm 2H),
  // each layer (q, k, v, attention output: H·H + H each; two LayerNorms: 2H each;
  // intermediate I·H + I; output H·I + H), and the head.
  Checked k;
  const std::int64_t hh = k.add(k.mul(H, H), H);  // a square Linear
  const std::int64_t emb = k.add(k.mul(k.add(k.add(V, c.max_position_embeddings), c.type_vocab_size), H), k.mul(2, H));
  const std::int64_t layer =
      k.add(k.add(k.mul(4, hh), k.mul(4, H)), k.add(k.add(k.mul(I, H), I), k.add(k.mul(H, I), H)));
  std::int64_t head_n = 0;
  switch (head) {
    case BertHead::kSequenceClassification: head_n = k.add(hh, k.add(k.mul(c.num_labels, H), c.num_labels)); break;
    case BertHead::kMaskedLM: head_n = k.add(k.add(hh, k.mul(2, H)), V); break;
    case BertHead::kQuestionAnswering: head_n = k.add(k.mul(2, H), 2); break;
  }
  const std::int64_t total = k.add(k.add(emb, k.mul(layer, c.num_hidden_layers)), head_n);
  if (!k.ok) return Status::invalid_argument("BERT parameter count: passes 2^63 (the sizes are too large)");
  return total;
}

Status BertConfig::validate() const {
  auto bad = [](const std::string& what) { return Status::invalid_argument("BERT config: " + what); };
  // A size in [lo, limit] (NOTE [BERT size limits]).
  auto size = [&](const char* key, std::int64_t v, std::int64_t lo, std::int64_t limit) -> Status {
    if (v < lo) return bad(std::string(key) + " must be >= " + std::to_string(lo) + ", got " + std::to_string(v));
    if (v > limit) {
      return bad(std::string(key) + " = " + std::to_string(v) + " is above the limit of " + with_commas(limit) +
                 " (allowed: " + std::to_string(lo) + " to " + std::to_string(limit) + ")");
    }
    return Status::ok();
  };
  SHARDLAB_RETURN_IF_ERROR(size("vocab_size", vocab_size, 1, kMaxBertVocabSize));
  SHARDLAB_RETURN_IF_ERROR(size("hidden_size", hidden_size, 1, kMaxBertHiddenSize));
  SHARDLAB_RETURN_IF_ERROR(size("num_hidden_layers", num_hidden_layers, 0, kMaxBertLayers));
  if (num_attention_heads < 1 || hidden_size % num_attention_heads != 0) {
    return bad("num_attention_heads (" + std::to_string(num_attention_heads) +
               ") must be >= 1 and divide hidden_size (" + std::to_string(hidden_size) + ")");
  }
  SHARDLAB_RETURN_IF_ERROR(size("intermediate_size", intermediate_size, 1, kMaxBertIntermediateSize));
  SHARDLAB_RETURN_IF_ERROR(size("max_position_embeddings", max_position_embeddings, 1, kMaxBertPositions));
  SHARDLAB_RETURN_IF_ERROR(size("type_vocab_size", type_vocab_size, 1, kMaxBertTypeVocabSize));
  if (!(layer_norm_eps > 0.0f) || !std::isfinite(layer_norm_eps))
    return bad("layer_norm_eps must be a positive number");
  if (!(hidden_dropout_prob >= 0.0f && hidden_dropout_prob < 1.0f)) return bad("hidden_dropout_prob must be in [0, 1)");
  if (!(attention_probs_dropout_prob >= 0.0f && attention_probs_dropout_prob < 1.0f)) {
    return bad("attention_probs_dropout_prob must be in [0, 1)");
  }
  SHARDLAB_RETURN_IF_ERROR(size("num_labels", num_labels, 1, kMaxBertLabels));
  if (pad_token_id < -1 || pad_token_id >= vocab_size) {
    return bad("pad_token_id " + std::to_string(pad_token_id) + " is outside the vocabulary [0, " +
               std::to_string(vocab_size) + ") and is not -1 (no padding row)");
  }
  if (!(initializer_range >= 0.0f) || !std::isfinite(initializer_range)) return bad("initializer_range must be >= 0");
  for (BertHead head : {BertHead::kSequenceClassification, BertHead::kMaskedLM, BertHead::kQuestionAnswering}) {
    SHARDLAB_ASSIGN_OR_RETURN(const std::int64_t n, bert_param_count(*this, head));
    if (n > kMaxBertParameters) {
      return bad("the model has " + with_commas(n) + " parameters with the " + std::string(bert_head_name(head)) +
                 " head, above the limit of " + with_commas(kMaxBertParameters) + " (16 GB in fp32); allowed: sizes " +
                 "whose parameters number at most " + with_commas(kMaxBertParameters));
    }
  }
  return Status::ok();
}

namespace {
struct Preset {
  const char* name;
  int layers;
  std::int64_t hidden;
  int heads;
  std::int64_t intermediate;
};
constexpr Preset kPresets[] = {{"bert-tiny", 2, 128, 2, 512},
                               {"bert-mini", 4, 256, 4, 1024},
                               {"bert-small", 4, 512, 8, 2048},
                               {"bert-base", 12, 768, 12, 3072},
                               {"bert-large", 24, 1024, 16, 4096}};
}  // namespace

std::vector<std::string> bert_preset_names() {
  std::vector<std::string> names;
  for (const auto& p : kPresets) names.emplace_back(p.name);
  return names;
}

Result<BertConfig> bert_preset(std::string_view name) {
  for (const auto& p : kPresets) {
    if (name != p.name) continue;
    BertConfig c;
    c.num_hidden_layers = p.layers;
    c.hidden_size = p.hidden;
    c.num_attention_heads = p.heads;
    c.intermediate_size = p.intermediate;
    return c;
  }
  std::string list;
  for (const auto& n : bert_preset_names()) list += (list.empty() ? "" : ", ") + n;
  return Status::invalid_argument("unknown BERT preset '" + std::string(name) + "'; allowed: " + list);
}

std::vector<ParamSpec> bert_param_specs(const BertConfig& c, BertHead head) {
  const std::int64_t H = c.hidden_size, I = c.intermediate_size;
  std::vector<ParamSpec> s;
  auto add = [&](std::string name, Shape shape, int layer, const char* cls) {
    s.push_back({std::move(name), std::move(shape), true, layer, cls});
  };
  add("bert.embeddings.word_embeddings.weight", {c.vocab_size, H}, 0, "BertEmbeddings");
  add("bert.embeddings.position_embeddings.weight", {c.max_position_embeddings, H}, 0, "BertEmbeddings");
  add("bert.embeddings.token_type_embeddings.weight", {c.type_vocab_size, H}, 0, "BertEmbeddings");
  add("bert.embeddings.LayerNorm.weight", {H}, 0, "BertEmbeddings");
  add("bert.embeddings.LayerNorm.bias", {H}, 0, "BertEmbeddings");
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "bert.encoder.layer." + std::to_string(l) + ".";
    const int layer = l + 1;
    for (const char* qkv : {"query", "key", "value"}) {
      add(p + "attention.self." + qkv + ".weight", {H, H}, layer, "BertLayer");
      add(p + "attention.self." + qkv + ".bias", {H}, layer, "BertLayer");
    }
    add(p + "attention.output.dense.weight", {H, H}, layer, "BertLayer");
    add(p + "attention.output.dense.bias", {H}, layer, "BertLayer");
    add(p + "attention.output.LayerNorm.weight", {H}, layer, "BertLayer");
    add(p + "attention.output.LayerNorm.bias", {H}, layer, "BertLayer");
    add(p + "intermediate.dense.weight", {I, H}, layer, "BertLayer");
    add(p + "intermediate.dense.bias", {I}, layer, "BertLayer");
    add(p + "output.dense.weight", {H, I}, layer, "BertLayer");
    add(p + "output.dense.bias", {H}, layer, "BertLayer");
    add(p + "output.LayerNorm.weight", {H}, layer, "BertLayer");
    add(p + "output.LayerNorm.bias", {H}, layer, "BertLayer");
  }
  const int hl = c.num_hidden_layers + 1;
  switch (head) {
    case BertHead::kSequenceClassification:
      add("bert.pooler.dense.weight", {H, H}, hl, "BertPooler");
      add("bert.pooler.dense.bias", {H}, hl, "BertPooler");
      add("classifier.weight", {c.num_labels, H}, hl, "Linear");
      add("classifier.bias", {c.num_labels}, hl, "Linear");
      break;
    case BertHead::kMaskedLM:
      add("cls.predictions.transform.dense.weight", {H, H}, hl, "BertOnlyMLMHead");
      add("cls.predictions.transform.dense.bias", {H}, hl, "BertOnlyMLMHead");
      add("cls.predictions.transform.LayerNorm.weight", {H}, hl, "BertOnlyMLMHead");
      add("cls.predictions.transform.LayerNorm.bias", {H}, hl, "BertOnlyMLMHead");
      add("cls.predictions.bias", {c.vocab_size}, hl, "BertOnlyMLMHead");
      break;
    case BertHead::kQuestionAnswering:
      add("qa_outputs.weight", {2, H}, hl, "Linear");
      add("qa_outputs.bias", {2}, hl, "Linear");
      break;
  }
  return s;
}

Bert::Bert(BertOptions options)
    : options_(std::move(options)), specs_(bert_param_specs(options_.config, options_.head)) {}

std::vector<double> Bert::loss_term_weights() const {
  if (options_.head == BertHead::kQuestionAnswering) return {0.5, 0.5};
  return {1.0};
}

Status Bert::validate_batch(const Batch& batch) const {
  const BertConfig& c = options_.config;
  auto bad = [](const std::string& m) { return Status::invalid_argument("BERT batch: " + m); };
  SHARDLAB_ASSIGN_OR_RETURN(Tensor ids, batch.get("input_ids"));
  if (ids.dtype() != DType::kI64 || ids.shape().size() != 2) {
    return bad("input_ids must be int64 [B, T], got " + std::string(dtype_name(ids.dtype())) + " " +
               shape_to_string(ids.shape()));
  }
  const std::int64_t B = ids.dim(0), T = ids.dim(1);
  if (B != batch.rows)
    return bad("input_ids has " + std::to_string(B) + " rows, the batch " + std::to_string(batch.rows));
  if (B < 1 || T < 1) return bad("input_ids " + shape_to_string(ids.shape()) + " is empty");
  if (T > c.max_position_embeddings) {
    return bad("sequence length T = " + std::to_string(T) +
               " exceeds max_position_embeddings = " + std::to_string(c.max_position_embeddings));
  }
  auto check_ids = [&](const char* name, std::int64_t limit) -> Status {
    SHARDLAB_ASSIGN_OR_RETURN(const std::vector<std::int64_t>* values, batch.ints(name));
    const std::int64_t* p = values->data();
    for (std::int64_t i = 0; i < static_cast<std::int64_t>(values->size()); ++i) {
      if (p[i] < 0 || p[i] >= limit) {
        return bad(std::string(name) + "[" + std::to_string(i / T) + ", " + std::to_string(i % T) +
                   "] = " + std::to_string(p[i]) + " is outside [0, " + std::to_string(limit) + ")");
      }
    }
    return Status::ok();
  };
  SHARDLAB_RETURN_IF_ERROR(check_ids("input_ids", c.vocab_size));
  SHARDLAB_ASSIGN_OR_RETURN(Tensor mask, batch.get("attention_mask"));
  if (mask.dtype() != DType::kF32 || mask.shape() != Shape{B, T}) {
    return bad("attention_mask must be fp32 [" + std::to_string(B) + ", " + std::to_string(T) + "], got " +
               std::string(dtype_name(mask.dtype())) + " " + shape_to_string(mask.shape()));
  }
  SHARDLAB_ASSIGN_OR_RETURN(Tensor types, batch.get("token_type_ids"));
  if (types.dtype() != DType::kI64 || types.shape() != Shape{B, T}) {
    return bad("token_type_ids must be int64 [" + std::to_string(B) + ", " + std::to_string(T) + "], got " +
               std::string(dtype_name(types.dtype())) + " " + shape_to_string(types.shape()));
  }
  SHARDLAB_RETURN_IF_ERROR(check_ids("token_type_ids", c.type_vocab_size));
  auto check_labels = [&](const char* name, const Shape& shape, std::int64_t lo, std::int64_t hi,
                          std::int64_t ignore) -> Status {
    SHARDLAB_ASSIGN_OR_RETURN(Tensor t, batch.get(name));
    if (t.dtype() != DType::kI64 || t.shape() != shape) {
      return bad(std::string(name) + " must be int64 " + shape_to_string(shape) + ", got " +
                 std::string(dtype_name(t.dtype())) + " " + shape_to_string(t.shape()));
    }
    SHARDLAB_ASSIGN_OR_RETURN(const std::vector<std::int64_t>* values, batch.ints(name));
    const std::int64_t* p = values->data();
    for (std::int64_t i = 0; i < static_cast<std::int64_t>(values->size()); ++i) {
      if (p[i] != ignore && (p[i] < lo || p[i] >= hi)) {
        return bad(std::string(name) + " element " + std::to_string(i) + " = " + std::to_string(p[i]) +
                   " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + ") and is not the ignore index " +
                   std::to_string(ignore));
      }
    }
    return Status::ok();
  };
  switch (options_.head) {
    case BertHead::kSequenceClassification: return check_labels("labels", {B}, 0, c.num_labels, -100);
    case BertHead::kMaskedLM: return check_labels("labels", {B, T}, 0, c.vocab_size, -100);
    case BertHead::kQuestionAnswering:
      // Hugging Face clamps positions to [0, T] and ignores T; negative ones clamp to 0.
      SHARDLAB_RETURN_IF_ERROR(check_labels("start_positions", {B}, std::numeric_limits<std::int64_t>::min(),
                                            std::numeric_limits<std::int64_t>::max(), 0));
      return check_labels("end_positions", {B}, std::numeric_limits<std::int64_t>::min(),
                          std::numeric_limits<std::int64_t>::max(), 0);
  }
  return Status::ok();
}

Result<std::vector<std::int64_t>> Bert::count_targets(const Batch& batch) const {
  SHARDLAB_RETURN_IF_ERROR(validate_batch(batch));
  SHARDLAB_ASSIGN_OR_RETURN(Tensor ids, batch.get("input_ids"));
  const std::int64_t T = ids.dim(1);
  auto count = [](const std::vector<std::int64_t>* values, auto valid) {
    std::int64_t n = 0;
    for (const std::int64_t v : *values) n += valid(v) ? 1 : 0;
    return n;
  };
  switch (options_.head) {
    case BertHead::kSequenceClassification:
    case BertHead::kMaskedLM: {
      SHARDLAB_ASSIGN_OR_RETURN(const std::vector<std::int64_t>* labels, batch.ints("labels"));
      return std::vector<std::int64_t>{count(labels, [](std::int64_t v) { return v != -100; })};
    }
    case BertHead::kQuestionAnswering: {
      SHARDLAB_ASSIGN_OR_RETURN(const std::vector<std::int64_t>* s, batch.ints("start_positions"));
      SHARDLAB_ASSIGN_OR_RETURN(const std::vector<std::int64_t>* e, batch.ints("end_positions"));
      auto valid = [T](std::int64_t v) { return std::clamp<std::int64_t>(v, 0, T) != T; };
      return std::vector<std::int64_t>{count(s, valid), count(e, valid)};
    }
  }
  return Status::internal("unreachable");
}

}  // namespace shardlab::runtime::model
