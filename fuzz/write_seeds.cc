// shardlab_fuzz_seeds DIR: writes every target's seeds to DIR/<target>/seed-<n>, the
// starting corpus of the libFuzzer runs (scripts/fuzz).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "fuzz/targets.h"

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  if (argc != 2) {
    std::fprintf(stderr, "usage: shardlab_fuzz_seeds DIR\n");
    return 2;
  }
  for (const auto& t : shardlab::fuzz::targets()) {
    const fs::path dir = fs::path(argv[1]) / std::string(t.name);
    fs::create_directories(dir);
    const auto seeds = t.seeds();
    for (std::size_t i = 0; i < seeds.size(); ++i) {
      std::ofstream(dir / ("seed-" + std::to_string(i)), std::ios::binary) << seeds[i];
    }
    std::printf("%-18s %zu seeds\n", std::string(t.name).c_str(), seeds.size());
  }
  return 0;
}
