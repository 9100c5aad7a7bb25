#include "runtime/comm/mpi/communicator.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

namespace shardlab::runtime::comm::mpi {

namespace {

bool mpi_is_initialized() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  return initialized != 0;
}

bool mpi_is_finalized() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return "MPI error code " + std::to_string(code);
  return std::string(text, static_cast<std::size_t>(len)) + " (MPI error code " + std::to_string(code) + ")";
}

std::string format_duration(Nanos ns) {
  if (ns % kNanosPerMilli == 0) return std::to_string(ns / kNanosPerMilli) + " ms";
  if (ns % kNanosPerMicro == 0) return std::to_string(ns / kNanosPerMicro) + " us";
  return std::to_string(ns) + " ns";
}

// The MPI user functions for bf16. MPI_User_function carries no user pointer, so these
// are stateless free functions; the MPI_Op handles that refer to them live in
// MpiSharedState (no hidden globals). `len` counts 2-byte bf16 elements.
void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  reduce_into(DType::kBF16, ReduceOp::kSum, static_cast<std::byte*>(inout), static_cast<const std::byte*>(in), *len);
}
void bf16_max(void* in, void* inout, int* len, MPI_Datatype*) {
  reduce_into(DType::kBF16, ReduceOp::kMax, static_cast<std::byte*>(inout), static_cast<const std::byte*>(in), *len);
}
void bf16_min(void* in, void* inout, int* len, MPI_Datatype*) {
  reduce_into(DType::kBF16, ReduceOp::kMin, static_cast<std::byte*>(inout), static_cast<const std::byte*>(in), *len);
}

// What an operation was, for TIMEOUT and error messages (built only when needed).
struct OpInfo {
  OpKind kind = OpKind::kBarrier;
  std::optional<ReduceOp> reduce_op;
  std::int64_t count = 0;
  std::optional<DType> dtype;
  int rank = 0;
  int size = 1;
  std::string group;
  int peer = -1;
  int tag = -1;

  std::string describe() const {
    std::string s(op_kind_name(kind));
    if (reduce_op) s += " (" + std::string(reduce_op_name(*reduce_op)) + ")";
    if (dtype) s += " of " + std::to_string(count) + " " + std::string(dtype_name(*dtype)) + " elements";
    if (peer >= 0) {
      s += (kind == OpKind::kSend ? " to peer " : " from peer ") + std::to_string(peer) + " with tag " +
           std::to_string(tag);
    }
    return s + " on rank " + std::to_string(rank) + " of group '" + group + "' (size " + std::to_string(size) + ")";
  }
};

// Things a pending request writes to or reads from; kept alive until it completes.
struct KeepAlive {
  std::vector<Tensor> tensors;
  std::shared_ptr<void> extra;  // non-tensor buffers (split's exchange)
};

}  // namespace

// Shared by a world communicator, every group split from it and all their Works.
struct MpiSharedState {
  MPI_Datatype bf16 = MPI_DATATYPE_NULL;
  MPI_Op bf16_sum_op = MPI_OP_NULL;
  MPI_Op bf16_max_op = MPI_OP_NULL;
  MPI_Op bf16_min_op = MPI_OP_NULL;
  int tag_ub = 32767;  // the minimum MPI guarantees; replaced by MPI_TAG_UB

  struct Orphan {
    MPI_Request request;
    KeepAlive keep_alive;
  };
  // Requests whose Work was dropped before completion (MPI forbids freeing a pending
  // collective request). Completed by reap_orphans() on later calls.
  std::vector<Orphan> orphans;

  // NOTE [Roll call]: a private duplicate of the parent communicator on which a rank that
  // is about to end a failed job asks every other rank what it is doing. Ranks answer
  // from inside every wait (answer_roll_calls) and from their own roll call; a rank that
  // does not answer within the grace is hung, dead, or busy outside communication.
  static constexpr int kQueryTag = 1;
  static constexpr int kReplyTag = 2;
  MPI_Comm diag = MPI_COMM_NULL;
  struct Sent {
    MPI_Request request;
    std::shared_ptr<std::string> text;
  };
  std::vector<Sent> diag_sends;

