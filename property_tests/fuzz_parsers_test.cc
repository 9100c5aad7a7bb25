// Fuzzing every parser of outside input (label `fuzz`): rapidcheck mutates the shipped
// files (and files the project writes itself) — bit flips, byte insertions and deletions,
// duplicated spans, numbers replaced by extreme ones — and feeds them to the parser. The
// property: it returns, and says OK or INVALID_ARGUMENT (exit 2) — never a crash, an
// abort, a hang or another code. ctest runs a bounded, seeded number of cases; the
// property-long preset and the asan preset run many more (SHARDLAB_PROPERTY_LONG).
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/scenario.h"
#include "runtime/fsdp/checkpoint.h"
#include "runtime/io/safetensors.h"
#include "runtime/model/bert_io.h"
#include "runtime/train/fsdp_train.h"
#include "sim/profiles.h"
#include "sim/timing/capture.h"
#include "sim/timing/op_graph.h"
#include "sim/topology.h"
#include "sim/world.h"

namespace shardlab::property {
namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> files_in(const fs::path& dir, const std::string& ext) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file() && e.path().extension() == ext) out.push_back(slurp(e.path()));
  }
  std::sort(out.begin(), out.end());
  return out;
}

const fs::path kSource = SHARDLAB_SOURCE_DIR;

// One mutation of a text: what breaks parsers in practice.
struct Mutation {
  int kind = 0;       // 0 flip a bit, 1 insert bytes, 2 delete a span, 3 duplicate a span, 4 extreme number
  std::size_t at = 0;  // position (modulo the size)
  std::size_t len = 0;
  std::string bytes;
};

const std::vector<std::string> kExtremes = {"-1", "0", "4611686018427387904", "18446744073709551616", "1e400", "-1e400",
                                            "1e-300", "NaN", "-9223372036854775809", "2147483648", "1099511627776",
                                            "65537", "\"x\"", "[]", "{}", "null", "true"};

rc::Gen<Mutation> mutation() {
  return rc::gen::build<Mutation>(rc::gen::set(&Mutation::kind, rc::gen::inRange(0, 5)),
                                  rc::gen::set(&Mutation::at, rc::gen::inRange<std::size_t>(0, 1u << 20)),
                                  rc::gen::set(&Mutation::len, rc::gen::inRange<std::size_t>(0, 64)),
                                  rc::gen::set(&Mutation::bytes, rc::gen::container<std::string>(
                                                                     rc::gen::arbitrary<char>())));
}

std::string apply(std::string s, const Mutation& m) {
  if (s.empty()) return m.bytes;
  const std::size_t at = m.at % s.size();
  switch (m.kind) {
    case 0: s[at] = static_cast<char>(s[at] ^ (1 << (m.len % 8))); break;
    case 1: s.insert(at, m.bytes.substr(0, 8)); break;
    case 2: s.erase(at, m.len); break;
    case 3: s.insert(at, s.substr(at, m.len)); break;
    default: {
      // The number (or word) at or after `at`, replaced by an extreme value.
      std::size_t b = s.find_first_of("-0123456789", at);
      if (b == std::string::npos) b = at;
      std::size_t e = b;
      while (e < s.size() && (std::isalnum(static_cast<unsigned char>(s[e])) || s[e] == '.' || s[e] == '-' || s[e] == '+')) ++e;
      s.replace(b, e - b, kExtremes[m.len % kExtremes.size()]);
    }
  }
  return s;
}

// A seed picked by the generator, mutated 1-4 times.
std::string mutated(const std::vector<std::string>& seeds) {
  const auto i = *rc::gen::inRange<std::size_t>(0, seeds.size());
  const auto count = static_cast<std::size_t>(*rc::gen::inRange<int>(1, 5));
  const auto muts = *rc::gen::container<std::vector<Mutation>>(count, mutation());
  std::string s = seeds[i];
  for (const auto& m : muts) s = apply(std::move(s), m);
  return s;
}

void assert_bad_input_at_most(const Status& s) {
  RC_ASSERT(s.is_ok() || s.code() == StatusCode::kInvalidArgument);
}

std::string temp_file(const std::string& name, const std::string& text) {
  const fs::path p = fs::temp_directory_path() / ("shardlab_fuzz_" + std::to_string(::getpid()) + "_" + name);
  std::ofstream(p, std::ios::binary) << text;
  return p.string();
}

RC_GTEST_PROP(Fuzz, ScenarioYaml, ()) {
  static const auto seeds = [] {
    auto s = files_in(kSource / "scenarios", ".yaml");
    return s;
  }();
  const std::string text = mutated(seeds);
  assert_bad_input_at_most(cli::parse_scenario(temp_file("dir.yaml", ""), text).status());
}

