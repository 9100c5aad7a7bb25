#include "sim/faults/faults.h"

#include <cstdio>
#include <cstring>
#include <limits>

#include "runtime/core/check.h"
#include "runtime/core/rng.h"

namespace shardlab::sim {

using runtime::comm::Communicator;
using runtime::comm::ReduceOp;
using runtime::comm::Work;
using runtime::comm::WorkPtr;

std::string_view fault_kind_name(FaultKind k) {
  switch (k) {
    case FaultKind::kCrash: return "crash";
    case FaultKind::kHang: return "hang";
    case FaultKind::kStraggler: return "straggler";
    case FaultKind::kCorrupt: return "corrupt";
    case FaultKind::kLinkDown: return "link_down";
    case FaultKind::kLinkDegrade: return "link_degrade";
    case FaultKind::kViewOffset: return "view_offset";
  }
  return "?";
}

Result<FaultKind> parse_fault_kind(std::string_view name) {
  for (FaultKind k : {FaultKind::kCrash, FaultKind::kHang, FaultKind::kStraggler, FaultKind::kCorrupt,
                      FaultKind::kLinkDown, FaultKind::kLinkDegrade, FaultKind::kViewOffset}) {
    if (name == fault_kind_name(k)) return k;
  }
  if (name == "link_degraded") return FaultKind::kLinkDegrade;
  return Status::invalid_argument("unknown fault kind '" + std::string(name) +
                                  "'; allowed: crash, hang, straggler, corrupt, link_down, link_degrade, view_offset");
}

std::string fault_ms(Nanos t) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.6g ms", static_cast<double>(t) / 1e6);
  return buf;
}

std::string fault_collective(std::string_view op, const std::string& group, std::int64_t payload_index) {
  std::string s = std::string(op) + " in group '" + group + "'";
  if (payload_index >= 0) s += " (the rank's collective #" + std::to_string(payload_index) + ")";
  return s;
}

std::string fault_context(const std::string& where, const std::string& what, const std::string& message,
                          const std::string& injected) {
  std::string m = where + ": " + what + ": " + message;
  if (!injected.empty()) m += " [injected faults: " + injected + "]";
  return m;
}

std::string fault_where(int world_rank, int step) {
  return "rank " + std::to_string(world_rank) + (step >= 0 ? ", step " + std::to_string(step + 1) : std::string());
}

Status stopped_rank_status(const Fault& f, const std::string& where, const std::string& point, bool released) {
  if (f.kind == FaultKind::kCrash)
    return Status::unavailable(where + ": crashed " + point + " — injected " + f.describe());
  return Status::unavailable(where + ": hung " + point + " — injected " + f.describe() +
                             (released ? "; released when the other ranks were done" : ""));
}

Status integrity_failure_status(const Fault& f, const std::string& where, const std::string& what) {
  return Status::data_loss(where + ": " + what +
                           ": the received payload failed its integrity check (checksum mismatch); injected by " +
                           f.describe());
}

std::string Fault::describe() const {
  std::string s(fault_kind_name(kind));
  switch (kind) {
    case FaultKind::kCrash:
    case FaultKind::kHang:
      s += " of rank " + std::to_string(rank);
      if (step >= 0) s += " at step " + std::to_string(step + 1);  // shown 1-based, like the step table
      if (time >= 0) s += std::string(step >= 0 ? " or" : "") + " at " + fault_ms(time);
      break;
    case FaultKind::kStraggler: {
      char buf[64];
      std::snprintf(buf, sizeof buf, " rank %d (%.4g× slower)", rank, factor);
      s += buf;
      break;
    }
    case FaultKind::kCorrupt:
      s += " of rank " + std::to_string(rank) + "'s collective #" + std::to_string(collective) +
           (integrity_check ? " (integrity check on)" : "");
      break;
    case FaultKind::kViewOffset:
      s += " of rank " + std::to_string(rank) + "'s unit " + std::to_string(unit) + " at step " +
           std::to_string(step + 1) + " (byte offset " + std::to_string(byte_offset) + ")";
      break;
    case FaultKind::kLinkDown:
    case FaultKind::kLinkDegrade: {
      char buf[96];
      s += " of link " + link;
      if (kind == FaultKind::kLinkDegrade) {
        std::snprintf(buf, sizeof buf, " to %.4g× bandwidth", factor);
        s += buf;
      }
      if (time >= 0) s += " from " + fault_ms(time);
      break;
    }
  }
  if (!origin.empty()) s += " (" + origin + ")";
  return s;
}

double FaultPlan::slowdown(int rank) const {
  double f = 1.0;
  for (const Fault& x : faults)
    if (x.kind == FaultKind::kStraggler && x.rank == rank) f *= x.factor;
  return f;
}

bool FaultPlan::has_rank_faults(int rank) const {
  for (const Fault& x : faults) {
    if (x.rank == rank && (x.kind == FaultKind::kCrash || x.kind == FaultKind::kHang || x.kind == FaultKind::kCorrupt ||
                           x.kind == FaultKind::kViewOffset)) {
      return true;
    }
  }
  return false;
}

