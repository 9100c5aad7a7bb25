#include "sim/timing/replay.h"

#include <algorithm>
#include <array>
#include <deque>
#include <numeric>

#include "sim/comm_streams.h"
#include "sim/communicator.h"

namespace shardlab::sim::timing {

namespace {

using runtime::comm::OpKind;
using runtime::train::TrainMarker;

int trace_stream(OpKind kind) {
  return kind == OpKind::kAllGather       ? kTraceAllGather
         : kind == OpKind::kReduceScatter ? kTraceReduceScatter
         : kind == OpKind::kAllReduce     ? kTraceAllReduce
                                          : kTraceOtherComm;
}

std::string describe(const CollectiveDesc& d, std::int64_t seq) {
  return std::string(runtime::comm::op_kind_name(d.kind)) + " #" + std::to_string(seq) + " (" +
         std::string(dtype_name(d.dtype)) + " × " + std::to_string(d.count) + ", " + std::to_string(d.bytes) +
         " bytes, group '" + d.group + "')";
}

// One collective of the world group in flight: every member's ready and completion time.
struct Instance {
  const CollectiveDesc* desc = nullptr;
  int first_rank = 0;  // the first rank that issued it (for mismatch messages)
  int arrived = 0;
  std::vector<char> issued;  // per rank (for the timeouts of NOTE [Faults in timing mode])
  int waiting_prev = 0;  // members whose previous operation on the stream is not timed
  bool timed = false;
  std::vector<Nanos> ready, done;
  std::string algorithm;
  // (later collective, rank): that rank's next operation on the same stream.
  std::vector<std::pair<std::int64_t, int>> successors;
  std::vector<int> waiters;   // ranks blocked in a wait on it, in blocking order
  Status error;               // the network model's: it cannot complete (link_down)
  std::int64_t waits_left = 0;  // wait nodes still to pass, over all ranks
  int tail_refs = 0;            // ranks whose stream tail it still is
};

struct RankState {
  std::uint32_t pc = 0;
  Nanos t = 0;
  std::array<std::int64_t, kNumCommStreams> tail{-1, -1, -1};
  // NOTE [Faults in timing mode]
  int step = -1;                   // the step being run (-1: before the first)
  std::int64_t payloads = 0;       // collectives with a payload issued so far
  std::int64_t corrupt_seq = -1;   // the collective whose wait fails its integrity check
  const Fault* corrupt = nullptr;  // … and the fault that corrupts it
  bool stopped = false;            // crashed, hung or failed: runs no further
};

// The rank's collective number (counting those with a payload, as FaultInjector does) of
// the program's collective `seq`.
std::int64_t payload_index(const RankProgram& p, std::int64_t seq) {
  std::int64_t k = 0;
  for (std::int64_t i = 0; i < seq; ++i) k += p.collectives[static_cast<std::size_t>(i)].kind != OpKind::kBarrier;
  return k;
}

// "all_gather in group 'world' (the rank's collective #5)", as FaultInjector names it.
std::string fault_what(const RankProgram& p, std::int64_t seq) {
  const CollectiveDesc& d = p.collectives[static_cast<std::size_t>(seq)];
  return fault_collective(runtime::comm::op_kind_name(d.kind), d.group,
                          d.kind != OpKind::kBarrier ? payload_index(p, seq) : -1);
}

class Replayer {
 public:
  Replayer(const OpGraph& g, const ReplayOptions& o) : g_(g), o_(o), w_(g.world_size) {}

