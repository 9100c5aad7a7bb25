#include "sim/engine/communicator.h"

#include <algorithm>
#include <atomic>
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

std::string format_seconds(Nanos t) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.6f s", static_cast<double>(t) / 1e9);
  return buf;
}

std::string collective_on_rank(const std::string& described, int group_rank, const std::string& group, int size) {
  return described + " on rank " + std::to_string(group_rank) + " of group '" + group + "' (size " +
         std::to_string(size) + ")";
}

std::string timed_out_message(const std::string& what, Nanos timeout, Nanos deadline, const std::string& why) {
  return what + ": timed out after " + format_seconds(timeout) + " (virtual) at " + format_seconds(deadline) + "; " +
         why;
}

std::string never_arrived(int arrived, int size, const std::string& missing) {
  return std::to_string(arrived) + " of " + std::to_string(size) + " ranks arrived; " +
         (missing.empty() ? "it waits for an earlier operation on the same stream of one of its ranks"
                          : "never arrived (group ranks): " + missing);
}

std::string describe_collective(OpKind kind, DType dtype, std::int64_t count, ReduceOp op, int root,
                                std::uint64_t seq) {
  std::string s = std::string(runtime::comm::op_kind_name(kind)) + " #" + std::to_string(seq) + " (" +
                  std::string(dtype_name(dtype)) + " × " + std::to_string(count);
  if (kind == OpKind::kReduceScatter || kind == OpKind::kAllReduce) s += ", " + std::string(reduce_op_name(op));
  if (kind == OpKind::kBroadcast) s += ", root " + std::to_string(root);
  return s + ")";
}

namespace {

// NOTE [Shared data movement]
// A collective's data movement is cut into tasks of at most kChunkBytes of output: a
// copy, or one element range reduced in rank order (0, 1, …, W-1) and written to its
// destinations. A task's bytes are a pure function of the members' inputs, so which host
// thread runs it never changes the result (NOTE [Determinism] in world.h). The last
// member to arrive plans the tasks and runs them; when the operation is large enough
// (kShareMinBytes) it also publishes them, and members already blocked in wait() on the
// same operation take tasks too — on W ranks up to W host threads move the data instead
// of one. Whoever finishes the last task drops the operation's references to the
// members' tensors and only then completes every member's Work: no rank sees its Work
// done while the operation still holds its buffers, so its memory accounting never
// depends on host timing. Completion times come from the cost model, as before.
constexpr std::int64_t kChunkBytes = std::int64_t{256} << 10;
// Below this many bytes × members the last arriver moves the data alone: waking helpers
// would cost more than it saves.
constexpr std::int64_t kShareMinBytes = std::int64_t{1} << 20;
// A collective's waiter polls its operation (without the lock, yielding its core to any
// runnable thread between polls) this many times before it sleeps on the condition
// variable: waking a sleeping thread costs ~15 µs of host time on the 2-core reference
// VM, more than a small collective's whole data movement. Yielding rather than spinning
// on a CPU pause: with more runnable threads than cores (other ranks, other processes) a
// spinning waiter delays the very rank it waits for (measured here: 2 MiB unshards
// 1.2–2× slower next to two busy processes). A count, not a duration: host time never
// decides anything here (NOTE [Determinism] in world.h).
constexpr int kPollsBeforeSleep = 200;

struct Task {
  // A copy (src non-null): `bytes` bytes from src to dst.
  std::byte* dst = nullptr;
  const std::byte* src = nullptr;
  std::int64_t bytes = 0;
  // A reduction (src null): elements [begin, begin + count) of the destination chunk,
  // into member `dest`'s output (reduce_scatter) or every member's output (dest -1).
  int dest = -1;
  std::int64_t begin = 0, count = 0;
};

// NOTE [Comm streams]
// Each rank has, besides its compute stream (the host thread issuing device ops in
// order), three communication streams, as PyTorch FSDP has its unshard and
// post-backward streams: all_gather runs on the all-gather stream; reduce_scatter and
// all_reduce on the reduce stream (FSDP's gradient reductions — the reduce-scatter and,
// for NO_SHARD / HYBRID_SHARD, the all-reduce — run there in order); broadcast and
// barrier on a third. split and point-to-point messages are not serialized. On a stream
// operations run one at a time in issue order: an operation starts on a rank at its
// ready time = max(issue time, completion time on that rank of the rank's previous
// operation on the same stream), and the network model times the collective from the
// members' ready times (instead of their issue times). Overlap and exposed
// communication then come out of the model: a prefetched all-gather queues behind the
// one in flight instead of running beside it for free.
//
// A ready time is a pure function of virtual times, whatever the host order: when the
// last member of an operation arrives while some member's previous operation on that
// stream has no completion time yet (its own members are still missing, or it waits in
// turn), the operation is not timed then; it records how many predecessors it waits for
// and each predecessor lists it as a successor. Whoever times an operation (under
// Shared::mu) then updates its successors' ready times and times every successor that
// has become ready, transitively. A Work completes once its operation is timed and its
// data moved (NOTE [Shared data movement]), whichever comes last. trace.json shows a
// collective from its ready time to its completion. The timing-mode replay
// (sim/timing/replay.h) applies the same rule.
struct SharedOp;

// An operation whose member `member` waits for member `prev_member` of this one.
struct Successor {
  std::shared_ptr<SharedOp> op;
  int member = 0, prev_member = 0;
};

// The PendingOp of every collective this file creates (so a Work's `pending` can be
// downcast): the planned tasks and who has taken and finished them.
struct SharedOp final : PendingOp {
  std::vector<Task> tasks;
  std::vector<Nanos> done;       // completion time per member (cost model)
  Status status;                 // ok, or the mismatch every member reports
  std::shared_ptr<Group> group;  // for the trace: world ranks and name
  std::int64_t bytes = 0;        // payload bytes per rank, for the trace
  std::string algorithm;         // the network model's algorithm, for the trace
  // NOTE [Comm streams]; all under Shared::mu.
  std::vector<Nanos> ready;  // per member: max(issue, previous op on its stream done)
  int waiting_prev = 0;      // predecessors not yet timed
  std::vector<Successor> successors;
  bool sealed = false;  // the last member checked agreement and planned the data movement
  bool timed = false;   // `done` holds the network model's completion times
  bool moved = false;   // the data movement finished and the tensors were released
  // Set under Shared::mu, also read without it by polling waiters (SimWork::wait).
  std::atomic<bool> published{false};  // waiters may take tasks
  std::atomic<bool> completed{false};  // every member's Work is done
  std::atomic<std::size_t> next{0};
  std::atomic<std::size_t> finished{0};

