#include "runtime/platform/hpu/device/device.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <sstream>

namespace shardlab::runtime::device::hpu {

namespace {

constexpr const char* kDeviceName = "hpu:0";
constexpr int kScalarSlots = 16;
constexpr std::size_t kMaxEvents = 4096;

std::string syn_dtype_suffix(DType d) {
  switch (d) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
    case DType::kI64: return "i64";
  }
  return "?";
}

synDataType syn_dtype(DType d) {
  switch (d) {
    case DType::kF32: return syn_type_single;
    case DType::kBF16: return syn_type_bf16;
    case DType::kF16: return syn_type_fp16;
    case DType::kI64: return syn_type_int64;
  }
  return syn_type_na;
}

template <typename P>
std::string param_bytes(const P& p) {
  return std::string(reinterpret_cast<const char*>(&p), sizeof(P));
}

// Kernel parameters with padding (bool then float) are built on zeroed memory: their bytes
// are part of the recipe key and are passed to the library as is.
std::string layer_norm_params(float eps) {
  ShardlabLayerNormParams p;
  std::memset(&p, 0, sizeof p);
  p.epsValid = true;
  p.eps = eps;
  return param_bytes(p);
}

std::string hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

Shape ones(int rank) { return Shape(static_cast<std::size_t>(rank), 1); }

}  // namespace

// ---- module selection and the launch check ---------------------------------------------

Result<std::uint32_t> select_module() {
  int local_rank = 0;
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_RANK", "LOCAL_RANK"}) {
    const char* v = std::getenv(var);
    if (v == nullptr || v[0] == '\0') continue;
    char* end = nullptr;
    const long r = std::strtol(v, &end, 10);
    if (*end != '\0' || r < 0 || r > 4096) {
      return Status::invalid_argument(std::string(var) + "='" + v + "' is not a local rank (a non-negative integer)");
    }
    local_rank = static_cast<int>(r);
    break;
  }
  const char* visible = std::getenv("HABANA_VISIBLE_MODULES");
  if (visible == nullptr || visible[0] == '\0') return static_cast<std::uint32_t>(local_rank);
  std::vector<std::uint32_t> modules;
  std::stringstream ss(visible);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const long m = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || m < 0 || m > 1023) {
      return Status::invalid_argument(std::string("HABANA_VISIBLE_MODULES='") + visible + "': '" + item +
                                      "' is not a module id; expected a comma-separated list such as 0,1,2,3");
    }
    modules.push_back(static_cast<std::uint32_t>(m));
  }
  if (static_cast<std::size_t>(local_rank) >= modules.size()) {
    return Status::invalid_argument("local rank " + std::to_string(local_rank) +
                                    " has no module: HABANA_VISIBLE_MODULES='" + visible + "' lists " +
                                    std::to_string(modules.size()) + " (run at most that many processes per node)");
  }
  return modules[static_cast<std::size_t>(local_rank)];
}

Status check_launch_tensor(const std::string& recipe, const std::string& tensor, const std::string& storage_label,
                           std::int64_t byte_offset, std::int64_t nbytes, std::int64_t storage_bytes,
                           std::int64_t allocation_bytes, std::int64_t compiled_bytes) {
  // NOTE [Launch check] in runtime/device/device.h; then this device's own allocations.
  SHARDLAB_RETURN_IF_ERROR(
      check_launch_extent("recipe '" + recipe + "'", tensor, storage_label, byte_offset, nbytes, storage_bytes));
  const std::int64_t end = byte_offset + nbytes;
  const std::string where = "launch of recipe '" + recipe + "': tensor '" + tensor + "' at byte offset " +
                            std::to_string(byte_offset) + ", extent " + std::to_string(nbytes) +
                            " bytes, in storage '" + storage_label + "' of " + std::to_string(storage_bytes) + " bytes";
  if (allocation_bytes < 0) {
    return Status::data_loss(where + ": the storage is not a live allocation of " + std::string(kDeviceName) +
                             " (freed, or another device's memory); nothing was launched");
  }
  if (end > allocation_bytes) {
    return Status::data_loss(where + ": the view ends at byte " + std::to_string(end) +
                             ", past the end of its device allocation of " + std::to_string(allocation_bytes) +
                             " bytes; nothing was launched");
  }
  if (nbytes != compiled_bytes) {
    return Status::data_loss(where + ": the recipe was compiled for " + std::to_string(compiled_bytes) +
                             " bytes; nothing was launched");
  }
  return Status::ok();
}

// ---- internal types ---------------------------------------------------------------------

struct HpuDevice::Allocations {
  mutable std::mutex mu;
  std::map<std::uint64_t, std::int64_t> sizes;  // device address → bytes

  std::int64_t size_at(std::uint64_t address) const {
    std::lock_guard<std::mutex> lock(mu);
    auto it = sizes.find(address);
    return it == sizes.end() ? -1 : it->second;
  }
};

struct HpuDevice::Recipe {
  synRecipeHandle handle = nullptr;
  std::string name;
  std::uint64_t workspace_bytes = 0;
  std::vector<std::int64_t> tensor_bytes;  // per GraphSpec tensor
};

// One graph: tensors (torch order shapes; persistent ones are bound at launch) and nodes.
struct HpuDevice::GraphSpec {
  struct T {
    std::string name;
    DType dtype;
    Shape shape;
    bool persistent;
  };
  struct N {
    std::string guid;
    std::vector<int> in, out;
    std::string params;
  };
  explicit GraphSpec(std::string op_name) : op(std::move(op_name)) {}

  std::string op;
  std::vector<T> tensors;
  std::vector<N> nodes;

  int add(std::string name, DType dtype, Shape shape, bool persistent = true) {
    tensors.push_back({std::move(name), dtype, std::move(shape), persistent});
    return static_cast<int>(tensors.size()) - 1;
  }
  int temp(std::string name, DType dtype, Shape shape) { return add(std::move(name), dtype, std::move(shape), false); }
  void node(std::string guid, std::vector<int> in, std::vector<int> out, std::string params = {}) {
    nodes.push_back({std::move(guid), std::move(in), std::move(out), std::move(params)});
  }
  std::string key() const {
    std::string k = op;
    for (const T& t : tensors) {
      k +=
          "|" + t.name + ":" + std::string(dtype_name(t.dtype)) + shape_to_string(t.shape) + (t.persistent ? "p" : "t");
    }
    for (const N& n : nodes) {
      k += "|" + n.guid + "(";
      for (int i : n.in) k += std::to_string(i) + ",";
      k += ")->(";
      for (int i : n.out) k += std::to_string(i) + ",";
      k += ")" + hex(n.params);
    }
    return k;
  }
};

struct HpuDevice::Binding {
  int tensor;
  Tensor view;
};

// ---- lifecycle ---------------------------------------------------------------------------

HpuDevice::HpuDevice(std::shared_ptr<SynapseLibrary> lib, synDeviceId device, std::uint32_t module, int device_type,
                     std::int64_t capacity)
    : lib_(std::move(lib)),
      api_(lib_->api()),
      device_(device),
      module_id_(module),
      device_type_(device_type),
      memory_(kDeviceName, capacity),
      allocations_(std::make_shared<Allocations>()),
      host_math_(DeviceId{"hpu", 0}) {}

Result<std::unique_ptr<HpuDevice>> HpuDevice::open(std::shared_ptr<SynapseLibrary> lib,
                                                   const HpuDeviceOptions& options) {
  std::uint32_t module = 0;
  if (options.module_id) {
    module = *options.module_id;
  } else {
    SHARDLAB_ASSIGN_OR_RETURN(module, select_module());
  }
  const SynapseApi& api = lib->api();
  synDeviceId id = 0;
  int st = api.synDeviceAcquireByModuleId(&id, module);
  if (st != synSuccess) {
    std::string hint;
    const std::string m = std::to_string(module);
    if (st == synDeviceAlreadyAcquired) {
      hint = "another process holds module " + m +
             "; check HABANA_VISIBLE_MODULES and that one process runs per card (one local rank per module)";
    } else if (st == synNoDeviceFound) {
      hint = "no Gaudi card with module id " + m + " is visible; check HABANA_VISIBLE_MODULES and `hl-smi`";
    }
    return synapse_error("synDeviceAcquireByModuleId", st, hint);
  }
  SynDeviceInfoBuffer info;
  int device_type = synDeviceTypeInvalid;
  std::uint64_t free_bytes = 0, total_bytes = 0;
  st = api.synDeviceGetInfo(id, &info.info);
  if (st == synSuccess) {
    device_type = info.info.deviceType;
    st = api.synDeviceGetMemoryInfo(id, &free_bytes, &total_bytes);
    if (st != synSuccess) {
      api.synDeviceRelease(id);
      return synapse_error("synDeviceGetMemoryInfo", st);
    }
  } else {
    api.synDeviceRelease(id);
    return synapse_error("synDeviceGetInfo", st);
  }
  const std::int64_t capacity =
      options.capacity_bytes > 0 ? options.capacity_bytes : static_cast<std::int64_t>(total_bytes);
  std::unique_ptr<HpuDevice> dev(new HpuDevice(std::move(lib), id, module, device_type, capacity));
  synStreamHandle compute = nullptr;
  st = api.synStreamCreateGeneric(&compute, id, 0);
  if (st != synSuccess) return synapse_error("synStreamCreateGeneric (compute)", st);
  dev->streams_.push_back(compute);
  return dev;
}

HpuDevice::~HpuDevice() {
  for (auto& [key, r] : recipes_) api_.synRecipeDestroy(r->handle);
  recipes_.clear();
  for (auto& [id, ev] : events_) api_.synEventDestroy(ev);
  events_.clear();
  for (synStreamHandle s : streams_) api_.synStreamSynchronize(s);  // staged DMA may still read host memory
  staged_.clear();
  scalar_storage_.clear();
  workspace_.reset();
  for (synStreamHandle s : streams_) api_.synStreamDestroy(s);
  streams_.clear();
  abandoned_.clear();
  api_.synDeviceRelease(device_);
}

std::string HpuDevice::device_type_name() const {
  switch (device_type_) {
    case synDeviceGaudi: return "Gaudi";
    case synDeviceGaudi2: return "Gaudi2";
    case synDeviceGaudi3: return "Gaudi3";
    default: return "synDeviceType " + std::to_string(device_type_);
  }
}

// ---- memory ------------------------------------------------------------------------------

