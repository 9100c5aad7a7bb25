#include "runtime/fsdp/fully_sharded.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>

#include "runtime/core/check.h"

namespace shardlab::runtime::fsdp {

using comm::ReduceOp;

WrapPlan WrapPlan::per_layer(int num_layers) {
  WrapPlan p;
  for (int l = 0; l < num_layers; ++l) p.unit_of_layer.push_back(l);
  return p;
}

WrapPlan WrapPlan::single(int num_layers) {
  WrapPlan p;
  p.unit_of_layer.assign(static_cast<std::size_t>(num_layers), -1);
  return p;
}

WrapPlan WrapPlan::by_class(const std::vector<model::ParamSpec>& specs, int num_layers,
                            const std::vector<std::string>& classes) {
  WrapPlan p;
  p.unit_of_layer.assign(static_cast<std::size_t>(num_layers), -1);
  for (const auto& s : specs) {
    if (std::find(classes.begin(), classes.end(), s.module_class) != classes.end()) {
      p.unit_of_layer[static_cast<std::size_t>(s.layer)] = s.layer;
    }
  }
  return p;
}

WrapPlan WrapPlan::by_size(const std::vector<model::ParamSpec>& specs, int num_layers, std::int64_t min_num_params) {
  std::vector<std::int64_t> per_layer(static_cast<std::size_t>(num_layers), 0);
  for (const auto& s : specs) per_layer[static_cast<std::size_t>(s.layer)] += *checked_numel(s.shape);
  WrapPlan p;
  int unit = 0;
  std::int64_t acc = 0;
  for (int l = 0; l < num_layers; ++l) {
    p.unit_of_layer.push_back(unit);
    acc += per_layer[static_cast<std::size_t>(l)];
    if (acc >= min_num_params) {
      ++unit;
      acc = 0;
    }
  }
  // A trailing group below the threshold joins the root unit, as in PyTorch.
  if (acc > 0) {
    for (int& u : p.unit_of_layer)
      if (u == unit) u = -1;
  }
  return p;
}

FullyShardedModel::FullyShardedModel(comm::Communicator& comm, device::Device& dev, FsdpOptions options)
    : comm_(comm), dev_(dev), options_(std::move(options)) {}

int FullyShardedModel::shard_world_size() const {
  if (options_.strategy == ShardingStrategy::kNoShard) return 1;
  if (is_hybrid(options_.strategy)) return shard_group_->size();
  return comm_.size();
}

int FullyShardedModel::shard_rank() {
  return options_.strategy == ShardingStrategy::kNoShard ? 0 : shard_comm().rank();
}

bool FullyShardedModel::writes_shard_files() {
  if (options_.strategy == ShardingStrategy::kNoShard) return comm_.rank() == 0;
  if (is_hybrid(options_.strategy)) return replica_group_->rank() == 0;
  return true;
}

comm::Communicator& FullyShardedModel::shard_comm() { return is_hybrid(options_.strategy) ? *shard_group_ : comm_; }

Result<std::unique_ptr<FullyShardedModel>> FullyShardedModel::create(comm::Communicator& comm, device::Device& dev,
                                                                     std::vector<model::ParamSpec> specs,
                                                                     const WrapPlan& plan, FsdpOptions options,
                                                                     const Tensor& full_init) {
  return create(comm, dev, std::move(specs), plan, std::move(options), full_init, {}, {});
}

namespace {

// Reports an FSDP phase's begin now and its end when the scope closes, on every path
// (FsdpOptions::on_fsdp_event).
class PhaseScope {
 public:
  PhaseScope(const FsdpOptions& options, FsdpEvent event) : hook_(options.on_fsdp_event), event_(event) {
    if (hook_) hook_(event_);
  }
  ~PhaseScope() {
    if (!hook_) return;
    event_.begin = false;
    hook_(event_);
  }
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  const std::function<void(const FsdpEvent&)>& hook_;
  FsdpEvent event_;
};

const char* phase_name(TrainingState s) {
  switch (s) {
    case TrainingState::kForward: return "forward";
    case TrainingState::kBackward: return "backward";
    case TrainingState::kSummonFullParams: return "summon_full_params";
    case TrainingState::kIdle: break;
  }
  return "idle";
}
Status validate_buffers(const std::vector<model::BufferSpec>& specs, const std::vector<Tensor>& init) {
  if (init.size() != specs.size()) {
    return Status::invalid_argument("FSDP: " + std::to_string(specs.size()) + " buffer specs but " +
                                    std::to_string(init.size()) + " initial buffer values");
  }
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const model::BufferSpec& b = specs[i];
    if (b.dtype != DType::kF32 && b.dtype != DType::kBF16 && b.dtype != DType::kI64) {
      return Status::invalid_argument("FSDP: buffer '" + b.name + "' has dtype " + std::string(dtype_name(b.dtype)) +
                                      "; allowed: fp32, bf16, int64");
    }
    auto numel = checked_numel(b.shape);
    if (!numel.is_ok()) return numel.status().with_context("FSDP: buffer '" + b.name + "'");
    if (!init[i].defined() || init[i].dtype() != b.dtype || init[i].numel() != *numel || init[i].is_phantom()) {
      return Status::invalid_argument("FSDP: the initial value of buffer '" + b.name + "' must be " +
                                      std::string(dtype_name(b.dtype)) + " with " + std::to_string(*numel) +
                                      " elements (shape " + shape_to_string(b.shape) + "), got " + init[i].describe());
    }
  }
  return Status::ok();
}
}  // namespace

