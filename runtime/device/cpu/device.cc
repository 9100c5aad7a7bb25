#include "runtime/device/cpu/device.h"

#include "runtime/device/cpu/gemm.h"
#include "runtime/device/cpu/vmath.h"

#include <sys/mman.h>
#include <Eigen/Core>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <new>

namespace shardlab::runtime::device::cpu {

namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatMap = Eigen::Map<RowMatrix>;
using VecMap = Eigen::Map<Eigen::VectorXf>;

constexpr std::size_t kAlignment = 64;

// NOTE [Launch check] (runtime/device/device.h) on every tensor of an op, before its bytes
// are touched.
template <class... T>
Status check_views(std::string_view op, const T&... tensors) {
  Status s = Status::ok();
  ((s.is_ok() ? void(s = check_launch_view(op, tensors)) : void()), ...);
  return s;
}

Status expect_dtype(std::string_view op, const Tensor& t, DType dtype) {
  if (!t.defined()) return Status::invalid_argument(std::string(op) + ": an operand is undefined");
  if (t.dtype() != dtype) {
    return Status::invalid_argument(std::string(op) + ": " + t.describe() + " must be " +
                                    std::string(dtype_name(dtype)));
  }
  if (t.is_phantom()) return Status::invalid_argument(std::string(op) + ": " + t.describe() + " has no host data");
  return Status::ok();
}

// Each operand has host bytes (timing mode's phantom tensors have none).
template <class... T>
Status expect_host_data(std::string_view op, const T&... tensors) {
  Status s = Status::ok();
  ((s.is_ok() && tensors.is_phantom()
        ? void(s = Status::invalid_argument(std::string(op) + ": " + tensors.describe() + " has no host data"))
        : void()),
   ...);
  return s;
}

// [rows, cols] of a 2-D fp32 tensor, or an error.
Status as_matrix(std::string_view op, const Tensor& t, std::int64_t* rows, std::int64_t* cols) {
  SHARDLAB_RETURN_IF_ERROR(expect_dtype(op, t, DType::kF32));
  if (t.ndim() != 2) return Status::invalid_argument(std::string(op) + ": " + t.describe() + " must be 2-D");
  *rows = t.dim(0);
  *cols = t.dim(1);
  return Status::ok();
}

// The last dim of a fp32 tensor, as [rows, cols], or an error.
Status as_rows(std::string_view op, const Tensor& t, std::int64_t* rows, std::int64_t* cols) {
  SHARDLAB_RETURN_IF_ERROR(expect_dtype(op, t, DType::kF32));
  if (t.ndim() < 1) return Status::invalid_argument(std::string(op) + ": " + t.describe() + " must have a last dim");
  *cols = t.dim(-1);
  *rows = *cols == 0 ? 0 : t.numel() / *cols;
  return Status::ok();
}

// Checks every id against [0, vocab) before anything is written.
Status expect_ids_in_range(std::string_view op, const Tensor& ids, std::int64_t vocab) {
  const std::int64_t* id = ids.data<std::int64_t>();
  for (std::int64_t n = 0; n < ids.numel(); ++n) {
    if (id[n] < 0 || id[n] >= vocab) {
      return Status::invalid_argument(std::string(op) + ": id " + std::to_string(id[n]) + " at index " +
                                      std::to_string(n) + " of " + ids.describe() + " is outside [0, " +
                                      std::to_string(vocab) + ") (the table has V = " + std::to_string(vocab) +
                                      " rows)");
    }
  }
  return Status::ok();
}

constexpr float kSqrt2OverPi = 0.79788456080286536f;
float gelu_tanh(float x) {
  const float inner = kSqrt2OverPi * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + std::tanh(inner));
}
float gelu_tanh_grad(float x) {
  const float inner = kSqrt2OverPi * (x + 0.044715f * x * x * x);
  const float t = std::tanh(inner);
  const float dinner = kSqrt2OverPi * (1.0f + 3.0f * 0.044715f * x * x);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * dinner;
}

float load_as_float(DType dtype, const std::byte* p, std::int64_t i) {
  switch (dtype) {
    case DType::kF32: {
      float v;
      std::memcpy(&v, p + 4 * i, 4);
      return v;
    }
    case DType::kBF16:
    case DType::kF16: {
      std::uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      return dtype == DType::kBF16 ? bf16_to_float(h) : fp16_to_float(h);
    }
    case DType::kI64: {
      std::int64_t v;
      std::memcpy(&v, p + 8 * i, 8);
      return static_cast<float>(v);
    }
  }
  return 0.0f;
}

void store_from_float(DType dtype, std::byte* p, std::int64_t i, float v) {
  switch (dtype) {
    case DType::kF32: std::memcpy(p + 4 * i, &v, 4); break;
    case DType::kBF16:
    case DType::kF16: {
      const std::uint16_t h = dtype == DType::kBF16 ? float_to_bf16(v) : float_to_fp16(v);
      std::memcpy(p + 2 * i, &h, 2);
      break;
    }
    case DType::kI64: {
      const auto x = static_cast<std::int64_t>(v);
      std::memcpy(p + 8 * i, &x, 8);
      break;
    }
  }
}

}  // namespace

CpuDevice::CpuDevice(DeviceId id, std::int64_t capacity_bytes)
    : id_(std::move(id)),
      id_name_(id_.to_string()),
      memory_(id_name_, capacity_bytes),
      cache_(std::make_shared<BlockCache>()) {
  pin_eigen_blocking();
}

// NOTE [Pinned GEMM blocking]
// Eigen splits a GEMM's k dimension into panels sized from the CPU's cache sizes, which it
// reads with CPUID at run time (in practice the L1 size changed the bits); the panel size
// decides the order in which each output sums its k products. Hosts with different caches
// (this project's 2-core EPYC VM reports a 32 KiB L1, the host the goldens were made on
// 48 KiB) therefore produced different fp32 bits for the same program, and golden scenarios
// made on one failed on the other. The cpu backend's own products no longer go through
// Eigen (NOTE [GEMM bits] in gemm.h fixes their panels), but any Eigen product in a
// process that makes a CpuDevice (the benchmarks' references) still blocks for these
// sizes, once per process before any product, so it does not depend on the host either.
void pin_eigen_blocking() {
  static std::once_flag once;
  std::call_once(once, [] { Eigen::setCpuCacheSizes(kPinnedL1Bytes, kPinnedL2Bytes, kPinnedL3Bytes); });
}

CpuDevice::~CpuDevice() { cache_->clear(); }