Result<std::shared_ptr<Storage>> HpuDevice::allocate(std::int64_t nbytes, MemoryCategory category,
                                                     std::string_view label) {
  SHARDLAB_RETURN_IF_ERROR(memory_.reserve(nbytes, category, label));
  MemoryTracker* tracker = &memory_;
  if (nbytes == 0) {  // nothing to place on the device
    return std::make_shared<Storage>(nullptr, 0, 0, category, std::string(label), kDeviceName,
                                     [tracker](Storage& s) { tracker->release(s.nbytes(), s.category()); });
  }
  const auto size = static_cast<std::uint64_t>(nbytes);
  std::uint64_t address = 0;
  const int st = api_.synDeviceMalloc(device_, size, 0, 0, &address);
  if (st != synSuccess) {
    const MemoryStats stats = memory_.stats();
    memory_.release(nbytes, category);
    return synapse_error("synDeviceMalloc", st,
                         "requested " + format_bytes(nbytes) + " for '" + std::string(label) + "' (" +
                             std::string(category_name(category)) + ") on " + kDeviceName + "; tracked in use " +
                             format_bytes(stats.current_total) + " (" + stats.breakdown() + "), capacity " +
                             format_bytes(stats.capacity));
  }
  {
    std::lock_guard<std::mutex> lock(allocations_->mu);
    allocations_->sizes[address] = nbytes;
  }
  std::shared_ptr<SynapseLibrary> lib = lib_;
  std::shared_ptr<Allocations> allocations = allocations_;
  const synDeviceId device = device_;
  // NOTE [HPU device memory]: no host bytes.
  return std::make_shared<Storage>(nullptr, address, nbytes, category, std::string(label), kDeviceName,
                                   [lib, allocations, device, tracker, address](Storage& s) {
                                     {
                                       std::lock_guard<std::mutex> lock(allocations->mu);
                                       allocations->sizes.erase(address);
                                     }
                                     lib->api().synDeviceFree(device, address, 0);
                                     tracker->release(s.nbytes(), s.category());
                                   });
}

Result<std::shared_ptr<Storage>> HpuDevice::pinned(std::int64_t nbytes, std::string_view label) {
  void* host = nullptr;
  const int st = api_.synHostMalloc(device_, static_cast<std::uint64_t>(std::max<std::int64_t>(nbytes, 1)), 0, &host);
  if (st != synSuccess || host == nullptr) {
    return synapse_error("synHostMalloc", st == synSuccess ? synOutOfHostMemory : st,
                         "pinned staging of " + format_bytes(nbytes) + " for " + std::string(label));
  }
  std::shared_ptr<SynapseLibrary> lib = lib_;
  const synDeviceId device = device_;
  return std::make_shared<Storage>(static_cast<std::byte*>(host), reinterpret_cast<std::uint64_t>(host), nbytes,
                                   MemoryCategory::kOther, std::string(label), "hpu:0 staging",
                                   [lib, device, host](Storage&) { lib->api().synHostFree(device, host, 0); });
}

void HpuDevice::keep_until_synchronized(StreamId stream, std::shared_ptr<Storage> staging) {
  staged_.emplace_back(stream, std::move(staging));
}

// ---- streams and events -----------------------------------------------------------------

Status HpuDevice::check_stream(std::string_view op, StreamId stream) const {
  if (stream < 0 || static_cast<std::size_t>(stream) >= streams_.size()) {
    return Status::invalid_argument(std::string(op) + " on " + kDeviceName + ": unknown stream " +
                                    std::to_string(stream) + "; streams are 0.." + std::to_string(streams_.size() - 1));
  }
  return Status::ok();
}

Result<synStreamHandle> HpuDevice::stream_handle(StreamId stream) const {
  SHARDLAB_RETURN_IF_ERROR(check_stream("stream_handle", stream));
  return streams_[static_cast<std::size_t>(stream)];
}

Result<StreamId> HpuDevice::create_stream(std::string_view name) {
  synStreamHandle s = nullptr;
  const int st = api_.synStreamCreateGeneric(&s, device_, 0);
  if (st != synSuccess) return synapse_error("synStreamCreateGeneric ('" + std::string(name) + "')", st);
  streams_.push_back(s);
  return static_cast<StreamId>(streams_.size() - 1);
}

Result<EventId> HpuDevice::record_event(StreamId stream) {
  SHARDLAB_RETURN_IF_ERROR(check_stream("record_event", stream));
  synEventHandle ev = nullptr;
  int st = api_.synEventCreate(&ev, device_, 0);
  if (st != synSuccess) return synapse_error("synEventCreate", st);
  st = api_.synEventRecord(ev, streams_[static_cast<std::size_t>(stream)]);
  if (st != synSuccess) {
    api_.synEventDestroy(ev);
    return synapse_error("synEventRecord", st);
  }
  // The oldest events are retired once complete, so wait_event treats an unknown id as done.
  while (events_.size() >= kMaxEvents) {
    st = api_.synEventSynchronize(events_.begin()->second);
    if (st != synSuccess) return synapse_error("synEventSynchronize (retiring an old event)", st);
    api_.synEventDestroy(events_.begin()->second);
    events_.erase(events_.begin());
  }
  const std::uint64_t id = next_event_++;
  events_[id] = ev;
  return EventId{id};
}

Status HpuDevice::wait_event(StreamId waiter, EventId event) {
  SHARDLAB_RETURN_IF_ERROR(check_stream("wait_event", waiter));
  auto it = events_.find(event.value);
  if (it == events_.end()) return Status::ok();  // retired: it completed long ago
  const int st = api_.synStreamWaitEvent(streams_[static_cast<std::size_t>(waiter)], it->second, 0);
  return st == synSuccess ? Status::ok() : synapse_error("synStreamWaitEvent", st);
}

Status HpuDevice::synchronize(StreamId stream) {
  SHARDLAB_RETURN_IF_ERROR(check_stream("synchronize", stream));
  const int st = api_.synStreamSynchronize(streams_[static_cast<std::size_t>(stream)]);
  if (st != synSuccess) return synapse_error("synStreamSynchronize", st);
  std::erase_if(staged_, [stream](const auto& s) { return s.first == stream; });
  return Status::ok();
}

// ---- placement, staging ------------------------------------------------------------------

std::uint64_t HpuDevice::device_address(const Tensor& t) {
  return t.storage()->device_address() + static_cast<std::uint64_t>(t.byte_offset());
}

bool HpuDevice::is_device_tensor(const Tensor& t) const {
  return t.defined() && !t.storage()->host_visible() &&
         (t.storage()->nbytes() == 0 ? t.storage()->device_name() == kDeviceName
                                     : allocations_->size_at(t.storage()->device_address()) >= 0);
}

Status HpuDevice::check_device_tensor(const Tensor& t, std::string_view what) const {
  if (!t.defined()) return Status::invalid_argument(std::string(what) + ": an operand is undefined");
  SHARDLAB_RETURN_IF_ERROR(check_launch_view(what, t));  // NOTE [Launch check]
  if (!is_device_tensor(t)) {
    return Status::invalid_argument(std::string(what) + ": " + t.describe() + " is not in the memory of " +
                                    kDeviceName + " (its storage belongs to " + t.storage()->device_name() +
                                    "); copy it to an " + kDeviceName + " tensor first");
  }
  if (t.storage()->nbytes() == 0) return Status::ok();
  // The view inside its device allocation, before anything is enqueued (a storage that
  // claims more bytes than were allocated for it).
  const Storage& s = *t.storage();
  return check_launch_tensor(std::string(what), t.name(), s.label(), t.byte_offset(), t.nbytes(), s.nbytes(),
                             allocations_->size_at(s.device_address()), t.nbytes());
}

Status HpuDevice::check_operand(std::string_view op, const Tensor& t, DType dtype) const {
  SHARDLAB_RETURN_IF_ERROR(check_device_tensor(t, op));
  if (t.dtype() != dtype) {
    return Status::invalid_argument(std::string(op) + ": " + t.describe() + " must be " +
                                    std::string(dtype_name(dtype)));
  }
  return Status::ok();
}

Status HpuDevice::dma_to_device(StreamId stream, const std::byte* host, std::uint64_t address, std::int64_t nbytes,
                                const std::string& what) {
  if (nbytes == 0) return Status::ok();
  const int st = api_.synMemCopyAsync(streams_[static_cast<std::size_t>(stream)], reinterpret_cast<std::uint64_t>(host),
                                      static_cast<std::uint64_t>(nbytes), address, HOST_TO_DRAM);
  if (st != synSuccess) return synapse_error("synMemCopyAsync (HOST_TO_DRAM of " + what + ")", st);
  stats_.bytes_to_device += nbytes;
  return Status::ok();
}

Status HpuDevice::dma_to_host(StreamId stream, std::uint64_t address, std::int64_t nbytes, std::byte* host,
                              const std::string& what) {
  if (nbytes == 0) return Status::ok();
  const int st =
      api_.synMemCopyAsync(streams_[static_cast<std::size_t>(stream)], address, static_cast<std::uint64_t>(nbytes),
                           reinterpret_cast<std::uint64_t>(host), DRAM_TO_HOST);
  if (st != synSuccess) return synapse_error("synMemCopyAsync (DRAM_TO_HOST of " + what + ")", st);
  stats_.bytes_to_host += nbytes;
  return Status::ok();
}

Status HpuDevice::to_host(const Tensor& src, std::span<std::byte> dst, StreamId stream) {
  SHARDLAB_RETURN_IF_ERROR(check_stream("to_host", stream));
  SHARDLAB_RETURN_IF_ERROR(check_host_copy("to_host", src, dst.size()));
  SHARDLAB_RETURN_IF_ERROR(check_device_tensor(src, "to_host"));
  if (dst.empty()) return Status::ok();
  SHARDLAB_ASSIGN_OR_RETURN(std::shared_ptr<Storage> staging, pinned(src.nbytes(), "to_host of " + src.name()));
  SHARDLAB_RETURN_IF_ERROR(
      dma_to_host(stream, device_address(src), src.nbytes(), staging->host_data(), src.describe()));
  SHARDLAB_RETURN_IF_ERROR(synchronize(stream));
  std::memcpy(dst.data(), staging->host_data(), dst.size());
  return Status::ok();
}

Status HpuDevice::from_host(std::span<const std::byte> src, const Tensor& dst, StreamId stream) {
  SHARDLAB_RETURN_IF_ERROR(check_stream("from_host", stream));
  SHARDLAB_RETURN_IF_ERROR(check_host_copy("from_host", dst, src.size()));
  SHARDLAB_RETURN_IF_ERROR(check_device_tensor(dst, "from_host"));
  if (src.empty()) return Status::ok();
  SHARDLAB_ASSIGN_OR_RETURN(std::shared_ptr<Storage> staging, pinned(dst.nbytes(), "from_host of " + dst.name()));
  std::memcpy(staging->host_data(), src.data(), src.size());
  SHARDLAB_RETURN_IF_ERROR(
      dma_to_device(stream, staging->host_data(), device_address(dst), dst.nbytes(), dst.describe()));
  keep_until_synchronized(stream, std::move(staging));
  return Status::ok();
}

// NOTE [HPU host ops]
// An op whose exact contract has no public TPC kernel runs the cpu backend's math on host
// copies of its operands: the stream is synchronized (earlier work has written them), the
// byte range each storage's operands span is downloaded once (so views that overlap or
// alias on the device overlap or alias the same way on the host), the math runs, and the
// views the op writes are uploaded on the stream. Validation is the cpu backend's, on the
// host copies, so errors read the same on both backends; on an error nothing is uploaded.
struct HpuDevice::HostOperand {
  const Tensor* tensor;  // may be undefined (an absent optional operand)
  bool written;
};

