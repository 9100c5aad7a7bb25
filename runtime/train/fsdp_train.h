// FSDP training of a model (the MLP or BERT), and the unsharded oracle it must equal bitwise.
//
// train_fsdp: each rank trains its slice of the global batch (rows [r·B/W, (r+1)·B/W)),
// in `grad_accumulation` micro-batches (all but the last under no_sync). The loss is
// normalized by the global count of valid targets of the step (all-reduced across ranks,
// summed over micro-batches; per loss term, e.g. QA's start and end): each rank's
// gradient is scaled by W / count so that FSDP's average over ranks gives exactly the
// single-process mean — never a mean of per-rank means, and a rank without any valid
// target contributes zeros, not NaN. Then optional global grad-norm clipping and a
// sharded optimizer step.
//
// NOTE [Loss without targets]
// When a loss term has no valid target in the whole step (every label -100 on every rank
// and micro-batch), its mean is over nothing: the step's loss is NaN, as PyTorch's mean
// cross-entropy (and transformers' loss / num_items_in_batch) gives, and the term's
// gradients are 0, as PyTorch's backward gives. Only the global count decides: a rank or
// micro-batch without targets while others have some is finite (docs/troubleshooting.md).
// compare() treats NaN losses on both sides as equal.
//
// train_oracle: one process, no sharding, the same concatenated global batch. It computes
// each rank's chunk gradient separately and combines them exactly as the collectives do
// on the sim backend (pre-divide, sum in rank order — per node then across nodes for
// HYBRID_SHARD — post-divide), so gradients and parameters must match the sim run bit for
// bit in fp32. Clipping sums the norm in a different order, so with max_grad_norm > 0 the
// comparison needs a tolerance.
//
// Timing mode (the simulator's phantom tensors, NOTE [Phantom storage] in
// runtime/core/tensor.h): train_fsdp runs unchanged on a device whose storages are
// deferred, and its host reads are made phantom-safe — the program (ops, collectives,
// allocations) stays exactly that of numerics mode, only values are dropped:
//  - initial parameters: the host copy the units move from (NOTE [Initialization unit
//    by unit] in runtime/fsdp/fully_sharded.h) is a deferred storage nothing charges,
//    neither copied from initial_params nor initialized (no host pass over the full
//    model); the device's allocations and copies of each unit are made as in numerics mode;
//  - the global target count: its all_reduce is issued as always; the values read back
//    are whatever the device holds, and they only scale gradients (never change which
//    ops run);
//  - losses and grad norms: NaN per step (metrics.json writes null);
//  - last_grads / final_params: gathered as in numerics mode (same collectives), not
//    copied to the host (left empty).
// FullyShardedModel::clip_grad_norm decides on the host whether to scale by the clip
// coefficient; in timing mode the norm reads as 0, so the scale ops are not charged
// (a numerics run that clips charges them): known difference, see sim/timing/op_graph.h.
#pragma once

#include <array>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/comm/communicator.h"
#include "runtime/core/clock.h"
#include "runtime/device/device.h"
#include "runtime/fsdp/checkpoint.h"
#include "runtime/fsdp/fully_sharded.h"
#include "runtime/model/bert.h"
#include "runtime/model/mlp.h"
#include "runtime/model/model.h"
#include "runtime/optim/optimizer.h"

