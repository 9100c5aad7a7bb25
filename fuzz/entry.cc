// The libFuzzer entry point of one target (SHARDLAB_FUZZ_TARGET names it). An outcome the
// target's contract does not allow aborts, which libFuzzer reports as a crash and saves
// the input that caused it.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "fuzz/targets.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const shardlab::fuzz::Target* target = shardlab::fuzz::find_target(SHARDLAB_FUZZ_TARGET);
  if (target == nullptr) {
    std::fprintf(stderr, "no fuzz target named %s\n", SHARDLAB_FUZZ_TARGET);
    std::abort();
  }
  const shardlab::Status s = target->run(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!shardlab::fuzz::acceptable(*target, s)) {
    std::fprintf(stderr, "fuzz target %s: outcome outside the contract: %s\n", SHARDLAB_FUZZ_TARGET,
                 s.to_string().c_str());
    std::abort();
  }
  return 0;
}