Status HpuDevice::host_op(std::string_view op, StreamId stream, const std::vector<HostOperand>& operands,
                          const std::function<Status(const std::vector<Tensor>&)>& math) {
  SHARDLAB_RETURN_IF_ERROR(check_stream(op, stream));
  struct Range {
    std::int64_t lo, hi;
    std::shared_ptr<Storage> staging;
  };
  std::map<const Storage*, Range> ranges;
  for (const HostOperand& o : operands) {
    const Tensor& t = *o.tensor;
    if (!t.defined()) continue;
    SHARDLAB_RETURN_IF_ERROR(check_device_tensor(t, op));
    const std::int64_t lo = t.byte_offset() / 8 * 8, hi = t.byte_offset() + t.nbytes();
    auto [it, fresh] = ranges.try_emplace(t.storage().get(), Range{lo, hi, nullptr});
    if (!fresh) it->second.lo = std::min(it->second.lo, lo), it->second.hi = std::max(it->second.hi, hi);
  }
  SHARDLAB_RETURN_IF_ERROR(synchronize(stream));
  std::vector<Tensor> host;
  for (auto& [storage, r] : ranges) {
    SHARDLAB_ASSIGN_OR_RETURN(r.staging, pinned(r.hi - r.lo, std::string(op) + " operands"));
    SHARDLAB_RETURN_IF_ERROR(dma_to_host(stream, storage->device_address() + static_cast<std::uint64_t>(r.lo),
                                         r.hi - r.lo, r.staging->host_data(),
                                         "the operands of " + std::string(op) + " in '" + storage->label() + "'"));
  }
  SHARDLAB_RETURN_IF_ERROR(synchronize(stream));
  for (const HostOperand& o : operands) {
    const Tensor& t = *o.tensor;
    if (!t.defined()) {
      host.emplace_back();
      continue;
    }
    const Range& r = ranges.at(t.storage().get());
    const auto es = static_cast<std::int64_t>(element_size(t.dtype()));
    SHARDLAB_ASSIGN_OR_RETURN(
        Tensor h, Tensor::view_of(r.staging, t.dtype(), t.shape(), (t.byte_offset() - r.lo) / es, t.name()));
    host.push_back(std::move(h));
  }
  SHARDLAB_RETURN_IF_ERROR(math(host));
  for (std::size_t i = 0; i < operands.size(); ++i) {
    if (!operands[i].written || !operands[i].tensor->defined()) continue;
    const Tensor& t = *operands[i].tensor;
    SHARDLAB_RETURN_IF_ERROR(dma_to_device(stream, host[i].bytes(), device_address(t), t.nbytes(), t.describe()));
  }
  for (auto& [storage, r] : ranges) keep_until_synchronized(stream, std::move(r.staging));
  ++stats_.host_fallback_ops;
  return Status::ok();
}

// ---- graphs and recipes ------------------------------------------------------------------

Result<HpuDevice::Recipe*> HpuDevice::recipe_for(const GraphSpec& spec) {
  const std::string key = spec.key();
  auto it = recipes_.find(key);
  if (it != recipes_.end()) {
    ++stats_.recipe_cache_hits;
    return it->second.get();
  }
  auto recipe = std::make_unique<Recipe>();
  recipe->name = spec.op + "_" + std::to_string(recipes_.size());
  synGraphHandle graph = nullptr;
  int st = api_.synGraphCreate(&graph, static_cast<synDeviceType>(device_type_));
  if (st != synSuccess) return synapse_error("synGraphCreate (" + recipe->name + ")", st);
  std::vector<synTensor> handles;
  std::vector<synSectionHandle> sections;
  auto cleanup = [&] {
    for (synTensor t : handles) api_.synTensorDestroy(t);
    for (synSectionHandle s : sections) api_.synSectionDestroy(s);
    api_.synGraphDestroy(graph);
  };
  auto fail = [&](const std::string& call, int status) {
    cleanup();
    return synapse_error(call + " (recipe '" + recipe->name + "')", status);
  };
  for (const GraphSpec::T& t : spec.tensors) {
    synTensor h = nullptr;
    st = api_.synTensorHandleCreate(&h, graph, DATA_TENSOR, t.name.c_str());
    if (st != synSuccess) return fail("synTensorHandleCreate '" + t.name + "'", st);
    handles.push_back(h);
    synTensorGeometry geometry{};
    const Shape shape = t.shape.empty() ? Shape{1} : t.shape;
    geometry.dims = static_cast<std::uint32_t>(shape.size());
    synTensorDeviceFullLayout layout{};
    layout.deviceDataType = syn_dtype(t.dtype);
    std::uint64_t stride = element_size(t.dtype);
    for (std::size_t i = 0; i < shape.size(); ++i) {
      geometry.sizes[i] = static_cast<TSize>(shape[shape.size() - 1 - i]);  // innermost first
      if (stride > 0xffffffffu) {
        cleanup();
        return Status::invalid_argument("tensor '" + t.name + "' " + shape_to_string(t.shape) +
                                        " is too large for a 32-bit Synapse stride");
      }
      layout.strides[i] = static_cast<std::uint32_t>(stride);
      stride *= geometry.sizes[i];
    }
    st = api_.synTensorSetGeometry(h, &geometry, synGeometrySizes);
    if (st != synSuccess) return fail("synTensorSetGeometry '" + t.name + "'", st);
    st = api_.synTensorSetDeviceFullLayout(h, &layout);
    if (st != synSuccess) return fail("synTensorSetDeviceFullLayout '" + t.name + "'", st);
    if (t.persistent) {
      synSectionHandle section = nullptr;
      st = api_.synSectionCreate(&section, 0, graph);
      if (st != synSuccess) return fail("synSectionCreate '" + t.name + "'", st);
      sections.push_back(section);
      st = api_.synTensorAssignToSection(h, section, 0);
      if (st != synSuccess) return fail("synTensorAssignToSection '" + t.name + "'", st);
    }
    std::int64_t numel = 1;
    for (std::int64_t d : t.shape) numel *= d;
    recipe->tensor_bytes.push_back(numel * static_cast<std::int64_t>(element_size(t.dtype)));
  }
  int index = 0;
  for (const GraphSpec::N& n : spec.nodes) {
    std::vector<synTensor> in, out;
    for (int i : n.in) in.push_back(handles[static_cast<std::size_t>(i)]);
    for (int i : n.out) out.push_back(handles[static_cast<std::size_t>(i)]);
    const std::string name = recipe->name + "/" + n.guid + "_" + std::to_string(index++);
    st = api_.synNodeCreate(graph, in.data(), out.data(), static_cast<std::uint32_t>(in.size()),
                            static_cast<std::uint32_t>(out.size()), n.params.empty() ? nullptr : n.params.data(),
                            static_cast<unsigned>(n.params.size()), n.guid.c_str(), name.c_str(), nullptr, nullptr);
    if (st != synSuccess) return fail("synNodeCreate '" + n.guid + "'", st);
  }
  st = api_.synGraphCompile(&recipe->handle, graph, recipe->name.c_str(), nullptr);
  if (st != synSuccess) return fail("synGraphCompile", st);
  cleanup();
  st = api_.synWorkspaceGetSize(&recipe->workspace_bytes, recipe->handle);
  if (st != synSuccess) {
    api_.synRecipeDestroy(recipe->handle);
    return synapse_error("synWorkspaceGetSize (recipe '" + recipe->name + "')", st);
  }
  ++stats_.recipes_compiled;
  Recipe* raw = recipe.get();
  recipes_[key] = std::move(recipe);
  return raw;
}

// The slots are rewritten for every op of the stream: the upload is ordered after the
// previous launch on the same stream, so no launch sees the next op's values.
Result<Tensor> HpuDevice::scalars(StreamId stream, const std::vector<float>& values, int rank) {
  SHARDLAB_CHECK_LE(values.size(), static_cast<std::size_t>(kScalarSlots));
  std::shared_ptr<Storage>& slots = scalar_storage_[stream];
  if (!slots) {
    SHARDLAB_ASSIGN_OR_RETURN(slots, allocate(kScalarSlots * static_cast<std::int64_t>(sizeof(float)),
                                              MemoryCategory::kOther, "hpu op scalars"));
  }
  Shape shape = ones(rank);
  shape[0] = static_cast<std::int64_t>(values.size());
  SHARDLAB_ASSIGN_OR_RETURN(Tensor t, Tensor::view_of(slots, DType::kF32, shape, 0, "scalars"));
  SHARDLAB_RETURN_IF_ERROR(from_host(std::as_bytes(std::span<const float>(values)), t, stream));
  return t;
}

Status HpuDevice::run_graph(const GraphSpec& spec, const std::vector<Binding>& bindings, StreamId stream) {
  SHARDLAB_ASSIGN_OR_RETURN(Recipe * recipe, recipe_for(spec));
  const synStreamHandle s = streams_[static_cast<std::size_t>(stream)];
  for (const Binding& b : bindings) {
    const GraphSpec::T& t = spec.tensors[static_cast<std::size_t>(b.tensor)];
    SHARDLAB_CHECK(t.persistent);
    SHARDLAB_CHECK(b.view.dtype() == t.dtype);
    const Storage& storage = *b.view.storage();
    SHARDLAB_RETURN_IF_ERROR(check_launch_tensor(recipe->name, t.name + " (" + b.view.name() + ")", storage.label(),
                                                 b.view.byte_offset(), b.view.nbytes(), storage.nbytes(),
                                                 allocations_->size_at(storage.device_address()),
                                                 recipe->tensor_bytes[static_cast<std::size_t>(b.tensor)]));
  }
  std::uint64_t workspace = 0;
  if (recipe->workspace_bytes > 0) {
    if (!workspace_ || static_cast<std::uint64_t>(workspace_->nbytes()) < recipe->workspace_bytes) {
      workspace_.reset();
      SHARDLAB_ASSIGN_OR_RETURN(workspace_, allocate(static_cast<std::int64_t>(recipe->workspace_bytes),
                                                     MemoryCategory::kOther, "recipe workspace"));
    }
    workspace = workspace_->device_address();
  }
  std::vector<synLaunchTensorInfoExt> infos;
  for (const Binding& b : bindings) {
    const GraphSpec::T& t = spec.tensors[static_cast<std::size_t>(b.tensor)];
    synLaunchTensorInfoExt info{};
    info.tensorName = t.name.c_str();
    info.pTensorAddress = device_address(b.view);
    info.tensorType = DATA_TENSOR;
    const Shape shape = t.shape.empty() ? Shape{1} : t.shape;
    for (std::size_t i = 0; i < shape.size(); ++i) info.tensorSize[i] = static_cast<TSize>(shape[shape.size() - 1 - i]);
    infos.push_back(info);
  }
  const int st = api_.synLaunchExt(s, infos.data(), static_cast<std::uint32_t>(infos.size()), workspace, recipe->handle,
                                   SHARDLAB_SYN_FLAGS_TENSOR_NAME);
  if (st != synSuccess) return synapse_error("synLaunchExt (recipe '" + recipe->name + "')", st);
  ++stats_.launches;
  return Status::ok();
}