Result<std::unique_ptr<FullyShardedModel>> FullyShardedModel::create(comm::Communicator& comm, device::Device& dev,
                                                                     std::vector<model::ParamSpec> specs,
                                                                     const WrapPlan& plan, FsdpOptions options,
                                                                     const Tensor& full_init,
                                                                     std::vector<model::BufferSpec> buffer_specs,
                                                                     const std::vector<Tensor>& buffer_init) {
  std::unique_ptr<FullyShardedModel> m(new FullyShardedModel(comm, dev, std::move(options)));
  const FsdpOptions& o = m->options_;
  SHARDLAB_RETURN_IF_ERROR(resolve_device_id(o.device_id, dev.id(), comm.rank()).status());
  SHARDLAB_RETURN_IF_ERROR(validate_mixed_precision(o));
  SHARDLAB_RETURN_IF_ERROR(validate_buffers(buffer_specs, buffer_init));
  {
    // Buffers share the state dict's namespace with the parameters.
    std::map<std::string, int> seen;
    for (const auto& p : specs) seen[p.name]++;
    for (const auto& b : buffer_specs) {
      if (seen[b.name]++ > 0) {
        return Status::invalid_argument("FSDP: buffer '" + b.name + "' has the name of another parameter or buffer");
      }
    }
  }
  device::Device& state_dev = o.offload_device ? *o.offload_device : dev;
  const std::int64_t total = model::total_numel(specs);
  if (full_init.dtype() != DType::kF32 || full_init.numel() != total) {
    return Status::invalid_argument("FSDP: the initial parameters must be fp32 with " + std::to_string(total) +
                                    " elements, got " + full_init.describe());
  }
  if (is_hybrid(o.strategy)) {
    const int dpn = o.devices_per_node;
    if (dpn < 1 || comm.size() % dpn != 0) {
      return Status::invalid_argument(std::string(strategy_name(o.strategy)) + ": devices_per_node " +
                                      std::to_string(dpn) + " must be >= 1 and divide the world size " +
                                      std::to_string(comm.size()));
    }
    // NOTE [Strided groups]: a node's devices, and the same device of every node.
    SHARDLAB_ASSIGN_OR_RETURN(m->shard_group_, comm.split_strided(1, dpn));
    SHARDLAB_ASSIGN_OR_RETURN(m->replica_group_, comm.split_strided(dpn, comm.size() / dpn));
  }
  if (o.forward_prefetch_units < 0 || o.backward_prefetch_units < 0 ||
      ((o.forward_prefetch_units > 0 || o.backward_prefetch_units > 0) && o.version != 2)) {
    return Status::invalid_argument("FSDP: explicit prefetch of " + std::to_string(o.forward_prefetch_units) +
                                    " units in forward and " + std::to_string(o.backward_prefetch_units) +
                                    " in backward needs FSDP2 (version 2, got " + std::to_string(o.version) +
                                    ") and counts >= 0");
  }
  if (const int n = o.reshard_after_forward_size; n != 0) {
    if (o.version != 2 || o.strategy != ShardingStrategy::kFullShard || n < 2 || n >= comm.size() ||
        comm.size() % n != 0) {
      return Status::invalid_argument("FSDP: reshard_after_forward=" + std::to_string(n) +
                                      " needs FSDP2 (version 2, got " + std::to_string(o.version) +
                                      ") with FULL_SHARD (got " + std::string(strategy_name(o.strategy)) +
                                      ") and a group size that divides the world size " + std::to_string(comm.size()) +
                                      ", between 2 and the world size exclusive");
    }
    // NOTE [Resharding to a smaller group]: consecutive ranks, as a node's devices.
    SHARDLAB_ASSIGN_OR_RETURN(m->post_forward_group_, comm.split_strided(1, n));
  }
  // Units: wrapped units in order of their first layer, then the root unit (if any).
  int num_layers = 0;
  for (const auto& s : specs) num_layers = std::max(num_layers, s.layer + 1);
  if (static_cast<int>(plan.unit_of_layer.size()) < num_layers) {
    return Status::invalid_argument("FSDP wrap plan covers " + std::to_string(plan.unit_of_layer.size()) +
                                    " layers but the model has " + std::to_string(num_layers));
  }
  std::map<int, int> unit_id;  // plan unit -> our index (-1 = root, last)
  for (int l = 0; l < num_layers; ++l) {
    const int u = plan.unit_of_layer[static_cast<std::size_t>(l)];
    if (u >= 0 && !unit_id.count(u)) {
      const int id = static_cast<int>(unit_id.size());
      unit_id[u] = id;
    }
  }
  const bool has_root = std::any_of(specs.begin(), specs.end(), [&](const model::ParamSpec& s) {
    return plan.unit_of_layer[static_cast<std::size_t>(s.layer)] < 0;
  });
  const int num_units = static_cast<int>(unit_id.size()) + (has_root ? 1 : 0);
  if (has_root) m->root_unit_ = num_units - 1;
  m->units_.resize(static_cast<std::size_t>(num_units));
  m->first_layer_.assign(static_cast<std::size_t>(num_units), num_layers);
  m->last_layer_.assign(static_cast<std::size_t>(num_units), -1);
  std::int64_t off = 0;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const int pu = plan.unit_of_layer[static_cast<std::size_t>(specs[i].layer)];
    const int u = pu < 0 ? m->root_unit_ : unit_id[pu];
    m->unit_of_param_.push_back(u);
    FlatParameter& fp = m->units_[static_cast<std::size_t>(u)];
    fp.unit = u;
    fp.param_indices.push_back(static_cast<int>(i));
    fp.specs.push_back(specs[i]);
    m->first_layer_[static_cast<std::size_t>(u)] =
        std::min(m->first_layer_[static_cast<std::size_t>(u)], specs[i].layer);
    m->last_layer_[static_cast<std::size_t>(u)] = std::max(m->last_layer_[static_cast<std::size_t>(u)], specs[i].layer);
    m->model_offset_.push_back(off);
    off += *checked_numel(specs[i].shape);
  }
  const int w = m->shard_world_size();
  const int shard_rank = o.strategy == ShardingStrategy::kNoShard ? 0 : m->shard_comm().rank();
  for (FlatParameter& fp : m->units_) {
    std::vector<Shape> shapes;
    for (const auto& s : fp.specs) shapes.push_back(s.shape);
    SHARDLAB_ASSIGN_OR_RETURN(fp.layout, o.version == 2 ? ShardLayout::make_per_parameter(shapes, w, DType::kF32)
                                                        : ShardLayout::make(shapes, w, DType::kF32, o.align_bytes));
    const std::string name = "unit" + std::to_string(fp.unit);
    const std::int64_t s = fp.layout.shard_numel();
    // NOTE [Initialization unit by unit]: this unit's parameters move to the device, are
    // broadcast under sync_module_states and flattened; the shard is cloned out of the flat
    // parameter, and both full copies are freed before the next unit moves.
    Tensor flat;
    {
      // The unit's parameters in spec order (a root unit's need not be adjacent in the model).
      std::int64_t unit_numel = 0;
      for (const LayoutParam& p : fp.layout.params()) unit_numel += p.numel;
      SHARDLAB_ASSIGN_OR_RETURN(Tensor moved,
                                dev.empty({unit_numel}, DType::kF32, MemoryCategory::kParameters, name + ".init"));
      std::int64_t at = 0;
      for (const LayoutParam& p : fp.layout.params()) {
        const int model_index = fp.param_indices[static_cast<std::size_t>(p.index)];
        SHARDLAB_ASSIGN_OR_RETURN(Tensor from,
                                  full_init.narrow(m->model_offset_[static_cast<std::size_t>(model_index)], p.numel));
        SHARDLAB_ASSIGN_OR_RETURN(Tensor to, moved.narrow(at, p.numel));
        SHARDLAB_RETURN_IF_ERROR(dev.copy(from, to));
        at += p.numel;
      }
      if (o.sync_module_states) {
        SHARDLAB_RETURN_IF_ERROR(comm.broadcast(moved, 0)
                                     ->wait(o.collective_timeout)
                                     .with_context("FSDP sync_module_states of unit " + std::to_string(fp.unit)));
      }
      SHARDLAB_ASSIGN_OR_RETURN(flat, dev.zeros({fp.layout.unsharded_numel()}, DType::kF32, MemoryCategory::kParameters,
                                                name + ".init_flat"));
      std::int64_t moved_offset = 0;
      for (const LayoutParam& p : fp.layout.params()) {
        SHARDLAB_ASSIGN_OR_RETURN(Tensor from, moved.narrow(moved_offset, p.numel));
        SHARDLAB_ASSIGN_OR_RETURN(Tensor to, flat.narrow(p.flat_offset, p.numel));
        SHARDLAB_RETURN_IF_ERROR(dev.copy(from, to));
        moved_offset += p.numel;
      }
    }  // the moved parameters are freed here: the flat parameter holds the unit
    SHARDLAB_ASSIGN_OR_RETURN(fp.shard,
                              state_dev.empty({s}, DType::kF32, MemoryCategory::kParameters, name + ".shard"));
    if (fp.layout.per_parameter()) {
      // FSDP2: this rank's dim-0 chunks of each parameter, each padded with zeros.
      SHARDLAB_RETURN_IF_ERROR(dev.fill(fp.shard, 0.0f));
      for (const ShardPiece& piece : fp.layout.shard(shard_rank).pieces) {
        const LayoutParam& p = fp.layout.params()[static_cast<std::size_t>(piece.param)];
        SHARDLAB_ASSIGN_OR_RETURN(Tensor from, flat.narrow(p.flat_offset + piece.param_begin, piece.numel()));
        SHARDLAB_ASSIGN_OR_RETURN(Tensor to, fp.shard.narrow(piece.offset_in_shard, piece.numel()));
        SHARDLAB_RETURN_IF_ERROR(dev.copy(from, to));
      }
    } else {
      SHARDLAB_ASSIGN_OR_RETURN(Tensor mine, flat.narrow(fp.layout.shard(shard_rank).flat_begin, s));
      SHARDLAB_RETURN_IF_ERROR(dev.copy(mine, fp.shard));
    }
    flat = Tensor();  // only the shard remains
    const DType grad_dtype = o.keep_low_precision_grads ? o.param_dtype : DType::kF32;
    SHARDLAB_ASSIGN_OR_RETURN(fp.grad_shard,
                              state_dev.zeros({s}, grad_dtype, MemoryCategory::kGradients, name + ".grad_shard"));
    fp.trainable.assign(static_cast<std::size_t>(s), 0);
    for (const auto& spec : fp.specs) fp.has_trainable |= spec.requires_grad;
    for (const ShardPiece& piece : fp.layout.shard(shard_rank).pieces) {
      if (fp.specs[static_cast<std::size_t>(piece.param)].requires_grad) {
        std::fill_n(fp.trainable.begin() + piece.offset_in_shard, piece.numel(), std::uint8_t{1});
      }
    }
  }
  m->specs_ = std::move(specs);
  m->buffer_specs_ = std::move(buffer_specs);
  SHARDLAB_RETURN_IF_ERROR(m->init_buffers(buffer_init));
  return m;
}

