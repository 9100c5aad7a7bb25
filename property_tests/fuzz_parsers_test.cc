// Fuzzing every parser of outside input (label `fuzz`): rapidcheck mutates each fuzz
// target's seeds (fuzz/targets.h: the shipped files, and files the project writes
// itself) — bit flips, byte insertions and deletions, duplicated spans, numbers replaced
// by extreme ones — and feeds them to the parser. The property: it returns within the
// target's contract (OK or INVALID_ARGUMENT) — never a crash, an abort, a hang or another
// code. libFuzzer runs the same targets under sanitizers (the `fuzz` preset, scripts/fuzz). ctest runs a bounded,
// seeded number of cases; the property-long preset and the asan preset run many more (SHARDLAB_PROPERTY_LONG).
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "fuzz/targets.h"

namespace shardlab::property {
namespace {

// One mutation of a text: what breaks parsers in practice.
struct Mutation {
  int kind = 0;        // 0 flip a bit, 1 insert bytes, 2 delete a span, 3 duplicate a span, 4 extreme number
  std::size_t at = 0;  // position (modulo the size)
  std::size_t len = 0;
  std::string bytes;
};

const std::vector<std::string> kExtremes = {"-1",
                                            "0",
                                            "4611686018427387904",
                                            "18446744073709551616",
                                            "1e400",
                                            "-1e400",
                                            "1e-300",
                                            "NaN",
                                            "-9223372036854775809",
                                            "2147483648",
                                            "1099511627776",
                                            "65537",
                                            "\"x\"",
                                            "[]",
                                            "{}",
                                            "null",
                                            "true"};

rc::Gen<Mutation> mutation() {
  return rc::gen::build<Mutation>(
      rc::gen::set(&Mutation::kind, rc::gen::inRange(0, 5)),
      rc::gen::set(&Mutation::at, rc::gen::inRange<std::size_t>(0, 1u << 20)),
      rc::gen::set(&Mutation::len, rc::gen::inRange<std::size_t>(0, 64)),
      rc::gen::set(&Mutation::bytes, rc::gen::container<std::string>(rc::gen::arbitrary<char>())));
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
      while (e < s.size() &&
             (std::isalnum(static_cast<unsigned char>(s[e])) || s[e] == '.' || s[e] == '-' || s[e] == '+'))
        ++e;
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

// One mutated seed of the named target, run through its parser: the outcome must be one
// its contract allows (fuzz/targets.h).
void check(std::string_view name) {
  const fuzz::Target* t = fuzz::find_target(name);
  RC_ASSERT(t != nullptr);
  static std::map<std::string_view, std::vector<std::string>> seeds;
  auto& mine = seeds[name];
  if (mine.empty()) mine = t->seeds();
  RC_ASSERT(!mine.empty());
  const Status s = t->run(mutated(mine));
  RC_ASSERT(fuzz::acceptable(*t, s));
}

RC_GTEST_PROP(Fuzz, ScenarioYaml, ()) { check("scenario_yaml"); }
RC_GTEST_PROP(Fuzz, AccelerateConfig, ()) { check("accelerate_config"); }
RC_GTEST_PROP(Fuzz, HuggingFaceConfigJson, ()) { check("hf_config_json"); }
RC_GTEST_PROP(Fuzz, SafetensorsFile, ()) { check("safetensors"); }
RC_GTEST_PROP(Fuzz, DeviceProfiles, ()) { check("device_profile"); }
RC_GTEST_PROP(Fuzz, TopologyProfiles, ()) { check("topology_profile"); }
RC_GTEST_PROP(Fuzz, SoftwareStacks, ()) { check("software_stack"); }
RC_GTEST_PROP(Fuzz, OpGraph, ()) { check("op_graph"); }
RC_GTEST_PROP(Fuzz, CheckpointIndex, ()) { check("checkpoint_index"); }

// Every target is exercised here: a target added to the table without a property above fails.
TEST(Fuzz, EveryTargetHasAProperty) { EXPECT_EQ(fuzz::targets().size(), 9u); }

}  // namespace
}  // namespace shardlab::property
