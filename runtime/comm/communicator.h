// Communicator: the seam for collectives and point-to-point messages (c10d's ProcessGroup).
//
// Backends (same file names in each folder): sim in the top-level sim folder (ranks as
// threads of one process, virtual time), mpi/ (Open MPI, one rank per process), hccl/
// (Gaudi, through HCCL). Decorators: checking_communicator.h (verifies every rank issues the
// same collective sequence).
//
// Contract shared by every backend (the conformance suite in conformance_test.h checks it):
// - Every call is asynchronous and returns a Work; results are visible after a
//   successful Work::wait. The caller keeps the tensors alive and untouched until then.
// - Argument errors (dtype, size, root/peer out of range, aliasing) come back as a Work
//   that is already complete with INVALID_ARGUMENT; nothing is sent.
// - Collectives must be issued in the same order on every member of the group.
// - Supported dtypes: fp32, bf16, int64 (kAvg only for floating types). Reductions of
//   bf16 add in fp32 and round once per step, in rank order 0, 1, …, W-1 on sim.
// - Timeouts are measured on the Clock the communicator was built with. A peer that
//   never arrives makes wait() return TIMEOUT naming the operation, never hang.
//
// Thread safety: a Communicator (and its Works) is used by the one thread that owns the
// rank.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "runtime/core/clock.h"
#include "runtime/core/status.h"
#include "runtime/core/tensor.h"

namespace shardlab::runtime::comm {

enum class ReduceOp { kSum, kAvg, kMax, kMin };
std::string_view reduce_op_name(ReduceOp op);

// The kinds of operations, for traces, checking and error messages.
enum class OpKind { kAllGather, kReduceScatter, kAllReduce, kBroadcast, kBarrier, kSend, kRecv, kSplit };
std::string_view op_kind_name(OpKind kind);

class Work {
 public:
  virtual ~Work() = default;
  // Blocks until the operation completes or `timeout` elapses on the communicator's
  // Clock. Returns the operation's status, or TIMEOUT naming the operation, the rank and
  // the group. Calling wait again after completion returns the same status.
  virtual Status wait(Nanos timeout) = 0;
  // Orders everything issued afterwards on the compute stream of the device that owns
  // the operation's tensors after the operation, like c10d's Work::wait on a device
  // stream: an accelerator backend makes its compute stream wait for the operation's
  // completion event and returns without blocking the host (hccl). The default blocks
  // the host in wait(timeout), which is the same thing where the host is the compute
  // stream (cpu, mpi, the simulator, whose compute stream is the rank's virtual clock).
  // A non-OK status means the operation failed or could not be ordered; OK does not
  // mean it completed, so the caller still calls wait() later (with a timeout) to learn
  // its final status and before it releases the tensors.
  virtual Status wait_on_compute(Nanos timeout) { return wait(timeout); }
  // Non-blocking: true once wait() would return without blocking.
  virtual bool is_completed() = 0;
  // The error of an operation that failed before anything was issued (bad arguments, a
  // rank stopped by an injected fault): such a Work is complete from the start, so a
  // caller that defers its wait (NOTE [Asynchronous gradient reduction]) can stop at once.
  // OK for every operation that was issued, including ones that fail later. Unlike
  // is_completed(), the answer never depends on other ranks' progress.
  virtual Status issue_error() { return Status::ok(); }
};
using WorkPtr = std::shared_ptr<Work>;

// A Work that is complete from the start (argument errors, size-1 groups, ...).
WorkPtr completed_work(Status status);

// The default timeout used by helpers that wait (30 s on the communicator's clock).
constexpr Nanos kDefaultTimeout = 30 * kNanosPerSecond;

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // A name that identifies the group on every member: "world", "world/3" (color 3 of a split).
  virtual const std::string& group_name() const = 0;