namespace {
// With `huge`, blocks of at least kHugeBytes are 2 MiB aligned and asked to be backed by
// transparent huge pages (MADV_HUGEPAGE; a no-op where THP is off): one page fault per
// 2 MiB instead of per 4 KiB, and the TLB covers the GEMM's operands (set_huge_pages).
constexpr std::size_t kHugePage = std::size_t{2} << 20;
constexpr std::size_t kHugeBytes = std::size_t{4} << 20;
void* allocate_block(std::size_t bytes, bool huge) {
  if (!huge || bytes < kHugeBytes) return std::aligned_alloc(kAlignment, bytes);
  void* p = std::aligned_alloc(kHugePage, (bytes + kHugePage - 1) / kHugePage * kHugePage);
  if (p != nullptr) madvise(p, bytes, MADV_HUGEPAGE);
  return p;
}
}  // namespace

// NOTE [Host block cache].
std::size_t CpuDevice::size_class(std::size_t bytes) {
  const std::size_t aligned = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  constexpr std::size_t kSmall = std::size_t{1} << 20;
  if (aligned <= kSmall) return aligned;
  const std::size_t step = std::bit_floor(aligned) / 8;  // eight classes per power of two
  return (aligned + step - 1) / step * step;
}

void* CpuDevice::BlockCache::take(std::size_t size) {
  std::lock_guard<std::mutex> lock(mu);
  auto it = blocks.find(size);
  if (it == blocks.end()) return nullptr;
  void* p = it->second;
  blocks.erase(it);
  cached -= size;
  live += size;
  peak_live = std::max(peak_live, live);
  return p;
}

void CpuDevice::BlockCache::note_new(std::size_t size) {
  std::lock_guard<std::mutex> lock(mu);
  live += size;
  peak_live = std::max(peak_live, live);
}

void CpuDevice::BlockCache::give(void* p, std::size_t size) {
  {
    std::lock_guard<std::mutex> lock(mu);
    live -= size;
    const std::size_t limit = std::max(peak_live + peak_live / 8 - live, kMinLimitBytes);
    if (cached + size <= limit) {
      blocks.emplace(size, p);
      cached += size;
      return;
    }
  }
  std::free(p);
}

void CpuDevice::BlockCache::clear() {
  std::lock_guard<std::mutex> lock(mu);
  for (auto& [size, p] : blocks) std::free(p);
  blocks.clear();
  cached = 0;
}

void CpuDevice::release_cached_blocks() { cache_->clear(); }

std::size_t CpuDevice::cached_bytes() const {
  std::lock_guard<std::mutex> lock(cache_->mu);
  return cache_->cached;
}

Result<std::shared_ptr<Storage>> CpuDevice::allocate(std::int64_t nbytes, MemoryCategory category,
                                                     std::string_view label) {
  return allocate_charging(nbytes, nbytes, category, label);
}

Result<std::shared_ptr<Storage>> CpuDevice::allocate_charging(std::int64_t nbytes, std::int64_t charged_bytes,
                                                              MemoryCategory category, std::string_view label) {
  if (nbytes >= 0) {
    SHARDLAB_CHECK_GE(charged_bytes, 0);
    SHARDLAB_CHECK_LE(charged_bytes, nbytes);
  }
  // A negative size is refused by reserve (INVALID_ARGUMENT naming the request).
  SHARDLAB_RETURN_IF_ERROR(memory_.reserve(nbytes < 0 ? nbytes : charged_bytes, category, label));
  const std::size_t rounded = size_class(static_cast<std::size_t>(nbytes));
  void* p = rounded == 0 ? nullptr : cache_->take(rounded);
  if (rounded != 0 && p == nullptr) {
    p = allocate_block(rounded, huge_pages());
    if (p == nullptr) {  // the cache's blocks may be what is missing
      cache_->clear();
      p = allocate_block(rounded, huge_pages());
    }
    if (p != nullptr) cache_->note_new(rounded);
  }
  if (rounded != 0 && p == nullptr) {
    memory_.release(charged_bytes, category);
    return Status::out_of_memory("host allocation of " + format_bytes(nbytes) + " for '" + std::string(label) +
                                 "' on " + id_.to_string() + " failed");
  }
  // Zero-byte storages still need a non-null host pointer so views are host-visible.
  static std::byte empty_bytes[kAlignment];
  std::byte* data = p ? static_cast<std::byte*>(p) : empty_bytes;
  MemoryTracker* tracker = &memory_;
  std::shared_ptr<BlockCache> cache = cache_;
  return std::make_shared<Storage>(data, reinterpret_cast<std::uint64_t>(data), nbytes, category, std::string(label),
                                   id_name_, [tracker, cache, p, rounded, charged_bytes](Storage& s) {
                                     if (p) cache->give(p, rounded);
                                     tracker->release(charged_bytes, s.category());
                                   });
}

Status CpuDevice::check_stream(std::string_view op, StreamId stream) const {
  if (stream < 0 || stream >= num_streams_) {
    return Status::invalid_argument(std::string(op) + " on " + id_.to_string() + ": unknown stream " +
                                    std::to_string(stream) + "; streams are 0.." + std::to_string(num_streams_ - 1));
  }
  return Status::ok();
}

Result<StreamId> CpuDevice::create_stream(std::string_view) { return num_streams_++; }
Result<EventId> CpuDevice::record_event(StreamId) { return EventId{next_event_++}; }
Status CpuDevice::wait_event(StreamId, EventId) { return Status::ok(); }
Status CpuDevice::synchronize(StreamId) { return Status::ok(); }

Status CpuDevice::to_host(const Tensor& src, std::span<std::byte> dst, StreamId stream) {
  SHARDLAB_RETURN_IF_ERROR(check_stream("to_host", stream));
  SHARDLAB_RETURN_IF_ERROR(check_host_copy("to_host", src, dst.size()));
  if (src.is_phantom()) return Status::invalid_argument("to_host: " + src.describe() + " has no data");
  if (!dst.empty()) std::memcpy(dst.data(), src.bytes(), dst.size());
  return Status::ok();
}

Status CpuDevice::from_host(std::span<const std::byte> src, const Tensor& dst, StreamId stream) {
  SHARDLAB_RETURN_IF_ERROR(check_stream("from_host", stream));
  SHARDLAB_RETURN_IF_ERROR(check_host_copy("from_host", dst, src.size()));
  if (dst.is_phantom()) return Status::invalid_argument("from_host: " + dst.describe() + " has no data");
  if (!src.empty()) std::memcpy(dst.bytes(), src.data(), src.size());
  return Status::ok();
}

namespace {
// NOTE [Element-wise ops on the pool]: loops whose iterations are independent (one
// element, or one row with its own fixed-order reduction) run on the GEMM's thread pool in
// contiguous chunks (parallel_for in gemm.h); every element is computed by the same code
// whatever the split, so the bits do not depend on the thread count.
constexpr std::int64_t kElementGrain = std::int64_t{1} << 15;
// Rows (or, for column sums, columns) per chunk when each is `row_length` elements long.
std::int64_t row_grain(std::int64_t row_length) {
  return std::max<std::int64_t>(1, kElementGrain / std::max<std::int64_t>(1, row_length));
}

// Bytes per chunk for copies and fills: large enough that a chunk dwarfs the hand-off,
// and a model-sized buffer's first-touch page faults are taken by every core.
constexpr std::int64_t kByteGrain = std::int64_t{1} << 20;
}  // namespace