const Fault* FaultPlan::view_fault(int rank) const {
  for (const Fault& x : faults)
    if (x.kind == FaultKind::kViewOffset && x.rank == rank) return &x;
  return nullptr;
}

std::string FaultPlan::describe() const {
  std::string s;
  for (const Fault& f : faults) s += (s.empty() ? "" : "; ") + f.describe();
  return s;
}

struct FaultInjector::State {
  std::shared_ptr<const FaultPlan> plan;
  int world_rank = 0;
  const Clock* clock = nullptr;
  Communicator* world = nullptr;  // the rank's world communicator (hangs wait on it)
  int step = -1;                  // the step being run (-1: before the first)
  std::int64_t payload_collectives = 0;
  bool stopped = false;              // crashed or hung: nothing more is issued
  std::shared_ptr<Storage> scratch;  // the receive buffer of a hang

  std::string where() const { return fault_where(world_rank, step); }
};

namespace {

// A Work whose errors say where they happened and which faults were injected; when the
// collective is the rank's corrupt target, it flips a bit of the received payload (or,
// with the integrity check, fails instead) once the data is there.
class FaultWork final : public Work {
 public:
  FaultWork(WorkPtr inner, std::string what, std::shared_ptr<FaultInjector::State> state, const Fault* corrupt,
            Tensor received, std::int64_t skip_begin, std::int64_t skip_len)
      : inner_(std::move(inner)),
        what_(std::move(what)),
        state_(std::move(state)),
        corrupt_(corrupt),
        received_(std::move(received)),
        skip_begin_(skip_begin),
        skip_len_(skip_len) {}

  Status wait(Nanos timeout) override {
    Status s = inner_->wait(timeout);
    if (!s.is_ok()) return annotate(s);
    if (corrupt_ != nullptr && !applied_) {
      applied_ = true;
      if (corrupt_->integrity_check) return integrity_failure_status(*corrupt_, state_->where(), what_);
      flip();
    }
    return s;
  }

  bool is_completed() override { return inner_->is_completed(); }
  Status issue_error() override {
    Status s = inner_->issue_error();
    return s.is_ok() ? s : annotate(s);
  }

 private:
  Status annotate(const Status& s) const {
    return Status(s.code(), fault_context(state_->where(), what_, s.message(), state_->plan->describe()));
  }

  // Flips the top exponent bit of one received element (chosen by the seed).
  void flip() {
    const std::int64_t n = received_.numel() - skip_len_;
    if (n <= 0) return;
    Rng rng = Rng(state_->plan->seed).split(0xFA017).split(static_cast<std::uint64_t>(state_->world_rank));
    std::int64_t i = static_cast<std::int64_t>(rng.uniform_int(static_cast<std::uint64_t>(n)));
    if (i >= skip_begin_) i += skip_len_;
    const std::size_t es = element_size(received_.dtype());
    std::byte* p = received_.bytes() + static_cast<std::size_t>(i) * es;
    const int bit = received_.dtype() == DType::kF32 ? 30 : received_.dtype() == DType::kI64 ? 62 : 14;
    p[bit / 8] ^= static_cast<std::byte>(1u << (bit % 8));  // little-endian element bytes
  }

  WorkPtr inner_;
  std::string what_;
  std::shared_ptr<FaultInjector::State> state_;
  const Fault* corrupt_;
  Tensor received_;
  std::int64_t skip_begin_, skip_len_;  // elements the rank sent itself (all_gather): not corrupted
  bool applied_ = false;
};

std::shared_ptr<Storage> host_bytes(std::int64_t nbytes) {
  auto* p = new std::byte[static_cast<std::size_t>(nbytes)]();
  return std::make_shared<Storage>(p, reinterpret_cast<std::uint64_t>(p), nbytes, MemoryCategory::kCommBuffers,
                                   "hang receive buffer", "host", [p](Storage&) { delete[] p; });
}

constexpr int kHangTag = 0x7FFFF00D;

}  // namespace

FaultInjector::FaultInjector(Communicator* inner, std::shared_ptr<const FaultPlan> plan, int world_rank,
                             const Clock* clock)
    : ForwardingCommunicator(inner), state_(std::make_shared<State>()) {
  SHARDLAB_CHECK(inner != nullptr && plan != nullptr && clock != nullptr);
  state_->plan = std::move(plan);
  state_->world_rank = world_rank;
  state_->clock = clock;
  state_->world = inner;
}

FaultInjector::FaultInjector(std::unique_ptr<Communicator> owned, std::shared_ptr<State> state)
    : ForwardingCommunicator(std::move(owned)), state_(std::move(state)) {}

FaultInjector::~FaultInjector() = default;