Status FullyShardedModel::init_buffers(const std::vector<Tensor>& init) {
  // PyTorch order: sync_module_states broadcasts at construction in the declared dtype,
  // the cast to buffer_dtype happens afterwards (lazy init). Broadcasting first also keeps
  // int64 and fp32 values exact.
  for (std::size_t i = 0; i < buffer_specs_.size(); ++i) {
    const model::BufferSpec& spec = buffer_specs_[i];
    SHARDLAB_ASSIGN_OR_RETURN(Tensor declared, dev_.empty(spec.shape, spec.dtype, MemoryCategory::kOther, spec.name));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor src, init[i].reshape(spec.shape));
    SHARDLAB_RETURN_IF_ERROR(dev_.copy(src, declared));
    if (options_.sync_module_states) {
      SHARDLAB_RETURN_IF_ERROR(comm_.broadcast(declared, 0)
                                   ->wait(options_.collective_timeout)
                                   .with_context("FSDP sync_module_states of buffer '" + spec.name + "'"));
    }
    if (is_floating(spec.dtype) && options_.buffer_dtype && *options_.buffer_dtype != spec.dtype) {
      SHARDLAB_ASSIGN_OR_RETURN(Tensor low,
                                dev_.empty(spec.shape, *options_.buffer_dtype, MemoryCategory::kOther, spec.name));
      SHARDLAB_RETURN_IF_ERROR(dev_.cast(declared, low));
      declared = low;
    }
    buffers_.push_back(declared);
  }
  return Status::ok();
}

Result<Tensor> FullyShardedModel::buffer(int index) {
  if (index < 0 || index >= num_buffers()) {
    return Status::invalid_argument("FSDP: no buffer " + std::to_string(index) + "; the model has " +
                                    std::to_string(num_buffers()));
  }
  return buffers_[static_cast<std::size_t>(index)];
}

Result<Tensor> FullyShardedModel::buffer_state(int index) {
  SHARDLAB_ASSIGN_OR_RETURN(Tensor live, buffer(index));
  const model::BufferSpec& spec = buffer_specs_[static_cast<std::size_t>(index)];
  SHARDLAB_ASSIGN_OR_RETURN(Tensor out,
                            dev_.empty(spec.shape, spec.dtype, MemoryCategory::kOther, spec.name + ".state"));
  SHARDLAB_RETURN_IF_ERROR(live.dtype() == spec.dtype ? dev_.copy(live, out) : dev_.cast(live, out));
  return out;
}

Status FullyShardedModel::load_buffer(int index, const Tensor& value) {
  SHARDLAB_ASSIGN_OR_RETURN(Tensor live, buffer(index));
  const model::BufferSpec& spec = buffer_specs_[static_cast<std::size_t>(index)];
  if (!value.defined() || value.is_phantom() || value.numel() != live.numel() ||
      is_floating(value.dtype()) != is_floating(live.dtype())) {
    return Status::invalid_argument("FSDP: cannot load buffer '" + spec.name + "' (" +
                                    std::string(dtype_name(spec.dtype)) + ", shape " + shape_to_string(spec.shape) +
                                    ") from " + value.describe());
  }
  SHARDLAB_ASSIGN_OR_RETURN(Tensor src, value.reshape(spec.shape));
  return src.dtype() == live.dtype() ? dev_.copy(src, live) : dev_.cast(src, live);
}

bool FullyShardedModel::reshard_after_forward() const {
  return options_.strategy == ShardingStrategy::kFullShard || options_.strategy == ShardingStrategy::kHybridShard;
}

int FullyShardedModel::live_non_root() const {
  int n = 0;
  for (const auto& u : units_) {
    if (u.unit != root_unit_ && u.state != UnitState::kSharded) ++n;
  }
  return n;
}

void FullyShardedModel::delay(DelayPoint p) const {
  if (options_.delay_hook) options_.delay_hook(p);
}

