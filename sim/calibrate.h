// Calibration: measure a real machine and write what the simulator needs to mimic it —
// a device profile (sim/profiles.h) and an α–β `switch` topology profile (sim/topology.h).
// The library side of `shardlab calibrate`.
//
// NOTE [Calibration is the only wall clock in sim/]
// These functions read the Clock they are given — SteadyClock for a real measurement, a
// VirtualClock in tests — and nothing else in sim/ ever does: a simulation never depends
// on host timing (NOTE [Determinism] in sim/world.h). Calibration output is data that a
// later, deterministic simulation reads.
//
// Flops and bytes are counted exactly as SimDevice charges them (gemm 2mnk; a GELU 8
// flops per element; a copy reads and writes its bytes), so a calibrated profile predicts
// the measured op times on the machine it came from. Each figure is the best of
// `repeats` runs after one warm-up (the least disturbed run), with the launch overhead
// (the time of a one-element op) taken off before dividing.
//
// Thread safety: calibrate_device uses the device from one thread; calibrate_network is
// called by every rank of the communicator, each from its own thread or process.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "runtime/comm/communicator.h"
#include "runtime/core/clock.h"
#include "runtime/device/device.h"
#include "sim/cost_model.h"
#include "sim/topology.h"

namespace shardlab::sim {

struct DeviceCalibrationOptions {
  std::string name = "calibrated-cpu";  // the profile's name
  std::int64_t gemm_size = 512;         // square fp32 GEMM (m = n = k): compute bound
  std::int64_t vector_elements = 1 << 15;  // GELU on an in-cache tensor: vector compute
  std::int64_t copy_bytes = 64 << 20;   // a copy far larger than caches: memory bandwidth
  int repeats = 5;
  std::int64_t capacity_bytes = 0;      // 0: the host's physical memory
};

// Measures `device` with `clock`. The matrix and vector rates are measured in fp32; bf16
// gets the same rates (the cpu backend computes in fp32). Efficiencies are 1 (the rates
// are already sustained ones). INVALID_ARGUMENT for bad options; a device error as is.
Result<DeviceProfile> calibrate_device(runtime::device::Device& device, const Clock& clock,
                                       const DeviceCalibrationOptions& options = {});
// The host CPU through runtime/device/cpu and SteadyClock.
Result<DeviceProfile> calibrate_cpu_device(const DeviceCalibrationOptions& options = {});

struct NetworkCalibrationOptions {
  std::vector<std::int64_t> sizes = {4, 4 << 10, 64 << 10, 1 << 20, 4 << 20};  // bytes (multiples of 4)
  int repeats = 10;
};

struct NetworkCalibration {
  Nanos latency_ns = 0;              // α: the fitted one-way time of an empty message
  double bytes_per_s = 0;            // 1/β: the fitted slope
  std::vector<std::pair<std::int64_t, Nanos>> one_way;  // (bytes, best one-way time)
};

// Ping-pong between ranks 0 and 1 of `comm` (every rank calls it; the others wait at a
// barrier), one-way time = half the round trip, fitted as α + n·β by least squares.
// Every rank returns rank 0's result. FAILED_PRECONDITION with fewer than 2 ranks or
// when the times do not grow with the size (no bandwidth to fit).
Result<NetworkCalibration> calibrate_network(runtime::comm::Communicator& comm, runtime::device::Device& device,
                                             const Clock& clock, const NetworkCalibrationOptions& options = {});

// A `switch` topology profile with the measured α (split over the two port traversals)
// and bandwidth — what `shardlab calibrate` writes next to the device profile.
TopologySpec switch_topology_from(const NetworkCalibration& c, std::string name);
// Writes topology_to_json atomically.
Status write_topology(const TopologySpec& spec, const std::string& path);

}  // namespace shardlab::sim
