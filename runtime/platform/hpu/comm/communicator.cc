#include "runtime/platform/hpu/comm/communicator.h"

#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <thread>
#include <vector>

namespace shardlab::runtime::comm::hccl {

using device::hpu::HpuDevice;
using device::hpu::synapse_error;
using device::hpu::SynapseApi;
using device::hpu::SynapseLibrary;

struct HcclShared {
  std::shared_ptr<SynapseLibrary> lib;  // keeps the library loaded while Works live
  const SynapseApi* api = nullptr;
  HpuDevice* device_ptr = nullptr;  // outlives the communicator and its Works
  synDeviceId device = 0;
  hcclComm_t comm = nullptr;
  synStreamHandle compute = nullptr, collectives = nullptr, sends = nullptr, recvs = nullptr;
  bool aborted = false;
  std::string abort_reason;

  // Operations whose Work was dropped (or failed) before the device finished them.
  struct Orphan {
    std::vector<synEventHandle> events;  // the last one is the completion event or the compute fence
    std::vector<Tensor> keep;
  };
  std::vector<Orphan> orphans;

  // Destroys the events of orphans the device has finished (never after an abort: the
  // device may still write into their buffers).
  void reap() {
    if (aborted) return;
    std::erase_if(orphans, [&](Orphan& o) {
      if (!o.events.empty() && api->synEventQuery(o.events.back()) != synSuccess) return false;
      for (synEventHandle e : o.events) api->synEventDestroy(e);
      return true;
    });
  }

  // Orphans of an aborted communicator: their events are destroyed when the device closes.
  struct Abandoned {
    const SynapseApi* api = nullptr;
    std::vector<Orphan> ops;
    Abandoned() = default;
    Abandoned(const Abandoned&) = delete;
    Abandoned& operator=(const Abandoned&) = delete;
    ~Abandoned() {
      for (Orphan& o : ops) {
        for (synEventHandle e : o.events) api->synEventDestroy(e);
      }
    }
  };

  void abort(const std::string& why) {
    if (aborted) return;
    api->hcclCommAbort(comm);
    aborted = true;
    abort_reason = why;
  }

  ~HcclShared() {
    bool pending = false;
    for (Orphan& o : orphans) {
      if (!o.events.empty() && api->synEventQuery(o.events.back()) != synSuccess) pending = true;
    }
    if (!aborted) {
      if (pending)
        api->hcclCommAbort(comm);
      else
        api->hcclCommDestroy(comm);
    }
    if (pending || aborted) {
      // The device may still write into these buffers: they live until the device closes.
      if (!orphans.empty()) {
        auto abandoned = std::make_shared<Abandoned>();
        abandoned->api = api;
        abandoned->ops = std::move(orphans);
        device_ptr->keep_until_close(std::move(abandoned));
      }
      return;
    }
    for (Orphan& o : orphans) {
      for (synEventHandle e : o.events) api->synEventDestroy(e);
    }
  }
};

namespace {

std::string format_duration(Nanos ns) {
  if (ns % kNanosPerMilli == 0) return std::to_string(ns / kNanosPerMilli) + " ms";
  return std::to_string(ns / kNanosPerMicro) + " us";
}

hcclDataType_t hccl_dtype(DType d) {
  switch (d) {
    case DType::kF32: return hcclFloat32;
    case DType::kBF16: return hcclBfloat16;
    case DType::kF16: return hcclFloat16;
    case DType::kI64: return hcclInt64;
  }
  return hcclFloat32;
}

hcclRedOp_t hccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return hcclSum;  // avg divides afterwards (divide_on_host)
    case ReduceOp::kMax: return hcclMax;
    case ReduceOp::kMin: return hcclMin;
  }
  return hcclSum;
}

void* address(const Tensor& t) { return reinterpret_cast<void*>(HpuDevice::device_address(t)); }

