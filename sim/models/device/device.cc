#include "sim/models/device/device.h"

#include <algorithm>
#include <cstdio>

namespace shardlab::sim {

using runtime::device::Activation;
using runtime::device::EventId;
using runtime::device::StreamId;

SimDevice::SimDevice(int rank, DeviceProfile profile, VirtualClock* clock)
    : SimDevice(runtime::device::DeviceId{"sim", rank}, std::move(profile), clock) {}

SimDevice::SimDevice(runtime::device::DeviceId id, DeviceProfile profile, VirtualClock* clock)
    : profile_(std::move(profile)),
      clock_(clock),
      inner_(std::move(id), profile_.capacity_bytes),
      id_name_(inner_.id().to_string()) {}

namespace {
// Compute-factor keys of the activation ops, by kind (compute_factor_keys()).
const char* activation_key(Activation act, bool backward) {
  switch (act) {
    case Activation::kRelu: return backward ? "activation_backward_relu" : "activation_relu";
    case Activation::kGelu: return backward ? "activation_backward_gelu" : "activation_gelu";
    case Activation::kGeluTanh: return backward ? "activation_backward_gelu_tanh" : "activation_gelu_tanh";
    case Activation::kTanh: return backward ? "activation_backward_tanh" : "activation_tanh";
  }
  return backward ? "activation_backward" : "activation";
}
}  // namespace

// DeviceProfile::matrix_bytes of the operands; with one pass the plain a + b + 2c.
double SimDevice::matrix_bytes(const Tensor& a, const Tensor& b, const Tensor& c) const {
  return profile_.matrix_bytes(static_cast<double>(a.nbytes()), static_cast<double>(b.nbytes()),
                               static_cast<double>(c.nbytes()));
}

void SimDevice::set_graph_compiler(const SoftwareStack& stack) {
  graph_ = stack.graphs();
  fold_transposes_ = graph_ && stack.fold_transposes;
  fuse_elementwise_ = graph_ && stack.fuse_elementwise;
  graph_node_ns_ = stack.graph_node_ns;
}

void SimDevice::note_io(std::initializer_list<const Tensor*> inputs, const Tensor& output) {
  if (!fuse_elementwise_) return;
  const auto place = [](const Tensor& t) { return Place{t.storage().get(), t.byte_offset(), t.nbytes()}; };
  pending_in_.clear();
  for (const Tensor* t : inputs) {
    if (t->defined()) pending_in_.push_back(place(*t));
  }
  pending_out_ = output.defined() ? place(output) : Place{};
}

Status SimDevice::charge(const char* op, Status s, double flops, double bytes, bool matrix, const Tensor& lead,
                         const char* factor_key, std::int64_t min_dim) {
  if (fuse_elementwise_) {  // NOTE [Software stack]: the producer's output is still on chip
    if (!matrix && last_out_.storage != nullptr) {
      for (const Place& in : pending_in_) {
        if (in == last_out_) {
          bytes -= static_cast<double>(in.bytes);
          break;
        }
      }
    }
    last_out_ = pending_out_;
    pending_out_ = {};
    pending_in_.clear();
  }
  DType dtype = lead.dtype();
  // NOTE [Emulated low precision]: fp32 activations stand for bf16 ones; parameters,
  // gradients and optimizer state keep their dtype (an fp32 AdamW is fp32 on any device).
  if (emulated_ == DType::kBF16 && dtype == DType::kF32 && lead.storage() &&
      lead.storage()->category() == MemoryCategory::kActivations) {
    dtype = DType::kBF16;
    bytes *= 0.5;
  }
  if (!s.is_ok()) return s;
  const char* key = factor_key != nullptr ? factor_key : op;
  const ComputeUnit unit = matrix ? ComputeUnit::kMatrix : ComputeUnit::kVector;
  Nanos t = profile_.op_time(key, flops, bytes, unit, dtype, min_dim);
  if (graph_ && t < kTimeLimit) t = add_time(t - profile_.launch_ns, graph_node_ns_);  // a node of a graph
  return advance(op, t, t >= kTimeLimit || clock_->now() >= kTimeLimit - t ? profile_.keys_of(key, unit, dtype) : "");
}

void SimDevice::note_shapes(std::initializer_list<const Tensor*> tensors) {
  if (trace_ == nullptr) return;
  op_shapes_.clear();
  for (const Tensor* t : tensors) op_shapes_.push_back(t->defined() ? t->shape() : std::vector<std::int64_t>{});
}

Status SimDevice::advance(const char* op, Nanos t, const std::string& keys) {
  t = add_time(t, pending_alloc_ns_);
  pending_alloc_ns_ = 0;
  if (add_time(clock_->now(), t) >= kTimeLimit) {
    char when[64];
    std::snprintf(when, sizeof when, "%.4g s", static_cast<double>(t) / 1e9);
    return Status::invalid_argument(
        "device profile '" + profile_.name + "': " + op + " on " + id_name_ + " takes " +
        (t >= kTimeLimit ? std::string("past 2^62 ns") : std::string(when)) + " and would end past the simulator's " +
        "virtual time limit of 2^62 ns, about 146 years (NOTE [Virtual time limit] in sim/models/device/cost_model.h): "
        "the " +
        "profile's rates are too slow for this run (" + (keys.empty() ? "launch_ns, alloc_ns, op_host_ns" : keys) +
        "); allowed: rates that keep the run within the limit");
  }
  if (trace_ != nullptr) {
    TraceEvent e{op, kTraceCompute, clock_->now(), t};
    e.shapes = std::move(op_shapes_);
    op_shapes_.clear();
    trace_->add_compute(std::move(e));
  }
  clock_->advance_by(t);
  busy_ += t;
  ++ops_;
  return Status::ok();
}

bool SimDevice::crosses_host_link(const Tensor& a, const Tensor& b) const {
  if (!(profile_.host_link_bytes_per_s > 0)) return false;
  const auto elsewhere = [this](const Tensor& t) {
    return t.storage() != nullptr && t.storage()->device_name() != id_name_;
  };
  return elsewhere(a) || elsewhere(b);
}

Status SimDevice::charge_transfer(const char* op, Status s, double bytes) {
  if (!s.is_ok()) return s;
  last_out_ = {};
  host_bytes_ += static_cast<std::int64_t>(bytes);
  const Nanos t = profile_.host_transfer_time(bytes);
  return advance(op, t,
                 t >= kTimeLimit || clock_->now() >= kTimeLimit - t
                     ? profile_.keys_of("", ComputeUnit::kVector, DType::kF32, /*transfer=*/true)
                     : "");
}

Result<std::shared_ptr<Storage>> SimDevice::allocate(std::int64_t nbytes, MemoryCategory category,
                                                     std::string_view label) {
  // NOTE [Emulated low precision]: activations are charged at their bf16 size.
  const std::int64_t charged =
      emulated_ == DType::kBF16 && category == MemoryCategory::kActivations && nbytes > 0 ? (nbytes + 1) / 2 : nbytes;
  pending_alloc_ns_ += profile_.alloc_ns;  // NOTE [Host time per allocation]
  if (!inner_.skip) return inner_.allocate(nbytes, charged, category, label);
  // Timing mode: charged like any allocation, no bytes (NOTE [Phantom storage]).
  MemoryTracker* tracker = &inner_.memory();
  SHARDLAB_RETURN_IF_ERROR(tracker->reserve(charged, category, label));
  return Storage::make_deferred(nbytes, category, std::string(label), inner_.id().to_string(),
                                [tracker, charged](Storage& s) { tracker->release(charged, s.category()); });
}
Result<StreamId> SimDevice::create_stream(std::string_view name) { return inner_.create_stream(name); }
Result<EventId> SimDevice::record_event(StreamId stream) { return inner_.record_event(stream); }
Status SimDevice::wait_event(StreamId waiter, EventId event) { return inner_.wait_event(waiter, event); }
Status SimDevice::synchronize(StreamId stream) { return inner_.synchronize(stream); }

Status SimDevice::to_host(const Tensor& src, std::span<std::byte> dst, StreamId stream) {
  note_shapes({&src});
  const auto bytes = static_cast<double>(dst.size());
  if (profile_.host_link_bytes_per_s > 0 && inner_.id().type == "sim") {
    return charge_transfer("to_host", inner_.to_host(src, dst, stream), bytes);
  }
  return charge("to_host", inner_.to_host(src, dst, stream), 0, 2.0 * bytes, false, src);
}
Status SimDevice::from_host(std::span<const std::byte> src, const Tensor& dst, StreamId stream) {
  note_shapes({&dst});
  const auto bytes = static_cast<double>(src.size());
  if (profile_.host_link_bytes_per_s > 0 && inner_.id().type == "sim") {
    return charge_transfer("from_host", inner_.from_host(src, dst, stream), bytes);
  }
  return charge("from_host", inner_.from_host(src, dst, stream), 0, 2.0 * bytes, false, dst);
}

Status SimDevice::copy(const Tensor& src, const Tensor& dst, StreamId stream) {
  note_shapes({&src, &dst});
  if (crosses_host_link(src, dst)) {
    return charge_transfer("copy", inner_.copy(src, dst, stream), static_cast<double>(src.nbytes()));
  }
  return charge("copy", inner_.copy(src, dst, stream), 0, 2.0 * static_cast<double>(src.nbytes()), false, src);
}
Status SimDevice::fill(const Tensor& dst, float value, StreamId stream) {
  note_shapes({&dst});
  return charge("fill", inner_.fill(dst, value, stream), 0, static_cast<double>(dst.nbytes()), false, dst);
}
Status SimDevice::cast(const Tensor& src, const Tensor& dst, StreamId stream) {
  note_shapes({&src, &dst});
  // NOTE [Emulated low precision]: the bf16 storage round trip of an activation is free.
  const auto activation = [](const Tensor& t) {
    return t.storage() && t.storage()->category() == MemoryCategory::kActivations;
  };
  if (emulated_ == DType::kBF16 && activation(src) && activation(dst) &&
      ((src.dtype() == DType::kF32 && dst.dtype() == DType::kBF16) ||
       (src.dtype() == DType::kBF16 && dst.dtype() == DType::kF32))) {
    return inner_.cast(src, dst, stream);
  }
  // A cast to its own dtype converts nothing: the device copies (CpuDevice::cast calls copy),
  // and it is charged as the copy it is, not at the conversion's measured compute factor.
  if (src.dtype() == dst.dtype()) return copy(src, dst, stream);
  // Across the host link the narrower dtype crosses (the wider side converts).
  if (crosses_host_link(src, dst)) {
    return charge_transfer("cast", inner_.cast(src, dst, stream),
                           static_cast<double>(std::min(src.nbytes(), dst.nbytes())));
  }
  return charge("cast", inner_.cast(src, dst, stream), static_cast<double>(src.numel()),
                static_cast<double>(src.nbytes() + dst.nbytes()), false, src);
}
Status SimDevice::copy_many(std::span<const CopyPair> pairs, StreamId stream) {
  if (pairs.empty()) return Status::ok();
  const bool any_host =
      std::any_of(pairs.begin(), pairs.end(), [this](const CopyPair& p) { return crosses_host_link(p.src, p.dst); });
  const bool any_emulated = emulated_ == DType::kBF16 && std::any_of(pairs.begin(), pairs.end(), [](const CopyPair& p) {
                              return p.src.dtype() != p.dst.dtype() && p.src.storage() &&
                                     p.src.storage()->category() == MemoryCategory::kActivations;
                            });
  if (any_host || any_emulated) return Device::copy_many(pairs, stream);
  double bytes = 0, conversions = 0;
  bool casts = false;
  for (const CopyPair& p : pairs) {
    bytes += static_cast<double>(p.src.nbytes() + p.dst.nbytes());
    if (p.src.dtype() != p.dst.dtype()) {
      conversions += static_cast<double>(p.src.numel());
      casts = true;
    }
    SHARDLAB_RETURN_IF_ERROR(p.src.dtype() != p.dst.dtype() ? inner_.cast(p.src, p.dst, stream)
                                                            : inner_.copy(p.src, p.dst, stream));
  }
  note_shapes({&pairs.front().src, &pairs.back().dst});
  // Charged at copy's (or, with conversions, cast's) measured factor: the same memory traffic.
  return charge("copy_many", Status::ok(), conversions, bytes, false, pairs.front().src, casts ? "cast" : "copy");
}
Status SimDevice::axpy(float alpha, const Tensor& x, const Tensor& y, StreamId stream) {
  note_shapes({&x, &y});
  return charge("axpy", inner_.axpy(alpha, x, y, stream), 2.0 * static_cast<double>(x.numel()),
                static_cast<double>(x.nbytes() + 2 * y.nbytes()), false, x);
}
Status SimDevice::scale(const Tensor& x, float alpha, StreamId stream) {
  note_shapes({&x});
  return charge("scale", inner_.scale(x, alpha, stream), static_cast<double>(x.numel()),
                2.0 * static_cast<double>(x.nbytes()), false, x);
}
Status SimDevice::gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c, float alpha,
                       float beta, StreamId stream) {
  note_shapes({&a, &b, &c});
  const double k = static_cast<double>(trans_a ? a.dim(0) : (a.ndim() == 2 ? a.dim(1) : 0));
  const double flops = 2.0 * static_cast<double>(c.numel()) * k;
  const std::int64_t min_dim = c.ndim() == 2 ? std::min({c.dim(0), c.dim(1), static_cast<std::int64_t>(k)}) : 0;
  // NOTE [Matrix engine geometry]: the engine pays for whole tiles of C's rows × columns.
  const std::int64_t n = c.ndim() >= 1 ? c.dim(c.ndim() - 1) : 0;
  const double util = n > 0 ? profile_.matrix_utilization(1, c.numel() / n, n) : 1.0;
  note_io({}, c);
  return charge("gemm", inner_.gemm(a, trans_a, b, trans_b, c, alpha, beta, stream), flops / util,
                matrix_bytes(a, b, c), true, a, nullptr, min_dim);
}
Status SimDevice::batched_gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c,
                               float alpha, float beta, StreamId stream) {
  note_shapes({&a, &b, &c});
  const double k = a.ndim() == 3 ? static_cast<double>(trans_a ? a.dim(1) : a.dim(2)) : 0.0;
  const double flops = 2.0 * static_cast<double>(c.numel()) * k;
  const std::int64_t min_dim = c.ndim() == 3 ? std::min({c.dim(1), c.dim(2), static_cast<std::int64_t>(k)}) : 0;
  const double util = c.ndim() == 3 ? profile_.matrix_utilization(c.dim(0), c.dim(1), c.dim(2)) : 1.0;
  note_io({}, c);
  return charge("batched_gemm", inner_.batched_gemm(a, trans_a, b, trans_b, c, alpha, beta, stream), flops / util,
                matrix_bytes(a, b, c), true, a, nullptr, min_dim);
}
Status SimDevice::add_bias(const Tensor& x, const Tensor& bias, StreamId stream) {
  note_shapes({&x, &bias});
  note_io({&x}, x);
  return charge("add_bias", inner_.add_bias(x, bias, stream), static_cast<double>(x.numel()),
                2.0 * static_cast<double>(x.nbytes()), false, x);
}
Status SimDevice::bias_grad(const Tensor& dy, const Tensor& dbias, bool accumulate, StreamId stream) {
  note_shapes({&dy, &dbias});
  note_io({&dy}, Tensor{});
  return charge("bias_grad", inner_.bias_grad(dy, dbias, accumulate, stream), static_cast<double>(dy.numel()),
                static_cast<double>(dy.nbytes() + dbias.nbytes()), false, dy);
}
Status SimDevice::activation(Activation act, const Tensor& x, const Tensor& y, StreamId stream) {
  note_shapes({&x, &y});
  note_io({&x}, y);
  return charge("activation", inner_.activation(act, x, y, stream), 8.0 * static_cast<double>(x.numel()),
                static_cast<double>(x.nbytes() + y.nbytes()), false, x, activation_key(act, false));
}
Status SimDevice::activation_backward(Activation act, const Tensor& x, const Tensor& dy, const Tensor& dx,
                                      StreamId stream) {
  note_shapes({&x, &dy, &dx});
  note_io({&x, &dy}, dx);
  return charge("activation_backward", inner_.activation_backward(act, x, dy, dx, stream),
                12.0 * static_cast<double>(x.numel()), static_cast<double>(x.nbytes() + dy.nbytes() + dx.nbytes()),
                false, x, activation_key(act, true));
}
// Normalization, softmax and embedding ops are memory-bound: one read of each input and
// one write of each output (read-modify-write for accumulated gradients).
Status SimDevice::layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, const Tensor& y,
                             const Tensor& mean, const Tensor& rstd, StreamId stream) {
  note_shapes({&x, &gamma, &beta, &y, &mean, &rstd});
  note_io({&x}, y);
  return charge(
      "layer_norm", inner_.layer_norm(x, gamma, beta, eps, y, mean, rstd, stream), 8.0 * static_cast<double>(x.numel()),
      static_cast<double>(x.nbytes() + y.nbytes() + gamma.nbytes() + beta.nbytes() + mean.nbytes() + rstd.nbytes()),
      false, x);
}
Status SimDevice::layer_norm_backward(const Tensor& x, const Tensor& dy, const Tensor& mean, const Tensor& rstd,
                                      const Tensor& gamma, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,
                                      bool accumulate, StreamId stream) {
  note_shapes({&x, &dy, &mean, &rstd, &gamma, &dx, &dgamma, &dbeta});
  note_io({&x, &dy}, dx);
  return charge("layer_norm_backward",
                inner_.layer_norm_backward(x, dy, mean, rstd, gamma, dx, dgamma, dbeta, accumulate, stream),
                14.0 * static_cast<double>(x.numel()),
                static_cast<double>(x.nbytes() + dy.nbytes() + dx.nbytes() + mean.nbytes() + rstd.nbytes() +
                                    gamma.nbytes() + 2 * (dgamma.nbytes() + dbeta.nbytes())),
                false, x);
}
Status SimDevice::attention_softmax(const Tensor& scores, const Tensor& attention_mask, float scale,
                                    const Tensor& probs, StreamId stream) {
  note_shapes({&scores, &attention_mask, &probs});
  note_io({&scores}, probs);
  return charge("attention_softmax", inner_.attention_softmax(scores, attention_mask, scale, probs, stream),
                6.0 * static_cast<double>(scores.numel()),
                static_cast<double>(scores.nbytes() + attention_mask.nbytes() + probs.nbytes()), false, scores);
}
Status SimDevice::attention_softmax_backward(const Tensor& probs, const Tensor& dprobs, float scale,
                                             const Tensor& dscores, StreamId stream) {
  note_shapes({&probs, &dprobs, &dscores});
  note_io({&probs, &dprobs}, dscores);
  return charge("attention_softmax_backward", inner_.attention_softmax_backward(probs, dprobs, scale, dscores, stream),
                5.0 * static_cast<double>(probs.numel()),
                static_cast<double>(probs.nbytes() + dprobs.nbytes() + dscores.nbytes()), false, probs);
}
Status SimDevice::embedding(const Tensor& table, const Tensor& ids, const Tensor& out, StreamId stream) {
  note_shapes({&table, &ids, &out});
  // Only the gathered rows of the table are read.
  return charge("embedding", inner_.embedding(table, ids, out, stream), 0,
                static_cast<double>(ids.nbytes() + 2 * out.nbytes()), false, out);
}
Status SimDevice::embedding_backward(const Tensor& dout, const Tensor& ids, const Tensor& dtable, bool accumulate,
                                     StreamId stream) {
  note_shapes({&dout, &ids, &dtable});
  const double zeroing = accumulate ? 0.0 : static_cast<double>(dtable.nbytes());
  return charge("embedding_backward", inner_.embedding_backward(dout, ids, dtable, accumulate, stream),
                static_cast<double>(dout.numel()), static_cast<double>(ids.nbytes() + 3 * dout.nbytes()) + zeroing,
                false, dout);
}
Status SimDevice::softmax_cross_entropy(const Tensor& logits, const Tensor& labels, const Tensor& loss_sum,
                                        const Tensor& dlogits, float grad_scale, std::int64_t ignore_index,
                                        StreamId stream) {
  note_shapes({&logits, &labels, &loss_sum, &dlogits});
  return charge("softmax_cross_entropy",
                inner_.softmax_cross_entropy(logits, labels, loss_sum, dlogits, grad_scale, ignore_index, stream),
                6.0 * static_cast<double>(logits.numel()), static_cast<double>(logits.nbytes() + dlogits.nbytes()),
                false, logits);
}