  static Result<std::shared_ptr<MpiSharedState>> create(MPI_Comm parent) {
    auto state = std::make_shared<MpiSharedState>();
    if (const int rc = MPI_Comm_dup(parent, &state->diag); rc != MPI_SUCCESS) {
      state->diag = MPI_COMM_NULL;
      return Status::internal("creating the MPI roll-call communicator (MPI_Comm_dup) failed: " + mpi_error_string(rc));
    }
    MPI_Comm_set_errhandler(state->diag, MPI_ERRORS_RETURN);
    int rc = MPI_Type_contiguous(2, MPI_BYTE, &state->bf16);
    if (rc == MPI_SUCCESS) rc = MPI_Type_commit(&state->bf16);
    if (rc == MPI_SUCCESS) rc = MPI_Op_create(&bf16_sum, /*commute=*/1, &state->bf16_sum_op);
    if (rc == MPI_SUCCESS) rc = MPI_Op_create(&bf16_max, /*commute=*/1, &state->bf16_max_op);
    if (rc == MPI_SUCCESS) rc = MPI_Op_create(&bf16_min, /*commute=*/1, &state->bf16_min_op);
    if (rc != MPI_SUCCESS) {
      return Status::internal("creating the MPI bf16 datatype and reduction ops failed: " + mpi_error_string(rc));
    }
    void* attr = nullptr;
    int flag = 0;
    if (MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &attr, &flag) == MPI_SUCCESS && flag && attr != nullptr) {
      state->tag_ub = *static_cast<int*>(attr);
    }
    return state;
  }

  // Sends `text` to `peer` on the roll-call communicator without waiting for it.
  void send_text(int peer, int tag, const std::string& text) {
    std::erase_if(diag_sends, [](Sent& m) {
      int done = 0;
      return MPI_Test(&m.request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || done != 0;
    });
    auto buf = std::make_shared<std::string>(text);
    MPI_Request req = MPI_REQUEST_NULL;
    if (MPI_Isend(buf->data(), static_cast<int>(buf->size()), MPI_CHAR, peer, tag, diag, &req) == MPI_SUCCESS) {
      diag_sends.push_back({req, std::move(buf)});
    }
  }

  // One pending roll-call message, if any: (sender, tag, text).
  std::optional<std::tuple<int, int, std::string>> receive_text(int tag) {
    int flag = 0;
    MPI_Status st;
    if (MPI_Iprobe(MPI_ANY_SOURCE, tag, diag, &flag, &st) != MPI_SUCCESS || flag == 0) return std::nullopt;
    int count = 0;
    MPI_Get_count(&st, MPI_CHAR, &count);
    std::string text(static_cast<std::size_t>(std::max(count, 0)), '\0');
    MPI_Recv(text.data(), count, MPI_CHAR, st.MPI_SOURCE, st.MPI_TAG, diag, MPI_STATUS_IGNORE);
    return std::make_tuple(st.MPI_SOURCE, st.MPI_TAG, std::move(text));
  }

  // Answers every pending roll call with what this rank is doing (`doing()`, built only
  // when a query is there: this runs on every poll of a wait).
  template <typename Doing>
  void answer_roll_calls(const Doing& doing) {
    if (diag == MPI_COMM_NULL) return;
    while (auto q = receive_text(kQueryTag)) send_text(std::get<0>(*q), kReplyTag, doing());
  }

  void reap_orphans() {
    if (orphans.empty() || mpi_is_finalized()) return;
    std::erase_if(orphans, [](Orphan& o) {
      int done = 0;
      const int rc = MPI_Test(&o.request, &done, MPI_STATUS_IGNORE);
      return rc != MPI_SUCCESS || done != 0;
    });
  }

  ~MpiSharedState() {
    if (mpi_is_finalized()) {
      // Too late to free MPI handles; never free buffers MPI might still own.
      if (!orphans.empty()) new std::vector<Orphan>(std::move(orphans));  // deliberate leak
      return;
    }
    reap_orphans();
    if (!orphans.empty()) {
      // Requests that never completed (a peer never arrived). MPI may still write into
      // their buffers, so their storages are deliberately leaked rather than freed.
      new std::vector<Orphan>(std::move(orphans));
    }
    for (Sent& m : diag_sends) {
      int done = 0;
      if (MPI_Test(&m.request, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done == 0) {
        MPI_Request_free(&m.request);              // delivered later, or never to a dead peer;
        new std::shared_ptr<std::string>(m.text);  // its buffer must outlive it (deliberate leak)
      }
    }
    if (diag != MPI_COMM_NULL) MPI_Comm_free(&diag);
    for (MPI_Op* op : {&bf16_sum_op, &bf16_max_op, &bf16_min_op}) {
      if (*op != MPI_OP_NULL) MPI_Op_free(op);
    }
    if (bf16 != MPI_DATATYPE_NULL) MPI_Type_free(&bf16);
  }
};

namespace {

// A Work backed by one MPI request. `finish` runs once, after the request completes
// successfully (post-processing: avg division, moving an in-place result, count checks).
class MpiWork final : public Work {
 public:
  using Finish = std::function<Status(const MPI_Status&)>;

  MpiWork(std::shared_ptr<MpiSharedState> shared, const Clock& clock, OpInfo info, KeepAlive keep_alive, Finish finish)
      : shared_(std::move(shared)),
        clock_(clock),
        info_(std::move(info)),
        keep_alive_(std::move(keep_alive)),
        finish_(std::move(finish)) {}

  ~MpiWork() override {
    if (!done_ && request_ != MPI_REQUEST_NULL) {
      shared_->orphans.push_back({request_, std::move(keep_alive_)});
    }
  }

  MPI_Request* request() { return &request_; }

  // The MPI call that should have started the request failed.
  void fail_to_start(const std::string& call, int rc) {
    request_ = MPI_REQUEST_NULL;
    complete(Status::internal(info_.describe() + ": " + call + " failed: " + mpi_error_string(rc)));
  }

  Status wait(Nanos timeout) override {
    if (done_) return status_;
    if (mpi_is_finalized()) {
      complete(Status::failed_precondition(info_.describe() + ": MPI was finalized before the operation completed"));
      return status_;
    }
    if (poll()) return status_;
    const Nanos start = clock_.now();
    const Nanos budget = timeout < 0 ? 0 : timeout;
    const Nanos deadline =
        start > std::numeric_limits<Nanos>::max() - budget ? std::numeric_limits<Nanos>::max() : start + budget;
    // Busy-poll like MPI_Wait does: MPI_Test drives Open MPI's progress engine, which
    // itself yields the core when idle if mpi_yield_when_idle is set (mpiexec sets it
    // when oversubscribed).
    while (clock_.now() < deadline) {
      if (poll()) return status_;
      shared_->answer_roll_calls([this] { return "waiting in " + info_.describe(); });
    }
    return Status::timeout(info_.describe() + ": timed out after " + format_duration(timeout) +
                           " on the communicator's clock waiting for the other ranks (the operation stays "
                           "pending; wait again to keep waiting)");
  }

  bool is_completed() override {
    if (!done_ && mpi_is_finalized()) {
      complete(Status::failed_precondition(info_.describe() + ": MPI was finalized before the operation completed"));
    }
    return done_ || poll();
  }

 private:
  // One MPI_Test (MPI must still be initialized); true once the request is complete
  // (status_ then holds the outcome).
  bool poll() {
    if (done_) return true;
    int flag = 0;
    MPI_Status mpi_status;
    const int rc = MPI_Test(&request_, &flag, &mpi_status);
    if (rc != MPI_SUCCESS) {
      complete(Status::internal(info_.describe() + ": MPI_Test failed: " + mpi_error_string(rc)));
      return true;
    }
    if (!flag) return false;
    complete(finish_ ? finish_(mpi_status) : Status::ok());
    return true;
  }

  void complete(Status s) {
    done_ = true;
    status_ = std::move(s);
    keep_alive_ = {};
    finish_ = nullptr;
  }

  std::shared_ptr<MpiSharedState> shared_;
  const Clock& clock_;
  OpInfo info_;
  KeepAlive keep_alive_;
  Finish finish_;
  MPI_Request request_ = MPI_REQUEST_NULL;
  bool done_ = false;
  Status status_;
};

std::string where(const Communicator& c, std::string_view op) {
  return std::string(op) + " on rank " + std::to_string(c.rank()) + " of group '" + c.group_name() + "' (size " +
         std::to_string(c.size()) + ")";
}

// MPI counts are ints; the tensor must have host bytes.
Status check_mpi_buffer(const Communicator& c, std::string_view op, const Tensor& t) {
  if (t.is_phantom()) {
    return Status::invalid_argument(where(c, op) + ": " + t.describe() +
                                    " has no host bytes (phantom tensor); the mpi backend needs host tensors");
  }
  if (t.numel() > INT_MAX) {
    return Status::invalid_argument(where(c, op) + ": " + t.describe() + " has " + std::to_string(t.numel()) +
                                    " elements; the mpi backend allows at most " + std::to_string(INT_MAX) +
                                    " per operation");
  }
  return Status::ok();
}

MPI_Datatype datatype_of(const MpiSharedState& shared, DType dtype) {
  switch (dtype) {
    case DType::kF32: return MPI_FLOAT;
    case DType::kI64: return MPI_INT64_T;
    case DType::kBF16: return shared.bf16;
    case DType::kF16: break;  // rejected by validate_*
  }
  SHARDLAB_CHECK(false && "dtype passed validation but has no MPI datatype");
  return MPI_DATATYPE_NULL;
}

MPI_Op op_of(const MpiSharedState& shared, DType dtype, ReduceOp op) {
  const bool bf16 = dtype == DType::kBF16;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return bf16 ? shared.bf16_sum_op : MPI_SUM;
    case ReduceOp::kMax: return bf16 ? shared.bf16_max_op : MPI_MAX;
    case ReduceOp::kMin: return bf16 ? shared.bf16_min_op : MPI_MIN;
  }
  return MPI_OP_NULL;
}

int to_int(std::int64_t n) { return static_cast<int>(n); }  // callers checked n <= INT_MAX

}  // namespace

