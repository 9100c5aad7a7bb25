// `shardlab calibrate`: measure this machine and write simulator profiles.
#include "cli/commands/command.h"

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "calibrate/calibrate.h"
#include "runtime/comm/mpi/communicator.h"
#include "runtime/core/clock.h"
#include "runtime/device/cpu/device.h"
#include "sim/models/device/profiles.h"
#include "sim/models/network/topology.h"

namespace shardlab::cli {

namespace {

// The flags: CLI11 binds them at registration, the action reads them.
struct State {
  std::string calibrate_out;
  std::string calibrate_topology_out;
  std::vector<std::int64_t> calibrate_sizes;
};

}  // namespace

Subcommand add_calibrate_command(CLI::App& app) {
  auto state = std::make_shared<State>();
  State& flags = *state;
  auto* calibrate_cmd = app.add_subcommand(
      "calibrate",
      "Measure this machine (GEMM, vector and memcpy rates and the CPU's per-op costs; with --topology-out under\n"
      "mpiexec -n P also the MPI collectives: their times by size, per-call overhead, α, β and γ) and write simulator\n"
      "profiles: use them as world.device / world.topology to predict CPU\n"
      "runs. Under mpiexec every process measures at once, so the profiles describe a P-process run on this\n"
      "machine (cores shared when P exceeds them); calibrate with the process count you want to predict.");
  calibrate_cmd->add_option("--out", flags.calibrate_out, "Device profile to write (JSON)")->required();
  calibrate_cmd->add_option(
      "--topology-out", flags.calibrate_topology_out,
      "Also time MPI all_gather/reduce_scatter/all_reduce on all processes (mpiexec -n P), "
      "fit the per-call overhead, α, β and γ under the simulator's schedules and write them as a switch "
      "topology with the measured times (NOTE [Measured collectives] in sim/models/network/topology.h)");
  calibrate_cmd
      ->add_option(
          "--collective-sizes", flags.calibrate_sizes,
          "With --topology-out: the buffer sizes in bytes to time each collective at, comma-separated, "
          "at least 2 (default 64 B, 4 KiB, 64 KiB, 1, 2, 4, 8, 12, 15, 17, 24 and 32 MiB); the "
          "measured table interpolates between them (NOTE [Measured collectives] in sim/models/network/topology.h)")
      ->delimiter(',')
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 34));
  return {calibrate_cmd, [state](int* argc, char*** argv) -> int {
            State& flags = *state;
            const auto failed = [](const shardlab::Status& s) {
              std::fprintf(stderr, "shardlab calibrate: %s\n", s.to_string().c_str());
              return s.exit_code();
            };
            const auto print_device = [&](const shardlab::sim::DeviceProfile& p, int processes) {
              char cache[96] = "";
              if (p.cache_bytes > 0) {
                std::snprintf(cache, sizeof cache, " (its first %lld KiB at %.3g GB/s, in cache)",
                              static_cast<long long>(p.cache_bytes / 1024), p.cache_bytes_per_s / 1e9);
              }
              std::printf(
                  "device: matrix %.3g GFLOP/s, vector %.3g GFLOP/s, memory %.3g GB/s%s, launch %lld ns, "
                  "allocation %lld ns, runtime host time %lld ns per op, %zu op compute factors (%d process%s at "
                  "once) → %s\n",
                  p.matrix_flops_per_s / 1e9, p.vector_flops_per_s / 1e9, p.memory_bytes_per_s / 1e9, cache,
                  static_cast<long long>(p.launch_ns), static_cast<long long>(p.alloc_ns),
                  static_cast<long long>(p.op_host_ns), p.compute_factors.size(), processes, processes == 1 ? "" : "es",
                  flags.calibrate_out.c_str());
            };
            if (flags.calibrate_topology_out.empty()) {
              auto profile = shardlab::sim::calibrate_cpu_device();
              if (!profile.is_ok()) return failed(profile.status());
              if (auto st = shardlab::sim::write_device_profile(*profile, flags.calibrate_out); !st.is_ok())
                return failed(st);
              print_device(*profile, 1);
              return 0;
            }
            // NOTE [Calibrate with the run's process count] in calibrate/calibrate.h.
            auto env = shardlab::runtime::comm::mpi::MpiEnvironment::initialize(argc, argv);
            if (!env.is_ok()) return failed(env.status());
            shardlab::SteadyClock clock;
            auto world = shardlab::runtime::comm::mpi::MpiEnvironment::create_world(clock);
            if (!world.is_ok()) return failed(world.status());
            const int rank = (*world)->rank();
            shardlab::runtime::device::cpu::CpuDevice host({"cpu", rank});
            shardlab::sim::NetworkCalibrationOptions net_options;
            if (!flags.calibrate_sizes.empty()) net_options.sizes = flags.calibrate_sizes;
            auto net = shardlab::sim::calibrate_network(**world, host, clock, net_options);
            if (!net.is_ok()) return failed(net.status());
            auto profile = shardlab::sim::calibrate_device_together(**world, host, clock);
            if (!profile.is_ok()) return failed(profile.status());
            if (rank != 0) return 0;
            const auto topo = shardlab::sim::switch_topology_from(*net, "calibrated-mpi");
            if (auto st = shardlab::sim::write_topology(topo, flags.calibrate_topology_out); !st.is_ok())
              return failed(st);
            if (net->ranks == 1) {
              std::printf(
                  "MPI: %.3g us per collective call, reduce_scatter copies at %.3g GB/s (one-rank collectives; 1 "
                  "process) → %s\n",
                  static_cast<double>(net->overhead_ns) / 1e3, net->reduce_bytes_per_s / 1e9,
                  flags.calibrate_topology_out.c_str());
            } else {
              std::printf(
                  "MPI: %.3g us per call, α %.3g us per round, %.3g GB/s, reductions at %.3g GB/s (collectives on %d "
                  "processes, fitted under the simulator's schedules) → %s\n",
                  static_cast<double>(net->overhead_ns) / 1e3, static_cast<double>(net->latency_ns) / 1e3,
                  net->bytes_per_s / 1e9, net->reduce_bytes_per_s / 1e9, net->ranks,
                  flags.calibrate_topology_out.c_str());
            }
            for (const auto& m : net->samples) {
              const double fitted = net->fitted_ns(m);
              std::printf("  %-14s %9lld B (%s: %d rounds, %lld B on the path): %10.1f us measured, %10.1f us fitted\n",
                          std::string(shardlab::runtime::comm::op_kind_name(m.kind)).c_str(),
                          static_cast<long long>(m.buffer_bytes), m.algorithm.c_str(), m.rounds,
                          static_cast<long long>(m.path_bytes), static_cast<double>(m.time_ns) / 1e3, fitted / 1e3);
            }
            if (auto st = shardlab::sim::write_device_profile(*profile, flags.calibrate_out); !st.is_ok())
              return failed(st);
            print_device(*profile, net->ranks);
            return 0;
          }};
}

}  // namespace shardlab::cli
