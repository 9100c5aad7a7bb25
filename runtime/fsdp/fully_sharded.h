// FullyShardedModel: PyTorch FSDP's runtime for one rank, as a model::ParamAccess.
//
// The model calls pre/post_forward and pre/post_backward per layer; this class maps
// layers to FSDP units (wrap policy), unshards a unit before its first use (all-gather
// into a padded full buffer), reshards after (free) per the strategy, prefetches the next
// unit (forward_prefetch, BACKWARD_PRE / BACKWARD_POST; order recorded in forward), and
// reduces each unit's gradient after its backward: pad to W·S, divide by PyTorch's
// pre-factor, reduce-scatter (sum), divide by the post-factor, then assign-or-accumulate
// into the gradient shard. Reductions are asynchronous: issued in post_backward, waited
// for one unit later and at the latest in end_iteration (NOTE [Asynchronous gradient
// reduction] in fully_sharded.cc), so gradient shards are final only after end_iteration. NO_SHARD all-reduces instead;
// HYBRID_SHARD reduce-scatters inside a node-sized group and all-reduces across the replica groups. Under no_sync the
// unsharded gradients accumulate and are reduced by the next synced backward.
//
// Module buffers (BatchNorm statistics, position ids) are not sharded: every rank holds
// them whole, floating ones in buffer_dtype; state dicts see their declared dtype.
//
// Training state machine: IDLE → FORWARD → BACKWARD → IDLE, checked at each hook.
//
// Thread safety: one rank's thread.
#pragma once

#include <array>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "runtime/comm/communicator.h"
#include "runtime/device/device.h"
#include "runtime/fsdp/flat_parameter.h"
#include "runtime/fsdp/options.h"
#include "runtime/optim/optimizer.h"

namespace shardlab::runtime::fsdp {

// Which layers form units. Layers of `unit_of_layer[l] == -1` go to the root unit.
struct WrapPlan {
  std::vector<int> unit_of_layer;
  // Every layer its own unit (the transformer-layer policy applied to each layer).
  static WrapPlan per_layer(int num_layers);
  // One unit for everything (no auto-wrap).
  static WrapPlan single(int num_layers);
  // The transformer-layer policy: each layer whose module class is in `classes` is its
  // own unit; the other layers go to the root unit.
  static WrapPlan by_class(const std::vector<model::ParamSpec>& specs, int num_layers,
                           const std::vector<std::string>& classes);
  // Consecutive layers grouped until a unit holds at least min_num_params elements.
  static WrapPlan by_size(const std::vector<model::ParamSpec>& specs, int num_layers, std::int64_t min_num_params);
};

enum class TrainingState { kIdle, kForward, kBackward, kSummonFullParams };

struct CollectiveCounts {
  int all_gather = 0, reduce_scatter = 0, all_reduce = 0;
  friend bool operator==(const CollectiveCounts&, const CollectiveCounts&) = default;
};

class FullyShardedModel final : public model::ParamAccess {
 public:
  // `full_init` holds every parameter's initial value in spec order (flat fp32, on any
  // host-visible device: the host, where a model is built before FSDP wraps it); only this
  // rank's shard is kept.
  //
  // NOTE [Initialization unit by unit]: as PyTorch FSDP does with `device_id` for a module
  // built on the CPU, the units are initialized one after the other: a unit's parameters
  // move to `dev` ("unitN.init"), rank 0's values are broadcast under sync_module_states,
  // they are flattened into the padded flat parameter ("unitN.init_flat"; the moved ones
  // are freed), the shard is cloned out of it, and the flat parameter is freed. So `dev`
  // never holds more than the shards made so far plus two copies of one unit (category
  // parameters), not the whole model: a model that fits sharded does not run out of
  // memory at initialization.
  static Result<std::unique_ptr<FullyShardedModel>> create(comm::Communicator& comm, device::Device& dev,
                                                           std::vector<model::ParamSpec> specs, const WrapPlan& plan,
                                                           FsdpOptions options, const Tensor& full_init);
  // The same for a model with module buffers. `buffer_init[i]` is buffer i's initial
  // value in its declared dtype and shape (host-visible; left unchanged). Every rank keeps
  // every buffer whole on `dev` (also under CPU offload, as PyTorch does). With
  // sync_module_states, rank 0's values are broadcast first; then floating buffers are
  // cast to options.buffer_dtype when set (bf16: round to nearest even); integer buffers
  // keep their dtype. Buffer dtypes: fp32, bf16 or int64 (what collectives move).
  // Memory category kOther: there is no buffer category, and buffers are not parameters
  // (CPU offload moves parameters off the compute device, never buffers).
  static Result<std::unique_ptr<FullyShardedModel>> create(comm::Communicator& comm, device::Device& dev,
                                                           std::vector<model::ParamSpec> specs, const WrapPlan& plan,
                                                           FsdpOptions options, const Tensor& full_init,
                                                           std::vector<model::BufferSpec> buffer_specs,
                                                           const std::vector<Tensor>& buffer_init);