// ---- MpiCommunicator -----------------------------------------------------------------

MpiCommunicator::MpiCommunicator(MPI_Comm comm, const Clock& clock, std::string group_name,
                                 std::shared_ptr<MpiSharedState> shared)
    : comm_(comm), clock_(clock), group_name_(std::move(group_name)), shared_(std::move(shared)) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

MpiCommunicator::~MpiCommunicator() {
  // MPI_Comm_free only marks the communicator; pending operations on it still complete.
  if (comm_ != MPI_COMM_NULL && !mpi_is_finalized()) MPI_Comm_free(&comm_);
}

Result<std::unique_ptr<MpiCommunicator>> MpiCommunicator::create(MPI_Comm parent, const Clock& clock,
                                                                 std::string group_name) {
  if (!mpi_is_initialized() || mpi_is_finalized()) {
    return Status::failed_precondition("MpiCommunicator '" + group_name +
                                       "': MPI is not initialized (create an MpiEnvironment first)");
  }
  SHARDLAB_ASSIGN_OR_RETURN(std::shared_ptr<MpiSharedState> shared, MpiSharedState::create(parent));
  MPI_Comm comm = MPI_COMM_NULL;
  const int rc = MPI_Comm_dup(parent, &comm);
  if (rc != MPI_SUCCESS) {
    return Status::internal("MpiCommunicator '" + group_name + "': MPI_Comm_dup failed: " + mpi_error_string(rc));
  }
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  return std::unique_ptr<MpiCommunicator>(new MpiCommunicator(comm, clock, std::move(group_name), std::move(shared)));
}

