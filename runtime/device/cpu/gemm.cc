// The cpu backend's GEMM (gemm.h): NOTE [GEMM bits], the blocking driver, the scalar
// kernel, run-time dispatch and the thread pool. Built with -ffp-contract=off.
#include "runtime/device/cpu/gemm.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/device/cpu/gemm_kernels.h"

namespace shardlab::runtime::device::cpu {

namespace gemm_detail {

// Both cases read their source contiguously.
void pack_strips(const float* x, std::int64_t ld, bool along_strip, std::int64_t s0, std::int64_t count,
                 std::int64_t k0, std::int64_t kc, int width, float* out) {
  for (std::int64_t ss = 0; ss < count; ss += width) {
    const std::int64_t w = std::min<std::int64_t>(width, count - ss);
    if (along_strip) {
      for (std::int64_t k = 0; k < kc; ++k) {
        float* dst = out + k * width;
        const float* src = x + (k0 + k) * ld + s0 + ss;
        for (std::int64_t j = 0; j < w; ++j) dst[j] = src[j];
        for (std::int64_t j = w; j < width; ++j) dst[j] = 0.0f;
      }
    } else {
      for (std::int64_t j = 0; j < w; ++j) {
        const float* src = x + (s0 + ss + j) * ld + k0;
        for (std::int64_t k = 0; k < kc; ++k) out[k * width + j] = src[k];
      }
      for (std::int64_t k = 0; k < kc; ++k) {
        for (std::int64_t j = w; j < width; ++j) out[k * width + j] = 0.0f;
      }
    }
    out += kc * width;
  }
}

}  // namespace gemm_detail

namespace {

using gemm_detail::KernelInfo;

// ---- kernels -------------------------------------------------------------------------------

using gemm_detail::TileArgs;
using gemm_detail::TileStep;

// TileArgs' step for the top-left h × w of an mr × nr tile whose acc is in `acc` (row
// stride nr): the portable epilogue, for the scalar path and for tiles cut by C's edge.
void apply_step(const float* acc, int nr, std::int64_t h, std::int64_t w, const TileArgs& t) {
  for (std::int64_t r = 0; r < h; ++r) {
    const float* a = acc + r * nr;
    float* sum = t.sum + r * t.ldsum;
    switch (t.step) {
      case TileStep::kStoreAcc:
        for (std::int64_t j = 0; j < w; ++j) t.tile[r * nr + j] = a[j];
        break;
      case TileStep::kFirst:
        for (std::int64_t j = 0; j < w; ++j) sum[j] = a[j];
        break;
      case TileStep::kMiddle:
        for (std::int64_t j = 0; j < w; ++j) sum[j] = sum[j] + a[j];
        break;
      case TileStep::kLast:
      case TileStep::kLastBeta: {
        float* out = t.out + r * t.ldc;
        for (std::int64_t j = 0; j < w; ++j) {
          const float total = t.first ? a[j] : sum[j] + a[j];
          const float scaled = t.alpha * total;
          if (t.step == TileStep::kLast) {
            out[j] = scaled;
          } else {
            const float kept = t.beta * out[j];
            out[j] = scaled + kept;
          }
        }
        break;
      }
    }
  }
}

constexpr int kScalarMr = 4, kScalarNr = 16;

void scalar_kernel(std::int64_t kc, const float* ap, const float* bp, const TileArgs& t) {
  float acc[kScalarMr * kScalarNr] = {};
  for (std::int64_t k = 0; k < kc; ++k) {
    for (int r = 0; r < kScalarMr; ++r) {
      const float a = ap[k * kScalarMr + r];
      for (int j = 0; j < kScalarNr; ++j) {
        acc[r * kScalarNr + j] = std::fma(a, bp[k * kScalarNr + j], acc[r * kScalarNr + j]);
      }
    }
  }
  apply_step(acc, kScalarNr, kScalarMr, kScalarNr, t);
}

KernelInfo kernel_for(GemmIsa isa) {
  switch (isa) {
    case GemmIsa::kAvx512: return gemm_detail::avx512_kernel();
    case GemmIsa::kAvx2: return gemm_detail::avx2_kernel();
    case GemmIsa::kScalar: break;
  }
  return {kScalarMr, kScalarNr, &scalar_kernel, &gemm_detail::pack_strips};
}

// ---- the blocking driver -----------------------------------------------------------------

constexpr std::int64_t kMc = 96;    // rows of A per packed block (a multiple of every mr)
constexpr std::int64_t kNc = 1024;  // columns of B per packed panel (a multiple of every nr)

// NOTE [GEMM bits] for the block of c at rows [m0, m1) and columns [n0, n1). The running
// panel sum P lives in c itself when beta == 0 (c's old values are never read), else in a
// scratch block (only when there is more than one panel). The first panel stores its sums
// (0 + acc is acc: an fma chain from +0 never ends at -0), the last one writes
// alpha·P (+ beta·c) straight into c, so no pass over c is spent on zeroing or scaling.
// Full tiles take their panel step in the kernel's registers; tiles cut by the block's
// edge store acc and take it in apply_step.
void gemm_block(const GemmArgs& g, const KernelInfo& kern, std::int64_t m0, std::int64_t m1, std::int64_t n0,
                std::int64_t n1) {
  if (m1 <= m0 || n1 <= n0) return;
  const std::int64_t rows = m1 - m0, cols = n1 - n0;
  if (g.k == 0) {  // P = 0
    for (std::int64_t i = 0; i < rows; ++i) {
      float* out = g.c + (m0 + i) * g.ldc + n0;
      for (std::int64_t j = 0; j < cols; ++j)
        out[j] = g.beta == 0.0f ? g.alpha * 0.0f : g.alpha * 0.0f + g.beta * out[j];
    }
    return;
  }
  thread_local std::vector<float> bpack, apack, tile, scratch;
  float* p = g.c + m0 * g.ldc + n0;  // P[i][j] at p[i * ldp + j]
  std::int64_t ldp = g.ldc;
  if (g.beta != 0.0f && g.k > kGemmKc) {
    scratch.resize(static_cast<std::size_t>(rows * cols));
    p = scratch.data();
    ldp = cols;
  }
  const int mr = kern.mr, nr = kern.nr;
  bpack.resize(static_cast<std::size_t>(kGemmKc * kNc));
  apack.resize(static_cast<std::size_t>(kGemmKc * kMc));
  tile.resize(static_cast<std::size_t>(mr * nr));
  for (std::int64_t jc = n0; jc < n1; jc += kNc) {
    const std::int64_t nc = std::min(kNc, n1 - jc);
    for (std::int64_t pc = 0; pc < g.k; pc += kGemmKc) {  // panels in ascending k
      const std::int64_t kc = std::min(kGemmKc, g.k - pc);
      const bool first = pc == 0, last = pc + kc >= g.k;
      TileArgs step;
      step.step = !last ? (first ? TileStep::kFirst : TileStep::kMiddle)
                        : (g.beta == 0.0f ? TileStep::kLast : TileStep::kLastBeta);
      step.first = first;
      step.ldsum = ldp;
      step.ldc = g.ldc;
      step.alpha = g.alpha;
      step.beta = g.beta;
      kern.pack(g.b, g.ldb, !g.trans_b, jc, nc, pc, kc, nr, bpack.data());  // B[pc:+kc, jc:+nc]
      for (std::int64_t ic = m0; ic < m1; ic += kMc) {
        const std::int64_t mc = std::min(kMc, m1 - ic);
        kern.pack(g.a, g.lda, g.trans_a, ic, mc, pc, kc, mr, apack.data());  // A[ic:+mc, pc:+kc]
        for (std::int64_t js = 0; js < nc; js += nr) {
          const std::int64_t w = std::min<std::int64_t>(nr, nc - js);
          for (std::int64_t is = 0; is < mc; is += mr) {
            const std::int64_t h = std::min<std::int64_t>(mr, mc - is);
            const std::int64_t i = ic - m0 + is, j0 = jc - n0 + js;
            step.sum = p + i * ldp + j0;
            step.out = g.c + (m0 + i) * g.ldc + n0 + j0;
            const float* ap = apack.data() + is * kc;
            const float* bp = bpack.data() + js * kc;
            if (h == mr && w == nr) {
              kern.run(kc, ap, bp, step);
            } else {
              TileArgs store;
              store.tile = tile.data();
              kern.run(kc, ap, bp, store);
              apply_step(tile.data(), nr, h, w, step);
            }
          }
        }
      }
    }
  }
}

// ---- the pool --------------------------------------------------------------------------------

// Workers that run one caller's tasks at a time; the caller takes tasks too. A caller
// that finds the pool busy (another rank thread, or a task calling gemm) runs its tasks
// itself: the bits never depend on who runs what.
class Pool {
 public:
  explicit Pool(int threads) {
    for (int t = 1; t < threads; ++t) workers_.emplace_back([this] { work(); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& w : workers_) w.join();
  }
  int size() const { return static_cast<int>(workers_.size()) + 1; }

  void run(std::int64_t tasks, const std::function<void(std::int64_t)>& fn) {
    std::unique_lock<std::mutex> busy(run_mu_, std::try_to_lock);
    if (tasks <= 1 || workers_.empty() || !busy.owns_lock()) {
      for (std::int64_t t = 0; t < tasks; ++t) fn(t);
      return;
    }
    auto job = std::make_shared<Job>(fn, tasks);
    {
      std::lock_guard<std::mutex> lock(mu_);
      job_ = job;
      posted_.fetch_add(1, std::memory_order_release);
    }
    cv_.notify_all();
    job->done.fetch_add(job->drain_count(), std::memory_order_acq_rel);
    spin_until([&] { return job->done.load(std::memory_order_acquire) == job->tasks; });
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return job->done.load(std::memory_order_acquire) == job->tasks; });
    job_.reset();
  }

