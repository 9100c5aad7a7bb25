#include "fuzz/targets.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "cli/scenario.h"
#include "runtime/core/check.h"
#include "runtime/fsdp/checkpoint.h"
#include "runtime/io/safetensors.h"
#include "runtime/model/bert_io.h"
#include "runtime/train/fsdp_train.h"
#include "sim/engine/world.h"
#include "sim/models/device/profiles.h"
#include "sim/models/device/stack.h"
#include "sim/models/network/topology.h"
#include "sim/timing/capture.h"
#include "sim/timing/op_graph.h"

namespace shardlab::fuzz {
namespace {

namespace fs = std::filesystem;

const fs::path kSource = SHARDLAB_SOURCE_DIR;

// A shipped or self-written seed file (io::read_file: regular files only, bounded); a
// missing one is a broken tree, not a seed.
std::string slurp(const fs::path& p) {
  auto text = runtime::io::read_file(p.string());
  SHARDLAB_CHECK_OK(text.status());
  return *text;
}

std::vector<std::string> files_in(const fs::path& dir, const std::string& ext) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file() && e.path().extension() == ext) out.push_back(slurp(e.path()));
  }
  std::sort(out.begin(), out.end());
  return out;
}

// A scratch folder of this process, removed when it exits.
struct Scratch {
  fs::path dir = fs::temp_directory_path() / ("shardlab_fuzz_" + std::to_string(::getpid()));
  Scratch() { fs::create_directories(dir); }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  std::string write(const std::string& name, std::string_view text) const {
    const fs::path p = dir / name;
    std::ofstream(p, std::ios::binary | std::ios::trunc).write(text.data(), static_cast<std::streamsize>(text.size()));
    return p.string();
  }
};

const Scratch& scratch() {
  static const Scratch s;
  return s;
}

runtime::train::FsdpTrainOptions tiny_mlp() {
  runtime::train::FsdpTrainOptions o;
  o.model_kind = runtime::train::ModelKind::kMlp;
  o.model.input_dim = 6;
  o.model.hidden_dim = 5;
  o.model.num_hidden_layers = 2;
  o.model.num_classes = 3;
  o.global_batch = 4;
  o.steps = 1;
  return o;
}

// --- scenario YAML ---------------------------------------------------------------------
std::vector<std::string> scenario_seeds() { return files_in(kSource / "scenarios", ".yaml"); }
Status scenario_run(std::string_view in) {
  return cli::parse_scenario((scratch().dir / "scenario.yaml").string(), std::string(in)).status();
}

// --- accelerate config (YAML or fsdp_config JSON) --------------------------------------
std::vector<std::string> accelerate_seeds() {
  auto out = files_in(kSource / "scenarios/testdata", ".yaml");
  std::erase_if(out, [](const std::string& s) { return s.find("fsdp") == std::string::npos; });
  for (auto& s : files_in(kSource / "scenarios/testdata", ".json")) {
    if (s.find("fsdp_") != std::string::npos) out.push_back(std::move(s));
  }
  return out;
}
Status accelerate_run(std::string_view in) {
  cli::ScenarioOverrides o;
  o.fsdp_config = scratch().write("accelerate.yaml", in);
  return cli::parse_scenario(cli::kDefaultScenarioName, std::string(cli::default_scenario_text()), o).status();
}

// --- Hugging Face config.json ----------------------------------------------------------
std::vector<std::string> hf_config_seeds() {
  return {R"({"architectures": ["BertForMaskedLM"], "attention_probs_dropout_prob": 0.1, "hidden_act": "gelu",
          "hidden_dropout_prob": 0.1, "hidden_size": 128, "initializer_range": 0.02, "intermediate_size": 512,
          "layer_norm_eps": 1e-12, "max_position_embeddings": 512, "model_type": "bert", "num_attention_heads": 2,
          "num_hidden_layers": 2, "pad_token_id": 0, "type_vocab_size": 2, "vocab_size": 30522})",
          R"({"architectures": ["BertForSequenceClassification"], "hidden_size": 64, "intermediate_size": 128,
          "num_attention_heads": 4, "num_hidden_layers": 1, "vocab_size": 1000, "num_labels": 3,
          "hidden_act": "gelu_new", "classifier_dropout": null, "pad_token_id": 1})"};
}
Status hf_config_run(std::string_view in) {
  return runtime::model::parse_bert_config("config.json", std::string(in)).status();
}

// --- safetensors -----------------------------------------------------------------------
std::vector<std::string> safetensors_seeds() {
  runtime::io::SafetensorsFile f;
  for (int k = 0; k < 3; ++k) {
    runtime::io::StoredTensor t;
    t.name = "layer." + std::to_string(k) + ".weight";
    t.dtype = k == 2 ? DType::kBF16 : DType::kF32;
    t.shape = {2, 3};
    t.data.resize(static_cast<std::size_t>(6 * (k == 2 ? 2 : 4)), std::byte{7});
    f.tensors.push_back(t);
  }
  f.metadata["format"] = "pt";
  return {runtime::io::serialize_safetensors(f)};
}
Status safetensors_run(std::string_view in) {
  std::vector<std::byte> bytes(in.size());
  if (!in.empty()) std::memcpy(bytes.data(), in.data(), in.size());
  return runtime::io::parse_safetensors("x.safetensors", bytes).status();
}

