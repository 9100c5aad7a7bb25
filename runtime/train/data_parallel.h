// Data-parallel training of the MLP (the walking skeleton) and its unsharded oracle.
//
// Every rank holds all parameters in one flat fp32 buffer and computes gradients on its
// slice of the global batch (rows [r·B/W, (r+1)·B/W)), scaled by 1/B; one all_reduce(sum)
// of the flat gradient buffer gives every rank the gradient of the global mean loss,
// and SGD updates the replicas identically. The oracle runs the same steps on one
// process over the whole (concatenated) global batch. Results agree to fp32 rounding
// (the batch dimension is summed in a different order); FSDP's bitwise oracle comes
// with runtime/fsdp.
//
// Thread safety: each call uses only its arguments.
#pragma once

#include <string>
#include <vector>

#include "runtime/comm/communicator.h"
#include "runtime/core/clock.h"
#include "runtime/device/device.h"
#include "runtime/model/mlp.h"

namespace shardlab::runtime::train {

struct TrainOptions {
  model::MlpConfig model;
  int steps = 5;
  std::int64_t global_batch = 32;  // must be divisible by the world size
  float lr = 0.1f;                 // plain SGD
  std::uint64_t seed = 0;
  Nanos collective_timeout = comm::kDefaultTimeout;
};

struct TrainResult {
  std::vector<double> losses;       // global mean loss of each step (before its update)
  std::vector<Nanos> step_times;    // per step, on the injected clock
  std::vector<float> final_params;  // flat, in parameter order
  MemoryStats memory;               // the device's memory stats at the end
};

// INVALID_ARGUMENT when the batch does not split evenly or options are out of range.
Status validate(const TrainOptions& options, int world_size);

Result<TrainResult> train_data_parallel(comm::Communicator& comm, device::Device& dev, const Clock& clock,
                                        const TrainOptions& options);
Result<TrainResult> train_unsharded(device::Device& dev, const Clock& clock, const TrainOptions& options);

struct Comparison {
  double max_loss_diff = 0;
  double max_param_diff = 0;
  bool match = false;
  double rtol = 0, atol = 0;
  std::string describe() const;  // "losses and parameters match (max |Δloss| …)"
};
// Elementwise |a-b| <= atol + rtol·|b| over losses and final parameters.
Comparison compare(const TrainResult& candidate, const TrainResult& oracle, double rtol = 1.3e-6, double atol = 1e-5);

}  // namespace shardlab::runtime::train
