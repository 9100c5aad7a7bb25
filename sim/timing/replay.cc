#include "sim/timing/replay.h"

#include <algorithm>
#include <array>
#include <deque>
#include <numeric>

#include "sim/engine/comm_streams.h"
#include "sim/engine/communicator.h"

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

std::string describe(const CollectiveDesc& d, std::int64_t seq, int rank) {
  return std::string(runtime::comm::op_kind_name(d.kind)) + " #" + std::to_string(seq) + " (" +
         std::string(dtype_name(d.dtype)) + " × " + std::to_string(d.count) + ", " + std::to_string(d.bytes) +
         " bytes, group '" + group_name_of(d, rank) + "')";
}

// One collective of one group in flight (NOTE [Groups in timing mode] in op_graph.h): every
// member's ready and completion time, indexed by group rank.
struct Instance {
  const CollectiveDesc* desc = nullptr;
  std::int64_t seq = 0;  // its position in the programs
  int color = 0;         // which group of the desc's layout
  int arrived = 0;
  std::vector<char> issued;  // per member (for the timeouts of NOTE [Faults in timing mode])
  int waiting_prev = 0;      // members whose previous operation on the stream is not timed
  bool timed = false;
  std::vector<Nanos> ready, done;
  std::string algorithm;
  // (later collective, rank): that rank's next operation on the same stream.
  std::vector<std::pair<Instance*, int>> successors;
  std::vector<int> waiters;     // ranks blocked in a wait on it, in blocking order
  Status error;                 // the network model's: it cannot complete (link_down)
  std::int64_t waits_left = 0;  // wait nodes still to pass, over all ranks
  int tail_refs = 0;            // ranks whose stream tail it still is
};

struct RankState {
  std::uint32_t pc = 0;
  Nanos t = 0;
  // NOTE [Host and device timelines]: the device's time (0 and unused with the ideal
  // stack, so max(t, dev) is t there) and the step's host-bound time so far.
  Nanos dev = 0;
  Nanos starved = 0;
  std::array<std::int64_t, kNumCommStreams> tail{-1, -1, -1};
  // NOTE [Faults in timing mode]
  int step = -1;                   // the step being run (-1: before the first)
  std::int64_t payloads = 0;       // collectives with a payload issued so far
  std::int64_t corrupt_seq = -1;   // the collective whose wait fails its integrity check
  const Fault* corrupt = nullptr;  // … and the fault that corrupts it
  bool stopped = false;            // crashed, hung or failed: runs no further
};

// Rank `rank`'s collective number (counting those with a payload, as FaultInjector does)
// of the program's collective `seq`.
std::int64_t payload_index(const RankProgram& p, std::int64_t seq, int rank) {
  std::int64_t k = 0;
  for (std::int64_t i = 0; i < seq; ++i) k += has_payload(p.collectives[static_cast<std::size_t>(i)], rank);
  return k;
}

// The number of collective `seq` in its group's sequence (SimCommunicator's "#n"): the
// program's earlier collectives on the same layout.
std::int64_t group_seq(const RankProgram& p, std::int64_t seq) {
  const CollectiveDesc& d = p.collectives[static_cast<std::size_t>(seq)];
  std::int64_t k = 0;
  for (std::int64_t i = 0; i < seq; ++i) {
    const CollectiveDesc& e = p.collectives[static_cast<std::size_t>(i)];
    k += e.stride == d.stride && e.size == d.size && e.split == d.split;
  }
  return k;
}

// "all_gather in group 'world' (the rank's collective #5)", as FaultInjector names it.
std::string fault_what(const RankProgram& p, std::int64_t seq, int rank) {
  const CollectiveDesc& d = p.collectives[static_cast<std::size_t>(seq)];
  return fault_collective(runtime::comm::op_kind_name(d.kind), group_name_of(d, rank),
                          has_payload(d, rank) ? payload_index(p, seq, rank) : -1);
}

