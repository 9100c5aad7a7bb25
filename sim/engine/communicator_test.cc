// The Communicator conformance suite on the sim backend, world sizes 1, 2, 3, 5, 8, 13.
#include "sim/engine/communicator.h"

#include "runtime/comm/conformance_test.h"
#include "sim/engine/world.h"
#include "testing/status_matchers.h"

using shardlab::testlib::IsOk;

namespace shardlab::sim {
namespace {

using runtime::comm::testing::CommConformance;
using runtime::comm::testing::CommHarness;
using runtime::comm::testing::RankEnv;

class SimHarness final : public CommHarness {
 public:
  explicit SimHarness(std::uint64_t perturb_seed) : perturb_seed_(perturb_seed) {}
  std::string name() const override { return perturb_seed_ ? "sim_perturbed" : "sim"; }
  void run(int world_size, const std::function<void(RankEnv&)>& body) override {
    WorldOptions o;
    o.world_size = world_size;
    o.perturb_seed = perturb_seed_;
    World world(o);
    const auto results = world.run([&](RankContext& ctx) {
      RankEnv env{ctx.comm, ctx.device, ctx.clock, kNanosPerSecond};
      body(env);
      return Status::ok();
    });
    for (const auto& r : results) EXPECT_THAT(r.status, IsOk());
  }

 private:
  std::uint64_t perturb_seed_;
};

INSTANTIATE_TEST_SUITE_P(Sim, CommConformance,
                         ::testing::ValuesIn(runtime::comm::testing::conformance_params(std::make_shared<SimHarness>(0),
                                                                                        {1, 2, 3, 5, 8, 13})),
                         runtime::comm::testing::conformance_param_name);

// The same suite with seeded random host yields: the contract must hold regardless of
// thread interleaving.
INSTANTIATE_TEST_SUITE_P(SimPerturbed, CommConformance,
                         ::testing::ValuesIn(runtime::comm::testing::conformance_params(std::make_shared<SimHarness>(7),
                                                                                        {3, 8})),
                         runtime::comm::testing::conformance_param_name);

}  // namespace
}  // namespace shardlab::sim
