// comm_bench: all-gather and reduce-scatter bandwidth, raw MPI next to MpiCommunicator.
//
// Launch under mpiexec (2 ranks is the reference setup; see bench/README.md):
//   mpiexec -n 2 build/dev/bench/comm_bench --benchmark_out=comm.json
// For every collective and size (1 KiB … 64 MiB, powers of 4) the backends run back to
// back, so compare.py can judge MpiCommunicator by its ratio to raw MPI measured in the
// same run on the same machine state.
//
// NOTE [Identical iterations on every rank]
// Every rank must issue the same collectives in the same order or the world deadlocks.
// So iteration counts are fixed from the size (->Iterations(n), no auto-tuning, which
// could pick different counts per rank), and each iteration's time is the MAX over ranks
// (MPI_Allreduce), reported with UseManualTime. Filters and flags must be the same on
// every rank (mpiexec passes the same argv to all).
//
// Sizes follow nccl-tests: "bytes" is the whole gathered buffer (all-gather output,
// reduce-scatter input), algbw = bytes / time, busbw = algbw × (n−1)/n, in GB/s (1e9).
// Only rank 0 prints and writes --benchmark_out; other ranks use a silent reporter.
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <benchmark/benchmark.h>

#include "sim/engine/world.h"

#include "runtime/comm/communicator.h"
#include "runtime/comm/mpi/communicator.h"
#include "runtime/core/clock.h"
#include "runtime/device/cpu/device.h"

namespace shardlab::bench {

enum class Collective { kAllGather, kReduceScatter };

std::string_view collective_name(Collective c) { return c == Collective::kAllGather ? "all_gather" : "reduce_scatter"; }

// The hook for more backends: one object per rank that can run a prepared collective and
// say how long it took. register_comm_benchmarks() turns a backend into benchmarks named
// "<collective>/<backend name>/<bytes>", which compare.py pairs with "raw_mpi" ones.
// A simulator backend (sim/) would return virtual seconds from run_once(); it must give
// the same value on every member of its world.
class CommBenchBackend {
 public:
  virtual ~CommBenchBackend() = default;
  virtual std::string name() const = 0;
  virtual int world_size() const = 0;
  // Allocates and fills fp32 buffers for `collective` over `bytes` (nccl-tests "size";
  // a multiple of 4 × world_size()). Called before the timed loop, on every rank.
  virtual void prepare(Collective collective, std::int64_t bytes) = 0;
  // Runs the prepared collective once; returns its duration in seconds, identical on
  // every rank (the max over ranks for real backends).
  virtual double run_once() = 0;
  // Frees what prepare() allocated.
  virtual void release() = 0;
};

namespace {

constexpr std::int64_t kKiB = 1024;
constexpr std::int64_t kMiB = 1024 * kKiB;

// 512 MiB of traffic per benchmark, at least 5 and at most 1000 iterations: a function
// of the size only (NOTE [Identical iterations on every rank]).
benchmark::IterationCount iterations_for(std::int64_t bytes) {
  return std::clamp<std::int64_t>(512 * kMiB / bytes, 5, 1000);
}

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "comm_bench: %s\n", what.c_str());
  MPI_Abort(MPI_COMM_WORLD, 3);
  std::abort();
}

// Seconds for one call of `op` on this rank, maxed over the ranks of `comm`.
template <typename Op>
double timed_max(MPI_Comm comm, const Clock& clock, Op op) {
  const Nanos t0 = clock.now();
  op();
  double local = static_cast<double>(clock.now() - t0) / static_cast<double>(kNanosPerSecond);
  double max = 0;
  MPI_Allreduce(&local, &max, 1, MPI_DOUBLE, MPI_MAX, comm);
  return max;
}

// Buffers shared by the two MPI backends (same allocator, same alignment).
class MpiBuffers {
 public:
  void allocate(int world_size, Collective c, std::int64_t bytes) {
    const std::int64_t chunk = bytes / 4 / world_size;  // fp32 elements per rank
    auto full = device_.empty({chunk * world_size}, DType::kF32, MemoryCategory::kCommBuffers, "full");
    auto part = device_.empty({chunk}, DType::kF32, MemoryCategory::kCommBuffers, "part");
    if (!full.is_ok() || !part.is_ok()) die("allocating " + std::to_string(bytes) + " bytes failed");
    full_ = *full;
    part_ = *part;
    std::fill_n(full_.data<float>(), full_.numel(), 1.0f);
    std::fill_n(part_.data<float>(), part_.numel(), 1.0f);
    collective_ = c;
    chunk_ = chunk;
  }
  void release() { full_ = part_ = Tensor(); }

  Collective collective_ = Collective::kAllGather;
  std::int64_t chunk_ = 0;
  Tensor full_;  // all-gather output / reduce-scatter input
  Tensor part_;  // all-gather input / reduce-scatter output

 private:
  runtime::device::cpu::CpuDevice device_;
};