  // ParamAccess (called by the model).
  Result<Tensor> param(int index) override;
  Result<Tensor> grad(int index) override;
  Status pre_forward(int layer) override;
  Status post_forward(int layer) override;
  Status pre_backward(int layer) override;
  Status post_backward(int layer) override;

  // PyTorch's summon_full_params: with `on`, unshard every unit (state SUMMON_FULL_PARAMS;
  // param() views are valid); with `on` false, reshard them all (back to IDLE).
  Status summon_full_params(bool on);

  // Begins/ends an iteration's forward+backward. With no_sync, gradients are not reduced.
  Status begin_iteration(bool no_sync = false);
  Status end_iteration();
  // Forgets accumulated gradient shards (optimizer.zero_grad()).
  void zero_grad();
  // Global gradient norm over all shards (p = 2 or inf), padding excluded; clips when
  // max_norm > 0. Returns the norm before clipping.
  Result<double> clip_grad_norm(double max_norm, bool inf_norm = false);
  // One optimizer step on every shard.
  Status optimizer_step();
  Status set_optimizer(const optim::OptimizerConfig& config);

  // Gathers the full (unpadded) parameters / gradients in spec order into `out` (fp32,
  // total_numel(specs) elements). Collective: every rank must call it.
  Status gather_full_params(const Tensor& out);
  Status gather_full_grads(const Tensor& out);
  // Optimizer state tensor `k` (e.g. AdamW's exp_avg) of every trainable unit; frozen
  // units' parameters are left untouched in `out`.
  Status gather_full_optimizer_state(int k, const Tensor& out);

  // Module buffer `index` as the model uses it: shaped, in buffer_dtype if floating and
  // buffer_dtype is set, else in its declared dtype. Valid for the model's lifetime;
  // writes through it (e.g. running statistics) persist.
  Result<Tensor> buffer(int index);
  // Buffer `index` as a state dict holds it: a new tensor in the declared dtype (a
  // buffer_dtype copy is widened back, as FSDP upcasts buffers when saving).
  Result<Tensor> buffer_state(int index);
  // Sets buffer `index` from a state-dict value of its shape: a floating value (fp32, bf16)
  // is cast to the buffer's dtype, an integer one must be int64. Not collective.
  Status load_buffer(int index, const Tensor& value);
  const std::vector<model::BufferSpec>& buffer_specs() const { return buffer_specs_; }
  int num_buffers() const { return static_cast<int>(buffer_specs_.size()); }

  const std::vector<FlatParameter>& units() const { return units_; }
  const std::vector<model::ParamSpec>& specs() const { return specs_; }
  // Where parameter i starts in the unpadded, spec-ordered flat view (gather_full_* output).
  std::int64_t model_offset(int i) const { return model_offset_[static_cast<std::size_t>(i)]; }
  const std::vector<optim::Optimizer>& optimizers() const { return optimizers_; }
  std::vector<optim::Optimizer>& mutable_optimizers() { return optimizers_; }
  const FsdpOptions& options() const { return options_; }
  comm::Communicator& world() { return comm_; }
  device::Device& device() { return dev_; }
  // This rank's index among the ranks that hold distinct shards (0 for NO_SHARD).
  int shard_rank();
  // True on the ranks that write sharded checkpoint files: one replica of each shard
  // (HYBRID_SHARD: the first node; NO_SHARD: rank 0).
  bool writes_shard_files();
  int num_units() const { return static_cast<int>(units_.size()); }
  int max_live_unsharded() const { return max_live_; }        // non-root units, peak
  const CollectiveCounts& counts() const { return counts_; }  // this iteration
  TrainingState training_state() const { return state_; }
  int shard_world_size() const;