// ---- ops ---------------------------------------------------------------------------------
// Shapes inside graphs are the flattened forms the kernels need; the bound views carry
// the bytes. Validation mirrors the cpu backend's contract (device.h).

Status HpuDevice::copy(const Tensor& src, const Tensor& dst, StreamId stream) {
  constexpr std::string_view kOp = "copy";
  SHARDLAB_RETURN_IF_ERROR(check_stream(kOp, stream));
  if (!src.defined() || !dst.defined()) return Status::invalid_argument("copy: an operand is undefined");
  SHARDLAB_RETURN_IF_ERROR(check_launch_view(kOp, src));
  SHARDLAB_RETURN_IF_ERROR(check_launch_view(kOp, dst));
  if (src.dtype() != dst.dtype()) {
    return Status::invalid_argument("copy: " + src.describe() + " and " + dst.describe() +
                                    " have different dtypes (use cast)");
  }
  SHARDLAB_RETURN_IF_ERROR(expect_numel(kOp, dst, src.numel(), "the source's element count"));
  // Across the seam: a host-visible tensor of another device on one side (the contract in device.h).
  const auto bytes_of = [](const Tensor& t) {
    return std::span<std::byte>(t.bytes(), static_cast<std::size_t>(t.nbytes()));
  };
  if (src.storage()->host_visible() && is_device_tensor(dst)) return from_host(bytes_of(src), dst, stream);
  if (is_device_tensor(src) && dst.storage()->host_visible()) return to_host(src, bytes_of(dst), stream);
  SHARDLAB_RETURN_IF_ERROR(check_device_tensor(src, kOp));
  SHARDLAB_RETURN_IF_ERROR(check_device_tensor(dst, kOp));
  if (src.nbytes() == 0 || src.same_view(dst)) return Status::ok();
  if (src.overlaps(dst)) {  // memmove semantics; a DMA engine does not promise them
    return host_op(kOp, stream, {{&src, false}, {&dst, true}},
                   [this](const std::vector<Tensor>& h) { return host_math_.copy(h[0], h[1], kComputeStream); });
  }
  const int st = api_.synMemCopyAsync(streams_[static_cast<std::size_t>(stream)], device_address(src),
                                      static_cast<std::uint64_t>(src.nbytes()), device_address(dst), DRAM_TO_DRAM);
  return st == synSuccess ? Status::ok()
                          : synapse_error("synMemCopyAsync (DRAM_TO_DRAM of " + src.describe() + ")", st);
}

Status HpuDevice::fill(const Tensor& dst, float value, StreamId stream) {
  constexpr std::string_view kOp = "fill";
  SHARDLAB_RETURN_IF_ERROR(check_stream(kOp, stream));
  SHARDLAB_RETURN_IF_ERROR(check_device_tensor(dst, kOp));
  if (dst.numel() == 0) return Status::ok();
  if (dst.dtype() == DType::kI64) {
    return host_op(kOp, stream, {{&dst, true}},
                   [&](const std::vector<Tensor>& h) { return host_math_.fill(h[0], value, kComputeStream); });
  }
  GraphSpec g{"fill"};
  const int out = g.add("out", dst.dtype(), {dst.numel()});
  g.node("constant_" + syn_dtype_suffix(dst.dtype()), {}, {out}, param_bytes(ShardlabConstantParams{value}));
  return run_graph(g, {{out, dst}}, stream);
}

Status HpuDevice::cast(const Tensor& src, const Tensor& dst, StreamId stream) {
  constexpr std::string_view kOp = "cast";
  SHARDLAB_RETURN_IF_ERROR(check_stream(kOp, stream));
  SHARDLAB_RETURN_IF_ERROR(check_device_tensor(src, kOp));
  SHARDLAB_RETURN_IF_ERROR(check_device_tensor(dst, kOp));
  if (src.dtype() == dst.dtype()) return copy(src, dst, stream);  // converts nothing
  if (!is_floating(src.dtype()) || !is_floating(dst.dtype()) || src.numel() == 0 || src.numel() != dst.numel() ||
      src.overlaps(dst)) {
    // Every error case is reported by the cpu backend's checks.
    return host_op(kOp, stream, {{&src, false}, {&dst, true}},
                   [this](const std::vector<Tensor>& h) { return host_math_.cast(h[0], h[1], kComputeStream); });
  }
  GraphSpec g{"cast"};
  const int in = g.add("x", src.dtype(), {src.numel()});
  const int out = g.add("y", dst.dtype(), {dst.numel()});
  g.node("cast_" + syn_dtype_suffix(src.dtype()) + "_to_" + syn_dtype_suffix(dst.dtype()), {in}, {out});
  return run_graph(g, {{in, src}, {out, dst}}, stream);
}

Status HpuDevice::axpy(float alpha, const Tensor& x, const Tensor& y, StreamId stream) {
  constexpr std::string_view kOp = "axpy";
  SHARDLAB_RETURN_IF_ERROR(check_stream(kOp, stream));
  SHARDLAB_RETURN_IF_ERROR(check_operand(kOp, x, DType::kF32));
  SHARDLAB_RETURN_IF_ERROR(check_operand(kOp, y, DType::kF32));
  SHARDLAB_RETURN_IF_ERROR(expect_numel(kOp, y, x.numel(), "x's element count"));
  SHARDLAB_RETURN_IF_ERROR(expect_no_overlap(kOp, y, x, true));
  if (x.numel() == 0) return Status::ok();
  const std::int64_t n = x.numel();
  SHARDLAB_ASSIGN_OR_RETURN(Tensor s, scalars(stream, {alpha}, 1));
  GraphSpec g{"axpy"};
  const int tx = g.add("x", DType::kF32, {n}), ta = g.add("alpha", DType::kF32, {1}),
            tyi = g.add("y_in", DType::kF32, {n}), tyo = g.add("y", DType::kF32, {n});
  const int scaled = g.temp("alpha_x", DType::kF32, {n});
  g.node("mult_fwd_f32", {tx, ta}, {scaled});
  g.node("add_fwd_f32", {tyi, scaled}, {tyo});
  return run_graph(g, {{tx, x}, {ta, s}, {tyi, y}, {tyo, y}}, stream);
}

Status HpuDevice::scale(const Tensor& x, float alpha, StreamId stream) {
  constexpr std::string_view kOp = "scale";
  SHARDLAB_RETURN_IF_ERROR(check_stream(kOp, stream));
  SHARDLAB_RETURN_IF_ERROR(check_operand(kOp, x, DType::kF32));
  if (x.numel() == 0) return Status::ok();
  SHARDLAB_ASSIGN_OR_RETURN(Tensor s, scalars(stream, {alpha}, 1));
  GraphSpec g{"scale"};
  const int in = g.add("x_in", DType::kF32, {x.numel()}), ta = g.add("alpha", DType::kF32, {1}),
            out = g.add("x", DType::kF32, {x.numel()});
  g.node("mult_fwd_f32", {in, ta}, {out});
  return run_graph(g, {{in, x}, {ta, s}, {out, x}}, stream);
}

namespace {

// Shapes of op(a) [M, K] and op(b) [K, N] (the last two dims) checked against c [.., M, N].
Status gemm_shapes(std::string_view op, const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor& c, int nd,
                   std::int64_t* m, std::int64_t* k, std::int64_t* n) {
  for (const Tensor* t : {&a, &b, &c}) {
    if (t->ndim() != nd) {
      return Status::invalid_argument(std::string(op) + ": " + t->describe() + " must be " + std::to_string(nd) + "-D");
    }
  }
  const int r = nd - 2;
  *m = ta ? a.dim(r + 1) : a.dim(r);
  *k = ta ? a.dim(r) : a.dim(r + 1);
  const std::int64_t kb = tb ? b.dim(r + 1) : b.dim(r);
  *n = tb ? b.dim(r) : b.dim(r + 1);
  Shape want = {*m, *n};
  if (nd == 3) want.insert(want.begin(), a.dim(0));
  if (*k != kb || c.shape() != want || (nd == 3 && b.dim(0) != a.dim(0))) {
    return Status::invalid_argument(std::string(op) + ": op(a) of " + a.describe() + " is [" + std::to_string(*m) +
                                    ", " + std::to_string(*k) + "] and op(b) of " + b.describe() + " is [" +
                                    std::to_string(kb) + ", " + std::to_string(*n) + "]; c " + c.describe() +
                                    " must be " + shape_to_string(want));
  }
  for (const Tensor* in : {&a, &b}) {
    if (c.overlaps(*in)) return Status::invalid_argument(std::string(op) + ": c overlaps " + in->describe());
  }
  return Status::ok();
}

}  // namespace

Status HpuDevice::gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c, float alpha,
                       float beta, StreamId stream) {
  constexpr std::string_view kOp = "gemm";
  SHARDLAB_RETURN_IF_ERROR(check_stream(kOp, stream));
  for (const Tensor* t : {&a, &b, &c}) SHARDLAB_RETURN_IF_ERROR(check_operand(kOp, *t, DType::kF32));
  std::int64_t m, k, n;
  SHARDLAB_RETURN_IF_ERROR(gemm_shapes(kOp, a, trans_a, b, trans_b, c, 2, &m, &k, &n));
  if (m == 0 || n == 0) return Status::ok();
  if (k == 0) {
    return host_op(kOp, stream, {{&a, false}, {&b, false}, {&c, true}}, [&](const std::vector<Tensor>& h) {
      return host_math_.gemm(h[0], trans_a, h[1], trans_b, h[2], alpha, beta, kComputeStream);
    });
  }
  SHARDLAB_ASSIGN_OR_RETURN(Tensor s, scalars(stream, {alpha, beta}, 2));
  SHARDLAB_ASSIGN_OR_RETURN(Tensor sa, s.narrow(0, 1));
  SHARDLAB_ASSIGN_OR_RETURN(Tensor sb, s.narrow(1, 1));
  GraphSpec g{"gemm"};
  const int ta_ = g.add("a", DType::kF32, a.shape()), tb_ = g.add("b", DType::kF32, b.shape());
  const int talpha = g.add("alpha", DType::kF32, {1, 1});
  const int prod = g.temp("ab", DType::kF32, {m, n});
  const int tc = g.add("c", DType::kF32, {m, n});
  std::vector<Binding> binds = {{ta_, a}, {tb_, b}, {talpha, sa}};
  g.node("gemm", {ta_, tb_}, {prod}, param_bytes(synGEMMParams{trans_a, trans_b}));
  if (beta == 0.0f) {  // c's old contents are ignored (even NaN): c is not an input
    g.node("mult_fwd_f32", {prod, talpha}, {tc});
  } else {
    const int tci = g.add("c_in", DType::kF32, {m, n}), tbeta = g.add("beta", DType::kF32, {1, 1});
    const int scaled = g.temp("alpha_ab", DType::kF32, {m, n}), cb = g.temp("beta_c", DType::kF32, {m, n});
    g.node("mult_fwd_f32", {prod, talpha}, {scaled});
    g.node("mult_fwd_f32", {tci, tbeta}, {cb});
    g.node("add_fwd_f32", {scaled, cb}, {tc});
    binds.push_back({tci, c});
    binds.push_back({tbeta, sb});
  }
  binds.push_back({tc, c});
  return run_graph(g, binds, stream);
}

