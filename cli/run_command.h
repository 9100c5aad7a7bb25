// `shardlab run`: FSDP training of BERT (a preset) or a small MLP on simulated ranks or under Open MPI,
// checked against the unsharded oracle (bitwise on sim, fp32 tolerance on MPI).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "cli/run_outputs.h"
#include "cli/scenario.h"
#include "runtime/train/fsdp_train.h"
#include "sim/faults/faults.h"
#include "sim/models/device/cost_model.h"
#include "sim/models/device/profiles.h"
#include "sim/models/device/stack.h"
#include "sim/models/network/network.h"

namespace shardlab::cli {

struct RunArgs {
  std::string backend = "sim";     // a registered backend (cli/backends.h)
  int world_size = 8;              // sim only; mpi takes the MPI world size
  std::string model_name = "mlp";  // for the header line: a BERT preset name or "mlp"
  // Non-empty: the oracle is off, and this says what turned it off ("--no-oracle",
  // "expect.grads_match_unsharded: false at FILE:LINE:COL"). NOTE [The oracle by default].
  std::string oracle_off;
  bool check_collectives = false;  // verify every rank issues the same collective sequence
  runtime::train::FsdpTrainOptions train;
  std::string out_dir = "out/default";  // metrics.json, trace.json, loss.csv, memory.csv, summary.txt
  std::string scenario = "default";
  bool cpu_offload = false;  // shards, gradients and optimizer state on a host device per rank
  // The simulated host of each rank under cpu_offload (world.offload_host).
  sim::DeviceProfile offload_host = sim::offload_host_profile();
  // How the framework drives the device (world.stack; timing mode only when not ideal).
  sim::SoftwareStack stack;
  // The oracle comparison's tolerance as the scenario gives it (expect.grads_match_unsharded
  // {rtol, atol}); unset: runtime::train::default_tolerance (NOTE [Default tolerance]).
  std::optional<double> rtol, atol;
  // The scenario whose expectations decide the exit code (null: the oracle check alone,
  // which must be bitwise on the simulator).
  const Scenario* spec = nullptr;
  // Faults injected into the simulated run (NOTE [Faults] in sim/faults/faults.h); null: none.
  std::shared_ptr<const sim::FaultPlan> faults;
  // The simulated device and network (world.device, world.topology, …); null network: the
  // default α–β ring model.
  sim::DeviceProfile device;
  std::shared_ptr<const sim::NetworkCostModel> network;
  // fsdp.device_id as the scenario gives it (NOTE [Simulated device_id] in
  // cli/scenario_to_run_args.h), and where it stands ("FILE:LINE:COL: fsdp.device_id: ") for errors.
  std::string device_id, device_id_where;
  // numerics (real math on every rank) or timing (phantom tensors, capture + replay; sim only).
  RunMode mode = RunMode::kNumerics;
  std::string dump_graph;  // timing: also write the op graph here (--dump-graph)
  // The ranks trace.json holds (scenario trace.ranks, NOTE [Traced ranks] in
  // cli/run_outputs.h); empty: every rank (timing mode: 0-7).
  std::vector<int> trace_ranks;
  // The scenario's network as specified (recorded in --dump-graph's graph); none without a
  // scenario.
  std::optional<sim::NetworkSpec> network_spec;
  // Test knob (--perturb-host-schedule): seeded random host yields in the simulator, which
  // must not change a single output byte (NOTE [Determinism] in sim/engine/world.h).
  std::uint64_t perturb_seed = 0;
};

// NOTE [The oracle by default]
// Every numerics run is compared with the unsharded oracle (runtime/train/fsdp_train.h):
// exit 0 means the run matched unsharded training. Only an explicit switch turns it off
// (--no-oracle, or expect.grads_match_unsharded: false / null in the scenario), and the
// run then says so on stdout, in summary.txt ("oracle: not run (turned off by …)") and in
// metrics.json ("oracle"). Timing mode computes no values and says that instead. A
// simulated run must match bitwise (the oracle repeats its casts and reduction order),
// unless the scenario gives a tolerance or the run clips gradients; elsewhere the
// scenario's tolerance applies, else the one the run's dtypes imply (NOTE [Default
// tolerance] in runtime/train/fsdp_train.h).
//
// Returns the process exit code: 0 ok, 1 an expectation failed (oracle mismatch),
// 2 bad input, 3 runtime failure.
int run_command(const RunArgs& args, int* argc, char*** argv);

// What `run` refuses before any rank starts, beyond the scenario's own checks: the
// training options at the run's world size and, for a numerics run in the simulator, the
// numerics world limit and NOTE [Host memory plan] (runtime/train/fsdp_train.h) against
// this host's memory. `validate` runs the same checks, so what it passes, `run` starts.
Status check_run_plan(const RunArgs& args);

// `shardlab replay GRAPH.json` (NOTE [Replaying a graph] in sim/timing/op_graph.h).
struct ReplayArgs {
  std::string graph;
  std::string out_dir;  // "": out/replay-<graph file stem>
  // Overrides of the graph's recorded network; "": as recorded.
  std::string topology, network_model, collective_algorithm;
};
// Exit code: 0, 2 for a bad graph or option (naming the field), 3 for a failed replay.
int replay_command(const ReplayArgs& args);

// NOTE [Provenance]
// Every run's outputs say what ran it: the stack (the device — a simulated profile's name,
// or the real cpu/hpu — the network with its topology, cost model and collective
// algorithm, or Open MPI / HCCL on real backends, CPU offload and its host), and who
// produced them (the shardlab version, `git describe` at build time, and the host name).
// The stack is part of the result (goldens compare it); version and host are not (they
// differ between builds and machines, not between runs of one build).
void fill_provenance(const RunArgs& args, RunRecord& record);

// What every run's record says about itself, whatever executed it: provenance, scenario,
// backend, seed, world size, batch, the model and its parameter count, the FSDP settings
// and the analytic FLOPs per step. `world` is the run's world size.
void describe_run(const RunArgs& args, int world, const std::string& backend, RunRecord& record);

}  // namespace shardlab::cli