Status CpuDevice::copy(const Tensor& src, const Tensor& dst, StreamId stream) {
  SHARDLAB_RETURN_IF_ERROR(check_views("copy", src, dst));
  SHARDLAB_RETURN_IF_ERROR(check_stream("copy", stream));
  if (!src.defined() || !dst.defined()) return Status::invalid_argument("copy: an operand is undefined");
  if (src.dtype() != dst.dtype()) {
    return Status::invalid_argument("copy: " + src.describe() + " and " + dst.describe() +
                                    " have different dtypes (use cast)");
  }
  SHARDLAB_RETURN_IF_ERROR(expect_numel("copy", dst, src.numel(), "the source's element count"));
  if (src.is_phantom() || dst.is_phantom()) return Status::invalid_argument("copy: phantom tensors have no data");
  if (src.nbytes() == 0 || src.same_view(dst)) return Status::ok();
  std::byte* d = dst.bytes();
  const std::byte* from = src.bytes();
  if (src.overlaps(dst)) {
    std::memmove(d, from, static_cast<std::size_t>(src.nbytes()));
    return Status::ok();
  }
  parallel_for(src.nbytes(), kByteGrain, [&](std::int64_t lo, std::int64_t hi) {
    std::memcpy(d + lo, from + lo, static_cast<std::size_t>(hi - lo));
  });
  return Status::ok();
}

Status CpuDevice::fill(const Tensor& dst, float value, StreamId stream) {
  SHARDLAB_RETURN_IF_ERROR(check_views("fill", dst));
  SHARDLAB_RETURN_IF_ERROR(check_stream("fill", stream));
  if (!dst.defined() || dst.is_phantom()) return Status::invalid_argument("fill: tensor has no host data");
  std::byte* p = dst.bytes();
  if (dst.dtype() == DType::kI64 && !(value >= -9.2e18f && value <= 9.2e18f)) {
    return Status::invalid_argument("fill: " + std::to_string(value) + " does not fit " + dst.describe());
  }
  if (dst.dtype() == DType::kF32) {
    float* f = dst.data<float>();
    parallel_for(dst.numel(), kByteGrain / 4,
                 [&](std::int64_t lo, std::int64_t hi) { std::fill(f + lo, f + hi, value); });
    return Status::ok();
  }
  for (std::int64_t i = 0; i < dst.numel(); ++i) store_from_float(dst.dtype(), p, i, value);
  return Status::ok();
}

Status CpuDevice::cast(const Tensor& src, const Tensor& dst, StreamId stream) {
  SHARDLAB_RETURN_IF_ERROR(check_views("cast", src, dst));
  SHARDLAB_RETURN_IF_ERROR(check_stream("cast", stream));
  if (!src.defined() || !dst.defined()) return Status::invalid_argument("cast: an operand is undefined");
  SHARDLAB_RETURN_IF_ERROR(expect_numel("cast", dst, src.numel(), "the source's element count"));
  if (!is_floating(src.dtype()) || !is_floating(dst.dtype())) {
    return Status::invalid_argument("cast: " + src.describe() + " -> " + dst.describe() +
                                    ": only fp32, bf16 and fp16 convert");
  }
  if (src.dtype() == dst.dtype()) return copy(src, dst, stream);
  if (src.overlaps(dst)) return Status::invalid_argument("cast: source and destination overlap");
  const std::byte* s = src.bytes();
  std::byte* d = dst.bytes();
  for (std::int64_t i = 0; i < src.numel(); ++i) store_from_float(dst.dtype(), d, i, load_as_float(src.dtype(), s, i));
  return Status::ok();
}

Status CpuDevice::axpy(float alpha, const Tensor& x, const Tensor& y, StreamId stream) {
  SHARDLAB_RETURN_IF_ERROR(check_views("axpy", x, y));
  SHARDLAB_RETURN_IF_ERROR(check_stream("axpy", stream));
  SHARDLAB_RETURN_IF_ERROR(expect_dtype("axpy", x, DType::kF32));
  SHARDLAB_RETURN_IF_ERROR(expect_dtype("axpy", y, DType::kF32));
  SHARDLAB_RETURN_IF_ERROR(expect_numel("axpy", y, x.numel(), "x's element count"));
  float* yp = y.data<float>();
  float* xp = x.data<float>();
  // Chunks are independent unless x and y partially overlap: then one pass, in order.
  const std::int64_t grain = x.overlaps(y) && !x.same_view(y) ? y.numel() + 1 : kElementGrain;
  parallel_for(y.numel(), grain,
               [&](std::int64_t lo, std::int64_t hi) { VecMap(yp + lo, hi - lo) += alpha * VecMap(xp + lo, hi - lo); });
  return Status::ok();
}

Status CpuDevice::scale(const Tensor& x, float alpha, StreamId stream) {
  SHARDLAB_RETURN_IF_ERROR(check_views("scale", x));
  SHARDLAB_RETURN_IF_ERROR(check_stream("scale", stream));
  SHARDLAB_RETURN_IF_ERROR(expect_dtype("scale", x, DType::kF32));
  float* xp = x.data<float>();
  parallel_for(x.numel(), kElementGrain, [&](std::int64_t lo, std::int64_t hi) { VecMap(xp + lo, hi - lo) *= alpha; });
  return Status::ok();
}

Status CpuDevice::gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c, float alpha,
                       float beta, StreamId stream) {
  SHARDLAB_RETURN_IF_ERROR(check_views("gemm", a, b, c));
  SHARDLAB_RETURN_IF_ERROR(check_stream("gemm", stream));
  std::int64_t ar, ac, br, bc, cr, cc;
  SHARDLAB_RETURN_IF_ERROR(as_matrix("gemm", a, &ar, &ac));
  SHARDLAB_RETURN_IF_ERROR(as_matrix("gemm", b, &br, &bc));
  SHARDLAB_RETURN_IF_ERROR(as_matrix("gemm", c, &cr, &cc));
  const std::int64_t m = trans_a ? ac : ar, k = trans_a ? ar : ac;
  const std::int64_t kb = trans_b ? bc : br, n = trans_b ? br : bc;
  if (k != kb || cr != m || cc != n) {
    return Status::invalid_argument("gemm: op(a) is [" + std::to_string(m) + ", " + std::to_string(k) +
                                    "], op(b) is [" + std::to_string(kb) + ", " + std::to_string(n) + "], c is " +
                                    shape_to_string(c.shape()) + "; expected op(a) [M, K] × op(b) [K, N] = c [M, N]");
  }
  if (c.overlaps(a) || c.overlaps(b)) return Status::invalid_argument("gemm: c overlaps an input");
  SHARDLAB_ASSIGN_OR_RETURN(const GemmIsa isa, gemm_isa());
  cpu::gemm(contiguous_gemm(a.data<float>(), trans_a, b.data<float>(), trans_b, c.data<float>(), m, n, k, alpha, beta),
            isa, gemm_threads());
  return Status::ok();
}

