// Device: the seam for memory, streams, events, copies and the math ops models need.
//
// Backends (same file names in each folder): cpu/ (host memory, Eigen math, in-order
// execution), sim/ in the top-level sim folder (cpu numerics + a cost model charged to
// a virtual clock), hpu/ (Gaudi through Synapse). Everything a model computes
// goes through this interface so the same model runs on every backend.
//
// Conventions for every op:
// - Tensors are views (tensor.h); "const Tensor&" outputs write the viewed bytes.
// - Shapes and dtypes are validated; a mismatch is INVALID_ARGUMENT naming the op,
//   the tensors and the expected shapes. Nothing is written on error.
// - Math is fp32 unless the op says otherwise (bf16 storage comes with `cast`).
// - Ops are enqueued on a stream. The cpu backend runs them immediately in order;
//   others may run them asynchronously. Use events/synchronize before reading results
//   on the host.
//
// Thread safety: a Device belongs to one rank; its methods are called from one thread
// at a time. Its MemoryTracker is thread-safe (storages may die on any thread).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/core/memory.h"
#include "runtime/core/rng.h"
#include "runtime/core/status.h"
#include "runtime/core/tensor.h"

namespace shardlab::runtime::device {

// "cpu", "sim:3", "hpu:0", or an index-less "hpu" (index == kNoIndex).
struct DeviceId {
  static constexpr int kNoIndex = -1;
  std::string type;
  int index = kNoIndex;

  bool has_index() const { return index != kNoIndex; }
  std::string to_string() const;  // "hpu:0" or "hpu"
  // Parses "type" or "type:index" (index >= 0). INVALID_ARGUMENT otherwise.
  static Result<DeviceId> parse(std::string_view text);
  friend bool operator==(const DeviceId&, const DeviceId&) = default;
};

using StreamId = int;
constexpr StreamId kComputeStream = 0;  // every device has it; more come from create_stream

struct EventId {
  std::uint64_t value = 0;
};

enum class Activation { kRelu, kGelu /* exact erf */, kGeluTanh /* "gelu_new" */, kTanh };

// One step of an elementwise optimizer with PyTorch semantics over a flat fp32 slice (the
// formulas are in runtime/optim/optimizer.h). `step` is the step being taken, from 1 (AdamW's
// bias correction; SGD's momentum buffer starts as the gradient at step 1).
enum class OptimizerKind { kSgd, kAdamW };
struct OptimizerUpdate {
  OptimizerKind kind = OptimizerKind::kSgd;
  float lr = 0.1f;
  float weight_decay = 0.0f;
  float momentum = 0.0f;                            // SGD
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;  // AdamW
  std::int64_t step = 1;
};

// NOTE [Host access]
// Code above the Device seam (models, FSDP, the trainer, checkpoints, the CLI) never
// dereferences a device tensor: it reads values with Device::to_host and sets them with
// Device::from_host (typed: values_to_host / values_from_host below), at the few places
// that must see values — the loss, batch ids and labels, the target counts, grad-norm
// scalars, checkpoints, results. Everything else stays where the device keeps it. On the
// hpu backend a storage has no host bytes at all, so Tensor::data() on one is a CHECK
// failure naming the tensor: every test that runs the runtime on the Synapse test double
// enforces this rule (runtime/platform/hpu/device/device_test.cc, the hpu scenarios). Below the
// seam — backends, communicators over host memory (MPI), the simulator's math — data()
// is the implementation.

// NOTE [Launch check]
// Every backend checks each tensor an op reads or writes before touching memory: the view
// lies inside its storage (byte offset >= 0, offset + extent within the storage, no
// overflow). Views are bounds-checked when made, so a failure here means the view's
// metadata was corrupted after it was made (the Gaudi1 seed bug, "offset_ 0is not matching
// with the offset of new tensor 13835057943613014016"; sim::FaultKind::kViewOffset
// reproduces it): DATA_LOSS (exit 3) naming the op, the tensor, its storage, the offset
// (signed and unsigned) and the storage size, and nothing is launched.
// `where` is what is launched ("gemm", "recipe 'gemm_0'").
Status check_launch_extent(std::string_view where, const std::string& tensor, const std::string& storage_label,
                           std::int64_t byte_offset, std::int64_t nbytes, std::int64_t storage_bytes);
// check_launch_extent on a tensor; an undefined tensor passes.
Status check_launch_view(std::string_view where, const Tensor& t);

class Device {
 public:
  virtual ~Device() = default;

