#include "sim/timing/capture.h"

#include <map>
#include <memory>

#include "sim/engine/trace.h"
#include "sim/engine/virtual_clock.h"
#include "sim/models/device/device.h"
#include "sim/models/device/profiles.h"

namespace shardlab::sim::timing {

namespace {

using runtime::comm::OpKind;
using runtime::comm::ReduceOp;
using runtime::comm::WorkPtr;

// What happened on the host between device ops, in order, on the capture clock.
struct HostEvent {
  NodeKind kind;
  int index;  // collective or marker
  Nanos time;
};

struct Recording {
  const VirtualClock* clock = nullptr;
  std::vector<HostEvent> events;
  std::vector<CollectiveDesc> collectives;
  std::vector<Marker> markers;
  int samples = 0;
  void add(NodeKind kind, int index) { events.push_back({kind, index, clock->now()}); }
};

// A capture Work: its wait is recorded (the replay decides how long it blocks).
class CaptureWork final : public runtime::comm::Work {
 public:
  CaptureWork(Recording* rec, int index) : rec_(rec), index_(index) {}
  Status wait(Nanos) override {
    rec_->add(NodeKind::kWait, index_);
    return Status::ok();
  }
  bool is_completed() override { return true; }

 private:
  Recording* rec_;
  int index_;
};

// The capturing Communicator: rank `rank` of a world of `size`, or of one of its
// split_strided groups (NOTE [Groups in timing mode] in op_graph.h); every collective is
// validated as on other backends, recorded, and complete at once with no data moved.
class CaptureCommunicator final : public runtime::comm::Communicator {
 public:
  CaptureCommunicator(Recording* rec, int rank, int size) : rec_(rec), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& group_name() const override { return name_; }

  WorkPtr all_gather_into(const Tensor& output, const Tensor& input) override {
    if (Status s = runtime::comm::validate_all_gather(*this, output, input); !s.is_ok())
      return runtime::comm::completed_work(s);
    return issue(OpKind::kAllGather, input.dtype(), input.numel(), ReduceOp::kSum, 0);
  }
  WorkPtr reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) override {
    if (Status s = runtime::comm::validate_reduce_scatter(*this, output, input, op); !s.is_ok()) {
      return runtime::comm::completed_work(s);
    }
    return issue(OpKind::kReduceScatter, input.dtype(), output.numel(), op, 0);
  }
  WorkPtr all_reduce(const Tensor& inout, ReduceOp op) override {
    if (Status s = runtime::comm::validate_all_reduce(*this, inout, op); !s.is_ok())
      return runtime::comm::completed_work(s);
    return issue(OpKind::kAllReduce, inout.dtype(), inout.numel(), op, 0);
  }
  WorkPtr broadcast(const Tensor& inout, int root) override {
    if (Status s = runtime::comm::validate_broadcast(*this, inout, root); !s.is_ok())
      return runtime::comm::completed_work(s);
    return issue(OpKind::kBroadcast, inout.dtype(), inout.numel(), ReduceOp::kSum, root);
  }
  WorkPtr barrier() override { return issue(OpKind::kBarrier, DType::kI64, 0, ReduceOp::kSum, 0); }
  WorkPtr send(const Tensor&, int, int) override { return runtime::comm::completed_work(unsupported("send")); }
  WorkPtr recv(const Tensor&, int, int) override { return runtime::comm::completed_work(unsupported("recv")); }
  Result<std::unique_ptr<runtime::comm::Communicator>> split(int, int) override {
    return unsupported("a communicator split by color and key (only split_strided groups, as HYBRID_SHARD makes)");
  }
  // NOTE [Groups in timing mode]: the split is a collective of the world group; the new
  // group is known on every rank from its layout.
  Result<std::unique_ptr<runtime::comm::Communicator>> split_strided(int stride, int size) override {
    if (stride_ != 0) return unsupported("a split of a split group");
    SHARDLAB_RETURN_IF_ERROR(runtime::comm::validate_strided(size_, stride, size));
    SHARDLAB_RETURN_IF_ERROR(
        issue(OpKind::kSplit, DType::kI64, 0, ReduceOp::kSum, 0)->wait(runtime::comm::kDefaultTimeout));
    auto group = std::make_unique<CaptureCommunicator>(rec_, runtime::comm::strided_key(rank_, stride, size), size);
    group->stride_ = stride;
    group->split_ = ++splits_;
    group->name_ = "world/split" + std::to_string(group->split_);
    return std::unique_ptr<runtime::comm::Communicator>(std::move(group));
  }

