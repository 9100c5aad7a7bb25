#include "runtime/device/device.h"

#include <charconv>
#include <cmath>

namespace shardlab::runtime::device {

std::string DeviceId::to_string() const { return has_index() ? type + ":" + std::to_string(index) : type; }

Result<DeviceId> DeviceId::parse(std::string_view text) {
  const auto bad = [&](const std::string& why) {
    return Status::invalid_argument("device '" + std::string(text) + "': " + why +
                                    "; expected TYPE or TYPE:INDEX, e.g. 'hpu', 'hpu:0', 'cpu', 'sim:3'");
  };
  const auto colon = text.find(':');
  DeviceId id;
  id.type = std::string(text.substr(0, colon));
  if (id.type.empty()) return bad("the type is empty");
  for (char ch : id.type) {
    if (!(ch >= 'a' && ch <= 'z')) return bad("the type must be lower-case letters");
  }
  if (colon == std::string_view::npos) return id;
  const std::string_view idx = text.substr(colon + 1);
  int value = 0;
  const auto [ptr, ec] = std::from_chars(idx.data(), idx.data() + idx.size(), value);
  if (idx.empty() || ec != std::errc() || ptr != idx.data() + idx.size() || value < 0) {
    return bad("the index '" + std::string(idx) + "' is not a non-negative integer");
  }
  id.index = value;
  return id;
}

Status check_launch_extent(std::string_view where, const std::string& tensor, const std::string& storage_label,
                           std::int64_t byte_offset, std::int64_t nbytes, std::int64_t storage_bytes) {
  std::int64_t end = 0;
  const bool wrapped = byte_offset < 0 || nbytes < 0 || __builtin_add_overflow(byte_offset, nbytes, &end);
  if (!wrapped && end <= storage_bytes) return Status::ok();
  const std::string what =
      "launch of " + std::string(where) + ": tensor '" + tensor + "' at byte offset " + std::to_string(byte_offset) +
      " (unsigned " + std::to_string(static_cast<std::uint64_t>(byte_offset)) + "), extent " + std::to_string(nbytes) +
      " bytes, in storage '" + storage_label + "' of " + std::to_string(storage_bytes) + " bytes";
  if (wrapped) {
    return Status::data_loss(what +
                             ": the offset or extent is negative or overflows (a wrapped offset?); "
                             "nothing was launched");
  }
  return Status::data_loss(what + ": the view ends at byte " + std::to_string(end) +
                           ", past the end of its storage; nothing was launched");
}

Status check_launch_view(std::string_view where, const Tensor& t) {
  if (!t.defined()) return Status::ok();
  // The common case without building a message: in bounds.
  if (view_in_bounds(t.offset(), t.numel(), element_size(t.dtype()), t.storage()->nbytes())) return Status::ok();
  return check_launch_extent(where, t.name(), t.storage()->label(), t.byte_offset(), t.nbytes(), t.storage()->nbytes());
}

Status check_host_type(std::string_view what, const Tensor& t, DType want, std::size_t element_bytes) {
  if (!t.defined()) return Status::invalid_argument(std::string(what) + ": the tensor is undefined");
  const bool half = element_bytes == 2 && (t.dtype() == DType::kBF16 || t.dtype() == DType::kF16);
  if (t.dtype() != want && !half) {
    return Status::invalid_argument(std::string(what) + ": " + t.describe() + " is " +
                                    std::string(dtype_name(t.dtype())) + ", not the " + std::string(dtype_name(want)) +
                                    " values asked for");
  }
  return Status::ok();
}

Status check_host_copy(std::string_view op, const Tensor& t, std::size_t host_bytes) {
  if (!t.defined()) return Status::invalid_argument(std::string(op) + ": the tensor is undefined");
  SHARDLAB_RETURN_IF_ERROR(check_launch_view(op, t));  // NOTE [Launch check]
  if (static_cast<std::uint64_t>(t.nbytes()) != host_bytes) {
    return Status::invalid_argument(std::string(op) + ": " + t.describe() + " holds " + std::to_string(t.nbytes()) +
                                    " bytes; the host buffer holds " + std::to_string(host_bytes));
  }
  return Status::ok();
}

Status Device::copy_many(std::span<const CopyPair> pairs, StreamId stream) {
  for (const CopyPair& p : pairs) {
    SHARDLAB_RETURN_IF_ERROR(p.src.dtype() == p.dst.dtype() ? copy(p.src, p.dst, stream) : cast(p.src, p.dst, stream));
  }
  return Status::ok();
}

Status check_dropout_args(std::string_view op, const Tensor& mask, float p, std::int64_t first_row) {
  if (!(p >= 0.0f && p < 1.0f)) {
    return Status::invalid_argument(std::string(op) + ": p = " + std::to_string(p) + " is outside [0, 1)");
  }
  if (first_row < 0)
    return Status::invalid_argument(std::string(op) + ": negative first row " + std::to_string(first_row));
  if (mask.numel() > 0 && (mask.ndim() < 1 || mask.dim(0) <= 0)) {
    return Status::invalid_argument(std::string(op) + ": " + mask.describe() + " needs a leading row dim");
  }
  return Status::ok();
}

void draw_dropout_mask(float* out, std::int64_t rows, std::int64_t per_row, float p, const Rng& base,
                       std::int64_t first_row, std::uint64_t site) {
  const auto threshold = static_cast<std::uint32_t>(std::lround(static_cast<double>(p) * 65536.0));
  const float keep = 1.0f / (1.0f - p);
  // Two 16-bit draws per 32-bit value of the row's stream, low half first.
  std::vector<std::uint32_t> words(static_cast<std::size_t>((per_row + 1) / 2));
  for (std::int64_t b = 0; b < rows; ++b) {
    Rng rng = base.split(static_cast<std::uint64_t>(first_row + b)).split(site);
    rng.fill_u32(words.data(), static_cast<std::int64_t>(words.size()));
    float* row = out + b * per_row;
    const std::int64_t pairs = per_row / 2;
    for (std::int64_t w = 0; w < pairs; ++w) {
      const std::uint32_t r = words[static_cast<std::size_t>(w)];
      row[2 * w] = (r & 0xffffu) >= threshold ? keep : 0.0f;
      row[2 * w + 1] = (r >> 16) >= threshold ? keep : 0.0f;
    }
    if (per_row % 2 != 0)
      row[per_row - 1] = (words[static_cast<std::size_t>(pairs)] & 0xffffu) >= threshold ? keep : 0.0f;
  }
}

Status check_optimizer_step(std::string_view op, const OptimizerUpdate& u, const Tensor& param, const Tensor& grad,
                            const Tensor& state0, const Tensor& state1) {
  const std::string kOp(op);
  const bool adamw = u.kind == OptimizerKind::kAdamW;
  const int n_state = adamw ? 2 : (u.momentum != 0.0f ? 1 : 0);
  if ((n_state >= 1) != state0.defined() || (n_state == 2) != state1.defined()) {
    return Status::invalid_argument(kOp + ": " + (adamw ? "AdamW" : "SGD") + " needs " + std::to_string(n_state) +
                                    " state tensor(s)");
  }
  if (u.step < 1) return Status::invalid_argument(kOp + ": step must be >= 1, got " + std::to_string(u.step));
  std::vector<const Tensor*> all{&param, &grad};
  if (n_state >= 1) all.push_back(&state0);
  if (n_state == 2) all.push_back(&state1);
  for (const Tensor* t : all) {
    if (!t->defined()) return Status::invalid_argument(kOp + ": an operand is undefined");
    if (t->dtype() != DType::kF32) return Status::invalid_argument(kOp + ": " + t->describe() + " must be fp32");
    if (t->numel() != param.numel()) {
      return Status::invalid_argument(kOp + ": " + t->describe() + " has " + std::to_string(t->numel()) +
                                      " elements; expected " + std::to_string(param.numel()) +
                                      " (param's element count)");
    }
  }
  for (std::size_t i = 0; i < all.size(); ++i) {
    for (std::size_t j = i + 1; j < all.size(); ++j) {
      if (all[i]->overlaps(*all[j])) {
        return Status::invalid_argument(kOp + ": " + all[i]->describe() + " overlaps " + all[j]->describe());
      }
    }
  }
  return Status::ok();
}

namespace {

Status want(std::string_view op, const Tensor& t, DType dtype) {
  if (!t.defined()) return Status::invalid_argument(std::string(op) + ": an operand is undefined");
  if (t.dtype() != dtype) {
    return Status::invalid_argument(std::string(op) + ": " + t.describe() + " must be " +
                                    std::string(dtype_name(dtype)));
  }
  return Status::ok();
}

}  // namespace

Status expect_shape(std::string_view op, const Tensor& t, const Shape& shape, const char* what) {
  if (t.shape() != shape) {
    return Status::invalid_argument(std::string(op) + ": " + t.describe() + " must be " + shape_to_string(shape) +
                                    " (" + what + ")");
  }
  return Status::ok();
}

Status expect_numel(std::string_view op, const Tensor& t, std::int64_t numel, const char* what) {
  if (t.numel() != numel) {
    return Status::invalid_argument(std::string(op) + ": " + t.describe() + " has " + std::to_string(t.numel()) +
                                    " elements; expected " + std::to_string(numel) + " (" + what + ")");
  }
  return Status::ok();
}

// An output must not overlap `input`, except as the very same view when may_alias (in place).
Status expect_no_overlap(std::string_view op, const Tensor& out, const Tensor& input, bool may_alias) {
  if (out.overlaps(input) && !(may_alias && out.same_view(input))) {
    return Status::invalid_argument(std::string(op) + ": " + out.describe() + " overlaps " + input.describe() +
                                    (may_alias ? " (only the same view is allowed)" : ""));
  }
  return Status::ok();
}

Status check_bias_grad(std::string_view op, const Tensor& dy, const Tensor& dbias) {
  SHARDLAB_RETURN_IF_ERROR(want(op, dy, DType::kF32));
  SHARDLAB_RETURN_IF_ERROR(want(op, dbias, DType::kF32));
  if (dy.ndim() < 1 || dy.dim(-1) != dbias.numel()) {
    return Status::invalid_argument(std::string(op) + ": last dim of " + dy.describe() + " must equal the bias size " +
                                    std::to_string(dbias.numel()));
  }
  return expect_no_overlap(op, dbias, dy, false);
}

Status check_attention_softmax(std::string_view op, const Tensor& scores, const Tensor& attention_mask,
                               const Tensor& probs) {
  SHARDLAB_RETURN_IF_ERROR(want(op, scores, DType::kF32));
  SHARDLAB_RETURN_IF_ERROR(want(op, attention_mask, DType::kF32));
  SHARDLAB_RETURN_IF_ERROR(want(op, probs, DType::kF32));
  if (scores.ndim() != 4) {
    return Status::invalid_argument(std::string(op) + ": " + scores.describe() + " must be 4-D [B, A, Tq, Tk]");
  }
  SHARDLAB_RETURN_IF_ERROR(
      expect_shape(op, attention_mask, {scores.dim(0), scores.dim(3)}, "the mask is [B, Tk] of scores [B, A, Tq, Tk]"));
  SHARDLAB_RETURN_IF_ERROR(expect_shape(op, probs, scores.shape(), "probs has scores' shape"));
  SHARDLAB_RETURN_IF_ERROR(expect_no_overlap(op, probs, scores, true));
  return expect_no_overlap(op, probs, attention_mask, false);
}

Status check_attention_softmax_backward(std::string_view op, const Tensor& probs, const Tensor& dprobs,
                                        const Tensor& dscores, std::int64_t* rows, std::int64_t* cols) {
  SHARDLAB_RETURN_IF_ERROR(want(op, probs, DType::kF32));
  if (probs.ndim() < 1) {
    return Status::invalid_argument(std::string(op) + ": " + probs.describe() + " must have a last dim");
  }
  *cols = probs.dim(-1);
  *rows = *cols == 0 ? 0 : probs.numel() / *cols;
  SHARDLAB_RETURN_IF_ERROR(want(op, dprobs, DType::kF32));
  SHARDLAB_RETURN_IF_ERROR(want(op, dscores, DType::kF32));
  SHARDLAB_RETURN_IF_ERROR(expect_shape(op, dprobs, probs.shape(), "dprobs has probs' shape"));
  SHARDLAB_RETURN_IF_ERROR(expect_shape(op, dscores, probs.shape(), "dscores has probs' shape"));
  SHARDLAB_RETURN_IF_ERROR(expect_no_overlap(op, dscores, dprobs, true));
  return expect_no_overlap(op, dscores, probs, false);
}

Status check_cross_entropy(std::string_view op, const Tensor& logits, const Tensor& labels, const Tensor& loss_sum,
                           const Tensor& dlogits, std::int64_t* rows, std::int64_t* cols) {
  SHARDLAB_RETURN_IF_ERROR(want(op, logits, DType::kF32));
  if (logits.ndim() != 2) return Status::invalid_argument(std::string(op) + ": " + logits.describe() + " must be 2-D");
  *rows = logits.dim(0);
  *cols = logits.dim(1);
  SHARDLAB_RETURN_IF_ERROR(want(op, labels, DType::kI64));
  SHARDLAB_RETURN_IF_ERROR(want(op, loss_sum, DType::kF32));
  SHARDLAB_RETURN_IF_ERROR(want(op, dlogits, DType::kF32));
  SHARDLAB_RETURN_IF_ERROR(expect_numel(op, labels, *rows, "one label per row of logits"));
  SHARDLAB_RETURN_IF_ERROR(expect_numel(op, loss_sum, 1, "a scalar"));
  SHARDLAB_RETURN_IF_ERROR(expect_numel(op, dlogits, *rows * *cols, "the shape of logits"));
  if (dlogits.overlaps(logits) || loss_sum.overlaps(logits) || loss_sum.overlaps(dlogits) || dlogits.overlaps(labels) ||
      loss_sum.overlaps(labels)) {
    return Status::invalid_argument(std::string(op) + ": logits, labels, loss_sum and dlogits must not overlap");
  }
  return Status::ok();
}

Status check_labels(std::string_view op, std::span<const std::int64_t> labels, std::int64_t classes,
                    std::int64_t ignore_index) {
  for (std::size_t r = 0; r < labels.size(); ++r) {
    const std::int64_t l = labels[r];
    if (l != ignore_index && (l < 0 || l >= classes)) {
      return Status::invalid_argument(std::string(op) + ": label " + std::to_string(l) + " at row " +
                                      std::to_string(r) + " is outside [0, " + std::to_string(classes) +
                                      ") and is not the ignore index " + std::to_string(ignore_index));
    }
  }
  return Status::ok();
}

Result<Tensor> Device::empty(const Shape& shape, DType dtype, MemoryCategory category, const std::string& name) {
  SHARDLAB_ASSIGN_OR_RETURN(std::int64_t numel, checked_numel(shape));
  std::int64_t nbytes;
  if (__builtin_mul_overflow(numel, static_cast<std::int64_t>(element_size(dtype)), &nbytes)) {
    return Status::invalid_argument("tensor '" + name + "' " + shape_to_string(shape) + " is larger than 2^63 bytes");
  }
  SHARDLAB_ASSIGN_OR_RETURN(std::shared_ptr<Storage> storage, allocate(nbytes, category, name));
  return Tensor::view_of(std::move(storage), dtype, shape, 0, name);
}

Result<Tensor> Device::zeros(const Shape& shape, DType dtype, MemoryCategory category, const std::string& name) {
  SHARDLAB_ASSIGN_OR_RETURN(Tensor t, empty(shape, dtype, category, name));
  SHARDLAB_RETURN_IF_ERROR(fill(t, 0.0f));
  return t;
}

}  // namespace shardlab::runtime::device
