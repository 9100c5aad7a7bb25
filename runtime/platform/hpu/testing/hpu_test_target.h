// Which Synapse library the hpu tests run against (tests only).
//
// By default (label `unit`/`mpi`) the TEST DOUBLE libshardlab_fake_synapse.so, whose path
// the build passes as SHARDLAB_FAKE_SYNAPSE_PATH; the tests export it through
// SHARDLAB_SYNAPSE_LIB so the backend loads it exactly as it would load libSynapse.so.
// With SHARDLAB_HPU_TEST_TARGET=real (label `hpu`) the same suites use the real library
// (SHARDLAB_SYNAPSE_LIB if the user set it, else /usr/lib/habanalabs/libSynapse.so) and
// skip with "skipped: no Gaudi device" when there is no library or no card; tests that
// need the double's knobs skip with "fake-only".
#pragma once

#include <dlfcn.h>

#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

#include "runtime/platform/hpu/hpu_runtime.h"

namespace shardlab::runtime::device::hpu::testing {

inline bool real_target() {
  const char* v = std::getenv("SHARDLAB_HPU_TEST_TARGET");
  return v != nullptr && std::string(v) == "real";
}

// Points SHARDLAB_SYNAPSE_LIB at the double (fake mode). Idempotent.
inline void use_target_library() {
  if (!real_target()) setenv(kSynapseLibEnv, SHARDLAB_FAKE_SYNAPSE_PATH, 1);
}

// "" when a device is usable; otherwise the skip reason.
inline std::string gaudi_missing_reason() {
  use_target_library();
  if (!real_target()) return "";
  const HpuProbe probe = probe_hpu();
  if (!probe.found) return "skipped: no Gaudi device (" + probe.error + ")";
  if (probe.device_count == 0)
    return "skipped: no Gaudi device (Synapse loaded from " + probe.library + " but synDeviceGetCount reports 0 cards)";
  return "";
}

// The double's call log, one call name per line (fake mode only; "" when the double is
// not loaded), and clearing it.
inline std::string fake_log() {
  void* h = dlopen(SHARDLAB_FAKE_SYNAPSE_PATH, RTLD_NOW | RTLD_NOLOAD);
  if (!h) return "";
  auto fn = reinterpret_cast<const char* (*)()>(dlsym(h, "shardlab_fake_synapse_log"));
  std::string out = fn ? fn() : "";
  dlclose(h);
  return out;
}
inline void clear_fake_log() {
  void* h = dlopen(SHARDLAB_FAKE_SYNAPSE_PATH, RTLD_NOW | RTLD_NOLOAD);
  if (!h) return;
  if (auto fn = reinterpret_cast<void (*)()>(dlsym(h, "shardlab_fake_synapse_clear_log"))) fn();
  dlclose(h);
}

}  // namespace shardlab::runtime::device::hpu::testing

// In a TEST body or fixture SetUp: skip unless a device (real or double) is usable.
#define SHARDLAB_SKIP_WITHOUT_GAUDI()                                                                       \
  do {                                                                                                      \
    const std::string shardlab_reason_ = ::shardlab::runtime::device::hpu::testing::gaudi_missing_reason(); \
    if (!shardlab_reason_.empty()) GTEST_SKIP() << shardlab_reason_;                                        \
  } while (0)

// Skip in real mode (the test drives the double's knobs or reads its call log).
#define SHARDLAB_FAKE_ONLY()                                       \
  do {                                                             \
    if (::shardlab::runtime::device::hpu::testing::real_target())  \
      GTEST_SKIP() << "fake-only: drives the test double's knobs"; \
  } while (0)