Status SimDevice::transpose_1_2(const Tensor& x, const Tensor& y, StreamId stream) {
  note_shapes({&x, &y});
  if (fold_transposes_) {  // NOTE [Software stack]: folded into the GEMM that reads y
    op_shapes_.clear();
    last_out_ = {};
    return inner_.transpose_1_2(x, y, stream);
  }
  return charge("transpose_1_2", inner_.transpose_1_2(x, y, stream), 0, 2.0 * static_cast<double>(x.nbytes()), false,
                x);
}
Status SimDevice::multiply(const Tensor& a, const Tensor& b, const Tensor& c, StreamId stream) {
  note_shapes({&a, &b, &c});
  note_io({&a, &b}, c);
  return charge("multiply", inner_.multiply(a, b, c, stream), static_cast<double>(a.numel()),
                static_cast<double>(a.nbytes() + b.nbytes() + c.nbytes()), false, a);
}

// One draw and one store per value, like torch's fused dropout kernel.
Status SimDevice::dropout_mask(const Tensor& mask, float p, const Rng& base, std::int64_t first_row, std::uint64_t site,
                               StreamId stream) {
  note_shapes({&mask});
  return charge("dropout_mask", inner_.dropout_mask(mask, p, base, first_row, site, stream),
                static_cast<double>(mask.numel()), static_cast<double>(mask.nbytes()), false, mask);
}