class Replayer {
 public:
  Replayer(const OpGraph& g, const ReplayOptions& o) : g_(g), o_(o), stack_(o.stack), w_(g.world_size) {}

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
        const CollectiveDesc& d = p.collectives[static_cast<std::size_t>(n.index)];
        const Instance* in = find(n.index, r);
        const int size = group_size_of(d, w_);
        return Status::failed_precondition(
            "replay: rank " + std::to_string(r) + " waits forever for " + describe(d, n.index, r) + ": " +
            (in ? std::to_string(in->arrived) + " of " + std::to_string(size) + " ranks issued it" +
                      (in->arrived == size ? " and it waits for an earlier operation on a stream" : "")
                : std::string("no rank issued it")));
      }
      out_.ranks[static_cast<std::size_t>(r)].end_time = std::max(s.t, s.dev);
    }
    for (auto& [rank, rec] : recorders_) out_.traces[rank] = rec->events();
    return std::move(out_);
  }

 private:
  // The instances of one position in the programs, one per group of its layout.
  struct Slot {
    std::vector<std::unique_ptr<Instance>> by_color;  // allocated at the first issue
    int created = 0, live = 0;
    const CollectiveDesc* first = nullptr;  // what the first rank to issue it issued
    int first_rank = 0;
  };

  // NOTE [Faults in timing mode]: the faulty ranks' errors, then a timeout for every rank
  // blocked in a wait.
  Result<ReplayResult> with_faults() {
    std::sort(faulty_.begin(), faulty_.end(), [](const RankError& a, const RankError& b) { return a.rank < b.rank; });
    out_.errors = std::move(faulty_);
    std::map<std::pair<std::int64_t, int>, std::string> why_of;  // per instance: ranks blocked on it share it
    for (int r = 0; r < w_; ++r) {
      const RankState& s = state_[static_cast<std::size_t>(r)];
      const RankProgram& p = g_.program(r);
      out_.ranks[static_cast<std::size_t>(r)].end_time = std::max(s.t, s.dev);
      if (s.stopped || s.pc >= p.nodes.size()) continue;
      const Node& n = p.nodes[s.pc];  // a wait that cannot complete
      const Instance& in = *find(n.index, r);
      auto [it, fresh] = why_of.try_emplace(std::make_pair(std::int64_t{n.index}, in.color));
      if (fresh) {
        std::string missing;  // group ranks, as SimCommunicator lists them
        for (std::size_t k = 0; k < in.issued.size(); ++k) {
          if (!in.issued[k]) missing += (missing.empty() ? "" : ", ") + std::to_string(k);
        }
        it->second = never_arrived(in.arrived, static_cast<int>(in.ready.size()), missing);
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
        describe_collective(d.kind, d.dtype, d.count, d.op, d.root, static_cast<std::uint64_t>(group_seq(p, seq))),
        group_rank_of(d, r), group_name_of(d, r), group_size_of(d, w_));
    return Status::timeout(fault_context(
        fault_where(r, s.step), fault_what(p, seq, r),
        timed_out_message(what, o_.collective_timeout, add_time(s.t, o_.collective_timeout), why), injected_));
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
    std::vector<std::int64_t> program_ranks(g_.programs.size(), 0);  // per program: how many ranks run it
    for (int r = 0; r < w_; ++r) {
      ++program_ranks[g_.program_index(r)];
    }
    // Wait nodes per collective and program; a collective every program waits for equally
    // often (the usual case) needs no walk over its members.
    waits_.assign(g_.programs.size(), std::vector<std::int32_t>(n, 0));
    uniform_waits_.assign(n, -1);
    for (std::size_t pi = 0; pi < g_.programs.size(); ++pi) {
      const RankProgram& p = g_.programs[pi];
      if (program_ranks[pi] == 0) continue;
      if (p.collectives.size() != n) {
        return Status::failed_precondition("replay: programs issue " + std::to_string(n) + " and " +
                                           std::to_string(p.collectives.size()) + " collectives");
      }
      for (const Node& node : p.nodes) {
        if (node.kind == NodeKind::kWait) ++waits_[pi][static_cast<std::size_t>(node.index)];
      }
    }
    for (std::size_t seq = 0; seq < n; ++seq) {
      std::int32_t common = -1;
      bool uniform = true;
      for (std::size_t pi = 0; pi < g_.programs.size(); ++pi) {
        if (program_ranks[pi] == 0) continue;
        if (common >= 0 && waits_[pi][seq] != common) uniform = false;
        common = waits_[pi][seq];
      }
      if (uniform) uniform_waits_[seq] = common;
    }
    slots_.resize(n);
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
      if (f.rank >= 0 && f.rank < w_ &&
          (f.kind == FaultKind::kCrash || f.kind == FaultKind::kHang ||
           (f.kind == FaultKind::kCorrupt && f.integrity_check))) {
        rank_faults_[f.rank].push_back(&f);
      }
    }
    world_ranks_.resize(static_cast<std::size_t>(w_));
    std::iota(world_ranks_.begin(), world_ranks_.end(), 0);
    // Coord per rank and split (OpGraph::validate: a split names one layout in the graph).
    std::vector<const CollectiveDesc*> split_layout;
    for (const RankProgram& p : g_.programs) {
      for (const CollectiveDesc& d : p.collectives) {
        if (d.stride == 0) continue;
        if (split_layout.size() < static_cast<std::size_t>(d.split))
          split_layout.resize(static_cast<std::size_t>(d.split));
        split_layout[static_cast<std::size_t>(d.split - 1)] = &d;
      }
    }
    coords_.assign(split_layout.size() * static_cast<std::size_t>(w_), Coord{});
    for (std::size_t k = 0; k < split_layout.size(); ++k) {
      if (split_layout[k] == nullptr) continue;
      for (int r = 0; r < w_; ++r) {
        coords_[k * static_cast<std::size_t>(w_) + static_cast<std::size_t>(r)] = {group_color_of(*split_layout[k], r),
                                                                                   group_rank_of(*split_layout[k], r)};
      }
    }
    traced_.assign(static_cast<std::size_t>(w_), 0);
    for (int r : o_.traced_ranks) {
      if (r < 0 || r >= w_) continue;
      traced_[static_cast<std::size_t>(r)] = 1;
      recorders_[r] = std::make_unique<TraceRecorder>();
      out_.memory_timelines[r];
    }
    return Status::ok();
  }

  const CollectiveDesc& desc_of(std::int64_t seq, int rank) const {
    return g_.program(rank).collectives[static_cast<std::size_t>(seq)];
  }

  // Rank r's group of `d`'s layout and its place in it (group_color_of, group_rank_of),
  // looked up: computed once per rank and split in prepare(), where the replay would
  // otherwise divide on every issue and wait.
  struct Coord {
    int color = 0, rank = 0;
  };
  Coord coord(const CollectiveDesc& d, int r) const {
    return d.stride == 0 ? Coord{0, r}
                         : coords_[static_cast<std::size_t>(d.split - 1) * static_cast<std::size_t>(w_) +
                                   static_cast<std::size_t>(r)];
  }

  // NOTE [Concurrent groups] in sim/models/network/network.h: every group of d's layout,
  // for its network query; null for the world group and for a model that does not price
  // them.
  const SplitGroups* split_of(const CollectiveDesc& d) {
    if (d.stride == 0 || !o_.network->prices_concurrent_groups()) return nullptr;
    auto it = splits_.find({d.stride, d.size});
    if (it == splits_.end()) {
      std::vector<std::vector<int>> groups(static_cast<std::size_t>(group_count(d, w_)));
      for (std::size_t c = 0; c < groups.size(); ++c) {
        for (int k = 0; k < d.size; ++k) groups[c].push_back(group_member(d, static_cast<int>(c), k));
      }
      it = splits_.emplace(std::pair{d.stride, d.size}, SplitGroups::of(std::move(groups))).first;
    }
    return &it->second;
  }

  // Rank `rank`'s instance of collective `seq`; null when not created (or freed).
  Instance* find(std::int64_t seq, int rank) const { return find(seq, desc_of(seq, rank), rank); }
  // … with the rank's desc of it at hand.
  Instance* find(std::int64_t seq, const CollectiveDesc& desc, int rank) const {
    const Slot& slot = slots_[static_cast<std::size_t>(seq)];
    const auto color = static_cast<std::size_t>(coord(desc, rank).color);
    return color < slot.by_color.size() ? slot.by_color[color].get() : nullptr;
  }

  // Rank `rank`'s instance of collective `seq`, created at the group's first issue.
  // FAILED_PRECONDITION in *mismatch (and null) when the rank's program disagrees with the
  // first rank's on the collective, its group layout included.
  Instance* instance(std::int64_t seq, const CollectiveDesc& desc, int rank, Status* mismatch) {
    Slot& slot = slots_[static_cast<std::size_t>(seq)];
    if (slot.first == nullptr) {
      slot.first = &desc;
      slot.first_rank = rank;
      slot.by_color.resize(static_cast<std::size_t>(group_count(desc, w_)));
    } else if (&desc != slot.first && !(*slot.first == desc)) {  // ranks of one program agree
      *mismatch = Status::failed_precondition("replay: collective mismatch at position #" + std::to_string(seq) +
                                              ": rank " + std::to_string(slot.first_rank) + " issued " +
                                              describe(*slot.first, seq, slot.first_rank) + " but rank " +
                                              std::to_string(rank) + " issued " + describe(desc, seq, rank));
      return nullptr;
    }
    const int color = coord(desc, rank).color;
    auto& in = slot.by_color[static_cast<std::size_t>(color)];
    if (!in) {
      in = std::make_unique<Instance>();
      ++slot.created;
      ++slot.live;
      in->desc = &desc;
      in->seq = seq;
      in->color = color;
      const int size = group_size_of(desc, w_);
      in->ready.assign(static_cast<std::size_t>(size), 0);
      if (!rank_faults_.empty()) in->issued.assign(static_cast<std::size_t>(size), 0);
      if (const std::int32_t u = uniform_waits_[static_cast<std::size_t>(seq)]; u >= 0) {
        in->waits_left = std::int64_t{u} * size;
      } else {
        for (int k = 0; k < size; ++k) {
          const int m = group_member(desc, color, k);
          in->waits_left += waits_[g_.program_index(m)][static_cast<std::size_t>(seq)];
        }
      }
    }
    return in.get();
  }

  // Frees a collective nobody needs any more: timed, every wait passed, no stream tail;
  // and the slot's table once every group's instance came and went.
  void maybe_free(Instance& x) {
    if (!(x.timed && x.waits_left == 0 && x.tail_refs == 0 && x.successors.empty())) return;
    Slot& slot = slots_[static_cast<std::size_t>(x.seq)];
    slot.by_color[static_cast<std::size_t>(x.color)].reset();
    if (--slot.live == 0 && slot.created == static_cast<int>(slot.by_color.size())) {
      slot.by_color.clear();
      slot.by_color.shrink_to_fit();
    }
  }
  // Times `first` when ready, then every successor that becomes ready through it.
  void time_ready(Instance& first) {
    std::vector<Instance*> work{&first};
    while (!work.empty()) {
      Instance& x = *work.back();
      work.pop_back();
      if (x.timed || x.arrived < static_cast<int>(x.ready.size()) || x.waiting_prev > 0) continue;
      CollectiveQuery q;
      q.kind = x.desc->kind;
      if (x.desc->stride == 0) {
        q.world_ranks = world_ranks_;
      } else {  // the group's members: every stride-th rank from its first
        members_.resize(x.ready.size());
        const int first = group_member(*x.desc, x.color, 0);
        for (std::size_t k = 0; k < members_.size(); ++k) members_[k] = first + x.desc->stride * static_cast<int>(k);
        q.world_ranks = members_;
      }
      q.arrivals = x.ready;
      q.bytes = x.desc->bytes;
      q.root = x.desc->root;
      q.split = split_of(*x.desc);
      CollectiveTiming timing = o_.network->collective(q);
      SHARDLAB_CHECK_EQ(timing.done.size(), x.ready.size());
      x.error = timing.status;  // each member fails in its wait (NOTE [Faults in timing mode])
      x.done = std::move(timing.done);
      x.algorithm = std::move(timing.algorithm);
      x.timed = true;
      ++out_.collectives;
      ++out_.events;
      if (x.desc->kind != OpKind::kSplit) {  // as numerics mode, which does not trace splits
        for (auto& [rank, rec] : recorders_) {
          const Coord c = coord(*x.desc, rank);
          if (c.color != x.color) continue;
          const auto k = static_cast<std::size_t>(c.rank);
          rec->add_comm({std::string(runtime::comm::op_kind_name(x.desc->kind)), trace_stream(x.desc->kind), x.ready[k],
                         x.done[k] - x.ready[k], x.desc->bytes, group_name_of(*x.desc, rank), x.algorithm});
        }
      }
      for (const auto& [next, rank] : x.successors) {  // untimed, so not freed
        Nanos& rd = next->ready[static_cast<std::size_t>(coord(*next->desc, rank).rank)];
        rd = std::max(rd, x.done[static_cast<std::size_t>(coord(*x.desc, rank).rank)]);
        if (--next->waiting_prev == 0) work.push_back(next);
      }
      x.successors.clear();
      x.successors.shrink_to_fit();
      for (int r : x.waiters) runnable_->push_back(r);
      x.waiters.clear();
      x.waiters.shrink_to_fit();
      maybe_free(x);  // last: it may free x
    }
  }

  // Trace events for ops [first, first + count) of `p`, back to back from `at`.
  static void trace_ops(TraceRecorder& rec, const RankProgram& p, std::int32_t first, std::int32_t count, Nanos at) {
    for (int k = 0; k < count; ++k) {
      const ComputeOp& op = p.ops[static_cast<std::size_t>(first) + static_cast<std::size_t>(k)];
      TraceEvent e{op.name, kTraceCompute, at, op.duration, -1, {}, {}};
      if (op.shapes >= 0) e.shapes = p.shapes[static_cast<std::size_t>(op.shapes)];
      rec.add_compute(std::move(e));
      at = add_time(at, op.duration);
    }
  }

  // A compute node under a stack other than ideal (NOTE [Host and device timelines]).
  void run_compute(RankState& s, const RankProgram& p, const Node& n, TraceRecorder* rec) const {
    const auto start_device = [&s](Nanos host) {  // when the device may start what the host just handed it
      if (host > s.dev) s.starved = add_time(s.starved, host - s.dev);
      return std::max(host, s.dev);
    };
    if (stack_.execution == StackExecution::kEager) {
      const Nanos host_begin = s.t;
      for (int k = 0; k < n.count; ++k) {
        const ComputeOp& op = p.ops[static_cast<std::size_t>(n.index) + static_cast<std::size_t>(k)];
        s.t = add_time(s.t, stack_.op_dispatch_ns);
        const Nanos at = start_device(s.t);
        if (rec != nullptr) trace_ops(*rec, p, n.index + k, 1, at);
        s.dev = add_time(at, op.duration);
        if (!stack_.host_device_overlap) s.t = s.dev;
      }
      if (rec != nullptr && stack_.op_dispatch_ns > 0) {
        rec->add_compute({"dispatch", kTraceHost, host_begin, s.t - host_begin});
      }
      return;
    }
    // lazy, compiled: the node is one graph.
    const Nanos record = static_cast<Nanos>(n.count) * stack_.op_dispatch_ns;
    if (rec != nullptr && record > 0) rec->add_compute({"record_graph", kTraceHost, s.t, record});
    s.t = add_time(s.t, record);
    if (rec != nullptr && stack_.graph_launch_ns > 0)
      rec->add_compute({"launch_graph", kTraceHost, s.t, stack_.graph_launch_ns});
    s.t = add_time(s.t, stack_.graph_launch_ns);
    const Nanos at = start_device(s.t);
    if (rec != nullptr) trace_ops(*rec, p, n.index, n.count, at);
    s.dev = add_time(at, n.duration);
    if (!stack_.host_device_overlap) s.t = s.dev;
  }

  Status run_rank(int r) {
    RankState& s = state_[static_cast<std::size_t>(r)];
    const RankProgram& p = g_.program(r);
    const bool traced = traced_[static_cast<std::size_t>(r)] != 0;
    RankTiming& timing = out_.ranks[static_cast<std::size_t>(r)];
    std::int64_t executed = 0;
    while (s.pc < p.nodes.size()) {
      const Node& n = p.nodes[s.pc];
      switch (n.kind) {
        case NodeKind::kCompute:
          if (!stack_.ideal()) {
            run_compute(s, p, n, traced ? recorders_[r].get() : nullptr);
            break;
          }
          if (traced) trace_ops(*recorders_[r], p, n.index, n.count, s.t);
          s.t = add_time(s.t, n.duration);  // NOTE [Virtual time limit] in sim/models/device/cost_model.h
          break;
        case NodeKind::kIssue: {
          const CollectiveDesc& desc = p.collectives[static_cast<std::size_t>(n.index)];
          if (const Fault* f = rank_faults_.empty() ? nullptr : due_stop(r, -1, s.t)) {
            stop(r, stopped_rank_status(
                        *f, fault_where(r, s.step),
                        "at " + fault_ms(s.t) + " before its " + std::string(runtime::comm::op_kind_name(desc.kind)),
                        w_ > 1));
            out_.events += executed;
            return Status::ok();
          }
          if (!rank_faults_.empty() && has_payload(desc, r)) {
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
          Instance* issued = instance(n.index, desc, r, &mismatch);
          if (issued == nullptr) return mismatch;
          Instance& in = *issued;
          const auto k = static_cast<std::size_t>(coord(desc, r).rank);
          // NOTE [Host and device timelines]; a split is the runtime's set-up, not an FSDP hook.
          if (!stack_.ideal() && desc.kind != OpKind::kSplit) {
            if (traced && stack_.fsdp_hook_ns > 0) {
              recorders_[r]->add_compute({"fsdp_hook", kTraceHost, s.t, stack_.fsdp_hook_ns});
            }
            s.t = add_time(s.t, stack_.fsdp_hook_ns);
            // A device that finished its work before the host got here waited for the host;
            // moving its time up to the host's changes no start time (every later op and
            // this collective start at or after the host's time anyway).
            if (s.t > s.dev) {
              s.starved = add_time(s.starved, s.t - s.dev);
              s.dev = s.t;
            }
          }
          Nanos ready = std::max(s.t, s.dev);
          const int stream = comm_stream(desc.kind);
          if (stream >= 0) {
            std::int64_t& tail = s.tail[static_cast<std::size_t>(stream)];
            if (tail >= 0) {
              Instance& prev = *find(tail, p.collectives[static_cast<std::size_t>(tail)], r);
              if (prev.timed) {
                ready = std::max(ready, prev.done[static_cast<std::size_t>(coord(*prev.desc, r).rank)]);
              } else {
                ++in.waiting_prev;
                prev.successors.emplace_back(&in, r);
              }
              --prev.tail_refs;
              maybe_free(prev);
            }
            tail = n.index;
            ++in.tail_refs;
          }
          in.ready[k] = ready;
          if (!in.issued.empty()) in.issued[k] = 1;
          if (++in.arrived == static_cast<int>(in.ready.size())) time_ready(in);
          break;
        }
        case NodeKind::kWait: {
          Instance& in = *find(n.index, p.collectives[static_cast<std::size_t>(n.index)], r);
          if (!in.timed) {
            in.waiters.push_back(r);
            out_.events += executed;
            return Status::ok();
          }
          Nanos done = in.done[static_cast<std::size_t>(coord(*in.desc, r).rank)];
          if (o_.network->host_progress() && in.error.is_ok()) {  // NOTE [Host-progressed collectives]
            const Nanos last_ready = *std::max_element(in.ready.begin(), in.ready.end());
            done = std::max(done, add_time(std::max(s.t, s.dev), std::max<Nanos>(0, done - last_ready)));
          }
          if (!in.error.is_ok()) {  // as SimCommunicator fails every member's wait
            stop(r, Status(in.error.code(), fault_context(fault_where(r, s.step), fault_what(p, n.index, r),
                                                          in.error.message(), injected_)));
            out_.events += executed;
            return Status::ok();
          }
          if (done > add_time(s.t, o_.collective_timeout)) {  // as SimCommunicator's wait times out
            stop(r, timeout_status(r, p, n.index, "it completed only at " + format_seconds(done)));
            out_.events += executed;
            return Status::ok();
          }
          if (stack_.ideal() || !stack_.host_device_overlap) s.t = std::max(s.t, done);
          if (!stack_.ideal()) s.dev = std::max(s.dev, done);  // the compute stream waits
          --in.waits_left;
          maybe_free(in);
          if (n.index == s.corrupt_seq) {
            stop(r, integrity_failure_status(*s.corrupt, fault_where(r, s.step), fault_what(p, n.index, r)));
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
                stop(r, stopped_rank_status(*f, fault_where(r, s.step),
                                            "at the top of step " + std::to_string(m.step + 1), w_ > 1));
                out_.events += executed;
                return Status::ok();
              }
              timing.step_starts.push_back(std::max(s.t, s.dev));
              s.starved = 0;
              break;
            case TrainMarker::kStepEnd:
              timing.step_times.push_back(std::max(s.t, s.dev) -
                                          (timing.step_starts.empty() ? 0 : timing.step_starts.back()));
              timing.host_bound.push_back(s.starved);
              break;
            case TrainMarker::kMemorySample:
              if (traced) {
                runtime::train::MemorySample sample = p.memory_samples[static_cast<std::size_t>(m.sample)];
                sample.time = std::max(s.t, s.dev);
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
  const SoftwareStack& stack_;
  const int w_;
  std::vector<std::vector<std::int32_t>> waits_;  // per program and collective: wait nodes
  std::vector<std::int32_t> uniform_waits_;       // per collective: the programs' common count, or -1
  std::vector<Slot> slots_;                       // per collective
  std::vector<RankState> state_;
  std::vector<int> world_ranks_;
  std::vector<Coord> coords_;  // per split and rank (coord())
  std::vector<int> members_;   // scratch: a split group's members, for its network query
  // NOTE [Concurrent groups] in sim/models/network/network.h: every group of a split
  // layout, by (stride, size), built once when the network model prices them.
  std::map<std::pair<int, int>, SplitGroups> splits_;
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
