// A main() for builds without libFuzzer (g++, every preset but `fuzz`): runs the target
// over inputs, the way libFuzzer replays a corpus. With no arguments it runs the target's
// built-in seeds; otherwise every file named, and every file in every folder named.
// Exit 0 when every input ended within the contract (a violation aborts in the entry).
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fuzz/targets.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

void run_one(const std::string& bytes) {
  LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
}

}  // namespace

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  const auto* target = shardlab::fuzz::find_target(SHARDLAB_FUZZ_TARGET);
  if (target == nullptr) return 2;
  std::size_t count = 0;
  if (argc == 1) {
    for (const auto& s : target->seeds()) {
      run_one(s);
      ++count;
    }
    if (count == 0) {
      std::fprintf(stderr, "fuzz target %s has no seeds\n", SHARDLAB_FUZZ_TARGET);
      return 1;
    }
  }
  for (int i = 1; i < argc; ++i) {
    std::vector<fs::path> files;
    if (fs::is_directory(argv[i])) {
      for (const auto& e : fs::directory_iterator(argv[i])) {
        if (e.is_regular_file()) files.push_back(e.path());
      }
    } else {
      files.emplace_back(argv[i]);
    }
    for (const auto& f : files) {
      std::ifstream in(f, std::ios::binary);
      if (!in) {
        std::fprintf(stderr, "cannot read %s\n", f.c_str());
        return 2;
      }
      run_one(std::string(std::istreambuf_iterator<char>(in), {}));
      ++count;
    }
  }
  std::printf("%s: %zu inputs, every one within the contract\n", SHARDLAB_FUZZ_TARGET, count);
  return 0;
}