 private:
  static Status unsupported(const std::string& what) {
    return Status::invalid_argument("timing mode cannot capture " + what +
                                    " yet; run this scenario in numerics mode (world.mode: numerics)");
  }
  WorkPtr issue(OpKind kind, DType dtype, std::int64_t count, ReduceOp op, int root) {
    CollectiveDesc d;
    d.kind = kind;
    d.group = name_;
    if (stride_ != 0) {
      d.stride = stride_;
      d.size = size_;
      d.split = split_;
    }
    d.dtype = dtype;
    d.count = count;
    d.bytes = count * static_cast<std::int64_t>(element_size(dtype));
    d.op = op;
    d.root = root;
    const int index = static_cast<int>(rec_->collectives.size());
    rec_->collectives.push_back(d);
    rec_->add(NodeKind::kIssue, index);
    return std::make_shared<CaptureWork>(rec_, index);
  }

  Recording* rec_;
  int rank_, size_;
  std::string name_ = "world";
  int stride_ = 0, split_ = 0;  // a split group's layout (NOTE [Groups in timing mode]); 0: the world
  int splits_ = 0;              // the world's splits so far
};

// Interleaves the device ops (from the trace, in start order) with the host events: an op
// that started before an event's time ran before it. Device ops have positive durations
// (launch overhead), so an op starting exactly at an event's time ran after it.
RankProgram build_program(const Recording& rec, const std::vector<TraceEvent>& trace) {
  RankProgram p;
  p.collectives = rec.collectives;
  p.markers = rec.markers;
  std::size_t next = 0;
  Nanos expected = trace.empty() ? 0 : trace.front().start;
  std::map<std::vector<std::vector<std::int64_t>>, std::int32_t> shape_ids;
  auto flush = [&](Nanos before, bool all) {
    Node n;
    n.kind = NodeKind::kCompute;
    n.index = static_cast<std::int32_t>(p.ops.size());
    while (next < trace.size() && (all || trace[next].start < before)) {
      const TraceEvent& e = trace[next++];
      // Ops run back to back on the capture clock: only ops advance it.
      SHARDLAB_CHECK_EQ(e.start, expected);
      expected = e.start + e.duration;
      std::int32_t shapes = -1;
      if (!e.shapes.empty()) {
        auto it = shape_ids.find(e.shapes);
        if (it == shape_ids.end()) {
          it = shape_ids.emplace(e.shapes, static_cast<std::int32_t>(p.shapes.size())).first;
          p.shapes.push_back(e.shapes);
        }
        shapes = it->second;
      }
      p.ops.push_back({e.name, e.duration, shapes});
      ++n.count;
      n.duration += e.duration;
    }
    if (n.count > 0) p.nodes.push_back(n);
  };
  for (const HostEvent& e : rec.events) {
    flush(e.time, false);
    Node n;
    n.kind = e.kind;
    n.index = e.index;
    p.nodes.push_back(n);
  }
  flush(0, true);
  return p;
}

std::string describe_collective(const CollectiveDesc& d) {
  return std::string(runtime::comm::op_kind_name(d.kind)) + " of " + std::to_string(d.bytes) + " bytes in group " +
         d.group;
}

// The first difference between a and b in what drives a replay besides compute —
// collectives in order, markers, the order of issues, waits and markers — in words
// ("collective 12: …"); empty when there is none.
std::string order_difference(const RankProgram& a, const RankProgram& b) {
  const std::size_t nc = std::min(a.collectives.size(), b.collectives.size());
  for (std::size_t i = 0; i < nc; ++i) {
    if (!(a.collectives[i] == b.collectives[i])) {
      return "collective " + std::to_string(i) + ": " + describe_collective(a.collectives[i]) + " vs " +
             describe_collective(b.collectives[i]);
    }
  }
  if (a.collectives.size() != b.collectives.size()) {
    return std::to_string(a.collectives.size()) + " vs " + std::to_string(b.collectives.size()) + " collectives";
  }
  if (a.markers != b.markers) return "their step and memory-sample markers differ";
  std::vector<Node> x, y;  // the nodes without compute
  for (const Node& n : a.nodes) {
    if (n.kind != NodeKind::kCompute) x.push_back(n);
  }
  for (const Node& n : b.nodes) {
    if (n.kind != NodeKind::kCompute) y.push_back(n);
  }
  if (x != y) return "the order of their collectives' issues and waits differs";
  return "";
}

// The first difference between a's and b's memory peaks and samples, in words; empty when
// there is none.
std::string memory_difference(const RankProgram& a, const RankProgram& b) {
  for (std::size_t c = 0; c < static_cast<std::size_t>(kNumMemoryCategories); ++c) {
    if (a.memory.peak[c] != b.memory.peak[c]) {
      return "peak " + std::string(category_name(static_cast<MemoryCategory>(c))) + " " +
             std::to_string(a.memory.peak[c]) + " vs " + std::to_string(b.memory.peak[c]) + " bytes";
    }
  }
  if (a.memory_samples.size() != b.memory_samples.size()) {
    return std::to_string(a.memory_samples.size()) + " vs " + std::to_string(b.memory_samples.size()) +
           " memory samples";
  }
  for (std::size_t i = 0; i < a.memory_samples.size(); ++i) {
    const auto& x = a.memory_samples[i];
    const auto& y = b.memory_samples[i];
    if (x.event != y.event) return "memory sample " + std::to_string(i) + ": " + x.event + " vs " + y.event;
    for (std::size_t c = 0; c < static_cast<std::size_t>(kNumMemoryCategories); ++c) {
      if (x.bytes[c] != y.bytes[c]) {
        return "memory sample " + std::to_string(i) + " (" + x.event + ", step " + std::to_string(x.step) +
               "): " + std::string(category_name(static_cast<MemoryCategory>(c))) + " " + std::to_string(x.bytes[c]) +
               " vs " + std::to_string(y.bytes[c]) + " bytes";
      }
    }
  }
  return "";
}

}  // namespace