namespace {

// Creates the Work, issues the request through `issue` and reports a failed start.
template <typename Issue>
WorkPtr start(const std::shared_ptr<MpiSharedState>& shared, const Clock& clock, OpInfo info, KeepAlive keep_alive,
              const char* call, Issue issue, MpiWork::Finish finish = nullptr) {
  shared->reap_orphans();
  auto work = std::make_shared<MpiWork>(shared, clock, std::move(info), std::move(keep_alive), std::move(finish));
  const int rc = issue(work->request());
  if (rc != MPI_SUCCESS) work->fail_to_start(call, rc);
  return work;
}

}  // namespace

WorkPtr MpiCommunicator::all_gather_into(const Tensor& output, const Tensor& input) {
  Status s = validate_all_gather(*this, output, input);
  if (s.is_ok()) s = check_mpi_buffer(*this, "all_gather", output);
  if (s.is_ok()) s = check_mpi_buffer(*this, "all_gather", input);
  if (!s.is_ok()) return completed_work(std::move(s));

  const int n = to_int(input.numel());
  const MPI_Datatype dt = datatype_of(*shared_, input.dtype());
  // validate_all_gather guarantees an overlapping input is exactly our chunk.
  const bool in_place = input.overlaps(output);
  const void* send = in_place ? MPI_IN_PLACE : static_cast<const void*>(input.bytes());
  void* recv = output.bytes();
  OpInfo info{OpKind::kAllGather, std::nullopt, input.numel(), input.dtype(), rank_, size_, group_name_};
  return start(shared_, clock_, std::move(info), {{output, input}, nullptr}, "MPI_Iallgather",
               [&](MPI_Request* req) { return MPI_Iallgather(send, n, dt, recv, n, dt, comm_, req); });
}