namespace shardlab::runtime::train {

// kPerLayer: every layer its own unit; kByClass: layers whose module class is in
// wrap_classes (the transformer-layer policy), the rest in the root unit; kBySize:
// min_num_params; kNone: one unit.
enum class WrapPolicy { kPerLayer, kNone, kBySize, kByClass };

enum class ModelKind { kMlp, kBert };

// Rows [first_row, first_row + rows) of step `step`'s global batch, on `dev`.
using DataSource = std::function<Result<model::Batch>(device::Device& dev, std::int64_t step, std::int64_t first_row,
                                                      std::int64_t rows)>;

struct FsdpTrainResult;

// Fixed points of a rank's host program, reported through FsdpTrainOptions::on_marker
// in program order (timing-mode capture places them in its op graph).
enum class TrainMarker {
  kStepBegin,     // top of a step, right after its start time is taken
  kStepEnd,       // end of a step, right after its step time is taken
  kMemorySample,  // right after a sample was appended to memory_timeline
};

struct FsdpTrainOptions {
  ModelKind model_kind = ModelKind::kMlp;
  model::MlpConfig model;   // kMlp
  model::BertOptions bert;  // kBert
  DataSource data;          // empty: the model's seeded synthetic batches
  // Initial parameters (flat fp32, spec order, e.g. loaded from a checkpoint); empty: the
  // model's seeded initialization. Read once, when the FSDP model is built: the trainer
  // and train_fsdp drop their references then, so a caller that hands over the last one
  // (train_fsdp(…, std::move(options))) has the host copy freed before the first step.
  std::shared_ptr<const std::vector<float>> initial_params;
  int steps = 3;
  std::int64_t global_batch = 32;  // divisible by world size × grad_accumulation
  int grad_accumulation = 1;
  double max_grad_norm = 0.0;  // 0: no clipping
  bool clip_inf_norm = false;  // clip by the max |g| (norm_type = inf) instead of the 2-norm
  std::uint64_t seed = 0;
  WrapPolicy wrap = WrapPolicy::kPerLayer;
  std::int64_t min_num_params = 0;        // for kBySize
  std::vector<std::string> wrap_classes;  // for kByClass; empty: the model's (Linear for the MLP, BertLayer for BERT)
  fsdp::FsdpOptions fsdp;
  optim::OptimizerConfig optimizer;
  // Sample this rank's memory (bytes per category) at every FSDP hook and after each
  // optimizer step into FsdpTrainResult::memory_timeline (for memory.csv and reports) —
  // in the first `memory_timeline_steps` steps only. A step's pattern repeats, and the
  // peaks of the whole run are kept apart from the timeline (FsdpTrainResult::memory); a
  // timeline of every step would grow without bound (a small MLP samples 13 times a
  // step, BERT-base 57) and cost host time in every step: about a tenth of a
  // small MLP's step on a CPU, which the simulator does not charge.
  bool record_memory_timeline = false;
  int memory_timeline_steps = 20;  // >= 0
  // After the last step, gather the full gradients and parameters into
  // FsdpTrainResult::last_grads / final_params, for the comparison with unsharded training
  // and the outputs. They are not part of training: they run after its last step and
  // after FsdpTrainResult::memory is taken, so neither the step times nor the memory peaks
  // include them. Off in timing mode (phantom tensors hold no values, and two full-size
  // fp32 buffers could exceed a device that the training itself fits).
  bool gather_results = true;
  // With gather_results, whether final_params is gathered too (false: left empty, for
  // callers that want only the gradients, e.g. `shardlab grads`).
  bool gather_params = true;
  // The last step ends once its gradients are reduced (and clipped): no optimizer step, so
  // the parameters stay where the step found them. Checkpoints cannot be combined with it
  // (validate: INVALID_ARGUMENT), since they would save a step that did not update.
  bool skip_last_optimizer_step = false;
  // Checkpoints (runtime/fsdp/checkpoint.h): save into `dir` every `every_steps` steps and
  // after the last; with `resume`, continue from the checkpoint `dir/latest` names (its
  // parameters, optimizer state and step count), so the run ends exactly where an
  // uninterrupted one does.
  // Called after every completed step with the result so far (e.g. a progress line).
  std::function<void(const FsdpTrainResult&)> on_step;
  // Called at each TrainMarker with the 0-based step; empty: none.
  std::function<void(TrainMarker, int step)> on_marker;
  // Called at the top of every step (0-based, before anything of the step runs); an error
  // ends the run with it (fault injection: a rank that crashes or hangs at a step).
  std::function<Status(int step)> before_step;
  // When train_fsdp fails after its trainer was made: receives the result up to the
  // failure (the completed steps' losses and times, the memory timeline and the memory
  // statistics so far), so that a failed run's outputs keep what it had. Not null: must
  // outlive the call. Untouched on success.
  FsdpTrainResult* progress_on_failure = nullptr;
  struct Checkpointing {
    std::string dir;  // empty: none
    int every_steps = 0;
    bool resume = false;
    // NOTE [Resume]: `resume` needs a checkpoint in `dir` (INVALID_ARGUMENT otherwise, so a
    // typo in dir never silently restarts training); with `resume_if_present` a run
    // without one starts from step 1.
    bool resume_if_present = false;
    // What the run records about itself in each checkpoint (a JSON object; train_fsdp adds
    // the seed and the world size).
    std::string run;
    fsdp::StateDictType type = fsdp::StateDictType::kFull;
  } checkpoint;
};

struct MemorySample {
  int step = 0;       // 0-based optimizer step
  std::string event;  // "pre_forward:3", "post_backward:0", "optimizer_step", ...
  Nanos time = 0;     // the rank's clock
  std::array<std::int64_t, kNumMemoryCategories> bytes{};
};

struct FsdpTrainResult {
  std::vector<double> losses;  // global mean loss per step
  std::vector<Nanos> step_times;
  std::vector<Nanos> step_starts;  // the rank's clock when each step began
  // Per step: bytes between host and device memory (Device::host_transfer_bytes, the
  // compute device and the offload host together).
  std::vector<std::int64_t> host_transfer_bytes;
  int first_step = 0;               // > 0 when resumed from a checkpoint (losses start there)
  std::string resumed_from;         // the step directory a resumed run loaded; empty: none
  std::string resumed_what;         // what it was: step, state dict type, the run that saved it
  std::vector<float> final_params;  // full, unpadded, spec order (when gather_results)
  std::vector<float> last_grads;    // full gradients of the last step, after clipping (when gather_results)
  std::vector<double> grad_norms;   // per step, when clipping
  int max_live_unsharded = 0;
  int num_units = 0;
  int num_trainable_units = 0;                 // units with at least one requires_grad parameter
  std::vector<fsdp::CollectiveCounts> counts;  // per micro-batch iteration
  MemoryStats memory;
  std::vector<MemorySample> memory_timeline;  // when record_memory_timeline
};

Status validate(const FsdpTrainOptions& options, int world_size);
std::unique_ptr<model::Model> make_model(const FsdpTrainOptions& options);

// NOTE [Host memory plan]
// A numerics run on the simulator keeps real values in this host's memory: every rank's
// shard of the parameters, their gradients and the optimizer state, the host-built model
// the ranks start from, and the gathered results (and the oracle's unsharded copy). That
// is at least kNumericsBytesPerParameter bytes a parameter whatever the world size (fp32
// parameters and gradients over all shards, the host-built model, the gathered gradients),
// so a model whose plan passes the host's physical memory cannot run here: it is refused
// before anything is allocated (INVALID_ARGUMENT naming the parameter count, the planned
// bytes and the host's), where it would otherwise end in bad_alloc or the OOM killer.
// Timing mode holds no values (phantom tensors) and needs no such plan.
inline constexpr std::int64_t kNumericsBytesPerParameter = 16;
// This machine's physical memory in bytes (0 when the system does not say).
std::int64_t host_memory_bytes();
// Checks the plan of `options` (validated) against `host_bytes` (0: unknown, no check).
Status check_numerics_host_memory(const FsdpTrainOptions& options, std::int64_t host_bytes);
fsdp::WrapPlan wrap_plan(const FsdpTrainOptions& options, const model::Model& model);

// One rank's FSDP training loop, step by step (train_fsdp runs it to the end).
class FsdpTrainer {
 public:
  static Result<std::unique_ptr<FsdpTrainer>> create(comm::Communicator& comm, device::Device& dev, const Clock& clock,
                                                     const FsdpTrainOptions& options);
  // One optimizer step over the step's global batch; records into result().
  Status step();
  fsdp::FullyShardedModel& model() { return *fsdp_; }
  const model::Model& network() const { return *model_; }
  int steps_done() const { return step_; }
  // After loading a checkpoint of `steps` completed steps: continue with step `steps`.
  void skip_to(int steps) {
    step_ = steps;
    result_.first_step = steps;
  }
  FsdpTrainResult& result() { return result_; }