Status HpuDevice::batched_gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c,
                               float alpha, float beta, StreamId stream) {
  constexpr std::string_view kOp = "batched_gemm";
  SHARDLAB_RETURN_IF_ERROR(check_stream(kOp, stream));
  for (const Tensor* t : {&a, &b, &c}) SHARDLAB_RETURN_IF_ERROR(check_operand(kOp, *t, DType::kF32));
  std::int64_t m, k, n;
  SHARDLAB_RETURN_IF_ERROR(gemm_shapes(kOp, a, trans_a, b, trans_b, c, 3, &m, &k, &n));
  const std::int64_t batch = a.dim(0);
  if (batch == 0 || m == 0 || n == 0) return Status::ok();
  if (k == 0) {
    return host_op(kOp, stream, {{&a, false}, {&b, false}, {&c, true}}, [&](const std::vector<Tensor>& h) {
      return host_math_.batched_gemm(h[0], trans_a, h[1], trans_b, h[2], alpha, beta, kComputeStream);
    });
  }
  SHARDLAB_ASSIGN_OR_RETURN(Tensor s, scalars(stream, {alpha, beta}, 3));
  SHARDLAB_ASSIGN_OR_RETURN(Tensor sa, s.narrow(0, 1));
  SHARDLAB_ASSIGN_OR_RETURN(Tensor sb, s.narrow(1, 1));
  GraphSpec g{"batched_gemm"};
  const int ta_ = g.add("a", DType::kF32, a.shape()), tb_ = g.add("b", DType::kF32, b.shape());
  const int talpha = g.add("alpha", DType::kF32, {1, 1, 1});
  const int prod = g.temp("ab", DType::kF32, c.shape());
  const int tc = g.add("c", DType::kF32, c.shape());
  std::vector<Binding> binds = {{ta_, a}, {tb_, b}, {talpha, sa}};
  g.node("batch_gemm", {ta_, tb_}, {prod}, param_bytes(synGEMMParams{trans_a, trans_b}));
  if (beta == 0.0f) {
    g.node("mult_fwd_f32", {prod, talpha}, {tc});
  } else {
    const int tci = g.add("c_in", DType::kF32, c.shape()), tbeta = g.add("beta", DType::kF32, {1, 1, 1});
    const int scaled = g.temp("alpha_ab", DType::kF32, c.shape()), cb = g.temp("beta_c", DType::kF32, c.shape());
    g.node("mult_fwd_f32", {prod, talpha}, {scaled});
    g.node("mult_fwd_f32", {tci, tbeta}, {cb});
    g.node("add_fwd_f32", {scaled, cb}, {tc});
    binds.push_back({tci, c});
    binds.push_back({tbeta, sb});
  }
  binds.push_back({tc, c});
  return run_graph(g, binds, stream);
}

Status HpuDevice::add_bias(const Tensor& x, const Tensor& bias, StreamId stream) {
  constexpr std::string_view kOp = "add_bias";
  SHARDLAB_RETURN_IF_ERROR(check_stream(kOp, stream));
  SHARDLAB_RETURN_IF_ERROR(check_operand(kOp, x, DType::kF32));
  SHARDLAB_RETURN_IF_ERROR(check_operand(kOp, bias, DType::kF32));
  if (x.ndim() < 1 || x.dim(-1) != bias.numel()) {
    return Status::invalid_argument("add_bias: last dim of " + x.describe() + " must equal the bias size " +
                                    std::to_string(bias.numel()));
  }
  const std::int64_t f = bias.numel();
  if (f == 0 || x.numel() == 0) return Status::ok();
  const std::int64_t rows = x.numel() / f;
  GraphSpec g{"add_bias"};
  const int in = g.add("x_in", DType::kF32, {rows, f}), tb = g.add("bias", DType::kF32, {1, f}),
            out = g.add("x", DType::kF32, {rows, f});
  g.node("add_fwd_f32", {in, tb}, {out});
  return run_graph(g, {{in, x}, {tb, bias}, {out, x}}, stream);
}

// dbias (+)= the row-order column sums of dy: reduce_sum_fwd_f32 over the rows, then
// add_fwd_f32 into the old value when accumulating (the cpu contract, device.h).
Status HpuDevice::bias_grad(const Tensor& dy, const Tensor& dbias, bool accumulate, StreamId stream) {
  constexpr std::string_view kOp = "bias_grad";
  SHARDLAB_RETURN_IF_ERROR(check_stream(kOp, stream));
  SHARDLAB_RETURN_IF_ERROR(check_bias_grad(kOp, dy, dbias));
  SHARDLAB_RETURN_IF_ERROR(check_operand(kOp, dy, DType::kF32));
  SHARDLAB_RETURN_IF_ERROR(check_operand(kOp, dbias, DType::kF32));
  const std::int64_t f = dbias.numel();
  if (f == 0) return Status::ok();
  const std::int64_t rows = dy.numel() / f;
  if (rows == 0) return accumulate ? Status::ok() : fill(dbias, 0.0f, stream);
  GraphSpec g{"bias_grad"};
  const int ty = g.add("dy", DType::kF32, {rows, f}), tb = g.add("dbias", DType::kF32, {1, f});
  std::vector<Binding> binds = {{ty, dy}, {tb, dbias}};
  const std::string params = param_bytes(ShardlabReductionParams{1});  // the rows (innermost first)
  if (!accumulate) {
    g.node("reduce_sum_fwd_f32", {ty}, {tb}, params);
  } else {
    const int sum = g.temp("sum", DType::kF32, {1, f}), tin = g.add("dbias_in", DType::kF32, {1, f});
    g.node("reduce_sum_fwd_f32", {ty}, {sum}, params);
    g.node("add_fwd_f32", {tin, sum}, {tb});
    binds.push_back({tin, dbias});
  }
  return run_graph(g, binds, stream);
}

namespace {

std::string activation_guid(Activation act, bool backward, std::string* params) {
  const char* dir = backward ? "_bwd_f32" : "_fwd_f32";
  switch (act) {
    case Activation::kRelu: return std::string("relu") + dir;
    case Activation::kTanh: return std::string("tanh") + dir;
    case Activation::kGelu: *params = param_bytes(ShardlabGeluParams{false}); return std::string("gelu") + dir;
    case Activation::kGeluTanh: *params = param_bytes(ShardlabGeluParams{true}); return std::string("gelu") + dir;
  }
  return "?";
}

}  // namespace

Status HpuDevice::activation(Activation act, const Tensor& x, const Tensor& y, StreamId stream) {
  constexpr std::string_view kOp = "activation";
  SHARDLAB_RETURN_IF_ERROR(check_stream(kOp, stream));
  SHARDLAB_RETURN_IF_ERROR(check_operand(kOp, x, DType::kF32));
  SHARDLAB_RETURN_IF_ERROR(check_operand(kOp, y, DType::kF32));
  SHARDLAB_RETURN_IF_ERROR(expect_numel(kOp, y, x.numel(), "x's element count"));
  SHARDLAB_RETURN_IF_ERROR(expect_no_overlap(kOp, y, x, true));
  const std::int64_t n = x.numel();
  if (n == 0) return Status::ok();
  std::string params;
  const std::string guid = activation_guid(act, false, &params);
  GraphSpec g{"activation"};
  const int in = g.add("x", DType::kF32, {n}), out = g.add("y", DType::kF32, {n});
  g.node(guid, {in}, {out}, params);
  return run_graph(g, {{in, x}, {out, y}}, stream);
}

Status HpuDevice::activation_backward(Activation act, const Tensor& x, const Tensor& dy, const Tensor& dx,
                                      StreamId stream) {
  constexpr std::string_view kOp = "activation_backward";
  SHARDLAB_RETURN_IF_ERROR(check_stream(kOp, stream));
  for (const Tensor* t : {&x, &dy, &dx}) SHARDLAB_RETURN_IF_ERROR(check_operand(kOp, *t, DType::kF32));
  SHARDLAB_RETURN_IF_ERROR(expect_numel(kOp, dy, x.numel(), "x's element count"));
  SHARDLAB_RETURN_IF_ERROR(expect_numel(kOp, dx, x.numel(), "x's element count"));
  SHARDLAB_RETURN_IF_ERROR(expect_no_overlap(kOp, dx, dy, true));
  SHARDLAB_RETURN_IF_ERROR(expect_no_overlap(kOp, dx, x, false));
  const std::int64_t n = x.numel();
  if (n == 0) return Status::ok();
  std::string params;
  const std::string guid = activation_guid(act, true, &params);
  GraphSpec g{"activation_backward"};
  const int tdy = g.add("dy", DType::kF32, {n}), tx = g.add("x", DType::kF32, {n}), tdx = g.add("dx", DType::kF32, {n});
  g.node(guid, {tdy, tx}, {tdx}, params);
  return run_graph(g, {{tdy, dy}, {tx, x}, {tdx, dx}}, stream);
}

Status HpuDevice::layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, const Tensor& y,
                             const Tensor& mean, const Tensor& rstd, StreamId stream) {
  constexpr std::string_view kOp = "layer_norm";
  SHARDLAB_RETURN_IF_ERROR(check_stream(kOp, stream));
  for (const Tensor* t : {&x, &gamma, &beta, &y, &mean, &rstd}) {
    SHARDLAB_RETURN_IF_ERROR(check_operand(kOp, *t, DType::kF32));
  }
  if (x.ndim() < 1) return Status::invalid_argument("layer_norm: " + x.describe() + " must have a last dim");
  const std::int64_t h = x.dim(-1), rows = h == 0 ? 0 : x.numel() / h;
  SHARDLAB_RETURN_IF_ERROR(expect_numel(kOp, gamma, h, "gamma is [H]"));
  SHARDLAB_RETURN_IF_ERROR(expect_numel(kOp, beta, h, "beta is [H]"));
  SHARDLAB_RETURN_IF_ERROR(expect_numel(kOp, y, x.numel(), "y has x's shape"));
  SHARDLAB_RETURN_IF_ERROR(expect_numel(kOp, mean, rows, "one mean per row"));
  SHARDLAB_RETURN_IF_ERROR(expect_numel(kOp, rstd, rows, "one rstd per row"));
  SHARDLAB_RETURN_IF_ERROR(expect_no_overlap(kOp, y, x, true));
  for (const Tensor* out : {&y, &mean, &rstd}) {
    for (const Tensor* in : {&gamma, &beta}) SHARDLAB_RETURN_IF_ERROR(expect_no_overlap(kOp, *out, *in, false));
  }
  for (const Tensor* in : {&x, &y}) {
    SHARDLAB_RETURN_IF_ERROR(expect_no_overlap(kOp, mean, *in, false));
    SHARDLAB_RETURN_IF_ERROR(expect_no_overlap(kOp, rstd, *in, false));
  }
  SHARDLAB_RETURN_IF_ERROR(expect_no_overlap(kOp, mean, rstd, false));
  if (rows == 0 || h == 0) return Status::ok();
  GraphSpec g{"layer_norm"};
  const int tx = g.add("x", DType::kF32, {rows, h}), tb = g.add("beta", DType::kF32, {h}),
            tg = g.add("gamma", DType::kF32, {h});
  const int ty = g.add("y", DType::kF32, {rows, h}), tm = g.add("mean", DType::kF32, {rows}),
            tr = g.add("rstd", DType::kF32, {rows});
  g.node("layer_norm_fwd_f32", {tx, tb, tg}, {ty, tm, tr}, layer_norm_params(eps));
  return run_graph(g, {{tx, x}, {tb, beta}, {tg, gamma}, {ty, y}, {tm, mean}, {tr, rstd}}, stream);
}

