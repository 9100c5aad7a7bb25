#include "cli/backends.h"

#include <utility>

#include "runtime/core/check.h"
#include "runtime/device/cpu/device.h"
#include "runtime/platform/hpu/hpu_runtime.h"

namespace shardlab::cli {

namespace {

using runtime::comm::mpi::MpiCommunicator;

// `mpi`: the CPU computes, Open MPI reduces.
class CpuProcess final : public ProcessBackend {
 public:
  explicit CpuProcess(std::unique_ptr<MpiCommunicator> world)
      : world_(std::move(world)), device_({"cpu", world_->rank()}) {}
  runtime::device::Device& device() override { return device_; }
  runtime::comm::Communicator& communicator() override { return *world_; }
  MpiCommunicator& mpi_world() override { return *world_; }

 private:
  std::unique_ptr<MpiCommunicator> world_;
  runtime::device::cpu::CpuDevice device_;
};

// `hpu`: this process's Gaudi card computes, HCCL (bootstrapped over the MPI world, which
// the context then owns) reduces.
class GaudiProcess final : public ProcessBackend {
 public:
  GaudiProcess(std::unique_ptr<runtime::device::hpu::HpuContext> context, MpiCommunicator* world)
      : context_(std::move(context)), world_(world) {}
  runtime::device::Device& device() override { return context_->device(); }
  runtime::comm::Communicator& communicator() override { return context_->communicator(); }
  MpiCommunicator& mpi_world() override { return *world_; }

 private:
  std::unique_ptr<runtime::device::hpu::HpuContext> context_;
  MpiCommunicator* world_;  // owned by context_
};

std::vector<BackendInfo> make_backends() {
  BackendInfo sim;
  sim.name = "sim";
  sim.simulated = true;

  BackendInfo mpi;
  mpi.name = "mpi";
  mpi.torch_device = "cpu";
  mpi.device_provenance = "cpu (one process per rank)";
  mpi.network_provenance = "Open MPI";
  mpi.trace_algorithm = "mpi";
  mpi.open = [](std::unique_ptr<MpiCommunicator> world, const Clock&) -> Result<std::unique_ptr<ProcessBackend>> {
    return std::unique_ptr<ProcessBackend>(std::make_unique<CpuProcess>(std::move(world)));
  };

  BackendInfo hpu;
  hpu.name = "hpu";
  hpu.torch_device = "hpu";
  hpu.device_provenance = "hpu (Gaudi, one card per process)";
  hpu.network_provenance = "HCCL, bootstrapped over Open MPI";
  hpu.trace_algorithm = "hccl";
  hpu.runtime_checks_device_id = true;
  hpu.unavailable = [] {
    const auto probe = runtime::device::hpu::probe_hpu();
    if (!probe.found) {
      // The first clause of the loader's message; the paths it tried follow below.
      if (!probe.error.empty()) return probe.error.substr(0, probe.error.find_first_of(";\n"));
      return std::string("no Gaudi software found");
    }
    if (probe.device_count == 0) return "Synapse (" + probe.library + ") sees no Gaudi card";
    return std::string();
  };
  hpu.open = [](std::unique_ptr<MpiCommunicator> world, const Clock& clock) -> Result<std::unique_ptr<ProcessBackend>> {
    MpiCommunicator* roll = world.get();
    const int rank = world->rank();
    auto context = runtime::device::hpu::open_hpu({}, std::move(world), clock);
    if (!context.is_ok()) return context.status().with_context("rank " + std::to_string(rank));
    return std::unique_ptr<ProcessBackend>(std::make_unique<GaudiProcess>(std::move(*context), roll));
  };
  return {sim, mpi, hpu};
}

}  // namespace

const std::vector<BackendInfo>& backends() {
  static const std::vector<BackendInfo> all = make_backends();
  return all;
}

std::vector<std::string> backend_names() {
  std::vector<std::string> names;
  for (const auto& b : backends()) names.emplace_back(b.name);
  return names;
}

Result<const BackendInfo*> find_backend(std::string_view name) {
  for (const auto& b : backends()) {
    if (b.name == name) return &b;
  }
  std::string allowed;
  for (const auto& n : backend_names()) allowed += (allowed.empty() ? "" : ", ") + n;
  return Status::invalid_argument("unknown backend '" + std::string(name) + "'; allowed: " + allowed);
}

const BackendInfo& backend(std::string_view name) {
  auto b = find_backend(name);
  SHARDLAB_CHECK(b.is_ok());
  return **b;
}

}  // namespace shardlab::cli
