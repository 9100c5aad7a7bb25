// The Communicator conformance suite: one set of tests every backend must pass.
//
// A backend's test file provides a CommHarness (how to start a world and hand each
// rank its Communicator, Device and Clock) and instantiates the suite:
//
//   INSTANTIATE_TEST_SUITE_P(Sim, CommConformance,
//       ::testing::ValuesIn(conformance_params(harness, {1, 2, 3, 5, 8, 13})),
//       conformance_param_name);
//
// and compiles conformance_test.cc into the same executable (gtest registers TEST_Ps at
// static initialization, so the file must be linked in, not archived).
// Tests run their body on every rank (one thread per rank on sim, one process per
// rank on mpi) and assert from every rank.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/comm/communicator.h"
#include "runtime/core/clock.h"
#include "runtime/device/device.h"

namespace shardlab::runtime::comm::testing {

struct RankEnv {
  Communicator& comm;
  device::Device& device;
  const Clock& clock;
  // A timeout the backend considers "short" for missing-peer tests (virtual on sim).
  Nanos short_timeout;
};

class CommHarness {
 public:
  virtual ~CommHarness() = default;
  virtual std::string name() const = 0;
  // Runs `body` on every rank of a fresh world of `world_size` ranks and returns when all
  // ranks are done. Failures are reported by gtest assertions inside `body`.
  virtual void run(int world_size, const std::function<void(RankEnv&)>& body) = 0;
};

struct ConformanceParam {
  std::shared_ptr<CommHarness> harness;
  int world_size = 1;
};

std::vector<ConformanceParam> conformance_params(std::shared_ptr<CommHarness> harness, const std::vector<int>& sizes);
std::string conformance_param_name(const ::testing::TestParamInfo<ConformanceParam>& info);

class CommConformance : public ::testing::TestWithParam<ConformanceParam> {
 protected:
  void run(const std::function<void(RankEnv&)>& body) { GetParam().harness->run(GetParam().world_size, body); }
  int world_size() const { return GetParam().world_size; }
};

}  // namespace shardlab::runtime::comm::testing
