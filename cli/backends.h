// The backends `shardlab run` puts ranks on (--backend, world.backend), in one registry:
// a backend is one folder of runtime code plus one entry in backends.cc. What differs
// between backends — whether ranks are simulated threads, the device type PyTorch would
// name, how the provenance and the traces describe it, how a process opens its device and
// communicator — is read from the entry, never from a comparison of names.
//
// Thread safety: the registry is immutable after static initialization.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/comm/communicator.h"
#include "runtime/comm/mpi/communicator.h"
#include "runtime/core/clock.h"
#include "runtime/core/status.h"
#include "runtime/device/device.h"

namespace shardlab::cli {

// What one process holds for a real backend: its device, and the world communicator its
// collectives run on. `mpi_world` is the Open MPI world every real backend starts from
// (the HCCL world is bootstrapped over it): a failed rank's roll call runs on it.
class ProcessBackend {
 public:
  virtual ~ProcessBackend() = default;
  virtual runtime::device::Device& device() = 0;
  virtual runtime::comm::Communicator& communicator() = 0;
  virtual runtime::comm::mpi::MpiCommunicator& mpi_world() = 0;
};

struct BackendInfo {
  std::string_view name;  // "sim", as --backend and world.backend spell it
  // Ranks are threads of this process on the simulator's virtual clock (the sim backend);
  // otherwise one rank per process under mpiexec/mpirun.
  bool simulated = false;
  // The PyTorch device type a rank computes on (NOTE [Simulated device_id] in
  // cli/scenario_to_run_args.h); empty: the simulated device profile's torch_device.
  std::string_view torch_device;
  // metrics.json's stack: what the device and the network are (real backends).
  std::string_view device_provenance, network_provenance;
  // How wall-clock traces name the collectives' implementation ("mpi", "hccl").
  std::string_view trace_algorithm;
  // The runtime checks fsdp.device_id against the device this process opened (its id
  // names the card, as PyTorch checks it); the cli's own check covers the others.
  bool runtime_checks_device_id = false;
  // Why this machine cannot run the backend, or "" when it can (hpu: no Gaudi software, or
  // no card). `shardlab devices` lists every backend with this answer; a run on an
  // unavailable backend still fails where it opens (exit 3, with the same reason).
  std::function<std::string()> unavailable = [] { return std::string(); };
  // Real backends: opens this process's device and communicator over the MPI world (it
  // takes `world`); an error names the rank.
  std::function<Result<std::unique_ptr<ProcessBackend>>(std::unique_ptr<runtime::comm::mpi::MpiCommunicator> world,
                                                        const Clock& clock)>
      open;
};

// What `shardlab run` uses without --backend or world.backend.
inline constexpr std::string_view kDefaultBackend = "sim";

// Every backend, in the order --help lists them.
const std::vector<BackendInfo>& backends();
// The names, in that order.
std::vector<std::string> backend_names();
// The backend named `name`; INVALID_ARGUMENT naming the allowed ones otherwise.
Result<const BackendInfo*> find_backend(std::string_view name);
// The backend named `name`, which must be registered (names come validated from the CLI
// or the scenario); CHECK-fails otherwise.
const BackendInfo& backend(std::string_view name);

}  // namespace shardlab::cli