Status CpuDevice::batched_gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c,
                               float alpha, float beta, StreamId stream) {
  SHARDLAB_RETURN_IF_ERROR(check_views("batched_gemm", a, b, c));
  constexpr std::string_view kOp = "batched_gemm";
  SHARDLAB_RETURN_IF_ERROR(check_stream(kOp, stream));
  for (const Tensor* t : {&a, &b, &c}) {
    SHARDLAB_RETURN_IF_ERROR(expect_dtype(kOp, *t, DType::kF32));
    if (t->ndim() != 3) {
      return Status::invalid_argument(std::string(kOp) + ": " + t->describe() + " must be 3-D [batch, rows, cols]");
    }
  }
  const std::int64_t batch = c.dim(0);
  const std::int64_t ar = a.dim(1), ac = a.dim(2), br = b.dim(1), bc = b.dim(2), cr = c.dim(1), cc = c.dim(2);
  const std::int64_t m = trans_a ? ac : ar, k = trans_a ? ar : ac;
  const std::int64_t kb = trans_b ? bc : br, n = trans_b ? br : bc;
  if (a.dim(0) != batch || b.dim(0) != batch || k != kb || cr != m || cc != n) {
    return Status::invalid_argument(std::string(kOp) + ": a is " + shape_to_string(a.shape()) + ", b is " +
                                    shape_to_string(b.shape()) + ", c is " + shape_to_string(c.shape()) +
                                    " with op(a[i]) [" + std::to_string(m) + ", " + std::to_string(k) +
                                    "] and op(b[i]) [" + std::to_string(kb) + ", " + std::to_string(n) +
                                    "]; expected [batch, M, K] × [batch, K, N] = c [batch, M, N]");
  }
  if (c.overlaps(a) || c.overlaps(b)) return Status::invalid_argument(std::string(kOp) + ": c overlaps an input");
  SHARDLAB_ASSIGN_OR_RETURN(const GemmIsa isa, gemm_isa());
  cpu::gemm_batched(
      contiguous_gemm(a.data<float>(), trans_a, b.data<float>(), trans_b, c.data<float>(), m, n, k, alpha, beta), batch,
      ar * ac, br * bc, cr * cc, isa, gemm_threads());
  return Status::ok();
}

Status CpuDevice::add_bias(const Tensor& x, const Tensor& bias, StreamId stream) {
  SHARDLAB_RETURN_IF_ERROR(check_views("add_bias", x, bias));
  SHARDLAB_RETURN_IF_ERROR(check_stream("add_bias", stream));
  SHARDLAB_RETURN_IF_ERROR(expect_dtype("add_bias", x, DType::kF32));
  SHARDLAB_RETURN_IF_ERROR(expect_dtype("add_bias", bias, DType::kF32));
  if (x.ndim() < 1 || x.dim(-1) != bias.numel()) {
    return Status::invalid_argument("add_bias: last dim of " + x.describe() + " must equal the bias size " +
                                    std::to_string(bias.numel()));
  }
  const std::int64_t f = bias.numel();
  if (f == 0) return Status::ok();
  MatMap X(x.data<float>(), x.numel() / f, f);
  X.rowwise() += Eigen::Map<const Eigen::RowVectorXf>(bias.data<float>(), f);
  return Status::ok();
}

Status CpuDevice::bias_grad(const Tensor& dy, const Tensor& dbias, bool accumulate, StreamId stream) {
  SHARDLAB_RETURN_IF_ERROR(check_views("bias_grad", dy, dbias));
  SHARDLAB_RETURN_IF_ERROR(check_stream("bias_grad", stream));
  SHARDLAB_RETURN_IF_ERROR(check_bias_grad("bias_grad", dy, dbias));
  SHARDLAB_RETURN_IF_ERROR(expect_host_data("bias_grad", dy, dbias));
  const std::int64_t f = dbias.numel();
  if (f == 0) return Status::ok();
  const std::int64_t rows = dy.numel() / f;
  const float* g = dy.data<float>();
  float* out = dbias.data<float>();
  // The column sums run in row order from zero (fixed, so the result does not depend on how
  // Eigen would vectorize a reduction) and are added to dbias once when accumulating: a
  // backend can reduce, then add, for the same bits.
  std::vector<float> sum(static_cast<std::size_t>(f), 0.0f);
  parallel_for(f, row_grain(rows),
               [&](std::int64_t lo, std::int64_t hi) {  // columns split; each sums its rows in order
                 for (std::int64_t r = 0; r < rows; ++r) {
                   for (std::int64_t j = lo; j < hi; ++j) sum[static_cast<std::size_t>(j)] += g[r * f + j];
                 }
               });
  for (std::int64_t j = 0; j < f; ++j) {
    const float col = sum[static_cast<std::size_t>(j)];
    out[j] = accumulate ? out[j] + col : col;
  }
  return Status::ok();
}

Status CpuDevice::activation(Activation act, const Tensor& x, const Tensor& y, StreamId stream) {
  SHARDLAB_RETURN_IF_ERROR(check_views("activation", x, y));
  SHARDLAB_RETURN_IF_ERROR(check_stream("activation", stream));
  SHARDLAB_RETURN_IF_ERROR(expect_dtype("activation", x, DType::kF32));
  SHARDLAB_RETURN_IF_ERROR(expect_dtype("activation", y, DType::kF32));
  SHARDLAB_RETURN_IF_ERROR(expect_numel("activation", y, x.numel(), "x's element count"));
  const float* in = x.data<float>();
  float* out = y.data<float>();
  parallel_for(x.numel(), kElementGrain, [&](std::int64_t lo, std::int64_t hi) {
    switch (act) {
      case Activation::kRelu:
        // NaN propagates (as in PyTorch) so a diverged activation is not silently zeroed.
        for (std::int64_t i = lo; i < hi; ++i) out[i] = in[i] > 0.0f || std::isnan(in[i]) ? in[i] : 0.0f;
        break;
      case Activation::kGelu:
        gelu_erf(in + lo, out + lo, hi - lo);  // NOTE [Element-wise math bits]
        break;
      case Activation::kGeluTanh:
        for (std::int64_t i = lo; i < hi; ++i) out[i] = gelu_tanh(in[i]);
        break;
      case Activation::kTanh:
        for (std::int64_t i = lo; i < hi; ++i) out[i] = std::tanh(in[i]);
        break;
    }
  });
  return Status::ok();
}

