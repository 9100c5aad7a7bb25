// `shardlab devices`: list the simulator's profiles and the accelerators found.
#include "cli/commands/command.h"

#include <cstdio>
#include <memory>
#include <string>

#include "cli/backends.h"
#include "runtime/device/cpu/gemm.h"
#include "runtime/platform/hpu/hpu_runtime.h"
#include "sim/models/device/profiles.h"
#include "sim/models/network/topology.h"

namespace shardlab::cli {

Subcommand add_devices_command(CLI::App& app) {
  auto* devices_cmd = app.add_subcommand(
      "devices", "List the device and topology profiles the simulator knows, and any accelerators found.");
  return {
      devices_cmd, [](int* /*argc*/, char*** /*argv*/) -> int {
        std::printf("simulated device profiles (world.device; sim/profiles/README.md):\n");
        for (const auto& name : shardlab::sim::device_profile_names()) {
          auto p = shardlab::sim::load_device_profile(name);
          if (!p.is_ok()) continue;
          std::printf("  %-9s matrix %g/%g TFLOP/s (bf16/fp32), vector %g TFLOP/s, memory %g TB/s, %.1f GiB — %s\n",
                      name.c_str(), p->matrix_bf16_flops_per_s / 1e12, p->matrix_flops_per_s / 1e12,
                      p->vector_bf16_flops_per_s / 1e12, p->memory_bytes_per_s / 1e12,
                      static_cast<double>(p->capacity_bytes) / static_cast<double>(1 << 30), p->description.c_str());
        }
        std::printf("simulated topologies (world.topology):\n");
        for (const auto& name : shardlab::sim::list_topologies()) {
          auto t = shardlab::sim::load_topology(name);
          if (t.is_ok()) std::printf("  %-16s %s\n", name.c_str(), t->description.c_str());
        }
        {
          namespace cpu = shardlab::runtime::device::cpu;
          const cpu::GemmIsa best = cpu::best_gemm_isa(), used = *cpu::gemm_isa();
          std::printf(
              "cpu backend: GEMM and GELU kernels %s%s on %d thread(s) (SHARDLAB_CPU_ISA=scalar|avx2|avx512 forces a "
              "lower "
              "level, SHARDLAB_CPU_THREADS the count; the bits are the same on every path)\n",
              std::string(cpu::gemm_isa_name(used)).c_str(),
              used == best ? " (the best this CPU has)"
                           : (" (forced; this CPU has " + std::string(cpu::gemm_isa_name(best)) + ")").c_str(),
              cpu::gemm_threads());
        }
        const auto probe = shardlab::runtime::device::hpu::probe_hpu();
        std::string searched;
        for (const auto& p : probe.searched) searched += (searched.empty() ? "" : ", ") + p;
        if (probe.found) {
          std::printf("accelerators: %d Gaudi card(s)%s%s (Synapse %s)\n", probe.device_count,
                      probe.device_type.empty() ? "" : ", type ", probe.device_type.c_str(), probe.library.c_str());
          if (!probe.error.empty()) std::printf("  note: %s\n", probe.error.c_str());
          std::printf("Run scenarios on them with: mpirun -np <cards> shardlab run SCENARIO --backend hpu\n");
        } else {
          std::printf("accelerators: none\n  %s\n",
                      probe.error.empty() ? ("no Gaudi software found (looked in: " + searched + ")").c_str()
                                          : probe.error.c_str());
          std::printf("Run scenarios with --backend sim (default, any machine) or under mpiexec with --backend mpi.\n");
        }
        std::printf("backends (--backend, world.backend):\n");
        for (const auto& b : backends()) {
          const std::string why = b.unavailable();
          std::printf("  %-4s %s\n", std::string(b.name).c_str(),
                      why.empty()
                          ? (b.simulated ? "available: ranks are threads of this process on the simulator's clock"
                                         : "available: one rank per process under mpiexec/mpirun")
                          : ("not available here: " + why).c_str());
        }
        return 0;
      }};
}

}  // namespace shardlab::cli
