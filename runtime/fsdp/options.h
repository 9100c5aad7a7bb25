// FSDP options, named and defaulted as in PyTorch FSDP (see reference/fsdp-semantics.md).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/core/clock.h"
#include "runtime/core/dtype.h"
#include "runtime/core/status.h"
#include "runtime/device/device.h"

namespace shardlab::runtime::fsdp {

// kHybridShardZero2 is PyTorch's _HYBRID_SHARD_ZERO2: HYBRID_SHARD's groups (shard inside
// a node, all-reduce gradients across nodes) with SHARD_GRAD_OP's schedule (parameters stay
// unsharded from forward to backward: one all-gather per unit per iteration).
enum class ShardingStrategy { kFullShard, kShardGradOp, kNoShard, kHybridShard, kHybridShardZero2 };
// HYBRID_SHARD or _HYBRID_SHARD_ZERO2: shard groups of devices_per_node ranks + replica groups.
constexpr bool is_hybrid(ShardingStrategy s) {
  return s == ShardingStrategy::kHybridShard || s == ShardingStrategy::kHybridShardZero2;
}
enum class BackwardPrefetch { kNone, kBackwardPre, kBackwardPost };

std::string_view strategy_name(ShardingStrategy s);  // "FULL_SHARD", …
std::string_view prefetch_name(BackwardPrefetch p);  // "BACKWARD_PRE", …, "NONE"
// Accept PyTorch's names (any case) and accelerate's numbers 1-5 for strategies.
Result<ShardingStrategy> parse_strategy(std::string_view text);
Result<BackwardPrefetch> parse_prefetch(std::string_view text);

// Points where tests inject delays (PyTorch's delay-injection tests); results must not change.
enum class DelayPoint { kBeforeAllGather, kBeforeReduceScatter, kAfterForward, kBeforeOptimizerStep };

// One FSDP phase beginning or ending on this rank (FsdpOptions::on_fsdp_event), for
// traces. Begin and end come in pairs, properly nested, on the rank's thread; an end is
// reported on failure too. The strings are static.
struct FsdpEvent {
  // "unshard" (copy-in and all-gather issue), "unshard_wait" (blocking until the all-gather
  // is done), "reshard", "reduce_grad" (a gradient reduction issued), "reduce_grad_wait"
  // (blocking until it is done), "optimizer_step".
  const char* name = "";
  int unit = -1;
  const char* phase = "";       // "forward", "backward", "optimizer", "idle", "summon_full_params"
  const char* collective = "";  // reduce_grad(_wait): "reduce_scatter" or "all_reduce"; unshard: "all_gather"
  bool prefetch = false;        // unshard: issued ahead of use
  bool begin = true;
};

struct FsdpOptions {
  ShardingStrategy strategy = ShardingStrategy::kFullShard;
  BackwardPrefetch backward_prefetch = BackwardPrefetch::kBackwardPre;
  bool forward_prefetch = false;
  // At most 2 non-root units unsharded at once (PyTorch's limit_all_gathers rate limiter;
  // FSDP1 only: FSDP2 has none, its prefetches are bounded by what is asked for);
  // a prefetch that would exceed it is skipped (prefetch costs memory, never correctness).
  bool limit_all_gathers = true;
  // NOTE [Asynchronous gradient reduction] in fully_sharded.cc: a unit's reduction is
  // waited one unit later and at the end of backward. false waits for it where it is
  // issued (DeepSpeed's overlap_comm: false): the same results, no overlap; for A/B runs.
  bool async_reduction = true;
  // 1: FullyShardedDataParallel (one flat parameter per unit, ShardLayout::make); 2:
  // fully_shard (every parameter sharded on dim 0, ShardLayout::make_per_parameter; the
  // all-gathered shards are copied out into the unsharded parameters, and gradients in
  // before the reduce-scatter). The math per element is the same: the reduce-scatter sums
  // each element over the ranks as FSDP1's does.
  int version = 1;
  // FSDP2's reshard_after_forward=N (version 2, FULL_SHARD; 1 < N < W, N divides W): after
  // its forward a unit keeps its parameters sharded over groups of N consecutive ranks (the
  // intra-node group; each rank W/N shards' worth instead of one), and its backward
  // all-gathers them inside that group only. 0: reshard to the whole world (True).
  int reshard_after_forward_size = 0;
  // FSDP2's explicit prefetching, as set_modules_to_forward_prefetch /
  // set_modules_to_backward_prefetch given each unit's next N units (in forward order, and
  // its reverse in backward; their usual use): a unit's pre-forward (pre-backward) issues the
  // all-gathers of the N units after it. 0: forward_prefetch (1 unit) and backward_prefetch
  // decide. The order is the one the first forward recorded (as the implicit prefetch's).
  int forward_prefetch_units = 0;
  int backward_prefetch_units = 0;
  // use_orig_params alignment: 16 bytes (PyTorch) or 0. FSDP1 only (FSDP2 has no flat
  // parameter to align in).
  std::int64_t align_bytes = 16;
  // HYBRID_SHARD / _HYBRID_SHARD_ZERO2: ranks per node (shard group size); must divide the world size.
  int devices_per_node = 0;
  // Broadcast rank 0's initial parameters before sharding.
  bool sync_module_states = false;
  // The device this rank computes on, as the user wrote it ("hpu:0", or "hpu" for the
  // current device). Empty: the compute device. A mismatch with the compute device is an
  // error naming both (PyTorch: "Inconsistent compute device and `device_id`").
  std::string device_id;
  // Mixed precision: all-gather and compute parameters in param_dtype (values rounded
  // to it; the math accumulates in fp32), reduce gradients in reduce_dtype; the master
  // shard, its gradient and the optimizer stay fp32. fp32 or bf16.
  DType param_dtype = DType::kF32;
  DType reduce_dtype = DType::kF32;
  // Module buffers (model::BufferSpec; never sharded, every rank holds them whole):
  // floating-point buffers are cast to buffer_dtype when the model is created (PyTorch
  // casts at lazy init) and stay in it; integer buffers (e.g. int64 position ids) are
  // never cast. State dicts save buffers in their declared dtype. Unset (the default,
  // PyTorch's buffer_dtype=None): every buffer keeps its declared dtype. fp32 or bf16.
  std::optional<DType> buffer_dtype;
  // Keep the gradient shards in param_dtype (bf16: half the gradient memory); the
  // optimizer reads them widened to fp32. Off: fp32 gradient shards.
  bool keep_low_precision_grads = false;
  // CPU offload: when set, shards, gradient shards and optimizer state live on this
  // (host) device; unsharded buffers and activations stay on the compute device.
  device::Device* offload_device = nullptr;
  Nanos collective_timeout = 30 * kNanosPerSecond;
  // Fault hook (sim::FaultKind::kViewOffset): called with every parameter view FSDP hands
  // to the model (param(index)), with its unit; it may corrupt the view. Empty: none.
  std::function<void(int unit, Tensor& view)> on_param_view;
  // Test hook: called at each DelayPoint (e.g. to advance a simulated clock).
  std::function<void(DelayPoint)> delay_hook;
  // Told where each FSDP phase begins and ends (FsdpEvent); empty: none. Must not call
  // back into the model.
  std::function<void(const FsdpEvent&)> on_fsdp_event;
};

// Checks the mixed-precision dtypes (param_dtype, reduce_dtype, buffer_dtype when set):
// each must be fp32 or bf16; INVALID_ARGUMENT names the option and its value.
Status validate_mixed_precision(const FsdpOptions& options);

// Resolves `device_id` against the compute device: an index-less id of the same type
// means the current device; anything else that differs is INVALID_ARGUMENT naming both.
Result<device::DeviceId> resolve_device_id(const std::string& device_id, const device::DeviceId& compute, int rank);

// PyTorch's gradient pre/post divide factors (≈ √W each): exactly the loop of
// torch.distributed.fsdp._get_gradient_predivide_factor; post = W / pre.
std::pair<double, double> divide_factors(int world_size);

}  // namespace shardlab::runtime::fsdp
