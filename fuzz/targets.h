// The fuzz targets: one per parser of outside input. Each target takes raw bytes, hands
// them to its parser the way the CLI would, and returns the parser's Status. The contract
// every parser must keep: it returns (no crash, abort, hang or sanitizer report) with one
// of the codes the target accepts — OK or INVALID_ARGUMENT (exit 2), and for checkpoints
// also DATA_LOSS (a checksum mismatch, exit 2 as well).
//
// The same table drives three runners: libFuzzer binaries (the `fuzz` preset, clang with
// ASan+UBSan), the seed replay ctest entries built by every preset, and the rapidcheck
// mutation test (property_tests/fuzz_parsers_test.cc).
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/core/status.h"

namespace shardlab::fuzz {

struct Target {
  std::string_view name;
  // Inputs the fuzzer starts from: the shipped files of this format, or files the
  // project writes itself (safetensors, op graphs, checkpoint indexes).
  std::vector<std::string> (*seeds)();
  Status (*run)(std::string_view input);
  bool accepts_data_loss = false;
};

const std::vector<Target>& targets();
const Target* find_target(std::string_view name);

// Whether `s` is an outcome the target's contract allows.
bool acceptable(const Target& t, const Status& s);

}  // namespace shardlab::fuzz
