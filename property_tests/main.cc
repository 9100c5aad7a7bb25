// Entry point of the property tests. ctest runs them with RC_PARAMS pinned (seed and a
// bounded case count, see CMakeLists.txt). The property-long preset sets
// SHARDLAB_PROPERTY_LONG to RC_PARAMS of its own (many cases, no seed: rapidcheck picks
// one and prints a reproduce= string for any failure).
#include <gtest/gtest.h>

#include <cstdlib>

int main(int argc, char** argv) {
  if (const char* long_run = std::getenv("SHARDLAB_PROPERTY_LONG"); long_run != nullptr && *long_run != '\0') {
    ::setenv("RC_PARAMS", long_run, /*overwrite=*/1);
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
