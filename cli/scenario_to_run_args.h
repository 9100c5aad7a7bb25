// From a validated Scenario to the run's arguments (RunArgs), and the scenario's
// expectations checked against the run's metrics.
//
// What the chosen backend cannot run (timing mode or injected faults off the simulator, a
// profile or file that does not load) is refused here with INVALID_ARGUMENT naming the
// key and its position — never silently ignored.
#pragma once

#include <nlohmann/json.hpp>

#include "cli/run_command.h"
#include "cli/run_outputs.h"
#include "cli/scenario.h"

namespace shardlab::cli {

// Fills `args` (world size, training options, output folder default out/<name>).
Status scenario_to_run_args(const Scenario& s, RunArgs& args);

// NOTE [Simulated device_id]
// fsdp.device_id takes PyTorch's values: "hpu", "hpu:N", "cpu", or "local_rank" (the CUDA
// idiom device_id=local_rank: <type>:<the rank's index within its node>). A rank's compute
// device is the one its process sees: on Gaudi (--backend hpu, or a simulated device whose
// profile says torch_device "hpu") every process sees its own card as hpu:0 (one card per
// process); on CPUs it is "cpu". An index-less id resolves to the compute device (the fix
// optimum-habana adopted for "Inconsistent compute device and `device_id` ...: hpu:0 vs
// hpu"); an explicit id that differs fails on that rank in PyTorch's words. Every process
// evaluates the rule for every rank (it depends on nothing but the world's shape), so all
// of them refuse the run, exit 2, before any rank starts training or any collective runs.
// INVALID_ARGUMENT names the first failing rank, both devices, and how many ranks fail.
Status check_device_id(const std::string& device_id, const std::string& torch_device, int world_size,
                       int devices_per_node);
// INVALID_ARGUMENT: a simulated numerics world of `world_size` ranks is above
// sim::kMaxNumericsRanks (NOTE [Numerics world size] in sim/engine/world.h); says what is allowed.
Status numerics_world_too_big(int world_size);
// The PyTorch device type a rank computes on: hpu under --backend hpu, cpu under mpi, the
// simulated device profile's torch_device on sim.
std::string torch_device_of(const std::string& backend, const sim::DeviceProfile& device);
// The device_id rank `rank` passes to FSDP ("local_rank" made explicit; "" stays "").
std::string device_id_of_rank(const std::string& device_id, const std::string& torch_device, int rank,
                              int devices_per_node);

// One ExpectResult per expectation the scenario states (metrics as written to metrics.json).
std::vector<ExpectResult> check_expectations(const Scenario& s, const nlohmann::json& metrics);

}  // namespace shardlab::cli