Status FaultInjector::stop(const Fault& f, const char* where) {
  state_->stopped = true;
  bool released = false;
  // Hang: stop answering. Block on a message nobody sends; the simulator releases this
  // wait (as a timeout) only when every other rank is done or blocked for good.
  Communicator& world = *state_->world;
  if (f.kind == FaultKind::kHang && world.size() > 1) {
    if (!state_->scratch) state_->scratch = host_bytes(sizeof(float));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor t, Tensor::view_of(state_->scratch, DType::kF32, {1}, 0, "hang"));
    const int peer = (world.rank() + 1) % world.size();
    released = !world.recv(t, peer, kHangTag)->wait(std::numeric_limits<Nanos>::max()).is_ok();
  }
  return stopped_rank_status(f, state_->where(), where, released);
}

Status FaultInjector::before_step(int step) {
  state_->step = step;
  for (const Fault& f : state_->plan->faults) {
    if (f.rank == state_->world_rank && (f.kind == FaultKind::kCrash || f.kind == FaultKind::kHang) && f.step >= 0 &&
        step >= f.step) {
      return stop(f, ("at the top of step " + std::to_string(step + 1)).c_str());
    }
  }
  return Status::ok();
}

Status FaultInjector::before_collective(const char* op) {
  if (state_->stopped)
    return Status::unavailable(state_->where() + ": " + op + " after the rank stopped (injected fault)");
  const Nanos now = state_->clock->now();
  for (const Fault& f : state_->plan->faults) {
    if (f.rank == state_->world_rank && (f.kind == FaultKind::kCrash || f.kind == FaultKind::kHang) && f.time >= 0 &&
        now >= f.time) {
      return stop(f, ("at " + fault_ms(now) + " before its " + std::string(op)).c_str());
    }
  }
  return Status::ok();
}

WorkPtr FaultInjector::finish(const char* op, const Tensor& received, bool has_payload, WorkPtr work) {
  const Fault* corrupt = nullptr;
  std::int64_t skip_begin = 0, skip_len = 0;
  const std::int64_t index = has_payload ? state_->payload_collectives++ : -1;
  std::string what = fault_collective(op, inner()->group_name(), index);
  if (has_payload) {
    for (const Fault& f : state_->plan->faults) {
      if (f.kind == FaultKind::kCorrupt && f.rank == state_->world_rank && f.collective == index) corrupt = &f;
    }
    if (corrupt != nullptr && std::strcmp(op, "all_gather") == 0 && inner()->size() > 1) {
      skip_len = received.numel() / inner()->size();  // the rank's own chunk is not received
      skip_begin = skip_len * inner()->rank();
    }
  }
  return std::make_shared<FaultWork>(std::move(work), std::move(what), state_, corrupt, received, skip_begin, skip_len);
}

WorkPtr FaultInjector::all_gather_into(const Tensor& output, const Tensor& input) {
  if (Status s = before_collective("all_gather"); !s.is_ok()) return runtime::comm::completed_work(s);
  return finish("all_gather", output, true, inner()->all_gather_into(output, input));
}

WorkPtr FaultInjector::reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) {
  if (Status s = before_collective("reduce_scatter"); !s.is_ok()) return runtime::comm::completed_work(s);
  return finish("reduce_scatter", output, true, inner()->reduce_scatter(output, input, op));
}

WorkPtr FaultInjector::all_reduce(const Tensor& inout, ReduceOp op) {
  if (Status s = before_collective("all_reduce"); !s.is_ok()) return runtime::comm::completed_work(s);
  return finish("all_reduce", inout, true, inner()->all_reduce(inout, op));
}

WorkPtr FaultInjector::broadcast(const Tensor& inout, int root) {
  if (Status s = before_collective("broadcast"); !s.is_ok()) return runtime::comm::completed_work(s);
  // The root receives nothing: its broadcasts do not count as received payloads.
  return finish("broadcast", inout, root != inner()->rank(), inner()->broadcast(inout, root));
}

WorkPtr FaultInjector::barrier() {
  if (Status s = before_collective("barrier"); !s.is_ok()) return runtime::comm::completed_work(s);
  return finish("barrier", Tensor(), false, inner()->barrier());
}

WorkPtr FaultInjector::send(const Tensor& input, int peer, int tag) {
  if (Status s = before_collective("send"); !s.is_ok()) return runtime::comm::completed_work(s);
  return finish("send", Tensor(), false, inner()->send(input, peer, tag));
}

WorkPtr FaultInjector::recv(const Tensor& output, int peer, int tag) {
  if (Status s = before_collective("recv"); !s.is_ok()) return runtime::comm::completed_work(s);
  return finish("recv", Tensor(), false, inner()->recv(output, peer, tag));
}

Result<std::unique_ptr<Communicator>> FaultInjector::split(int color, int key) {
  SHARDLAB_RETURN_IF_ERROR(before_collective("split"));
  SHARDLAB_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> child, inner()->split(color, key));
  if (!child) return std::unique_ptr<Communicator>();
  return std::unique_ptr<Communicator>(new FaultInjector(std::move(child), state_));
}

}  // namespace shardlab::sim