 private:
  FullyShardedModel(comm::Communicator& comm, device::Device& dev, FsdpOptions options);
  // Copies the initial buffers, broadcasts them under sync_module_states, casts floating
  // ones to buffer_dtype.
  Status init_buffers(const std::vector<Tensor>& init);
  Status unshard(int unit, bool prefetch);
  Status wait_unsharded(int unit);
  Status reshard(int unit);
  // NOTE [Resharding to a smaller group]: keeps this rank's part of the unit for its group
  // of reshard_after_forward_size ranks, then reshards.
  Status reshard_to_post_forward(int unit);
  // NOTE [Asynchronous gradient reduction] (fully_sharded.cc): issues `unit`'s reduction
  // and moves every older pending one on a stage; drain_reductions retires them all.
  Status reduce_grad(int unit);
  Status advance_reduction(std::size_t i, bool& finished);
  Status drain_reductions();
  bool reduces_in_place(const FlatParameter& fp) const;
  bool reshard_after_forward() const;
  int live_non_root() const;
  void delay(DelayPoint p) const;
  comm::Communicator& shard_comm();
  // The gradient shard as fp32 (itself, or a widened copy under keep_low_precision_grads),
  // and the way back.
  Result<Tensor> grad_fp32(const FlatParameter& fp);
  Status store_grad(FlatParameter& fp, const Tensor& value);
  // All-gathers pick(unit) (a shard-sized tensor, or undefined to skip the unit) and copies
  // out the unpadded parameters.
  Status gather_full(const char* what, const std::function<Tensor(const FlatParameter&, int)>& pick, const Tensor& out);
  // FSDP2 (NOTE [FSDP2 copy-in and copy-out] in fully_sharded.cc): `out`: the rank-ordered
  // shards of `by_rank` (all-gathered) into the parameters' `unsharded` buffer; otherwise
  // `unsharded` (gradients) into the rank-ordered chunks a reduce-scatter takes. `by_rank`
  // may hold the shards of ranks first_rank … first_rank + by_rank.numel() / S - 1 only.
  Status copy_pieces(const FlatParameter& fp, const Tensor& by_rank, const Tensor& unsharded, bool out,
                     int first_rank = 0);

  comm::Communicator& comm_;
  device::Device& dev_;
  FsdpOptions options_;
  std::unique_ptr<comm::Communicator> shard_group_, replica_group_;  // HYBRID_SHARD
  std::unique_ptr<comm::Communicator> post_forward_group_;           // reshard_after_forward=N
  std::vector<model::ParamSpec> specs_;
  std::vector<model::BufferSpec> buffer_specs_;
  std::vector<Tensor> buffers_;  // whole on every rank, in their compute dtype
  std::vector<FlatParameter> units_;
  std::vector<int> unit_of_param_;
  std::vector<std::int64_t> model_offset_;     // where each parameter starts in the unpadded model order
  std::vector<int> first_layer_, last_layer_;  // per unit, in forward order
  int root_unit_ = -1;
  std::vector<int> forward_order_, recorded_order_;
  std::vector<optim::Optimizer> optimizers_;
  TrainingState state_ = TrainingState::kIdle;
  bool no_sync_ = false;
  int max_live_ = 0;
  CollectiveCounts counts_;
  // Gradient reductions issued and not yet retired, oldest first (NOTE [Asynchronous
  // gradient reduction]); they hold their buffers until then.
  struct PendingReduction {
    int unit = -1;
    bool replica_stage = false;  // HYBRID_SHARD: the replica all-reduce is in flight
    comm::WorkPtr work;
    Tensor to_reduce;  // the unsharded gradient (in reduce_dtype) the collective reads
    Tensor reduced;    // this rank's reduced shard (NO_SHARD: to_reduce itself)
  };
  std::deque<PendingReduction> pending_reductions_;
};

}  // namespace shardlab::runtime::fsdp
