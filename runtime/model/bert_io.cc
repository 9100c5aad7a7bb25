#include "runtime/model/bert_io.h"

#include <algorithm>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>

#include "runtime/io/safetensors.h"

namespace shardlab::runtime::model {

namespace {

using nlohmann::json;

Status bad(const std::string& path, const std::string& what) { return Status::invalid_argument(path + ": " + what); }

// `"big" (a string)`, `-5 (a negative integer)`, … — what a config key was found to hold.
std::string describe_json(const json& v) {
  std::string text = v.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return text + " (a boolean)";
    case json::value_t::string: return text + " (a string)";
    case json::value_t::array: return text + " (an array)";
    case json::value_t::object: return text + " (an object)";
    case json::value_t::number_integer:
      return text + (v.get<std::int64_t>() < 0 ? " (a negative integer)" : " (an integer)");
    case json::value_t::number_unsigned: return text + " (an integer)";
    case json::value_t::number_float: return text + " (a number)";
    default: return text;
  }
}

// The message of a nlohmann exception without its "[json.exception…] parse error at line
// L, column C: " prefix (we print our own position).
std::string json_reason(const std::string& what) {
  std::string s = what;
  const auto column = s.find("column ");
  if (column != std::string::npos) {
    const auto colon = s.find(": ", column);
    if (colon != std::string::npos) return s.substr(colon + 2);
  }
  const auto bracket = s.find("] ");
  return bracket == std::string::npos ? s : s.substr(bracket + 2);
}

// 1-based line and column of the byte nlohmann reports (1-based position of the last
// byte read, which is one past the end for "unexpected end of input").
std::pair<std::size_t, std::size_t> line_col(const std::string& text, std::size_t byte) {
  const std::size_t index = std::min(byte == 0 ? 0 : byte - 1, text.size());
  std::size_t line = 1, line_start = 0;
  for (std::size_t i = 0; i < index; ++i) {
    if (text[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  return {line, index - line_start + 1};
}

// Reads the integer `key` into [lo, hi]; an absent key keeps `out`. Accepts integral
// floats (768.0), as Python's json module would hand them to transformers unchanged.
Status read_int(const std::string& path, const json& j, const char* key, std::int64_t lo, std::int64_t hi,
                std::int64_t& out) {
  const auto it = j.find(key);
  if (it == j.end()) return Status::ok();
  const json& v = *it;
  auto fail = [&](const std::string& why) {
    return bad(path, "config key '" + std::string(key) + "' is " + describe_json(v) + why +
                         "; allowed: an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  };
  if (v.is_number_unsigned()) {
    const std::uint64_t u = v.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(hi)) return fail(", out of range");
    if (static_cast<std::int64_t>(u) < lo) return fail(", out of range");
    out = static_cast<std::int64_t>(u);
    return Status::ok();
  }
  if (v.is_number_integer()) {
    const std::int64_t i = v.get<std::int64_t>();
    if (i < lo || i > hi) return fail(", out of range");
    out = i;
    return Status::ok();
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!std::isfinite(d) || d != std::floor(d)) return fail(", not an integer");
    // 2^63 is the first double above INT64_MAX; compare in double before converting.
    if (d < static_cast<double>(lo) || d >= 9223372036854775808.0 || static_cast<std::int64_t>(d) > hi) {
      return fail(", out of range");
    }
    out = static_cast<std::int64_t>(d);
    return Status::ok();
  }
  return fail("");
}

Status read_int(const std::string& path, const json& j, const char* key, std::int64_t lo, int hi, int& out) {
  std::int64_t v = out;
  SHARDLAB_RETURN_IF_ERROR(read_int(path, j, key, lo, hi, v));
  out = static_cast<int>(v);
  return Status::ok();
}

// Reads the number `key` (finite, representable as fp32, satisfying `ok`) into `out`.
Status read_float(const std::string& path, const json& j, const char* key, const std::string& allowed,
                  const std::function<bool(double)>& ok, float& out) {
  const auto it = j.find(key);
  if (it == j.end()) return Status::ok();
  const json& v = *it;
  auto fail = [&](const std::string& why) {
    return bad(path, "config key '" + std::string(key) + "' is " + describe_json(v) + why + "; allowed: " + allowed);
  };
  if (!v.is_number()) return fail("");
  const double d = v.get<double>();
  if (!std::isfinite(d) || std::fabs(d) > FLT_MAX) return fail(", out of the fp32 range");
  if (!ok(d)) return fail(", out of range");
  out = static_cast<float>(d);
  return Status::ok();
}

Status read_string(const std::string& path, const json& j, const char* key, const std::string& allowed,
                   std::string& out, bool& present) {
  const auto it = j.find(key);
  present = it != j.end();
  if (!present) return Status::ok();
  if (!it->is_string()) {
    return bad(path, "config key '" + std::string(key) + "' is " + describe_json(*it) + "; allowed: " + allowed);
  }
  out = it->get<std::string>();
  return Status::ok();
}

constexpr BertHead kHeads[] = {BertHead::kSequenceClassification, BertHead::kMaskedLM, BertHead::kQuestionAnswering};

std::string architecture_list() {
  std::string s;
  for (BertHead h : kHeads) s += (s.empty() ? "" : ", ") + std::string(bert_architecture_name(h));
  return s;
}

std::string dtype_label(DType d) {
  switch (d) {
    case DType::kF32: return "F32";
    case DType::kBF16: return "BF16";
    case DType::kF16: return "F16";
    case DType::kI64: return "I64 (or I32)";
  }
  return "?";
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The names a parameter may have in a checkpoint, the canonical one first.
std::vector<std::string> checkpoint_names(const std::string& name) {
  std::vector<std::string> bases = {name};
  const std::string prefix = "bert.";
  if (name.rfind(prefix, 0) == 0) bases.push_back(name.substr(prefix.size()));  // BertModel checkpoints
  if (name == "cls.predictions.bias") bases.push_back("cls.predictions.decoder.bias");
  std::vector<std::string> out = bases;
  for (const auto& b : bases) {  // pre-2019 TensorFlow conversions
    if (ends_with(b, "LayerNorm.weight")) out.push_back(b.substr(0, b.size() - 6) + "gamma");
    if (ends_with(b, "LayerNorm.bias")) out.push_back(b.substr(0, b.size() - 4) + "beta");
  }
  return out;
}

// Checks that `t` is a host fp32 view of `spec`'s size.
Status check_param_view(const std::string& what, const ParamSpec& spec, const Tensor& t) {
  SHARDLAB_ASSIGN_OR_RETURN(const std::int64_t numel, checked_numel(spec.shape));
  if (!t.defined() || t.dtype() != DType::kF32 || t.numel() != numel || t.is_phantom()) {
    return Status::invalid_argument(what + ": the tensor for '" + spec.name + "' must be a host fp32 view of " +
                                    std::to_string(numel) + " elements " + shape_to_string(spec.shape) + ", got " +
                                    (t.defined() ? t.describe() : std::string("an undefined tensor")));
  }
  return Status::ok();
}

Status check_views(const std::string& what, const std::vector<ParamSpec>& specs, const std::vector<Tensor>& tensors) {
  if (specs.size() != tensors.size()) {
    return Status::invalid_argument(what + ": got " + std::to_string(tensors.size()) + " tensors for " +
                                    std::to_string(specs.size()) + " parameters");
  }
  for (std::size_t i = 0; i < specs.size(); ++i) SHARDLAB_RETURN_IF_ERROR(check_param_view(what, specs[i], tensors[i]));
  return Status::ok();
}

void to_f32(const io::StoredTensor& t, float* out) {
  const std::size_t n = t.data.size() / element_size(t.dtype);
  if (t.dtype == DType::kF32) {
    std::memcpy(out, t.data.data(), n * sizeof(float));
    return;
  }
  for (std::size_t i = 0; i < n; ++i) {
    std::uint16_t h;
    std::memcpy(&h, t.data.data() + 2 * i, 2);
    out[i] = t.dtype == DType::kBF16 ? bf16_to_float(h) : fp16_to_float(h);
  }
}

// ---- batches --------------------------------------------------------------------------

std::string shape_names(const Shape& shape) { return shape.size() == 1 ? "[B]" : "[B, T]"; }

// Checks a tensor's shape against `expected` ([B] or [B, T], taken from input_ids).
Status check_batch_shape(const std::string& path, const io::StoredTensor& t, const Shape& expected,
                         const std::string& why) {
  if (t.shape == expected) return Status::ok();
  std::string msg = "tensor '" + t.name + "' has shape " + shape_to_string(t.shape) + "; expected " +
                    shape_names(expected) + " = " + shape_to_string(expected);
  if (t.shape.size() != expected.size()) {
    msg += " (rank " + std::to_string(expected.size()) + ", got rank " + std::to_string(t.shape.size()) + ")";
  }
  return bad(path, msg + why);
}

// The values of an integer tensor (I64, or I32 widened by the reader).
Result<std::vector<std::int64_t>> int_values(const std::string& path, const io::StoredTensor& t) {
  if (t.dtype != DType::kI64) {
    return bad(
        path, "tensor '" + t.name + "' has dtype " + dtype_label(t.dtype) + "; expected an integer dtype (I64 or I32)");
  }
  std::vector<std::int64_t> v(t.data.size() / 8);
  std::memcpy(v.data(), t.data.data(), v.size() * 8);
  return v;
}

std::string position(std::size_t i, const Shape& shape) {
  if (shape.size() == 2 && shape[1] > 0) {
    const auto T = static_cast<std::size_t>(shape[1]);
    return "[" + std::to_string(i / T) + ", " + std::to_string(i % T) + "]";
  }
  return "[" + std::to_string(i) + "]";
}

std::string float_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

}  // namespace

Result<HfBertConfig> parse_bert_config(const std::string& path, const std::string& text, BertHead default_head) {
  json j;
  std::string last_key;
  try {
    json::parser_callback_t remember_key = [&last_key](int, json::parse_event_t event, json& parsed) {
      if (event == json::parse_event_t::key && parsed.is_string()) last_key = parsed.get<std::string>();
      return true;
    };
    j = json::parse(text, remember_key);
  } catch (const json::parse_error& e) {
    const auto [line, col] = line_col(text, e.byte);
    return bad(path + ":" + std::to_string(line) + ":" + std::to_string(col),
               "JSON syntax error: " + json_reason(e.what()));
  } catch (const json::exception& e) {  // e.g. a number beyond the double range (out_of_range.406)
    return bad(path, (last_key.empty() ? std::string() : "config key '" + last_key + "': ") + json_reason(e.what()) +
                         "; allowed: a finite number");
  }
  if (!j.is_object()) return bad(path, "a config.json must hold a JSON object, got " + describe_json(j));

  std::string model_type;
  bool present = false;
  SHARDLAB_RETURN_IF_ERROR(read_string(path, j, "model_type", "\"bert\"", model_type, present));
  if (present && model_type != "bert") {
    return bad(path, "config key 'model_type' is \"" + model_type + "\"; allowed: \"bert\"");
  }
  std::string position_type;
  SHARDLAB_RETURN_IF_ERROR(read_string(path, j, "position_embedding_type", "\"absolute\"", position_type, present));
  if (present && position_type != "absolute") {  // relative_key(_query) changes the attention function
    return bad(path, "config key 'position_embedding_type' is \"" + position_type +
                         "\"; allowed: \"absolute\" (relative position embeddings are not supported)");
  }

  HfBertConfig out;
  out.head = default_head;
  const auto arch = j.find("architectures");
  if (arch != j.end() && !arch->is_null()) {
    if (!arch->is_array() || std::any_of(arch->begin(), arch->end(), [](const json& a) { return !a.is_string(); })) {
      return bad(path, "config key 'architectures' is " + describe_json(*arch) +
                           "; allowed: a list of names, the first one of " + architecture_list());
    }
    if (!arch->empty()) {
      const std::string first = (*arch)[0].get<std::string>();
      const auto* h = std::find_if(std::begin(kHeads), std::end(kHeads),
                                   [&](BertHead head) { return bert_architecture_name(head) == first; });
      if (h == std::end(kHeads)) {
        return bad(path, "config key 'architectures'[0] is \"" + first +
                             "\", which is not supported; allowed: " + architecture_list());
      }
      SHARDLAB_ASSIGN_OR_RETURN(out.head, parse_bert_head(first));
    }
  }

  // transformers' BertConfig defaults (bert-base), not BertConfig's own small defaults.
  BertConfig& c = out.config;
  c.vocab_size = 30522;
  c.hidden_size = 768;
  c.num_hidden_layers = 12;
  c.num_attention_heads = 12;
  c.intermediate_size = 3072;
  c.hidden_act = device::Activation::kGelu;
  c.max_position_embeddings = 512;
  c.type_vocab_size = 2;
  c.layer_norm_eps = 1e-12f;
  c.hidden_dropout_prob = 0.1f;
  c.attention_probs_dropout_prob = 0.1f;
  c.initializer_range = 0.02f;
  c.num_labels = 2;

  // NOTE [BERT size limits] in bert.h: every size within its limit before anything uses it.
  SHARDLAB_RETURN_IF_ERROR(read_int(path, j, "vocab_size", 1, kMaxBertVocabSize, c.vocab_size));
  SHARDLAB_RETURN_IF_ERROR(read_int(path, j, "hidden_size", 1, kMaxBertHiddenSize, c.hidden_size));
  SHARDLAB_RETURN_IF_ERROR(read_int(path, j, "num_hidden_layers", 0, kMaxBertLayers, c.num_hidden_layers));
  SHARDLAB_RETURN_IF_ERROR(
      read_int(path, j, "num_attention_heads", 1, static_cast<int>(kMaxBertHiddenSize), c.num_attention_heads));
  SHARDLAB_RETURN_IF_ERROR(read_int(path, j, "intermediate_size", 1, kMaxBertIntermediateSize, c.intermediate_size));
  SHARDLAB_RETURN_IF_ERROR(
      read_int(path, j, "max_position_embeddings", 1, kMaxBertPositions, c.max_position_embeddings));
  SHARDLAB_RETURN_IF_ERROR(read_int(path, j, "type_vocab_size", 1, kMaxBertTypeVocabSize, c.type_vocab_size));

  // nn.Embedding(padding_idx=config.pad_token_id): a word id inside the vocabulary, or
  // null (no padding row, -1 here). transformers' default is 0.
  c.pad_token_id = 0;
  const auto pad = j.find("pad_token_id");
  if (pad != j.end() && pad->is_null()) {
    c.pad_token_id = -1;
  } else {
    SHARDLAB_RETURN_IF_ERROR(read_int(path, j, "pad_token_id", 0, c.vocab_size - 1, c.pad_token_id));
  }

  const auto id2label = j.find("id2label");
  if (id2label != j.end() && !id2label->is_null()) {
    if (!id2label->is_object()) {
      return bad(path,
                 "config key 'id2label' is " + describe_json(*id2label) + "; allowed: an object {\"0\": name, ...}");
    }
    c.num_labels = static_cast<std::int64_t>(id2label->size());
  }
  const std::int64_t from_id2label = c.num_labels;
  SHARDLAB_RETURN_IF_ERROR(read_int(path, j, "num_labels", 1, kMaxBertLabels, c.num_labels));
  if (id2label != j.end() && !id2label->is_null() && c.num_labels != from_id2label) {
    return bad(path, "config key 'num_labels' is " + std::to_string(c.num_labels) + " but 'id2label' has " +
                         std::to_string(from_id2label) + " entries; they must agree");
  }

  std::string act;
  SHARDLAB_RETURN_IF_ERROR(
      read_string(path, j, "hidden_act", "\"gelu\", \"gelu_new\", \"gelu_pytorch_tanh\"", act, present));
  if (present) {
    if (act == "gelu")
      c.hidden_act = device::Activation::kGelu;
    else if (act == "gelu_new" || act == "gelu_pytorch_tanh")
      c.hidden_act = device::Activation::kGeluTanh;
    else
      return bad(path,
                 "config key 'hidden_act' is \"" + act + "\"; allowed: \"gelu\", \"gelu_new\", \"gelu_pytorch_tanh\"");
  }

  const auto positive = [](double d) { return d > 0.0; };
  const auto probability = [](double d) { return d >= 0.0 && d < 1.0; };
  const auto non_negative = [](double d) { return d >= 0.0; };
  SHARDLAB_RETURN_IF_ERROR(read_float(path, j, "layer_norm_eps", "a number > 0", positive, c.layer_norm_eps));
  SHARDLAB_RETURN_IF_ERROR(
      read_float(path, j, "hidden_dropout_prob", "a number in [0, 1)", probability, c.hidden_dropout_prob));
  SHARDLAB_RETURN_IF_ERROR(read_float(path, j, "attention_probs_dropout_prob", "a number in [0, 1)", probability,
                                      c.attention_probs_dropout_prob));
  SHARDLAB_RETURN_IF_ERROR(
      read_float(path, j, "initializer_range", "a number >= 0", non_negative, c.initializer_range));
  if (c.layer_norm_eps == 0.0f) {  // a positive double below fp32's smallest subnormal
    return bad(path, "config key 'layer_norm_eps' rounds to 0 in fp32; allowed: a number > 0");
  }
  const Status valid = c.validate();
  if (!valid.is_ok()) return valid.with_context(path);
  return out;
}

Result<HfBertConfig> read_bert_config(const std::string& path, BertHead default_head) {
  SHARDLAB_ASSIGN_OR_RETURN(const std::string text, io::read_file(path));
  return parse_bert_config(path, text, default_head);
}

Status load_bert_weights(const std::string& path, const std::vector<ParamSpec>& specs,
                         const std::vector<Tensor>& params) {
  SHARDLAB_RETURN_IF_ERROR(check_views("load_bert_weights(" + path + ")", specs, params));
  // Read tensor by tensor straight into the views: a model's weights need no second copy.
  SHARDLAB_ASSIGN_OR_RETURN(const io::SafetensorsReader file, io::SafetensorsReader::open(path));
  // Resolve and check every parameter before writing any, so a bad file changes nothing.
  std::vector<const io::TensorEntry*> found(specs.size(), nullptr);
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const ParamSpec& spec = specs[i];
    const std::vector<std::string> names = checkpoint_names(spec.name);
    for (const auto& n : names) {
      if ((found[i] = file.find(n)) != nullptr) break;
    }
    if (found[i] == nullptr) {
      std::string tried;
      for (const auto& n : names) tried += (tried.empty() ? "" : ", ") + n;
      return bad(path, "missing parameter '" + spec.name + "' " + shape_to_string(spec.shape) +
                           " (looked for: " + tried + ")");
    }
    const io::TensorEntry& t = *found[i];
    const std::string which = "tensor '" + t.name + "'" + (t.name == spec.name ? "" : " (for '" + spec.name + "')");
    if (!is_floating(t.dtype)) {
      return bad(path, which + " has dtype " + dtype_label(t.dtype) + "; expected a float dtype (F32, BF16 or F16)");
    }
    if (t.shape != spec.shape) {
      return bad(path, which + " has shape " + shape_to_string(t.shape) + "; expected " + shape_to_string(spec.shape));
    }
  }
  std::vector<std::uint16_t> halves;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const io::TensorEntry& t = *found[i];
    float* out = params[i].data<float>();
    const std::int64_t n = params[i].numel();
    if (t.dtype == DType::kF32) {
      SHARDLAB_RETURN_IF_ERROR(
          file.read(t, std::as_writable_bytes(std::span<float>(out, static_cast<std::size_t>(n)))));
      continue;
    }
    halves.resize(static_cast<std::size_t>(n));
    SHARDLAB_RETURN_IF_ERROR(file.read(t, std::as_writable_bytes(std::span<std::uint16_t>(halves))));
    for (std::int64_t k = 0; k < n; ++k) {
      const std::uint16_t h = halves[static_cast<std::size_t>(k)];
      out[k] = t.dtype == DType::kBF16 ? bf16_to_float(h) : fp16_to_float(h);
    }
  }
  return Status::ok();
}

Status save_bert_tensors(const std::string& path, const std::vector<ParamSpec>& specs,
                         const std::vector<Tensor>& tensors, const std::map<std::string, std::string>& metadata) {
  SHARDLAB_RETURN_IF_ERROR(check_views("save_bert_tensors(" + path + ")", specs, tensors));
  std::vector<io::TensorRef> refs;
  refs.reserve(specs.size());
  for (std::size_t i = 0; i < specs.size(); ++i) {
    refs.push_back({specs[i].name, DType::kF32, specs[i].shape,
                    std::span<const std::byte>(tensors[i].bytes(), static_cast<std::size_t>(tensors[i].nbytes()))});
  }
  return io::write_safetensors(path, refs, metadata);
}

Result<Batch> read_bert_batch(const std::string& path, const Bert& bert, device::Device& dev) {
  SHARDLAB_ASSIGN_OR_RETURN(const io::SafetensorsFile file, io::read_safetensors(path));
  const BertHead head = bert.options().head;
  const std::string head_text = " for the " + std::string(bert_head_name(head)) + " head";

  const io::StoredTensor* ids_t = file.find("input_ids");
  if (ids_t == nullptr) {
    std::string have;
    for (const auto& t : file.tensors) have += (have.empty() ? "" : ", ") + t.name;
    return bad(path, "missing tensor 'input_ids' [B, T] (the file has: " + (have.empty() ? "none" : have) + ")");
  }
  if (ids_t->shape.size() != 2) {
    return bad(path, "tensor 'input_ids' has shape " + shape_to_string(ids_t->shape) + " (rank " +
                         std::to_string(ids_t->shape.size()) + "); expected rank 2 [B, T]");
  }
  SHARDLAB_ASSIGN_OR_RETURN(const std::vector<std::int64_t> ids, int_values(path, *ids_t));
  const std::int64_t B = ids_t->shape[0], T = ids_t->shape[1];
  const Shape bt{B, T}, b{B};
  const std::string from_ids = " (B = " + std::to_string(B) + ", T = " + std::to_string(T) + " from input_ids)";

  // attention_mask: required (a missing mask is not silently all ones); any numeric dtype, 0/1.
  const io::StoredTensor* mask_t = file.find("attention_mask");
  if (mask_t == nullptr) return bad(path, "missing tensor 'attention_mask' [B, T] = " + shape_to_string(bt));
  SHARDLAB_RETURN_IF_ERROR(check_batch_shape(path, *mask_t, bt, from_ids));
  std::vector<float> mask(static_cast<std::size_t>(B * T));
  if (mask_t->dtype == DType::kI64) {
    SHARDLAB_ASSIGN_OR_RETURN(const std::vector<std::int64_t> m, int_values(path, *mask_t));
    for (std::size_t i = 0; i < m.size(); ++i) {
      if (m[i] != 0 && m[i] != 1) {
        return bad(path, "attention_mask" + position(i, bt) + " = " + std::to_string(m[i]) + "; allowed: 0 or 1");
      }
      mask[i] = static_cast<float>(m[i]);
    }
  } else {
    to_f32(*mask_t, mask.data());
    for (std::size_t i = 0; i < mask.size(); ++i) {
      if (mask[i] != 0.0f && mask[i] != 1.0f) {
        return bad(path, "attention_mask" + position(i, bt) + " = " + float_text(mask[i]) + "; allowed: 0 or 1");
      }
      mask[i] += 0.0f;  // -0 → +0
    }
  }

  std::vector<std::int64_t> types(static_cast<std::size_t>(B * T), 0);
  if (const io::StoredTensor* t = file.find("token_type_ids")) {
    SHARDLAB_RETURN_IF_ERROR(check_batch_shape(path, *t, bt, from_ids));
    SHARDLAB_ASSIGN_OR_RETURN(types, int_values(path, *t));
  }

  struct Labels {
    const char* name;
    Shape shape;
    std::vector<std::int64_t> values;
  };
  std::vector<Labels> labels;
  switch (head) {
    case BertHead::kSequenceClassification: labels.push_back({"labels", b, {}}); break;
    case BertHead::kMaskedLM: labels.push_back({"labels", bt, {}}); break;
    case BertHead::kQuestionAnswering:
      labels.push_back({"start_positions", b, {}});
      labels.push_back({"end_positions", b, {}});
      break;
  }
  for (Labels& l : labels) {
    const io::StoredTensor* t = file.find(l.name);
    if (t == nullptr) {
      return bad(path, "missing tensor '" + std::string(l.name) + "' " + shape_names(l.shape) + " = " +
                           shape_to_string(l.shape) + head_text);
    }
    SHARDLAB_RETURN_IF_ERROR(check_batch_shape(path, *t, l.shape, head_text + from_ids));
    SHARDLAB_ASSIGN_OR_RETURN(l.values, int_values(path, *t));
  }

  Batch batch;
  batch.rows = B;
  SHARDLAB_RETURN_IF_ERROR(batch.put(dev, "input_ids", bt, std::move(ids)));
  SHARDLAB_RETURN_IF_ERROR(batch.put(dev, "token_type_ids", bt, std::move(types)));
  for (Labels& l : labels) SHARDLAB_RETURN_IF_ERROR(batch.put(dev, l.name, l.shape, std::move(l.values)));
  SHARDLAB_RETURN_IF_ERROR(batch.put(dev, "attention_mask", bt, mask));

  const Status valid = bert.validate_batch(batch);
  if (!valid.is_ok()) return valid.with_context(path);
  return batch;
}

}  // namespace shardlab::runtime::model
