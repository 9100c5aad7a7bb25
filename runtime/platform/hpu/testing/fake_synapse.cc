// TEST DOUBLE of the Synapse/HCCL subset in synapse_api.h, built only for tests as
// libshardlab_fake_synapse.so. It is NOT a Gaudi emulator: it exists so the hpu backend's
// call sequences, error paths, recipe caching and collectives can be tested on machines
// without a card (load it with SHARDLAB_SYNAPSE_LIB=/path/to/libshardlab_fake_synapse.so).
//
// What it does:
// - "device" memory is host memory; device addresses are host pointers. Allocations are
//   tracked, so launches and copies outside a live allocation fail with synInvalidArgument.
// - streams are in-order queues of commands; a command runs once everything before it on
//   its stream ran and (for waits) the awaited event's stream reached the recorded point.
//   By default queues are drained after every enqueue (an asynchronous device that keeps
//   up); SHARDLAB_FAKE_SYNAPSE_LAZY=1 runs them only on synchronize/query, which makes
//   missing event waits visible.
// - graphs record tensors and nodes; synGraphCompile copies them into a recipe and
//   synLaunchExt executes the nodes in order with the cpu backend's math (CpuDevice),
//   persistent tensors bound by name, intermediates in scratch memory. Only the GUIDs the
//   backend emits are known; others fail synNodeCreate.
// - HCCL: communicators of one rank are local; larger ones are built over MPI (the host
//   process must have initialized MPI): hcclGetUniqueId records the caller's MPI world
//   rank, hcclCommInitRank gathers the members' world ranks at that rank and builds an
//   MPI communicator of them. Collectives run as nonblocking MPI on the stream's turn;
//   reductions all-gather the inputs and reduce them in rank order.
//
// Knobs (environment variables, read on every call so tests can change them):
//   SHARDLAB_FAKE_SYNAPSE_FAIL=call[:status][,call[:status]...]   that call returns the
//       status (default synFail = 26; for hccl* calls the hcclResult_t, default 3).
//   SHARDLAB_FAKE_SYNAPSE_ASYNC_FAIL=hcclAllReduce   the collective is accepted but never
//       completes; the communicator reports hcclRemoteError through hcclCommGetAsyncError.
//   SHARDLAB_FAKE_SYNAPSE_CAPACITY=bytes   device memory (default 1 GiB).
//   SHARDLAB_FAKE_SYNAPSE_MODULES=n        modules present (default 8); 0 = no device.
//   SHARDLAB_FAKE_SYNAPSE_HELD_MODULES=3,5 modules "held by another process".
//   SHARDLAB_FAKE_SYNAPSE_LAZY=1           see above.
//   HCCL_COMM_ID=<anything>                hcclGetUniqueId returns the same id on every rank
//                                          (coordinator: MPI world rank 0), as HCCL does.
// Introspection for tests: shardlab_fake_synapse_log() returns the calls so far, one name
// per line; shardlab_fake_synapse_clear_log() clears it.
#include <mpi.h>
#include <sched.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/comm/communicator.h"
#include "runtime/device/cpu/device.h"
#include "runtime/device/cpu/vmath.h"
#include "runtime/platform/hpu/synapse_api.h"

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

using shardlab::DType;
using shardlab::MemoryCategory;
using shardlab::Shape;
using shardlab::Storage;
using shardlab::Tensor;
namespace cpu = shardlab::runtime::device::cpu;
namespace device = shardlab::runtime::device;
namespace comm = shardlab::runtime::comm;

// ---- knobs -------------------------------------------------------------------------------

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// The status a call must fail with, or -1.
int forced_failure(const char* call, const char* var = "SHARDLAB_FAKE_SYNAPSE_FAIL") {
  const std::string spec = env(var);
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const auto colon = item.find(':');
    const std::string name = item.substr(0, colon);
    if (name != call) continue;
    if (colon == std::string::npos)
      return std::strncmp(call, "hccl", 4) == 0 ? static_cast<int>(hcclInternalError) : static_cast<int>(synFail);
    return std::atoi(item.c_str() + colon + 1);
  }
  return -1;
}

std::int64_t capacity() {
  const std::string v = env("SHARDLAB_FAKE_SYNAPSE_CAPACITY");
  return v.empty() ? (std::int64_t{1} << 30) : std::atoll(v.c_str());
}

int module_count() {
  const std::string v = env("SHARDLAB_FAKE_SYNAPSE_MODULES");
  return v.empty() ? 8 : std::atoi(v.c_str());
}

bool module_held(std::uint32_t module) {
  std::stringstream ss(env("SHARDLAB_FAKE_SYNAPSE_HELD_MODULES"));
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty() && static_cast<std::uint32_t>(std::atoi(item.c_str())) == module) return true;
  }
  return false;
}

bool lazy() { return env("SHARDLAB_FAKE_SYNAPSE_LAZY") == "1"; }

// ---- state -------------------------------------------------------------------------------

struct Stream;

struct Event {
  Stream* stream = nullptr;
  std::uint64_t target = 0;  // done when stream->completed >= target
};

struct Stream {
  std::deque<std::function<bool()>> queue;  // a command returns true once complete
  std::uint64_t enqueued = 0;
  std::uint64_t completed = 0;
  bool running = false;  // inside progress(): a cycle of waits must not recurse forever
};

struct GraphTensor {
  std::string name;
  synDataType dtype = syn_type_na;
  std::vector<TSize> sizes;  // innermost first
  bool persistent = false;
};

struct Node {
  std::string guid;
  std::vector<int> in, out;
  std::string params;
};

struct Graph {
  std::vector<GraphTensor> tensors;
  std::vector<Node> nodes;
};

struct Comm {
  int rank = 0;
  int nranks = 1;
  MPI_Comm mpi = MPI_COMM_NULL;
  bool aborted = false;
  hcclResult_t async_error = hcclSuccess;
};

struct State {
  std::recursive_mutex mu;
  bool initialized = false;
  std::set<std::uint32_t> acquired_modules;
  std::map<std::uint64_t, std::int64_t> device_allocations;
  std::int64_t device_used = 0;
  std::set<void*> host_allocations;
  std::set<Stream*> streams;
  std::vector<std::string> log;
  std::map<synTensor, std::pair<Graph*, int>> tensor_of;  // handle → (graph, index)
  std::vector<std::unique_ptr<Comm>> comms;               // never freed: queued commands may point at them
  int next_unique_id = 1;
  cpu::CpuDevice math{device::DeviceId{"cpu", device::DeviceId::kNoIndex}};
};

State& state() {
  static State* s = new State();  // test double: process-wide like the real library
  return *s;
}

void log_call(const char* name) { state().log.emplace_back(name); }