Status FullyShardedModel::unshard(int unit, bool prefetch) {
  FlatParameter& fp = units_[static_cast<std::size_t>(unit)];
  if (fp.state != UnitState::kSharded) return Status::ok();
  if (options_.strategy == ShardingStrategy::kNoShard) {
    // The "shard" is the whole flat parameter; mixed precision still rounds the compute copy.
    if (options_.param_dtype == DType::kF32) {
      fp.full = fp.shard;
    } else {
      SHARDLAB_ASSIGN_OR_RETURN(
          Tensor low, dev_.empty({fp.shard.numel()}, options_.param_dtype, MemoryCategory::kParameters, "low"));
      SHARDLAB_ASSIGN_OR_RETURN(fp.full, dev_.empty({fp.shard.numel()}, DType::kF32, MemoryCategory::kParameters,
                                                    "unit" + std::to_string(unit) + ".compute"));
      SHARDLAB_RETURN_IF_ERROR(dev_.cast(fp.shard, low));
      SHARDLAB_RETURN_IF_ERROR(dev_.cast(low, fp.full));
    }
    fp.state = UnitState::kUnsharded;
    return Status::ok();
  }
  if (prefetch && options_.limit_all_gathers && options_.version == 1 && unit != root_unit_ && live_non_root() >= 2)
    return Status::ok();
  PhaseScope phase(options_, {"unshard", unit, phase_name(state_), "all_gather", prefetch});
  delay(DelayPoint::kBeforeAllGather);
  const int w = shard_world_size();
  const std::int64_t s = fp.layout.shard_numel();
  if (fp.post_forward_shard.defined()) {
    // NOTE [Resharding to a smaller group]: the group's parts make the whole all-gather
    // output; the all-gather stays inside the group.
    SHARDLAB_ASSIGN_OR_RETURN(fp.gathered, dev_.empty({w * s}, options_.param_dtype, MemoryCategory::kParameters,
                                                      "unit" + std::to_string(unit) + ".unsharded"));
    const std::int64_t part = fp.post_forward_shard.numel();
    SHARDLAB_ASSIGN_OR_RETURN(Tensor mine, fp.gathered.narrow(post_forward_group_->rank() * part, part));
    SHARDLAB_RETURN_IF_ERROR(dev_.copy(fp.post_forward_shard, mine));
    fp.post_forward_shard = Tensor();
    fp.gather = post_forward_group_->all_gather_into(fp.gathered, mine);
    ++counts_.all_gather;
    fp.state = UnitState::kUnsharding;
    max_live_ = std::max(max_live_, live_non_root());
    return Status::ok();
  }
  // The all-gather runs in param_dtype; a bf16 buffer is widened to the fp32 compute
  // buffer when the all-gather completes (wait_unsharded).
  SHARDLAB_ASSIGN_OR_RETURN(fp.gathered, dev_.empty({w * s}, options_.param_dtype, MemoryCategory::kParameters,
                                                    "unit" + std::to_string(unit) + ".unsharded"));
  SHARDLAB_ASSIGN_OR_RETURN(Tensor mine, fp.gathered.narrow(shard_comm().rank() * s, s));
  SHARDLAB_RETURN_IF_ERROR(options_.param_dtype == DType::kF32 ? dev_.copy(fp.shard, mine) : dev_.cast(fp.shard, mine));
  fp.gather = shard_comm().all_gather_into(fp.gathered, mine);
  ++counts_.all_gather;
  fp.state = UnitState::kUnsharding;
  max_live_ = std::max(max_live_, live_non_root());
  return Status::ok();
}

Status FullyShardedModel::wait_unsharded(int unit) {
  FlatParameter& fp = units_[static_cast<std::size_t>(unit)];
  if (fp.state == UnitState::kSharded) SHARDLAB_RETURN_IF_ERROR(unshard(unit, false));
  if (fp.state == UnitState::kUnsharding) {
    // NOTE [Unshard wait on the compute stream]: as PyTorch FSDP makes its compute stream
    // wait for the unshard stream, the all-gather is ordered before the unit's compute on
    // the device (Work::wait_on_compute; the host goes on issuing where the backend can);
    // the host waits for it, with the collective timeout, only in reshard, after the
    // unit's compute has been issued, so a missing peer still ends in TIMEOUT. A Work
    // that is complete already (every backend whose compute stream is the host) is
    // retired at once, so it holds no buffer longer than a blocking wait would.
    PhaseScope phase(options_, {"unshard_wait", unit, phase_name(state_), "all_gather"});
    Status s = fp.gather->wait_on_compute(options_.collective_timeout);
    if (s.is_ok() && fp.gather->is_completed()) {
      s = fp.gather->wait(options_.collective_timeout);
      fp.gather.reset();
    }
    if (!s.is_ok()) return s.with_context("FSDP unshard of unit " + std::to_string(unit));
    if (fp.layout.per_parameter()) {
      // FSDP2: copy-out from the all-gathered shards into the parameters (NOTE [FSDP2 copy-in
      // and copy-out]).
      SHARDLAB_ASSIGN_OR_RETURN(fp.full,
                                dev_.empty({fp.layout.unsharded_numel()}, DType::kF32, MemoryCategory::kParameters,
                                           "unit" + std::to_string(unit) + ".params"));
      SHARDLAB_RETURN_IF_ERROR(copy_pieces(fp, fp.gathered, fp.full, /*out=*/true));
    } else if (options_.param_dtype == DType::kF32) {
      fp.full = fp.gathered;
    } else {
      SHARDLAB_ASSIGN_OR_RETURN(fp.full, dev_.empty({fp.gathered.numel()}, DType::kF32, MemoryCategory::kParameters,
                                                    "unit" + std::to_string(unit) + ".compute"));
      SHARDLAB_RETURN_IF_ERROR(dev_.cast(fp.gathered, fp.full));
    }
    fp.gathered = Tensor();
    fp.state = UnitState::kUnsharded;
  }
  SHARDLAB_CHECK_EQ(fp.full.numel(), fp.layout.unsharded_numel());
  return Status::ok();
}

Status FullyShardedModel::reshard(int unit) {
  FlatParameter& fp = units_[static_cast<std::size_t>(unit)];
  if (fp.state == UnitState::kSharded) return Status::ok();
  if (options_.strategy == ShardingStrategy::kNoShard) {
    // Parameters stay unsharded; only a mixed-precision compute copy is dropped (and
    // rebuilt from the updated master at the next use).
    if (options_.param_dtype != DType::kF32) {
      fp.full = Tensor();
      fp.state = UnitState::kSharded;
    }
    return Status::ok();
  }
  PhaseScope phase(options_, {"reshard", unit, phase_name(state_)});
  if (fp.state == UnitState::kUnsharding) SHARDLAB_RETURN_IF_ERROR(wait_unsharded(unit));
  if (fp.gather) {  // NOTE [Unshard wait on the compute stream]
    Status s = fp.gather->wait(options_.collective_timeout);
    fp.gather.reset();
    if (!s.is_ok()) return s.with_context("FSDP unshard of unit " + std::to_string(unit));
  }
  SHARDLAB_CHECK_EQ(fp.shard.numel(), fp.layout.shard_numel());
  fp.full = Tensor();
  fp.state = UnitState::kSharded;
  return Status::ok();
}

