// Bert: initialization, synthetic batches and the forward/backward pass.
//
// Shapes: B rows, T positions, N = B·T tokens, H hidden, A heads of d = H/A, I intermediate.
// Activations are [N, H] row-major; attention runs per (row, head) as [B, A, T, d] after a
// transpose_1_2 of [B, T, A, d] (Hugging Face's transpose_for_scores).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/core/rng.h"
#include "runtime/model/bert.h"
#include "runtime/model/bert_data.h"

namespace shardlab::runtime::model {

namespace {

// The loss sum of one head term (one fp32 value): what a step must see on the host.
Result<double> read_loss(device::Device& dev, const Tensor& loss) {
  SHARDLAB_ASSIGN_OR_RETURN(const std::vector<float> v, device::values_to_host<float>(dev, loss));
  return static_cast<double>(v[0]);
}

using device::Activation;
using device::Device;

constexpr std::uint64_t kInitStream = 0x42455254;     // "BERT"
constexpr std::uint64_t kDropoutStream = 0x44524f50;  // "DROP"

// Dropout sites within a layer (the key's last component).
enum Site : std::uint64_t {
  kSiteEmbeddings = 0,
  kSiteAttentionProbs = 1,
  kSiteAttentionOutput = 2,
  kSiteOutput = 3,
  kSitePooler = 4
};

// The dropout mask of `site` in `layer` drawn into `mask` (its dim 0 are batch rows, the
// first being global row ctx.first_row): per row, values of 0 or 1/(1-p) from
// Rng(seed).split(step).split(global row).split(layer * 8 + site) — so a row's mask never
// depends on which rank or micro-batch holds it. Keep decisions use 16 random bits each (p
// is quantized to 1/65536). The forward and Bert::dropout_masks both draw through here.
Status draw_site_mask(Device& dev, const Tensor& mask, float p, const ForwardContext& ctx, int layer, Site site) {
  const Rng step_rng = Rng(ctx.seed, kDropoutStream).split(static_cast<std::uint64_t>(ctx.step));
  SHARDLAB_ASSIGN_OR_RETURN(Tensor per_row, mask.reshape({mask.dim(0), mask.numel() / mask.dim(0)}));
  return dev.dropout_mask(per_row, p, step_rng, ctx.first_row,
                          static_cast<std::uint64_t>(layer) * 8 + static_cast<std::uint64_t>(site));
}

// Parameter indices (bert_param_specs order).
constexpr int kWordEmb = 0, kPosEmb = 1, kTypeEmb = 2, kEmbLnW = 3, kEmbLnB = 4, kEmbParams = 5, kLayerParams = 16;
enum LayerParam { kQw, kQb, kKw, kKb, kVw, kVb, kAOw, kAOb, kLn1w, kLn1b, kIw, kIb, kOw, kOb, kLn2w, kLn2b };

// What one encoder layer keeps for its backward.
struct LayerSaved {
  Tensor x;                          // input [N, H]
  Tensor qh, kh, vh;                 // [B, A, T, d]
  Tensor probs, probs_drop;          // [B, A, T, T]; probs_drop is probs when there is no attention dropout
  Tensor probs_mask;                 // dropout mask of probs, or undefined
  Tensor ctx;                        // [N, H] (heads merged)
  Tensor ao_mask;                    // dropout mask of the attention output, or undefined
  Tensor s1, ln1_mean, ln1_rstd, a;  // LayerNorm(dense(ctx) + x) input, stats, output
  Tensor i1, g;                      // intermediate pre-activation and activation [N, I]
  Tensor o_mask;                     // dropout mask of the output dense, or undefined
  Tensor s2, ln2_mean, ln2_rstd;
};

// One forward_backward call's shared state.
class Pass {
 public:
  Pass(const BertOptions& o, Device& dev, ParamAccess& access, const ForwardContext& fc, std::int64_t B, std::int64_t T)
      : o_(o),
        c_(o.config),
        dev_(dev),
        access_(access),
        fc_(fc),
        B(B),
        T(T),
        N(B * T),
        H(c_.hidden_size),
        A(c_.num_attention_heads),
        d(c_.hidden_size / c_.num_attention_heads),
        I(c_.intermediate_size) {}

  const BertOptions& o_;
  const BertConfig& c_;
  Device& dev_;
  ParamAccess& access_;
  const ForwardContext& fc_;
  const std::int64_t B, T, N, H, A, d, I;
  const std::vector<ParamSpec>* specs_ = nullptr;

  Result<Tensor> act(const Shape& shape, const std::string& name) {
    return dev_.empty(shape, DType::kF32, MemoryCategory::kActivations, name);
  }
  Result<Tensor> param(int i) { return access_.param(i); }
  // The gradient of parameter i, or an undefined tensor when it is frozen.
  Result<Tensor> grad(int i) {
    if (!(*specs_)[static_cast<std::size_t>(i)].requires_grad) return Tensor();
    return access_.grad(i);
  }

  // bf16 compute: activations are stored rounded to bf16 (accumulation stays fp32).
  Status round_storage(const Tensor& t) {
    if (o_.compute_dtype != DType::kBF16 || t.numel() == 0) return Status::ok();
    SHARDLAB_ASSIGN_OR_RETURN(Tensor tmp, dev_.empty({t.numel()}, DType::kBF16, MemoryCategory::kActivations, "bf16"));
    SHARDLAB_RETURN_IF_ERROR(dev_.cast(t, tmp));
    return dev_.cast(tmp, t);
  }