WorkPtr MpiCommunicator::reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) {
  Status s = validate_reduce_scatter(*this, output, input, op);
  if (s.is_ok()) s = check_mpi_buffer(*this, "reduce_scatter", output);
  if (s.is_ok()) s = check_mpi_buffer(*this, "reduce_scatter", input);
  if (!s.is_ok()) return completed_work(std::move(s));

  const int n = to_int(output.numel());
  const DType dtype = output.dtype();
  const MPI_Datatype dt = datatype_of(*shared_, dtype);
  const MPI_Op mop = op_of(*shared_, dtype, op);
  // validate_reduce_scatter guarantees an overlapping output is exactly our chunk.
  const bool in_place = output.overlaps(input);
  const int w = size_;
  MpiWork::Finish finish;
  if (in_place || op == ReduceOp::kAvg) {
    finish = [output, input, in_place, op, dtype, w](const MPI_Status&) {
      if (in_place && output.byte_offset() != input.byte_offset()) {
        // MPI_IN_PLACE leaves the reduced block at the start of the buffer.
        std::memmove(output.bytes(), input.bytes(), static_cast<std::size_t>(output.nbytes()));
      }
      if (op == ReduceOp::kAvg) divide_in_place(dtype, output.bytes(), output.numel(), w);
      return Status::ok();
    };
  }
  const void* send = in_place ? MPI_IN_PLACE : static_cast<const void*>(input.bytes());
  void* recv = in_place ? input.bytes() : output.bytes();
  OpInfo info{OpKind::kReduceScatter, op, output.numel(), dtype, rank_, size_, group_name_};
  return start(
      shared_, clock_, std::move(info), {{output, input}, nullptr}, "MPI_Ireduce_scatter_block",
      [&](MPI_Request* req) { return MPI_Ireduce_scatter_block(send, recv, n, dt, mop, comm_, req); },
      std::move(finish));
}