Status CpuDevice::activation_backward(Activation act, const Tensor& x, const Tensor& dy, const Tensor& dx,
                                      StreamId stream) {
  SHARDLAB_RETURN_IF_ERROR(check_views("activation_backward", x, dy, dx));
  SHARDLAB_RETURN_IF_ERROR(check_stream("activation_backward", stream));
  SHARDLAB_RETURN_IF_ERROR(expect_dtype("activation_backward", x, DType::kF32));
  SHARDLAB_RETURN_IF_ERROR(expect_dtype("activation_backward", dy, DType::kF32));
  SHARDLAB_RETURN_IF_ERROR(expect_dtype("activation_backward", dx, DType::kF32));
  SHARDLAB_RETURN_IF_ERROR(expect_numel("activation_backward", dy, x.numel(), "x's element count"));
  SHARDLAB_RETURN_IF_ERROR(expect_numel("activation_backward", dx, x.numel(), "x's element count"));
  const float* in = x.data<float>();
  const float* g = dy.data<float>();
  float* out = dx.data<float>();
  parallel_for(x.numel(), kElementGrain, [&](std::int64_t lo, std::int64_t hi) {
    switch (act) {
      case Activation::kRelu:
        for (std::int64_t i = lo; i < hi; ++i) out[i] = in[i] > 0.0f ? g[i] : 0.0f;
        break;
      case Activation::kGelu: gelu_erf_backward(in + lo, g + lo, out + lo, hi - lo); break;
      case Activation::kGeluTanh:
        for (std::int64_t i = lo; i < hi; ++i) out[i] = g[i] * gelu_tanh_grad(in[i]);
        break;
      case Activation::kTanh:
        for (std::int64_t i = lo; i < hi; ++i) {
          const float t = std::tanh(in[i]);
          out[i] = g[i] * (1.0f - t * t);
        }
        break;
    }
  });
  return Status::ok();
}

Status CpuDevice::layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, const Tensor& y,
                             const Tensor& mean, const Tensor& rstd, StreamId stream) {
  SHARDLAB_RETURN_IF_ERROR(check_views("layer_norm", x, gamma, beta, y, mean, rstd));
  constexpr std::string_view kOp = "layer_norm";
  SHARDLAB_RETURN_IF_ERROR(check_stream(kOp, stream));
  std::int64_t n, h;
  SHARDLAB_RETURN_IF_ERROR(as_rows(kOp, x, &n, &h));
  for (const Tensor* t : {&gamma, &beta, &y, &mean, &rstd})
    SHARDLAB_RETURN_IF_ERROR(expect_dtype(kOp, *t, DType::kF32));
  SHARDLAB_RETURN_IF_ERROR(expect_shape(kOp, gamma, {h}, "gamma is [H], H = the last dim of x"));
  SHARDLAB_RETURN_IF_ERROR(expect_shape(kOp, beta, {h}, "beta is [H], H = the last dim of x"));
  SHARDLAB_RETURN_IF_ERROR(expect_shape(kOp, y, x.shape(), "y has x's shape"));
  SHARDLAB_RETURN_IF_ERROR(expect_numel(kOp, mean, n, "one mean per row of x"));
  SHARDLAB_RETURN_IF_ERROR(expect_numel(kOp, rstd, n, "one rstd per row of x"));
  if (!(eps >= 0.0f))
    return Status::invalid_argument(std::string(kOp) + ": eps " + std::to_string(eps) + " must be >= 0");
  SHARDLAB_RETURN_IF_ERROR(expect_no_overlap(kOp, y, x, true));
  for (const Tensor* in : {&gamma, &beta}) SHARDLAB_RETURN_IF_ERROR(expect_no_overlap(kOp, y, *in, false));
  for (const Tensor* out : {&mean, &rstd}) {
    for (const Tensor* other : {&x, &gamma, &beta, &y})
      SHARDLAB_RETURN_IF_ERROR(expect_no_overlap(kOp, *out, *other, false));
  }
  SHARDLAB_RETURN_IF_ERROR(expect_no_overlap(kOp, mean, rstd, false));
  const float* in = x.data<float>();
  const float* g = gamma.data<float>();
  const float* bt = beta.data<float>();
  float* out = y.data<float>();
  parallel_for(n, row_grain(h), [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t r = lo; r < hi; ++r) {
      const float* row = in + r * h;
      float* orow = out + r * h;
      double sum = 0.0;
      for (std::int64_t j = 0; j < h; ++j) sum += row[j];
      const double mu = sum / static_cast<double>(h);
      double sq = 0.0;
      for (std::int64_t j = 0; j < h; ++j) sq += (row[j] - mu) * (row[j] - mu);
      const float mu_f = static_cast<float>(mu);
      const float rs = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(h) + static_cast<double>(eps)));
      for (std::int64_t j = 0; j < h; ++j) orow[j] = (row[j] - mu_f) * rs * g[j] + bt[j];
      mean.data<float>()[r] = mu_f;
      rstd.data<float>()[r] = rs;
    }
  });
  return Status::ok();
}