// The fused optimizer update streams every operand once (read param, grad and state, write
// param and state; the mask byte when there is one), and counts its arithmetic per element:
// AdamW 14 (decay 1, exp_avg 3, exp_avg_sq 4, sqrt, bias-correction divide, + eps, divide,
// step-size multiply, subtract), SGD 2 plus 2 for weight decay and 2 for momentum. Masked
// elements are charged too: a device streams the whole slice.
Status SimDevice::optimizer_step(const runtime::device::OptimizerUpdate& update, const Tensor& param,
                                 const Tensor& grad, const Tensor& state0, const Tensor& state1, StreamId stream) {
  note_shapes({&param, &grad, &state0, &state1});
  const double n = static_cast<double>(param.numel());
  const bool adamw = update.kind == runtime::device::OptimizerKind::kAdamW;
  const double state_tensors = (state0.defined() ? 1.0 : 0.0) + (state1.defined() ? 1.0 : 0.0);
  const double flops =
      adamw ? 14.0 * n : (2.0 + (update.weight_decay != 0.0f ? 2.0 : 0.0) + (state0.defined() ? 2.0 : 0.0)) * n;
  const double bytes = (3.0 + 2.0 * state_tensors) * 4.0 * n;
  return charge("optimizer_step", inner_.optimizer_step(update, param, grad, state0, state1, stream), flops, bytes,
                false, param);
}

}  // namespace shardlab::sim