// A host tensor over `words` int64 (the unique id exchange over the bootstrap).
Tensor host_words(std::int64_t words, const std::string& name) {
  auto buffer = std::make_shared<std::vector<std::int64_t>>(static_cast<std::size_t>(words), 0);
  auto* bytes = reinterpret_cast<std::byte*>(buffer->data());
  auto storage = std::make_shared<Storage>(bytes, reinterpret_cast<std::uint64_t>(bytes), words * 8,
                                           MemoryCategory::kCommBuffers, name, "host", [buffer](Storage&) {});
  return *Tensor::view_of(storage, DType::kI64, {words}, 0, name);
}

class HcclWork final : public Work {
 public:
  using Finish = std::function<Status()>;
  HcclWork(std::shared_ptr<HcclShared> shared, const Clock& clock, std::string what, std::vector<synEventHandle> events,
           std::vector<Tensor> keep, Finish finish)
      : shared_(std::move(shared)),
        clock_(clock),
        what_(std::move(what)),
        events_(std::move(events)),
        keep_(std::move(keep)),
        finish_(std::move(finish)) {}

  ~HcclWork() override {
    if (!done_) {
      take_fence();
      shared_->orphans.push_back({std::move(events_), std::move(keep_)});
    }
  }

  Status wait(Nanos timeout) override {
    if (done_) return status_;
    const Nanos deadline = clock_.now() + timeout;
    for (;;) {
      if (poll()) return status_;
      if (clock_.now() >= deadline) {
        return Status::timeout(what_ + ": did not complete within " + format_duration(timeout) +
                               " on the communicator's clock (has every rank of the group issued it?)");
      }
      std::this_thread::yield();
    }
  }

  // The compute stream waits for the completion event on the device; the host goes on.
  // A fence recorded on the compute stream after that wait tells when the events may be
  // destroyed (complete()): the compute stream has passed the wait.
  Status wait_on_compute(Nanos timeout) override {
    if (done_) return status_;
    if (fence_ != nullptr) return Status::ok();  // already ordered
    if (finish_) return wait(timeout);           // kAvg finishes on the host
    const SynapseApi& api = *shared_->api;
    if (shared_->aborted) {
      fail(Status::failed_precondition(what_ + ": the communicator was aborted: " + shared_->abort_reason));
      return status_;
    }
    synEventHandle fence = nullptr;
    int st = api.synStreamWaitEvent(shared_->compute, events_.back(), 0);
    if (st == synSuccess) st = api.synEventCreate(&fence, shared_->device, 0);
    if (st == synSuccess) {
      fence_ = fence;
      st = api.synEventRecord(fence, shared_->compute);
    }
    if (st != synSuccess) {
      const Status s = synapse_error("synStreamWaitEvent on the compute stream (" + what_ + ")", st,
                                     "the communicator was aborted with hcclCommAbort so that no rank hangs");
      shared_->abort(s.message());
      fail(s);
      return status_;
    }
    return Status::ok();
  }

  bool is_completed() override { return done_ || poll(); }

 private:
  bool poll() {
    if (done_) return true;
    const SynapseApi& api = *shared_->api;
    if (shared_->aborted) {
      fail(Status::failed_precondition(what_ + ": the communicator was aborted: " + shared_->abort_reason));
      return true;
    }
    const int st = api.synEventQuery(events_.back());
    if (st == synSuccess) {
      complete(finish_ ? finish_() : Status::ok());
      return true;
    }
    if (st != synBusy) {
      const Status s = synapse_error("synEventQuery (" + what_ + ")", st,
                                     "the communicator was aborted with hcclCommAbort so that no rank hangs");
      shared_->abort(s.message());
      fail(s);
      return true;
    }
    hcclResult_t async = hcclSuccess;
    const hcclResult_t r = api.hcclCommGetAsyncError(shared_->comm, &async);
    if (r != hcclSuccess || async != hcclSuccess) {
      const Status s = shared_->lib->hccl_error(
          r != hcclSuccess ? "hcclCommGetAsyncError" : "hcclCommGetAsyncError during " + what_,
          r != hcclSuccess ? r : async,
          "the communicator was aborted with hcclCommAbort so that no rank hangs; check the other ranks' errors");
      shared_->abort(s.message());
      fail(s);
      return true;
    }
    return false;
  }