Result<Tensor> FullyShardedModel::param(int index) {
  if (index < 0 || index >= static_cast<int>(specs_.size())) {
    return Status::invalid_argument("FSDP: no parameter " + std::to_string(index));
  }
  const int u = unit_of_param_[static_cast<std::size_t>(index)];
  FlatParameter& fp = units_[static_cast<std::size_t>(u)];
  if (fp.state == UnitState::kSharded) {
    return Status::failed_precondition("FSDP: parameter '" + specs_[static_cast<std::size_t>(index)].name +
                                       "' was used while unit " + std::to_string(u) +
                                       " is sharded (missing pre_forward/pre_backward hook?)");
  }
  SHARDLAB_RETURN_IF_ERROR(wait_unsharded(u));
  SHARDLAB_ASSIGN_OR_RETURN(Tensor view, fp.view(fp.full, fp.local_index(index)));
  if (options_.on_param_view) options_.on_param_view(u, view);
  return view;
}

Result<Tensor> FullyShardedModel::grad(int index) {
  const int u = unit_of_param_[static_cast<std::size_t>(index)];
  FlatParameter& fp = units_[static_cast<std::size_t>(u)];
  if (!specs_[static_cast<std::size_t>(index)].requires_grad) {
    return Status::failed_precondition("FSDP: '" + specs_[static_cast<std::size_t>(index)].name +
                                       "' is frozen (requires_grad = false) and has no gradient");
  }
  if (!fp.full_grad.defined()) {
    return Status::failed_precondition("FSDP: gradient of '" + specs_[static_cast<std::size_t>(index)].name +
                                       "' requested outside its unit's backward");
  }
  return fp.view(fp.full_grad, fp.local_index(index));
}

Status FullyShardedModel::summon_full_params(bool on) {
  if (on) {
    if (state_ != TrainingState::kIdle) return Status::failed_precondition("FSDP: summon_full_params while not IDLE");
    state_ = TrainingState::kSummonFullParams;
    for (int u = 0; u < num_units(); ++u) SHARDLAB_RETURN_IF_ERROR(unshard(u, /*prefetch=*/false));
    for (int u = 0; u < num_units(); ++u) SHARDLAB_RETURN_IF_ERROR(wait_unsharded(u));
    return Status::ok();
  }
  if (state_ != TrainingState::kSummonFullParams) {
    return Status::failed_precondition("FSDP: summon_full_params(false) without summon_full_params(true)");
  }
  for (int u = 0; u < num_units(); ++u) SHARDLAB_RETURN_IF_ERROR(reshard(u));
  state_ = TrainingState::kIdle;
  return Status::ok();
}

Status FullyShardedModel::begin_iteration(bool no_sync) {
  if (state_ != TrainingState::kIdle) return Status::failed_precondition("FSDP: begin_iteration while not IDLE");
  state_ = TrainingState::kForward;
  no_sync_ = no_sync;
  counts_ = {};
  forward_order_.clear();
  return Status::ok();
}

Status FullyShardedModel::end_iteration() {
  if (state_ != TrainingState::kBackward) {
    return Status::failed_precondition("FSDP: end_iteration before the backward pass finished");
  }
  // NOTE [Asynchronous gradient reduction]: PyTorch's _post_backward_final_callback.
  SHARDLAB_RETURN_IF_ERROR(drain_reductions());
  for (std::size_t u = 0; u < units_.size(); ++u) {
    SHARDLAB_CHECK(units_[u].state == UnitState::kSharded || options_.strategy == ShardingStrategy::kNoShard);
    SHARDLAB_CHECK(no_sync_ || !units_[u].full_grad.defined());
  }
  if (recorded_order_.empty()) recorded_order_ = forward_order_;
  state_ = TrainingState::kIdle;
  return Status::ok();
}

Status FullyShardedModel::pre_forward(int layer) {
  if (state_ != TrainingState::kForward) {
    return Status::failed_precondition("FSDP: forward of layer " + std::to_string(layer) +
                                       " outside FORWARD (call begin_iteration first)");
  }
  for (int u = 0; u < num_units(); ++u) {
    if (first_layer_[static_cast<std::size_t>(u)] != layer) continue;
    forward_order_.push_back(u);
    SHARDLAB_RETURN_IF_ERROR(wait_unsharded(u));
    const int ahead =
        options_.forward_prefetch_units > 0 ? options_.forward_prefetch_units : (options_.forward_prefetch ? 1 : 0);
    const auto it = std::find(recorded_order_.begin(), recorded_order_.end(), u);
    for (int k = 1; k <= ahead && it != recorded_order_.end() && recorded_order_.end() - it > k; ++k) {
      SHARDLAB_RETURN_IF_ERROR(unshard(*(it + k), /*prefetch=*/true));
    }
  }
  return Status::ok();
}

// NOTE [Resharding to a smaller group]
// FSDP2's reshard_after_forward=N: after forward, rank r keeps part g = r mod N of the
// unit's all-gather output (the shards of ranks g·W/N … (g+1)·W/N - 1, W·S/N elements in
// param_dtype), copied in from the unsharded parameters (exact: they were gathered in that
// dtype) with padding left zero, and frees the rest. Backward's unshard all-gathers those
// parts inside the group of N consecutive ranks — the same bytes as the world all-gather,
// so the results are unchanged, over intra-node links only.
Status FullyShardedModel::reshard_to_post_forward(int unit) {
  FlatParameter& fp = units_[static_cast<std::size_t>(unit)];
  if (fp.state == UnitState::kUnsharding) SHARDLAB_RETURN_IF_ERROR(wait_unsharded(unit));
  if (fp.state != UnitState::kUnsharded) return Status::ok();
  const int n = post_forward_group_->size();
  const int ranks = shard_world_size() / n;
  const std::int64_t part = ranks * fp.layout.shard_numel();
  SHARDLAB_ASSIGN_OR_RETURN(Tensor kept, dev_.zeros({part}, options_.param_dtype, MemoryCategory::kParameters,
                                                    "unit" + std::to_string(unit) + ".post_forward"));
  SHARDLAB_RETURN_IF_ERROR(copy_pieces(fp, kept, fp.full, /*out=*/false, post_forward_group_->rank() * ranks));
  SHARDLAB_RETURN_IF_ERROR(reshard(unit));
  fp.post_forward_shard = kept;
  return Status::ok();
}

Status FullyShardedModel::post_forward(int layer) {
  for (int u = 0; u < num_units(); ++u) {
    if (last_layer_[static_cast<std::size_t>(u)] != layer || !reshard_after_forward()) continue;
    SHARDLAB_RETURN_IF_ERROR(post_forward_group_ ? reshard_to_post_forward(u) : reshard(u));
  }
  int last = 0;
  for (int l : last_layer_) last = std::max(last, l);
  if (layer == last) delay(DelayPoint::kAfterForward);
  return Status::ok();
}

