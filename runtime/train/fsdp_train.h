// FSDP training of the MLP, and the unsharded oracle it must equal bitwise.
//
// train_fsdp: each rank trains its slice of the global batch (rows [r·B/W, (r+1)·B/W)),
// in `grad_accumulation` micro-batches (all but the last under no_sync), with the loss
// scaled by 1/(B/W) as PyTorch users do; FSDP averages over ranks; then optional global
// grad-norm clipping and a sharded optimizer step.
//
// train_oracle: one process, no sharding, the same concatenated global batch. It computes
// each rank's chunk gradient separately and combines them exactly as the collectives do
// on the sim backend (pre-divide, sum in rank order — per node then across nodes for
// HYBRID_SHARD — post-divide), so gradients and parameters must match the sim run bit for
// bit in fp32. Clipping sums the norm in a different order, so with max_grad_norm > 0 the
// comparison needs a tolerance.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/fsdp/fully_sharded.h"
#include "runtime/optim/optimizer.h"
#include "runtime/comm/communicator.h"
#include "runtime/core/clock.h"
#include "runtime/device/device.h"
#include "runtime/model/mlp.h"

namespace shardlab::runtime::train {

// kPerLayer: every layer its own unit; kByClass: layers whose module class is in
// wrap_classes (the transformer-layer policy), the rest in the root unit; kBySize:
// min_num_params; kNone: one unit.
enum class WrapPolicy { kPerLayer, kNone, kBySize, kByClass };

struct FsdpTrainOptions {
  model::MlpConfig model;
  int steps = 3;
  std::int64_t global_batch = 32;  // divisible by world size × grad_accumulation
  int grad_accumulation = 1;
  double max_grad_norm = 0.0;      // 0: no clipping
  bool clip_inf_norm = false;      // clip by the max |g| (norm_type = inf) instead of the 2-norm
  std::uint64_t seed = 0;
  WrapPolicy wrap = WrapPolicy::kPerLayer;
  std::int64_t min_num_params = 0;  // for kBySize
  std::vector<std::string> wrap_classes = {"Linear"};  // for kByClass
  fsdp::FsdpOptions fsdp;
  optim::OptimizerConfig optimizer;
};

struct FsdpTrainResult {
  std::vector<double> losses;          // global mean loss per step
  std::vector<Nanos> step_times;
  std::vector<float> final_params;     // full, unpadded, spec order
  std::vector<float> last_grads;       // full gradients of the last step (after clipping)
  std::vector<double> grad_norms;      // per step, when clipping
  int max_live_unsharded = 0;
  int num_units = 0;
  int num_trainable_units = 0;  // units with at least one requires_grad parameter
  std::vector<fsdp::CollectiveCounts> counts;  // per micro-batch iteration
  MemoryStats memory;
};

Status validate(const FsdpTrainOptions& options, int world_size);
fsdp::WrapPlan wrap_plan(const FsdpTrainOptions& options, const model::Mlp& mlp);

// One rank's FSDP training loop, step by step (train_fsdp runs it to the end).
class FsdpTrainer {
 public:
  static Result<std::unique_ptr<FsdpTrainer>> create(comm::Communicator& comm, device::Device& dev, const Clock& clock,
                                                     const FsdpTrainOptions& options);
  // One optimizer step over the step's global batch; records into result().
  Status step();
  fsdp::FullyShardedModel& model() { return *fsdp_; }
  int steps_done() const { return step_; }
  FsdpTrainResult& result() { return result_; }

 private:
  FsdpTrainer(comm::Communicator& comm, device::Device& dev, const Clock& clock, const FsdpTrainOptions& options);
  comm::Communicator& comm_;
  device::Device& dev_;
  const Clock& clock_;
  FsdpTrainOptions options_;
  model::Mlp mlp_;
  std::unique_ptr<fsdp::FullyShardedModel> fsdp_;
  Tensor x_, labels_, loss_;
  int step_ = 0;
  FsdpTrainResult result_;
};

// Runs options.steps steps, then gathers the final parameters (and the last step's gradients).
Result<FsdpTrainResult> train_fsdp(comm::Communicator& comm, device::Device& dev, const Clock& clock,
                                   const FsdpTrainOptions& options);
Result<FsdpTrainResult> train_oracle(device::Device& dev, const FsdpTrainOptions& options, int world_size);

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
