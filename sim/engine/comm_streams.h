// The communication streams of a simulated rank (NOTE [Comm streams] in
// sim/engine/communicator.cc): which stream each collective runs on. Shared by the numerics
// SimCommunicator and the timing-mode replay (sim/timing/replay.h) so both serialize the
// same way.
#pragma once

#include "runtime/comm/communicator.h"

namespace shardlab::sim {

enum CommStream : int { kAllGatherStream = 0, kReduceStream = 1, kOtherCommStream = 2 };
constexpr int kNumCommStreams = 3;

// all_gather → all-gather stream; reduce_scatter, all_reduce → reduce stream; broadcast,
// barrier → the other stream; split, send, recv → -1 (not serialized).
constexpr int comm_stream(runtime::comm::OpKind kind) {
  switch (kind) {
    case runtime::comm::OpKind::kAllGather: return kAllGatherStream;
    case runtime::comm::OpKind::kReduceScatter:
    case runtime::comm::OpKind::kAllReduce: return kReduceStream;
    case runtime::comm::OpKind::kBroadcast:
    case runtime::comm::OpKind::kBarrier: return kOtherCommStream;
    default: return -1;
  }
}

}  // namespace shardlab::sim