 private:
  // One run's tasks; a worker that wakes late holds the job it saw and finds it empty.
  struct Job {
    Job(const std::function<void(std::int64_t)>& f, std::int64_t n) : fn(f), tasks(n) {}
    const std::function<void(std::int64_t)>& fn;
    const std::int64_t tasks;
    std::atomic<std::int64_t> next{0};
    std::atomic<std::int64_t> done{0};
    std::int64_t drain_count() {
      std::int64_t n = 0;
      for (std::int64_t t = next.fetch_add(1); t < tasks; t = next.fetch_add(1), ++n) fn(t);
      return n;
    }
  };

  // A thread that has just finished its share spins this long for the next job (a worker)
  // or for the other shares (the caller) before it sleeps: a training step issues its ops
  // back to back, and a thread woken from sleep is often too late for a short op, whose
  // shares the caller then runs alone while a core idles. Blocking afterwards keeps an
  // idle pool from burning the cores that simulated ranks (threads) need.
  static constexpr std::chrono::microseconds kSpin{200};
  template <class Done>
  static void spin_until(const Done& done) {
    const auto until = std::chrono::steady_clock::now() + kSpin;
    for (int i = 0; !done(); ++i) {
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
      if ((i & 63) == 63 && std::chrono::steady_clock::now() >= until) return;
    }
  }