  void complete(Status s) {
    done_ = true;
    status_ = std::move(s);
    take_fence();
    if (shared_->api->synEventQuery(events_.back()) != synSuccess) {
      shared_->orphans.push_back({std::move(events_), std::move(keep_)});  // the compute stream has not passed the wait
    } else {
      for (synEventHandle e : events_) shared_->api->synEventDestroy(e);
    }
    events_.clear();
    keep_.clear();
    finish_ = nullptr;
  }

  // The device may still be working on it: hand buffers and events to the orphans.
  void fail(Status s) {
    done_ = true;
    status_ = std::move(s);
    take_fence();
    shared_->orphans.push_back({std::move(events_), std::move(keep_)});
    finish_ = nullptr;
  }

  // The fence becomes the last event, so an orphan is done when the compute stream is.
  void take_fence() {
    if (fence_ != nullptr) events_.push_back(fence_);
    fence_ = nullptr;
  }

  std::shared_ptr<HcclShared> shared_;
  const Clock& clock_;
  std::string what_;
  std::vector<synEventHandle> events_;
  std::vector<Tensor> keep_;
  Finish finish_;
  synEventHandle fence_ = nullptr;  // recorded on the compute stream by wait_on_compute
  bool done_ = false;
  Status status_;
};

}  // namespace

namespace {

// kAvg's division by the group size, exactly as every backend divides (divide_in_place),
// through the host: no public TPC kernel is specified to round x / w as the host does,
// and FSDP never asks for kAvg (it divides by scaling), so this path moves the tensor
// over PCIe twice and counts it in the device's host_transfer_bytes.
Status divide_on_host(HpuDevice& device, const Tensor& t, int w) {
  std::vector<std::byte> host(static_cast<std::size_t>(t.nbytes()));
  SHARDLAB_RETURN_IF_ERROR(device.to_host(t, host, device::kComputeStream));
  divide_in_place(t.dtype(), host.data(), t.numel(), w);
  return device.from_host(host, t, device::kComputeStream);
}

}  // namespace

struct HcclCommunicator::Plan {
  std::string what;
  synStreamHandle stream = nullptr;
  std::vector<Tensor> inputs, outputs;  // device memory, kept alive until the work completes
  std::string call;
  std::function<hcclResult_t()> issue;
  HcclWork::Finish finish;
};

HcclCommunicator::HcclCommunicator(HpuDevice& device, std::unique_ptr<Communicator> bootstrap, const Clock& clock,
                                   std::shared_ptr<HcclShared> shared)
    : device_(device), bootstrap_(std::move(bootstrap)), clock_(clock), shared_(std::move(shared)) {}

HcclCommunicator::~HcclCommunicator() = default;

bool HcclCommunicator::aborted() const { return shared_->aborted; }