Status CpuDevice::layer_norm_backward(const Tensor& x, const Tensor& dy, const Tensor& mean, const Tensor& rstd,
                                      const Tensor& gamma, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,
                                      bool accumulate, StreamId stream) {
  SHARDLAB_RETURN_IF_ERROR(check_views("layer_norm_backward", x, dy, mean, rstd, gamma, dx, dgamma, dbeta));
  constexpr std::string_view kOp = "layer_norm_backward";
  SHARDLAB_RETURN_IF_ERROR(check_stream(kOp, stream));
  std::int64_t n, h;
  SHARDLAB_RETURN_IF_ERROR(as_rows(kOp, x, &n, &h));
  for (const Tensor* t : {&dy, &mean, &rstd, &gamma, &dx, &dgamma, &dbeta}) {
    SHARDLAB_RETURN_IF_ERROR(expect_dtype(kOp, *t, DType::kF32));
  }
  SHARDLAB_RETURN_IF_ERROR(expect_shape(kOp, dy, x.shape(), "dy has x's shape"));
  SHARDLAB_RETURN_IF_ERROR(expect_shape(kOp, dx, x.shape(), "dx has x's shape"));
  SHARDLAB_RETURN_IF_ERROR(expect_numel(kOp, mean, n, "one mean per row of x"));
  SHARDLAB_RETURN_IF_ERROR(expect_numel(kOp, rstd, n, "one rstd per row of x"));
  SHARDLAB_RETURN_IF_ERROR(expect_shape(kOp, gamma, {h}, "gamma is [H], H = the last dim of x"));
  SHARDLAB_RETURN_IF_ERROR(expect_shape(kOp, dgamma, {h}, "dgamma is [H], H = the last dim of x"));
  SHARDLAB_RETURN_IF_ERROR(expect_shape(kOp, dbeta, {h}, "dbeta is [H], H = the last dim of x"));
  SHARDLAB_RETURN_IF_ERROR(expect_no_overlap(kOp, dx, dy, true));
  for (const Tensor* in : {&x, &mean, &rstd, &gamma}) SHARDLAB_RETURN_IF_ERROR(expect_no_overlap(kOp, dx, *in, false));
  for (const Tensor* out : {&dgamma, &dbeta}) {
    for (const Tensor* other : {&x, &dy, &mean, &rstd, &gamma, &dx}) {
      SHARDLAB_RETURN_IF_ERROR(expect_no_overlap(kOp, *out, *other, false));
    }
  }
  SHARDLAB_RETURN_IF_ERROR(expect_no_overlap(kOp, dgamma, dbeta, false));
  const float* in = x.data<float>();
  const float* g = dy.data<float>();
  const float* mu = mean.data<float>();
  const float* rs = rstd.data<float>();
  const float* w = gamma.data<float>();
  float* out = dx.data<float>();
  // The row sums start from zero and are added to dgamma/dbeta once (accumulate), so a
  // backend can compute them as a fresh reduction and add (runtime/platform/hpu: the
  // layer_norm_bwd kernel, then add_fwd): the same bits either way.
  std::vector<float> dw_rows(static_cast<std::size_t>(h), 0.0f), db_rows(static_cast<std::size_t>(h), 0.0f);
  float* dw = dw_rows.data();
  float* db = db_rows.data();
  const double inv_h = h == 0 ? 0.0 : 1.0 / static_cast<double>(h);
  // dgamma/dbeta first, split by columns (each column sums its rows in order), then dx
  // split by rows: dx may alias dy, so every read of dy for the sums comes before any
  // write (NOTE [Element-wise ops on the pool]).
  parallel_for(h, row_grain(n), [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t r = 0; r < n; ++r) {
      const float* row = in + r * h;
      const float* grow = g + r * h;
      for (std::int64_t j = lo; j < hi; ++j) {
        const float xhat = (row[j] - mu[r]) * rs[r];
        dw[j] += grow[j] * xhat;
        db[j] += grow[j];
      }
    }
  });
  parallel_for(n, row_grain(h), [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t r = lo; r < hi; ++r) {
      const float* row = in + r * h;
      const float* grow = g + r * h;
      float* orow = out + r * h;
      // dx = rstd * (g·w - mean(g·w) - xhat * mean(g·w·xhat)).
      double sum_gw = 0.0, sum_gw_xhat = 0.0;
      for (std::int64_t j = 0; j < h; ++j) {
        const float xhat = (row[j] - mu[r]) * rs[r];
        const float gw = grow[j] * w[j];
        sum_gw += gw;
        sum_gw_xhat += static_cast<double>(gw) * xhat;
      }
      const float mean_gw = static_cast<float>(sum_gw * inv_h);
      const float mean_gw_xhat = static_cast<float>(sum_gw_xhat * inv_h);
      for (std::int64_t j = 0; j < h; ++j) {
        const float xhat = (row[j] - mu[r]) * rs[r];
        orow[j] = rs[r] * (grow[j] * w[j] - mean_gw - xhat * mean_gw_xhat);
      }
    }
  });
  float* gamma_out = dgamma.data<float>();
  float* beta_out = dbeta.data<float>();
  for (std::int64_t j = 0; j < h; ++j) {
    gamma_out[j] = accumulate ? gamma_out[j] + dw[j] : dw[j];
    beta_out[j] = accumulate ? beta_out[j] + db[j] : db[j];
  }
  return Status::ok();
}

Status CpuDevice::attention_softmax(const Tensor& scores, const Tensor& attention_mask, float scale,
                                    const Tensor& probs, StreamId stream) {
  SHARDLAB_RETURN_IF_ERROR(check_views("attention_softmax", scores, attention_mask, probs));
  constexpr std::string_view kOp = "attention_softmax";
  SHARDLAB_RETURN_IF_ERROR(check_stream(kOp, stream));
  SHARDLAB_RETURN_IF_ERROR(check_attention_softmax(kOp, scores, attention_mask, probs));
  SHARDLAB_RETURN_IF_ERROR(expect_host_data(kOp, scores, attention_mask, probs));
  const std::int64_t batch = scores.dim(0), heads = scores.dim(1), tq = scores.dim(2), tk = scores.dim(3);
  constexpr float kLowest = std::numeric_limits<float>::lowest();
  const float* s = scores.data<float>();
  const float* mask = attention_mask.data<float>();
  float* p = probs.data<float>();
  parallel_for(batch * heads * tq, row_grain(tk), [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t r = lo; r < hi; ++r) {
      const float* mrow = mask + (r / (heads * tq)) * tk;
      const std::int64_t off = r * tk;
      const float* srow = s + off;
      float* prow = p + off;
      // The fp32 sum is deliberate (as HF): lowest absorbs any moderate score, so a fully
      // masked row is all `lowest` and normalizes to uniform. std::max turns an overflow to
      // -inf back into lowest (NaN still propagates), so max - max never makes a NaN.
      auto logit = [&](std::int64_t j) { return std::max(scale * srow[j] + (1.0f - mrow[j]) * kLowest, kLowest); };
      float mx = kLowest;
      for (std::int64_t j = 0; j < tk; ++j) mx = std::max(mx, logit(j));
      // logit(j) reads srow[j] before prow[j] is written: in place is fine.
      for (std::int64_t j = 0; j < tk; ++j) prow[j] = logit(j) - mx;
      exp_nonpositive(prow, prow, tk);  // NOTE [Element-wise math bits]
      double sum = 0.0;
      for (std::int64_t j = 0; j < tk; ++j) sum += prow[j];
      const float inv = static_cast<float>(1.0 / sum);
      for (std::int64_t j = 0; j < tk; ++j) prow[j] *= inv;
    }
  });
  return Status::ok();
}

Status CpuDevice::attention_softmax_backward(const Tensor& probs, const Tensor& dprobs, float scale,
                                             const Tensor& dscores, StreamId stream) {
  SHARDLAB_RETURN_IF_ERROR(check_views("attention_softmax_backward", probs, dprobs, dscores));
  constexpr std::string_view kOp = "attention_softmax_backward";
  SHARDLAB_RETURN_IF_ERROR(check_stream(kOp, stream));
  std::int64_t rows, cols;
  SHARDLAB_RETURN_IF_ERROR(check_attention_softmax_backward(kOp, probs, dprobs, dscores, &rows, &cols));
  SHARDLAB_RETURN_IF_ERROR(expect_host_data(kOp, probs, dprobs, dscores));
  const float* p = probs.data<float>();
  const float* dp = dprobs.data<float>();
  float* ds = dscores.data<float>();
  parallel_for(rows, row_grain(cols), [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t r = lo; r < hi; ++r) {
      const std::int64_t off = r * cols;
      double dot = 0.0;
      for (std::int64_t j = 0; j < cols; ++j) dot += static_cast<double>(p[off + j]) * dp[off + j];
      const float d = static_cast<float>(dot);
      // PyTorch's order: the softmax backward p·(dp − d), then the scaling's backward.
      for (std::int64_t j = 0; j < cols; ++j) ds[off + j] = scale * (p[off + j] * (dp[off + j] - d));
    }
  });
  return Status::ok();
}