#define FAKE_ENTER(name)                                  \
  std::lock_guard<std::recursive_mutex> lock(state().mu); \
  log_call(#name);                                        \
  if (int f = forced_failure(#name); f >= 0) return static_cast<decltype(name(FAKE_ARGS))>(f)

// ---- stream execution ---------------------------------------------------------------------

void progress(Stream* s) {
  if (s->running) return;  // a cycle of waits: leave it (a real device would hang)
  s->running = true;
  while (!s->queue.empty()) {
    if (!s->queue.front()()) break;
    s->queue.pop_front();
    ++s->completed;
  }
  s->running = false;
}

void progress_all() {
  for (int round = 0; round < 4; ++round) {
    for (Stream* s : state().streams) progress(s);
  }
}

void enqueue(Stream* s, std::function<bool()> command) {
  s->queue.push_back(std::move(command));
  ++s->enqueued;
  if (!lazy()) progress_all();
}

bool event_done(const Event* e) {
  if (e->stream == nullptr) return true;
  if (lazy())
    progress(e->stream);
  else
    progress_all();
  return e->stream->completed >= e->target;
}

// Device addresses carry Gaudi2's DRAM base (0x1001000000000000) as a tag over the host
// allocation that backs them: non-canonical on x86-64, so a host read or write of device
// memory faults at once in tests instead of silently working; the double strips the tag
// where the "device" (DMA, kernels, HCCL) touches the bytes.
constexpr std::uint64_t kDramTag = 0x1001000000000000ULL;
std::uint64_t tagged(void* p) { return kDramTag | reinterpret_cast<std::uint64_t>(p); }
void* untagged(std::uint64_t a) { return reinterpret_cast<void*>(a & ~kDramTag); }
template <typename T>
T* untagged(T* p) {
  return reinterpret_cast<T*>(reinterpret_cast<std::uint64_t>(p) & ~kDramTag);
}

bool inside_device_memory(std::uint64_t address, std::uint64_t size) {
  auto& allocs = state().device_allocations;
  auto it = allocs.upper_bound(address);
  if (it == allocs.begin()) return false;
  --it;
  return address + size <= it->first + static_cast<std::uint64_t>(it->second);
}

// ---- math helpers ------------------------------------------------------------------------

DType dtype_of(synDataType t) {
  switch (t) {
    case syn_type_bf16: return DType::kBF16;
    case syn_type_fp16: return DType::kF16;
    case syn_type_int64: return DType::kI64;
    default: return DType::kF32;
  }
}

Tensor wrap(std::byte* p, const GraphTensor& t) {
  Shape shape;
  std::int64_t numel = 1;
  for (auto it = t.sizes.rbegin(); it != t.sizes.rend(); ++it) {
    shape.push_back(static_cast<std::int64_t>(*it));
    numel *= static_cast<std::int64_t>(*it);
  }
  const DType dt = dtype_of(t.dtype);
  auto storage = std::make_shared<Storage>(p, reinterpret_cast<std::uint64_t>(p),
                                           numel * static_cast<std::int64_t>(shardlab::element_size(dt)),
                                           MemoryCategory::kOther, t.name, "fake", nullptr);
  return *Tensor::view_of(storage, dt, shape, 0, t.name);
}

// out = a (op) b with size-1 dims of either input broadcast (fp32), op one of + − × ÷,
// each rounded to fp32 (IEEE, no fused multiply-add), or 'M': max as (a < b ? b : a), so
// a NaN in a propagates and a NaN in b does not (std::max's rule).
void broadcast_binary(const Tensor& a, const Tensor& b, const Tensor& out, char op) {
  const int nd = out.ndim();
  std::vector<std::int64_t> idx(static_cast<std::size_t>(nd), 0);
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* po = out.data<float>();
  for (std::int64_t i = 0; i < out.numel(); ++i) {
    std::int64_t ia = 0, ib = 0;
    for (int d = 0; d < nd; ++d) {
      ia = ia * a.dim(d) + (a.dim(d) == 1 ? 0 : idx[static_cast<std::size_t>(d)]);
      ib = ib * b.dim(d) + (b.dim(d) == 1 ? 0 : idx[static_cast<std::size_t>(d)]);
    }
    const float x = pa[ia], y = pb[ib];
    po[i] = op == '+' ? x + y : op == '-' ? x - y : op == '*' ? x * y : op == '/' ? x / y : (x < y ? y : x);
    for (int d = nd - 1; d >= 0; --d) {
      if (++idx[static_cast<std::size_t>(d)] < out.dim(d)) break;
      idx[static_cast<std::size_t>(d)] = 0;
    }
  }
}

// reduce_sum_fwd_f32 / reduce_max_fwd_f32 of a 2-D tensor over `dim` (innermost first:
// 0 = along a row, 1 = down a column), kept as a size-1 dim. Our reading of the kernels'
// order: sequential in index order; the sum starts from +0 in fp32, the max from the first
// element with std::max's NaN rule. False for other ranks or dims.
bool reduce(const Tensor& in, const Tensor& out, unsigned dim, bool max) {
  if (in.ndim() != 2 || dim > 1) return false;
  const std::int64_t outer = in.dim(0), inner = in.dim(1);
  const std::int64_t count = dim == 0 ? inner : outer, lines = dim == 0 ? outer : inner;
  if (out.numel() != lines || count == 0) return false;
  const float* x = in.data<float>();
  float* y = out.data<float>();
  for (std::int64_t l = 0; l < lines; ++l) {
    const auto at = [&](std::int64_t k) { return dim == 0 ? x[l * inner + k] : x[k * inner + l]; };
    float acc = max ? at(0) : 0.0f;
    for (std::int64_t k = max ? 1 : 0; k < count; ++k) acc = max ? std::max(acc, at(k)) : acc + at(k);
    y[l] = acc;
  }
  return true;
}

// softmax_fwd_f32 / softmax_bwd_f32 along the innermost dim (the only `dim` supported).
// Our reading: forward y = exp(x − mx) · fp32(1 / Σ) (exp: vmath.h's exp_nonpositive) with mx folded from the lowest
// finite float and Σ summed in fp64 in index order; backward dx = y · (dy − fp32(Σ y·dy)), the dot in fp64. (The cpu
// backend's attention softmax contract; hardware sums differently, within the hpu label's tolerance.)
void softmax_rows(const Tensor& x, const Tensor& y) {
  const std::int64_t cols = x.dim(-1), rows = cols == 0 ? 0 : x.numel() / cols;
  const float* in = x.data<float>();
  float* out = y.data<float>();
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* row = in + r * cols;
    float* orow = out + r * cols;
    float mx = std::numeric_limits<float>::lowest();
    for (std::int64_t j = 0; j < cols; ++j) mx = std::max(mx, row[j]);
    for (std::int64_t j = 0; j < cols; ++j) orow[j] = row[j] - mx;
    device::cpu::exp_nonpositive(orow, orow, cols);  // the cpu backend's e^y (vmath.h)
    double sum = 0.0;
    for (std::int64_t j = 0; j < cols; ++j) sum += orow[j];
    const float inv = static_cast<float>(1.0 / sum);
    for (std::int64_t j = 0; j < cols; ++j) orow[j] *= inv;
  }
}

void softmax_backward_rows(const Tensor& y, const Tensor& dy, const Tensor& dx) {
  const std::int64_t cols = y.dim(-1), rows = cols == 0 ? 0 : y.numel() / cols;
  const float* p = y.data<float>();
  const float* dp = dy.data<float>();
  float* out = dx.data<float>();
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t off = r * cols;
    double dot = 0.0;
    for (std::int64_t j = 0; j < cols; ++j) dot += static_cast<double>(p[off + j]) * dp[off + j];
    const float d = static_cast<float>(dot);
    for (std::int64_t j = 0; j < cols; ++j) out[off + j] = p[off + j] * (dp[off + j] - d);
  }
}

// out[j] = in[i] where out dim k (innermost first) is in dim perm[k].
void permute(const Tensor& in, const Tensor& out, const synTransposeParams& p) {
  const int nd = static_cast<int>(p.tensorDim);
  std::vector<std::int64_t> in_sizes(static_cast<std::size_t>(nd)), in_strides(static_cast<std::size_t>(nd));
  for (int k = 0; k < nd; ++k) in_sizes[static_cast<std::size_t>(k)] = in.dim(nd - 1 - k);
  std::int64_t stride = 1;
  for (int k = 0; k < nd; ++k) {
    in_strides[static_cast<std::size_t>(k)] = stride;
    stride *= in_sizes[static_cast<std::size_t>(k)];
  }
  std::vector<std::int64_t> out_sizes(static_cast<std::size_t>(nd));
  for (int k = 0; k < nd; ++k) out_sizes[static_cast<std::size_t>(k)] = in_sizes[p.permutation[k]];
  const std::size_t es = shardlab::element_size(in.dtype());
  std::vector<std::int64_t> idx(static_cast<std::size_t>(nd), 0);
  for (std::int64_t j = 0; j < out.numel(); ++j) {
    std::int64_t src = 0;
    for (int k = 0; k < nd; ++k) src += idx[static_cast<std::size_t>(k)] * in_strides[p.permutation[k]];
    std::memcpy(out.bytes() + j * static_cast<std::int64_t>(es), in.bytes() + src * static_cast<std::int64_t>(es), es);
    for (int k = 0; k < nd; ++k) {
      if (++idx[static_cast<std::size_t>(k)] < out_sizes[static_cast<std::size_t>(k)]) break;
      idx[static_cast<std::size_t>(k)] = 0;
    }
  }
}

bool known_guid(const std::string& g) {
  static const std::set<std::string> kKnown = {"gemm",
                                               "batch_gemm",
                                               "mult_fwd_f32",
                                               "add_fwd_f32",
                                               "sub_fwd_f32",
                                               "div_fwd_f32",
                                               "sqrt_fwd_f32",
                                               "max_fwd_f32",
                                               "exp_fwd_f32",
                                               "log_fwd_f32",
                                               "reduce_sum_fwd_f32",
                                               "reduce_max_fwd_f32",
                                               "softmax_fwd_f32",
                                               "softmax_bwd_f32",
                                               "unsorted_scatter_add_fwd_f32",
                                               "relu_fwd_f32",
                                               "relu_bwd_f32",
                                               "gelu_fwd_f32",
                                               "gelu_bwd_f32",
                                               "tanh_fwd_f32",
                                               "tanh_bwd_f32",
                                               "layer_norm_fwd_f32",
                                               "layer_norm_bwd_f32",
                                               "transpose",
                                               "gather_fwd_f32",
                                               "constant_f32",
                                               "constant_bf16",
                                               "constant_f16",
                                               "cast_f32_to_bf16",
                                               "cast_bf16_to_f32",
                                               "cast_f32_to_f16",
                                               "cast_f16_to_f32",
                                               "cast_bf16_to_f16",
                                               "cast_f16_to_bf16"};
  return kKnown.count(g) != 0;
}

device::Activation activation_of(const std::string& guid, const std::string& params) {
  if (guid.rfind("relu", 0) == 0) return device::Activation::kRelu;
  if (guid.rfind("tanh", 0) == 0) return device::Activation::kTanh;
  ShardlabGeluParams p{};
  std::memcpy(&p, params.data(), std::min(params.size(), sizeof p));
  return p.approximation ? device::Activation::kGeluTanh : device::Activation::kGelu;
}

// Runs one node; false on a math error (reported as a failed launch).
bool run_node(const Node& n, const std::vector<Tensor>& t) {
  auto& math = state().math;
  auto in = [&](int i) -> const Tensor& { return t[static_cast<std::size_t>(n.in[static_cast<std::size_t>(i)])]; };
  auto out = [&](int i) -> const Tensor& { return t[static_cast<std::size_t>(n.out[static_cast<std::size_t>(i)])]; };
  const std::string& g = n.guid;
  shardlab::Status s;
  if (g == "gemm" || g == "batch_gemm") {
    synGEMMParams p{};
    std::memcpy(&p, n.params.data(), std::min(n.params.size(), sizeof p));
    s = g == "gemm" ? math.gemm(in(0), p.transpose_a, in(1), p.transpose_b, out(0), 1.0f, 0.0f, 0)
                    : math.batched_gemm(in(0), p.transpose_a, in(1), p.transpose_b, out(0), 1.0f, 0.0f, 0);
  } else if (g == "mult_fwd_f32" || g == "add_fwd_f32" || g == "sub_fwd_f32" || g == "div_fwd_f32") {
    broadcast_binary(in(0), in(1), out(0), g[0] == 'm' ? '*' : g[0] == 'a' ? '+' : g[0] == 's' ? '-' : '/');
  } else if (g == "max_fwd_f32") {
    broadcast_binary(in(0), in(1), out(0), 'M');
  } else if (g == "sqrt_fwd_f32" || g == "exp_fwd_f32" || g == "log_fwd_f32") {
    if (in(0).numel() != out(0).numel()) return false;
    const float* x = in(0).data<float>();
    float* y = out(0).data<float>();
    for (std::int64_t i = 0; i < out(0).numel(); ++i) {
      // exp: the cpu backend's e^y where it has one (y <= 0, vmath.h), so a softmax built
      // from these nodes gives the cpu backend's bits; libm's above.
      y[i] = g[0] == 's'   ? std::sqrt(x[i])
             : g[0] == 'l' ? std::log(x[i])
             : x[i] > 0.0f ? std::exp(x[i])
                           : device::cpu::exp_nonpositive_f32(x[i]);
    }
  } else if (g == "reduce_sum_fwd_f32" || g == "reduce_max_fwd_f32") {
    ShardlabReductionParams p{};
    std::memcpy(&p, n.params.data(), std::min(n.params.size(), sizeof p));
    if (!reduce(in(0), out(0), p.reductionDimension, g == "reduce_max_fwd_f32")) return false;
  } else if (g == "softmax_fwd_f32" || g == "softmax_bwd_f32") {
    ShardlabSoftmaxParams p{};
    std::memcpy(&p, n.params.data(), std::min(n.params.size(), sizeof p));
    if (p.dim != 0 || in(0).ndim() < 1) return false;
    if (g == "softmax_fwd_f32") {
      softmax_rows(in(0), out(0));
    } else {
      softmax_backward_rows(in(0), in(1), out(0));
    }
  } else if (g == "unsorted_scatter_add_fwd_f32") {
    // (table, ids, updates) -> table': table' = table, then table'[ids[n]] += updates[n] in
    // order of n (the kernel's order on this double; the contract the runtime relies on).
    if (!out(0).same_view(in(0))) s = math.copy(in(0), out(0), 0);
    if (s.is_ok()) s = math.embedding_backward(in(2), in(1), out(0), /*accumulate=*/true, 0);
  } else if (g == "relu_fwd_f32" || g == "gelu_fwd_f32" || g == "tanh_fwd_f32") {
    s = math.activation(activation_of(g, n.params), in(0), out(0), 0);
  } else if (g == "relu_bwd_f32" || g == "gelu_bwd_f32" || g == "tanh_bwd_f32") {
    s = math.activation_backward(activation_of(g, n.params), in(1), in(0), out(0), 0);
  } else if (g == "layer_norm_fwd_f32") {
    ShardlabLayerNormParams p{};
    std::memcpy(&p, n.params.data(), std::min(n.params.size(), sizeof p));
    s = math.layer_norm(in(0), in(2), in(1), p.eps, out(0), out(1), out(2), 0);
  } else if (g == "layer_norm_bwd_f32") {
    s = math.layer_norm_backward(in(0), in(1), in(2), in(3), in(4), out(0), out(2), out(1), false, 0);
  } else if (g == "transpose") {
    synTransposeParams p{};
    std::memcpy(&p, n.params.data(), std::min(n.params.size(), sizeof p));
    permute(in(0), out(0), p);
  } else if (g == "gather_fwd_f32") {
    s = math.embedding(in(0), in(1), out(0), 0);
  } else if (g.rfind("constant_", 0) == 0) {
    ShardlabConstantParams p{};
    std::memcpy(&p, n.params.data(), std::min(n.params.size(), sizeof p));
    s = math.fill(out(0), p.constant, 0);
  } else if (g.rfind("cast_", 0) == 0) {
    s = math.cast(in(0), out(0), 0);
  } else {
    return false;
  }
  return s.is_ok();
}

// ---- hccl helpers -------------------------------------------------------------------------

constexpr int kBootRequestTag = 31000;
constexpr int kBootReplyTag = 32000;
constexpr int kP2pTag = 7;

struct FakeUniqueId {
  char magic[8];
  int creator_world_rank;
  int sequence;
};

bool mpi_ready() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  return init && !fin;
}