Result<std::unique_ptr<HcclCommunicator>> HcclCommunicator::create(HpuDevice& device,
                                                                   std::unique_ptr<Communicator> bootstrap,
                                                                   const Clock& clock) {
  if (!bootstrap) return Status::invalid_argument("HcclCommunicator: no bootstrap communicator");
  const SynapseLibrary& lib = device.library();
  if (!lib.has_hccl()) {
    return Status::failed_precondition(lib.path() +
                                       " does not export the hccl* functions; the hpu backend needs HCCL for "
                                       "collectives (a Gaudi software install with libSynapse.so exporting hccl*)");
  }
  const SynapseApi& api = lib.api();
  const int rank = bootstrap->rank(), size = bootstrap->size();
  const std::string where = "rank " + std::to_string(rank) + " of group '" + bootstrap->group_name() + "' (size " +
                            std::to_string(size) + ")";
  const char* env_id = std::getenv("HCCL_COMM_ID");
  const bool from_env = env_id != nullptr && env_id[0] != '\0' && bootstrap->group_name() == "world";

  hcclUniqueId id{};
  if (from_env) {
    const hcclResult_t r = api.hcclGetUniqueId(&id);
    if (r != hcclSuccess) return lib.hccl_error("hcclGetUniqueId (HCCL_COMM_ID=" + std::string(env_id) + ")", r, where);
  } else {
    // [status][hcclUniqueId bytes], broadcast from rank 0 so its failure reaches everyone.
    constexpr std::int64_t kWords = 1 + (static_cast<std::int64_t>(sizeof(hcclUniqueId)) + 7) / 8;
    Tensor buffer = host_words(kWords, "hccl unique id");
    if (rank == 0) {
      const hcclResult_t r = api.hcclGetUniqueId(&id);
      buffer.data<std::int64_t>()[0] = r;
      std::memcpy(buffer.data<std::int64_t>() + 1, &id, sizeof id);
    }
    SHARDLAB_RETURN_IF_ERROR(
        bootstrap->broadcast(buffer, 0)
            ->wait(kDefaultTimeout)
            .with_context("HcclCommunicator: broadcasting the HCCL unique id over the bootstrap group"));
    const auto status = static_cast<int>(buffer.data<std::int64_t>()[0]);
    if (status != hcclSuccess) {
      return lib.hccl_error("hcclGetUniqueId (on rank 0)", status, "reported to " + where);
    }
    std::memcpy(&id, buffer.data<std::int64_t>() + 1, sizeof id);
  }
  auto shared = std::make_shared<HcclShared>();
  shared->lib = device.library_ptr();
  shared->api = &api;
  shared->device = device.synapse_device();
  shared->device_ptr = &device;
  hcclComm_t comm = nullptr;
  const hcclResult_t r = api.hcclCommInitRank(&comm, size, id, rank);
  if (r != hcclSuccess) {
    return lib.hccl_error(
        "hcclCommInitRank", r,
        where + "; check that every rank of the group called it, HCCL_SOCKET_IFNAME and HCCL_COMM_ID");
  }
  shared->comm = comm;
  SHARDLAB_ASSIGN_OR_RETURN(shared->compute, device.stream_handle(device::kComputeStream));
  for (auto [name, slot] : {std::pair<const char*, synStreamHandle*>{"hccl collectives", &shared->collectives},
                            {"hccl sends", &shared->sends},
                            {"hccl receives", &shared->recvs}}) {
    SHARDLAB_ASSIGN_OR_RETURN(device::StreamId s, device.create_stream(name));
    SHARDLAB_ASSIGN_OR_RETURN(*slot, device.stream_handle(s));
  }
  std::unique_ptr<HcclCommunicator> c(new HcclCommunicator(device, std::move(bootstrap), clock, std::move(shared)));
  SHARDLAB_ASSIGN_OR_RETURN(c->barrier_buffer_,
                            device.zeros({1}, DType::kF32, MemoryCategory::kCommBuffers, "hccl barrier"));
  return c;
}

WorkPtr HcclCommunicator::launch(Plan p) {
  if (shared_->aborted) {
    return completed_work(
        Status::failed_precondition(p.what + ": the communicator was aborted earlier: " + shared_->abort_reason));
  }
  shared_->reap();
  const SynapseApi& api = *shared_->api;
  std::vector<synEventHandle> events;
  auto fail = [&](Status s) {
    for (synEventHandle e : events) api.synEventDestroy(e);
    return completed_work(std::move(s));
  };
  // 1. Work already enqueued on the compute stream comes first.
  synEventHandle order = nullptr;
  int st = api.synEventCreate(&order, shared_->device, 0);
  if (st != synSuccess) return fail(synapse_error("synEventCreate (" + p.what + ")", st));
  events.push_back(order);
  st = api.synEventRecord(order, shared_->compute);
  if (st == synSuccess) st = api.synStreamWaitEvent(p.stream, order, 0);
  if (st != synSuccess) return fail(synapse_error("synEventRecord/synStreamWaitEvent (" + p.what + ")", st));
  // 2. The collective on device memory, then its completion event.
  const hcclResult_t r = p.issue();
  if (r != hcclSuccess) {
    Status s = shared_->lib->hccl_error(p.call + " (" + p.what + ")", r,
                                        "the communicator was aborted with hcclCommAbort so that no rank hangs");
    shared_->abort(s.message());
    return fail(s);
  }
  synEventHandle done = nullptr;
  st = api.synEventCreate(&done, shared_->device, 0);
  if (st != synSuccess) return fail(synapse_error("synEventCreate (" + p.what + ")", st));
  events.push_back(done);
  st = api.synEventRecord(done, p.stream);
  if (st != synSuccess) return fail(synapse_error("synEventRecord (" + p.what + ")", st));
  std::vector<Tensor> keep = p.inputs;
  keep.insert(keep.end(), p.outputs.begin(), p.outputs.end());
  return std::make_shared<HcclWork>(shared_, clock_, p.what, std::move(events), std::move(keep), std::move(p.finish));
}