Status HpuDevice::layer_norm_backward(const Tensor& x, const Tensor& dy, const Tensor& mean, const Tensor& rstd,
                                      const Tensor& gamma, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,
                                      bool accumulate, StreamId stream) {
  constexpr std::string_view kOp = "layer_norm_backward";
  SHARDLAB_RETURN_IF_ERROR(check_stream(kOp, stream));
  for (const Tensor* t : {&x, &dy, &mean, &rstd, &gamma, &dx, &dgamma, &dbeta}) {
    SHARDLAB_RETURN_IF_ERROR(check_operand(kOp, *t, DType::kF32));
  }
  if (x.ndim() < 1) return Status::invalid_argument("layer_norm_backward: " + x.describe() + " must have a last dim");
  const std::int64_t h = x.dim(-1), rows = h == 0 ? 0 : x.numel() / h;
  SHARDLAB_RETURN_IF_ERROR(expect_numel(kOp, dy, x.numel(), "dy has x's shape"));
  SHARDLAB_RETURN_IF_ERROR(expect_numel(kOp, dx, x.numel(), "dx has x's shape"));
  SHARDLAB_RETURN_IF_ERROR(expect_numel(kOp, mean, rows, "one mean per row"));
  SHARDLAB_RETURN_IF_ERROR(expect_numel(kOp, rstd, rows, "one rstd per row"));
  for (const Tensor* t : {&gamma, &dgamma, &dbeta}) SHARDLAB_RETURN_IF_ERROR(expect_numel(kOp, *t, h, "[H]"));
  SHARDLAB_RETURN_IF_ERROR(expect_no_overlap(kOp, dx, dy, true));
  for (const Tensor* in : {&x, &mean, &rstd, &gamma}) SHARDLAB_RETURN_IF_ERROR(expect_no_overlap(kOp, dx, *in, false));
  for (const Tensor* out : {&dgamma, &dbeta}) {
    for (const Tensor* other : {&x, &dy, &mean, &rstd, &gamma, &dx}) {
      SHARDLAB_RETURN_IF_ERROR(expect_no_overlap(kOp, *out, *other, false));
    }
  }
  SHARDLAB_RETURN_IF_ERROR(expect_no_overlap(kOp, dgamma, dbeta, false));
  if (h == 0) return Status::ok();
  if (rows == 0) {
    return host_op(kOp, stream,
                   {{&x, false},
                    {&dy, false},
                    {&mean, false},
                    {&rstd, false},
                    {&gamma, false},
                    {&dx, true},
                    {&dgamma, true},
                    {&dbeta, true}},
                   [&](const std::vector<Tensor>& h) {
                     return host_math_.layer_norm_backward(h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7], accumulate,
                                                           kComputeStream);
                   });
  }
  GraphSpec g{"layer_norm_backward"};
  const int tx = g.add("x", DType::kF32, {rows, h}), tdy = g.add("dy", DType::kF32, {rows, h}),
            tm = g.add("mean", DType::kF32, {rows}), tr = g.add("rstd", DType::kF32, {rows}),
            tg = g.add("gamma", DType::kF32, {h});
  const int tdx = g.add("dx", DType::kF32, {rows, h}), tdb = g.add("dbeta", DType::kF32, {h}),
            tdg = g.add("dgamma", DType::kF32, {h});
  std::vector<Binding> binds = {{tx, x},     {tdy, dy}, {tm, mean},   {tr, rstd},
                                {tg, gamma}, {tdx, dx}, {tdb, dbeta}, {tdg, dgamma}};
  const std::string params = layer_norm_params(0.0f);
  if (!accumulate) {
    g.node("layer_norm_bwd_f32", {tx, tdy, tm, tr, tg}, {tdx, tdb, tdg}, params);
  } else {
    const int nb = g.temp("dbeta_step", DType::kF32, {h}), ng = g.temp("dgamma_step", DType::kF32, {h});
    const int tdbi = g.add("dbeta_in", DType::kF32, {h}), tdgi = g.add("dgamma_in", DType::kF32, {h});
    g.node("layer_norm_bwd_f32", {tx, tdy, tm, tr, tg}, {tdx, nb, ng}, params);
    g.node("add_fwd_f32", {tdbi, nb}, {tdb});
    g.node("add_fwd_f32", {tdgi, ng}, {tdg});
    binds.push_back({tdbi, dbeta});
    binds.push_back({tdgi, dgamma});
  }
  return run_graph(g, binds, stream);
}

// The cpu contract composed from public kernels: logits = max(scale·s + (1 − mask)·lowest,
// lowest) elementwise (mult, sub, mult, add, max, each rounded like the cpu's expression),
// then softmax_fwd_f32 over the last dim.
Status HpuDevice::attention_softmax(const Tensor& scores, const Tensor& attention_mask, float scale,
                                    const Tensor& probs, StreamId stream) {
  constexpr std::string_view kOp = "attention_softmax";
  SHARDLAB_RETURN_IF_ERROR(check_stream(kOp, stream));
  SHARDLAB_RETURN_IF_ERROR(check_attention_softmax(kOp, scores, attention_mask, probs));
  for (const Tensor* t : {&scores, &attention_mask, &probs}) {
    SHARDLAB_RETURN_IF_ERROR(check_operand(kOp, *t, DType::kF32));
  }
  if (scores.numel() == 0) return Status::ok();
  const Shape shape = scores.shape();
  const std::int64_t b = shape[0], tk = shape[3];
  GraphSpec g{"attention_softmax"};
  const int ts = g.add("scores", DType::kF32, shape), tm = g.add("mask", DType::kF32, {b, 1, 1, tk}),
            tp = g.add("probs", DType::kF32, shape), c_scale = g.add("scale", DType::kF32, ones(4)),
            c_one = g.add("one", DType::kF32, ones(4)), c_low = g.add("lowest", DType::kF32, ones(4));
  const int scaled = g.temp("scaled", DType::kF32, shape), keep = g.temp("masked_out", DType::kF32, {b, 1, 1, tk}),
            bias = g.temp("mask_bias", DType::kF32, {b, 1, 1, tk}), sum = g.temp("biased", DType::kF32, shape),
            logits = g.temp("logits", DType::kF32, shape);
  g.node("mult_fwd_f32", {c_scale, ts}, {scaled});
  g.node("sub_fwd_f32", {c_one, tm}, {keep});
  g.node("mult_fwd_f32", {keep, c_low}, {bias});
  g.node("add_fwd_f32", {scaled, bias}, {sum});
  g.node("max_fwd_f32", {sum, c_low}, {logits});
  g.node("softmax_fwd_f32", {logits}, {tp}, param_bytes(ShardlabSoftmaxParams{0}));
  SHARDLAB_ASSIGN_OR_RETURN(Tensor s, scalars(stream, {scale, 1.0f, std::numeric_limits<float>::lowest()}, 4));
  std::vector<Binding> binds = {{ts, scores}, {tm, attention_mask}, {tp, probs}};
  for (const int id : {c_scale, c_one, c_low}) {
    SHARDLAB_ASSIGN_OR_RETURN(Tensor one, s.narrow(id - c_scale, 1));
    binds.push_back({id, one});
  }
  return run_graph(g, binds, stream);
}

// softmax_bwd_f32 (y = probs, dy = dprobs) gives p·(dp − d), then mult_fwd_f32 by scale.
Status HpuDevice::attention_softmax_backward(const Tensor& probs, const Tensor& dprobs, float scale,
                                             const Tensor& dscores, StreamId stream) {
  constexpr std::string_view kOp = "attention_softmax_backward";
  SHARDLAB_RETURN_IF_ERROR(check_stream(kOp, stream));
  std::int64_t rows, cols;
  SHARDLAB_RETURN_IF_ERROR(check_attention_softmax_backward(kOp, probs, dprobs, dscores, &rows, &cols));
  for (const Tensor* t : {&probs, &dprobs, &dscores}) SHARDLAB_RETURN_IF_ERROR(check_operand(kOp, *t, DType::kF32));
  if (rows == 0 || cols == 0) return Status::ok();
  GraphSpec g{"attention_softmax_backward"};
  const int tp = g.add("probs", DType::kF32, {rows, cols}), tdp = g.add("dprobs", DType::kF32, {rows, cols}),
            tds = g.add("dscores", DType::kF32, {rows, cols}), c_scale = g.add("scale", DType::kF32, {1, 1}),
            t = g.temp("dlogits", DType::kF32, {rows, cols});
  g.node("softmax_bwd_f32", {tp, tdp}, {t}, param_bytes(ShardlabSoftmaxParams{0}));
  g.node("mult_fwd_f32", {c_scale, t}, {tds});
  SHARDLAB_ASSIGN_OR_RETURN(Tensor s, scalars(stream, {scale}, 2));
  return run_graph(g, {{tp, probs}, {tdp, dprobs}, {tds, dscores}, {c_scale, s}}, stream);
}

