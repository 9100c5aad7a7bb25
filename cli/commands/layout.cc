// `shardlab layout`: print PyTorch FSDP's flat-parameter layout as JSON.
#include "cli/commands/command.h"

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "runtime/core/dtype.h"
#include "runtime/fsdp/shard_layout.h"

namespace shardlab::cli {

namespace {

// The flags: CLI11 binds them at registration, the action reads them.
struct State {
  std::string layout_shapes;
  std::string layout_dtype = "fp32";
  int layout_world = 1;
  std::int64_t layout_align = 0;
};

}  // namespace

Subcommand add_layout_command(CLI::App& app) {
  auto state = std::make_shared<State>();
  State& flags = *state;
  auto* layout_cmd = app.add_subcommand(
      "layout",
      "Print PyTorch FSDP's flat-parameter layout as JSON: parameter offsets (with alignment padding), the\n"
      "shard size S = ceil(total / W) and, per rank, which slice of which parameter it owns.");
  layout_cmd->add_option("--shapes", flags.layout_shapes, "Parameter shapes in order, e.g. 7x3,5x7,5x5")->required();
  layout_cmd->add_option("--world-size", flags.layout_world, "Number of ranks W (1 to 65536)")->required();
  layout_cmd->add_option("--dtype", flags.layout_dtype, "Element type: fp32, bf16, fp16, int64")->capture_default_str();
  layout_cmd
      ->add_option("--align-bytes", flags.layout_align,
                   "Start every parameter after the first at a multiple of this many bytes (0 or 16 in PyTorch)")
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
            auto layout =
                shardlab::runtime::fsdp::ShardLayout::make(*shapes, flags.layout_world, *dtype, flags.layout_align);
            if (!layout.is_ok()) return fail(layout.status());
            std::printf("%s\n", layout->to_json().c_str());
            return 0;
          }};
}

}  // namespace shardlab::cli