  Result<ReplayResult> run() {
    SHARDLAB_RETURN_IF_ERROR(g_.validate());
    if (!o_.network) return Status::invalid_argument("replay: no network model");
    SHARDLAB_RETURN_IF_ERROR(prepare());
    std::deque<int> runnable(static_cast<std::size_t>(w_));
    std::iota(runnable.begin(), runnable.end(), 0);
    runnable_ = &runnable;
    while (!runnable.empty()) {
      const int r = runnable.front();
      runnable.pop_front();
      SHARDLAB_RETURN_IF_ERROR(run_rank(r));
    }
    if (!faulty_.empty()) return with_faults();
    for (int r = 0; r < w_; ++r) {
      const RankState& s = state_[static_cast<std::size_t>(r)];
      const RankProgram& p = g_.program(r);
      if (s.pc < p.nodes.size()) {
        const Node& n = p.nodes[s.pc];
        const Instance* in = insts_[static_cast<std::size_t>(n.index)].get();
        return Status::failed_precondition(
            "replay: rank " + std::to_string(r) + " waits forever for " +
            describe(p.collectives[static_cast<std::size_t>(n.index)], n.index) + ": " +
            (in ? std::to_string(in->arrived) + " of " + std::to_string(w_) + " ranks issued it" +
                      (in->arrived == w_ ? " and it waits for an earlier operation on a stream" : "")
                : std::string("no rank issued it")));
      }
      out_.ranks[static_cast<std::size_t>(r)].end_time = s.t;
    }
    for (auto& [rank, rec] : recorders_) out_.traces[rank] = rec->events();
    return std::move(out_);
  }

 private:
  // NOTE [Faults in timing mode]: the faulty ranks' errors, then a timeout for every rank
  // blocked in a wait.
  Result<ReplayResult> with_faults() {
    std::sort(faulty_.begin(), faulty_.end(), [](const RankError& a, const RankError& b) { return a.rank < b.rank; });
    out_.errors = std::move(faulty_);
    std::map<std::int64_t, std::string> why_of;  // per collective: ranks blocked on it share it
    for (int r = 0; r < w_; ++r) {
      const RankState& s = state_[static_cast<std::size_t>(r)];
      const RankProgram& p = g_.program(r);
      out_.ranks[static_cast<std::size_t>(r)].end_time = s.t;
      if (s.stopped || s.pc >= p.nodes.size()) continue;
      const Node& n = p.nodes[s.pc];  // a wait that cannot complete
      const Instance& in = *insts_[static_cast<std::size_t>(n.index)];
      auto [it, fresh] = why_of.try_emplace(n.index);
      if (fresh) {
        std::string missing;
        for (int m = 0; m < w_; ++m) {
          if (!in.issued.empty() && !in.issued[static_cast<std::size_t>(m)]) {
            missing += (missing.empty() ? "" : ", ") + std::to_string(m);
          }
        }
        it->second = never_arrived(in.arrived, w_, missing);
      }
      out_.errors.push_back({r, timeout_status(r, p, n.index, it->second)});
    }
    for (auto& [rank, rec] : recorders_) out_.traces[rank] = rec->events();
    return std::move(out_);
  }

  // Rank r's wait for collective `seq`, begun at its current time, timed out: in
  // SimCommunicator's words (with the FaultInjector's context and the injected faults).
  Status timeout_status(int r, const RankProgram& p, std::int64_t seq, const std::string& why) const {
    const RankState& s = state_[static_cast<std::size_t>(r)];
    const CollectiveDesc& d = p.collectives[static_cast<std::size_t>(seq)];
    const std::string what = collective_on_rank(
        describe_collective(d.kind, d.dtype, d.count, d.op, d.root, static_cast<std::uint64_t>(seq)), r, d.group, w_);
    return Status::timeout(fault_context(fault_where(r, s.step), fault_what(p, seq),
                                         timed_out_message(what, o_.collective_timeout,
                                                           s.t + o_.collective_timeout, why),
                                         injected_));
  }

  // The rank stops for good with `error` (NOTE [Faults in timing mode]).
  void stop(int r, Status error) {
    state_[static_cast<std::size_t>(r)].stopped = true;
    faulty_.push_back({r, std::move(error)});
  }

  // A crash or hang of rank `r` due now: at the top of `step` (step >= 0), or, with step
  // < 0, by time `now` before the rank issues a collective. Null when none is due.
  const Fault* due_stop(int r, int step, Nanos now) const {
    auto it = rank_faults_.find(r);
    if (it == rank_faults_.end()) return nullptr;
    for (const Fault* f : it->second) {
      if (f->kind != FaultKind::kCrash && f->kind != FaultKind::kHang) continue;
      if (step >= 0 ? (f->step >= 0 && step >= f->step) : (f->time >= 0 && now >= f->time)) return f;
    }
    return nullptr;
  }