// --- device and topology profiles ------------------------------------------------------
std::vector<std::string> device_seeds() { return files_in(kSource / "sim/profiles/devices", ".json"); }
Status device_run(std::string_view in) { return sim::parse_device_profile(std::string(in), "device.json").status(); }
std::vector<std::string> topology_seeds() { return files_in(kSource / "sim/profiles/topologies", ".json"); }
Status topology_run(std::string_view in) { return sim::parse_topology(std::string(in), "topology.json").status(); }
std::vector<std::string> stack_seeds() { return files_in(kSource / "sim/profiles/stacks", ".json"); }
Status stack_run(std::string_view in) { return sim::parse_stack(std::string(in), "stack.json").status(); }

// --- op graph --------------------------------------------------------------------------
std::vector<std::string> op_graph_seeds() {
  auto g = sim::timing::capture_graph(tiny_mlp(), 2, sim::DeviceProfile{});
  if (!g.is_ok()) return {};
  return {sim::timing::graph_to_json_string(*g)};
}
Status op_graph_run(std::string_view in) {
  return sim::timing::graph_from_json_string(std::string(in), "graph.json").status();
}

// --- checkpoint index ------------------------------------------------------------------
// A SHARDED, a LOCAL and a FULL checkpoint of a 2-rank MLP, written once per process. The
// fuzzed index is resealed after it is written (a forger who knows the checksum), so that
// the validation behind the checksum is what is fuzzed, then described and loaded.
const fs::path& checkpoint_root() {
  static const fs::path root = [] {
    const fs::path base = scratch().dir / "ckpt";
    const runtime::fsdp::StateDictType types[] = {runtime::fsdp::StateDictType::kSharded,
                                                  runtime::fsdp::StateDictType::kLocal,
                                                  runtime::fsdp::StateDictType::kFull};
    for (int k = 0; k < 3; ++k) {
      auto o = tiny_mlp();
      o.checkpoint.dir = (base / std::to_string(k)).string();
      o.checkpoint.type = types[k];
      sim::WorldOptions wo;
      wo.world_size = 2;
      (void)sim::World(wo).run([&](sim::RankContext& ctx) -> Status {
        return runtime::train::train_fsdp(ctx.comm, ctx.device, ctx.clock, o).status();
      });
    }
    return base;
  }();
  return root;
}
std::vector<std::string> checkpoint_seeds() {
  std::vector<std::string> out;
  for (int k = 0; k < 3; ++k) out.push_back(slurp(checkpoint_root() / std::to_string(k) / "step-00000001/index.json"));
  return out;
}
Status checkpoint_run(std::string_view in) {
  // The fuzzed index goes into the SHARDED checkpoint's step (its files are the pieces a
  // mutated index most often names).
  const std::string step = (checkpoint_root() / "0" / "step-00000001").string();
  if (Status s = runtime::io::write_file_atomic(step + "/index.json", std::string(in)); !s.is_ok()) return s;
  (void)runtime::fsdp::reseal_index(step);
  if (Status s = runtime::fsdp::describe_checkpoint(step).status(); !s.is_ok()) return s;
  static const auto net = runtime::train::make_model(tiny_mlp());
  static const std::vector<std::string> states = [] {
    const auto j = nlohmann::json::parse(checkpoint_seeds()[0], nullptr, /*allow_exceptions=*/false);
    std::vector<std::string> s;
    if (j.is_object() && j.contains("optimizer")) s = j["optimizer"]["states"].get<std::vector<std::string>>();
    return s;
  }();
  return runtime::fsdp::load_checkpoint_unsharded(step, net->params(), states).status();
}

}  // namespace

const std::vector<Target>& targets() {
  static const std::vector<Target> all = {
      {"scenario_yaml", scenario_seeds, scenario_run},
      {"accelerate_config", accelerate_seeds, accelerate_run},
      {"hf_config_json", hf_config_seeds, hf_config_run},
      {"safetensors", safetensors_seeds, safetensors_run},
      {"device_profile", device_seeds, device_run},
      {"topology_profile", topology_seeds, topology_run},
      {"software_stack", stack_seeds, stack_run},
      {"op_graph", op_graph_seeds, op_graph_run},
      {"checkpoint_index", checkpoint_seeds, checkpoint_run, /*accepts_data_loss=*/true},
  };
  return all;
}

const Target* find_target(std::string_view name) {
  for (const auto& t : targets()) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

bool acceptable(const Target& t, const Status& s) {
  return s.is_ok() || s.code() == StatusCode::kInvalidArgument ||
         (t.accepts_data_loss && s.code() == StatusCode::kDataLoss);
}

}  // namespace shardlab::fuzz