  virtual DeviceId id() const = 0;
  virtual MemoryTracker& memory() = 0;

  // ---- memory -------------------------------------------------------------------
  // Reserves nbytes in `category` (OUT_OF_MEMORY with the breakdown when over capacity)
  // and returns a storage whose death releases them.
  virtual Result<std::shared_ptr<Storage>> allocate(std::int64_t nbytes, MemoryCategory category,
                                                    std::string_view label) = 0;
  // A fresh contiguous tensor (contents unspecified) / filled with zeros.
  Result<Tensor> empty(const Shape& shape, DType dtype, MemoryCategory category, const std::string& name);
  Result<Tensor> zeros(const Shape& shape, DType dtype, MemoryCategory category, const std::string& name);

  // Bytes moved between host memory and this device's memory since it was created, both
  // ways, by every path (to_host/from_host, an operand a backend stages through the host,
  // a copy or cast between a host tensor and a device tensor). 0 on a device whose memory is the host's (cpu). The
  // trainer reports it per step (host_transfer_bytes_per_step in metrics.json).
  virtual std::int64_t host_transfer_bytes() const { return 0; }
  // Returns the memory a caching allocator keeps for reuse (freed blocks) to the system, as
  // torch.cuda.empty_cache() does; live tensors are untouched. Default: nothing cached.
  virtual void empty_cache() {}
  // True when this device's ops take host memory as operands directly (any storage with
  // host bytes, e.g. a caller's vector): the cpu backend and the simulator over it, where
  // results can be gathered straight into host buffers. False on accelerators (hpu).
  virtual bool host_addressable() const { return false; }

  // ---- host access (NOTE [Host access]) ----------------------------------------------
  // to_host: waits for everything enqueued on `stream` so far, then copies src's bytes into
  // `dst` (exactly src.nbytes() of them). from_host: copies `src` (exactly dst.nbytes()
  // bytes) into dst, ordered on `stream` after the work enqueued there; `src` may be reused
  // as soon as it returns. Both count in host_transfer_bytes() on a device whose memory is
  // not the host's. INVALID_ARGUMENT for a size mismatch, an undefined tensor or a tensor
  // of another device.
  virtual Status to_host(const Tensor& src, std::span<std::byte> dst, StreamId stream = kComputeStream) = 0;
  virtual Status from_host(std::span<const std::byte> src, const Tensor& dst, StreamId stream = kComputeStream) = 0;

  // ---- streams and events ---------------------------------------------------------
  virtual Result<StreamId> create_stream(std::string_view name) = 0;
  // Marks the point in `stream` reached by everything enqueued so far. Like every call
  // below, a bad stream is INVALID_ARGUMENT and a backend failure (a Synapse error) is a
  // Status naming the call, never an abort.
  virtual Result<EventId> record_event(StreamId stream) = 0;
  // Work enqueued on `waiter` after this call starts after `event` completes.
  virtual Status wait_event(StreamId waiter, EventId event) = 0;
  // Blocks the host until everything enqueued on `stream` has completed; the error of
  // anything enqueued there that failed.
  virtual Status synchronize(StreamId stream) = 0;