bool hccl_dtype(hcclDataType_t t, DType* out) {
  switch (t) {
    case hcclFloat32: *out = DType::kF32; return true;
    case hcclBfloat16: *out = DType::kBF16; return true;
    case hcclFloat16: *out = DType::kF16; return true;
    case hcclInt64: *out = DType::kI64; return true;
    default: return false;
  }
}

bool hccl_op(hcclRedOp_t op, comm::ReduceOp* out) {
  switch (op) {
    case hcclSum:
    case hcclAvg: *out = comm::ReduceOp::kSum; return true;
    case hcclMax: *out = comm::ReduceOp::kMax; return true;
    case hcclMin: *out = comm::ReduceOp::kMin; return true;
    default: return false;
  }
}

// A collective as a stream command: starts its MPI request on its turn, completes when
// MPI does, then `finish` post-processes (reductions).
struct Collective {
  Comm* comm = nullptr;
  bool never_completes = false;
  bool started = false;
  MPI_Request request = MPI_REQUEST_NULL;
  std::function<int(MPI_Request*)> start;
  std::function<void()> finish;

  bool step() {
    if (comm->aborted) return true;
    if (never_completes) {
      comm->async_error = hcclRemoteError;
      return false;
    }
    if (!started) {
      started = true;
      if (comm->nranks == 1 || !start) {
        if (finish) finish();
        return true;
      }
      if (start(&request) != MPI_SUCCESS) {
        comm->async_error = hcclSystemError;
        return false;
      }
    }
    int done = 0;
    if (MPI_Test(&request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
      comm->async_error = hcclSystemError;
      return false;
    }
    if (!done) return false;
    if (finish) finish();
    return true;
  }
};

hcclResult_t enqueue_collective(const char* call, Comm* c, void* stream, std::shared_ptr<Collective> coll) {
  if (c == nullptr || stream == nullptr) return hcclInvalidArgument;
  if (c->aborted) return hcclInvalidUsage;
  coll->comm = c;
  const std::string async = env("SHARDLAB_FAKE_SYNAPSE_ASYNC_FAIL");
  coll->never_completes = !async.empty() && async == call;
  enqueue(static_cast<Stream*>(stream), [coll] { return coll->step(); });
  return hcclSuccess;
}

// Reduction through an all-gather of every rank's `count_in` elements into scratch, then
// a rank-ordered reduce of the block each output element needs.
hcclResult_t reduction(const char* call, const void* send, void* recv, std::size_t count_in, std::size_t out_offset,
                       std::size_t count_out, hcclDataType_t dtype, hcclRedOp_t op, Comm* c, void* stream) {
  DType dt;
  comm::ReduceOp rop;
  if (!hccl_dtype(dtype, &dt) || !hccl_op(op, &rop)) return hcclInvalidArgument;
  const std::size_t es = shardlab::element_size(dt);
  const std::size_t in_bytes = count_in * es;
  auto coll = std::make_shared<Collective>();
  auto scratch = std::make_shared<std::vector<std::byte>>(in_bytes * static_cast<std::size_t>(c ? c->nranks : 1));
  const int nranks = c ? c->nranks : 1;
  coll->start = [send, in_bytes, scratch, c](MPI_Request* req) {
    return MPI_Iallgather(send, static_cast<int>(in_bytes), MPI_BYTE, scratch->data(), static_cast<int>(in_bytes),
                          MPI_BYTE, c->mpi, req);
  };
  coll->finish = [send, recv, in_bytes, scratch, out_offset, count_out, es, dt, rop, op, nranks] {
    if (nranks == 1) std::memcpy(scratch->data(), send, in_bytes);
    std::vector<std::byte> acc(count_out * es);
    std::memcpy(acc.data(), scratch->data() + out_offset * es, count_out * es);
    for (int r = 1; r < nranks; ++r) {
      comm::reduce_into(dt, rop, acc.data(), scratch->data() + static_cast<std::size_t>(r) * in_bytes + out_offset * es,
                        static_cast<std::int64_t>(count_out));
    }
    if (op == hcclAvg) comm::divide_in_place(dt, acc.data(), static_cast<std::int64_t>(count_out), nranks);
    if (count_out) std::memcpy(recv, acc.data(), count_out * es);
  };
  return enqueue_collective(call, c, stream, coll);
}

}  // namespace