  bool has_free_tasks() const {
    return published.load(std::memory_order_acquire) && next.load(std::memory_order_relaxed) < tasks.size();
  }
};

void add_copies(std::vector<Task>& tasks, std::byte* dst, const std::byte* src, std::int64_t bytes) {
  if (bytes == 0 || dst == src) return;  // in place
  for (std::int64_t off = 0; off < bytes; off += kChunkBytes) {
    tasks.push_back(Task{dst + off, src + off, std::min(kChunkBytes, bytes - off)});
  }
}

void add_reductions(std::vector<Task>& tasks, int dest, std::int64_t count, std::size_t es) {
  const std::int64_t chunk = std::max<std::int64_t>(1, kChunkBytes / static_cast<std::int64_t>(es));
  for (std::int64_t b = 0; b < count; b += chunk) {
    Task t;
    t.dest = dest;
    t.begin = b;
    t.count = std::min(chunk, count - b);
    tasks.push_back(t);
  }
}

// The tasks of a complete, agreed collective (all members present).
void plan(SharedOp& op) {
  auto& ms = op.members;
  const int p = static_cast<int>(ms.size());
  const Member& m0 = *ms[0];
  const std::size_t es = element_size(m0.dtype);
  const std::int64_t bytes = m0.count * static_cast<std::int64_t>(es);
  switch (m0.kind) {
    case OpKind::kAllGather:
      for (int d = 0; d < p; ++d)
        for (int s = 0; s < p; ++s) {
          add_copies(op.tasks, ms[static_cast<std::size_t>(d)]->output.bytes() + s * bytes,
                     ms[static_cast<std::size_t>(s)]->input.bytes(), bytes);
        }
      break;
    case OpKind::kReduceScatter:
      for (int d = 0; d < p; ++d) add_reductions(op.tasks, d, m0.count, es);
      break;
    case OpKind::kAllReduce: add_reductions(op.tasks, -1, m0.count, es); break;
    case OpKind::kBroadcast:
      for (int d = 0; d < p; ++d) {
        if (d != m0.root) {
          add_copies(op.tasks, ms[static_cast<std::size_t>(d)]->output.bytes(),
                     ms[static_cast<std::size_t>(m0.root)]->input.bytes(), bytes);
        }
      }
      break;
    default: break;
  }
}

void run(const SharedOp& op, const Task& t) {
  if (t.src) {
    std::memmove(t.dst, t.src, static_cast<std::size_t>(t.bytes));
    return;
  }
  const auto& ms = op.members;
  const int p = static_cast<int>(ms.size());
  const Member& m0 = *ms[0];
  const std::size_t es = element_size(m0.dtype);
  // Where this range starts in each input: inside chunk `dest` for reduce_scatter.
  const std::size_t in_off = static_cast<std::size_t>((t.dest < 0 ? 0 : t.dest * m0.count) + t.begin) * es;
  // Accumulate aside, then write: an in-place output is also an input of this range.
  std::vector<std::byte> acc(static_cast<std::size_t>(t.count) * es);
  std::memcpy(acc.data(), m0.input.bytes() + in_off, acc.size());
  for (int s = 1; s < p; ++s) {
    runtime::comm::reduce_into(m0.dtype, m0.op, acc.data(), ms[static_cast<std::size_t>(s)]->input.bytes() + in_off,
                               t.count);
  }
  if (m0.op == ReduceOp::kAvg) runtime::comm::divide_in_place(m0.dtype, acc.data(), t.count, p);
  const std::size_t out_off = static_cast<std::size_t>(t.begin) * es;
  for (int d = 0; d < p; ++d) {
    if (t.dest >= 0 && d != t.dest) continue;
    std::memcpy(ms[static_cast<std::size_t>(d)]->output.bytes() + out_off, acc.data(), acc.size());
  }
}

// Takes and runs tasks until none is left; true when this call finished the last one.
bool run_tasks(SharedOp& op) {
  bool last = false;
  for (;;) {
    const std::size_t t = op.next.fetch_add(1, std::memory_order_relaxed);
    if (t >= op.tasks.size()) break;
    run(op, op.tasks[t]);
    last = op.finished.fetch_add(1, std::memory_order_acq_rel) + 1 == op.tasks.size();
  }
  return last;
}

// Under sh.mu, once the operation is timed and its data moved: completes every member's Work.
void complete_members(World::Shared& sh, SharedOp& op) {
  const OpKind kind = op.members[0]->kind;
  for (std::size_t g = 0; g < op.members.size(); ++g) {
    const Member& m = *op.members[g];
    const int wr = op.group->world_ranks[g];
    if (wr >= 0 && wr < static_cast<int>(sh.traces.size()) && sh.traces[static_cast<std::size_t>(wr)] != nullptr &&
        kind != OpKind::kSplit) {
      const int stream = kind == OpKind::kAllGather       ? kTraceAllGather
                         : kind == OpKind::kReduceScatter ? kTraceReduceScatter
                         : kind == OpKind::kAllReduce     ? kTraceAllReduce
                                                          : kTraceOtherComm;
      sh.traces[static_cast<std::size_t>(wr)]->add_comm({std::string(runtime::comm::op_kind_name(kind)), stream,
                                                         op.ready[g], op.done[g] - op.ready[g], op.bytes,
                                                         op.group->name, op.algorithm});
    }
    m.work->duration = std::max<Nanos>(0, op.done[g] - *std::max_element(op.ready.begin(), op.ready.end()));
    sh.complete(*m.work, op.status, op.done[g]);
  }
  op.completed.store(true, std::memory_order_release);
}

// Under sh.mu: times `first` if it is sealed and no predecessor is untimed, then every
// successor that becomes ready through it (NOTE [Comm streams]).
void time_ready(World::Shared& sh, const std::shared_ptr<SharedOp>& first) {
  std::vector<std::shared_ptr<SharedOp>> work{first};
  while (!work.empty()) {
    std::shared_ptr<SharedOp> op = std::move(work.back());
    work.pop_back();
    if (op->timed || !op->sealed || op->waiting_prev > 0) continue;
    const Member& m0 = *op->members[0];
    CollectiveQuery query;
    query.kind = m0.kind;
    query.world_ranks = op->group->world_ranks;
    query.arrivals = op->ready;
    query.bytes = op->bytes;
    query.root = m0.root;
    query.split = op->group->split_groups.get();
    CollectiveTiming timing = sh.network->collective(query);
    SHARDLAB_CHECK_EQ(timing.done.size(), op->members.size());
    if (!timing.status.is_ok()) {
      // A route is down for good (a link_down fault): every member fails at once, at the
      // time it was ready, with the network's message naming the link.
      if (op->status.is_ok()) op->status = timing.status;
      timing.done.assign(op->ready.begin(), op->ready.end());
    }
    op->done = std::move(timing.done);
    op->algorithm = std::move(timing.algorithm);
    op->timed = true;
    for (Successor& s : op->successors) {
      Nanos& r = s.op->ready[static_cast<std::size_t>(s.member)];
      r = std::max(r, op->done[static_cast<std::size_t>(s.prev_member)]);
      --s.op->waiting_prev;
      work.push_back(std::move(s.op));
    }
    op->successors.clear();
    if (op->moved) complete_members(sh, *op);
  }
}

// After the last task: release the members' tensors; complete their Works if timed.
void finish(World::Shared& sh, SharedOp& op) {
  for (auto& m : op.members) {
    m->input = Tensor();
    m->output = Tensor();
  }
  std::lock_guard<std::mutex> lock(sh.mu);
  op.moved = true;
  if (op.timed) complete_members(sh, op);
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
      // A collective's SharedOp, polled without the lock before sleeping (null for p2p).
      const std::shared_ptr<PendingOp> pending = state_->pending.lock();
      const auto* op = static_cast<const SharedOp*>(pending.get());
      int polls = 0;
      while (!state_->done && !w.forced) {
        if (help(sh, lock)) continue;
        sh.maybe_resolve();
        if (state_->done || w.forced) break;
        if (op && polls < kPollsBeforeSleep) {
          lock.unlock();  // polling under the lock would stall the rank that completes the op
          while (polls++ < kPollsBeforeSleep && !op->completed.load(std::memory_order_acquire) &&
                 !op->has_free_tasks()) {
            std::this_thread::yield();
          }
          lock.lock();
          continue;
        }
        sh.cv.wait(lock);
      }
      --sh.blocked;
      sh.waiters.remove(&w);
    }
    // NOTE [Host-progressed collectives] in sim/models/network/topology.h: the transfer runs in the wait.
    const Nanos completion = sh.network->host_progress() && state_->done
                                 ? std::max(state_->completion, add_time(now, state_->duration))
                                 : state_->completion;
    if (state_->done && completion <= deadline) {
      clock.advance_to(completion);
      return state_->status;
    }
    clock.advance_to(deadline);
    std::string why;
    if (state_->done) {
      why = "it completed only at " + format_seconds(completion);
    } else if (auto op = state_->pending.lock()) {
      std::string missing;
      const auto& members = op->members;
      for (std::size_t g = 0; g < members.size(); ++g) {
        if (!members[g]) missing += (missing.empty() ? "" : ", ") + std::to_string(g);
      }
      why = never_arrived(op->arrived, static_cast<int>(members.size()), missing);
    } else {
      why = state_->missing_hint;
    }
    return Status::timeout(timed_out_message(state_->what, timeout, deadline, why));
  }

  bool is_completed() override {
    std::lock_guard<std::mutex> lock(comm_->shared().mu);
    return state_->done && state_->completion <= comm_->clock().now();
  }

 private:
  // Under sh.mu (held by `lock`): takes published tasks of this Work's operation (NOTE
  // [Shared data movement]) with the lock released; false when there were none. While it
  // works this rank is not blocked, so no timeout is forced on a wait that is progressing.
  bool help(World::Shared& sh, std::unique_lock<std::mutex>& lock) {
    std::shared_ptr<PendingOp> pending = state_->pending.lock();
    if (!pending) return false;
    auto& op = static_cast<SharedOp&>(*pending);
    if (!op.has_free_tasks()) return false;
    --sh.blocked;
    lock.unlock();
    if (run_tasks(op)) finish(sh, op);
    lock.lock();
    ++sh.blocked;
    return true;
  }

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
  return describe_collective(m.kind, m.dtype, m.count, m.op, m.root, seq);
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
    state->what = collective_on_rank(describe(m, seq), rank_, group_->name, p);
    auto& op = group_->pending[seq];
    if (!op) {
      auto fresh = std::make_shared<SharedOp>();
      fresh->seq = seq;
      fresh->members.resize(static_cast<std::size_t>(p));
      fresh->ready.assign(static_cast<std::size_t>(p), 0);
      op = std::move(fresh);
    }
    state->pending = op;
    // NOTE [Comm streams]: queue behind this rank's previous operation on the stream.
    auto& shared_op = static_cast<SharedOp&>(*op);
    Nanos& ready_at = shared_op.ready[static_cast<std::size_t>(rank_)];
    ready_at = m.arrival;
    const int stream = comm_stream(m.kind);
    const int me = world_rank();
    if (stream >= 0 && me >= 0 && me < static_cast<int>(shared_->stream_tails.size())) {
      StreamTail& tail = shared_->stream_tails[static_cast<std::size_t>(me)][static_cast<std::size_t>(stream)];
      if (auto* prev = static_cast<SharedOp*>(tail.op.get())) {
        if (prev->timed) {
          ready_at = std::max(ready_at, prev->done[static_cast<std::size_t>(tail.member)]);
        } else {
          ++shared_op.waiting_prev;
          prev->successors.push_back({std::static_pointer_cast<SharedOp>(op), rank_, tail.member});
        }
      }
      tail.op = op;
      tail.member = rank_;
    }
    op->members[static_cast<std::size_t>(rank_)] = std::move(m);
    if (++op->arrived == p) {
      ready = op;
      group_->pending.erase(seq);
    }
  }
  if (!ready) return std::make_shared<SimWork>(this, state);

  // Last to arrive: check agreement, compute completion times, move data.
  auto& op = static_cast<SharedOp&>(*ready);
  auto& ms = op.members;
  const Member& first = *ms[0];
  Status mismatch;
  for (int g = 1; g < p && mismatch.is_ok(); ++g) {
    const Member& o = *ms[static_cast<std::size_t>(g)];
    if (o.kind != first.kind || o.dtype != first.dtype || o.count != first.count || o.op != first.op ||
        o.root != first.root) {
      mismatch =
          Status::failed_precondition("collective mismatch in group '" + group_->name + "' at position #" +
                                      std::to_string(ready->seq) + ": rank 0 called " + describe(first, ready->seq) +
                                      " but rank " + std::to_string(g) + " called " + describe(o, ready->seq));
    }
  }
  std::int64_t bytes = first.count * static_cast<std::int64_t>(element_size(first.dtype));
  if (mismatch.is_ok()) {
    if (first.kind == OpKind::kSplit) {
      std::lock_guard<std::mutex> lock(shared_->mu);
      const int split_index = ++group_->splits;
      std::map<int, std::vector<std::pair<int, int>>> by_color;  // color -> (key, group rank)
      for (int g = 0; g < p; ++g) {
        const Member& o = *ms[static_cast<std::size_t>(g)];
        if (o.color >= 0) by_color[o.color].push_back({o.key, g});
      }
      std::vector<std::vector<int>> siblings;
      std::vector<std::shared_ptr<Group>> made;
      for (auto& [color, list] : by_color) {
        std::sort(list.begin(), list.end());
        auto ng = std::make_shared<Group>();
        made.push_back(ng);
        ng->name = runtime::comm::split_group_name(group_->name, color, split_index);
        for (auto& [key, g] : list) ng->world_ranks.push_back(group_->world_ranks[static_cast<std::size_t>(g)]);
        ng->next_seq.assign(list.size(), 0);
        for (std::size_t i = 0; i < list.size(); ++i) {
          auto& w = *ms[static_cast<std::size_t>(list[i].second)]->work;
          w.split_group = ng;
          w.split_rank = static_cast<int>(i);
        }
        siblings.push_back(ng->world_ranks);
      }
      // NOTE [Concurrent groups]: only a model that prices them reads the split's groups.
      if (shared_->network->prices_concurrent_groups()) {
        const auto split = std::make_shared<const SplitGroups>(SplitGroups::of(std::move(siblings)));
        for (const std::shared_ptr<Group>& ng : made) ng->split_groups = split;
      }
    } else {
      plan(op);
    }
  }
  // NOTE [Shared data movement]: run the tasks, with the waiting members' help when large.
  op.status = mismatch;
  op.group = group_;
  op.bytes = bytes;
  {
    // NOTE [Comm streams]: timed now, or by whoever times its last untimed predecessor.
    std::lock_guard<std::mutex> lock(shared_->mu);
    op.sealed = true;
    time_ready(*shared_, std::static_pointer_cast<SharedOp>(ready));
    if (bytes * p >= kShareMinBytes && op.tasks.size() > 1) {
      op.published.store(true, std::memory_order_release);
      shared_->cv.notify_all();
    }
  }
  if (op.tasks.empty() || run_tasks(op)) finish(*shared_, op);
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
  state->missing_hint =
      std::string("no matching ") + (is_send ? "recv" : "send") + " was posted by rank " + std::to_string(peer);
  const auto key =
      is_send ? std::make_tuple(group_->name, me, other, tag) : std::make_tuple(group_->name, other, me, tag);
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
                                    std::string(dtype_name(rcv.tensor.dtype())) + " × " +
                                    std::to_string(rcv.tensor.numel()));
  } else {
    copy_bytes(rcv.tensor, 0, snd.tensor);
  }
  const int src = is_send ? me : other, dst = is_send ? other : me;
  const Nanos at = shared_->network->message(src, dst, snd.tensor.nbytes(), std::max(snd.time, rcv.time));
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