WorkPtr MpiCommunicator::all_reduce(const Tensor& inout, ReduceOp op) {
  Status s = validate_all_reduce(*this, inout, op);
  if (s.is_ok()) s = check_mpi_buffer(*this, "all_reduce", inout);
  if (!s.is_ok()) return completed_work(std::move(s));

  const int n = to_int(inout.numel());
  const DType dtype = inout.dtype();
  const MPI_Datatype dt = datatype_of(*shared_, dtype);
  const MPI_Op mop = op_of(*shared_, dtype, op);
  MpiWork::Finish finish;
  if (op == ReduceOp::kAvg) {
    const int w = size_;
    finish = [inout, dtype, w](const MPI_Status&) {
      divide_in_place(dtype, inout.bytes(), inout.numel(), w);
      return Status::ok();
    };
  }
  void* buf = inout.bytes();
  OpInfo info{OpKind::kAllReduce, op, inout.numel(), dtype, rank_, size_, group_name_};
  return start(
      shared_, clock_, std::move(info), {{inout}, nullptr}, "MPI_Iallreduce",
      [&](MPI_Request* req) { return MPI_Iallreduce(MPI_IN_PLACE, buf, n, dt, mop, comm_, req); }, std::move(finish));
}

WorkPtr MpiCommunicator::broadcast(const Tensor& inout, int root) {
  Status s = validate_broadcast(*this, inout, root);
  if (s.is_ok()) s = check_mpi_buffer(*this, "broadcast", inout);
  if (!s.is_ok()) return completed_work(std::move(s));

  const int n = to_int(inout.numel());
  const MPI_Datatype dt = datatype_of(*shared_, inout.dtype());
  void* buf = inout.bytes();
  OpInfo info{OpKind::kBroadcast, std::nullopt, inout.numel(), inout.dtype(), rank_, size_, group_name_};
  return start(shared_, clock_, std::move(info), {{inout}, nullptr}, "MPI_Ibcast",
               [&](MPI_Request* req) { return MPI_Ibcast(buf, n, dt, root, comm_, req); });
}

WorkPtr MpiCommunicator::barrier() {
  OpInfo info{OpKind::kBarrier, std::nullopt, 0, std::nullopt, rank_, size_, group_name_};
  return start(shared_, clock_, std::move(info), {}, "MPI_Ibarrier",
               [&](MPI_Request* req) { return MPI_Ibarrier(comm_, req); });
}

namespace {

Status check_tag(const Communicator& c, std::string_view op, int tag, int tag_ub) {
  if (tag < 0 || tag > tag_ub) {
    return Status::invalid_argument(where(c, op) + ": tag " + std::to_string(tag) + " is outside [0, " +
                                    std::to_string(tag_ub) + "] (MPI_TAG_UB)");
  }
  return Status::ok();
}

}  // namespace

WorkPtr MpiCommunicator::send(const Tensor& input, int peer, int tag) {
  Status s = validate_peer(*this, input, peer, "send");
  if (s.is_ok()) s = check_tag(*this, "send", tag, shared_->tag_ub);
  if (s.is_ok()) s = check_mpi_buffer(*this, "send", input);
  if (!s.is_ok()) return completed_work(std::move(s));

  const int n = to_int(input.numel());
  const MPI_Datatype dt = datatype_of(*shared_, input.dtype());
  const void* buf = input.bytes();
  OpInfo info{OpKind::kSend, std::nullopt, input.numel(), input.dtype(), rank_, size_, group_name_, peer, tag};
  // Synchronous mode: completes only once the matching recv has matched (see header).
  return start(shared_, clock_, std::move(info), {{input}, nullptr}, "MPI_Issend",
               [&](MPI_Request* req) { return MPI_Issend(buf, n, dt, peer, tag, comm_, req); });
}