// ---- exported: introspection ----------------------------------------------------------------

FAKE_EXPORT const char* shardlab_fake_synapse_log() {
  static std::string joined;
  std::lock_guard<std::recursive_mutex> lock(state().mu);
  joined.clear();
  for (const std::string& s : state().log) joined += s + "\n";
  return joined.c_str();
}

FAKE_EXPORT void shardlab_fake_synapse_clear_log() {
  std::lock_guard<std::recursive_mutex> lock(state().mu);
  state().log.clear();
}

// ---- exported: Synapse ---------------------------------------------------------------------

#define FAKE_ARGS
FAKE_EXPORT synStatus synInitialize(void) {
  FAKE_ENTER(synInitialize);
  state().initialized = true;
  return synSuccess;
}

FAKE_EXPORT synStatus synDestroy(void) {
  FAKE_ENTER(synDestroy);
  state().initialized = false;
  return synSuccess;
}
#undef FAKE_ARGS

#define FAKE_ARGS nullptr
FAKE_EXPORT synStatus synDeviceGetCount(uint32_t* pCount) {
  FAKE_ENTER(synDeviceGetCount);
  *pCount = static_cast<uint32_t>(module_count());
  return synSuccess;
}
#undef FAKE_ARGS

#define FAKE_ARGS nullptr, 0
FAKE_EXPORT synStatus synDeviceAcquireByModuleId(synDeviceId* pDeviceId, const synModuleId moduleId) {
  FAKE_ENTER(synDeviceAcquireByModuleId);
  if (!state().initialized) return synUninitialized;
  if (static_cast<int>(moduleId) >= module_count()) return synNoDeviceFound;
  if (module_held(moduleId) || state().acquired_modules.count(moduleId)) return synDeviceAlreadyAcquired;
  state().acquired_modules.insert(moduleId);
  *pDeviceId = moduleId;
  return synSuccess;
}
#undef FAKE_ARGS

#define FAKE_ARGS 0
FAKE_EXPORT synStatus synDeviceRelease(synDeviceId deviceId) {
  FAKE_ENTER(synDeviceRelease);
  return state().acquired_modules.erase(deviceId) ? synSuccess : synInvalidArgument;
}
#undef FAKE_ARGS