// Raw MPI on a private duplicate of the world: blocking MPI_Allgather /
// MPI_Reduce_scatter_block ("raw_mpi", the reference), or their nonblocking forms followed
// by MPI_Wait ("raw_mpi_nonblocking") — what MpiCommunicator builds on, so the pair
// separates our wrapper's cost from Open MPI's nonblocking-collective (libnbc) algorithms.
class RawMpiBackend final : public CommBenchBackend {
 public:
  explicit RawMpiBackend(const Clock& clock, bool nonblocking = false) : clock_(clock), nonblocking_(nonblocking) {
    MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
    MPI_Comm_size(comm_, &size_);
  }
  ~RawMpiBackend() override { MPI_Comm_free(&comm_); }

  std::string name() const override { return nonblocking_ ? "raw_mpi_nonblocking" : "raw_mpi"; }
  int world_size() const override { return size_; }
  void prepare(Collective c, std::int64_t bytes) override { buffers_.allocate(size_, c, bytes); }
  void release() override { buffers_.release(); }

  double run_once() override {
    const int n = static_cast<int>(buffers_.chunk_);
    float* full = buffers_.full_.data<float>();
    float* part = buffers_.part_.data<float>();
    const bool gather = buffers_.collective_ == Collective::kAllGather;
    return timed_max(comm_, clock_, [&] {
      int rc;
      if (nonblocking_) {
        MPI_Request request;
        rc = gather ? MPI_Iallgather(part, n, MPI_FLOAT, full, n, MPI_FLOAT, comm_, &request)
                    : MPI_Ireduce_scatter_block(full, part, n, MPI_FLOAT, MPI_SUM, comm_, &request);
        if (rc == MPI_SUCCESS) rc = MPI_Wait(&request, MPI_STATUS_IGNORE);
      } else {
        rc = gather ? MPI_Allgather(part, n, MPI_FLOAT, full, n, MPI_FLOAT, comm_)
                    : MPI_Reduce_scatter_block(full, part, n, MPI_FLOAT, MPI_SUM, comm_);
      }
      if (rc != MPI_SUCCESS) die("raw MPI collective failed");
    });
  }

 private:
  const Clock& clock_;
  bool nonblocking_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int size_ = 1;
  MpiBuffers buffers_;
};

// MpiCommunicator: issue, then Work::wait.
class MpiCommunicatorBackend final : public CommBenchBackend {
 public:
  explicit MpiCommunicatorBackend(const Clock& clock) : clock_(clock) {
    auto comm = runtime::comm::mpi::MpiEnvironment::create_world(clock_);
    if (!comm.is_ok()) die(comm.status().to_string());
    comm_ = std::move(*comm);
  }

  std::string name() const override { return "mpi_communicator"; }
  int world_size() const override { return comm_->size(); }
  void prepare(Collective c, std::int64_t bytes) override { buffers_.allocate(comm_->size(), c, bytes); }
  void release() override { buffers_.release(); }

  double run_once() override {
    return timed_max(comm_->mpi_comm(), clock_, [&] {
      runtime::comm::WorkPtr work =
          buffers_.collective_ == Collective::kAllGather
              ? comm_->all_gather_into(buffers_.full_, buffers_.part_)
              : comm_->reduce_scatter(buffers_.part_, buffers_.full_, runtime::comm::ReduceOp::kSum);
      const Status s = work->wait(runtime::comm::kDefaultTimeout);
      if (!s.is_ok()) die(s.to_string());
    });
  }

 private:
  const Clock& clock_;
  std::unique_ptr<runtime::comm::mpi::MpiCommunicator> comm_;
  MpiBuffers buffers_;
};

// The simulator's communicator: a World of the same size as the MPI world in this
// process (ranks are threads), moving real bytes. run_once() times kRepeats collectives
// between two barriers on the host clock and returns the mean; every MPI process runs
// its own world, and the max over processes keeps the iteration counts identical.
class SimCommunicatorBackend final : public CommBenchBackend {
 public:
  SimCommunicatorBackend(const Clock& clock, int world_size) : clock_(clock), world_size_(world_size) {}

  std::string name() const override { return "sim_communicator"; }
  int world_size() const override { return world_size_; }
  void prepare(Collective c, std::int64_t bytes) override {
    collective_ = c;
    chunk_ = bytes / 4 / world_size_;
  }
  void release() override {}