WorkPtr MpiCommunicator::recv(const Tensor& output, int peer, int tag) {
  Status s = validate_peer(*this, output, peer, "recv");
  if (s.is_ok()) s = check_tag(*this, "recv", tag, shared_->tag_ub);
  if (s.is_ok()) s = check_mpi_buffer(*this, "recv", output);
  if (!s.is_ok()) return completed_work(std::move(s));

  const int n = to_int(output.numel());
  const MPI_Datatype dt = datatype_of(*shared_, output.dtype());
  void* buf = output.bytes();
  OpInfo info{OpKind::kRecv, std::nullopt, output.numel(), output.dtype(), rank_, size_, group_name_, peer, tag};
  const std::string what = info.describe();
  // A shorter message than expected completes the MPI receive; report it as an error.
  MpiWork::Finish finish = [what, n, dt](const MPI_Status& st) {
    int got = 0;
    MPI_Get_count(&st, dt, &got);
    if (got != n) {
      return Status::invalid_argument(what + ": received " + std::to_string(got) + " elements; expected " +
                                      std::to_string(n) + " (the matching send has a different size)");
    }
    return Status::ok();
  };
  return start(
      shared_, clock_, std::move(info), {{output}, nullptr}, "MPI_Irecv",
      [&](MPI_Request* req) { return MPI_Irecv(buf, n, dt, peer, tag, comm_, req); }, std::move(finish));
}

Result<std::unique_ptr<Communicator>> MpiCommunicator::split(int color, int key) {
  // Exchange (color, key) first with a nonblocking all-gather so that a member that
  // never calls split produces a TIMEOUT rather than a hang in MPI_Comm_split.
  auto exchange = std::make_shared<std::vector<int>>(static_cast<std::size_t>(2 * size_) + 2);
  int* all = exchange->data();
  int* mine = all + 2 * size_;
  mine[0] = color;
  mine[1] = key;
  OpInfo info{OpKind::kSplit, std::nullopt, 0, std::nullopt, rank_, size_, group_name_};
  WorkPtr work = start(shared_, clock_, std::move(info), {{}, exchange}, "MPI_Iallgather",
                       [&](MPI_Request* req) { return MPI_Iallgather(mine, 2, MPI_INT, all, 2, MPI_INT, comm_, req); });
  SHARDLAB_RETURN_IF_ERROR(work->wait(kDefaultTimeout));

  MPI_Comm sub = MPI_COMM_NULL;
  const int rc = MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &sub);
  if (rc != MPI_SUCCESS) {
    return Status::internal(where(*this, "split") + ": MPI_Comm_split(color " + std::to_string(color) + ", key " +
                            std::to_string(key) + ") failed: " + mpi_error_string(rc));
  }
  ++splits_;  // every member counts every split, a non-member of the result too
  if (sub == MPI_COMM_NULL) return std::unique_ptr<Communicator>();
  MPI_Comm_set_errhandler(sub, MPI_ERRORS_RETURN);
  return std::unique_ptr<Communicator>(
      new MpiCommunicator(sub, clock_, split_group_name(group_name_, color, splits_), shared_));
}

