// overlap_bench: does an Open MPI nonblocking reduce-scatter make progress while the host
// computes, and who should drive it: the waiting side, or a progress thread?
//
// Launch under mpiexec (2 ranks is the reference setup; see bench/README.md):
//   mpiexec -n 2 build/bench/overlap_bench --benchmark_out=overlap.json
// For each reduce-scatter size (fp32 sum, MPI_Ireduce_scatter_block) one iteration is "a
// unit's gradient reduction beside the next unit's backward": the reduction plus a fixed
// host compute (Eigen SGEMMs of 256 × 256, one per MiB of the reduction, at least one).
// Variants, named overlap/<variant>/<bytes>:
//   serial          reduce-scatter waited where it is issued, then the compute (what a
//                   blocking reduction costs: the reference, compare.py --reference serial)
//   waiting_side    issue, compute, then poll MPI_Test until done (MpiCommunicator's
//                   Work::wait: Open MPI progresses only inside MPI calls)
//   progress_thread issue, compute while a second thread calls MPI_Test on the request
//                   every 50 us (MPI_THREAD_MULTIPLE), then join and finish
//   comm_only / compute_only   the two halves alone, for the overlap fraction
// Each iteration's time is the MAX over ranks (NOTE [Identical iterations on every rank]
// in comm_bench.cc: fixed iteration counts, manual time). Counter `overlap` on the three
// combined variants = (comm_only + compute_only − variant) / min(comm_only, compute_only),
// 1 when the shorter half is hidden completely, 0 when nothing overlaps, from the halves
// of the same size (registered, so run, just before).
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <benchmark/benchmark.h>
#include <Eigen/Core>

