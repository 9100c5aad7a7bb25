// MpiCommunicator: the Open MPI backend of the Communicator seam (one rank per process).
//
// Every operation is issued with nonblocking MPI (MPI_Iallgather, MPI_Ireduce_scatter_block,
// MPI_Iallreduce, MPI_Ibcast, MPI_Ibarrier, MPI_Issend/MPI_Irecv) and returns at once; the
// returned Work polls MPI_Test until the request completes or the injected Clock passes
// the deadline (TIMEOUT naming op, rank, group, element count and dtype). A wait() after a
// TIMEOUT keeps waiting on the same request, so a late peer still completes it.
//
// Mapping onto MPI (see communicator.h one folder up for the shared contract):
// - dtypes: fp32 → MPI_FLOAT, int64 → MPI_INT64_T, bf16 → a contiguous 2-byte datatype
//   with user-defined sum/max/min ops that add in fp32 and round once per step
//   (reduce_into). The reduction order is Open MPI's, not rank order: bf16 sums of more
//   than two ranks may differ in the last bit from the simulator's.
// - kAvg is a sum followed by divide_in_place on the result.
// - In place: all_gather_into with input == output's rank chunk uses MPI_IN_PLACE;
//   reduce_scatter with output == input's rank chunk uses MPI_IN_PLACE (MPI leaves the
//   result at the start of the buffer; the Work moves it to the rank's chunk on
//   completion, so the rest of `input` is clobbered — as with any in-place reduce-scatter).
// - send uses MPI_Issend so that a send completes only once the matching recv has
//   matched it (the seam's contract), never on an eager copy. Tags must lie in
//   [0, MPI_TAG_UB]. Order per (peer, tag) follows MPI's non-overtaking rule.
// - split(color, key) is MPI_Comm_split preceded by a nonblocking exchange of the
//   (color, key) pairs, so a missing member makes split return TIMEOUT after
//   kDefaultTimeout instead of hanging. Group names: "world", then split_group_name
//   (runtime/comm/communicator.h), as the simulator names them.
// - Tensors must have host bytes (CpuDevice tensors); phantom tensors are
//   INVALID_ARGUMENT. Element counts above INT_MAX are INVALID_ARGUMENT.
// - MPI errors on our communicators come back as INTERNAL statuses (MPI_ERRORS_RETURN).
//
// Lifetimes: the Clock must outlive the communicator and its Works. A Work keeps copies
// of its tensors (so their storages) alive until the request completes; a Work dropped
// while its request is still pending hands the request to the communicator family's
// shared state, which completes it in the background of later calls. Every
// MpiCommunicator must be destroyed before the MpiEnvironment that initialized MPI.
//
// Thread safety: MPI runs with MPI_THREAD_FUNNELED. A communicator, its sub-groups and
// all their Works are used by the one thread that initialized MPI.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>

#include "runtime/comm/communicator.h"
#include "runtime/core/clock.h"
#include "runtime/core/status.h"

namespace shardlab::runtime::comm::mpi {

// MPI datatypes/ops and the orphaned requests shared by a world communicator and every
// group split from it (defined in communicator.cc).
struct MpiSharedState;

class MpiCommunicator final : public Communicator {
 public:
  // A communicator over a private duplicate of `parent` (so its traffic never matches
  // anyone else's on `parent`), named `group_name`. Collective over `parent`; blocks
  // until every member calls it. FAILED_PRECONDITION when MPI is not initialized.
  static Result<std::unique_ptr<MpiCommunicator>> create(MPI_Comm parent, const Clock& clock,
                                                         std::string group_name = "world");
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& group_name() const override { return group_name_; }

  WorkPtr all_gather_into(const Tensor& output, const Tensor& input) override;
  WorkPtr reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) override;
  WorkPtr all_reduce(const Tensor& inout, ReduceOp op) override;
  WorkPtr broadcast(const Tensor& inout, int root) override;
  WorkPtr barrier() override;
  WorkPtr send(const Tensor& input, int peer, int tag) override;
  WorkPtr recv(const Tensor& output, int peer, int tag) override;
  Result<std::unique_ptr<Communicator>> split(int color, int key) override;

  // NOTE [Roll call]: asks every rank of the communicator this one was created over what
  // it is doing, telling them `doing` (why this rank is ending), and waits up to `grace`
  // on the communicator's clock for the answers. Ranks answer from inside any Work::wait
  // and from their own roll call. Returns one line per rank that answered and the ranks
  // that never did (hung, dead, or busy outside communication), e.g.
  //   roll call of 3 ranks (2 s to answer):
  //     rank 2: waiting in all_gather of 64 fp32 elements on rank 2 of group 'world' (size 3)
  //     rank 3: ending: TIMEOUT: rank 3: all_gather … timed out after 5000 ms …
  //     never answered (ranks): 1 — hung, dead, or busy outside communication
  // Meant for a job about to end (abort_job): answers sent to this rank afterwards stay
  // unread.
  std::string roll_call(const std::string& doing, Nanos grace);

  // The underlying MPI communicator (for tests and benchmarks that compare with raw MPI).
  MPI_Comm mpi_comm() const { return comm_; }

 private:
  MpiCommunicator(MPI_Comm comm, const Clock& clock, std::string group_name, std::shared_ptr<MpiSharedState> shared);

  MPI_Comm comm_;
  const Clock& clock_;
  std::string group_name_;
  int splits_ = 0;  // splits of this communicator so far (split_group_name)
  std::shared_ptr<MpiSharedState> shared_;
  int rank_ = 0;
  int size_ = 1;
};

// RAII owner of MPI initialization for one process.
//
// initialize() calls MPI_Init_thread(MPI_THREAD_FUNNELED) unless MPI is already
// initialized (then it only checks that the provided thread level is at least FUNNELED);
// the destructor calls MPI_Finalize only if this object initialized MPI. Create one per
// process, in main, before any communicator, and destroy it last.
//
// Thread safety: use from the thread that calls initialize().
class MpiEnvironment {
 public:
  // INTERNAL when MPI_Init_thread fails, FAILED_PRECONDITION when MPI was already
  // initialized (or finalized) in a way we cannot use.
  static Result<std::unique_ptr<MpiEnvironment>> initialize(int* argc, char*** argv);
  ~MpiEnvironment();
  MpiEnvironment(const MpiEnvironment&) = delete;
  MpiEnvironment& operator=(const MpiEnvironment&) = delete;

  // NOTE [Ending a failed job]: after a runtime failure (a timed-out collective, a peer
  // that died) MPI_Finalize would wait for ranks that never come; the job ends with
  // MPI_Abort instead, which mpirun turns into the job's exit code. Flushes stdio first.
  [[noreturn]] static void abort_job(int code);

  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  bool initialized_mpi() const { return initialized_mpi_; }

  // The "world" communicator over a duplicate of MPI_COMM_WORLD, timing out on `clock`.
  // Collective over MPI_COMM_WORLD. FAILED_PRECONDITION when MPI is not initialized.
  static Result<std::unique_ptr<MpiCommunicator>> create_world(const Clock& clock);

 private:
  MpiEnvironment(bool initialized_mpi, int world_rank, int world_size)
      : initialized_mpi_(initialized_mpi), world_rank_(world_rank), world_size_(world_size) {}

  bool initialized_mpi_;
  int world_rank_;
  int world_size_;
};

}  // namespace shardlab::runtime::comm::mpi