  // ---- copies and elementwise -------------------------------------------------------
  // dst = src; same dtype and numel (shapes may differ). The other side may belong to
  // another device if its bytes are host-visible (host/device copies on cpu and sim).
  virtual Status copy(const Tensor& src, const Tensor& dst, StreamId stream = kComputeStream) = 0;
  // One copy (a cast where a pair's dtypes differ) per pair, as one device op: what FSDP2's
  // copy-out and copy-in launch as a single kernel per direction (split_with_sizes_copy,
  // chunk_cat) instead of one per parameter piece. Each pair as for copy / cast; no two
  // pairs' destinations may overlap. The default runs copy or cast per pair in order;
  // backends that charge or launch per op override it to count one.
  struct CopyPair {
    Tensor src, dst;
  };
  virtual Status copy_many(std::span<const CopyPair> pairs, StreamId stream = kComputeStream);
  // dst[i] = value (converted to dst's dtype; int64 takes the truncated value).
  virtual Status fill(const Tensor& dst, float value, StreamId stream = kComputeStream) = 0;
  // dst = convert(src) between fp32, bf16 and fp16 (round to nearest even); same numel.
  virtual Status cast(const Tensor& src, const Tensor& dst, StreamId stream = kComputeStream) = 0;
  // y += alpha * x (fp32, same numel).
  virtual Status axpy(float alpha, const Tensor& x, const Tensor& y, StreamId stream = kComputeStream) = 0;
  // x *= alpha (fp32).
  virtual Status scale(const Tensor& x, float alpha, StreamId stream = kComputeStream) = 0;