std::string MpiCommunicator::roll_call(const std::string& doing, Nanos grace) {
  MpiSharedState& sh = *shared_;
  if (sh.diag == MPI_COMM_NULL || mpi_is_finalized()) return "roll call: not possible (MPI is not running)";
  int me = 0, n = 1;
  MPI_Comm_rank(sh.diag, &me);
  MPI_Comm_size(sh.diag, &n);
  const std::string mine = "ending: " + doing;
  for (int r = 0; r < n; ++r) {
    if (r != me) sh.send_text(r, MpiSharedState::kQueryTag, mine);
  }
  std::vector<std::optional<std::string>> answers(static_cast<std::size_t>(n));
  answers[static_cast<std::size_t>(me)] = "this rank";
  int answered = 1;
  const Nanos deadline = clock_.now() + grace;
  while (answered < n && clock_.now() < deadline) {
    bool any = false;
    for (int tag : {MpiSharedState::kQueryTag, MpiSharedState::kReplyTag}) {
      while (auto m = sh.receive_text(tag)) {
        any = true;
        const auto [from, t, text] = std::move(*m);
        auto& slot = answers[static_cast<std::size_t>(from)];
        if (!slot) ++answered;
        slot = text;
        if (t == MpiSharedState::kQueryTag) sh.send_text(from, MpiSharedState::kReplyTag, mine);
      }
    }
    if (!any) ::usleep(1000);
  }
  std::string out = "roll call of " + std::to_string(n) + " ranks (" + format_duration(grace) + " to answer):";
  std::string missing;
  for (int r = 0; r < n; ++r) {
    const auto& a = answers[static_cast<std::size_t>(r)];
    if (!a) {
      missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    } else if (r != me) {
      out += "\n  rank " + std::to_string(r) + ": " + *a;
    }
  }
  out += missing.empty() ? "\n  every rank answered"
                         : "\n  never answered (ranks): " + missing + " — hung, dead, or busy outside communication";
  return out;
}

// ---- MpiEnvironment ------------------------------------------------------------------

Result<std::unique_ptr<MpiEnvironment>> MpiEnvironment::initialize(int* argc, char*** argv) {
  if (mpi_is_finalized()) {
    return Status::failed_precondition("MpiEnvironment: MPI was already finalized in this process");
  }
  bool ours = false;
  if (!mpi_is_initialized()) {
    // NOTE [libnbc's all-gather]
    // Open MPI 4.1's MPI_Iallgather (coll/libnbc) defaults to its linear schedule, which
    // posts each peer's receive before the send to it; over TCP a rank's incoming and
    // outgoing transfers then take turns instead of running both ways at once: two ranks
    // across a 200 Mbit/s link took 0.345 s to exchange 4 MB each way, 2.0x one
    // direction's time (an MPI_Isend posted before its MPI_Irecv: 1.0x). Its recursive
    // doubling schedule sends before it receives and moves the same bytes for a power-of-
    // two group (0.186 s there; libnbc falls back to linear otherwise). So shardlab asks
    // for it, unless the environment already chose (mpirun --mca
    // coll_libnbc_iallgather_algorithm …); the simulator's `libnbc` algorithm models the
    // same choice (NOTE [Open MPI's nonblocking schedules] in sim/models/network/collectives.h). Other
    // MPI libraries ignore the variable.
    setenv("OMPI_MCA_coll_libnbc_iallgather_algorithm", "2", /*overwrite=*/0);
    int provided = 0;
    const int rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
    if (rc != MPI_SUCCESS) return Status::internal("MPI_Init_thread failed: " + mpi_error_string(rc));
    ours = true;
  }
  int provided = 0;
  MPI_Query_thread(&provided);
  if (provided < MPI_THREAD_FUNNELED) {
    if (ours) MPI_Finalize();
    return Status::failed_precondition("MpiEnvironment: MPI provides thread level " + std::to_string(provided) +
                                       "; shardlab needs at least MPI_THREAD_FUNNELED (" +
                                       std::to_string(MPI_THREAD_FUNNELED) + ")");
  }
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return std::unique_ptr<MpiEnvironment>(new MpiEnvironment(ours, rank, size));
}

void MpiEnvironment::abort_job(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);  // MPI_Abort does not return; should an implementation return, end anyway
}

MpiEnvironment::~MpiEnvironment() {
  if (initialized_mpi_ && !mpi_is_finalized()) MPI_Finalize();
}

Result<std::unique_ptr<MpiCommunicator>> MpiEnvironment::create_world(const Clock& clock) {
  return MpiCommunicator::create(MPI_COMM_WORLD, clock, "world");
}

}  // namespace shardlab::runtime::comm::mpi
