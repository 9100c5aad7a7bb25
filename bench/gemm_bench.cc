// gemm_bench: single-precision GEMM throughput — Eigen built for this host's vector units
// on every core (bench/eigen_native.h: the machine's practical compute peak) next to
// CpuDevice::gemm (what the runtime gets: runtime/device/cpu/gemm.h).
//
// Square row-major fp32 matrices, C = A·B, sizes 256 … 2048. Each benchmark reports a
// GFLOPS counter (2·n³ per iteration, per second). compare.py judges CpuDevice by its
// ratio to Eigen in the same run.
//
// Both variants work on buffers from the same allocator (CpuDevice::empty, 64-byte
// aligned); the Eigen case maps them with Eigen::Map. With separately malloc'ed
// Eigen::Matrix objects the kernel fell off a cache-aliasing cliff at n = 256 on our CI
// machine (~13 vs ~37 GFLOP/s for the same kernel), which would make the yardstick
// measure heap placement rather than compute.
//
// Times are wall time: both variants use every core the process may run on
// (runtime::device::cpu::gemm_threads()). Thread variables are set only in the commands
// of bench/README.md.
#include <cstdint>

#include <benchmark/benchmark.h>

#include "bench/eigen_native.h"
#include "runtime/core/rng.h"
#include "runtime/device/cpu/device.h"
#include "runtime/device/cpu/gemm.h"

namespace shardlab::bench {
namespace {

// An n×n fp32 tensor from `device`, filled with uniform values in [-1, 1).
Tensor random_matrix(runtime::device::Device& device, std::int64_t n, const char* name, std::uint64_t seed) {
  auto t = device.empty({n, n}, DType::kF32, MemoryCategory::kOther, name);
  SHARDLAB_CHECK_OK(t.status());
  Rng rng(seed);
  float* data = t->data<float>();
  for (std::int64_t i = 0; i < n * n; ++i) data[i] = rng.uniform(-1.0f, 1.0f);
  return *t;
}

void set_flops(benchmark::State& state, std::int64_t n) {
  const double flops = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
  state.counters["GFLOPS"] = benchmark::Counter(flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_EigenGemm(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  runtime::device::cpu::CpuDevice device;
  const Tensor ta = random_matrix(device, n, "a", 1), tb = random_matrix(device, n, "b", 2),
               tc = random_matrix(device, n, "c", 3);
  const int threads = runtime::device::cpu::gemm_threads();
  const auto run = [&] {
    eigen_native_gemm(ta.data<float>(), false, tb.data<float>(), false, tc.data<float>(), n, n, n, threads);
  };
  run();  // warm-up
  for (auto _ : state) {
    run();
    benchmark::DoNotOptimize(tc.data<float>());
    benchmark::ClobberMemory();
  }
  set_flops(state, n);
}

void BM_CpuDeviceGemm(benchmark::State& state) {
  const std::int64_t n = state.range(0);
  runtime::device::cpu::CpuDevice device;
  const Tensor a = random_matrix(device, n, "a", 1), b = random_matrix(device, n, "b", 2),
               c = random_matrix(device, n, "c", 3);
  SHARDLAB_CHECK_OK(device.gemm(a, false, b, false, c, 1.0f, 0.0f, runtime::device::kComputeStream));  // warm-up
  for (auto _ : state) {
    const Status s = device.gemm(a, false, b, false, c, 1.0f, 0.0f, runtime::device::kComputeStream);
    if (!s.is_ok()) {
      state.SkipWithError(s.to_string().c_str());
      break;
    }
    benchmark::DoNotOptimize(c.data<float>());
    benchmark::ClobberMemory();
  }
  set_flops(state, n);
}

}  // namespace

// Registers "gemm/<variant>/<n>" (compare.py pairs each variant with "eigen"), the
// variants of one size back to back so that both see the same machine state.
void register_gemm_benchmarks() {
  for (std::int64_t n = 256; n <= 2048; n *= 2) {
    benchmark::RegisterBenchmark("gemm/eigen", BM_EigenGemm)->Arg(n)->UseRealTime()->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark("gemm/cpu_device", BM_CpuDeviceGemm)
        ->Arg(n)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
}

}  // namespace shardlab::bench

int main(int argc, char** argv) {
  shardlab::bench::register_gemm_benchmarks();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  const std::size_t ran = benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return ran > 0 ? 0 : 1;  // a filter that matches nothing is a broken smoke run
}
