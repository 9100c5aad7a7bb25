// FlatParameter: one FSDP unit's parameters, flattened (ShardLayout) and sharded.
//
// Owns the rank's fp32 shard (S elements, zero padding included), its gradient shard, and —
// only while unsharded — the full padded buffer (W·S elements) that the original
// parameters view. Views are made through Tensor::view_of, so a view can never point
// outside the buffer it belongs to (the Gaudi "offset 13835057943613014016" class of bug).
//
// States: kSharded → (all-gather issued) kUnsharding → kUnsharded → (reshard) kSharded.
// Every transition checks the buffer sizes (SHARDLAB_CHECK): the shard is S elements, the
// full buffer W·S.
//
// Thread safety: one rank's thread.
#pragma once

#include <string>
#include <vector>

#include "runtime/comm/communicator.h"
#include "runtime/fsdp/shard_layout.h"
#include "runtime/model/module.h"

namespace shardlab::runtime::fsdp {

enum class UnitState { kSharded, kUnsharding, kUnsharded };

struct FlatParameter {
  int unit = 0;
  std::vector<int> param_indices;  // model parameter index of each layout parameter
  std::vector<model::ParamSpec> specs;
  ShardLayout layout;
  Tensor shard;                   // [S] fp32 master shard (parameters)
  Tensor grad_shard;              // [S] fp32 (gradients)
  bool grad_shard_valid = false;  // false: the next reduction assigns instead of adding
  Tensor gathered;                // [W·S] in param_dtype while the all-gather is in flight
  Tensor post_forward_shard;      // [W·S/N] in param_dtype from forward to backward (reshard_after_forward=N)
  Tensor full;                    // [W·S] fp32 compute buffer while unsharded
  Tensor full_grad;               // [W·S] during backward (and across no_sync micro-batches)
  comm::WorkPtr gather;           // the all-gather from unshard until reshard's host wait
  UnitState state = UnitState::kSharded;
  bool has_trainable = false;           // any parameter with requires_grad
  std::vector<std::uint8_t> trainable;  // [S]: 1 where this rank's shard holds a trainable element

  // Index of a model parameter inside this unit, or -1.
  int local_index(int model_param) const;
  // A view of parameter `local` in `buffer` (the full param or grad buffer), shaped.
  Result<Tensor> view(const Tensor& buffer, int local) const;
};

}  // namespace shardlab::runtime::fsdp