  // output (size()·n elements) ← concatenation of every rank's input (n elements), in
  // rank order. In place when input is exactly output's rank-th chunk.
  virtual WorkPtr all_gather_into(const Tensor& output, const Tensor& input) = 0;
  // output (n elements) ← op over ranks of input's rank-th chunk (input has size()·n).
  // In place when output is exactly input's rank-th chunk.
  virtual WorkPtr reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) = 0;
  // inout ← op over ranks of inout.
  virtual WorkPtr all_reduce(const Tensor& inout, ReduceOp op) = 0;
  // inout ← root's inout.
  virtual WorkPtr broadcast(const Tensor& inout, int root) = 0;
  virtual WorkPtr barrier() = 0;
  // Point-to-point; messages between a pair with the same tag arrive in order. A send
  // completes when the matching recv has the data.
  virtual WorkPtr send(const Tensor& input, int peer, int tag) = 0;
  virtual WorkPtr recv(const Tensor& output, int peer, int tag) = 0;

  // Collective over this group (like MPI_Comm_split): members passing the same
  // color >= 0 form a new group ordered by (key, old rank). color < 0 returns nullptr
  // (not a member of any new group).
  virtual Result<std::unique_ptr<Communicator>> split(int color, int key) = 0;

  // NOTE [Strided groups]
  // The groups of a regular device mesh, as HYBRID_SHARD's node-local shard groups and
  // cross-node replica groups are (PyTorch's DeviceMesh dimensions): the ranks split into
  // blocks of stride·size consecutive ranks, and in each block the ranks with the same
  // rank % stride form a group of `size`, ordered by rank. stride 1: consecutive runs of
  // `size` ranks; stride S with size = size()/S: every S-th rank. Every member calls it
  // (it is collective, like split). It is split(color, key) with color = block·stride +
  // rank % stride and key = (rank / stride) % size — backends need not override it; the
  // timing-mode capture does, because its groups must be known for every rank from the
  // layout alone (sim/timing/capture.cc). INVALID_ARGUMENT unless stride, size >= 1 and
  // stride·size divides size().
  virtual Result<std::unique_ptr<Communicator>> split_strided(int stride, int size);
};

// The color and key split_strided(stride, group_size) passes to split for `rank`
// (NOTE [Strided groups]); arguments as validated there.
inline int strided_color(int rank, int stride, int group_size) {
  return rank / (stride * group_size) * stride + rank % stride;
}
inline int strided_key(int rank, int stride, int group_size) { return rank / stride % group_size; }
// The name of the group of `color` made by split number `split_index` (1, 2, …) of group
// `parent`: "world/3", and from the parent's second split on "world/3.2". Every backend
// names its groups so (the simulator, the timing-mode replay's group_name_of, MPI and
// HCCL through it), so that a run's trace and its simulation's name the same groups alike
// and HYBRID_SHARD's shard group "world/0" and replica group "world/0.2" stay apart.
std::string split_group_name(const std::string& parent, int color, int split_index);
// INVALID_ARGUMENT naming the problem unless stride, group_size >= 1 and stride·group_size
// divides world_size.
Status validate_strided(int world_size, int stride, int group_size);

// Shared argument validation, so every backend reports the same errors.
Status validate_all_gather(const Communicator& c, const Tensor& output, const Tensor& input);
Status validate_reduce_scatter(const Communicator& c, const Tensor& output, const Tensor& input, ReduceOp op);
Status validate_all_reduce(const Communicator& c, const Tensor& inout, ReduceOp op);
Status validate_broadcast(const Communicator& c, const Tensor& inout, int root);
Status validate_peer(const Communicator& c, const Tensor& t, int peer, std::string_view what);

// Reduces `count` elements of `src` into `dst` (dst = dst op src) for dtype; bf16/fp16 add
// in fp32 and round. Used by backends that reduce on the host.
void reduce_into(DType dtype, ReduceOp op, std::byte* dst, const std::byte* src, std::int64_t count);
// Divides `count` floating elements by `divisor` in place (for kAvg).
void divide_in_place(DType dtype, std::byte* data, std::int64_t count, int divisor);

}  // namespace shardlab::runtime::comm
