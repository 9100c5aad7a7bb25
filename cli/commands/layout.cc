// `shardlab layout`: print PyTorch FSDP's parameter layout as JSON: FSDP1's flat parameter,
// or FSDP2's per-parameter dim-0 shards.
#include "cli/commands/command.h"

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "runtime/core/dtype.h"
#include "runtime/fsdp/dim0_layout.h"
#include "runtime/fsdp/shard_layout.h"

namespace shardlab::cli {

namespace {

// The flags: CLI11 binds them at registration, the action reads them.
struct State {
  std::string layout_shapes;
  std::string layout_dtype = "fp32";
  int layout_world = 1;
  std::int64_t layout_align = 0;
  int fsdp_version = 1;
};

}  // namespace

Subcommand add_layout_command(CLI::App& app) {
  auto state = std::make_shared<State>();
  State& flags = *state;
  auto* layout_cmd = app.add_subcommand(
      "layout",
      "Print PyTorch FSDP's parameter layout as JSON. FSDP1 (FullyShardedDataParallel): the flat parameter's\n"
      "offsets (with alignment padding), the shard size S = ceil(total / W) and, per rank, which slice of which\n"
      "parameter it owns. FSDP2 (fully_shard, --fsdp-version 2): each parameter's dim-0 shard per rank (its\n"
      "local shape and rows), the padded shard every rank all-gathers, and the all-gather input size.");
  layout_cmd->add_option("--shapes", flags.layout_shapes, "Parameter shapes in order, e.g. 7x3,5x7,5x5")->required();
  layout_cmd->add_option("--world-size", flags.layout_world, "Number of ranks W (1 to 65536)")->required();
  layout_cmd->add_option("--dtype", flags.layout_dtype, "Element type: fp32, bf16, fp16, int64")->capture_default_str();
  layout_cmd
      ->add_option("--align-bytes", flags.layout_align,
                   "Start every parameter after the first at a multiple of this many bytes (0 or 16 in PyTorch)")
      ->capture_default_str();
  layout_cmd
      ->add_option("--fsdp-version", flags.fsdp_version,
                   "1: FullyShardedDataParallel's flat parameter; 2: fully_shard's per-parameter dim-0 sharding")
      ->check(CLI::IsMember({1, 2}))
      ->capture_default_str();
  return {layout_cmd, [state](int* /*argc*/, char*** /*argv*/) -> int {
            State& flags = *state;
            const auto fail = [](const shardlab::Status& s) {
              std::fprintf(stderr, "shardlab layout: %s\n", s.message().c_str());
              return s.exit_code();
            };
            auto shapes = shardlab::runtime::fsdp::parse_shapes(flags.layout_shapes);
            if (!shapes.is_ok()) return fail(shapes.status());
            auto dtype = shardlab::parse_dtype(flags.layout_dtype);
            if (!dtype.is_ok()) return fail(dtype.status().with_context("--dtype"));
            if (flags.fsdp_version == 2) {
              if (flags.layout_align != 0) {
                return fail(shardlab::Status::invalid_argument(
                    "--align-bytes " + std::to_string(flags.layout_align) +
                    " applies to FSDP1's flat parameter; FSDP2 has none (each parameter is its own dim-0 shard); "
                    "allowed with --fsdp-version 2: --align-bytes 0 (the default)"));
              }
              auto layout = shardlab::runtime::fsdp::Dim0Layout::make(*shapes, flags.layout_world, *dtype);
              if (!layout.is_ok()) return fail(layout.status());
              std::printf("%s\n", layout->to_json().c_str());
              return 0;
            }
            auto layout =
                shardlab::runtime::fsdp::ShardLayout::make(*shapes, flags.layout_world, *dtype, flags.layout_align);
            if (!layout.is_ok()) return fail(layout.status());
            std::printf("%s\n", layout->to_json().c_str());
            return 0;
          }};
}

}  // namespace shardlab::cli