namespace {

// Shared validation of embedding and its backward: `table` is the fp32 [V, H] table (or
// its gradient), `rows` the fp32 per-id rows (out or dout) with N·H elements and last
// dim H. `written` is the tensor the op writes; it must not overlap the other two.
Status validate_embedding(std::string_view op, const Tensor& table, const Tensor& ids, const Tensor& rows,
                          const Tensor& written, std::int64_t* v, std::int64_t* h) {
  SHARDLAB_RETURN_IF_ERROR(as_matrix(op, table, v, h));
  SHARDLAB_RETURN_IF_ERROR(expect_dtype(op, ids, DType::kI64));
  SHARDLAB_RETURN_IF_ERROR(expect_dtype(op, rows, DType::kF32));
  const std::int64_t n = ids.numel();
  if (rows.ndim() < 1 || rows.dim(-1) != *h || rows.numel() != n * *h) {
    return Status::invalid_argument(std::string(op) + ": " + rows.describe() + " must hold " + std::to_string(n) +
                                    " rows of H = " + std::to_string(*h) + " (one per id; the table is " +
                                    shape_to_string(table.shape()) + ")");
  }
  const Tensor& other = written.same_view(rows) ? table : rows;
  SHARDLAB_RETURN_IF_ERROR(expect_no_overlap(op, written, other, false));
  SHARDLAB_RETURN_IF_ERROR(expect_no_overlap(op, written, ids, false));
  return expect_ids_in_range(op, ids, *v);
}

}  // namespace

Status CpuDevice::embedding(const Tensor& table, const Tensor& ids, const Tensor& out, StreamId stream) {
  SHARDLAB_RETURN_IF_ERROR(check_views("embedding", table, ids, out));
  constexpr std::string_view kOp = "embedding";
  SHARDLAB_RETURN_IF_ERROR(check_stream(kOp, stream));
  std::int64_t v, h;
  SHARDLAB_RETURN_IF_ERROR(validate_embedding(kOp, table, ids, out, out, &v, &h));
  const std::int64_t n = ids.numel();
  const std::int64_t* id = ids.data<std::int64_t>();
  const float* t = table.data<float>();
  float* o = out.data<float>();
  for (std::int64_t i = 0; i < n; ++i) std::copy(t + id[i] * h, t + (id[i] + 1) * h, o + i * h);
  return Status::ok();
}

Status CpuDevice::embedding_backward(const Tensor& dout, const Tensor& ids, const Tensor& dtable, bool accumulate,
                                     StreamId stream) {
  SHARDLAB_RETURN_IF_ERROR(check_views("embedding_backward", dout, ids, dtable));
  constexpr std::string_view kOp = "embedding_backward";
  SHARDLAB_RETURN_IF_ERROR(check_stream(kOp, stream));
  std::int64_t v, h;
  SHARDLAB_RETURN_IF_ERROR(validate_embedding(kOp, dtable, ids, dout, dtable, &v, &h));
  const std::int64_t n = ids.numel();
  const std::int64_t* id = ids.data<std::int64_t>();
  const float* g = dout.data<float>();
  float* d = dtable.data<float>();
  if (!accumulate) std::fill(d, d + v * h, 0.0f);
  for (std::int64_t i = 0; i < n; ++i) {
    float* row = d + id[i] * h;
    for (std::int64_t j = 0; j < h; ++j) row[j] += g[i * h + j];
  }
  return Status::ok();
}

Status CpuDevice::softmax_cross_entropy(const Tensor& logits, const Tensor& labels, const Tensor& loss_sum,
                                        const Tensor& dlogits, float grad_scale, std::int64_t ignore_index,
                                        StreamId stream) {
  SHARDLAB_RETURN_IF_ERROR(check_views("softmax_cross_entropy", logits, labels, loss_sum, dlogits));
  constexpr std::string_view kOp = "softmax_cross_entropy";
  SHARDLAB_RETURN_IF_ERROR(check_stream(kOp, stream));
  std::int64_t n, c;
  SHARDLAB_RETURN_IF_ERROR(check_cross_entropy(kOp, logits, labels, loss_sum, dlogits, &n, &c));
  SHARDLAB_RETURN_IF_ERROR(expect_host_data(kOp, logits, labels, loss_sum, dlogits));
  const std::int64_t* lab = labels.data<std::int64_t>();
  SHARDLAB_RETURN_IF_ERROR(
      check_labels(kOp, std::span<const std::int64_t>(lab, static_cast<std::size_t>(n)), c, ignore_index));
  const float* z = logits.data<float>();
  float* dz = dlogits.data<float>();
  // Rows on the pool (NOTE [Element-wise ops on the pool]); each row's loss term is kept
  // and the terms are summed afterwards in row order, as one pass would.
  std::vector<float> term(static_cast<std::size_t>(n), 0.0f);
  parallel_for(n, row_grain(c), [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t r = lo; r < hi; ++r) {
      const float* row = z + r * c;
      float* drow = dz + r * c;
      if (lab[r] == ignore_index) {
        std::fill(drow, drow + c, 0.0f);
        continue;
      }
      float mx = row[0];
      for (std::int64_t j = 1; j < c; ++j) mx = std::max(mx, row[j]);
      for (std::int64_t j = 0; j < c; ++j) drow[j] = row[j] - mx;
      exp_nonpositive(drow, drow, c);  // NOTE [Element-wise math bits]
      float sum = 0.0f;
      for (std::int64_t j = 0; j < c; ++j) sum += drow[j];
      const float inv = 1.0f / sum;
      term[static_cast<std::size_t>(r)] = std::log(sum) + mx - row[lab[r]];
      for (std::int64_t j = 0; j < c; ++j) drow[j] = drow[j] * inv * grad_scale;
      drow[lab[r]] -= grad_scale;
    }
  });
  double total = 0.0;
  for (std::int64_t r = 0; r < n; ++r) {
    if (lab[r] != ignore_index) total += static_cast<double>(term[static_cast<std::size_t>(r)]);
  }
  loss_sum.data<float>()[0] = static_cast<float>(total);
  return Status::ok();
}

