// `shardlab grads`: one forward + backward of a Hugging Face BERT checkpoint under FSDP; its gradients.
#include "cli/commands/command.h"

#include <cstdio>
#include <memory>

#include "cli/grads_command.h"
#include "cli/scenario.h"
#include "runtime/fsdp/options.h"

namespace shardlab::cli {

namespace {

// The flags: CLI11 binds them at registration, the action reads them.
struct State {
  GradsArgs grads;
  std::string grads_strategy = "FULL_SHARD";
  float grads_dropout = -1.0f;
};

}  // namespace

Subcommand add_grads_command(CLI::App& app) {
  auto state = std::make_shared<State>();
  State& flags = *state;
  auto* grads_cmd = app.add_subcommand(
      "grads",
      "One forward+backward of a Hugging Face BERT checkpoint (config.json + model.safetensors; the head\n"
      "from architectures[0]) on a token batch, in training mode, on N simulated ranks under FSDP. Writes\n"
      "one F32 gradient per parameter under its Hugging Face name, and the mean loss in __metadata__.");
  grads_cmd->add_option("--model", flags.grads.model_dir, "Folder with config.json and model.safetensors")->required();
  grads_cmd
      ->add_option("--inputs", flags.grads.inputs,
                   "Batch safetensors: input_ids [B, T], attention_mask [B, T], optional token_type_ids, and "
                   "labels ([B] or [B, T]) or start_positions + end_positions [B]")
      ->required();
  grads_cmd->add_option("--out", flags.grads.out, "Where to write the gradients (safetensors)")->required();
  grads_cmd
      ->add_option("--world-size,-n", flags.grads.world_size, "Simulated ranks the batch is split over (must divide B)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  grads_cmd->add_option("--strategy", flags.grads_strategy, "FULL_SHARD, SHARD_GRAD_OP, NO_SHARD or HYBRID_SHARD")
      ->capture_default_str();
  grads_cmd
      ->add_option("--devices-per-node", flags.grads.devices_per_node,
                   "HYBRID_SHARD group size (default: half the ranks)")
      ->check(CLI::Range(1, 4096));
  grads_cmd
      ->add_option("--dtype", flags.grads.dtype, "fp32, or bf16 (bf16 parameters and activations, fp32 accumulation)")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  grads_cmd
      ->add_option("--dropout", flags.grads_dropout,
                   "Override the config's dropout (0 to compare with another framework)")
      ->check(CLI::Range(0.0f, 0.999f));
  grads_cmd->add_option("--dropout-masks", flags.grads.dropout_masks,
                        "Also write the dropout masks the step applies (safetensors, one per Dropout module by its "
                        "Hugging Face name, values 0 or 1/(1-p)), so another framework can apply the same ones");
  grads_cmd->add_option("--seed", flags.grads.seed, "Seed of the dropout masks (0 to 2^64 - 1)")
      ->check(same_rule_as_the_scenario(parse_seed, "--seed"))
      ->capture_default_str();
  return {grads_cmd, [state](int* /*argc*/, char*** /*argv*/) -> int {
            State& flags = *state;
            auto st = shardlab::runtime::fsdp::parse_strategy(flags.grads_strategy);
            if (!st.is_ok()) {
              std::fprintf(stderr, "shardlab grads: %s\n", st.status().with_context("--strategy").message().c_str());
              return 2;
            }
            flags.grads.strategy = *st;
            if (flags.grads_dropout >= 0.0f) flags.grads.dropout = flags.grads_dropout;
            return grads_command(flags.grads);
          }};
}

}  // namespace shardlab::cli
