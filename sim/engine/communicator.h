// SimCommunicator: the simulator's Communicator — ranks are threads of one process that
// meet in a shared rendezvous (rendezvous.h); data moves by host copies and reductions
// in fixed rank order; each Work completes at a virtual time from the cost model.
//
// Made by World for each rank; split() makes more. A collective's data movement is done
// by the last member to arrive, outside the rendezvous lock. Timeouts are on the rank's
// VirtualClock; a TIMEOUT names the operation, its sequence number in the group, and the
// ranks that never arrived. Mismatched collectives (different op, dtype, count or root
// at the same position of the sequence) fail on every member with FAILED_PRECONDITION
// naming both calls, rather than hanging. See NOTE [Determinism] in world.h.
//
// Thread safety: one instance per rank, used by that rank's thread only.
#pragma once

#include <memory>
#include <string>

#include "runtime/comm/communicator.h"
#include "runtime/core/rng.h"
#include "sim/engine/rendezvous.h"
#include "sim/engine/virtual_clock.h"

namespace shardlab::sim {

// "all_reduce #11 (int64 × 1, sum)": a collective as the simulator's errors name it
// (shared with the timing-mode replay).
std::string describe_collective(runtime::comm::OpKind kind, DType dtype, std::int64_t count, runtime::comm::ReduceOp op,
                                int root, std::uint64_t seq);
// "30.019560 s": a virtual time in the simulator's errors.
std::string format_seconds(Nanos t);
// A collective's timeout in the simulator's words (shared with the replay):
// "<described> on rank R of group 'g' (size N)" …
std::string collective_on_rank(const std::string& described, int group_rank, const std::string& group, int size);
// … and "<what>: timed out after T (virtual) at D; <why>".
std::string timed_out_message(const std::string& what, Nanos timeout, Nanos deadline, const std::string& why);
// The `why` of a collective that never completed: "3 of 4 ranks arrived; never arrived
// (group ranks): 2", or the stream wait when every member arrived (`missing` empty).
std::string never_arrived(int arrived, int size, const std::string& missing);

class SimCommunicator final : public runtime::comm::Communicator {
 public:
  SimCommunicator(std::shared_ptr<World::Shared> shared, std::shared_ptr<Group> group, int group_rank,
                  VirtualClock* clock, std::uint64_t perturb_seed);

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(group_->world_ranks.size()); }
  const std::string& group_name() const override { return group_->name; }

  runtime::comm::WorkPtr all_gather_into(const Tensor& output, const Tensor& input) override;
  runtime::comm::WorkPtr reduce_scatter(const Tensor& output, const Tensor& input, runtime::comm::ReduceOp op) override;
  runtime::comm::WorkPtr all_reduce(const Tensor& inout, runtime::comm::ReduceOp op) override;
  runtime::comm::WorkPtr broadcast(const Tensor& inout, int root) override;
  runtime::comm::WorkPtr barrier() override;
  runtime::comm::WorkPtr send(const Tensor& input, int peer, int tag) override;
  runtime::comm::WorkPtr recv(const Tensor& output, int peer, int tag) override;
  Result<std::unique_ptr<runtime::comm::Communicator>> split(int color, int key) override;

  // Host-scheduling perturbation (WorldOptions::perturb_seed); a no-op when disabled.
  void perturb();
  int world_rank() const { return group_->world_ranks[static_cast<std::size_t>(rank_)]; }
  VirtualClock& clock() { return *clock_; }
  World::Shared& shared() { return *shared_; }

 private:
  // Joins the collective described by m; `state` (made when null) receives the outcome.
  runtime::comm::WorkPtr collective(Member m, std::shared_ptr<WorkState> state = nullptr);
  runtime::comm::WorkPtr point_to_point(bool is_send, const Tensor& t, int peer, int tag);
  std::string describe(const Member& m, std::uint64_t seq) const;

  std::shared_ptr<World::Shared> shared_;
  std::shared_ptr<Group> group_;
  int rank_;
  VirtualClock* clock_;
  std::uint64_t perturb_seed_;
  Rng perturb_rng_;
};

}  // namespace shardlab::sim