  Status prepare() {
    const std::size_t n = g_.programs.front().collectives.size();
    std::vector<std::int64_t> ranks_of(g_.programs.size(), 0);
    for (int r = 0; r < w_; ++r) {
      ++ranks_of[g_.program_of_rank.empty() ? 0 : static_cast<std::size_t>(g_.program_of_rank[static_cast<std::size_t>(r)])];
    }
    expected_waits_.assign(n, 0);
    for (std::size_t pi = 0; pi < g_.programs.size(); ++pi) {
      const RankProgram& p = g_.programs[pi];
      if (ranks_of[pi] == 0) continue;
      if (p.collectives.size() != n) {
        return Status::failed_precondition("replay: programs issue " + std::to_string(n) + " and " +
                                           std::to_string(p.collectives.size()) + " collectives");
      }
      for (const Node& node : p.nodes) {
        if (node.kind == NodeKind::kWait) expected_waits_[static_cast<std::size_t>(node.index)] += ranks_of[pi];
      }
    }
    insts_.resize(n);
    state_.assign(static_cast<std::size_t>(w_), RankState{});
    out_.ranks.assign(static_cast<std::size_t>(w_), RankTiming{});
    for (int r = 0; r < w_; ++r) {
      const auto steps = static_cast<std::size_t>(std::max(g_.steps, 0));
      out_.ranks[static_cast<std::size_t>(r)].step_starts.reserve(steps);
      out_.ranks[static_cast<std::size_t>(r)].step_times.reserve(steps);
    }
    FaultPlan plan;
    plan.faults = o_.faults;
    injected_ = plan.describe();
    for (const Fault& f : o_.faults) {
      if (f.rank >= 0 && f.rank < w_ && (f.kind == FaultKind::kCrash || f.kind == FaultKind::kHang ||
                                         (f.kind == FaultKind::kCorrupt && f.integrity_check))) {
        rank_faults_[f.rank].push_back(&f);
      }
    }
    world_ranks_.resize(static_cast<std::size_t>(w_));
    std::iota(world_ranks_.begin(), world_ranks_.end(), 0);
    traced_.assign(static_cast<std::size_t>(w_), 0);
    for (int r : o_.traced_ranks) {
      if (r < 0 || r >= w_) continue;
      traced_[static_cast<std::size_t>(r)] = 1;
      recorders_[r] = std::make_unique<TraceRecorder>();
      out_.memory_timelines[r];
    }
    return Status::ok();
  }

  Instance& instance(std::int64_t seq, const CollectiveDesc& desc, int rank, Status* mismatch) {
    auto& slot = insts_[static_cast<std::size_t>(seq)];
    if (!slot) {
      slot = std::make_unique<Instance>();
      slot->desc = &desc;
      slot->first_rank = rank;
      slot->ready.assign(static_cast<std::size_t>(w_), 0);
      if (!rank_faults_.empty()) slot->issued.assign(static_cast<std::size_t>(w_), 0);
      slot->waits_left = expected_waits_[static_cast<std::size_t>(seq)];
    } else if (!(*slot->desc == desc)) {
      *mismatch = Status::failed_precondition("replay: collective mismatch at position #" + std::to_string(seq) +
                                              ": rank " + std::to_string(slot->first_rank) + " issued " +
                                              describe(*slot->desc, seq) + " but rank " + std::to_string(rank) +
                                              " issued " + describe(desc, seq));
    }
    return *slot;
  }

  // Frees a collective nobody needs any more: timed, every wait passed, no stream tail.
  void maybe_free(std::int64_t seq) {
    auto& slot = insts_[static_cast<std::size_t>(seq)];
    if (slot && slot->timed && slot->waits_left == 0 && slot->tail_refs == 0 && slot->successors.empty()) slot.reset();
  }

