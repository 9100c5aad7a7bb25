#include "sim/communicator.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <thread>

#include "runtime/core/check.h"

namespace shardlab::sim {

using runtime::comm::completed_work;
using runtime::comm::OpKind;
using runtime::comm::ReduceOp;
using runtime::comm::WorkPtr;

namespace {

std::string seconds(Nanos t) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.6f s", static_cast<double>(t) / 1e9);
  return buf;
}

class SimWork final : public runtime::comm::Work {
 public:
  SimWork(SimCommunicator* comm, std::shared_ptr<WorkState> state) : comm_(comm), state_(std::move(state)) {}

  Status wait(Nanos timeout) override {
    comm_->perturb();
    World::Shared& sh = comm_->shared();
    VirtualClock& clock = comm_->clock();
    std::unique_lock<std::mutex> lock(sh.mu);
    const Nanos now = clock.now();
    const Nanos deadline =
        timeout >= std::numeric_limits<Nanos>::max() - now ? std::numeric_limits<Nanos>::max() : now + timeout;
    if (!state_->done) {
      Waiter w{comm_->world_rank(), deadline, state_.get()};
      sh.waiters.push_back(&w);
      ++sh.blocked;
      while (!state_->done && !w.forced) {
        sh.maybe_resolve();
        if (state_->done || w.forced) break;
        sh.cv.wait(lock);
      }
      --sh.blocked;
      sh.waiters.remove(&w);
    }
    if (state_->done && state_->completion <= deadline) {
      clock.advance_to(state_->completion);
      return state_->status;
    }
    clock.advance_to(deadline);
    std::string why;
    if (state_->done) {
      why = "it completed only at " + seconds(state_->completion);
    } else if (auto op = state_->pending.lock()) {
      std::string missing;
      const auto& members = op->members;
      for (std::size_t g = 0; g < members.size(); ++g) {
        if (!members[g]) missing += (missing.empty() ? "" : ", ") + std::to_string(g);
      }
 why = std::to_string(op->arrived) + " of " + std::to_string(members.size()) +
            " ranks arrived; never arrived (group ranks): " + missing;
    } else {
      why = state_->missing_hint;
    }
    return Status::timeout(state_->what + ": timed out after " + seconds(timeout) + " (virtual) at " +
                           seconds(deadline) + "; " + why);
  }

  bool is_completed() override {
    std::lock_guard<std::mutex> lock(comm_->shared().mu);
    return state_->done && state_->completion <= comm_->clock().now();
  }

 private:
  SimCommunicator* comm_;
  std::shared_ptr<WorkState> state_;
};

Member make_member(OpKind kind, ReduceOp op, int root, DType dtype, std::int64_t count, const Tensor& in,
                   const Tensor& out) {
  Member m;
  m.kind = kind;
  m.op = op;
  m.root = root;
  m.dtype = dtype;
  m.count = count;
  m.input = in;
  m.output = out;
  return m;
}

void copy_bytes(const Tensor& dst, std::int64_t dst_elem_offset, const Tensor& src) {
  if (src.nbytes() == 0) return;
  std::byte* d = dst.bytes() + dst_elem_offset * static_cast<std::int64_t>(element_size(dst.dtype()));
  if (d == src.bytes()) return;  // in place
  std::memmove(d, src.bytes(), static_cast<std::size_t>(src.nbytes()));
}

// Performs a complete collective's data movement. Runs outside the lock: the op has left
// the pending map and no member may touch its buffers until its Work completes.
void execute(OpKind kind, std::vector<std::optional<Member>>& ms) {
  const int p = static_cast<int>(ms.size());
  auto& m0 = *ms[0];
  const std::size_t es = element_size(m0.dtype);
  switch (kind) {
    case OpKind::kAllGather:
      for (int d = 0; d < p; ++d)
        for (int s = 0; s < p; ++s) copy_bytes(ms[static_cast<std::size_t>(d)]->output, s * m0.count, ms[static_cast<std::size_t>(s)]->input);
      break;
    case OpKind::kReduceScatter: {
      const std::int64_t n = m0.count;
      std::vector<std::vector<std::byte>> results(static_cast<std::size_t>(p));
      for (int d = 0; d < p; ++d) {
        auto& acc = results[static_cast<std::size_t>(d)];
        acc.resize(static_cast<std::size_t>(n) * es);
        if (n == 0) continue;
        std::memcpy(acc.data(), ms[0]->input.bytes() + static_cast<std::size_t>(d * n) * es, acc.size());
        for (int s = 1; s < p; ++s) {
          runtime::comm::reduce_into(m0.dtype, m0.op, acc.data(),
                                     ms[static_cast<std::size_t>(s)]->input.bytes() + static_cast<std::size_t>(d * n) * es, n);
        }
        if (m0.op == ReduceOp::kAvg) runtime::comm::divide_in_place(m0.dtype, acc.data(), n, p);
      }
      for (int d = 0; d < p; ++d)
        if (n > 0) std::memcpy(ms[static_cast<std::size_t>(d)]->output.bytes(), results[static_cast<std::size_t>(d)].data(), results[static_cast<std::size_t>(d)].size());
      break;
    }
    case OpKind::kAllReduce: {
      const std::int64_t n = m0.count;
      if (n == 0) break;
      std::vector<std::byte> acc(static_cast<std::size_t>(n) * es);
      std::memcpy(acc.data(), m0.input.bytes(), acc.size());
      for (int s = 1; s < p; ++s) runtime::comm::reduce_into(m0.dtype, m0.op, acc.data(), ms[static_cast<std::size_t>(s)]->input.bytes(), n);
      if (m0.op == ReduceOp::kAvg) runtime::comm::divide_in_place(m0.dtype, acc.data(), n, p);
      for (int d = 0; d < p; ++d) std::memcpy(ms[static_cast<std::size_t>(d)]->output.bytes(), acc.data(), acc.size());
      break;
    }
    case OpKind::kBroadcast: {
      const Tensor& src = ms[static_cast<std::size_t>(m0.root)]->input;
      for (int d = 0; d < p; ++d)
        if (d != m0.root) copy_bytes(ms[static_cast<std::size_t>(d)]->output, 0, src);
      break;
    }
    default: break;
  }
}

}  // namespace