Status HpuDevice::check_lookup(std::string_view op, const Tensor& table, const Tensor& ids, const Tensor& rows,
                               StreamId stream) {
  SHARDLAB_RETURN_IF_ERROR(check_stream(op, stream));
  SHARDLAB_RETURN_IF_ERROR(check_operand(op, table, DType::kF32));
  SHARDLAB_RETURN_IF_ERROR(check_operand(op, ids, DType::kI64));
  SHARDLAB_RETURN_IF_ERROR(check_operand(op, rows, DType::kF32));
  if (table.ndim() != 2) return Status::invalid_argument(std::string(op) + ": " + table.describe() + " must be 2-D");
  const std::int64_t v = table.dim(0), h = table.dim(1), n = ids.numel();
  if (rows.ndim() < 1 || rows.dim(-1) != h || rows.numel() != n * h) {
    return Status::invalid_argument(std::string(op) + ": " + rows.describe() + " must hold " + std::to_string(n) +
                                    " rows of H = " + std::to_string(h) + " (one per id; the table is " +
                                    shape_to_string(table.shape()) + ")");
  }
  SHARDLAB_RETURN_IF_ERROR(expect_no_overlap(op, rows, table, false));
  SHARDLAB_RETURN_IF_ERROR(expect_no_overlap(op, rows, ids, false));
  SHARDLAB_RETURN_IF_ERROR(expect_no_overlap(op, table, ids, false));
  // The ids are range-checked on the host before anything runs (an out-of-range gather or
  // scatter on the device would touch arbitrary memory).
  SHARDLAB_ASSIGN_OR_RETURN(const std::vector<std::int64_t> id, values_to_host<std::int64_t>(*this, ids, stream));
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t value = id[static_cast<std::size_t>(i)];
    if (value < 0 || value >= v) {
      return Status::invalid_argument(std::string(op) + ": id " + std::to_string(value) + " at index " +
                                      std::to_string(i) + " of " + ids.describe() + " is outside [0, " +
                                      std::to_string(v) + ") (the table has V = " + std::to_string(v) + " rows)");
    }
  }
  return Status::ok();
}

Status HpuDevice::embedding(const Tensor& table, const Tensor& ids, const Tensor& out, StreamId stream) {
  SHARDLAB_RETURN_IF_ERROR(check_lookup("embedding", table, ids, out, stream));
  const std::int64_t v = table.dim(0), h = table.dim(1), n = ids.numel();
  if (n == 0 || h == 0) return Status::ok();
  GraphSpec g{"embedding"};
  const int tt = g.add("table", DType::kF32, {v, h}), ti = g.add("ids", DType::kI64, {n}),
            to = g.add("out", DType::kF32, {n, h});
  g.node("gather_fwd_f32", {tt, ti}, {to}, param_bytes(ShardlabGatherParams{1}));  // axis 1 = V (innermost first)
  return run_graph(g, {{tt, table}, {ti, ids}, {to, out}}, stream);
}

// dtable[ids[n]] += dout[n] in order of n: unsorted_scatter_add_fwd_f32 on the device,
// bound in place (table in and out are one view), after a zero fill without accumulate.
Status HpuDevice::embedding_backward(const Tensor& dout, const Tensor& ids, const Tensor& dtable, bool accumulate,
                                     StreamId stream) {
  constexpr std::string_view kOp = "embedding_backward";
  SHARDLAB_RETURN_IF_ERROR(check_lookup(kOp, dtable, ids, dout, stream));
  const std::int64_t v = dtable.dim(0), h = dtable.dim(1), n = ids.numel();
  if (v == 0 || h == 0) return Status::ok();
  if (!accumulate) SHARDLAB_RETURN_IF_ERROR(fill(dtable, 0.0f, stream));
  if (n == 0) return Status::ok();
  GraphSpec g{"embedding_backward"};
  const int ti = g.add("table_in", DType::kF32, {v, h}), tid = g.add("ids", DType::kI64, {n}),
            tu = g.add("updates", DType::kF32, {n, h}), to = g.add("table", DType::kF32, {v, h});
  g.node("unsorted_scatter_add_fwd_f32", {ti, tid, tu}, {to});
  return run_graph(g, {{ti, dtable}, {tid, ids}, {tu, dout}, {to, dtable}}, stream);
}

// NOTE [HPU cross entropy]
// Cross-entropy composed from public kernels over the rows that count. The labels are
// downloaded and range-checked (like an embedding's ids); the kept rows are gathered
// (gather_fwd_f32), and per row mx = reduce_max_fwd_f32, e = exp_fwd_f32(z − mx),
// sum = reduce_sum_fwd_f32(e) (row order from zero, fp32, as the cpu),
// loss_r = (log(sum) + mx) − z[label] and dz = (e · (1/sum)) · grad_scale, scattered
// (unsorted_scatter_add_fwd_f32) into a zero-filled dlogits, then −grad_scale added at each
// label. The fp64 sum of the loss rows has no TPC form: the m row losses are downloaded and
// summed on the host in row order, and the 4-byte loss_sum uploaded. 0 + x and x + (−g)
// equal the cpu's x and x − g bitwise when grad_scale > 0 (no −0 arises); any other
// grad_scale runs as a host op.
Status HpuDevice::softmax_cross_entropy(const Tensor& logits, const Tensor& labels, const Tensor& loss_sum,
                                        const Tensor& dlogits, float grad_scale, std::int64_t ignore_index,
                                        StreamId stream) {
  constexpr std::string_view kOp = "softmax_cross_entropy";
  SHARDLAB_RETURN_IF_ERROR(check_stream(kOp, stream));
  std::int64_t n, c;
  SHARDLAB_RETURN_IF_ERROR(check_cross_entropy(kOp, logits, labels, loss_sum, dlogits, &n, &c));
  if (!(grad_scale > 0.0f) || std::isinf(grad_scale)) {
    return host_op(kOp, stream, {{&logits, false}, {&labels, false}, {&loss_sum, true}, {&dlogits, true}},
                   [&](const std::vector<Tensor>& h) {
                     return host_math_.softmax_cross_entropy(h[0], h[1], h[2], h[3], grad_scale, ignore_index,
                                                             kComputeStream);
                   });
  }
  for (const Tensor* t : {&logits, &loss_sum, &dlogits}) SHARDLAB_RETURN_IF_ERROR(check_operand(kOp, *t, DType::kF32));
  SHARDLAB_RETURN_IF_ERROR(check_operand(kOp, labels, DType::kI64));
  SHARDLAB_ASSIGN_OR_RETURN(const std::vector<std::int64_t> lab, values_to_host<std::int64_t>(*this, labels, stream));
  SHARDLAB_RETURN_IF_ERROR(check_labels(kOp, lab, c, ignore_index));
  // index = [the kept rows..., each kept row's label element in the flat logits...].
  std::vector<std::int64_t> index;
  for (std::int64_t r = 0; r < n; ++r) {
    if (lab[static_cast<std::size_t>(r)] != ignore_index) index.push_back(r);
  }
  const std::int64_t m = static_cast<std::int64_t>(index.size());
  for (std::int64_t i = 0; i < m; ++i) {
    const std::int64_t row = index[static_cast<std::size_t>(i)];
    index.push_back(row * c + lab[static_cast<std::size_t>(row)]);
  }
  if (n * c > 0) SHARDLAB_RETURN_IF_ERROR(fill(dlogits, 0.0f, stream));
  const float zero = 0.0f;
  if (m == 0) return values_from_host<float>(*this, std::span<const float>(&zero, 1), loss_sum, stream);
  SHARDLAB_ASSIGN_OR_RETURN(Tensor idx, empty({2 * m}, DType::kI64, MemoryCategory::kActivations, "ce.index"));
  SHARDLAB_ASSIGN_OR_RETURN(Tensor rows_idx, idx.narrow(0, m, "ce.rows"));
  SHARDLAB_ASSIGN_OR_RETURN(Tensor at_idx, idx.narrow(m, m, "ce.labels_at"));
  SHARDLAB_ASSIGN_OR_RETURN(Tensor row_loss, empty({m}, DType::kF32, MemoryCategory::kActivations, "ce.row_loss"));
  SHARDLAB_RETURN_IF_ERROR(values_from_host<std::int64_t>(*this, index, idx, stream));
  const std::string over_classes = param_bytes(ShardlabReductionParams{0});  // innermost first
  {
    GraphSpec g{"cross_entropy"};
    const int tz = g.add("logits", DType::kF32, {n, c}), tflat = g.add("logits_flat", DType::kF32, {n * c, 1}),
              tr = g.add("rows", DType::kI64, {m}), tat = g.add("labels_at", DType::kI64, {m}),
              tdz = g.add("dlogits_in", DType::kF32, {n, c}), tdo = g.add("dlogits", DType::kF32, {n, c}),
              tl = g.add("row_loss", DType::kF32, {m, 1}), c_one = g.add("one", DType::kF32, {1, 1}),
              c_gs = g.add("grad_scale", DType::kF32, {1, 1});
    int temps = 0;
    const auto temp = [&](Shape shape) { return g.temp("t" + std::to_string(temps++), DType::kF32, std::move(shape)); };
    const int z = temp({m, c}), mx = temp({m, 1}), shifted = temp({m, c}), e = temp({m, c}), sum = temp({m, 1}),
              inv = temp({m, 1}), lg = temp({m, 1}), lse = temp({m, 1}), picked = temp({m, 1}), p = temp({m, c}),
              dz = temp({m, c});
    g.node("gather_fwd_f32", {tz, tr}, {z}, param_bytes(ShardlabGatherParams{1}));
    g.node("reduce_max_fwd_f32", {z}, {mx}, over_classes);
    g.node("sub_fwd_f32", {z, mx}, {shifted});
    g.node("exp_fwd_f32", {shifted}, {e});
    g.node("reduce_sum_fwd_f32", {e}, {sum}, over_classes);
    g.node("div_fwd_f32", {c_one, sum}, {inv});
    g.node("log_fwd_f32", {sum}, {lg});
    g.node("add_fwd_f32", {lg, mx}, {lse});
    g.node("gather_fwd_f32", {tflat, tat}, {picked}, param_bytes(ShardlabGatherParams{1}));
    g.node("sub_fwd_f32", {lse, picked}, {tl});
    g.node("mult_fwd_f32", {e, inv}, {p});
    g.node("mult_fwd_f32", {p, c_gs}, {dz});
    g.node("unsorted_scatter_add_fwd_f32", {tdz, tr, dz}, {tdo});
    SHARDLAB_ASSIGN_OR_RETURN(Tensor s, scalars(stream, {1.0f, grad_scale}, 2));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor s_one, s.narrow(0, 1));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor s_gs, s.narrow(1, 1));
    SHARDLAB_RETURN_IF_ERROR(run_graph(g,
                                       {{tz, logits},
                                        {tflat, logits},
                                        {tr, rows_idx},
                                        {tat, at_idx},
                                        {tdz, dlogits},
                                        {tdo, dlogits},
                                        {tl, row_loss},
                                        {c_one, s_one},
                                        {c_gs, s_gs}},
                                       stream));
  }
  {
    // A second launch: it writes the label elements of the dlogits the first one wrote.
    GraphSpec g{"cross_entropy_label"};
    const int tin = g.add("dlogits_in", DType::kF32, {n * c, 1}), tout = g.add("dlogits", DType::kF32, {n * c, 1}),
              tat = g.add("labels_at", DType::kI64, {m}), c_zero = g.add("zero", DType::kF32, {1, 1}),
              c_gs = g.add("grad_scale", DType::kF32, {1, 1}), neg = g.temp("minus_grad_scale", DType::kF32, {m, 1});
    g.node("sub_fwd_f32", {c_zero, c_gs}, {neg});
    g.node("unsorted_scatter_add_fwd_f32", {tin, tat, neg}, {tout});
    SHARDLAB_ASSIGN_OR_RETURN(Tensor s, scalars(stream, {0.0f, grad_scale}, 2));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor s_zero, s.narrow(0, 1));
    SHARDLAB_ASSIGN_OR_RETURN(Tensor s_gs, s.narrow(1, 1));
    SHARDLAB_RETURN_IF_ERROR(
        run_graph(g, {{tin, dlogits}, {tout, dlogits}, {tat, at_idx}, {c_zero, s_zero}, {c_gs, s_gs}}, stream));
  }
  // Synchronizes the stream: the launches above are done before idx and row_loss are freed.
  SHARDLAB_ASSIGN_OR_RETURN(const std::vector<float> loss_rows, values_to_host<float>(*this, row_loss, stream));
  double total = 0.0;
  for (const float l : loss_rows) total += static_cast<double>(l);
  const float sum = static_cast<float>(total);
  return values_from_host<float>(*this, std::span<const float>(&sum, 1), loss_sum, stream);
}

