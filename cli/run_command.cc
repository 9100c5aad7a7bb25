#include "cli/run_command.h"

#include <cstdio>
#include <string>

#include "runtime/comm/mpi/communicator.h"
#include "runtime/device/cpu/device.h"
#include "sim/world.h"

namespace shardlab::cli {

namespace {

using runtime::train::TrainResult;

void print_header(const RunArgs& a, int world) {
  const auto& m = a.train.model;
  std::printf("shardlab run: MLP %lld→", static_cast<long long>(m.input_dim));
  for (int l = 0; l < m.num_hidden_layers; ++l) std::printf("%lld→", static_cast<long long>(m.hidden_dim));
  std::printf("%lld, data-parallel on %d %s rank%s, global batch %lld, %d steps, seed %llu\n",
              static_cast<long long>(m.num_classes), world, a.backend == "sim" ? "simulated" : "MPI",
              world == 1 ? "" : "s", static_cast<long long>(a.train.global_batch), a.train.steps,
              static_cast<unsigned long long>(a.train.seed));
}

void print_steps(const TrainResult& r, const char* time_label) {
  std::printf("%6s  %-12s  %s\n", "step", "loss", time_label);
  for (std::size_t i = 0; i < r.losses.size(); ++i) {
    std::printf("%6zu  %-12.8f  %.6f s\n", i + 1, r.losses[i], static_cast<double>(r.step_times[i]) / 1e9);
  }
}

int report_oracle(const RunArgs& a, const TrainResult& result) {
  if (!a.check) return 0;
  runtime::device::cpu::CpuDevice oracle_device;
  SteadyClock clock;
  auto oracle = runtime::train::train_unsharded(oracle_device, clock, a.train);
  if (!oracle.is_ok()) {
    std::fprintf(stderr, "shardlab run: the unsharded oracle failed: %s\n", oracle.status().to_string().c_str());
    return oracle.status().exit_code();
  }
  const auto cmp = runtime::train::compare(result, *oracle);
  std::printf("unsharded oracle (1 rank, the concatenated batch of %lld): %s\n",
              static_cast<long long>(a.train.global_batch), cmp.describe().c_str());
  return cmp.match ? 0 : 1;
}

int fail(const Status& s) {
  std::fprintf(stderr, "shardlab run: %s\n", s.to_string().c_str());
  return s.exit_code();
}

int run_sim(const RunArgs& a) {
  if (Status s = runtime::train::validate(a.train, a.world_size); !s.is_ok()) return fail(s);
  sim::WorldOptions o;
  o.world_size = a.world_size;
  sim::World world(o);
  std::vector<Result<TrainResult>> per_rank(static_cast<std::size_t>(a.world_size), Status::internal("not run"));
  const auto results = world.run([&](sim::RankContext& ctx) {
    auto r = runtime::train::train_data_parallel(ctx.comm, ctx.device, ctx.clock, a.train);
    Status s = r.status();
    per_rank[static_cast<std::size_t>(ctx.rank)] = std::move(r);
    return s;
  });
  for (std::size_t r = 0; r < results.size(); ++r) {
    if (!results[r].status.is_ok()) return fail(results[r].status.with_context("rank " + std::to_string(r)));
  }
  print_header(a, a.world_size);
  const TrainResult& r0 = *per_rank[0];
  print_steps(r0, "simulated step time");
  for (std::size_t r = 1; r < per_rank.size(); ++r) {
    if (per_rank[r]->final_params != r0.final_params) {
      std::printf("replicas diverged: rank %zu's parameters differ from rank 0's\n", r);
      return 1;
    }
  }
  std::printf("replicas: all %d ranks hold bitwise-identical parameters; peak memory per rank %s\n", a.world_size,
              format_bytes(r0.memory.peak_total).c_str());
  return report_oracle(a, r0);
}

int run_mpi(const RunArgs& a, int* argc, char*** argv) {
  auto env = runtime::comm::mpi::MpiEnvironment::initialize(argc, argv);
  if (!env.is_ok()) return fail(env.status());
  SteadyClock clock;
  auto comm = runtime::comm::mpi::MpiEnvironment::create_world(clock);
  if (!comm.is_ok()) return fail(comm.status());
  runtime::comm::Communicator& c = **comm;
  if (Status s = runtime::train::validate(a.train, c.size()); !s.is_ok()) return fail(s);
  runtime::device::cpu::CpuDevice dev({"cpu", c.rank()});
  auto result = runtime::train::train_data_parallel(c, dev, clock, a.train);
  if (!result.is_ok()) return fail(result.status().with_context("rank " + std::to_string(c.rank())));
  int code = 0;
  if (c.rank() == 0) {
    print_header(a, c.size());
    print_steps(*result, "wall step time");
    code = report_oracle(a, *result);
  }
  // Every rank leaves with rank 0's verdict.
  auto verdict = dev.zeros({1}, DType::kI64, MemoryCategory::kOther, "verdict");
  if (!verdict.is_ok()) return fail(verdict.status());
  Tensor vt = *verdict;
  vt.data<std::int64_t>()[0] = code;
  if (Status s = c.broadcast(vt, 0)->wait(a.train.collective_timeout); !s.is_ok()) return fail(s);
  return static_cast<int>(vt.data<std::int64_t>()[0]);
}

}  // namespace

int run_command(const RunArgs& args, int* argc, char*** argv) {
  if (args.backend == "sim") return run_sim(args);
  return run_mpi(args, argc, argv);
}

}  // namespace shardlab::cli