#define FAKE_ARGS 0, nullptr
FAKE_EXPORT synStatus synDeviceGetInfo(synDeviceId deviceId, synDeviceInfo* info) {
  FAKE_ENTER(synDeviceGetInfo);
  if (!state().acquired_modules.count(deviceId)) return synInvalidArgument;
  std::memset(info, 0, sizeof *info);
  info->dramSize = static_cast<uint64_t>(capacity());
  info->deviceId = deviceId;
  info->deviceType = synDeviceGaudi2;
  return synSuccess;
}
#undef FAKE_ARGS

#define FAKE_ARGS 0, nullptr, nullptr
FAKE_EXPORT synStatus synDeviceGetMemoryInfo(synDeviceId, uint64_t* free, uint64_t* total) {
  FAKE_ENTER(synDeviceGetMemoryInfo);
  *total = static_cast<uint64_t>(capacity());
  *free = static_cast<uint64_t>(capacity() - state().device_used);
  return synSuccess;
}
#undef FAKE_ARGS

#define FAKE_ARGS 0, 0, 0, 0, nullptr
FAKE_EXPORT synStatus synDeviceMalloc(synDeviceId, uint64_t size, uint64_t, uint32_t, uint64_t* buffer) {
  FAKE_ENTER(synDeviceMalloc);
  if (size == 0) return synInvalidArgument;
  if (state().device_used + static_cast<std::int64_t>(size) > capacity()) return synOutOfDeviceMemory;
  void* p = std::aligned_alloc(128, (size + 127) / 128 * 128);
  if (p == nullptr) return synOutOfDeviceMemory;
  *buffer = tagged(p);
  state().device_allocations[*buffer] = static_cast<std::int64_t>(size);
  state().device_used += static_cast<std::int64_t>(size);
  return synSuccess;
}
#undef FAKE_ARGS

#define FAKE_ARGS 0, 0, 0
FAKE_EXPORT synStatus synDeviceFree(synDeviceId, uint64_t buffer, uint32_t) {
  FAKE_ENTER(synDeviceFree);
  auto it = state().device_allocations.find(buffer);
  if (it == state().device_allocations.end()) return synInvalidArgument;
  state().device_used -= it->second;
  state().device_allocations.erase(it);
  std::free(untagged(buffer));
  return synSuccess;
}
#undef FAKE_ARGS

#define FAKE_ARGS 0, 0, 0, nullptr
FAKE_EXPORT synStatus synHostMalloc(synDeviceId, uint64_t size, uint32_t, void** buffer) {
  FAKE_ENTER(synHostMalloc);
  void* p = std::aligned_alloc(64, (size + 63) / 64 * 64);
  if (p == nullptr) return synOutOfHostMemory;
  state().host_allocations.insert(p);
  *buffer = p;
  return synSuccess;
}
#undef FAKE_ARGS

#define FAKE_ARGS 0, nullptr, 0
FAKE_EXPORT synStatus synHostFree(synDeviceId, const void* buffer, uint32_t) {
  FAKE_ENTER(synHostFree);
  void* p = const_cast<void*>(buffer);
  if (!state().host_allocations.erase(p)) return synInvalidArgument;
  std::free(p);
  return synSuccess;
}
#undef FAKE_ARGS

#define FAKE_ARGS nullptr, 0, 0
FAKE_EXPORT synStatus synStreamCreateGeneric(synStreamHandle* pStreamHandle, synDeviceId, uint32_t) {
  FAKE_ENTER(synStreamCreateGeneric);
  Stream* s = new Stream();
  state().streams.insert(s);
  *pStreamHandle = reinterpret_cast<synStreamHandle>(s);
  return synSuccess;
}
#undef FAKE_ARGS

#define FAKE_ARGS nullptr
FAKE_EXPORT synStatus synStreamDestroy(synStreamHandle h) {
  FAKE_ENTER(synStreamDestroy);
  Stream* s = reinterpret_cast<Stream*>(h);
  if (!state().streams.count(s)) return synInvalidArgument;
  if (!s->queue.empty()) return synBusy;
  state().streams.erase(s);
  delete s;
  return synSuccess;
}

FAKE_EXPORT synStatus synStreamSynchronize(synStreamHandle h) {
  FAKE_ENTER(synStreamSynchronize);
  Stream* s = reinterpret_cast<Stream*>(h);
  if (!state().streams.count(s)) return synInvalidArgument;
  for (;;) {
    if (lazy())
      progress(s);
    else
      progress_all();
    if (s->queue.empty()) return synSuccess;
    sched_yield();
  }
}
#undef FAKE_ARGS

#define FAKE_ARGS nullptr, nullptr, 0
FAKE_EXPORT synStatus synStreamWaitEvent(synStreamHandle h, synEventHandle e, uint32_t) {
  FAKE_ENTER(synStreamWaitEvent);
  Stream* s = reinterpret_cast<Stream*>(h);
  if (!state().streams.count(s) || e == nullptr) return synInvalidArgument;
  const Event snapshot = *reinterpret_cast<Event*>(e);  // later records do not affect this wait
  enqueue(s, [snapshot, s] {
    if (snapshot.stream == nullptr) return true;
    if (snapshot.stream != s) progress(snapshot.stream);
    return snapshot.stream->completed >= snapshot.target;
  });
  return synSuccess;
}
#undef FAKE_ARGS

#define FAKE_ARGS nullptr, 0, 0
FAKE_EXPORT synStatus synEventCreate(synEventHandle* pEventHandle, synDeviceId, uint32_t) {
  FAKE_ENTER(synEventCreate);
  *pEventHandle = reinterpret_cast<synEventHandle>(new Event());
  return synSuccess;
}
#undef FAKE_ARGS

#define FAKE_ARGS nullptr
FAKE_EXPORT synStatus synEventDestroy(synEventHandle e) {
  FAKE_ENTER(synEventDestroy);
  delete reinterpret_cast<Event*>(e);
  return synSuccess;
}
#undef FAKE_ARGS

#define FAKE_ARGS nullptr, nullptr
FAKE_EXPORT synStatus synEventRecord(synEventHandle e, synStreamHandle h) {
  FAKE_ENTER(synEventRecord);
  Stream* s = reinterpret_cast<Stream*>(h);
  if (!state().streams.count(s) || e == nullptr) return synInvalidArgument;
  Event* ev = reinterpret_cast<Event*>(e);
  ev->stream = s;
  ev->target = s->enqueued;
  return synSuccess;
}
#undef FAKE_ARGS

#define FAKE_ARGS nullptr
FAKE_EXPORT synStatus synEventQuery(synEventHandle e) {
  FAKE_ENTER(synEventQuery);
  return event_done(reinterpret_cast<Event*>(e)) ? synSuccess : synBusy;
}

FAKE_EXPORT synStatus synEventSynchronize(synEventHandle e) {
  FAKE_ENTER(synEventSynchronize);
  while (!event_done(reinterpret_cast<Event*>(e))) sched_yield();
  return synSuccess;
}
#undef FAKE_ARGS