  // y = x·Wᵀ + b for a Linear with weight index w (bias w + 1); x [rows, in], y [rows, out].
  Result<Tensor> linear(const Tensor& x, int w, std::int64_t rows, std::int64_t out, const std::string& name) {
    SHARDLAB_ASSIGN_OR_RETURN(Tensor W, param(w));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor b, param(w + 1));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor y, act({rows, out}, name));
    SHARDLAB_RETURN_IF_ERROR(dev_.gemm(x, false, W, true, y, 1.0f, 0.0f));
    SHARDLAB_RETURN_IF_ERROR(dev_.add_bias(y, b));
    return y;
  }
  // Backward of linear: dW += dyᵀ·x, db += Σ dy, and (when dx is defined) dx = dy·W + beta·dx.
  Status linear_backward(const Tensor& x, const Tensor& dy, int w, const Tensor& dx, float beta) {
    SHARDLAB_ASSIGN_OR_RETURN(Tensor gw, grad(w));
    if (gw.defined()) SHARDLAB_RETURN_IF_ERROR(dev_.gemm(dy, true, x, false, gw, 1.0f, 1.0f));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor gb, grad(w + 1));
    if (gb.defined()) SHARDLAB_RETURN_IF_ERROR(dev_.bias_grad(dy, gb, /*accumulate=*/true));
    if (dx.defined()) {
      SHARDLAB_ASSIGN_OR_RETURN(Tensor W, param(w));
      SHARDLAB_RETURN_IF_ERROR(dev_.gemm(dy, false, W, false, dx, 1.0f, beta));
    }
    return Status::ok();
  }
  Status layer_norm_backward(const Tensor& x, const Tensor& dy, const Tensor& mean, const Tensor& rstd, int w,
                             const Tensor& dx) {
    SHARDLAB_ASSIGN_OR_RETURN(Tensor gamma, param(w));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor gw, grad(w));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor gb, grad(w + 1));
    // A frozen LayerNorm still needs somewhere to put its (discarded) parameter gradients.
    if (!gw.defined()) {
      SHARDLAB_ASSIGN_OR_RETURN(gw, act({H}, "frozen_dgamma"));
    }
    if (!gb.defined()) {
      SHARDLAB_ASSIGN_OR_RETURN(gb, act({H}, "frozen_dbeta"));
    }
    return dev_.layer_norm_backward(x, dy, mean, rstd, gamma, dx, gw, gb, /*accumulate=*/true);
  }

  // The dropout mask for `site` of `layer` (draw_site_mask; `shape`'s elements in batch-row
  // order). Undefined when p == 0 or not training.
  Result<Tensor> dropout_mask(float p, int layer, Site site, const Shape& shape) {
    if (!fc_.training || p <= 0.0f) return Tensor();
    SHARDLAB_ASSIGN_OR_RETURN(Tensor mask, act(shape, "dropout_mask"));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor per_row, mask.reshape({B, mask.numel() / B}));  // rows are batch rows
    SHARDLAB_RETURN_IF_ERROR(draw_site_mask(dev_, per_row, p, fc_, layer, site));
    return mask;
  }
  // x *= mask in place (no-op for an undefined mask).
  Status apply_mask(const Tensor& x, const Tensor& mask) {
    if (!mask.defined()) return Status::ok();
    return dev_.multiply(x, mask, x);
  }

  // [rows, T, A, d] <-> [rows, A, T, d]
  Result<Tensor> split_heads(const Tensor& x, const std::string& name) {
    SHARDLAB_ASSIGN_OR_RETURN(Tensor x4, x.reshape({B, T, A, d}));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor y, act({B, A, T, d}, name));
    SHARDLAB_RETURN_IF_ERROR(dev_.transpose_1_2(x4, y));
    return y;
  }
  Result<Tensor> merge_heads(const Tensor& xh, const std::string& name) {
    SHARDLAB_ASSIGN_OR_RETURN(Tensor y, act({B, T, A, d}, name));
    SHARDLAB_RETURN_IF_ERROR(dev_.transpose_1_2(xh, y));
    return y.reshape({N, H});
  }

  // ---- embeddings (layer 0) ----------------------------------------------------------
  Tensor ids, types, positions, mask;                   // [B, T]
  const std::vector<std::int64_t>* host_ids = nullptr;  // ids' values on the host (Batch::ints)
  Tensor emb_sum, emb_mean, emb_rstd, emb_mask;

  Result<Tensor> embeddings_forward() {
    SHARDLAB_ASSIGN_OR_RETURN(Tensor word, param(kWordEmb));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor pos, param(kPosEmb));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor type, param(kTypeEmb));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor lnw, param(kEmbLnW));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor lnb, param(kEmbLnB));
    SHARDLAB_ASSIGN_OR_RETURN(emb_sum, act({N, H}, "embeddings"));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor tmp, act({N, H}, "embedding_part"));
    // Hugging Face's order: (word + token_type) + position.
    SHARDLAB_RETURN_IF_ERROR(dev_.embedding(word, ids, emb_sum));
    SHARDLAB_RETURN_IF_ERROR(dev_.embedding(type, types, tmp));
    SHARDLAB_RETURN_IF_ERROR(dev_.axpy(1.0f, tmp, emb_sum));
    SHARDLAB_RETURN_IF_ERROR(dev_.embedding(pos, positions, tmp));
    SHARDLAB_RETURN_IF_ERROR(dev_.axpy(1.0f, tmp, emb_sum));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor h, act({N, H}, "embeddings.out"));
    SHARDLAB_ASSIGN_OR_RETURN(emb_mean, act({N}, "embeddings.ln_mean"));
    SHARDLAB_ASSIGN_OR_RETURN(emb_rstd, act({N}, "embeddings.ln_rstd"));
    SHARDLAB_RETURN_IF_ERROR(dev_.layer_norm(emb_sum, lnw, lnb, c_.layer_norm_eps, h, emb_mean, emb_rstd));
    SHARDLAB_ASSIGN_OR_RETURN(emb_mask, dropout_mask(c_.hidden_dropout_prob, 0, kSiteEmbeddings, {N, H}));
    SHARDLAB_RETURN_IF_ERROR(apply_mask(h, emb_mask));
    SHARDLAB_RETURN_IF_ERROR(round_storage(h));
    return h;
  }

  Status embeddings_backward(const Tensor& dh) {
    SHARDLAB_RETURN_IF_ERROR(apply_mask(dh, emb_mask));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor dsum, act({N, H}, "embeddings.dsum"));
    SHARDLAB_RETURN_IF_ERROR(layer_norm_backward(emb_sum, dh, emb_mean, emb_rstd, kEmbLnW, dsum));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor gpos, grad(kPosEmb));
    if (gpos.defined()) SHARDLAB_RETURN_IF_ERROR(dev_.embedding_backward(dsum, positions, gpos, /*accumulate=*/true));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor gtype, grad(kTypeEmb));
    if (gtype.defined()) SHARDLAB_RETURN_IF_ERROR(dev_.embedding_backward(dsum, types, gtype, /*accumulate=*/true));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor gword, grad(kWordEmb));
    if (gword.defined()) {
      // nn.Embedding(padding_idx = pad_token_id): the padding row gets no gradient from the lookup.
      // One fill per run of consecutive padding tokens (padding sits at the end of each
      // sequence), not one per token: a device pays a launch per op.
      const std::int64_t* id = host_ids->data();
      for (std::int64_t n = 0; n < N;) {
        if (id[n] != c_.pad_token_id) {
          ++n;
          continue;
        }
        std::int64_t end = n + 1;
        while (end < N && id[end] == c_.pad_token_id) ++end;
        SHARDLAB_ASSIGN_OR_RETURN(Tensor rows, dsum.narrow(n * H, (end - n) * H));
        SHARDLAB_RETURN_IF_ERROR(dev_.fill(rows, 0.0f));
        n = end;
      }
      SHARDLAB_RETURN_IF_ERROR(dev_.embedding_backward(dsum, ids, gword, /*accumulate=*/true));
    }
    return Status::ok();
  }

  // ---- encoder layer l (1-based FSDP layer index; params at kEmbParams + 16·(l-1)) ---
  int base(int l) const { return kEmbParams + kLayerParams * (l - 1); }

  Result<Tensor> layer_forward(int l, const Tensor& x, LayerSaved& s) {
    const int p = base(l);
    const std::string tag = "layer" + std::to_string(l - 1) + ".";
    s.x = x;
    SHARDLAB_ASSIGN_OR_RETURN(Tensor q, linear(x, p + kQw, N, H, tag + "q"));
    SHARDLAB_ASSIGN_OR_RETURN(s.qh, split_heads(q, tag + "qh"));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor k, linear(x, p + kKw, N, H, tag + "k"));
    SHARDLAB_ASSIGN_OR_RETURN(s.kh, split_heads(k, tag + "kh"));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor v, linear(x, p + kVw, N, H, tag + "v"));
    SHARDLAB_ASSIGN_OR_RETURN(s.vh, split_heads(v, tag + "vh"));
    for (const Tensor* t : {&s.qh, &s.kh, &s.vh}) SHARDLAB_RETURN_IF_ERROR(round_storage(*t));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor qh3, s.qh.reshape({B * A, T, d}));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor kh3, s.kh.reshape({B * A, T, d}));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor vh3, s.vh.reshape({B * A, T, d}));
    SHARDLAB_ASSIGN_OR_RETURN(s.probs, act({B, A, T, T}, tag + "probs"));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor scores3, s.probs.reshape({B * A, T, T}));
    SHARDLAB_RETURN_IF_ERROR(dev_.batched_gemm(qh3, false, kh3, true, scores3, 1.0f, 0.0f));
    // softmax(scores / √d + mask), in place.
    SHARDLAB_RETURN_IF_ERROR(dev_.attention_softmax(s.probs, mask, 1.0f / std::sqrt(static_cast<float>(d)), s.probs));
    SHARDLAB_RETURN_IF_ERROR(round_storage(s.probs));
    SHARDLAB_ASSIGN_OR_RETURN(s.probs_mask,
                              dropout_mask(c_.attention_probs_dropout_prob, l, kSiteAttentionProbs, {B, A, T, T}));
    if (s.probs_mask.defined()) {
      SHARDLAB_ASSIGN_OR_RETURN(s.probs_drop, act({B, A, T, T}, tag + "probs_dropped"));
      SHARDLAB_RETURN_IF_ERROR(dev_.multiply(s.probs, s.probs_mask, s.probs_drop));
    } else {
      s.probs_drop = s.probs;
    }
    SHARDLAB_ASSIGN_OR_RETURN(Tensor pd3, s.probs_drop.reshape({B * A, T, T}));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor ctxh, act({B, A, T, d}, tag + "ctx_heads"));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor ctxh3, ctxh.reshape({B * A, T, d}));
    SHARDLAB_RETURN_IF_ERROR(dev_.batched_gemm(pd3, false, vh3, false, ctxh3, 1.0f, 0.0f));
    SHARDLAB_ASSIGN_OR_RETURN(s.ctx, merge_heads(ctxh, tag + "ctx"));
    SHARDLAB_RETURN_IF_ERROR(round_storage(s.ctx));
    // a = LayerNorm(dropout(dense(ctx)) + x)
    SHARDLAB_ASSIGN_OR_RETURN(s.s1, linear(s.ctx, p + kAOw, N, H, tag + "attention_out"));
    SHARDLAB_ASSIGN_OR_RETURN(s.ao_mask, dropout_mask(c_.hidden_dropout_prob, l, kSiteAttentionOutput, {N, H}));
    SHARDLAB_RETURN_IF_ERROR(apply_mask(s.s1, s.ao_mask));
    SHARDLAB_RETURN_IF_ERROR(dev_.axpy(1.0f, x, s.s1));
    SHARDLAB_RETURN_IF_ERROR(round_storage(s.s1));
    SHARDLAB_ASSIGN_OR_RETURN(s.a, act({N, H}, tag + "attention_ln"));
    SHARDLAB_ASSIGN_OR_RETURN(s.ln1_mean, act({N}, tag + "ln1_mean"));
    SHARDLAB_ASSIGN_OR_RETURN(s.ln1_rstd, act({N}, tag + "ln1_rstd"));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor g1, param(p + kLn1w));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor b1, param(p + kLn1b));
    SHARDLAB_RETURN_IF_ERROR(dev_.layer_norm(s.s1, g1, b1, c_.layer_norm_eps, s.a, s.ln1_mean, s.ln1_rstd));
    SHARDLAB_RETURN_IF_ERROR(round_storage(s.a));
    // y = LayerNorm(dropout(dense_out(act(dense_in(a)))) + a)
    SHARDLAB_ASSIGN_OR_RETURN(s.i1, linear(s.a, p + kIw, N, I, tag + "intermediate"));
    SHARDLAB_RETURN_IF_ERROR(round_storage(s.i1));
    SHARDLAB_ASSIGN_OR_RETURN(s.g, act({N, I}, tag + "intermediate_act"));
    SHARDLAB_RETURN_IF_ERROR(dev_.activation(c_.hidden_act, s.i1, s.g));
    SHARDLAB_RETURN_IF_ERROR(round_storage(s.g));
    SHARDLAB_ASSIGN_OR_RETURN(s.s2, linear(s.g, p + kOw, N, H, tag + "output"));
    SHARDLAB_ASSIGN_OR_RETURN(s.o_mask, dropout_mask(c_.hidden_dropout_prob, l, kSiteOutput, {N, H}));
    SHARDLAB_RETURN_IF_ERROR(apply_mask(s.s2, s.o_mask));
    SHARDLAB_RETURN_IF_ERROR(dev_.axpy(1.0f, s.a, s.s2));
    SHARDLAB_RETURN_IF_ERROR(round_storage(s.s2));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor y, act({N, H}, tag + "out"));
    SHARDLAB_ASSIGN_OR_RETURN(s.ln2_mean, act({N}, tag + "ln2_mean"));
    SHARDLAB_ASSIGN_OR_RETURN(s.ln2_rstd, act({N}, tag + "ln2_rstd"));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor g2, param(p + kLn2w));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor b2, param(p + kLn2b));
    SHARDLAB_RETURN_IF_ERROR(dev_.layer_norm(s.s2, g2, b2, c_.layer_norm_eps, y, s.ln2_mean, s.ln2_rstd));
    SHARDLAB_RETURN_IF_ERROR(round_storage(y));
    return y;
  }

  // dy [N, H] (overwritten) → dx [N, H].
  Result<Tensor> layer_backward(int l, const LayerSaved& s, const Tensor& dy) {
    const int p = base(l);
    const std::string tag = "layer" + std::to_string(l - 1) + ".";
    // y = LN2(s2), s2 = mask_o·dense_out(g) + a
    SHARDLAB_ASSIGN_OR_RETURN(Tensor ds2, act({N, H}, tag + "d_s2"));
    SHARDLAB_RETURN_IF_ERROR(layer_norm_backward(s.s2, dy, s.ln2_mean, s.ln2_rstd, p + kLn2w, ds2));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor da, act({N, H}, tag + "d_a"));
    SHARDLAB_RETURN_IF_ERROR(dev_.copy(ds2, da));  // residual
    SHARDLAB_RETURN_IF_ERROR(apply_mask(ds2, s.o_mask));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor dg, act({N, I}, tag + "d_intermediate"));
    SHARDLAB_RETURN_IF_ERROR(linear_backward(s.g, ds2, p + kOw, dg, 0.0f));
    SHARDLAB_RETURN_IF_ERROR(dev_.activation_backward(c_.hidden_act, s.i1, dg, dg));
    SHARDLAB_RETURN_IF_ERROR(linear_backward(s.a, dg, p + kIw, da, 1.0f));
    // a = LN1(s1), s1 = mask_ao·dense(ctx) + x
    SHARDLAB_ASSIGN_OR_RETURN(Tensor ds1, act({N, H}, tag + "d_s1"));
    SHARDLAB_RETURN_IF_ERROR(layer_norm_backward(s.s1, da, s.ln1_mean, s.ln1_rstd, p + kLn1w, ds1));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor dx, act({N, H}, tag + "d_x"));
    SHARDLAB_RETURN_IF_ERROR(dev_.copy(ds1, dx));  // residual
    SHARDLAB_RETURN_IF_ERROR(apply_mask(ds1, s.ao_mask));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor dctx, act({N, H}, tag + "d_ctx"));
    SHARDLAB_RETURN_IF_ERROR(linear_backward(s.ctx, ds1, p + kAOw, dctx, 0.0f));
    // Attention.
    SHARDLAB_ASSIGN_OR_RETURN(Tensor dctxh, split_heads(dctx, tag + "d_ctx_heads"));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor dctxh3, dctxh.reshape({B * A, T, d}));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor qh3, s.qh.reshape({B * A, T, d}));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor kh3, s.kh.reshape({B * A, T, d}));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor vh3, s.vh.reshape({B * A, T, d}));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor pd3, s.probs_drop.reshape({B * A, T, T}));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor dprobs, act({B, A, T, T}, tag + "d_probs"));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor dprobs3, dprobs.reshape({B * A, T, T}));
    SHARDLAB_RETURN_IF_ERROR(dev_.batched_gemm(dctxh3, false, vh3, true, dprobs3, 1.0f, 0.0f));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor dvh, act({B, A, T, d}, tag + "d_vh"));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor dvh3, dvh.reshape({B * A, T, d}));
    SHARDLAB_RETURN_IF_ERROR(dev_.batched_gemm(pd3, true, dctxh3, false, dvh3, 1.0f, 0.0f));
    SHARDLAB_RETURN_IF_ERROR(apply_mask(dprobs, s.probs_mask));
    SHARDLAB_RETURN_IF_ERROR(
        dev_.attention_softmax_backward(s.probs, dprobs, 1.0f / std::sqrt(static_cast<float>(d)), dprobs));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor dqh, act({B, A, T, d}, tag + "d_qh"));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor dqh3, dqh.reshape({B * A, T, d}));
    SHARDLAB_RETURN_IF_ERROR(dev_.batched_gemm(dprobs3, false, kh3, false, dqh3, 1.0f, 0.0f));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor dkh, act({B, A, T, d}, tag + "d_kh"));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor dkh3, dkh.reshape({B * A, T, d}));
    SHARDLAB_RETURN_IF_ERROR(dev_.batched_gemm(dprobs3, true, qh3, false, dkh3, 1.0f, 0.0f));
    // q/k/v projections: dx += dq·Wq + dk·Wk + dv·Wv.
    const std::pair<const Tensor*, int> projections[] = {{&dqh, kQw}, {&dkh, kKw}, {&dvh, kVw}};
    for (const auto& [dh, w] : projections) {
      SHARDLAB_ASSIGN_OR_RETURN(Tensor dproj, merge_heads(*dh, tag + "d_proj"));
      SHARDLAB_RETURN_IF_ERROR(linear_backward(s.x, dproj, p + w, dx, 1.0f));
    }
    return dx;
  }
};

}  // namespace