  void work() {
    std::shared_ptr<Job> seen;
    std::uint64_t last = 0;
    for (;;) {
      spin_until([&] { return posted_.load(std::memory_order_acquire) != last; });
      std::shared_ptr<Job> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || (job_ && job_ != seen); });
        if (stop_) return;
        job = seen = job_;
        last = posted_.load(std::memory_order_relaxed);
      }
      const std::int64_t n = job->drain_count();
      if (job->done.fetch_add(n, std::memory_order_acq_rel) + n == job->tasks) {
        std::lock_guard<std::mutex> lock(mu_);
        done_cv_.notify_all();
      }
    }
  }

  std::mutex run_mu_;  // one caller at a time
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::vector<std::thread> workers_;
  std::shared_ptr<Job> job_;
  std::atomic<std::uint64_t> posted_{0};  // jobs posted so far (what a spinning worker watches)
  bool stop_ = false;
};

int cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

Pool& pool() {
  static Pool p(gemm_threads());
  return p;
}

thread_local bool t_serial = false;  // SerialScope

}  // namespace

std::string_view gemm_isa_name(GemmIsa isa) {
  switch (isa) {
    case GemmIsa::kScalar: return "scalar";
    case GemmIsa::kAvx2: return "avx2";
    case GemmIsa::kAvx512: return "avx512";
  }
  return "?";
}

Result<GemmIsa> parse_gemm_isa(std::string_view text) {
  for (GemmIsa isa : {GemmIsa::kScalar, GemmIsa::kAvx2, GemmIsa::kAvx512}) {
    if (text == gemm_isa_name(isa)) return isa;
  }
  return Status::invalid_argument("unknown cpu kernel level '" + std::string(text) +
                                  "'; allowed: scalar, avx2, avx512");
}

GemmIsa best_gemm_isa() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return GemmIsa::kAvx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return GemmIsa::kAvx2;
  return GemmIsa::kScalar;
}

Result<GemmIsa> gemm_isa() {
  static const Result<GemmIsa> chosen = []() -> Result<GemmIsa> {
    const GemmIsa best = best_gemm_isa();
    const char* env = std::getenv("SHARDLAB_CPU_ISA");
    if (env == nullptr || env[0] == '\0') return best;
    auto forced = parse_gemm_isa(env);
    if (!forced.is_ok()) return forced.status().with_context("SHARDLAB_CPU_ISA");
    if (static_cast<int>(*forced) > static_cast<int>(best)) {
      return Status::invalid_argument("SHARDLAB_CPU_ISA=" + std::string(env) + ": this CPU supports at most " +
                                      std::string(gemm_isa_name(best)) + "; allowed: a level up to it");
    }
    return *forced;
  }();
  return chosen;
}

