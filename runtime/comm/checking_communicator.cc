#include "runtime/comm/checking_communicator.h"

#include <cstring>
#include <vector>

#include "runtime/core/rng.h"

namespace shardlab::runtime::comm {

namespace {

constexpr int kFields = 6;

std::int64_t hash_name(const std::string& s) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return static_cast<std::int64_t>(mix64(h) >> 1);
}

// Host memory for the fingerprint exchange; not charged to any device.
std::shared_ptr<Storage> host_storage(std::int64_t nbytes) {
  auto* p = new std::byte[static_cast<std::size_t>(nbytes)]();
  return std::make_shared<Storage>(p, reinterpret_cast<std::uint64_t>(p), nbytes, MemoryCategory::kCommBuffers,
                                   "checking fingerprints", "host", [p](Storage&) { delete[] p; });
}

}  // namespace

std::string CheckingCommunicator::Fingerprint::describe() const {
  const auto k = static_cast<OpKind>(kind);
  std::string s = std::string(op_kind_name(k)) + "(";
  if (k == OpKind::kBarrier || k == OpKind::kSplit) return s + ")";
  s += std::string(dtype_name(static_cast<DType>(dtype))) + " × " + std::to_string(count);
  if (k == OpKind::kReduceScatter || k == OpKind::kAllReduce)
    s += ", " + std::string(reduce_op_name(static_cast<ReduceOp>(arg)));
  if (k == OpKind::kBroadcast) s += ", root " + std::to_string(arg);
  return s + ")";
}

CheckingCommunicator::CheckingCommunicator(Communicator* inner, Nanos timeout)
    : ForwardingCommunicator(inner), timeout_(timeout) {
  scratch_ = host_storage(static_cast<std::int64_t>(sizeof(std::int64_t)) * kFields * (size() + 1));
}

CheckingCommunicator::CheckingCommunicator(std::unique_ptr<Communicator> owned, Nanos timeout)
    : ForwardingCommunicator(std::move(owned)), timeout_(timeout) {
  scratch_ = host_storage(static_cast<std::int64_t>(sizeof(std::int64_t)) * kFields * (size() + 1));
}

Status CheckingCommunicator::verify(const Fingerprint& mine) {
  const int w = inner()->size();
  SHARDLAB_ASSIGN_OR_RETURN(Tensor all, Tensor::view_of(scratch_, DType::kI64, {kFields * w}, 0, "fingerprints"));
  SHARDLAB_ASSIGN_OR_RETURN(Tensor own, Tensor::view_of(scratch_, DType::kI64, {kFields}, kFields * w, "fingerprint"));
  const std::int64_t fields[kFields] = {mine.seq, mine.kind, mine.dtype, mine.count, mine.arg, mine.group_hash};
  std::memcpy(own.bytes(), fields, sizeof fields);
  Status s = inner()->all_gather_into(all, own)->wait(timeout_);
  if (!s.is_ok()) {
    return s.with_context("collective #" + std::to_string(mine.seq) + " " + mine.describe() + " in group '" +
                          group_name() + "' on rank " + std::to_string(rank()) +
                          ": the call-sequence check could not reach every rank");
  }
  const std::int64_t* v = all.data<std::int64_t>();
  for (int r = 0; r < w; ++r) {
    const std::int64_t* f = v + kFields * r;
    Fingerprint other{f[0], f[1], f[2], f[3], f[4], f[5]};
    if (std::memcmp(f, fields, sizeof fields) != 0) {
      const bool mine_first = rank() < r;
      const Fingerprint& a = mine_first ? mine : other;
      const Fingerprint& b = mine_first ? other : mine;
      const int ra = mine_first ? rank() : r, rb = mine_first ? r : rank();
      return Status::failed_precondition("collective #" + std::to_string(mine.seq) + " in group '" + group_name() +
                                         "' diverged: rank " + std::to_string(ra) + " called " + a.describe() +
                                         " but rank " + std::to_string(rb) + " called " + b.describe() +
                                         (a.seq != b.seq ? " (at its collective #" + std::to_string(b.seq) + ")" : ""));
    }
  }
  return Status::ok();
}

#define SHARDLAB_CHECKED(kind, dtype, count, arg, call)                                        \
  do {                                                                                         \
    Fingerprint fp{seq_++,  static_cast<std::int64_t>(kind), static_cast<std::int64_t>(dtype), \
                   (count), static_cast<std::int64_t>(arg),  hash_name(group_name())};         \
    if (Status s = verify(fp); !s.is_ok()) return completed_work(s);                           \
    return call;                                                                               \
  } while (0)

WorkPtr CheckingCommunicator::all_gather_into(const Tensor& output, const Tensor& input) {
  if (Status s = validate_all_gather(*this, output, input); !s.is_ok()) return completed_work(s);
  SHARDLAB_CHECKED(OpKind::kAllGather, input.dtype(), input.numel(), 0, inner()->all_gather_into(output, input));
}
WorkPtr CheckingCommunicator::reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) {
  if (Status s = validate_reduce_scatter(*this, output, input, op); !s.is_ok()) return completed_work(s);
  SHARDLAB_CHECKED(OpKind::kReduceScatter, input.dtype(), output.numel(), op,
                   inner()->reduce_scatter(output, input, op));
}
WorkPtr CheckingCommunicator::all_reduce(const Tensor& inout, ReduceOp op) {
  if (Status s = validate_all_reduce(*this, inout, op); !s.is_ok()) return completed_work(s);
  SHARDLAB_CHECKED(OpKind::kAllReduce, inout.dtype(), inout.numel(), op, inner()->all_reduce(inout, op));
}
WorkPtr CheckingCommunicator::broadcast(const Tensor& inout, int root) {
  if (Status s = validate_broadcast(*this, inout, root); !s.is_ok()) return completed_work(s);
  SHARDLAB_CHECKED(OpKind::kBroadcast, inout.dtype(), inout.numel(), root, inner()->broadcast(inout, root));
}
WorkPtr CheckingCommunicator::barrier() { SHARDLAB_CHECKED(OpKind::kBarrier, DType::kI64, 0, 0, inner()->barrier()); }

Result<std::unique_ptr<Communicator>> CheckingCommunicator::split(int color, int key) {
  Fingerprint fp{seq_++,
                 static_cast<std::int64_t>(OpKind::kSplit),
                 static_cast<std::int64_t>(DType::kI64),
                 0,
                 0,
                 hash_name(group_name())};
  SHARDLAB_RETURN_IF_ERROR(verify(fp));
  SHARDLAB_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> sub, inner()->split(color, key));
  if (!sub) return std::unique_ptr<Communicator>();
  return std::unique_ptr<Communicator>(std::make_unique<CheckingCommunicator>(std::move(sub), timeout_));
}

#undef SHARDLAB_CHECKED

}  // namespace shardlab::runtime::comm