Result<RankProgram> capture_rank(const runtime::train::FsdpTrainOptions& in, int world_size, int rank,
                                 const DeviceProfile& device, const CaptureOptions& capture) {
  if (!in.checkpoint.dir.empty()) {
    return Status::invalid_argument(
        "timing mode does not write or load checkpoints (phantom tensors have no values); "
        "remove the checkpoint section or run in numerics mode");
  }
  if (in.fsdp.offload_device != nullptr) {
    return Status::invalid_argument(
        "capture: fsdp.offload_device must be null (the capture makes the rank's host itself; set "
        "CaptureOptions::cpu_offload)");
  }
  if (rank < 0 || rank >= world_size) {
    return Status::invalid_argument("capture: rank " + std::to_string(rank) + " outside a world of " +
                                    std::to_string(world_size));
  }
  VirtualClock clock;
  TraceRecorder trace;
  const double slow = capture.slowdown_of(rank);
  SimDevice dev(rank, slow == 1.0 ? device : device.slowed_by(slow), &clock);
  dev.set_timing_mode(true);
  dev.set_trace(&trace);
  dev.set_graph_compiler(capture.stack);
  // As the numerics World does for the same run (NOTE [Emulated low precision]).
  if (in.model_kind == runtime::train::ModelKind::kBert && in.bert.compute_dtype == DType::kBF16) {
    dev.set_emulated_dtype(DType::kBF16);
  }
  // CPU offload's host as numerics mode makes it (cli/run_command.cc): a SimDevice on the
  // rank's clock and trace, here with phantom tensors too; its ops join the compute segments.
  SimDevice host({"host", rank}, capture.offload_host, &clock);
  host.set_timing_mode(true);
  host.set_trace(&trace);
  Recording rec;
  rec.clock = &clock;
  CaptureCommunicator comm(&rec, rank, world_size);
  runtime::train::FsdpTrainOptions o = in;
  if (capture.cpu_offload) o.fsdp.offload_device = &host;
  o.record_memory_timeline = true;
  o.gather_results = false;  // no values to gather; and not part of training
  o.on_step = nullptr;
  o.on_marker = [&rec](runtime::train::TrainMarker kind, int step) {
    Marker m;
    m.kind = kind;
    m.step = step;
    if (kind == runtime::train::TrainMarker::kMemorySample) m.sample = rec.samples++;
    rec.markers.push_back(m);
    rec.add(NodeKind::kMarker, static_cast<int>(rec.markers.size()) - 1);
  };
  SHARDLAB_ASSIGN_OR_RETURN(runtime::train::FsdpTrainResult result, runtime::train::train_fsdp(comm, dev, clock, o));
  RankProgram p = build_program(rec, trace.events());
  p.memory_samples = std::move(result.memory_timeline);
  SHARDLAB_CHECK_EQ(static_cast<int>(p.memory_samples.size()), rec.samples);
  for (auto& s : p.memory_samples) s.time = 0;  // replaced by the replay
  p.memory = result.memory;
  p.num_units = result.num_units;
  p.num_trainable_units = result.num_trainable_units;
  p.max_live_unsharded = result.max_live_unsharded;
  p.counts = std::move(result.counts);
  return p;
}

double CaptureOptions::slowdown_of(int rank) const {
  return rank >= 0 && rank < static_cast<int>(slowdown.size()) ? slowdown[static_cast<std::size_t>(rank)] : 1.0;
}

