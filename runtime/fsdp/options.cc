#include "runtime/fsdp/options.h"

#include <algorithm>
#include <cctype>

namespace shardlab::runtime::fsdp {

std::string_view strategy_name(ShardingStrategy s) {
  switch (s) {
    case ShardingStrategy::kFullShard: return "FULL_SHARD";
    case ShardingStrategy::kShardGradOp: return "SHARD_GRAD_OP";
    case ShardingStrategy::kNoShard: return "NO_SHARD";
    case ShardingStrategy::kHybridShard: return "HYBRID_SHARD";
    case ShardingStrategy::kHybridShardZero2: return "_HYBRID_SHARD_ZERO2";
  }
  return "?";
}

std::string_view prefetch_name(BackwardPrefetch p) {
  switch (p) {
    case BackwardPrefetch::kNone: return "NONE";
    case BackwardPrefetch::kBackwardPre: return "BACKWARD_PRE";
    case BackwardPrefetch::kBackwardPost: return "BACKWARD_POST";
  }
  return "?";
}

namespace {
std::string upper(std::string_view t) {
  std::string s(t);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return s;
}
}  // namespace

Result<ShardingStrategy> parse_strategy(std::string_view text) {
  const std::string u = upper(text);
  if (u == "FULL_SHARD" || u == "1") return ShardingStrategy::kFullShard;
  if (u == "SHARD_GRAD_OP" || u == "2") return ShardingStrategy::kShardGradOp;
  if (u == "NO_SHARD" || u == "3") return ShardingStrategy::kNoShard;
  if (u == "HYBRID_SHARD" || u == "4") return ShardingStrategy::kHybridShard;
  if (u == "_HYBRID_SHARD_ZERO2" || u == "HYBRID_SHARD_ZERO2" || u == "5") return ShardingStrategy::kHybridShardZero2;
  return Status::invalid_argument("unknown sharding strategy '" + std::string(text) +
                                  "'; allowed: FULL_SHARD (1), SHARD_GRAD_OP (2), NO_SHARD (3), HYBRID_SHARD (4), "
                                  "_HYBRID_SHARD_ZERO2 (5)");
}

Result<BackwardPrefetch> parse_prefetch(std::string_view text) {
  const std::string u = upper(text);
  if (u == "BACKWARD_PRE") return BackwardPrefetch::kBackwardPre;
  if (u == "BACKWARD_POST") return BackwardPrefetch::kBackwardPost;
  if (u == "NONE" || u == "NO_PREFETCH") return BackwardPrefetch::kNone;
  return Status::invalid_argument("unknown backward prefetch '" + std::string(text) +
                                  "'; allowed: BACKWARD_PRE, BACKWARD_POST, NONE");
}

Status validate_mixed_precision(const FsdpOptions& o) {
  const auto check = [](const char* option, DType d) {
    if (d == DType::kF32 || d == DType::kBF16) return Status::ok();
    return Status::invalid_argument("FSDP mixed precision: " + std::string(option) + " is " +
                                    std::string(dtype_name(d)) + "; allowed: fp32, bf16");
  };
  SHARDLAB_RETURN_IF_ERROR(check("param_dtype", o.param_dtype));
  SHARDLAB_RETURN_IF_ERROR(check("reduce_dtype", o.reduce_dtype));
  if (o.buffer_dtype) SHARDLAB_RETURN_IF_ERROR(check("buffer_dtype", *o.buffer_dtype));
  return Status::ok();
}

Result<device::DeviceId> resolve_device_id(const std::string& device_id, const device::DeviceId& compute, int rank) {
  if (device_id.empty()) return compute;
  auto parsed = device::DeviceId::parse(device_id);
  if (!parsed.is_ok()) return parsed.status().with_context("FSDP device_id on rank " + std::to_string(rank));
  device::DeviceId id = *parsed;
  if (id.type == compute.type && !id.has_index()) id.index = compute.index;  // "hpu" = the current device
  if (id != compute) {
    // PyTorch's words (torch.distributed.fsdp._init_utils._get_compute_device), so that a
    // search for the message finds both; then what resolved and what to pass.
    return Status::invalid_argument(
        "Inconsistent compute device and `device_id` on rank " + std::to_string(rank) + ": " + compute.to_string() +
        " vs " + id.to_string() + (parsed->has_index() ? "" : " (device_id '" + device_id + "' has no index)") +
        "; pass device_id '" + compute.to_string() + "' or '" + compute.type + "' (the current device)");
  }
  return id;
}

std::pair<double, double> divide_factors(int w) {
  // Mirrors torch.distributed.fsdp's _get_gradient_predivide_factor loop exactly: the
  // factor doubles while it divides W and W / factor > factor, so it ends one doubling
  // past the last factor that satisfied both (W = 8 → 4, W = 3 → 2, W = 2 → 2, W = 1 → 1).
  int f = 1;
  while (w % f == 0 && static_cast<double>(w) / f > f) f *= 2;
  return {static_cast<double>(f), static_cast<double>(w) / f};
}

}  // namespace shardlab::runtime::fsdp