#define FAKE_ARGS nullptr, 0, 0, 0, HOST_TO_DRAM
FAKE_EXPORT synStatus synMemCopyAsync(synStreamHandle h, uint64_t src, uint64_t size, uint64_t dst, synDmaDir dir) {
  FAKE_ENTER(synMemCopyAsync);
  Stream* s = reinterpret_cast<Stream*>(h);
  if (!state().streams.count(s)) return synInvalidArgument;
  const bool src_dev = dir != HOST_TO_DRAM, dst_dev = dir != DRAM_TO_HOST;
  if ((src_dev && !inside_device_memory(src, size)) || (dst_dev && !inside_device_memory(dst, size))) {
    return synInvalidArgument;
  }
  void* to = dst_dev ? untagged(dst) : reinterpret_cast<void*>(dst);
  const void* from = src_dev ? untagged(src) : reinterpret_cast<const void*>(src);
  enqueue(s, [from, size, to] {
    std::memmove(to, from, size);
    return true;
  });
  return synSuccess;
}
#undef FAKE_ARGS

#define FAKE_ARGS nullptr, synDeviceGaudi2
FAKE_EXPORT synStatus synGraphCreate(synGraphHandle* g, synDeviceType) {
  FAKE_ENTER(synGraphCreate);
  *g = reinterpret_cast<synGraphHandle>(new Graph());
  return synSuccess;
}
#undef FAKE_ARGS

#define FAKE_ARGS nullptr
FAKE_EXPORT synStatus synGraphDestroy(synGraphHandle g) {
  FAKE_ENTER(synGraphDestroy);
  Graph* graph = reinterpret_cast<Graph*>(g);
  std::erase_if(state().tensor_of, [graph](const auto& kv) { return kv.second.first == graph; });
  delete graph;
  return synSuccess;
}
#undef FAKE_ARGS

#define FAKE_ARGS nullptr, nullptr, DATA_TENSOR, nullptr
FAKE_EXPORT synStatus synTensorHandleCreate(synTensor* t, synGraphHandle g, synTensorType, const char* name) {
  FAKE_ENTER(synTensorHandleCreate);
  Graph* graph = reinterpret_cast<Graph*>(g);
  if (graph == nullptr || name == nullptr) return synInvalidArgument;
  for (const GraphTensor& existing : graph->tensors) {
    if (existing.name == name) return static_cast<synStatus>(21);  // synNameIsAlreadyUsed
  }
  graph->tensors.push_back({name, syn_type_na, {}, false});
  auto* handle = reinterpret_cast<synTensor>(new char);
  state().tensor_of[handle] = {graph, static_cast<int>(graph->tensors.size()) - 1};
  *t = handle;
  return synSuccess;
}
#undef FAKE_ARGS

namespace {
GraphTensor* tensor_of(synTensor t) {
  auto it = state().tensor_of.find(t);
  if (it == state().tensor_of.end()) return nullptr;
  return &it->second.first->tensors[static_cast<std::size_t>(it->second.second)];
}
}  // namespace

#define FAKE_ARGS nullptr, nullptr, synGeometrySizes
FAKE_EXPORT synStatus synTensorSetGeometry(synTensor t, const synTensorGeometry* geometry, synGeometryType) {
  FAKE_ENTER(synTensorSetGeometry);
  GraphTensor* gt = tensor_of(t);
  if (gt == nullptr || geometry->dims == 0 || geometry->dims > SHARDLAB_HABANA_DIM_MAX) return synInvalidArgument;
  gt->sizes.assign(geometry->sizes, geometry->sizes + geometry->dims);
  return synSuccess;
}
#undef FAKE_ARGS

#define FAKE_ARGS nullptr, nullptr
FAKE_EXPORT synStatus synTensorSetDeviceFullLayout(synTensor t, const synTensorDeviceFullLayout* layout) {
  FAKE_ENTER(synTensorSetDeviceFullLayout);
  GraphTensor* gt = tensor_of(t);
  if (gt == nullptr) return synInvalidArgument;
  gt->dtype = layout->deviceDataType;
  return synSuccess;
}
#undef FAKE_ARGS

#define FAKE_ARGS nullptr
FAKE_EXPORT synStatus synTensorDestroy(synTensor t) {
  FAKE_ENTER(synTensorDestroy);
  // The graph keeps its tensor description; only the handle goes.
  state().tensor_of.erase(t);
  delete reinterpret_cast<char*>(t);
  return synSuccess;
}
#undef FAKE_ARGS

#define FAKE_ARGS nullptr, 0, nullptr
FAKE_EXPORT synStatus synSectionCreate(synSectionHandle* s, uint64_t, synGraphHandle) {
  FAKE_ENTER(synSectionCreate);
  *s = reinterpret_cast<synSectionHandle>(new char);
  return synSuccess;
}
#undef FAKE_ARGS

#define FAKE_ARGS nullptr
FAKE_EXPORT synStatus synSectionDestroy(synSectionHandle s) {
  FAKE_ENTER(synSectionDestroy);
  delete reinterpret_cast<char*>(s);
  return synSuccess;
}
#undef FAKE_ARGS

#define FAKE_ARGS nullptr, nullptr, 0
FAKE_EXPORT synStatus synTensorAssignToSection(synTensor t, synSectionHandle, uint64_t offset) {
  FAKE_ENTER(synTensorAssignToSection);
  GraphTensor* gt = tensor_of(t);
  if (gt == nullptr || offset != 0) return synInvalidArgument;
  gt->persistent = true;
  return synSuccess;
}
#undef FAKE_ARGS

#define FAKE_ARGS nullptr, nullptr, nullptr, 0, 0, nullptr, 0, nullptr, nullptr, nullptr, nullptr
FAKE_EXPORT synStatus synNodeCreate(synGraphHandle g, const synTensor* in, const synTensor* out, uint32_t n_in,
                                    uint32_t n_out, const void* params, unsigned params_size, const char* guid,
                                    const char*, const char**, const char**) {
  FAKE_ENTER(synNodeCreate);
  Graph* graph = reinterpret_cast<Graph*>(g);
  if (graph == nullptr || guid == nullptr || !known_guid(guid)) return synInvalidArgument;
  Node node{guid, {}, {}, params ? std::string(static_cast<const char*>(params), params_size) : std::string()};
  for (uint32_t i = 0; i < n_in; ++i) {
    auto it = state().tensor_of.find(in[i]);
    if (it == state().tensor_of.end() || it->second.first != graph) return synInvalidArgument;
    node.in.push_back(it->second.second);
  }
  for (uint32_t i = 0; i < n_out; ++i) {
    auto it = state().tensor_of.find(out[i]);
    if (it == state().tensor_of.end() || it->second.first != graph) return synInvalidArgument;
    node.out.push_back(it->second.second);
  }
  graph->nodes.push_back(std::move(node));
  return synSuccess;
}
#undef FAKE_ARGS

#define FAKE_ARGS nullptr, nullptr, nullptr, nullptr
FAKE_EXPORT synStatus synGraphCompile(synRecipeHandle* r, synGraphHandle g, const char*, const char*) {
  FAKE_ENTER(synGraphCompile);
  Graph* graph = reinterpret_cast<Graph*>(g);
  if (graph == nullptr) return synInvalidArgument;
  for (const GraphTensor& t : graph->tensors) {
    if (t.sizes.empty() || t.dtype == syn_type_na) return synInvalidArgument;
  }
  *r = reinterpret_cast<synRecipeHandle>(new Graph(*graph));
  return synSuccess;
}
#undef FAKE_ARGS

#define FAKE_ARGS nullptr, nullptr
FAKE_EXPORT synStatus synWorkspaceGetSize(uint64_t* size, synRecipeHandle) {
  FAKE_ENTER(synWorkspaceGetSize);
  *size = 256;  // exercises the backend's workspace allocation
  return synSuccess;
}
#undef FAKE_ARGS

