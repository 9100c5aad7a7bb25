// Fault injection: seeded, replayable faults from the scenario alone.
//
// NOTE [Faults]
// A FaultPlan lists what goes wrong, where and when; everything it does is a pure function
// of the plan, the seed and virtual time, so a faulty run replays bit for bit.
//  - crash (rank, step | time): the rank stops — at the top of `step`, or at the first
//    collective it issues at or after virtual `time` (counted from the start of the run,
//    initialization included: moving the model to the device takes virtual time, NOTE
//    [Initialization unit by unit]) — and its body returns. The survivors
//    block in their next collective with it and time out (virtual time; NOTE
//    [Determinism]), each with an error naming its rank, its step, the operation, the
//    ranks that never arrived and the injected faults.
//  - hang (rank, step | time): as crash, but the rank stays alive and stops answering (it
//    blocks on a message nobody sends); it is released only when every other rank is done.
//  - straggler (rank, factor ≥ 1): every device op of the rank takes `factor` times longer
//    (timing only; FaultPlan::slowdown feeds the simulated device).
//  - corrupt (rank, collective index): the payload the rank receives in its collective
//    number `collective` (0-based, counting the collectives with a payload it issues on any
//    group) gets one bit flipped — the top exponent bit of one element the seed picks, so
//    the damage is visible. With `integrity_check`, the receiver's checksum catches it
//    instead and the collective fails with DATA_LOSS (the run ends, exit code 3).
//  - link_down / link_degrade (link "a-b", time, factor): the network model's business
//    (sim/models/network/network.h); the plan only carries them.
//  - view_offset (rank, step, unit, byte_offset): the Gaudi1 seed bug ("offset_ 0is not
//    matching with the offset of new tensor 13835057943613014016"): at `step`, the first
//    parameter view of FSDP unit `unit` the rank hands to its model gets `byte_offset` as
//    its byte offset (by default 13835057943613014016, a wrapped negative offset). The
//    device's launch check (runtime/device/device.h, check_launch_view) refuses it before
//    any kernel or collective touches memory: the rank fails with DATA_LOSS naming the
//    tensor, its storage, the offset and the storage size (exit 3), and the others time
//    out waiting for it. Carried out through FsdpOptions::on_param_view, numerics mode only.
// Timing mode (NOTE [Timing mode]) runs every kind, the same way (NOTE [Faults in timing
// mode] in sim/timing/replay.h), except corrupt without the integrity check (exit 2: it
// changes values only, and timing mode has none).
// Outputs are never written from a failed run's state: checkpoints are atomic and only
// written by completed steps, and the CLI reports the failure in summary.txt.
//
// FaultInjector is a Communicator decorator, one per rank, that carries out the rank's
// crash, hang and corrupt faults and adds the rank, the step and the plan to every error.
//
// Thread safety: as for Communicator (one rank's thread).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/comm/forwarding_communicator.h"
#include "runtime/core/clock.h"