SimCommunicator::SimCommunicator(std::shared_ptr<World::Shared> shared, std::shared_ptr<Group> group, int group_rank,
                                 VirtualClock* clock, std::uint64_t perturb_seed)
    : shared_(std::move(shared)),
      group_(std::move(group)),
      rank_(group_rank),
      clock_(clock),
      perturb_seed_(perturb_seed),
      perturb_rng_(Rng(perturb_seed).split(static_cast<std::uint64_t>(world_rank()))) {}

void SimCommunicator::perturb() {
  if (perturb_seed_ == 0) return;
  switch (perturb_rng_.next_u32() % 4) {
    case 0: break;
    case 1: std::this_thread::yield(); break;
    case 2: std::this_thread::sleep_for(std::chrono::microseconds(20)); break;
    default: std::this_thread::sleep_for(std::chrono::microseconds(perturb_rng_.next_u32() % 200)); break;
  }
}

std::string SimCommunicator::describe(const Member& m, std::uint64_t seq) const {
  std::string s = std::string(runtime::comm::op_kind_name(m.kind)) + " #" + std::to_string(seq) + " (" +
                  std::string(dtype_name(m.dtype)) + " × " + std::to_string(m.count);
  if (m.kind == OpKind::kReduceScatter || m.kind == OpKind::kAllReduce) s += ", " + std::string(reduce_op_name(m.op));
  if (m.kind == OpKind::kBroadcast) s += ", root " + std::to_string(m.root);
  return s + ")";
}