#define FAKE_ARGS nullptr, nullptr, 0, 0, nullptr, 0
FAKE_EXPORT synStatus synLaunchExt(synStreamHandle h, const synLaunchTensorInfoExt* infos, uint32_t n,
                                   uint64_t workspace, synRecipeHandle r, uint32_t flags) {
  FAKE_ENTER(synLaunchExt);
  Stream* s = reinterpret_cast<Stream*>(h);
  const Graph* recipe = reinterpret_cast<const Graph*>(r);
  if (!state().streams.count(s) || recipe == nullptr || !(flags & SHARDLAB_SYN_FLAGS_TENSOR_NAME)) {
    return synInvalidArgument;
  }
  if (workspace != 0 && !inside_device_memory(workspace, 256)) return synInvalidArgument;
  std::vector<std::uint64_t> addresses(recipe->tensors.size(), 0);
  for (std::size_t i = 0; i < recipe->tensors.size(); ++i) {
    const GraphTensor& t = recipe->tensors[i];
    if (!t.persistent) continue;
    const synLaunchTensorInfoExt* info = nullptr;
    for (uint32_t k = 0; k < n; ++k) {
      if (infos[k].tensorName != nullptr && t.name == infos[k].tensorName) info = &infos[k];
    }
    if (info == nullptr) return synInvalidArgument;  // an unbound persistent tensor
    std::uint64_t bytes = shardlab::element_size(dtype_of(t.dtype));
    for (std::size_t d = 0; d < t.sizes.size(); ++d) {
      if (info->tensorSize[d] != t.sizes[d]) return synInvalidArgument;
      bytes *= t.sizes[d];
    }
    if (!inside_device_memory(info->pTensorAddress, bytes)) return synInvalidArgument;
    addresses[i] = info->pTensorAddress;
  }
  const Graph graph = *recipe;
  enqueue(s, [graph, addresses] {
    std::vector<std::vector<std::byte>> scratch;
    std::vector<Tensor> tensors;
    for (std::size_t i = 0; i < graph.tensors.size(); ++i) {
      const GraphTensor& t = graph.tensors[i];
      std::byte* p = static_cast<std::byte*>(untagged(addresses[i]));
      if (!t.persistent) {
        std::uint64_t bytes = shardlab::element_size(dtype_of(t.dtype));
        for (TSize d : t.sizes) bytes *= d;
        scratch.emplace_back(bytes + 8);
        p = scratch.back().data();
      }
      tensors.push_back(wrap(p, t));
    }
    for (const Node& node : graph.nodes) {
      if (!run_node(node, tensors)) std::abort();  // the backend validated; a failure here is a fake bug
    }
    return true;
  });
  return synSuccess;
}
#undef FAKE_ARGS

#define FAKE_ARGS nullptr
FAKE_EXPORT synStatus synRecipeDestroy(synRecipeHandle r) {
  FAKE_ENTER(synRecipeDestroy);
  delete reinterpret_cast<Graph*>(r);
  return synSuccess;
}
#undef FAKE_ARGS

// ---- exported: HCCL ------------------------------------------------------------------------

#define FAKE_ARGS nullptr
FAKE_EXPORT hcclResult_t hcclGetUniqueId(hcclUniqueId* id) {
  FAKE_ENTER(hcclGetUniqueId);
  FakeUniqueId u{};
  std::memcpy(u.magic, "SLFAKE1", 8);
  u.creator_world_rank = 0;
  if (mpi_ready()) MPI_Comm_rank(MPI_COMM_WORLD, &u.creator_world_rank);
  u.sequence = state().next_unique_id++;
  // HCCL derives the id from HCCL_COMM_ID on every rank; the double does the same: the
  // coordinator is world rank 0 and the sequence comes from the variable.
  if (const std::string comm_id = env("HCCL_COMM_ID"); !comm_id.empty()) {
    u.creator_world_rank = 0;
    u.sequence = 500 + static_cast<int>(std::hash<std::string>{}(comm_id) % 400);
  }
  std::memset(id, 0, sizeof *id);
  std::memcpy(id->internal, &u, sizeof u);
  id->length = sizeof u;
  return hcclSuccess;
}
#undef FAKE_ARGS