namespace shardlab::sim {

enum class FaultKind { kCrash, kHang, kStraggler, kCorrupt, kLinkDown, kLinkDegrade, kViewOffset };

std::string_view fault_kind_name(FaultKind k);  // "crash", …, "link_degrade"
// The names above; "link_degraded" is accepted for link_degrade.
Result<FaultKind> parse_fault_kind(std::string_view name);

struct Fault {
  FaultKind kind = FaultKind::kCrash;
  int rank = -1;                 // crash, hang, straggler, corrupt
  int step = -1;                 // crash, hang: at the top of this 0-based step (-1: not given);
                                 // scenarios and messages count steps from 1, like the step table
  Nanos time = -1;               // crash, hang: from this virtual time; link faults: from (-1: not given)
  std::string link;              // link faults: a link name of the topology ("0-1", "3-net", "leaf0-spine")
  double factor = 1.0;           // straggler: slowdown (≥ 1); link_degrade: bandwidth factor (0, 1]
  std::int64_t collective = -1;  // corrupt: which of the rank's collectives (0-based)
  bool integrity_check = false;  // corrupt: detected by a checksum instead of delivered
  int unit = -1;                 // view_offset: the FSDP unit whose parameter view is corrupted
  // view_offset: the byte offset the view gets (the seed bug's value by default).
  std::uint64_t byte_offset = kSeedBugViewOffset;
  static constexpr std::uint64_t kSeedBugViewOffset = 13835057943613014016ull;  // 0xBFFFFFE600000000
  std::string origin;                                                           // where it was declared ("s.yaml:12:5")
  std::string describe() const;  // "crash of rank 3 at step 2 (s.yaml:12:5)"
};

struct FaultPlan {
  std::vector<Fault> faults;
  std::uint64_t seed = 0;  // picks the corrupted element
  // The product of the rank's straggler factors (1: none).
  double slowdown(int rank) const;
  // The rank's own faults (crash, hang, corrupt, view_offset): the FaultInjector carries out
  // the first three, the trainer's on_param_view hook the last.
  bool has_rank_faults(int rank) const;
  // The rank's view_offset fault, or null.
  const Fault* view_fault(int rank) const;
  // "crash of rank 3 at step 2 (s.yaml:12:5); …" for error messages; empty: no faults.
  std::string describe() const;
};

// The words a faulty run reports in, shared by the FaultInjector (numerics mode) and the
// timing-mode replay (sim/timing/replay.h), so both modes describe a fault alike.
// "rank 3, step 2" (`step` 0-based; < 0: before the first step).
std::string fault_where(int world_rank, int step);
// "7.16758 ms"
std::string fault_ms(Nanos t);
// "all_gather in group 'world' (the rank's collective #5)": the collective a fault message
// names; `payload_index` < 0 for one without a payload (barrier, split).
std::string fault_collective(std::string_view op, const std::string& group, std::int64_t payload_index);
// A collective's error as a faulty run reports it: "<where>: <what>: <message>" and, with
// injected faults (`injected`: FaultPlan::describe()), " [injected faults: <injected>]".
std::string fault_context(const std::string& where, const std::string& what, const std::string& message,
                          const std::string& injected);
// What the crashed or hung rank reports: `point` is "at the top of step 2" or "at 7.2 ms
// before its all_gather"; a hung rank is `released` when the other ranks were done.
Status stopped_rank_status(const Fault& f, const std::string& where, const std::string& point, bool released);
// What a corrupt fault with the integrity check makes the receiving rank report; `what` is
// "all_gather in group 'world' (the rank's collective #5)".
Status integrity_failure_status(const Fault& f, const std::string& where, const std::string& what);

class FaultInjector final : public runtime::comm::ForwardingCommunicator {
 public:
  // `inner` and `clock` (the rank's) are not owned and must outlive this.
  FaultInjector(runtime::comm::Communicator* inner, std::shared_ptr<const FaultPlan> plan, int world_rank,
                const Clock* clock);
  ~FaultInjector() override;

  // FsdpTrainOptions::before_step: records the step for messages; a crash or hang due at
  // this step happens here.
  Status before_step(int step);

  runtime::comm::WorkPtr all_gather_into(const Tensor& output, const Tensor& input) override;
  runtime::comm::WorkPtr reduce_scatter(const Tensor& output, const Tensor& input, runtime::comm::ReduceOp op) override;
  runtime::comm::WorkPtr all_reduce(const Tensor& inout, runtime::comm::ReduceOp op) override;
  runtime::comm::WorkPtr broadcast(const Tensor& inout, int root) override;
  runtime::comm::WorkPtr barrier() override;
  runtime::comm::WorkPtr send(const Tensor& input, int peer, int tag) override;
  runtime::comm::WorkPtr recv(const Tensor& output, int peer, int tag) override;
  Result<std::unique_ptr<runtime::comm::Communicator>> split(int color, int key) override;

  struct State;  // shared by a rank's injector and the injectors of its split groups

 private:
  FaultInjector(std::unique_ptr<runtime::comm::Communicator> owned, std::shared_ptr<State> state);
  // A crash or hang due now (by time) happens; ok otherwise.
  Status before_collective(const char* op);
  // Corrupts the received payload when this is the rank's corrupt target, and wraps the
  // Work so that its errors say where they happened.
  runtime::comm::WorkPtr finish(const char* op, const Tensor& received, bool has_payload, runtime::comm::WorkPtr work);
  Status stop(const Fault& f, const char* where);

  std::shared_ptr<State> state_;
};

}  // namespace shardlab::sim