WorkPtr SimCommunicator::collective(Member m, std::shared_ptr<WorkState> state) {
  perturb();
  if (!state) state = std::make_shared<WorkState>();
  const int p = size();
  m.work = state;
  m.arrival = clock_->now();
  std::shared_ptr<PendingOp> ready;
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    const std::uint64_t seq = group_->next_seq[static_cast<std::size_t>(rank_)]++;
    state->what = describe(m, seq) + " on rank " + std::to_string(rank_) + " of group '" + group_->name + "' (size " +
                  std::to_string(p) + ")";
    auto& op = group_->pending[seq];
    if (!op) {
      op = std::make_shared<PendingOp>();
      op->seq = seq;
      op->members.resize(static_cast<std::size_t>(p));
    }
    state->pending = op;
    op->members[static_cast<std::size_t>(rank_)] = std::move(m);
    if (++op->arrived == p) {
      ready = op;
      group_->pending.erase(seq);
    }
  }
  if (!ready) return std::make_shared<SimWork>(this, state);

  // Last to arrive: check agreement, move data, compute completion times.
  auto& ms = ready->members;
  const Member& first = *ms[0];
  Status mismatch;
  for (int g = 1; g < p && mismatch.is_ok(); ++g) {
    const Member& o = *ms[static_cast<std::size_t>(g)];
    if (o.kind != first.kind || o.dtype != first.dtype || o.count != first.count || o.op != first.op ||
        o.root != first.root) {
      mismatch = Status::failed_precondition("collective mismatch in group '" + group_->name + "' at position #" +
                                             std::to_string(ready->seq) + ": rank 0 called " + describe(first, ready->seq) +
                                             " but rank " + std::to_string(g) + " called " + describe(o, ready->seq));
    }
  }
  std::vector<Nanos> arrivals;
  std::int64_t bytes = first.count * static_cast<std::int64_t>(element_size(first.dtype));
  for (auto& mm : ms) arrivals.push_back(mm->arrival);
  std::vector<Nanos> done = collective_completion_times(first.kind, arrivals, bytes, shared_->network);
  std::shared_ptr<Group> new_groups_by_color;
  if (mismatch.is_ok()) {
    if (first.kind == OpKind::kSplit) {
      std::lock_guard<std::mutex> lock(shared_->mu);
      const int split_index = ++group_->splits;
      std::map<int, std::vector<std::pair<int, int>>> by_color;  // color -> (key, group rank)
      for (int g = 0; g < p; ++g) {
        const Member& o = *ms[static_cast<std::size_t>(g)];
        if (o.color >= 0) by_color[o.color].push_back({o.key, g});
      }
      for (auto& [color, list] : by_color) {
        std::sort(list.begin(), list.end());
        auto ng = std::make_shared<Group>();
        ng->name = group_->name;
        ng->name += '/';
        ng->name += std::to_string(color);
        if (split_index > 1) {  // appended piecewise: GCC 12 misreports "." + to_string() (-Wrestrict)
          ng->name += '.';
          ng->name += std::to_string(split_index);
        }
        for (auto& [key, g] : list) ng->world_ranks.push_back(group_->world_ranks[static_cast<std::size_t>(g)]);
        ng->next_seq.assign(list.size(), 0);
        for (std::size_t i = 0; i < list.size(); ++i) {
          auto& w = *ms[static_cast<std::size_t>(list[i].second)]->work;
          w.split_group = ng;
          w.split_rank = static_cast<int>(i);
        }
      }
    } else {
      execute(first.kind, ms);
    }
  }
  // Drop the operation's references to the members' tensors before any member can see its
  // Work complete: a buffer released later, by whichever thread happened to drop the last
  // reference, would make per-rank memory accounting depend on host timing (NOTE
  // [Determinism] in world.h).
  for (auto& mm : ms) {
    mm->input = Tensor();
    mm->output = Tensor();
  }
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    for (int g = 0; g < p; ++g) {
      const Member& m = *ms[static_cast<std::size_t>(g)];
      const int wr = group_->world_ranks[static_cast<std::size_t>(g)];
      if (wr >= 0 && wr < static_cast<int>(shared_->traces.size()) && shared_->traces[static_cast<std::size_t>(wr)] != nullptr &&
          first.kind != OpKind::kSplit) {
        const int stream = first.kind == OpKind::kAllGather       ? kTraceAllGather
                           : first.kind == OpKind::kReduceScatter ? kTraceReduceScatter
                           : first.kind == OpKind::kAllReduce     ? kTraceAllReduce
                                                                  : kTraceOtherComm;
        shared_->traces[static_cast<std::size_t>(wr)]->add_comm(
            {std::string(runtime::comm::op_kind_name(first.kind)), stream, m.arrival,
             done[static_cast<std::size_t>(g)] - m.arrival, bytes, group_->name});
      }
      shared_->complete(*m.work, mismatch, done[static_cast<std::size_t>(g)]);
    }
  }
  return std::make_shared<SimWork>(this, state);
}

WorkPtr SimCommunicator::all_gather_into(const Tensor& output, const Tensor& input) {
  if (Status s = runtime::comm::validate_all_gather(*this, output, input); !s.is_ok()) return completed_work(s);
  return collective(make_member(OpKind::kAllGather, ReduceOp::kSum, 0, input.dtype(), input.numel(), input, output));
}

WorkPtr SimCommunicator::reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) {
  if (Status s = runtime::comm::validate_reduce_scatter(*this, output, input, op); !s.is_ok()) return completed_work(s);
  return collective(make_member(OpKind::kReduceScatter, op, 0, input.dtype(), output.numel(), input, output));
}

WorkPtr SimCommunicator::all_reduce(const Tensor& inout, ReduceOp op) {
  if (Status s = runtime::comm::validate_all_reduce(*this, inout, op); !s.is_ok()) return completed_work(s);
  return collective(make_member(OpKind::kAllReduce, op, 0, inout.dtype(), inout.numel(), inout, inout));
}

