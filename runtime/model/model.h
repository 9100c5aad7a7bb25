// Model: what the FSDP trainer, the oracle and `shardlab grads` need from a model.
//
// A model declares its parameters (ParamSpec, in forward order), initializes them,
// makes seeded synthetic micro-batches, counts the valid targets of a batch, and runs
// one forward+backward through a ParamAccess. Loss normalization is the trainer's job:
// a model returns the *sum* of per-target losses of each loss term and accumulates
// term_scale[t] × ∂(that sum)/∂θ, so the trainer can divide by the global count of
// valid targets across ranks and micro-batches (never a mean of per-rank means).
//
// Determinism: everything random (init, data, dropout masks) comes from the project's
// Rng keyed by (seed, step, global row, layer, site) — never by the rank — so a batch row
// sees the same dropout mask on any world size and any backend.
//
// Thread safety: const methods only; one instance may serve many ranks.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "runtime/core/status.h"
#include "runtime/core/tensor.h"
#include "runtime/device/device.h"
#include "runtime/model/module.h"

namespace shardlab::runtime::model {

// One micro-batch: named tensors on the device ("x"/"labels" for the MLP; "input_ids",
// "attention_mask", "token_type_ids", "labels" or "start_positions"/"end_positions" for
// BERT), all with `rows` as their first dimension.
struct Batch {
  std::int64_t rows = 0;
  std::map<std::string, Tensor> tensors;
  // Host copies of the int64 tensors (ids, labels, positions), kept by put() and
  // slice_batch: the values host code reads (validation, target counts, the rows a head
  // selects) without a device round trip (NOTE [Host access] in runtime/device/device.h).
  std::map<std::string, std::vector<std::int64_t>> host_ints;
  bool has(const std::string& name) const { return tensors.count(name) != 0; }
  // The named tensor, or INVALID_ARGUMENT naming the missing tensor.
  Result<Tensor> get(const std::string& name) const;
  // The host copy of the named int64 tensor, or INVALID_ARGUMENT naming it.
  Result<const std::vector<std::int64_t>*> ints(const std::string& name) const;
  // Makes `name` on `dev` ([shape], an activation) and uploads `values` (numel(shape) of
  // them); int64 values are also kept in host_ints.
  Status put(device::Device& dev, const std::string& name, const Shape& shape, std::vector<std::int64_t> values);
  Status put(device::Device& dev, const std::string& name, const Shape& shape, const std::vector<float>& values);
};

// `rows` rows of every tensor of `batch`, copied to `dev` as activations: row i is row
// (first + i) mod batch.rows, so a batch file shorter than a run cycles through its rows.
Result<Batch> slice_batch(const Batch& batch, device::Device& dev, std::int64_t first, std::int64_t rows);

// Where a micro-batch sits in the run (keys the dropout masks).
struct ForwardContext {
  std::uint64_t seed = 0;
  std::int64_t step = 0;
  std::int64_t first_row = 0;  // global index of the batch's row 0 within the step's global batch
  bool training = true;        // false: no dropout
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const std::vector<ParamSpec>& params() const = 0;
  // Layers in forward order (ParamSpec::layer indexes them); hooks are called per layer.
  virtual int num_layers() const = 0;
  // Module classes the transformer-layer wrap policy wraps by default ("BertLayer").
  virtual std::vector<std::string> default_wrap_classes() const = 0;
  // Fills params (views in spec order) from Rng(seed).
  virtual Status init_params(device::Device& dev, const std::vector<Tensor>& params, std::uint64_t seed) const = 0;

  // Loss = Σ_t weight[t] · (Σ per-target losses of term t) / (global valid targets of term t).
  virtual std::vector<double> loss_term_weights() const { return {1.0}; }
  // Valid targets per loss term in `batch` (e.g. MLM labels != -100). Host-visible batch.
  virtual Result<std::vector<std::int64_t>> count_targets(const Batch& batch) const = 0;
  // Rows [first_row, first_row + rows) of step `step`'s synthetic global batch; each row
  // is a pure function of (seed, step, row).
  virtual Result<Batch> synthetic_batch(device::Device& dev, std::uint64_t seed, std::int64_t step,
                                        std::int64_t first_row, std::int64_t rows) const = 0;
  // One forward+backward: adds term_scale[t] · ∂(Σ losses of term t)/∂θ into the
  // gradients `access` provides and returns Σ losses per term.
  virtual Result<std::vector<double>> forward_backward(device::Device& dev, ParamAccess& access, const Batch& batch,
                                                       const std::vector<float>& term_scale,
                                                       const ForwardContext& ctx) const = 0;
};

}  // namespace shardlab::runtime::model