namespace {

enum class Variant { kCommOnly, kComputeOnly, kSerial, kWaitingSide, kProgressThread };
constexpr Variant kVariants[] = {Variant::kCommOnly, Variant::kComputeOnly, Variant::kSerial, Variant::kWaitingSide,
                                 Variant::kProgressThread};

std::string_view variant_name(Variant v) {
  switch (v) {
    case Variant::kCommOnly: return "comm_only";
    case Variant::kComputeOnly: return "compute_only";
    case Variant::kSerial: return "serial";
    case Variant::kWaitingSide: return "waiting_side";
    case Variant::kProgressThread: return "progress_thread";
  }
  return "?";
}

double max_over_ranks(double seconds) {
  double out = 0;
  MPI_Allreduce(&seconds, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return out;
}

void wait_by_polling(MPI_Request& request) {
  int done = 0;
  while (done == 0) MPI_Test(&request, &done, MPI_STATUS_IGNORE);
}

struct Buffers {
  std::vector<float> send, recv;
  Eigen::MatrixXf a, b, c;
  int gemms = 1;
};

void compute(Buffers& b) {
  for (int i = 0; i < b.gemms; ++i) b.c.noalias() = b.a * b.b;
  benchmark::DoNotOptimize(b.c.data());
}

// One iteration of `v`; returns seconds (max over ranks).
double run_once(Variant v, Buffers& b) {
  const int chunk = static_cast<int>(b.recv.size());
  MPI_Barrier(MPI_COMM_WORLD);
  const auto t0 = std::chrono::steady_clock::now();
  MPI_Request request = MPI_REQUEST_NULL;
  auto issue = [&] {
    MPI_Ireduce_scatter_block(b.send.data(), b.recv.data(), chunk, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &request);
  };
  switch (v) {
    case Variant::kCommOnly:
      issue();
      wait_by_polling(request);
      break;
    case Variant::kComputeOnly: compute(b); break;
    case Variant::kSerial:
      issue();
      wait_by_polling(request);
      compute(b);
      break;
    case Variant::kWaitingSide:
      issue();
      compute(b);
      wait_by_polling(request);
      break;
    case Variant::kProgressThread: {
      issue();
      std::atomic<bool> stop{false};
      std::atomic<bool> done{false};
      std::thread progress([&] {
        int flag = 0;
        while (!stop.load(std::memory_order_acquire) && flag == 0) {
          MPI_Test(&request, &flag, MPI_STATUS_IGNORE);
          if (flag == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
        }
        done.store(flag != 0, std::memory_order_release);
      });
      compute(b);
      stop.store(true, std::memory_order_release);
      progress.join();
      if (!done.load(std::memory_order_acquire)) wait_by_polling(request);
      break;
    }
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return max_over_ranks(s);
}

// Mean seconds per (variant, bytes), for the overlap counter.
std::map<std::pair<Variant, std::int64_t>, double> g_mean;

void bench(benchmark::State& state, Variant v, std::int64_t bytes, int world) {
  Buffers b;
  b.send.assign(static_cast<std::size_t>(bytes / 4), 1.0f);
  b.recv.assign(b.send.size() / static_cast<std::size_t>(world), 0.0f);
  b.a = Eigen::MatrixXf::Constant(256, 256, 0.5f);
  b.b = Eigen::MatrixXf::Constant(256, 256, 0.25f);
  b.c = Eigen::MatrixXf::Zero(256, 256);
  b.gemms = static_cast<int>(std::max<std::int64_t>(1, bytes >> 20));
  run_once(v, b);  // warm-up: connections, page faults
  double total = 0;
  for (auto _ : state) {
    const double s = run_once(v, b);
    total += s;
    state.SetIterationTime(s);
  }
  const double mean = total / static_cast<double>(state.iterations());
  g_mean[{v, bytes}] = mean;
  state.counters["bytes"] = static_cast<double>(bytes);
  state.counters["gemms"] = b.gemms;
  const auto comm = g_mean.find({Variant::kCommOnly, bytes});
  const auto comp = g_mean.find({Variant::kComputeOnly, bytes});
  if (comm != g_mean.end() && comp != g_mean.end() && v != Variant::kCommOnly && v != Variant::kComputeOnly) {
    const double hidden = std::min(comm->second, comp->second);
    state.counters["overlap"] = hidden > 0 ? (comm->second + comp->second - mean) / hidden : 0.0;
  }
}

class SilentReporter final : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  if (MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
    std::fprintf(stderr, "overlap_bench: MPI_Init_thread failed\n");
    return 3;
  }
  if (provided < MPI_THREAD_MULTIPLE) {
    std::fprintf(stderr, "overlap_bench: MPI provides thread level %d; the progress thread needs MPI_THREAD_MULTIPLE\n",
                 provided);
    MPI_Finalize();
    return 3;
  }
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  std::vector<char*> args(argv, argv + argc);
  if (rank != 0) {
    std::erase_if(args, [](const char* a) { return std::string_view(a).starts_with("--benchmark_out"); });
  }
  int nargs = static_cast<int>(args.size());
  args.push_back(nullptr);
  benchmark::Initialize(&nargs, args.data());
  if (benchmark::ReportUnrecognizedArguments(nargs, args.data())) {
    MPI_Finalize();
    return 2;
  }
  // Registration order is run order: per size, the halves first, then the combinations.
  for (std::int64_t bytes = 256 * 1024; bytes <= 16 * 1024 * 1024; bytes *= 4) {
    const std::int64_t padded = bytes / (4 * world) * (4 * world);
    for (Variant v : kVariants) {
      const std::string name = "overlap/" + std::string(variant_name(v));
      benchmark::RegisterBenchmark(name.c_str(),
                                   [v, padded, world](benchmark::State& s) { bench(s, v, padded, world); })
          ->Arg(padded)
          ->Iterations(bytes >= 4 * 1024 * 1024 ? 10 : 30)
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
    }
  }
  SilentReporter silent;
  const std::size_t ran = rank == 0 ? benchmark::RunSpecifiedBenchmarks() : benchmark::RunSpecifiedBenchmarks(&silent);
  benchmark::Shutdown();
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Finalize();
  return ran > 0 ? 0 : 1;
}