WorkPtr SimCommunicator::broadcast(const Tensor& inout, int root) {
  if (Status s = runtime::comm::validate_broadcast(*this, inout, root); !s.is_ok()) return completed_work(s);
  return collective(make_member(OpKind::kBroadcast, ReduceOp::kSum, root, inout.dtype(), inout.numel(), inout, inout));
}

WorkPtr SimCommunicator::barrier() {
  return collective(make_member(OpKind::kBarrier, ReduceOp::kSum, 0, DType::kI64, 0, Tensor(), Tensor()));
}

WorkPtr SimCommunicator::send(const Tensor& input, int peer, int tag) {
  if (Status s = runtime::comm::validate_peer(*this, input, peer, "send"); !s.is_ok()) return completed_work(s);
  return point_to_point(true, input, peer, tag);
}

WorkPtr SimCommunicator::recv(const Tensor& output, int peer, int tag) {
  if (Status s = runtime::comm::validate_peer(*this, output, peer, "recv"); !s.is_ok()) return completed_work(s);
  return point_to_point(false, output, peer, tag);
}

WorkPtr SimCommunicator::point_to_point(bool is_send, const Tensor& t, int peer, int tag) {
  perturb();
  auto state = std::make_shared<WorkState>();
  const int me = world_rank(), other = group_->world_ranks[static_cast<std::size_t>(peer)];
  state->what = std::string(is_send ? "send to" : "recv from") + " rank " + std::to_string(peer) + " (tag " +
                std::to_string(tag) + ", " + std::string(dtype_name(t.dtype())) + " × " + std::to_string(t.numel()) +
                ") on rank " + std::to_string(rank_) + " of group '" + group_->name + "'";
  state->missing_hint = std::string("no matching ") + (is_send ? "recv" : "send") + " was posted by rank " +
                        std::to_string(peer);
  const auto key = is_send ? std::make_tuple(group_->name, me, other, tag) : std::make_tuple(group_->name, other, me, tag);
  std::lock_guard<std::mutex> lock(shared_->mu);
  auto& mine = is_send ? shared_->sends[key] : shared_->recvs[key];
  auto& theirs = is_send ? shared_->recvs[key] : shared_->sends[key];
  Message msg{t, clock_->now(), state};
  if (theirs.empty()) {
    mine.push_back(std::move(msg));
    return std::make_shared<SimWork>(this, state);
  }
  Message match = std::move(theirs.front());
  theirs.pop_front();
  const Message& snd = is_send ? msg : match;
  const Message& rcv = is_send ? match : msg;
  Status s;
  if (snd.tensor.dtype() != rcv.tensor.dtype() || snd.tensor.numel() != rcv.tensor.numel()) {
    s = Status::failed_precondition("message mismatch in group '" + group_->name + "' tag " + std::to_string(tag) +
                                    ": sent " + std::string(dtype_name(snd.tensor.dtype())) + " × " +
                                    std::to_string(snd.tensor.numel()) + ", receive buffer is " +
                                    std::string(dtype_name(rcv.tensor.dtype())) + " × " + std::to_string(rcv.tensor.numel()));
  } else {
    copy_bytes(rcv.tensor, 0, snd.tensor);
  }
  const Nanos at = std::max(snd.time, rcv.time) + shared_->network.message_time(snd.tensor.nbytes());
  // As for collectives: release the tensors before either side can see its Work complete.
  msg.tensor = Tensor();
  match.tensor = Tensor();
  shared_->complete(*snd.work, s, at);
  shared_->complete(*rcv.work, s, at);
  return std::make_shared<SimWork>(this, state);
}

Result<std::unique_ptr<runtime::comm::Communicator>> SimCommunicator::split(int color, int key) {
  Member m = make_member(OpKind::kSplit, ReduceOp::kSum, 0, DType::kI64, 0, Tensor(), Tensor());
  m.color = color < 0 ? -1 : color;
  m.key = key;
  auto state = std::make_shared<WorkState>();
  SHARDLAB_RETURN_IF_ERROR(collective(std::move(m), state)->wait(runtime::comm::kDefaultTimeout));
  if (!state->split_group) return std::unique_ptr<runtime::comm::Communicator>();
  return std::unique_ptr<runtime::comm::Communicator>(
      new SimCommunicator(shared_, state->split_group, state->split_rank, clock_, perturb_seed_));
}

}  // namespace shardlab::sim