  // ---- math -------------------------------------------------------------------------
  // c = alpha * op(a) * op(b) + beta * c, op(x) = x or xᵀ; 2-D fp32; c is [M, N].
  // beta == 0 ignores c's previous contents (even NaN).
  virtual Status gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c, float alpha,
                      float beta, StreamId stream = kComputeStream) = 0;
  // gemm per batch entry: c[i] = alpha * op(a[i]) * op(b[i]) + beta * c[i] for 3-D fp32
  // a, b, c of one batch size; c is [batch, M, N]. beta == 0 ignores c's previous contents.
  virtual Status batched_gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c,
                              float alpha, float beta, StreamId stream = kComputeStream) = 0;
  // x[n, f] += bias[f]; x is [N, F] (or any shape whose last dim is F).
  virtual Status add_bias(const Tensor& x, const Tensor& bias, StreamId stream = kComputeStream) = 0;
  // dbias[f] (+)= sum_n dy[n, f]; accumulate adds to dbias instead of overwriting.
  virtual Status bias_grad(const Tensor& dy, const Tensor& dbias, bool accumulate,
                           StreamId stream = kComputeStream) = 0;
  // y = act(x), elementwise; x and y may be the same view.
  virtual Status activation(Activation act, const Tensor& x, const Tensor& y, StreamId stream = kComputeStream) = 0;
  // dx = act'(x) * dy; dx may alias dy.
  virtual Status activation_backward(Activation act, const Tensor& x, const Tensor& dy, const Tensor& dx,
                                     StreamId stream = kComputeStream) = 0;
  // LayerNorm over the last dim H of x (PyTorch semantics, biased variance): per row n,
  //   mean[n] = avg_h x[n, h], rstd[n] = 1 / sqrt(avg_h (x[n, h] - mean[n])² + eps),
  //   y[n, h] = (x[n, h] - mean[n]) * rstd[n] * gamma[h] + beta[h].
  // x is [N, H] (or any shape whose last dim is H; N = numel / H); gamma and beta are [H];
  // y has x's shape and may be the same view as x; mean and rstd hold N elements and are
  // kept for the backward. Row statistics accumulate in fp64.
  virtual Status layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, const Tensor& y,
                            const Tensor& mean, const Tensor& rstd, StreamId stream = kComputeStream) = 0;
  // The backward of layer_norm given its saved mean and rstd: writes dx, and
  // dgamma[h] (+)= sum_n dy[n, h] * xhat[n, h], dbeta[h] (+)= sum_n dy[n, h], each sum taken
  // in row order from zero (independent of the thread count); accumulate then adds the sum
  // to the old value (one rounding) instead of overwriting.
  // dx may be the same view as dy.
  virtual Status layer_norm_backward(const Tensor& x, const Tensor& dy, const Tensor& mean, const Tensor& rstd,
                                     const Tensor& gamma, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,
                                     bool accumulate, StreamId stream = kComputeStream) = 0;
  // Masked attention softmax as Hugging Face BERT computes it, over the last dim:
  //   probs[b, a, q, :] = softmax(scale * scores[b, a, q, :] + (1 - attention_mask[b, :]) * lowest_float).
  // scores is [B, A, Tq, Tk]; attention_mask is fp32 [B, Tk] (1 = attend, 0 = masked);
  // probs has scores' shape and may be the same view. The sum is taken in fp32 like HF, so
  // the mask term absorbs the score and a fully masked row comes out uniform (1 / Tk), not NaN.
  virtual Status attention_softmax(const Tensor& scores, const Tensor& attention_mask, float scale, const Tensor& probs,
                                   StreamId stream = kComputeStream) = 0;
  // dscores = scale * probs * (dprobs - sum_k probs * dprobs) over the last dim; all three
  // have one shape; dscores may be the same view as dprobs.
  virtual Status attention_softmax_backward(const Tensor& probs, const Tensor& dprobs, float scale,
                                            const Tensor& dscores, StreamId stream = kComputeStream) = 0;
  // out[n, :] = table[ids[n], :]; table is fp32 [V, H], ids int64 with N elements (any
  // shape), out has N * H elements and last dim H. An id outside [0, V) is
  // INVALID_ARGUMENT naming its index and value (nothing is written).
  virtual Status embedding(const Tensor& table, const Tensor& ids, const Tensor& out,
                           StreamId stream = kComputeStream) = 0;
  // dtable[ids[n], :] += dout[n, :], scattered in order of n so repeated ids sum
  // deterministically; without accumulate dtable is zeroed first. Ids as for embedding.
  virtual Status embedding_backward(const Tensor& dout, const Tensor& ids, const Tensor& dtable, bool accumulate,
                                    StreamId stream = kComputeStream) = 0;
  // Softmax cross-entropy over the last dim of logits [N, C] with int64 labels [N].
  // Rows whose label == ignore_index contribute nothing. Writes:
  //   loss_sum[0]  = sum over valid rows of -log softmax(logits)[label]  (fp32, accumulated in fp64
  //                  in row order, so it does not depend on the thread count)
  //   dlogits      = (softmax(logits) - onehot(label)) * grad_scale for valid rows, 0 for ignored.
  // A label outside [0, C) that is not ignore_index is INVALID_ARGUMENT naming row and value.
  virtual Status softmax_cross_entropy(const Tensor& logits, const Tensor& labels, const Tensor& loss_sum,
                                       const Tensor& dlogits, float grad_scale, std::int64_t ignore_index = -100,
                                       StreamId stream = kComputeStream) = 0;
  // y[p, r, q, s] = x[p, q, r, s]: swaps dims 1 and 2 of a 4-D fp32 tensor (BERT's head
  // split [B, T, A, d] → [B, A, T, d] and back). y has shape [P, R, Q, S] and must not
  // overlap x.
  virtual Status transpose_1_2(const Tensor& x, const Tensor& y, StreamId stream = kComputeStream) = 0;
  // c = a * b elementwise (fp32, equal element counts); c may be the same view as a or b.
  // Dropout applies a mask of 0 and 1/(1-p) this way, forward and backward.
  virtual Status multiply(const Tensor& a, const Tensor& b, const Tensor& c, StreamId stream = kComputeStream) = 0;
  // Dropout's scaled keep mask, drawn where the mask lives (like torch's on-device dropout):
  // mask is fp32 with R = dim 0 rows of per_row = numel / R values; row r's values come from
  // base.split(first_row + r).split(site), one 16-bit draw per value (the low then the high
  // half of each 32-bit output), 1/(1-p) where the draw >= round(p · 65536) and 0 elsewhere.
  // p in [0, 1).
  virtual Status dropout_mask(const Tensor& mask, float p, const Rng& base, std::int64_t first_row, std::uint64_t site,
                              StreamId stream = kComputeStream) = 0;
  // The optimizer update, fused into one op (like torch's fused AdamW or Habana's FusedAdamW),
  // so that it runs — and is charged, in the simulator — where the shard lives. param, grad
  // and the state tensors are fp32 with the same element count and do not overlap; the state
  // is SGD with momentum: [momentum_buffer]; SGD without: none (state0/state1 undefined);
  // AdamW: [exp_avg, exp_avg_sq]. Every element is updated: frozen parameters and padding
  // are left out by passing views of the runs to update (Optimizer::step), never a mask.
  virtual Status optimizer_step(const OptimizerUpdate& update, const Tensor& param, const Tensor& grad,
                                const Tensor& state0, const Tensor& state1, StreamId stream = kComputeStream) = 0;
};