namespace {

// The index of `p` in g.programs, added if no program there is the same.
int program_index(OpGraph& g, RankProgram p) {
  for (std::size_t k = 0; k < g.programs.size(); ++k) {
    if (g.programs[k].same_program(p)) return static_cast<int>(k);
  }
  g.programs.push_back(std::move(p));
  return static_cast<int>(g.programs.size()) - 1;
}

// Every rank at full speed (see capture_graph).
Result<OpGraph> capture_full_speed(const runtime::train::FsdpTrainOptions& options, int world_size,
                                   const DeviceProfile& device, const CaptureOptions& capture) {
  OpGraph g;
  g.world_size = world_size;
  g.steps = options.steps;
  SHARDLAB_ASSIGN_OR_RETURN(RankProgram first, capture_rank(options, world_size, 0, device, capture));
  if (world_size == 1) {
    g.programs.push_back(std::move(first));
    return g;
  }
  SHARDLAB_ASSIGN_OR_RETURN(RankProgram last, capture_rank(options, world_size, world_size - 1, device, capture));
  if (first.same_program(last)) {
    g.programs.push_back(std::move(first));
    return g;
  }
  if (world_size > kMaxPerRankCaptureWorld) {
    const std::string difference = order_difference(first, last);
    if (difference.empty()) {
      g.approximation = "ranks 1-" + std::to_string(world_size - 2) +
                        " replay rank 0's program (their compute differs slightly: shard pieces, data)";
      // Data-dependent shapes (a masked-LM batch that masks more than NOTE [Static
      // masked-LM shape] pads to) change a rank's activations too: said, not hidden.
      if (const std::string m = memory_difference(first, last); !m.empty()) {
        g.approximation += "; their memory differs as well (rank 0 vs rank " + std::to_string(world_size - 1) + ": " +
                           m + "), and ranks 1-" + std::to_string(world_size - 2) + " report rank 0's";
      }
      g.programs.push_back(std::move(first));
      g.programs.push_back(std::move(last));
      g.program_of_rank.assign(static_cast<std::size_t>(world_size), 0);
      g.program_of_rank.back() = 1;
      return g;
    }
    return Status::failed_precondition(
        "timing mode: rank 0 and rank " + std::to_string(world_size - 1) + " run different programs (" + difference +
        "); capturing every rank is limited to worlds of " + std::to_string(kMaxPerRankCaptureWorld) + " ranks");
  }
  g.programs.push_back(std::move(first));
  g.program_of_rank.assign(static_cast<std::size_t>(world_size), 0);
  for (int r = 1; r < world_size - 1; ++r) {
    SHARDLAB_ASSIGN_OR_RETURN(RankProgram p, capture_rank(options, world_size, r, device, capture));
    g.program_of_rank[static_cast<std::size_t>(r)] = program_index(g, std::move(p));
  }
  g.program_of_rank.back() = program_index(g, std::move(last));
  return g;
}

}  // namespace

Result<OpGraph> capture_graph(const runtime::train::FsdpTrainOptions& options, int world_size,
                              const DeviceProfile& device, const CaptureOptions& capture) {
  if (world_size < 1) return Status::invalid_argument("world size " + std::to_string(world_size) + " must be >= 1");
  CaptureOptions full = capture;
  full.slowdown.clear();
  SHARDLAB_ASSIGN_OR_RETURN(OpGraph g, capture_full_speed(options, world_size, device, full));
  for (int r = 0; r < world_size && r < static_cast<int>(capture.slowdown.size()); ++r) {
    if (capture.slowdown_of(r) == 1.0) continue;
    SHARDLAB_ASSIGN_OR_RETURN(RankProgram p, capture_rank(options, world_size, r, device, capture));
    if (g.program_of_rank.empty()) g.program_of_rank.assign(static_cast<std::size_t>(world_size), 0);
    g.program_of_rank[static_cast<std::size_t>(r)] = program_index(g, std::move(p));
  }
  // A full-speed program only stragglers had (rank W-1's, when it is one) is dropped.
  if (!g.program_of_rank.empty()) {
    std::vector<int> index(g.programs.size(), -1);
    for (int k : g.program_of_rank) index[static_cast<std::size_t>(k)] = 0;
    std::vector<RankProgram> kept;
    for (std::size_t k = 0; k < g.programs.size(); ++k) {
      if (index[k] < 0) continue;
      index[k] = static_cast<int>(kept.size());
      kept.push_back(std::move(g.programs[k]));
    }
    for (int& k : g.program_of_rank) k = index[static_cast<std::size_t>(k)];
    g.programs = std::move(kept);
  }
  return g;
}

}  // namespace shardlab::sim::timing