namespace {
// SHARDLAB_CPU_THREADS: unset or empty → the cores; else an integer 1 … 1024.
Result<int> threads_setting() {
  const char* env = std::getenv("SHARDLAB_CPU_THREADS");
  if (env == nullptr || env[0] == '\0') return cores();
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(env, &end, 10);
  if (end == env || *end != '\0' || errno != 0 || v < 1 || v > 1024) {
    return Status::invalid_argument("SHARDLAB_CPU_THREADS: '" + std::string(env) +
                                    "' is not a thread count; allowed: an integer from 1 to 1024");
  }
  return static_cast<int>(v);
}
}  // namespace

int gemm_threads() {
  static const int n = [] {
    const Result<int> v = threads_setting();
    return v.is_ok() ? *v : cores();  // check_cpu_settings reports the bad value
  }();
  return n;
}

Status check_cpu_settings() {
  SHARDLAB_RETURN_IF_ERROR(gemm_isa().status());
  return threads_setting().status();
}

SerialScope::SerialScope() : previous_(t_serial) { t_serial = true; }
SerialScope::~SerialScope() { t_serial = previous_; }

GemmArgs contiguous_gemm(const float* a, bool trans_a, const float* b, bool trans_b, float* c, std::int64_t m,
                         std::int64_t n, std::int64_t k, float alpha, float beta) {
  GemmArgs g;
  g.a = a;
  g.lda = trans_a ? m : k;
  g.trans_a = trans_a;
  g.b = b;
  g.ldb = trans_b ? k : n;
  g.trans_b = trans_b;
  g.c = c;
  g.ldc = n;
  g.m = m;
  g.n = n;
  g.k = k;
  g.alpha = alpha;
  g.beta = beta;
  return g;
}

void gemm(const GemmArgs& g, GemmIsa isa, int threads) {
  if (t_serial) threads = 1;
  const KernelInfo kern = kernel_for(isa);
  const int t = std::max(1, std::min(threads, pool().size()));
  // Split the larger of M and N (never K) into one chunk per thread, aligned to the tile.
  const bool by_rows = g.m >= g.n;
  const std::int64_t extent = by_rows ? g.m : g.n;
  const std::int64_t unit = by_rows ? kern.mr : kern.nr;
  const std::int64_t units = (extent + unit - 1) / unit;
  const std::int64_t chunks = std::min<std::int64_t>(t, std::max<std::int64_t>(1, units));
  if (chunks <= 1 || 2 * g.m * g.n * g.k < (std::int64_t{1} << 20)) {  // too small to share
    gemm_block(g, kern, 0, g.m, 0, g.n);
    return;
  }
  pool().run(chunks, [&](std::int64_t c) {
    const std::int64_t lo = std::min(extent, (units * c / chunks) * unit);
    const std::int64_t hi = std::min(extent, (units * (c + 1) / chunks) * unit);
    if (by_rows)
      gemm_block(g, kern, lo, hi, 0, g.n);
    else
      gemm_block(g, kern, 0, g.m, lo, hi);
  });
}

void parallel_for(std::int64_t n, std::int64_t grain, const std::function<void(std::int64_t, std::int64_t)>& body) {
  const std::int64_t chunks =
      t_serial ? 1 : std::min<std::int64_t>(pool().size(), n / std::max<std::int64_t>(1, grain));
  if (chunks <= 1) {
    if (n > 0) body(0, n);
    return;
  }
  pool().run(chunks, [&](std::int64_t c) { body(n * c / chunks, n * (c + 1) / chunks); });
}

void gemm_batched(const GemmArgs& g, std::int64_t batch, std::int64_t stride_a, std::int64_t stride_b,
                  std::int64_t stride_c, GemmIsa isa, int threads) {
  const auto item = [&](std::int64_t i) {
    GemmArgs one = g;
    one.a = g.a + i * stride_a;
    one.b = g.b + i * stride_b;
    one.c = g.c + i * stride_c;
    return one;
  };
  if (batch < 2 || threads <= 1 || t_serial) {
    for (std::int64_t i = 0; i < batch; ++i) gemm(item(i), isa, threads);
    return;
  }
  const KernelInfo kern = kernel_for(isa);
  pool().run(batch, [&](std::int64_t i) {
    const GemmArgs one = item(i);
    gemm_block(one, kern, 0, one.m, 0, one.n);
  });
}

}  // namespace shardlab::runtime::device::cpu