#define FAKE_ARGS nullptr, 0, hcclUniqueId{}, 0
FAKE_EXPORT hcclResult_t hcclCommInitRank(hcclComm_t* out, int nranks, hcclUniqueId id, int rank) {
  FAKE_ENTER(hcclCommInitRank);
  FakeUniqueId u{};
  std::memcpy(&u, id.internal, sizeof u);
  if (std::memcmp(u.magic, "SLFAKE1", 8) != 0 || nranks < 1 || rank < 0 || rank >= nranks) return hcclInvalidArgument;
  state().comms.push_back(std::make_unique<Comm>());
  Comm* c = state().comms.back().get();
  c->rank = rank;
  c->nranks = nranks;
  if (nranks > 1) {
    if (!mpi_ready()) {
      return hcclInvalidUsage;  // the fake needs MPI for more than one rank
    }
    int world_rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    std::vector<int> members(static_cast<std::size_t>(nranks), -1);
    const int req_tag = kBootRequestTag + u.sequence % 1000, rep_tag = kBootReplyTag + u.sequence % 1000;
    if (rank == 0) {
      if (world_rank != u.creator_world_rank) return hcclInvalidUsage;
      members[0] = world_rank;
      for (int i = 1; i < nranks; ++i) {
        int msg[2];
        MPI_Recv(msg, 2, MPI_INT, MPI_ANY_SOURCE, req_tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        if (msg[0] > 0 && msg[0] < nranks) members[static_cast<std::size_t>(msg[0])] = msg[1];
      }
      for (int i = 1; i < nranks; ++i) {
        MPI_Send(members.data(), nranks, MPI_INT, members[static_cast<std::size_t>(i)], rep_tag, MPI_COMM_WORLD);
      }
    } else {
      int msg[2] = {rank, world_rank};
      MPI_Send(msg, 2, MPI_INT, u.creator_world_rank, req_tag, MPI_COMM_WORLD);
      MPI_Recv(members.data(), nranks, MPI_INT, u.creator_world_rank, rep_tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    MPI_Group world_group, group;
    MPI_Comm_group(MPI_COMM_WORLD, &world_group);
    MPI_Group_incl(world_group, nranks, members.data(), &group);
    MPI_Comm_create_group(MPI_COMM_WORLD, group, req_tag, &c->mpi);
    MPI_Group_free(&group);
    MPI_Group_free(&world_group);
  }
  *out = reinterpret_cast<hcclComm_t>(c);
  return hcclSuccess;
}
#undef FAKE_ARGS

#define FAKE_ARGS nullptr
FAKE_EXPORT hcclResult_t hcclCommDestroy(hcclComm_t h) {
  FAKE_ENTER(hcclCommDestroy);
  Comm* c = reinterpret_cast<Comm*>(h);
  if (c == nullptr) return hcclInvalidArgument;
  if (c->mpi != MPI_COMM_NULL && mpi_ready()) MPI_Comm_free(&c->mpi);
  c->aborted = true;  // kept: queued commands may still point at it
  return hcclSuccess;
}

FAKE_EXPORT hcclResult_t hcclCommAbort(hcclComm_t h) {
  FAKE_ENTER(hcclCommAbort);
  Comm* c = reinterpret_cast<Comm*>(h);
  if (c == nullptr) return hcclInvalidArgument;
  c->aborted = true;  // pending MPI requests are abandoned (and their buffers leaked)
  return hcclSuccess;
}
#undef FAKE_ARGS

#define FAKE_ARGS nullptr, nullptr
FAKE_EXPORT hcclResult_t hcclCommGetAsyncError(hcclComm_t h, hcclResult_t* error) {
  FAKE_ENTER(hcclCommGetAsyncError);
  Comm* c = reinterpret_cast<Comm*>(h);
  if (c == nullptr) return hcclInvalidArgument;
  progress_all();
  *error = c->async_error;
  return hcclSuccess;
}
#undef FAKE_ARGS

FAKE_EXPORT const char* hcclGetErrorString(hcclResult_t result) {
  switch (result) {
    case hcclSuccess: return "hcclSuccess";
    case hcclUnhandledSynapseError: return "hcclUnhandledSynapseError";
    case hcclSystemError: return "hcclSystemError";
    case hcclInternalError: return "hcclInternalError";
    case hcclInvalidArgument: return "hcclInvalidArgument";
    case hcclInvalidUsage: return "hcclInvalidUsage";
    case hcclRemoteError: return "hcclRemoteError";
    case hcclInProgress: return "hcclInProgress";
  }
  return "unknown hcclResult_t";
}

#define FAKE_ARGS nullptr, nullptr, 0, hcclFloat32, nullptr, nullptr
FAKE_EXPORT hcclResult_t hcclAllGather(const void* send, void* recv, size_t count, hcclDataType_t dtype, hcclComm_t h,
                                       void* stream) {
  FAKE_ENTER(hcclAllGather);
  send = untagged(send);  // device addresses (see kDramTag)
  recv = untagged(recv);  // device addresses (see kDramTag)
  Comm* c = reinterpret_cast<Comm*>(h);
  DType dt;
  if (c == nullptr || !hccl_dtype(dtype, &dt)) return hcclInvalidArgument;
  const std::size_t bytes = count * shardlab::element_size(dt);
  auto coll = std::make_shared<Collective>();
  const bool in_place = static_cast<const std::byte*>(send) == static_cast<std::byte*>(recv) + c->rank * bytes;
  coll->start = [send, recv, bytes, in_place, c](MPI_Request* req) {
    return MPI_Iallgather(in_place ? MPI_IN_PLACE : send, static_cast<int>(bytes), MPI_BYTE, recv,
                          static_cast<int>(bytes), MPI_BYTE, c->mpi, req);
  };
  if (c->nranks == 1) {
    coll->finish = [send, recv, bytes] {
      if (bytes && send != recv) std::memmove(recv, send, bytes);
    };
  }
  return enqueue_collective("hcclAllGather", c, stream, coll);
}
#undef FAKE_ARGS

#define FAKE_ARGS nullptr, nullptr, 0, hcclFloat32, hcclSum, nullptr, nullptr
FAKE_EXPORT hcclResult_t hcclReduceScatter(const void* send, void* recv, size_t count, hcclDataType_t dtype,
                                           hcclRedOp_t op, hcclComm_t h, void* stream) {
  FAKE_ENTER(hcclReduceScatter);
  send = untagged(send);  // device addresses (see kDramTag)
  recv = untagged(recv);  // device addresses (see kDramTag)
  Comm* c = reinterpret_cast<Comm*>(h);
  if (c == nullptr) return hcclInvalidArgument;
  return reduction("hcclReduceScatter", send, recv, count * static_cast<std::size_t>(c->nranks),
                   count * static_cast<std::size_t>(c->rank), count, dtype, op, c, stream);
}

FAKE_EXPORT hcclResult_t hcclAllReduce(const void* send, void* recv, size_t count, hcclDataType_t dtype, hcclRedOp_t op,
                                       hcclComm_t h, void* stream) {
  FAKE_ENTER(hcclAllReduce);
  send = untagged(send);  // device addresses (see kDramTag)
  recv = untagged(recv);  // device addresses (see kDramTag)
  Comm* c = reinterpret_cast<Comm*>(h);
  if (c == nullptr) return hcclInvalidArgument;
  return reduction("hcclAllReduce", send, recv, count, 0, count, dtype, op, c, stream);
}
#undef FAKE_ARGS

#define FAKE_ARGS nullptr, nullptr, 0, hcclFloat32, 0, nullptr, nullptr
FAKE_EXPORT hcclResult_t hcclBroadcast(const void* send, void* recv, size_t count, hcclDataType_t dtype, int root,
                                       hcclComm_t h, void* stream) {
  FAKE_ENTER(hcclBroadcast);
  send = untagged(send);  // device addresses (see kDramTag)
  recv = untagged(recv);  // device addresses (see kDramTag)
  Comm* c = reinterpret_cast<Comm*>(h);
  DType dt;
  if (c == nullptr || !hccl_dtype(dtype, &dt) || root < 0 || root >= c->nranks) return hcclInvalidArgument;
  const std::size_t bytes = count * shardlab::element_size(dt);
  auto coll = std::make_shared<Collective>();
  const bool is_root = c->rank == root;
  coll->start = [send, recv, bytes, root, is_root, c](MPI_Request* req) {
    if (is_root && send != recv && bytes) std::memmove(recv, send, bytes);
    return MPI_Ibcast(recv, static_cast<int>(bytes), MPI_BYTE, root, c->mpi, req);
  };
  if (c->nranks == 1) {
    coll->finish = [send, recv, bytes] {
      if (bytes && send != recv) std::memmove(recv, send, bytes);
    };
  }
  return enqueue_collective("hcclBroadcast", c, stream, coll);
}
#undef FAKE_ARGS

#define FAKE_ARGS nullptr, 0, hcclFloat32, 0, nullptr, nullptr
FAKE_EXPORT hcclResult_t hcclSend(const void* send, size_t count, hcclDataType_t dtype, int peer, hcclComm_t h,
                                  void* stream) {
  FAKE_ENTER(hcclSend);
  send = untagged(send);  // device addresses (see kDramTag)
  Comm* c = reinterpret_cast<Comm*>(h);
  DType dt;
  if (c == nullptr || !hccl_dtype(dtype, &dt) || peer < 0 || peer >= c->nranks || peer == c->rank) {
    return hcclInvalidArgument;
  }
  const std::size_t bytes = count * shardlab::element_size(dt);
  auto coll = std::make_shared<Collective>();
  coll->start = [send, bytes, peer, c](MPI_Request* req) {
    return MPI_Issend(send, static_cast<int>(bytes), MPI_BYTE, peer, kP2pTag, c->mpi, req);
  };
  return enqueue_collective("hcclSend", c, stream, coll);
}
#undef FAKE_ARGS

#define FAKE_ARGS nullptr, 0, hcclFloat32, 0, nullptr, nullptr
FAKE_EXPORT hcclResult_t hcclRecv(void* recv, size_t count, hcclDataType_t dtype, int peer, hcclComm_t h,
                                  void* stream) {
  FAKE_ENTER(hcclRecv);
  recv = untagged(recv);  // device addresses (see kDramTag)
  Comm* c = reinterpret_cast<Comm*>(h);
  DType dt;
  if (c == nullptr || !hccl_dtype(dtype, &dt) || peer < 0 || peer >= c->nranks || peer == c->rank) {
    return hcclInvalidArgument;
  }
  const std::size_t bytes = count * shardlab::element_size(dt);
  auto coll = std::make_shared<Collective>();
  coll->start = [recv, bytes, peer, c](MPI_Request* req) {
    return MPI_Irecv(recv, static_cast<int>(bytes), MPI_BYTE, peer, kP2pTag, c->mpi, req);
  };
  return enqueue_collective("hcclRecv", c, stream, coll);
}
#undef FAKE_ARGS