namespace {

std::string describe(const Communicator& c, std::string_view op, const Tensor* t, std::optional<ReduceOp> rop = {},
                     int peer = -1) {
  std::string s(op);
  if (rop) s += " (" + std::string(reduce_op_name(*rop)) + ")";
  if (t) s += " of " + std::to_string(t->numel()) + " " + std::string(dtype_name(t->dtype())) + " elements";
  if (peer >= 0) s += (op == "send" ? " to peer " : " from peer ") + std::to_string(peer);
  return s + " on rank " + std::to_string(c.rank()) + " of group '" + c.group_name() + "' (size " +
         std::to_string(c.size()) + ")";
}

}  // namespace

WorkPtr HcclCommunicator::all_gather_into(const Tensor& output, const Tensor& input) {
  Status s = validate_all_gather(*this, output, input);
  if (s.is_ok()) s = device_.check_device_tensor(output, "all_gather");
  if (s.is_ok()) s = device_.check_device_tensor(input, "all_gather");
  if (!s.is_ok() || input.numel() == 0) return completed_work(std::move(s));
  Plan p{describe(*this, "all_gather", &input),
         shared_->collectives,
         {input},
         {output},
         "hcclAllGather",
         nullptr,
         nullptr};
  const SynapseApi* api = shared_->api;
  p.issue = [api, send = address(input), recv = address(output), n = static_cast<std::size_t>(input.numel()),
             dt = hccl_dtype(input.dtype()), comm = shared_->comm,
             stream = shared_->collectives] { return api->hcclAllGather(send, recv, n, dt, comm, stream); };
  return launch(std::move(p));
}

WorkPtr HcclCommunicator::reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) {
  Status s = validate_reduce_scatter(*this, output, input, op);
  if (s.is_ok()) s = device_.check_device_tensor(output, "reduce_scatter");
  if (s.is_ok()) s = device_.check_device_tensor(input, "reduce_scatter");
  if (!s.is_ok() || output.numel() == 0) return completed_work(std::move(s));
  Plan p{describe(*this, "reduce_scatter", &output, op),
         shared_->collectives,
         {input},
         {output},
         "hcclReduceScatter",
         nullptr,
         nullptr};
  const SynapseApi* api = shared_->api;
  p.issue = [api, send = address(input), recv = address(output), n = static_cast<std::size_t>(output.numel()),
             dt = hccl_dtype(output.dtype()), hop = hccl_op(op), comm = shared_->comm,
             stream = shared_->collectives] { return api->hcclReduceScatter(send, recv, n, dt, hop, comm, stream); };
  if (op == ReduceOp::kAvg) {
    p.finish = [this, output, w = size()] { return divide_on_host(device_, output, w); };
  }
  return launch(std::move(p));
}

WorkPtr HcclCommunicator::all_reduce(const Tensor& inout, ReduceOp op) {
  Status s = validate_all_reduce(*this, inout, op);
  if (s.is_ok()) s = device_.check_device_tensor(inout, "all_reduce");
  if (!s.is_ok() || inout.numel() == 0) return completed_work(std::move(s));
  Plan p{describe(*this, "all_reduce", &inout, op),
         shared_->collectives,
         {inout},
         {inout},
         "hcclAllReduce",
         nullptr,
         nullptr};
  const SynapseApi* api = shared_->api;
  p.issue = [api, buf = address(inout), n = static_cast<std::size_t>(inout.numel()), dt = hccl_dtype(inout.dtype()),
             hop = hccl_op(op), comm = shared_->comm,
             stream = shared_->collectives] { return api->hcclAllReduce(buf, buf, n, dt, hop, comm, stream); };
  if (op == ReduceOp::kAvg) {
    p.finish = [this, inout, w = size()] { return divide_on_host(device_, inout, w); };
  }
  return launch(std::move(p));
}

