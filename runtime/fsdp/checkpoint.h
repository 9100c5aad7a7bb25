// FSDP checkpoints: a directory of safetensors files plus a JSON index, written
// atomically, loadable at any world size.
//
//   DIR/latest                     "step-00000012" — replaced atomically (temp + rename)
//   DIR/step-00000012/index.json   what every piece is: global shape, dtype, file, key, (offset, length)
//   DIR/step-00000012/*.safetensors
//
// State dict types (PyTorch's names):
//   FULL_STATE_DICT    rank 0 writes model.safetensors with the full parameters under their
//                      model names (what other tools load) and optimizer.safetensors.
//   SHARDED_STATE_DICT each shard holder writes rank-NNNNN.safetensors with its pieces of
//                      each parameter and optimizer state ("model/<name>@<begin>").
//   LOCAL_STATE_DICT   each rank writes its raw padded flat shards; reloads only at the
//                      same world size and layout (it says so otherwise). The index
//                      records each unit's layout, so one process can unflatten them.
// Loading (torch.distributed.checkpoint's rule): each rank reads, for every piece of
// its new layout, the overlap with every saved piece, so FULL and SHARDED checkpoints
// reload at any world size — larger ones and ones where ranks own nothing included.
//
// NOTE [Buffers in checkpoints]
// Module buffers are whole on every rank. FULL and SHARDED checkpoints save them in
// their declared dtype (PyTorch upcasts buffer_dtype copies when saving): FULL in
// model.safetensors under their model names, SHARDED once, in the shard-rank-0 file, as
// "buffer/<name>"; index.json lists them as "buffer/<name>" (only when the model has
// buffers). LOCAL saves each rank's buffers as they are (in buffer_dtype), as PyTorch's
// LOCAL_STATE_DICT does. Loading casts a saved value to the buffer's dtype.
//
// A save is committed only when every rank wrote its files: the ranks agree through an
// all-reduce, then rank 0 writes index.json and moves `latest`. An interrupted or
// failed save leaves `latest` at the previous checkpoint. NOTE [Checkpoint writers] (a
// step is written under a temporary name and renamed into place whole; one run per
// directory, by lock) and NOTE [Checkpoint integrity] (every file's SHA-256 and size in
// the index, the index's own checksum, pieces that tile their tensors, names confined to
// the checkpoint's directories — all checked before a byte of data is used; any
// violation is INVALID_ARGUMENT naming the file) are in checkpoint.cc.
#pragma once

#include <functional>
#include <string>

#include "runtime/fsdp/fully_sharded.h"

namespace shardlab::runtime::fsdp {

enum class StateDictType { kFull, kSharded, kLocal };
std::string_view state_dict_type_name(StateDictType t);  // "FULL_STATE_DICT", …
Result<StateDictType> parse_state_dict_type(std::string_view text);

struct CheckpointOptions {
  StateDictType type = StateDictType::kSharded;
  // Test hook: called before each file this rank writes; a non-ok status aborts the save
  // on this rank as if the process had died there.
  std::function<Status(const std::string& path)> before_write;
  // The run that saves, as a JSON object (e.g. {"scenario": …, "seed": …}), recorded in the
  // index as "run" so that a resume can say what it resumes; empty: not recorded.
  std::string run;
};

// Collective over the model's world.
Status save_checkpoint(FullyShardedModel& model, const std::string& dir, std::int64_t step,
                       const CheckpointOptions& options = {});
// Collective. Loads the checkpoint `latest` names; returns its step.
Result<std::int64_t> load_checkpoint(FullyShardedModel& model, const std::string& dir);

// Recomputes the checksum of step_dir/index.json after a deliberate edit (tests of the
// index validation; hand repairs). Bad input when the file is not a readable index.
Status reseal_index(const std::string& step_dir);

// One line on a checkpoint step directory for people ("step 2, SHARDED_STATE_DICT saved
// at world size 8 by {"scenario": …, "seed": 0, …}"), after the same checks a load makes.
Result<std::string> describe_checkpoint(const std::string& step_dir);

// The step directory `dir/latest` names ("DIR/step-NNNNNNNN"; bad input otherwise).
Result<std::string> latest_step_dir(const std::string& dir);

// A checkpoint loaded whole by one process, without a model, a layout or a collective:
// what the unsharded oracle starts a resumed run's check from. The pieces are read with
// the same overlap rule as load_checkpoint, so a checkpoint saved at any world size
// gives the same values; a resharding bug in load_checkpoint therefore shows as a
// mismatch instead of being inherited.
struct UnshardedCheckpoint {
  std::int64_t step = 0;             // optimizer steps completed when it was saved
  std::int64_t optimizer_steps = 0;  // the optimizer's own step count (AdamW bias correction)
  std::vector<float> params;         // every parameter of `specs`, in order, concatenated
  // One flat vector per optimizer state (`state_names` order), laid out as `params`;
  // frozen parameters (requires_grad false) have none saved and stay 0.
  std::vector<std::vector<float>> optimizer_state;
};
// Every state dict type: LOCAL_STATE_DICT's rank files are unflattened with the layout
// its index records per unit (a LOCAL index without one: invalid_argument).
Result<UnshardedCheckpoint> load_checkpoint_unsharded(const std::string& step_dir,
                                                      const std::vector<model::ParamSpec>& specs,
                                                      const std::vector<std::string>& state_names);

}  // namespace shardlab::runtime::fsdp