Status CpuDevice::transpose_1_2(const Tensor& x, const Tensor& y, StreamId stream) {
  SHARDLAB_RETURN_IF_ERROR(check_views("transpose_1_2", x, y));
  constexpr std::string_view kOp = "transpose_1_2";
  SHARDLAB_RETURN_IF_ERROR(check_stream(kOp, stream));
  SHARDLAB_RETURN_IF_ERROR(expect_dtype(kOp, x, DType::kF32));
  SHARDLAB_RETURN_IF_ERROR(expect_dtype(kOp, y, DType::kF32));
  if (x.ndim() != 4 || y.shape() != Shape{x.ndim() == 4 ? x.dim(0) : 0, x.ndim() == 4 ? x.dim(2) : 0,
                                          x.ndim() == 4 ? x.dim(1) : 0, x.ndim() == 4 ? x.dim(3) : 0}) {
    return Status::invalid_argument(std::string(kOp) + ": x " + x.describe() + " must be 4-D [P, Q, R, S] and y " +
                                    y.describe() + " must be [P, R, Q, S]");
  }
  if (y.overlaps(x)) return Status::invalid_argument(std::string(kOp) + ": y overlaps x");
  const std::int64_t P = x.dim(0), Q = x.dim(1), R = x.dim(2), S = x.dim(3);
  const float* in = x.data<float>();
  float* out = y.data<float>();
  const std::size_t row = static_cast<std::size_t>(S) * sizeof(float);
  parallel_for(P * R, row_grain(Q * S), [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t pr = lo; pr < hi; ++pr) {
      const std::int64_t p = pr / R, r = pr % R;
      for (std::int64_t q = 0; q < Q; ++q)
        std::memcpy(out + ((p * R + r) * Q + q) * S, in + ((p * Q + q) * R + r) * S, row);
    }
  });
  return Status::ok();
}

Status CpuDevice::multiply(const Tensor& a, const Tensor& b, const Tensor& c, StreamId stream) {
  SHARDLAB_RETURN_IF_ERROR(check_views("multiply", a, b, c));
  constexpr std::string_view kOp = "multiply";
  SHARDLAB_RETURN_IF_ERROR(check_stream(kOp, stream));
  for (const Tensor* t : {&a, &b, &c}) SHARDLAB_RETURN_IF_ERROR(expect_dtype(kOp, *t, DType::kF32));
  SHARDLAB_RETURN_IF_ERROR(expect_numel(kOp, b, a.numel(), "a's element count"));
  SHARDLAB_RETURN_IF_ERROR(expect_numel(kOp, c, a.numel(), "a's element count"));
  // Element-wise: c may be a or b exactly, but not a shifted overlap.
  if ((c.overlaps(a) && !c.same_view(a)) || (c.overlaps(b) && !c.same_view(b))) {
    return Status::invalid_argument(std::string(kOp) + ": c partially overlaps an input");
  }
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* pc = c.data<float>();
  parallel_for(a.numel(), kElementGrain, [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t i = lo; i < hi; ++i) pc[i] = pa[i] * pb[i];
  });
  return Status::ok();
}

Status CpuDevice::dropout_mask(const Tensor& mask, float p, const Rng& base, std::int64_t first_row, std::uint64_t site,
                               StreamId stream) {
  SHARDLAB_RETURN_IF_ERROR(check_views("dropout_mask", mask));
  constexpr std::string_view kOp = "dropout_mask";
  SHARDLAB_RETURN_IF_ERROR(check_stream(kOp, stream));
  SHARDLAB_RETURN_IF_ERROR(expect_dtype(kOp, mask, DType::kF32));
  SHARDLAB_RETURN_IF_ERROR(check_dropout_args(kOp, mask, p, first_row));
  if (mask.numel() == 0) return Status::ok();
  // Rows draw from their own counter-based streams, so any split of the rows is the same mask.
  const std::int64_t per_row = mask.numel() / mask.dim(0);
  float* out = mask.data<float>();
  parallel_for(mask.dim(0), row_grain(per_row), [&](std::int64_t lo, std::int64_t hi) {
    draw_dropout_mask(out + lo * per_row, hi - lo, per_row, p, base, first_row + lo, site);
  });
  return Status::ok();
}

namespace {
// AdamW over n elements. The operands are distinct tensors (optimizer_step checks they do
// not overlap), so the loop vectorizes. This file is built with -fno-math-errno, so sqrt
// has a vector form; IEEE sqrt and division are correctly rounded either way: the bits
// equal the scalar loop's.
void adamw_update(std::int64_t n, float* __restrict p, const float* __restrict g, float* __restrict m,
                  float* __restrict v, float decay, float beta1, float beta2, float eps, float step_size,
                  float bc2_sqrt) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float mi = beta1 * m[i] + (1.0f - beta1) * g[i];
    const float vi = beta2 * v[i] + (1.0f - beta2) * g[i] * g[i];
    const float pi = p[i] * decay - step_size * mi / (std::sqrt(vi) / bc2_sqrt + eps);
    m[i] = mi;
    v[i] = vi;
    p[i] = pi;
  }
}
}  // namespace

Status CpuDevice::optimizer_step(const OptimizerUpdate& u, const Tensor& param, const Tensor& grad,
                                 const Tensor& state0, const Tensor& state1, StreamId stream) {
  SHARDLAB_RETURN_IF_ERROR(check_views("optimizer_step", param, grad, state0, state1));
  constexpr std::string_view kOp = "optimizer_step";
  SHARDLAB_RETURN_IF_ERROR(check_stream(kOp, stream));
  SHARDLAB_RETURN_IF_ERROR(check_optimizer_step(kOp, u, param, grad, state0, state1));
  for (const Tensor* t : {&param, &grad, &state0, &state1}) {
    if (t->defined()) SHARDLAB_RETURN_IF_ERROR(expect_dtype(kOp, *t, DType::kF32));
  }
  const bool adamw = u.kind == OptimizerKind::kAdamW;
  const int n_state = adamw ? 2 : (u.momentum != 0.0f ? 1 : 0);
  const std::int64_t n = param.numel();
  float* p = param.data<float>();
  const float* g = grad.data<float>();
  if (!adamw) {
    float* buf = n_state == 1 ? state0.data<float>() : nullptr;
    for (std::int64_t i = 0; i < n; ++i) {
      float d = g[i];
      if (u.weight_decay != 0.0f) d += u.weight_decay * p[i];
      if (buf) {
        buf[i] = u.step == 1 ? d : u.momentum * buf[i] + d;
        d = buf[i];
      }
      p[i] -= u.lr * d;
    }
    return Status::ok();
  }
  float* m = state0.data<float>();
  float* v = state1.data<float>();
  const double bc1 = 1.0 - std::pow(static_cast<double>(u.beta1), static_cast<double>(u.step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(u.beta2), static_cast<double>(u.step));
  const float step_size = static_cast<float>(u.lr / bc1);
  const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  const float decay = 1.0f - u.lr * u.weight_decay;
  parallel_for(n, kElementGrain, [&](std::int64_t lo, std::int64_t hi) {
    adamw_update(hi - lo, p + lo, g + lo, m + lo, v + lo, decay, u.beta1, u.beta2, u.eps, step_size, bc2_sqrt);
  });
  return Status::ok();
}

}  // namespace shardlab::runtime::device::cpu