namespace {
// The unit PyTorch prefetches after `unit` in backward: backward runs in the reverse of the
// recorded forward order, so it is the unit before `unit` there (-1 for the first). Not
// "the next by layer": a root unit spanning the embeddings and the head is first in
// forward order and so last in backward, although its last layer is the highest.
int next_in_backward(const std::vector<int>& forward_order, int unit) {
  const auto it = std::find(forward_order.begin(), forward_order.end(), unit);
  if (it == forward_order.end() || it == forward_order.begin()) return -1;
  return *(it - 1);
}
}  // namespace

Status FullyShardedModel::pre_backward(int layer) {
  if (state_ == TrainingState::kForward) state_ = TrainingState::kBackward;
  if (state_ != TrainingState::kBackward) {
    return Status::failed_precondition("FSDP: backward of layer " + std::to_string(layer) + " outside an iteration");
  }
  for (int u = 0; u < num_units(); ++u) {
    if (last_layer_[static_cast<std::size_t>(u)] != layer) continue;
    SHARDLAB_RETURN_IF_ERROR(wait_unsharded(u));
    FlatParameter& fp = units_[static_cast<std::size_t>(u)];
    if (fp.has_trainable && !fp.full_grad.defined()) {
      if (reduces_in_place(fp)) {
        fp.full_grad = fp.grad_shard;
        SHARDLAB_RETURN_IF_ERROR(dev_.fill(fp.full_grad, 0.0f));
      } else {
        SHARDLAB_ASSIGN_OR_RETURN(fp.full_grad,
                                  dev_.zeros({fp.layout.unsharded_numel()}, DType::kF32, MemoryCategory::kGradients,
                                             "unit" + std::to_string(u) + ".unsharded_grad"));
      }
    }
    const int behind = options_.backward_prefetch_units > 0                           ? options_.backward_prefetch_units
                       : options_.backward_prefetch == BackwardPrefetch::kBackwardPre ? 1
                                                                                      : 0;
    for (int k = 0, next = u; k < behind; ++k) {
      next = next_in_backward(recorded_order_, next);
      if (next < 0) break;
      SHARDLAB_RETURN_IF_ERROR(unshard(next, /*prefetch=*/true));
    }
  }
  return Status::ok();
}

Status FullyShardedModel::post_backward(int layer) {
  for (int u = 0; u < num_units(); ++u) {
    if (first_layer_[static_cast<std::size_t>(u)] != layer) continue;
    if (options_.backward_prefetch == BackwardPrefetch::kBackwardPost && options_.backward_prefetch_units == 0 &&
        !recorded_order_.empty()) {
      const int next = next_in_backward(recorded_order_, u);
      if (next >= 0) SHARDLAB_RETURN_IF_ERROR(unshard(next, /*prefetch=*/true));
    }
    // Frozen units produce no gradient and no reduction traffic.
    if (!no_sync_ && units_[static_cast<std::size_t>(u)].has_trainable) SHARDLAB_RETURN_IF_ERROR(reduce_grad(u));
    SHARDLAB_RETURN_IF_ERROR(reshard(u));
  }
  return Status::ok();
}

// NOTE [Asynchronous gradient reduction]: as PyTorch FSDP1 issues a unit's reduce-scatter
// on its post-backward stream and waits once in _post_backward_final_callback, a unit's
// reduction is only issued in its post_backward; the host waits for it later: when the
// next unit's reduction has been issued (so a unit's reduction overlaps the backward
// compute of the unit after it), and for the rest at the end of backward (end_iteration).
// HYBRID_SHARD's replica all-reduce is issued when its reduce-scatter has been waited for.
// The rule is positional, never "whatever has completed", so the simulator stays
// deterministic. The unsharded gradient and the reduction buffers stay allocated (and
// charged) until the reduction is retired, so at most two units' gradients are in flight.
// Results are unchanged: every reduction's math and its accumulation order per unit are
// those of a blocking reduction.
Status FullyShardedModel::reduce_grad(int unit) {
  FlatParameter& fp = units_[static_cast<std::size_t>(unit)];
  SHARDLAB_CHECK(fp.full_grad.defined());
  {
    PhaseScope phase(options_, {"reduce_grad", unit, phase_name(state_),
                                options_.strategy == ShardingStrategy::kNoShard ? "all_reduce" : "reduce_scatter"});
    delay(DelayPoint::kBeforeReduceScatter);
    const double pre = divide_factors(comm_.size()).first;
    if (pre != 1.0) SHARDLAB_RETURN_IF_ERROR(dev_.scale(fp.full_grad, static_cast<float>(1.0 / pre)));
    const DType rd = options_.reduce_dtype;
    PendingReduction r;
    r.unit = unit;
    r.to_reduce = fp.full_grad;
    if (fp.layout.per_parameter() && options_.strategy != ShardingStrategy::kNoShard) {
      // FSDP2: copy-in of each rank's dim-0 chunks of the gradients, rank after rank, zero
      // padded, in reduce_dtype (NOTE [FSDP2 copy-in and copy-out]).
      SHARDLAB_ASSIGN_OR_RETURN(r.to_reduce, dev_.zeros({fp.layout.total_numel()}, rd, MemoryCategory::kCommBuffers,
                                                        "unit" + std::to_string(unit) + ".grad_chunks"));
      SHARDLAB_RETURN_IF_ERROR(copy_pieces(fp, r.to_reduce, fp.full_grad, /*out=*/false));
    } else if (rd != DType::kF32) {
      SHARDLAB_ASSIGN_OR_RETURN(r.to_reduce,
                                dev_.empty({fp.full_grad.numel()}, rd, MemoryCategory::kCommBuffers,
                                           "unit" + std::to_string(unit) + ".grad_" + std::string(dtype_name(rd))));
      SHARDLAB_RETURN_IF_ERROR(dev_.cast(fp.full_grad, r.to_reduce));
      fp.full_grad = Tensor();
    }
    if (options_.strategy == ShardingStrategy::kNoShard) {
      r.work = comm_.all_reduce(r.to_reduce, ReduceOp::kSum);
      ++counts_.all_reduce;
      r.reduced = r.to_reduce;
    } else {
      SHARDLAB_ASSIGN_OR_RETURN(r.reduced, dev_.empty({fp.layout.shard_numel()}, rd, MemoryCategory::kCommBuffers,
                                                      "unit" + std::to_string(unit) + ".reduced_grad"));
      r.work = shard_comm().reduce_scatter(r.reduced, r.to_reduce, ReduceOp::kSum);
      ++counts_.reduce_scatter;
    }
    fp.full_grad = Tensor();  // the pending reduction holds it (as to_reduce) until retired
    if (Status s = r.work->issue_error(); !s.is_ok()) {
      return s.with_context("FSDP gradient reduction of unit " + std::to_string(unit));
    }
    pending_reductions_.push_back(std::move(r));
  }
  if (!options_.async_reduction) return drain_reductions();
  // Every older reduction moves on one stage; the newest overlaps the next unit's backward.
  for (std::size_t i = 0; i + 1 < pending_reductions_.size();) {
    bool finished = false;
    SHARDLAB_RETURN_IF_ERROR(advance_reduction(i, finished));
    if (!finished) ++i;
  }
  return Status::ok();
}