RC_GTEST_PROP(Fuzz, AccelerateConfig, ()) {
  static const std::vector<std::string> seeds = {slurp(kSource / "scenarios/testdata/accelerate_fsdp_config.yaml")};
  cli::ScenarioOverrides o;
  o.fsdp_config = temp_file("accelerate.yaml", mutated(seeds));
  assert_bad_input_at_most(
      cli::parse_scenario(cli::kDefaultScenarioName, std::string(cli::default_scenario_text()), o).status());
}

RC_GTEST_PROP(Fuzz, HuggingFaceConfigJson, ()) {
  static const std::vector<std::string> seeds = {
      R"({"architectures": ["BertForMaskedLM"], "attention_probs_dropout_prob": 0.1, "hidden_act": "gelu",
          "hidden_dropout_prob": 0.1, "hidden_size": 128, "initializer_range": 0.02, "intermediate_size": 512,
          "layer_norm_eps": 1e-12, "max_position_embeddings": 512, "model_type": "bert", "num_attention_heads": 2,
          "num_hidden_layers": 2, "pad_token_id": 0, "type_vocab_size": 2, "vocab_size": 30522})"};
  assert_bad_input_at_most(runtime::model::parse_bert_config("config.json", mutated(seeds)).status());
}

RC_GTEST_PROP(Fuzz, SafetensorsFile, ()) {
  static const std::vector<std::string> seeds = [] {
    runtime::io::SafetensorsFile f;
    for (int k = 0; k < 3; ++k) {
      runtime::io::StoredTensor t;
      t.name = "layer." + std::to_string(k) + ".weight";
      t.dtype = k == 2 ? DType::kBF16 : DType::kF32;
      t.shape = {2, 3};
      t.data.resize(static_cast<std::size_t>(6 * (k == 2 ? 2 : 4)), std::byte{7});
      f.tensors.push_back(t);
    }
    return std::vector<std::string>{runtime::io::serialize_safetensors(f)};
  }();
  const std::string text = mutated(seeds);
  std::vector<std::byte> bytes(text.size());
  std::memcpy(bytes.data(), text.data(), text.size());
  assert_bad_input_at_most(runtime::io::parse_safetensors("x.safetensors", bytes).status());
}

RC_GTEST_PROP(Fuzz, DeviceProfiles, ()) {
  static const auto seeds = files_in(kSource / "sim/profiles/devices", ".json");
  assert_bad_input_at_most(sim::load_device_profile(temp_file("device.json", mutated(seeds))).status());
}

RC_GTEST_PROP(Fuzz, TopologyProfiles, ()) {
  static const auto seeds = files_in(kSource / "sim/profiles/topologies", ".json");
  assert_bad_input_at_most(sim::parse_topology(mutated(seeds), "topology.json").status());
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

RC_GTEST_PROP(Fuzz, OpGraph, ()) {
  static const std::vector<std::string> seeds = [] {
    auto g = sim::timing::capture_graph(tiny_mlp(), 2, sim::DeviceProfile{});
    return std::vector<std::string>{sim::timing::graph_to_json_string(*g)};
  }();
  assert_bad_input_at_most(sim::timing::graph_from_json_string(mutated(seeds), "graph.json").status());
}

// The checkpoint index, resealed after each mutation (a forger who knows the checksum), so
// that the validation behind the checksum is what is fuzzed.
RC_GTEST_PROP(Fuzz, CheckpointIndex, ()) {
  static const fs::path dir = fs::temp_directory_path() / ("shardlab_fuzz_ckpt_" + std::to_string(::getpid()));
  static const std::vector<std::string> seeds = [] {
    fs::remove_all(dir);
    std::vector<std::string> out;
    for (auto type : {runtime::fsdp::StateDictType::kSharded, runtime::fsdp::StateDictType::kLocal,
                      runtime::fsdp::StateDictType::kFull}) {
      auto o = tiny_mlp();
      o.checkpoint.dir = dir.string();
      o.checkpoint.type = type;
      sim::WorldOptions wo;
      wo.world_size = 2;
      sim::World(wo).run([&](sim::RankContext& ctx) -> Status {
        return runtime::train::train_fsdp(ctx.comm, ctx.device, ctx.clock, o).status();
      });
      out.push_back(slurp(dir / "step-00000001" / "index.json"));
    }
    return out;
  }();
  const std::string step = (dir / "step-00000001").string();
  RC_ASSERT(runtime::io::write_file_atomic(step + "/index.json", mutated(seeds)).is_ok());
  (void)runtime::fsdp::reseal_index(step);
  assert_bad_input_at_most(runtime::fsdp::describe_checkpoint(step).status());
  static const auto net = runtime::train::make_model(tiny_mlp());
  static const auto states =
      nlohmann::json::parse(seeds[0])["optimizer"]["states"].get<std::vector<std::string>>();  // the optimizer's
  const auto s = runtime::fsdp::load_checkpoint_unsharded(step, net->params(), states).status();
  RC_ASSERT(s.is_ok() || s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kDataLoss);
}

}  // namespace
}  // namespace shardlab::property
