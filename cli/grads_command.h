// `shardlab grads`: one forward+backward of a Hugging Face BERT checkpoint on a token
// batch, on N simulated ranks under FSDP, writing the gathered full gradients under their
// Hugging Face names — the check users run against PyTorch.
#pragma once

#include <optional>
#include <string>

#include "runtime/fsdp/options.h"

namespace shardlab::cli {

struct GradsArgs {
  std::string model_dir;  // config.json + model.safetensors
  std::string inputs;     // batch safetensors
  std::string out;        // gradients safetensors
  int world_size = 1;
  runtime::fsdp::ShardingStrategy strategy = runtime::fsdp::ShardingStrategy::kFullShard;
  int devices_per_node = 0;      // HYBRID_SHARD; 0: world_size / 2 (two groups) when possible
  std::string dtype = "fp32";    // fp32 | bf16
  std::optional<float> dropout;  // overrides hidden and attention dropout
  std::uint64_t seed = 0;        // dropout masks
  std::string dropout_masks;     // where to write them ("" = not written)
  bool quiet = false;
};

// Returns the exit code: 0 ok, 2 bad input, 3 runtime failure.
int grads_command(const GradsArgs& args);

}  // namespace shardlab::cli
