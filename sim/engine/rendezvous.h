// Internal to sim/: the state ranks share to meet in collectives and messages.
// One mutex guards all of it; see NOTE [Determinism] in world.h for the rules.
#pragma once

#include "sim/engine/trace.h"

#include <array>
#include <condition_variable>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "runtime/comm/communicator.h"
#include "sim/engine/comm_streams.h"
#include "sim/engine/world.h"
#include "sim/models/device/cost_model.h"
#include "sim/models/network/network.h"

namespace shardlab::sim {

struct Group;
struct PendingOp;

// What a Work waits for. Written under Shared::mu.
struct WorkState {
  bool done = false;
  Status status;
  Nanos completion = 0;
  // The operation's own duration: completion less the last member's ready time (NOTE
  // [Host-progressed collectives] in sim/models/network/topology.h).
  Nanos duration = 0;
  std::string what;                    // "all_reduce #3 (fp32 × 12)"
  std::weak_ptr<PendingOp> pending;    // while a collective waits for members (weak: no cycle)
  std::string missing_hint;            // for p2p: what is missing
  std::shared_ptr<Group> split_group;  // split result (null: not a member)
  int split_rank = -1;
};

struct Member {
  runtime::comm::OpKind kind = runtime::comm::OpKind::kBarrier;
  runtime::comm::ReduceOp op = runtime::comm::ReduceOp::kSum;
  int root = 0;
  DType dtype = DType::kF32;
  std::int64_t count = 0;  // the element count all members must agree on
  Tensor input;
  Tensor output;
  int color = 0, key = 0;  // split
  Nanos arrival = 0;
  std::shared_ptr<WorkState> work;
};

struct PendingOp {
  std::uint64_t seq = 0;
  std::vector<std::optional<Member>> members;  // by group rank
  int arrived = 0;
};

struct Group {
  std::string name;
  std::vector<int> world_ranks;  // group rank -> world rank
  std::vector<std::uint64_t> next_seq;
  std::map<std::uint64_t, std::shared_ptr<PendingOp>> pending;
  int splits = 0;
  // NOTE [Concurrent groups] in sim/models/network/network.h: every group the split that
  // made this one made (world ranks), shared by them; null for the world group.
  std::shared_ptr<const SplitGroups> split_groups;
};

struct Message {
  Tensor tensor;
  Nanos time = 0;
  std::shared_ptr<WorkState> work;
};

// The last operation a rank issued on one of its streams, and the rank's index in it.
struct StreamTail {
  std::shared_ptr<PendingOp> op;
  int member = -1;
};

struct Waiter {
  int world_rank;
  Nanos deadline;
  WorkState* work;
  bool forced = false;
};

struct World::Shared {
  std::mutex mu;
  std::condition_variable cv;
  int live = 0;
  int blocked = 0;
  std::list<Waiter*> waiters;
  std::shared_ptr<const NetworkCostModel> network;  // never null
  // Per world rank, where collectives are recorded (null entries: tracing off).
  std::vector<TraceRecorder*> traces;
  // (group, src world rank, dst world rank, tag) -> unmatched sends / recvs, FIFO.
  std::map<std::tuple<std::string, int, int, int>, std::deque<Message>> sends, recvs;
  // Per world rank and CommStream: the last collective issued there.
  std::vector<std::array<StreamTail, kNumCommStreams>> stream_tails;

  // Under mu: when every live rank is blocked and no blocked wait can finish, forces a
  // timeout on the waiter with the earliest (deadline, rank).
  void maybe_resolve();
  // Under mu: marks a work done and wakes the waiters.
  void complete(WorkState& w, Status s, Nanos at);
};

}  // namespace shardlab::sim