WorkPtr HcclCommunicator::broadcast(const Tensor& inout, int root) {
  Status s = validate_broadcast(*this, inout, root);
  if (s.is_ok()) s = device_.check_device_tensor(inout, "broadcast");
  if (!s.is_ok() || inout.numel() == 0) return completed_work(std::move(s));
  Plan p{
      describe(*this, "broadcast", &inout), shared_->collectives, {inout}, {inout}, "hcclBroadcast", nullptr, nullptr};
  const SynapseApi* api = shared_->api;
  p.issue = [api, buf = address(inout), n = static_cast<std::size_t>(inout.numel()), dt = hccl_dtype(inout.dtype()),
             root, comm = shared_->comm,
             stream = shared_->collectives] { return api->hcclBroadcast(buf, buf, n, dt, root, comm, stream); };
  return launch(std::move(p));
}

WorkPtr HcclCommunicator::barrier() {
  Plan p{describe(*this, "barrier", nullptr),
         shared_->collectives,
         {barrier_buffer_},
         {},
         "hcclAllReduce",
         nullptr,
         nullptr};
  const SynapseApi* api = shared_->api;
  p.issue = [api, buf = address(barrier_buffer_), comm = shared_->comm, stream = shared_->collectives] {
    return api->hcclAllReduce(buf, buf, 1, hcclFloat32, hcclSum, comm, stream);
  };
  return launch(std::move(p));
}

WorkPtr HcclCommunicator::send(const Tensor& input, int peer, int tag) {
  Status s = validate_peer(*this, input, peer, "send");
  if (s.is_ok() && tag < 0)
    s = Status::invalid_argument(describe(*this, "send", &input, {}, peer) + ": tag " + std::to_string(tag) +
                                 " must be >= 0");
  if (s.is_ok()) s = device_.check_device_tensor(input, "send");
  if (!s.is_ok() || input.numel() == 0) return completed_work(std::move(s));
  Plan p{describe(*this, "send", &input, {}, peer), shared_->sends, {input}, {}, "hcclSend", nullptr, nullptr};
  const SynapseApi* api = shared_->api;
  p.issue = [api, buf = address(input), n = static_cast<std::size_t>(input.numel()), dt = hccl_dtype(input.dtype()),
             peer, comm = shared_->comm,
             stream = shared_->sends] { return api->hcclSend(buf, n, dt, peer, comm, stream); };
  return launch(std::move(p));
}

WorkPtr HcclCommunicator::recv(const Tensor& output, int peer, int tag) {
  Status s = validate_peer(*this, output, peer, "recv");
  if (s.is_ok() && tag < 0)
    s = Status::invalid_argument(describe(*this, "recv", &output, {}, peer) + ": tag " + std::to_string(tag) +
                                 " must be >= 0");
  if (s.is_ok()) s = device_.check_device_tensor(output, "recv");
  if (!s.is_ok() || output.numel() == 0) return completed_work(std::move(s));
  Plan p{describe(*this, "recv", &output, {}, peer), shared_->recvs, {}, {output}, "hcclRecv", nullptr, nullptr};
  const SynapseApi* api = shared_->api;
  p.issue = [api, buf = address(output), n = static_cast<std::size_t>(output.numel()), dt = hccl_dtype(output.dtype()),
             peer, comm = shared_->comm,
             stream = shared_->recvs] { return api->hcclRecv(buf, n, dt, peer, comm, stream); };
  return launch(std::move(p));
}

Result<std::unique_ptr<Communicator>> HcclCommunicator::split(int color, int key) {
  SHARDLAB_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> sub, bootstrap_->split(color, key));
  if (!sub) return std::unique_ptr<Communicator>();
  SHARDLAB_ASSIGN_OR_RETURN(std::unique_ptr<HcclCommunicator> c, create(device_, std::move(sub), clock_));
  return std::unique_ptr<Communicator>(std::move(c));
}

}  // namespace shardlab::runtime::comm::hccl