// NO_SHARD's gradient shard is the whole unit: PyTorch computes the unsharded gradient in
// the flat parameter's .grad and all-reduces it there. So does this when nothing has to
// be kept apart: the shard holds no gradient yet (else the reduced one is added to it),
// and it is an fp32 tensor on this device (not an offloaded or low-precision one). The
// bits are the same; the unit's separate unsharded buffer and the copy out of it are not.
bool FullyShardedModel::reduces_in_place(const FlatParameter& fp) const {
  return options_.strategy == ShardingStrategy::kNoShard && !fp.grad_shard_valid &&
         options_.offload_device == nullptr && fp.grad_shard.dtype() == DType::kF32 &&
         fp.grad_shard.numel() == fp.layout.total_numel();
}

Status FullyShardedModel::drain_reductions() {
  bool finished = false;
  while (!pending_reductions_.empty()) SHARDLAB_RETURN_IF_ERROR(advance_reduction(0, finished));
  return Status::ok();
}

// Waits for pending reduction `i`'s collective; then issues HYBRID_SHARD's replica
// all-reduce (the reduction stays pending) or finishes it (`finished`; it leaves the
// list): back to fp32, the post-divide, assign or accumulate into the gradient shard.
// A unit has at most one reduction pending, so finishing out of list order changes no sum.
Status FullyShardedModel::advance_reduction(std::size_t i, bool& finished) {
  finished = false;
  PendingReduction& r = pending_reductions_[i];
  FlatParameter& fp = units_[static_cast<std::size_t>(r.unit)];
  const std::string where = "FSDP gradient reduction of unit " + std::to_string(r.unit);
  {
    PhaseScope phase(options_, {"reduce_grad_wait", r.unit, phase_name(state_),
                                r.replica_stage || options_.strategy == ShardingStrategy::kNoShard ? "all_reduce"
                                                                                                   : "reduce_scatter"});
    SHARDLAB_RETURN_IF_ERROR(r.work->wait(options_.collective_timeout).with_context(where));
  }
  r.work.reset();
  r.to_reduce = Tensor();
  if (!r.replica_stage && is_hybrid(options_.strategy) && replica_group_->size() > 1) {
    PhaseScope phase(options_, {"reduce_grad", r.unit, phase_name(state_), "all_reduce"});
    r.replica_stage = true;
    r.work = replica_group_->all_reduce(r.reduced, ReduceOp::kSum);
    ++counts_.all_reduce;
    return r.work->issue_error().with_context(where);  // still pending: the replica all-reduce overlaps what comes next
  }
  Tensor reduced = std::move(r.reduced);
  pending_reductions_.erase(pending_reductions_.begin() + static_cast<std::ptrdiff_t>(i));
  finished = true;
  const double post = divide_factors(comm_.size()).second;
  if (reduced.dtype() != DType::kF32) {  // back to fp32 for the master gradient
    SHARDLAB_ASSIGN_OR_RETURN(Tensor wide, dev_.empty({reduced.numel()}, DType::kF32, MemoryCategory::kCommBuffers,
                                                      "unit" + std::to_string(fp.unit) + ".reduced_grad_fp32"));
    SHARDLAB_RETURN_IF_ERROR(dev_.cast(reduced, wide));
    reduced = wide;
  }
  if (post != 1.0) SHARDLAB_RETURN_IF_ERROR(dev_.scale(reduced, static_cast<float>(1.0 / post)));
  if (fp.grad_shard_valid) {
    SHARDLAB_ASSIGN_OR_RETURN(Tensor acc, grad_fp32(fp));
    SHARDLAB_RETURN_IF_ERROR(dev_.axpy(1.0f, reduced, acc));
    SHARDLAB_RETURN_IF_ERROR(store_grad(fp, acc));
  } else {
    SHARDLAB_RETURN_IF_ERROR(store_grad(fp, reduced));
    fp.grad_shard_valid = true;
  }
  return Status::ok();
}

Result<Tensor> FullyShardedModel::grad_fp32(const FlatParameter& fp) {
  if (fp.grad_shard.dtype() == DType::kF32) return fp.grad_shard;
  SHARDLAB_ASSIGN_OR_RETURN(Tensor wide, dev_.empty({fp.grad_shard.numel()}, DType::kF32, MemoryCategory::kGradients,
                                                    "unit" + std::to_string(fp.unit) + ".grad_fp32"));
  SHARDLAB_RETURN_IF_ERROR(dev_.cast(fp.grad_shard, wide));
  return wide;
}

Status FullyShardedModel::store_grad(FlatParameter& fp, const Tensor& value) {
  if (value.same_view(fp.grad_shard)) return Status::ok();
  return fp.grad_shard.dtype() == DType::kF32 ? dev_.copy(value, fp.grad_shard) : dev_.cast(value, fp.grad_shard);
}

void FullyShardedModel::zero_grad() {
  for (auto& u : units_) u.grad_shard_valid = false;
}

Result<double> FullyShardedModel::clip_grad_norm(double max_norm, bool inf_norm) {
  const int shard_rank = options_.strategy == ShardingStrategy::kNoShard ? 0 : shard_comm().rank();
  double local = 0.0;
  for (const FlatParameter& fp : units_) {
    if (!fp.grad_shard_valid) continue;
    SHARDLAB_ASSIGN_OR_RETURN(Tensor wide, grad_fp32(fp));
    // The shard's values on the host: the norm's fp64 sum in index order has no device op
    // yet, so clipping moves each gradient shard over the host link once per step.
    SHARDLAB_ASSIGN_OR_RETURN(const std::vector<float> g, device::values_to_host<float>(dev_, wide));
    for (const ShardPiece& piece : fp.layout.shard(shard_rank).pieces) {
      for (std::int64_t i = 0; i < piece.numel(); ++i) {
        const double v = std::fabs(static_cast<double>(g[static_cast<std::size_t>(piece.offset_in_shard + i)]));
        local = inf_norm ? std::max(local, v) : local + v * v;
      }
    }
  }
  SHARDLAB_ASSIGN_OR_RETURN(Tensor t, dev_.empty({1}, DType::kF32, MemoryCategory::kOther, "grad_norm"));
  SHARDLAB_RETURN_IF_ERROR(device::values_from_host(dev_, std::vector<float>{static_cast<float>(local)}, t));
  if (options_.strategy != ShardingStrategy::kNoShard) {
    SHARDLAB_RETURN_IF_ERROR(shard_comm()
                                 .all_reduce(t, inf_norm ? ReduceOp::kMax : ReduceOp::kSum)
                                 ->wait(options_.collective_timeout)
                                 .with_context("FSDP clip_grad_norm"));
  }
  SHARDLAB_ASSIGN_OR_RETURN(const std::vector<float> reduced, device::values_to_host<float>(dev_, t));
  const double total = static_cast<double>(reduced[0]);
  const double norm = inf_norm ? total : std::sqrt(total);
  if (max_norm > 0.0) {
    const double coef = max_norm / (norm + 1e-6);
    if (coef < 1.0) {
      for (FlatParameter& fp : units_) {
        if (!fp.grad_shard_valid) continue;
        SHARDLAB_ASSIGN_OR_RETURN(Tensor wide, grad_fp32(fp));
        SHARDLAB_RETURN_IF_ERROR(dev_.scale(wide, static_cast<float>(coef)));
        SHARDLAB_RETURN_IF_ERROR(store_grad(fp, wide));
      }
    }
  }
  return norm;
}