// Typed host access (NOTE [Host access]): T must be the tensor's element type (float for
// fp32, std::int64_t for int64, std::uint16_t for bf16/fp16); INVALID_ARGUMENT otherwise.
Status check_host_type(std::string_view what, const Tensor& t, DType want, std::size_t element_bytes);
template <typename T>
Result<std::vector<T>> values_to_host(Device& dev, const Tensor& t, StreamId stream = kComputeStream) {
  SHARDLAB_RETURN_IF_ERROR(check_host_type("to_host", t, DTypeOf<T>::value, sizeof(T)));
  std::vector<T> out(static_cast<std::size_t>(t.numel()));
  SHARDLAB_RETURN_IF_ERROR(dev.to_host(t, std::as_writable_bytes(std::span<T>(out)), stream));
  return out;
}
template <typename T>
Status values_from_host(Device& dev, std::span<const T> values, const Tensor& t, StreamId stream = kComputeStream) {
  SHARDLAB_RETURN_IF_ERROR(check_host_type("from_host", t, DTypeOf<T>::value, sizeof(T)));
  return dev.from_host(std::as_bytes(values), t, stream);
}
template <typename T>
Status values_from_host(Device& dev, const std::vector<T>& values, const Tensor& t, StreamId stream = kComputeStream) {
  return values_from_host(dev, std::span<const T>(values), t, stream);
}

// dropout_mask's contract, shared by every backend: the argument check (INVALID_ARGUMENT
// naming the op) and the draw into host memory (`rows` rows of `per_row` values).
Status check_dropout_args(std::string_view op, const Tensor& mask, float p, std::int64_t first_row);
void draw_dropout_mask(float* out, std::int64_t rows, std::int64_t per_row, float p, const Rng& base,
                       std::int64_t first_row, std::uint64_t site);

// optimizer_step's argument contract, shared by every backend: the state tensors the kind
// needs, step >= 1, fp32 operands of param's element count that do not overlap.
Status check_optimizer_step(std::string_view op, const OptimizerUpdate& u, const Tensor& param, const Tensor& grad,
                            const Tensor& state0, const Tensor& state1);

// Shared argument checks (INVALID_ARGUMENT naming the op): the shape or element count a
// tensor must have, and that an output does not overlap an input (except as the very same
// view when may_alias: in place).
Status expect_shape(std::string_view op, const Tensor& t, const Shape& shape, const char* what);
Status expect_numel(std::string_view op, const Tensor& t, std::int64_t numel, const char* what);
Status expect_no_overlap(std::string_view op, const Tensor& out, const Tensor& input, bool may_alias);

// The argument contracts of bias_grad, attention_softmax(_backward) and
// softmax_cross_entropy, shared by every backend (INVALID_ARGUMENT naming the op): dtypes,
// shapes and overlaps, not values (a backend range-checks labels where it reads them).
// `rows`/`cols` receive the row view the op works on.
Status check_bias_grad(std::string_view op, const Tensor& dy, const Tensor& dbias);
Status check_attention_softmax(std::string_view op, const Tensor& scores, const Tensor& attention_mask,
                               const Tensor& probs);
Status check_attention_softmax_backward(std::string_view op, const Tensor& probs, const Tensor& dprobs,
                                        const Tensor& dscores, std::int64_t* rows, std::int64_t* cols);
Status check_cross_entropy(std::string_view op, const Tensor& logits, const Tensor& labels, const Tensor& loss_sum,
                           const Tensor& dlogits, std::int64_t* rows, std::int64_t* cols);
// A label outside [0, classes) that is not the ignore index, as softmax_cross_entropy's error.
Status check_labels(std::string_view op, std::span<const std::int64_t> labels, std::int64_t classes,
                    std::int64_t ignore_index);

// The shared checks of to_host/from_host: defined, host-visible bytes of this size.
Status check_host_copy(std::string_view op, const Tensor& t, std::size_t host_bytes);

}  // namespace shardlab::runtime::device