Status Bert::init_params(device::Device& dev, const std::vector<Tensor>& params, std::uint64_t seed) const {
  if (params.size() != specs_.size()) {
    return Status::invalid_argument("init_params: got " + std::to_string(params.size()) + " tensors for " +
                                    std::to_string(specs_.size()) + " parameters");
  }
  const Rng root(seed, kInitStream);
  const BertConfig& c = options_.config;
  for (std::size_t i = 0; i < specs_.size(); ++i) {
    const std::string& name = specs_[i].name;
    const std::int64_t n = params[i].numel();
    std::vector<float> values(static_cast<std::size_t>(n));
    float* p = values.data();
    const auto ends_with = [&](std::string_view suffix) {
      return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    if (name.find("LayerNorm") != std::string::npos) {
      std::fill(p, p + n, ends_with(".weight") ? 1.0f : 0.0f);
    } else if (ends_with(".weight")) {  // Linear and Embedding weights: N(0, initializer_range)
      root.split(i).fill_normal(p, n, c.initializer_range);
      if (name == "bert.embeddings.word_embeddings.weight" && c.pad_token_id >= 0 && c.pad_token_id < c.vocab_size) {
        std::fill(p + c.pad_token_id * c.hidden_size, p + (c.pad_token_id + 1) * c.hidden_size, 0.0f);
      }
    } else {  // biases
      std::fill(p, p + n, 0.0f);
    }
    SHARDLAB_RETURN_IF_ERROR(device::values_from_host(dev, values, params[i]));
  }
  return Status::ok();
}

Result<std::vector<std::pair<std::string, Tensor>>> Bert::dropout_masks(device::Device& dev, const ForwardContext& ctx,
                                                                        std::int64_t rows, std::int64_t seq) const {
  const BertConfig& c = options_.config;
  if (rows <= 0 || seq <= 0) {
    return Status::invalid_argument("BERT dropout masks: need rows and seq > 0, got " + std::to_string(rows) + " × " +
                                    std::to_string(seq));
  }
  const std::int64_t H = c.hidden_size, A = c.num_attention_heads;
  std::vector<std::pair<std::string, Tensor>> out;
  auto add = [&](std::string name, float p, int layer, Site site, const Shape& shape) -> Status {
    if (p <= 0.0f) return Status::ok();
    SHARDLAB_ASSIGN_OR_RETURN(Tensor mask, dev.empty(shape, DType::kF32, MemoryCategory::kActivations, name));
    SHARDLAB_RETURN_IF_ERROR(draw_site_mask(dev, mask, p, ctx, layer, site));
    out.emplace_back(std::move(name), std::move(mask));
    return Status::ok();
  };
  SHARDLAB_RETURN_IF_ERROR(add("bert.embeddings.dropout", c.hidden_dropout_prob, 0, kSiteEmbeddings, {rows, seq, H}));
  for (int l = 1; l <= c.num_hidden_layers; ++l) {
    const std::string layer = "bert.encoder.layer." + std::to_string(l - 1) + ".";
    SHARDLAB_RETURN_IF_ERROR(add(layer + "attention.self.dropout", c.attention_probs_dropout_prob, l,
                                 kSiteAttentionProbs, {rows, A, seq, seq}));
    SHARDLAB_RETURN_IF_ERROR(
        add(layer + "attention.output.dropout", c.hidden_dropout_prob, l, kSiteAttentionOutput, {rows, seq, H}));
    SHARDLAB_RETURN_IF_ERROR(add(layer + "output.dropout", c.hidden_dropout_prob, l, kSiteOutput, {rows, seq, H}));
  }
  if (options_.head == BertHead::kSequenceClassification) {
    SHARDLAB_RETURN_IF_ERROR(add("dropout", c.hidden_dropout_prob, c.num_hidden_layers + 1, kSitePooler, {rows, H}));
  }
  return out;
}

Result<Batch> Bert::synthetic_batch(device::Device& dev, std::uint64_t seed, std::int64_t step, std::int64_t first_row,
                                    std::int64_t rows) const {
  return synthetic_bert_batch(dev, options_.config, options_.head, options_.seq_len, seed, step, first_row, rows);
}

Result<std::vector<double>> Bert::forward_backward(device::Device& dev, ParamAccess& access, const Batch& batch,
                                                   const std::vector<float>& term_scale,
                                                   const ForwardContext& ctx) const {
  SHARDLAB_RETURN_IF_ERROR(validate_batch(batch));
  const std::vector<double> weights = loss_term_weights();
  if (term_scale.size() != weights.size()) {
    return Status::invalid_argument("BERT forward_backward: " + std::to_string(term_scale.size()) +
                                    " loss scales for " + std::to_string(weights.size()) + " loss terms");
  }
  SHARDLAB_ASSIGN_OR_RETURN(Tensor ids, batch.get("input_ids"));
  Pass ps(options_, dev, access, ctx, ids.dim(0), ids.dim(1));
  ps.specs_ = &specs_;
  const std::int64_t B = ps.B, T = ps.T, N = ps.N, H = ps.H;
  const int L = options_.config.num_hidden_layers;
  ps.ids = ids;
  SHARDLAB_ASSIGN_OR_RETURN(ps.host_ids, batch.ints("input_ids"));
  SHARDLAB_ASSIGN_OR_RETURN(ps.types, batch.get("token_type_ids"));
  SHARDLAB_ASSIGN_OR_RETURN(ps.mask, batch.get("attention_mask"));
  SHARDLAB_ASSIGN_OR_RETURN(ps.positions, dev.empty({B, T}, DType::kI64, MemoryCategory::kActivations, "position_ids"));
  {
    std::vector<std::int64_t> positions(static_cast<std::size_t>(N));
    for (std::int64_t n = 0; n < N; ++n) positions[static_cast<std::size_t>(n)] = n % T;
    SHARDLAB_RETURN_IF_ERROR(device::values_from_host(dev, positions, ps.positions));
  }

  // ---- forward -------------------------------------------------------------------------
  SHARDLAB_RETURN_IF_ERROR(access.pre_forward(0));
  SHARDLAB_ASSIGN_OR_RETURN(Tensor x, ps.embeddings_forward());
  SHARDLAB_RETURN_IF_ERROR(access.post_forward(0));
  std::vector<LayerSaved> saved(static_cast<std::size_t>(L));
  std::vector<Tensor> inputs(static_cast<std::size_t>(L));  // kept under activation checkpointing
  for (int l = 1; l <= L; ++l) {
    SHARDLAB_RETURN_IF_ERROR(access.pre_forward(l));
    inputs[static_cast<std::size_t>(l - 1)] = x;
    LayerSaved& s = saved[static_cast<std::size_t>(l - 1)];
    SHARDLAB_ASSIGN_OR_RETURN(x, ps.layer_forward(l, x, s));
    if (options_.activation_checkpointing) s = LayerSaved();  // recomputed in backward
    SHARDLAB_RETURN_IF_ERROR(access.post_forward(l));
  }

  // ---- head: forward, loss, and its backward --------------------------------------------
  const int hl = L + 1, hp = kEmbParams + kLayerParams * L;
  const BertConfig& c = options_.config;
  std::vector<double> loss_sums(weights.size(), 0.0);
  SHARDLAB_ASSIGN_OR_RETURN(Tensor loss, ps.act({1}, "loss"));
  SHARDLAB_RETURN_IF_ERROR(access.pre_forward(hl));
  SHARDLAB_ASSIGN_OR_RETURN(Tensor dx, ps.act({N, H}, "d_encoder_out"));
  SHARDLAB_RETURN_IF_ERROR(dev.fill(dx, 0.0f));
  switch (options_.head) {
    case BertHead::kSequenceClassification: {
      // pooled = tanh(dense(x[:, 0])); logits = classifier(dropout(pooled))
      SHARDLAB_ASSIGN_OR_RETURN(Tensor first, dev.empty({B}, DType::kI64, MemoryCategory::kActivations, "cls_rows"));
      std::vector<std::int64_t> first_rows(static_cast<std::size_t>(B));
      for (std::int64_t b = 0; b < B; ++b) first_rows[static_cast<std::size_t>(b)] = b * T;
      SHARDLAB_RETURN_IF_ERROR(device::values_from_host(dev, first_rows, first));
      SHARDLAB_ASSIGN_OR_RETURN(Tensor cls, ps.act({B, H}, "cls_token"));
      SHARDLAB_RETURN_IF_ERROR(dev.embedding(x, first, cls));
      SHARDLAB_ASSIGN_OR_RETURN(Tensor pre, ps.linear(cls, hp, B, H, "pooler"));
      SHARDLAB_ASSIGN_OR_RETURN(Tensor pooled, ps.act({B, H}, "pooled"));
      SHARDLAB_RETURN_IF_ERROR(dev.activation(Activation::kTanh, pre, pooled));
      SHARDLAB_ASSIGN_OR_RETURN(Tensor pmask, ps.dropout_mask(c.hidden_dropout_prob, hl, kSitePooler, {B, H}));
      SHARDLAB_RETURN_IF_ERROR(ps.apply_mask(pooled, pmask));
      SHARDLAB_RETURN_IF_ERROR(ps.round_storage(pooled));
      SHARDLAB_ASSIGN_OR_RETURN(Tensor logits, ps.linear(pooled, hp + 2, B, c.num_labels, "logits"));
      SHARDLAB_ASSIGN_OR_RETURN(Tensor labels, batch.get("labels"));
      SHARDLAB_ASSIGN_OR_RETURN(Tensor dlogits, ps.act({B, c.num_labels}, "d_logits"));
      SHARDLAB_RETURN_IF_ERROR(dev.softmax_cross_entropy(logits, labels, loss, dlogits, term_scale[0]));
      SHARDLAB_ASSIGN_OR_RETURN(loss_sums[0], read_loss(dev, loss));
      SHARDLAB_RETURN_IF_ERROR(access.post_forward(hl));
      SHARDLAB_RETURN_IF_ERROR(access.pre_backward(hl));
      SHARDLAB_ASSIGN_OR_RETURN(Tensor dpooled, ps.act({B, H}, "d_pooled"));
      SHARDLAB_RETURN_IF_ERROR(ps.linear_backward(pooled, dlogits, hp + 2, dpooled, 0.0f));
      SHARDLAB_RETURN_IF_ERROR(ps.apply_mask(dpooled, pmask));
      SHARDLAB_RETURN_IF_ERROR(dev.activation_backward(Activation::kTanh, pre, dpooled, dpooled));
      SHARDLAB_ASSIGN_OR_RETURN(Tensor dcls, ps.act({B, H}, "d_cls_token"));
      SHARDLAB_RETURN_IF_ERROR(ps.linear_backward(cls, dpooled, hp, dcls, 0.0f));
      SHARDLAB_RETURN_IF_ERROR(dev.embedding_backward(dcls, first, dx, /*accumulate=*/true));
      break;
    }
    case BertHead::kMaskedLM: {
      // Only positions with a label reach the head (ignored ones contribute nothing):
      // h = LN(act(dense(x_valid))); logits = h·word_embeddingsᵀ + bias. Padded with
      // ignored rows (position 0, label -100) to a static count (NOTE [Static masked-LM
      // shape] in bert.h).
      SHARDLAB_ASSIGN_OR_RETURN(const std::vector<std::int64_t>* labels, batch.ints("labels"));
      std::vector<std::int64_t> rows;
      for (std::int64_t n = 0; n < N; ++n) {
        if ((*labels)[static_cast<std::size_t>(n)] != -100) rows.push_back(n);
      }
      const auto labeled = static_cast<std::int64_t>(rows.size());
      const std::int64_t M = mlm_decoder_rows(B, T, labeled);
      SHARDLAB_ASSIGN_OR_RETURN(Tensor idx, dev.empty({M}, DType::kI64, MemoryCategory::kActivations, "mlm_rows"));
      SHARDLAB_ASSIGN_OR_RETURN(Tensor lv, dev.empty({M}, DType::kI64, MemoryCategory::kActivations, "mlm_labels"));
      std::vector<std::int64_t> idx_values(static_cast<std::size_t>(M), 0),
          label_values(static_cast<std::size_t>(M), -100);
      for (std::int64_t m = 0; m < labeled; ++m) {
        const auto row = static_cast<std::size_t>(rows[static_cast<std::size_t>(m)]);
        idx_values[static_cast<std::size_t>(m)] = static_cast<std::int64_t>(row);
        label_values[static_cast<std::size_t>(m)] = (*labels)[row];
      }
      SHARDLAB_RETURN_IF_ERROR(device::values_from_host(dev, idx_values, idx));
      SHARDLAB_RETURN_IF_ERROR(device::values_from_host(dev, label_values, lv));
      SHARDLAB_ASSIGN_OR_RETURN(Tensor xv, ps.act({M, H}, "mlm_in"));
      SHARDLAB_RETURN_IF_ERROR(dev.embedding(x, idx, xv));
      SHARDLAB_ASSIGN_OR_RETURN(Tensor t1, ps.linear(xv, hp, M, H, "mlm_transform"));
      SHARDLAB_ASSIGN_OR_RETURN(Tensor t2, ps.act({M, H}, "mlm_transform_act"));
      SHARDLAB_RETURN_IF_ERROR(dev.activation(c.hidden_act, t1, t2));
      SHARDLAB_ASSIGN_OR_RETURN(Tensor h, ps.act({M, H}, "mlm_hidden"));
      SHARDLAB_ASSIGN_OR_RETURN(Tensor mean, ps.act({M}, "mlm_ln_mean"));
      SHARDLAB_ASSIGN_OR_RETURN(Tensor rstd, ps.act({M}, "mlm_ln_rstd"));
      SHARDLAB_ASSIGN_OR_RETURN(Tensor lnw, ps.param(hp + 2));
      SHARDLAB_ASSIGN_OR_RETURN(Tensor lnb, ps.param(hp + 3));
      SHARDLAB_RETURN_IF_ERROR(dev.layer_norm(t2, lnw, lnb, c.layer_norm_eps, h, mean, rstd));
      SHARDLAB_RETURN_IF_ERROR(ps.round_storage(h));
      SHARDLAB_ASSIGN_OR_RETURN(Tensor word, ps.param(kWordEmb));
      SHARDLAB_ASSIGN_OR_RETURN(Tensor bias, ps.param(hp + 4));
      SHARDLAB_ASSIGN_OR_RETURN(Tensor logits, ps.act({M, c.vocab_size}, "mlm_logits"));
      SHARDLAB_RETURN_IF_ERROR(dev.gemm(h, false, word, true, logits, 1.0f, 0.0f));
      SHARDLAB_RETURN_IF_ERROR(dev.add_bias(logits, bias));
      SHARDLAB_ASSIGN_OR_RETURN(Tensor dlogits, ps.act({M, c.vocab_size}, "d_mlm_logits"));
      SHARDLAB_RETURN_IF_ERROR(dev.softmax_cross_entropy(logits, lv, loss, dlogits, term_scale[0]));
      SHARDLAB_ASSIGN_OR_RETURN(loss_sums[0], read_loss(dev, loss));
      logits = Tensor();
      SHARDLAB_RETURN_IF_ERROR(access.post_forward(hl));
      SHARDLAB_RETURN_IF_ERROR(access.pre_backward(hl));
      // Tied decoder: d(word_embeddings) += dlogitsᵀ·h; the lookup's share comes in the embeddings' backward.
      SHARDLAB_ASSIGN_OR_RETURN(Tensor gword, ps.grad(kWordEmb));
      if (gword.defined()) SHARDLAB_RETURN_IF_ERROR(dev.gemm(dlogits, true, h, false, gword, 1.0f, 1.0f));
      SHARDLAB_ASSIGN_OR_RETURN(Tensor gbias, ps.grad(hp + 4));
      if (gbias.defined()) SHARDLAB_RETURN_IF_ERROR(dev.bias_grad(dlogits, gbias, true));
      SHARDLAB_ASSIGN_OR_RETURN(Tensor dh, ps.act({M, H}, "d_mlm_hidden"));
      SHARDLAB_RETURN_IF_ERROR(dev.gemm(dlogits, false, word, false, dh, 1.0f, 0.0f));
      SHARDLAB_RETURN_IF_ERROR(ps.layer_norm_backward(t2, dh, mean, rstd, hp + 2, dh));
      SHARDLAB_RETURN_IF_ERROR(dev.activation_backward(c.hidden_act, t1, dh, dh));
      SHARDLAB_ASSIGN_OR_RETURN(Tensor dxv, ps.act({M, H}, "d_mlm_in"));
      SHARDLAB_RETURN_IF_ERROR(ps.linear_backward(xv, dh, hp, dxv, 0.0f));
      SHARDLAB_RETURN_IF_ERROR(dev.embedding_backward(dxv, idx, dx, /*accumulate=*/true));
      break;
    }
    case BertHead::kQuestionAnswering: {
      // logits [N, 2] → start/end [B, T]; positions clamped to [0, T], T ignored.
      SHARDLAB_ASSIGN_OR_RETURN(Tensor logits, ps.linear(x, hp, N, 2, "qa_logits"));
      SHARDLAB_ASSIGN_OR_RETURN(Tensor l4, logits.reshape({1, N, 2, 1}));
      SHARDLAB_ASSIGN_OR_RETURN(Tensor split, ps.act({1, 2, N, 1}, "qa_logits_split"));
      SHARDLAB_RETURN_IF_ERROR(dev.transpose_1_2(l4, split));
      SHARDLAB_ASSIGN_OR_RETURN(Tensor dsplit, ps.act({1, 2, N, 1}, "d_qa_logits_split"));
      for (int t = 0; t < 2; ++t) {
        SHARDLAB_ASSIGN_OR_RETURN(const std::vector<std::int64_t>* pos,
                                  batch.ints(t == 0 ? "start_positions" : "end_positions"));
        SHARDLAB_ASSIGN_OR_RETURN(Tensor clamped,
                                  dev.empty({B}, DType::kI64, MemoryCategory::kActivations, "qa_positions"));
        std::vector<std::int64_t> clamped_values(static_cast<std::size_t>(B));
        for (std::int64_t b = 0; b < B; ++b) {
          clamped_values[static_cast<std::size_t>(b)] =
              std::clamp<std::int64_t>((*pos)[static_cast<std::size_t>(b)], 0, T);
        }
        SHARDLAB_RETURN_IF_ERROR(device::values_from_host(dev, clamped_values, clamped));
        SHARDLAB_ASSIGN_OR_RETURN(Tensor lt, split.narrow(t * N, N));
        SHARDLAB_ASSIGN_OR_RETURN(Tensor dt, dsplit.narrow(t * N, N));
        SHARDLAB_ASSIGN_OR_RETURN(Tensor lt2, lt.reshape({B, T}));
        SHARDLAB_ASSIGN_OR_RETURN(Tensor dt2, dt.reshape({B, T}));
        SHARDLAB_RETURN_IF_ERROR(dev.softmax_cross_entropy(lt2, clamped, loss, dt2,
                                                           term_scale[static_cast<std::size_t>(t)],
                                                           /*ignore_index=*/T));
        SHARDLAB_ASSIGN_OR_RETURN(loss_sums[static_cast<std::size_t>(t)], read_loss(dev, loss));
      }
      SHARDLAB_RETURN_IF_ERROR(access.post_forward(hl));
      SHARDLAB_RETURN_IF_ERROR(access.pre_backward(hl));
      SHARDLAB_ASSIGN_OR_RETURN(Tensor dlogits4, ps.act({1, N, 2, 1}, "d_qa_logits"));
      SHARDLAB_RETURN_IF_ERROR(dev.transpose_1_2(dsplit, dlogits4));
      SHARDLAB_ASSIGN_OR_RETURN(Tensor dlogits, dlogits4.reshape({N, 2}));
      SHARDLAB_RETURN_IF_ERROR(ps.linear_backward(x, dlogits, hp, dx, 0.0f));
      break;
    }
  }
  SHARDLAB_RETURN_IF_ERROR(access.post_backward(hl));

  // ---- encoder and embeddings backward ----------------------------------------------------
  for (int l = L; l >= 1; --l) {
    SHARDLAB_RETURN_IF_ERROR(access.pre_backward(l));
    LayerSaved& s = saved[static_cast<std::size_t>(l - 1)];
    if (options_.activation_checkpointing) {
      // Recompute the layer's forward (same ops, same dropout masks: bitwise the same).
      SHARDLAB_ASSIGN_OR_RETURN(Tensor unused, ps.layer_forward(l, inputs[static_cast<std::size_t>(l - 1)], s));
    }
    SHARDLAB_ASSIGN_OR_RETURN(dx, ps.layer_backward(l, s, dx));
    s = LayerSaved();
    inputs[static_cast<std::size_t>(l - 1)] = Tensor();
    SHARDLAB_RETURN_IF_ERROR(access.post_backward(l));
  }
  SHARDLAB_RETURN_IF_ERROR(access.pre_backward(0));
  SHARDLAB_RETURN_IF_ERROR(ps.embeddings_backward(dx));
  SHARDLAB_RETURN_IF_ERROR(access.post_backward(0));
  return loss_sums;
}

}  // namespace shardlab::runtime::model