  double run_once() override {
    sim::WorldOptions o;
    o.world_size = world_size_;
    sim::World world(o);
    double seconds = 0;
    const auto results = world.run([&](sim::RankContext& ctx) -> Status {
      SHARDLAB_ASSIGN_OR_RETURN(
          Tensor full, ctx.device.zeros({chunk_ * world_size_}, DType::kF32, MemoryCategory::kCommBuffers, "full"));
      SHARDLAB_ASSIGN_OR_RETURN(Tensor part,
                                ctx.device.zeros({chunk_}, DType::kF32, MemoryCategory::kCommBuffers, "part"));
      SHARDLAB_RETURN_IF_ERROR(ctx.comm.barrier()->wait(runtime::comm::kDefaultTimeout));
      const Nanos t0 = clock_.now();
      for (int i = 0; i < kRepeats; ++i) {
        runtime::comm::WorkPtr w = collective_ == Collective::kAllGather
                                       ? ctx.comm.all_gather_into(full, part)
                                       : ctx.comm.reduce_scatter(part, full, runtime::comm::ReduceOp::kSum);
        SHARDLAB_RETURN_IF_ERROR(w->wait(runtime::comm::kDefaultTimeout));
      }
      SHARDLAB_RETURN_IF_ERROR(ctx.comm.barrier()->wait(runtime::comm::kDefaultTimeout));
      if (ctx.rank == 0) seconds = static_cast<double>(clock_.now() - t0) / 1e9 / kRepeats;
      return Status::ok();
    });
    for (const auto& r : results)
      if (!r.status.is_ok()) die(r.status.to_string());
    double max = 0;
    MPI_Allreduce(&seconds, &max, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return max;
  }

 private:
  static constexpr int kRepeats = 8;
  const Clock& clock_;
  int world_size_;
  Collective collective_ = Collective::kAllGather;
  std::int64_t chunk_ = 0;
};

void run_benchmark(benchmark::State& state, CommBenchBackend& backend, Collective c, std::int64_t bytes) {
  backend.prepare(c, bytes);
  backend.run_once();  // warm-up (connections, page faults), not timed
  double total = 0;
  for (auto _ : state) {
    const double seconds = backend.run_once();
    total += seconds;
    state.SetIterationTime(seconds);
  }
  backend.release();
  const int n = backend.world_size();
  const double iterations = static_cast<double>(state.iterations());
  const double algbw = total > 0 ? static_cast<double>(bytes) * iterations / total / 1e9 : 0.0;
  state.counters["bytes"] = static_cast<double>(bytes);
  state.counters["ranks"] = n;
  state.counters["algbw_GBps"] = algbw;
  state.counters["busbw_GBps"] = algbw * (n - 1) / n;
}

}  // namespace

// Registers "<collective>/<backend>/<bytes>" for every size; the backend must outlive
// the benchmark run. Call it for every backend in the same order on every rank.
void register_comm_benchmarks(const std::shared_ptr<CommBenchBackend>& backend, Collective c,
                              const std::vector<std::int64_t>& sizes) {
  for (std::int64_t bytes : sizes) {
    const std::string name = std::string(collective_name(c)) + "/" + backend->name();
    benchmark::RegisterBenchmark(
        name.c_str(), [backend, c, bytes](benchmark::State& state) { run_benchmark(state, *backend, c, bytes); })
        ->Arg(bytes)
        ->Iterations(iterations_for(bytes))
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
  }
}

namespace {

// For ranks other than 0: runs every benchmark, prints nothing.
class SilentReporter final : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

}  // namespace
}  // namespace shardlab::bench

int main(int argc, char** argv) {
  using namespace shardlab::bench;
  auto env = shardlab::runtime::comm::mpi::MpiEnvironment::initialize(&argc, &argv);
  if (!env.is_ok()) {
    std::fprintf(stderr, "comm_bench: %s\n", env.status().to_string().c_str());
    return 3;
  }
  const int rank = (*env)->world_rank();
  // Only rank 0 writes --benchmark_out: drop the flag elsewhere.
  std::vector<char*> args(argv, argv + argc);
  if (rank != 0) {
    std::erase_if(args, [](const char* a) { return std::string_view(a).starts_with("--benchmark_out"); });
  }
  int nargs = static_cast<int>(args.size());
  args.push_back(nullptr);
  benchmark::Initialize(&nargs, args.data());
  if (benchmark::ReportUnrecognizedArguments(nargs, args.data())) return 2;

  std::size_t ran = 0;
  {
    shardlab::SteadyClock clock;
    std::vector<std::int64_t> sizes;
    for (std::int64_t b = 1024; b <= 64 * 1024 * 1024; b *= 4) sizes.push_back(b);
    // Backends compared side by side with raw MPI in the same run.
    const std::vector<std::shared_ptr<CommBenchBackend>> backends = {
        std::make_shared<RawMpiBackend>(clock),
        std::make_shared<RawMpiBackend>(clock, /*nonblocking=*/true),
        std::make_shared<MpiCommunicatorBackend>(clock),
        std::make_shared<SimCommunicatorBackend>(clock, (*env)->world_size()),
    };
    // Registration order is run order: per collective and size, every backend in turn.
    for (Collective c : {Collective::kAllGather, Collective::kReduceScatter}) {
      for (std::int64_t bytes : sizes) {
        for (const auto& backend : backends) register_comm_benchmarks(backend, c, {bytes});
      }
    }
    SilentReporter silent;
    ran = rank == 0 ? benchmark::RunSpecifiedBenchmarks() : benchmark::RunSpecifiedBenchmarks(&silent);
    benchmark::Shutdown();
    // The registered lambdas (and their backends) live until benchmark's static registry
    // dies; release MPI resources while MPI is still initialized.
    benchmark::ClearRegisteredBenchmarks();
  }
  MPI_Barrier(MPI_COMM_WORLD);
  env->reset();
  return ran > 0 ? 0 : 1;  // a filter that matches nothing is a broken smoke run
}