  // Times `first` when ready, then every successor that becomes ready through it.
  void time_ready(std::int64_t first) {
    std::vector<std::int64_t> work{first};
    while (!work.empty()) {
      const std::int64_t seq = work.back();
      work.pop_back();
      Instance& x = *insts_[static_cast<std::size_t>(seq)];
      if (x.timed || x.arrived < w_ || x.waiting_prev > 0) continue;
      CollectiveQuery q;
      q.kind = x.desc->kind;
      q.world_ranks = world_ranks_;
      q.arrivals = x.ready;
      q.bytes = x.desc->bytes;
      q.root = x.desc->root;
      CollectiveTiming timing = o_.network->collective(q);
      SHARDLAB_CHECK_EQ(timing.done.size(), x.ready.size());
      x.error = timing.status;  // each member fails in its wait (NOTE [Faults in timing mode])
      x.done = std::move(timing.done);
      x.algorithm = std::move(timing.algorithm);
      x.timed = true;
      ++out_.collectives;
      ++out_.events;
      for (auto& [rank, rec] : recorders_) {
        const auto r = static_cast<std::size_t>(rank);
        rec->add_comm({std::string(runtime::comm::op_kind_name(x.desc->kind)), trace_stream(x.desc->kind), x.ready[r],
                       x.done[r] - x.ready[r], x.desc->bytes, x.desc->group, x.algorithm});
      }
      for (const auto& [next, rank] : x.successors) {
        Instance& s = *insts_[static_cast<std::size_t>(next)];
        Nanos& rd = s.ready[static_cast<std::size_t>(rank)];
        rd = std::max(rd, x.done[static_cast<std::size_t>(rank)]);
        if (--s.waiting_prev == 0) work.push_back(next);
      }
      x.successors.clear();
      x.successors.shrink_to_fit();
      for (int r : x.waiters) runnable_->push_back(r);
      x.waiters.clear();
      x.waiters.shrink_to_fit();
      maybe_free(seq);
    }
  }