Status FullyShardedModel::set_optimizer(const optim::OptimizerConfig& config) {
  optimizers_.clear();
  for (const FlatParameter& fp : units_) {
    device::Device& state_dev = options_.offload_device ? *options_.offload_device : dev_;
    // Frozen units keep no optimizer state.
    SHARDLAB_ASSIGN_OR_RETURN(
        optim::Optimizer o, optim::Optimizer::create(state_dev, config, fp.has_trainable ? fp.layout.shard_numel() : 0,
                                                     "unit" + std::to_string(fp.unit)));
    optimizers_.push_back(std::move(o));
  }
  return Status::ok();
}

Status FullyShardedModel::optimizer_step() {
  if (optimizers_.size() != units_.size()) return Status::failed_precondition("FSDP: set_optimizer was not called");
  delay(DelayPoint::kBeforeOptimizerStep);
  for (std::size_t u = 0; u < units_.size(); ++u) {
    if (!units_[u].grad_shard_valid) continue;  // no gradient: PyTorch skips the parameter
    PhaseScope phase(options_, {"optimizer_step", static_cast<int>(u), "optimizer"});
    SHARDLAB_ASSIGN_OR_RETURN(Tensor grad, grad_fp32(units_[u]));
    SHARDLAB_RETURN_IF_ERROR(optimizers_[u].step(units_[u].shard, grad, &units_[u].trainable));
  }
  return Status::ok();
}

Status FullyShardedModel::gather_full_params(const Tensor& out) {
  return gather_full(
      "gather_full_params", [](const FlatParameter& fp, int) { return fp.shard; }, out);
}

// NOTE [FSDP2 copy-in and copy-out]: rank r's shard sits at [r·S, (r+1)·S) of the
// all-gathered buffer; each of its pieces is a run of rows of one parameter, copied to
// that parameter's place in the unsharded buffer (and back for gradients), cast on the way
// when the two buffers' dtypes differ (param_dtype, reduce_dtype), so no whole-buffer cast
// comes before or after; all of a unit's pieces go to the device as one copy_many. Padding
// rows are neither read nor written by the copy-out; the copy-in's target starts zeroed.
Status FullyShardedModel::copy_pieces(const FlatParameter& fp, const Tensor& by_rank, const Tensor& unsharded, bool out,
                                      int first_rank) {
  const std::int64_t s = fp.layout.shard_numel();
  const std::int64_t ranks = s > 0 ? by_rank.numel() / s : 0;
  std::vector<device::Device::CopyPair> pairs;
  for (const RankShard& shard : fp.layout.shards()) {
    if (shard.rank < first_rank || shard.rank >= first_rank + ranks) continue;
    for (const ShardPiece& piece : shard.pieces) {
      const LayoutParam& p = fp.layout.params()[static_cast<std::size_t>(piece.param)];
      SHARDLAB_ASSIGN_OR_RETURN(Tensor ranked,
                                by_rank.narrow((shard.rank - first_rank) * s + piece.offset_in_shard, piece.numel()));
      SHARDLAB_ASSIGN_OR_RETURN(Tensor param, unsharded.narrow(p.flat_offset + piece.param_begin, piece.numel()));
      pairs.push_back(out ? device::Device::CopyPair{ranked, param} : device::Device::CopyPair{param, ranked});
    }
  }
  // One device op per direction, as PyTorch's split_with_sizes_copy / chunk_cat.
  return dev_.copy_many(pairs);
}

Status FullyShardedModel::gather_full_grads(const Tensor& out) {
  return gather_full(
      "gather_full_grads", [](const FlatParameter& fp, int) { return fp.grad_shard; }, out);
}

Status FullyShardedModel::gather_full_optimizer_state(int k, const Tensor& out) {
  return gather_full(
      "gather_full_optimizer_state",
      [&](const FlatParameter& fp, int u) {
        const auto& state = optimizers_[static_cast<std::size_t>(u)].state();
        return fp.has_trainable && k < static_cast<int>(state.size()) ? state[static_cast<std::size_t>(k)] : Tensor();
      },
      out);
}

Status FullyShardedModel::gather_full(const char* what, const std::function<Tensor(const FlatParameter&, int)>& pick,
                                      const Tensor& out) {
  if (out.dtype() != DType::kF32 || out.numel() != model::total_numel(specs_)) {
    return Status::invalid_argument(std::string(what) + ": output must be fp32 with " +
                                    std::to_string(model::total_numel(specs_)) + " elements, got " + out.describe());
  }
  for (FlatParameter& fp : units_) {
    const Tensor shard = pick(fp, fp.unit);
    if (!shard.defined()) continue;
    Tensor full = shard;
    if (options_.strategy != ShardingStrategy::kNoShard) {
      SHARDLAB_ASSIGN_OR_RETURN(
          full, dev_.empty({fp.layout.total_numel()}, shard.dtype(), MemoryCategory::kCommBuffers, what));
      SHARDLAB_ASSIGN_OR_RETURN(Tensor mine,
                                full.narrow(shard_comm().rank() * fp.layout.shard_numel(), fp.layout.shard_numel()));
      SHARDLAB_RETURN_IF_ERROR(dev_.copy(shard, mine));
      SHARDLAB_RETURN_IF_ERROR(
          shard_comm().all_gather_into(full, mine)->wait(options_.collective_timeout).with_context(what));
    }
    if (fp.layout.per_parameter() && options_.strategy != ShardingStrategy::kNoShard) {
      SHARDLAB_ASSIGN_OR_RETURN(
          Tensor params, dev_.empty({fp.layout.unsharded_numel()}, full.dtype(), MemoryCategory::kCommBuffers, what));
      SHARDLAB_RETURN_IF_ERROR(copy_pieces(fp, full, params, /*out=*/true));
      full = params;
    }
    for (std::size_t i = 0; i < fp.param_indices.size(); ++i) {
      SHARDLAB_ASSIGN_OR_RETURN(Tensor v, fp.view(full, static_cast<int>(i)));
      SHARDLAB_ASSIGN_OR_RETURN(Tensor dst,
                                out.narrow(model_offset_[static_cast<std::size_t>(fp.param_indices[i])], v.numel()));
      SHARDLAB_RETURN_IF_ERROR(dev_.cast(*v.reshape({v.numel()}), dst));  // a copy when already fp32
    }
  }
  return Status::ok();
}

}  // namespace shardlab::runtime::fsdp