Status HpuDevice::transpose_1_2(const Tensor& x, const Tensor& y, StreamId stream) {
  constexpr std::string_view kOp = "transpose_1_2";
  SHARDLAB_RETURN_IF_ERROR(check_stream(kOp, stream));
  SHARDLAB_RETURN_IF_ERROR(check_operand(kOp, x, DType::kF32));
  SHARDLAB_RETURN_IF_ERROR(check_operand(kOp, y, DType::kF32));
  if (x.ndim() != 4 || y.shape() != Shape{x.dim(0), x.dim(2), x.dim(1), x.dim(3)}) {
    return Status::invalid_argument(std::string(kOp) + ": x " + x.describe() + " must be 4-D [P, Q, R, S] and y " +
                                    y.describe() + " must be [P, R, Q, S]");
  }
  if (y.overlaps(x)) return Status::invalid_argument(std::string(kOp) + ": y overlaps x");
  if (x.numel() == 0) return Status::ok();
  synTransposeParams params{};
  // Innermost first: x is {S, R, Q, P}, y is {S, Q, R, P}.
  const std::uint32_t perm[4] = {0, 2, 1, 3};
  for (int i = 0; i < 4; ++i) params.permutation[i] = perm[i];
  params.tensorDim = 4;
  GraphSpec g{"transpose_1_2"};
  const int tx = g.add("x", DType::kF32, x.shape()), ty = g.add("y", DType::kF32, y.shape());
  g.node("transpose", {tx}, {ty}, param_bytes(params));
  return run_graph(g, {{tx, x}, {ty, y}}, stream);
}

Status HpuDevice::multiply(const Tensor& a, const Tensor& b, const Tensor& c, StreamId stream) {
  constexpr std::string_view kOp = "multiply";
  SHARDLAB_RETURN_IF_ERROR(check_stream(kOp, stream));
  for (const Tensor* t : {&a, &b, &c}) SHARDLAB_RETURN_IF_ERROR(check_operand(kOp, *t, DType::kF32));
  SHARDLAB_RETURN_IF_ERROR(expect_numel(kOp, b, a.numel(), "a's element count"));
  SHARDLAB_RETURN_IF_ERROR(expect_numel(kOp, c, a.numel(), "a's element count"));
  if ((c.overlaps(a) && !c.same_view(a)) || (c.overlaps(b) && !c.same_view(b))) {
    return Status::invalid_argument(std::string(kOp) + ": c partially overlaps an input");
  }
  const std::int64_t n = a.numel();
  if (n == 0) return Status::ok();
  GraphSpec g{"multiply"};
  const int ta = g.add("a", DType::kF32, {n}), tb = g.add("b", DType::kF32, {n}), tc = g.add("c", DType::kF32, {n});
  g.node("mult_fwd_f32", {ta, tb}, {tc});
  return run_graph(g, {{ta, a}, {tb, b}, {tc, c}}, stream);
}

// NOTE [HPU optimizer step]
// There is no public fused optimizer kernel, so the update is a graph of elementwise TPC
// kernels (mult_fwd_f32, add_fwd_f32, sub_fwd_f32, div_fwd_f32, sqrt_fwd_f32), one node
// per IEEE operation of the cpu backend's formula in the same order, each rounded to fp32
// (no fused multiply-add): the same bits wherever those kernels round correctly. The
// per-step scalars (beta1, 1 - beta1, bias corrections, lr, decay) are computed on the host
// exactly as the cpu backend computes them and uploaded as 1-element tensors, so one recipe
// serves every step. Masks never reach the device: Optimizer::step runs the update on the
// runs of elements a mask keeps.
Status HpuDevice::optimizer_step(const OptimizerUpdate& update, const Tensor& param, const Tensor& grad,
                                 const Tensor& state0, const Tensor& state1, StreamId stream) {
  constexpr std::string_view kOp = "optimizer_step";
  SHARDLAB_RETURN_IF_ERROR(check_stream(kOp, stream));
  SHARDLAB_RETURN_IF_ERROR(check_optimizer_step(kOp, update, param, grad, state0, state1));
  for (const Tensor* t : {&param, &grad, &state0, &state1}) {
    if (t->defined()) SHARDLAB_RETURN_IF_ERROR(check_device_tensor(*t, kOp));
  }
  const std::int64_t n = param.numel();
  if (n == 0) return Status::ok();
  GraphSpec g{update.kind == OptimizerKind::kAdamW ? "adamw_step" : "sgd_step"};
  std::vector<Binding> binds;
  const auto in = [&](const char* name, const Tensor& t) {
    const int id = g.add(name, DType::kF32, {n});
    binds.push_back({id, t});
    return id;
  };
  const auto out = in;  // an output is bound the same way; in-place ops bind one view twice
  int temps = 0;
  const auto node = [&](const char* guid, int a, int b) {
    const int t = g.temp("t" + std::to_string(temps++), DType::kF32, {n});
    g.node(guid, {a, b}, {t});
    return t;
  };
  std::vector<float> values;
  std::vector<int> scalar_ids;
  const auto scalar = [&](float v) {
    values.push_back(v);
    scalar_ids.push_back(g.add("s" + std::to_string(scalar_ids.size()), DType::kF32, {1}));
    return scalar_ids.back();
  };
  const int p_in = in("p_in", param), gr = in("g", grad);
  if (update.kind == OptimizerKind::kAdamW) {
    // cpu: mi = beta1·m + (1 − beta1)·g; vi = beta2·v + ((1 − beta2)·g)·g;
    //      p' = p·decay − (step_size·mi) / (sqrt(vi) / bc2_sqrt + eps)
    const double bc1 = 1.0 - std::pow(static_cast<double>(update.beta1), static_cast<double>(update.step));
    const double bc2 = 1.0 - std::pow(static_cast<double>(update.beta2), static_cast<double>(update.step));
    const int b1 = scalar(update.beta1), c1 = scalar(1.0f - update.beta1), b2 = scalar(update.beta2),
              c2 = scalar(1.0f - update.beta2), bc2s = scalar(static_cast<float>(std::sqrt(bc2))),
              eps = scalar(update.eps), step_size = scalar(static_cast<float>(update.lr / bc1)),
              decay = scalar(1.0f - update.lr * update.weight_decay);
    const int m_in = in("m_in", state0), v_in = in("v_in", state1);
    const int m_out = out("m", state0), v_out = out("v", state1), p_out = out("p", param);
    // In place: each output is written by the last node that reads its input.
    g.node("add_fwd_f32", {node("mult_fwd_f32", b1, m_in), node("mult_fwd_f32", c1, gr)}, {m_out});
    g.node("add_fwd_f32", {node("mult_fwd_f32", b2, v_in), node("mult_fwd_f32", node("mult_fwd_f32", c2, gr), gr)},
           {v_out});
    const int root = g.temp("sqrt_v", DType::kF32, {n});
    g.node("sqrt_fwd_f32", {v_out}, {root});
    const int denom = node("add_fwd_f32", node("div_fwd_f32", root, bc2s), eps);
    const int step = node("div_fwd_f32", node("mult_fwd_f32", step_size, m_out), denom);
    g.node("sub_fwd_f32", {node("mult_fwd_f32", p_in, decay), step}, {p_out});
  } else {
    // cpu: d = g (+ wd·p); buf = step 1 ? d : momentum·buf + d; d = buf; p' = p − lr·d
    int d = gr;
    if (update.weight_decay != 0.0f)
      d = node("add_fwd_f32", gr, node("mult_fwd_f32", scalar(update.weight_decay), p_in));
    if (state0.defined()) {
      const int buf_out = out("buf", state0);
      if (update.step == 1) {
        g.node("mult_fwd_f32", {d, scalar(1.0f)}, {buf_out});  // x·1 is x exactly, −0 included
      } else {
        const int buf_in = in("buf_in", state0);
        g.node("add_fwd_f32", {node("mult_fwd_f32", scalar(update.momentum), buf_in), d}, {buf_out});
      }
      d = buf_out;
    }
    g.node("sub_fwd_f32", {p_in, node("mult_fwd_f32", scalar(update.lr), d)}, {out("p", param)});
  }
  if (!values.empty()) {
    SHARDLAB_ASSIGN_OR_RETURN(Tensor s, scalars(stream, values, 1));
    for (std::size_t i = 0; i < scalar_ids.size(); ++i) {
      SHARDLAB_ASSIGN_OR_RETURN(Tensor one, s.narrow(static_cast<std::int64_t>(i), 1));
      binds.push_back({scalar_ids[i], one});
    }
  }
  return run_graph(g, binds, stream);
}

// Drawn on the host (NOTE [HPU device memory]): no public kernel reproduces the stream.
Status HpuDevice::dropout_mask(const Tensor& mask, float p, const Rng& base, std::int64_t first_row, std::uint64_t site,
                               StreamId stream) {
  constexpr std::string_view kOp = "dropout_mask";
  SHARDLAB_RETURN_IF_ERROR(check_stream(kOp, stream));
  SHARDLAB_RETURN_IF_ERROR(check_operand(kOp, mask, DType::kF32));
  SHARDLAB_RETURN_IF_ERROR(check_dropout_args(kOp, mask, p, first_row));
  if (mask.numel() == 0) return Status::ok();
  SHARDLAB_ASSIGN_OR_RETURN(std::shared_ptr<Storage> staging, pinned(mask.nbytes(), "dropout mask"));
  draw_dropout_mask(reinterpret_cast<float*>(staging->host_data()), mask.dim(0), mask.numel() / mask.dim(0), p, base,
                    first_row, site);
  SHARDLAB_RETURN_IF_ERROR(
      dma_to_device(stream, staging->host_data(), device_address(mask), mask.nbytes(), mask.describe()));
  keep_until_synchronized(stream, std::move(staging));
  ++stats_.host_fallback_ops;
  return Status::ok();
}

}  // namespace shardlab::runtime::device::hpu