  Status run_rank(int r) {
    RankState& s = state_[static_cast<std::size_t>(r)];
    const RankProgram& p = g_.program(r);
    const bool traced = traced_[static_cast<std::size_t>(r)] != 0;
    RankTiming& timing = out_.ranks[static_cast<std::size_t>(r)];
    const auto ur = static_cast<std::size_t>(r);
    std::int64_t executed = 0;
    while (s.pc < p.nodes.size()) {
      const Node& n = p.nodes[s.pc];
      switch (n.kind) {
        case NodeKind::kCompute:
          if (traced) {
            Nanos at = s.t;
            TraceRecorder& rec = *recorders_[r];
            for (int k = 0; k < n.count; ++k) {
              const ComputeOp& op = p.ops[static_cast<std::size_t>(n.index + k)];
              rec.add_compute({op.name, kTraceCompute, at, op.duration, -1, {}, {}});
              at += op.duration;
            }
          }
          s.t += n.duration;
          break;
        case NodeKind::kIssue: {
          const CollectiveDesc& desc = p.collectives[static_cast<std::size_t>(n.index)];
          if (const Fault* f = rank_faults_.empty() ? nullptr : due_stop(r, -1, s.t)) {
            stop(r, stopped_rank_status(*f, fault_where(r, s.step),
                                        "at " + fault_ms(s.t) + " before its " +
                                            std::string(runtime::comm::op_kind_name(desc.kind)),
                                        w_ > 1));
            out_.events += executed;
            return Status::ok();
          }
          if (desc.kind != OpKind::kBarrier && !rank_faults_.empty()) {
            const std::int64_t k = s.payloads++;
            if (auto it = rank_faults_.find(r); it != rank_faults_.end()) {
              for (const Fault* f : it->second) {
                if (f->kind == FaultKind::kCorrupt && f->collective == k) {
                  s.corrupt_seq = n.index;
                  s.corrupt = f;
                }
              }
            }
          }
          Status mismatch;
          Instance& in = instance(n.index, desc, r, &mismatch);
          if (!mismatch.is_ok()) return mismatch;
          Nanos ready = s.t;
          const int stream = comm_stream(desc.kind);
          if (stream >= 0) {
            std::int64_t& tail = s.tail[static_cast<std::size_t>(stream)];
            if (tail >= 0) {
              Instance& prev = *insts_[static_cast<std::size_t>(tail)];
              if (prev.timed) {
                ready = std::max(ready, prev.done[ur]);
              } else {
                ++in.waiting_prev;
                prev.successors.emplace_back(n.index, r);
              }
              --prev.tail_refs;
              maybe_free(tail);
            }
            tail = n.index;
            ++in.tail_refs;
          }
          in.ready[ur] = ready;
          if (!in.issued.empty()) in.issued[ur] = 1;
          if (++in.arrived == w_) time_ready(n.index);
          break;
        }
        case NodeKind::kWait: {
          Instance& in = *insts_[static_cast<std::size_t>(n.index)];
          if (!in.timed) {
            in.waiters.push_back(r);
            out_.events += executed;
            return Status::ok();
          }
          if (!in.error.is_ok()) {  // as SimCommunicator fails every member's wait
            stop(r, Status(in.error.code(), fault_context(fault_where(r, s.step), fault_what(p, n.index),
                                                          in.error.message(), injected_)));
            out_.events += executed;
            return Status::ok();
          }
          if (in.done[ur] > s.t + o_.collective_timeout) {  // as SimCommunicator's wait times out
            stop(r, timeout_status(r, p, n.index, "it completed only at " + format_seconds(in.done[ur])));
            out_.events += executed;
            return Status::ok();
          }
          s.t = std::max(s.t, in.done[ur]);
          --in.waits_left;
          maybe_free(n.index);
          if (n.index == s.corrupt_seq) {
            stop(r, integrity_failure_status(*s.corrupt, fault_where(r, s.step), fault_what(p, n.index)));
            out_.events += executed + 1;
            return Status::ok();
          }
          break;
        }
        case NodeKind::kMarker: {
          const Marker& m = p.markers[static_cast<std::size_t>(n.index)];
          switch (m.kind) {
            case TrainMarker::kStepBegin:
              s.step = m.step;
              if (const Fault* f = rank_faults_.empty() ? nullptr : due_stop(r, m.step, s.t)) {
                stop(r, stopped_rank_status(*f, fault_where(r, s.step), "at the top of step " + std::to_string(m.step + 1),
                                            w_ > 1));
                out_.events += executed;
                return Status::ok();
              }
              timing.step_starts.push_back(s.t);
              break;
            case TrainMarker::kStepEnd:
              timing.step_times.push_back(s.t - (timing.step_starts.empty() ? 0 : timing.step_starts.back()));
              break;
            case TrainMarker::kMemorySample:
              if (traced) {
                runtime::train::MemorySample sample = p.memory_samples[static_cast<std::size_t>(m.sample)];
                sample.time = s.t;
                out_.memory_timelines[r].push_back(std::move(sample));
              }
              break;
          }
          break;
        }
      }
      ++s.pc;
      ++executed;
    }
    out_.events += executed;
    return Status::ok();
  }

  const OpGraph& g_;
  const ReplayOptions& o_;
  const int w_;
  std::vector<std::int64_t> expected_waits_;
  std::vector<std::unique_ptr<Instance>> insts_;
  std::vector<RankState> state_;
  std::vector<int> world_ranks_;
  std::vector<char> traced_;
  std::map<int, std::unique_ptr<TraceRecorder>> recorders_;
  std::deque<int>* runnable_ = nullptr;
  std::map<int, std::vector<const Fault*>> rank_faults_;  // crash, hang, detected corrupt
  std::vector<RankError> faulty_;
  std::string injected_;  // FaultPlan::describe() of o_.faults, for messages
  ReplayResult out_;
};

}  // namespace

Result<ReplayResult> replay(const OpGraph& graph, const ReplayOptions& options) {
  Replayer r(graph, options);
  return r.run();
}

}  // namespace shardlab::sim::timing