 private:
  FsdpTrainer(comm::Communicator& comm, device::Device& dev, const Clock& clock, const FsdpTrainOptions& options);
  comm::Communicator& comm_;
  device::Device& dev_;
  const Clock& clock_;
  FsdpTrainOptions options_;
  std::unique_ptr<model::Model> model_;
  std::unique_ptr<fsdp::FullyShardedModel> fsdp_;
  std::unique_ptr<model::ParamAccess> sampler_;  // forwards to fsdp_, sampling memory at each hook
  Tensor loss_, counts_;
  int step_ = 0;
  FsdpTrainResult result_;
};

// Runs options.steps steps, then gathers the final parameters (and the last step's gradients).
Result<FsdpTrainResult> train_fsdp(comm::Communicator& comm, device::Device& dev, const Clock& clock,
                                   FsdpTrainOptions options);
// With `start_from` (a checkpoint step directory, FsdpTrainResult::resumed_from), the
// oracle starts where the resumed run did: parameters, optimizer state and step count
// loaded unsharded from the same files (fsdp::load_checkpoint_unsharded), then trains the
// remaining steps; its losses begin at that step, as the run's do.
Result<FsdpTrainResult> train_oracle(device::Device& dev, const FsdpTrainOptions& options, int world_size,
                                     const std::string& start_from = {});

// NOTE [Default tolerance]
// The oracle repeats the run's casts (param_dtype, reduce_dtype, keep_low_precision_grads,
// BERT's bf16 activations) and the simulator's reduction order, so a simulated run equals
// it bit for bit; only gradient clipping (its norm is summed in another order) and a
// backend that reduces in its own order (Open MPI, HCCL) leave last-bit differences. Those
// are judged with the tolerance of the least precise dtype the run computes or reduces in
// — PyTorch's torch.testing.assert_close defaults for that dtype:
//  - fp32: rtol 1.3e-6 (about 11 fp32 ulps at 1, 2^-23 each), atol 1e-5;
//  - bf16: rtol 1.6e-2 (two bf16 ulps at 1: an 8-bit significand, 2·2^-7), atol 1e-5.
// A sum of W values added in another order differs by a few roundings of its dtype, each
// at most half an ulp of the running sum; rtol covers them for values well above atol.
struct Tolerance {
  double rtol = 1.3e-6, atol = 1e-5;
  std::string dtype = "fp32";  // the dtype it was derived from
};
Tolerance default_tolerance(const FsdpTrainOptions& options);

// How a run compares with the oracle: bitwise, or the largest differences and whether
// they are within |Δ| <= atol + rtol·|oracle| (PyTorch's fp32 assert_close defaults).
struct Comparison {
  bool bitwise = false;
  bool within_tolerance = false;
  double max_grad_diff = 0, max_param_diff = 0, max_loss_diff = 0;
  double rtol = 1.3e-6, atol = 1e-5;
  std::string describe() const;
};
Comparison compare(const FsdpTrainResult& candidate, const FsdpTrainResult& oracle, double rtol = 1.3e-6,
                   double atol = 1e-5);

}  // namespace shardlab::runtime::train
