#include "cli/run_command.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <sstream>
#include <string>

#include "cli/backends.h"
#include "cli/run_outputs.h"
#include "cli/run_timing.h"
#include "cli/scenario_to_run_args.h"
#include "cli/trace_backends.h"
#include "runtime/comm/checking_communicator.h"
#include "runtime/comm/mpi/communicator.h"
#include "runtime/device/cpu/device.h"
#include "sim/engine/world.h"
#include "sim/models/device/profiles.h"
#include "sim/models/network/network.h"
#include "sim/timing/op_graph.h"

namespace shardlab::cli {

namespace {

using runtime::train::FsdpTrainResult;

std::string header_line(const RunArgs& a, int world, int units);

// Progress on stderr: on a terminal one line rewritten in place (step i/N, samples/s of the
// step's simulated or wall time, host ETA) at most 10 times a second; in logs a line for
// the first and the last step and otherwise at most one a second. Under mpiexec every line
// wakes the launcher to forward it, and with as many ranks as cores that wake-up takes a
// core from a rank: a line per 30 µs step made a 2-process MLP step ~20% slower.
std::function<void(const FsdpTrainResult&)> progress_printer(const RunArgs& a, const char* time_kind) {
  auto clock = std::make_shared<SteadyClock>();
  const Nanos start = clock->now();
  const bool tty = isatty(fileno(stderr)) != 0;
  const Nanos min_interval = tty ? 100 * kNanosPerMilli : 1000 * kNanosPerMilli;
  auto last_line = std::make_shared<Nanos>(start - min_interval);
  return [=](const FsdpTrainResult& r) {
    if (r.losses.empty()) return;
    const std::size_t done = r.losses.size() + static_cast<std::size_t>(r.first_step);
    const Nanos now = clock->now();
    const bool first_or_last = r.losses.size() == 1 || static_cast<int>(done) == a.train.steps;
    if (!first_or_last && now - *last_line < min_interval) return;
    *last_line = now;
    const double step_s = static_cast<double>(r.step_times.back()) / 1e9;
    const double rate = step_s > 0 ? static_cast<double>(a.train.global_batch) / step_s : 0.0;
    const double elapsed = static_cast<double>(now - start) / 1e9;
    const double eta =
        elapsed / static_cast<double>(r.losses.size()) * static_cast<double>(a.train.steps - static_cast<int>(done));
    if (tty) {
      std::fprintf(stderr, "\r  step %zu/%d · loss %.6f · %.1f samples/s (%s) · ETA %.0f s   %s", done, a.train.steps,
                   r.losses.back(), rate, time_kind, eta, static_cast<int>(done) == a.train.steps ? "\n" : "");
    } else {
      std::fprintf(stderr, "  step %zu/%d · loss %.6f · %.1f samples/s (%s)\n", done, a.train.steps, r.losses.back(),
                   rate, time_kind);
    }
    std::fflush(stderr);
  };
}

void print_header(const RunArgs& a, int world, int units) { std::printf("%s\n", header_line(a, world, units).c_str()); }

// NOTE [Resume]: a resumed run says what it resumed, on stdout and in the outputs.
void note_resume(const FsdpTrainResult& r, RunRecord& record) {
  if (r.resumed_from.empty()) return;
  record.resumed = r.resumed_from + " (" + r.resumed_what + ")";
  std::printf("resumed from %s\n", record.resumed.c_str());
}

// The injected faults as summary.txt lists them; without their origin, since the scenario's
// path would make summaries machine-specific.
std::vector<std::string> fault_lines(const RunArgs& a) {
  std::vector<std::string> out;
  if (!a.faults) return out;
  for (sim::Fault f : a.faults->faults) {
    f.origin.clear();
    out.push_back(f.describe());
  }
  return out;
}

// On stdout below the header, so that a straggler or a degraded link is as visible as the
// step times it changes.
void print_faults(const RunArgs& a) {
  const auto lines = fault_lines(a);
  if (lines.empty()) return;
  std::string all;
  for (const auto& l : lines) all += (all.empty() ? "" : "; ") + l;
  std::printf("faults: %s\n", all.c_str());
}

}  // namespace

namespace {

std::string this_host() {
  char host[256] = {};
  return gethostname(host, sizeof host - 1) == 0 ? host : "unknown";
}

}  // namespace

void fill_provenance(const RunArgs& a, RunRecord& r) {
  const BackendInfo& b = backend(a.backend);
  if (b.simulated) {
    r.stack = {{"device", a.device.name + " (simulated)"},
               {"network", a.network ? a.network->describe() : "the default alpha-beta ring"}};
  } else {
    r.stack = {{"device", std::string(b.device_provenance)}, {"network", std::string(b.network_provenance)}};
  }
  if (!a.stack.ideal()) r.stack["software"] = a.stack.name;
  r.stack["cpu_offload"] = a.cpu_offload;
  if (a.cpu_offload) r.stack["offload_host"] = b.simulated ? a.offload_host.name + " (simulated)" : "this host";
  r.version = std::string(shardlab_version());
  r.host = this_host();
}

void describe_run(const RunArgs& a, int world, const std::string& backend, RunRecord& r) {
  fill_provenance(a, r);
  r.scenario = a.scenario;
  r.backend = backend;
  r.seed = a.train.seed;
  r.world_size = world;
  r.global_batch = a.train.global_batch;
  const auto net = runtime::train::make_model(a.train);
  if (a.train.model_kind == runtime::train::ModelKind::kBert) {
    r.model = {{"name", a.model_name}, {"head", runtime::model::bert_head_name(a.train.bert.head)}};
    r.seq_len = a.train.bert.seq_len;
  } else {
    r.model = {{"name", "mlp"}};
  }
  r.model["parameters"] = runtime::model::total_numel(net->params());
  r.fsdp = {{"version", a.train.fsdp.version},
            {"sharding_strategy", runtime::fsdp::strategy_name(a.train.fsdp.strategy)},
            {"backward_prefetch", runtime::fsdp::prefetch_name(a.train.fsdp.backward_prefetch)},
            {"forward_prefetch", a.train.fsdp.forward_prefetch},
            {"limit_all_gathers", a.train.fsdp.limit_all_gathers},
            {"devices_per_node", a.train.fsdp.devices_per_node > 0 ? a.train.fsdp.devices_per_node : world},
            {"grad_accumulation", a.train.grad_accumulation}};
  r.flops_per_step = analytic_step_flops(a.train);
}

namespace {

// `timeout` plus `allowance` ns, saturating far below the clock's range.
Nanos extended_timeout(Nanos timeout, double allowance) {
  constexpr Nanos kCap = std::numeric_limits<Nanos>::max() / 2;
  return static_cast<double>(timeout) + allowance >= static_cast<double>(kCap)
             ? std::max(timeout, kCap)
             : timeout + static_cast<Nanos>(allowance);
}

RunRecord make_record(const RunArgs& a, int world, const std::string& backend) {
  RunRecord r;
  describe_run(a, world, backend, r);
  if (!a.device_id.empty()) {
    // NOTE [Simulated device_id] (cli/scenario_to_run_args.h): the run got here, so every rank's
    // device_id resolved to its compute device.
    const std::string type = torch_device_of(backend, a.device);
    r.device_id = a.device_id + " → " + (type == "cpu" ? "cpu" : type + ":0") + " on every rank";
  }
  return r;
}

// Writes the output folder and returns `code`, or 3 when the outputs could not be written
// (the folder was checked before the run, NOTE [Output folder check]; a later failure is
// a runtime failure, never a silent exit 0).
int write_outputs(const RunArgs& a, const RunRecord& r, int code) {
  if (a.out_dir.empty()) return code;
  std::vector<std::string> written;
  if (Status s = write_run_outputs(a.out_dir, r, &written); !s.is_ok()) {
    std::fprintf(stderr, "shardlab run: could not write outputs: %s\n", s.to_string().c_str());
    return std::max(code, 3);
  } else {
    std::string files;
    for (const auto& f : written) files += (files.empty() ? "" : ", ") + f;
    std::printf("outputs: %s/ (%s)\n", a.out_dir.c_str(), files.c_str());
  }
  return code;
}

std::string header_line(const RunArgs& a, int world, int units) {
  std::string arch;
  if (a.train.model_kind == runtime::train::ModelKind::kBert) {
    const auto& b = a.train.bert;
    const auto& c = b.config;
    arch = "BERT " + a.model_name + " (L" + std::to_string(c.num_hidden_layers) + " H" + std::to_string(c.hidden_size) +
           " A" + std::to_string(c.num_attention_heads) + ", " +
           std::string(runtime::model::bert_architecture_name(b.head)) + ", seq " + std::to_string(b.seq_len) +
           (b.activation_checkpointing ? ", activation checkpointing" : "") + ")";
  } else {
    const auto& m = a.train.model;
    arch = "MLP " + std::to_string(m.input_dim);
    for (int l = 0; l < m.num_hidden_layers; ++l) arch += "→" + std::to_string(m.hidden_dim);
    arch += "→" + std::to_string(m.num_classes);
  }
  char line[512];
  std::snprintf(
      line, sizeof line,
      "shardlab run: %s · FSDP%s %s (%s) · %d %s rank%s · %d unit%s · global batch %lld · %d steps · seed %llu",
      arch.c_str(), a.train.fsdp.version == 2 ? "2" : "",
      std::string(runtime::fsdp::strategy_name(a.train.fsdp.strategy)).c_str(),
      std::string(runtime::fsdp::prefetch_name(a.train.fsdp.backward_prefetch)).c_str(), world,
      backend(a.backend).simulated ? "simulated" : "MPI", world == 1 ? "" : "s", units, units == 1 ? "" : "s",
      static_cast<long long>(a.train.global_batch), a.train.steps, static_cast<unsigned long long>(a.train.seed));
  return line;
}

void print_steps(const FsdpTrainResult& r, const char* time_label, bool timing = false) {
  std::printf("%6s  %-12s  %s\n", "step", "loss", time_label);
  for (std::size_t i = 0; i < r.losses.size(); ++i) {
    // Timing mode computes no loss (NaN by construction): say so rather than print "nan".
    char loss[32] = "-";
    if (!(std::isnan(r.losses[i]) && timing)) std::snprintf(loss, sizeof loss, "%.8f", r.losses[i]);
    std::printf("%6zu  %-12s  %.6f s\n", i + 1 + static_cast<std::size_t>(r.first_step), loss,
                static_cast<double>(r.step_times[i]) / 1e9);
  }
  std::printf("peak memory per rank: %s (at the peak: %s)\n", format_bytes(r.memory.peak_total).c_str(),
              r.memory.breakdown(MemoryStats::Of::kAtPeak).c_str());
}

// 0 when the run matches the oracle (bitwise on the simulator when no tolerance is given
// and gradients are not clipped, NOTE [The oracle by default]), 1 otherwise; fills the record's check and oracle
// losses, or says why the oracle did not run (NOTE [The oracle by default] in cli/run_command.h).
int report_oracle(const RunArgs& a, const FsdpTrainResult& result, int world, bool simulated, RunRecord& record) {
  if (!a.oracle_off.empty()) {
    record.oracle_not_run = "turned off by " + a.oracle_off;
    std::printf("unsharded oracle: not run (%s); the gradients were not checked\n", record.oracle_not_run.c_str());
    return 0;
  }
  runtime::device::cpu::CpuDevice dev;
  auto oracle = runtime::train::train_oracle(dev, a.train, world, result.resumed_from);
  if (!oracle.is_ok()) {
    std::fprintf(stderr, "shardlab run: the unsharded oracle failed: %s\n", oracle.status().to_string().c_str());
    return oracle.status().exit_code();
  }
  const runtime::train::Tolerance tol = runtime::train::default_tolerance(a.train);
  const auto cmp = runtime::train::compare(result, *oracle, a.rtol.value_or(tol.rtol), a.atol.value_or(tol.atol));
  record.check = cmp;
  record.oracle_loss = oracle->losses;
  const std::string start = result.resumed_from.empty() ? "" : ", from " + result.resumed_from + " loaded unsharded";
  std::printf("unsharded oracle (1 process, the concatenated batch of %lld, reductions in rank order%s): %s\n",
              static_cast<long long>(a.train.global_batch), start.c_str(), cmp.describe().c_str());
  const bool tolerance_given = a.rtol.has_value() || a.atol.has_value();
  if (simulated && !tolerance_given && a.train.max_grad_norm == 0.0 && !cmp.bitwise) {
    std::printf("expected a bitwise match on the simulator (the oracle repeats its casts and reduction order)\n");
    return 1;
  }
  if (!cmp.bitwise && !tolerance_given) {
    std::printf("tolerance: %s's default (rtol %.2g, atol %.2g; the scenario gives none)\n", tol.dtype.c_str(),
                tol.rtol, tol.atol);
  }
  return cmp.within_tolerance || cmp.bitwise ? 0 : 1;
}

// The verdict: the oracle's (`code`) and, with a scenario, each of its expectations —
// 0, or 1 with every failed expectation listed.
int apply_expectations(const RunArgs& a, RunRecord& record, int code) {
  if (a.spec != nullptr) {
    record.expects = check_expectations(*a.spec, metrics_json(record));
    for (const auto& e : record.expects) {
      std::printf("expect %s: %s — %s\n", e.name.c_str(),
                  e.skipped ? "skipped"
                  : e.ok    ? "ok"
                            : "FAILED",
                  e.detail.c_str());
      if (!e.ok && !e.skipped) code = std::max(code, 1);
    }
  }
  if (code != 0) record.status = "expect_failed";
  return code;
}

// Prints a failed run's per-rank errors grouped (NOTE [Grouped failures]) on stderr and
// returns the grouped text for the record's status.
std::string report_failures(const std::vector<std::string>& lines, int world) {
  std::string all;
  for (const std::string& l : group_failures(lines, world)) {
    std::fprintf(stderr, "shardlab run: %s\n", l.c_str());
    all += (all.empty() ? "" : "\n") + l;
  }
  return all;
}

// The traces of the ranks the run traces (NOTE [Traced ranks] in cli/run_outputs.h):
// args.trace_ranks, or every rank; `trace_of(r)` gives rank r's events.
void add_traces(const RunArgs& a, int world, const std::function<std::vector<sim::TraceEvent>(int)>& trace_of,
                RunRecord& record) {
  std::vector<int> ranks = a.trace_ranks;
  if (ranks.empty()) {
    for (int r = 0; r < world; ++r) ranks.push_back(r);
  }
  for (int r : ranks) {
    if (r >= world) continue;  // checked against the scenario's world; a --backend world may be smaller
    record.traces.push_back(trace_of(r));
    record.traced_ranks.push_back(r);
  }
}

int fail(const Status& s) {
  std::fprintf(stderr, "shardlab run: %s\n", s.to_string().c_str());
  return s.exit_code();
}

// How long a failed MPI rank waits for the others to answer its roll call.
constexpr Nanos kRollCallGrace = 2 * kNanosPerSecond;

// NOTE [Simulated device_id] (cli/scenario_to_run_args.h): refused before any rank starts.
Status check_run_device_id(const RunArgs& a, const std::string& torch_device, int world) {
  const int dpn = a.train.fsdp.devices_per_node > 0 ? a.train.fsdp.devices_per_node : world;
  Status s = check_device_id(a.device_id, torch_device, world, dpn);
  return s.is_ok() ? s : Status::invalid_argument(a.device_id_where + s.message());
}

int run_sim(const RunArgs& a) {
  if (Status s = check_run_plan(a); !s.is_ok()) return fail(s);
  sim::WorldOptions o;
  o.world_size = a.world_size;
  o.trace = !a.out_dir.empty();
  o.device = a.device;
  o.network_model = a.network;
  o.perturb_seed = a.perturb_seed;
  if (a.train.model_kind == runtime::train::ModelKind::kBert && a.train.bert.compute_dtype == DType::kBF16) {
    o.emulated_dtype = DType::kBF16;  // NOTE [Emulated low precision] in sim/models/device/device.h
  }
  if (!o.network_model) {
    // Without a scenario: the same network a scenario gets by default (world.topology
    // switch, alpha_beta, collective_algorithm auto), so `shardlab run` equals
    // `shardlab run scenarios/default.yaml`.
    sim::NetworkSpec spec;
    const int dpn = a.train.fsdp.devices_per_node;
    spec.devices_per_node = dpn > 0 && a.world_size % dpn == 0 ? dpn : a.world_size;
    spec.nodes = a.world_size / spec.devices_per_node;
    auto network = sim::make_network(spec);
    if (!network.is_ok()) return fail(network.status());
    o.network_model = *network;
  }
  if (a.faults) {
    for (int r = 0; r < a.world_size; ++r) o.slowdown.push_back(a.faults->slowdown(r));
  }
  sim::World world(o);
  RunArgs args = a;
  args.train.record_memory_timeline = !a.out_dir.empty();
  std::vector<FsdpTrainResult> per_rank(static_cast<std::size_t>(a.world_size));
  const auto results = world.run([&](sim::RankContext& ctx) -> Status {
    runtime::comm::CheckingCommunicator checked(&ctx.comm, a.train.fsdp.collective_timeout);
    runtime::comm::Communicator& base = a.check_collectives ? checked : ctx.comm;
    // Outermost, so that a corrupt fault's collective index counts the runtime's collectives only.
    // Without faults too: its errors then say the rank, the step and the rank's collective
    // number, as a faulty run's (and timing mode's) do.
    sim::FaultInjector faulty(&base, a.faults ? a.faults : std::make_shared<const sim::FaultPlan>(), ctx.rank,
                              &ctx.clock);
    runtime::comm::Communicator& comm = faulty;
    // CPU offload's host: on the rank's clock and trace, across the device's host link.
    sim::SimDevice host({"host", ctx.rank}, a.offload_host, &ctx.clock);
    host.set_trace(ctx.sim_device.trace());
    runtime::train::FsdpTrainOptions train = args.train;
    // FSDP phases on the rank's trace, in virtual time like its ops.
    FsdpTraceSink phases(&ctx.clock, 0, ctx.sim_device.trace());
    if (ctx.sim_device.trace() != nullptr) train.fsdp.on_fsdp_event = phases.hook();
    int step = -1;
    train.before_step = [&faulty, &step, &phases](int s) {
      step = s;
      phases.set_step(s + 1);
      return faulty.before_step(s);
    };
    // A view_offset fault (NOTE [Faults] in sim/faults/faults.h): the first parameter view of its
    // unit at its step gets the fault's byte offset; the launch check must refuse it.
    const sim::Fault* view_fault = a.faults ? a.faults->view_fault(ctx.rank) : nullptr;
    bool view_corrupted = false;
    if (view_fault != nullptr) {
      train.fsdp.on_param_view = [view_fault, &step, &view_corrupted](int unit, Tensor& view) {
        if (view_corrupted || step != view_fault->step || unit != view_fault->unit) return;
        view_corrupted = true;
        view = view.with_unchecked_byte_offset(view_fault->byte_offset);
      };
    }
    if (a.cpu_offload) train.fsdp.offload_device = &host;
    train.progress_on_failure = &per_rank[static_cast<std::size_t>(ctx.rank)];
    if (ctx.rank == 0) train.on_step = progress_printer(a, "simulated");
    auto trained = runtime::train::train_fsdp(comm, ctx.device, ctx.clock, train);
    if (view_corrupted && !trained.is_ok()) {
      return Status(trained.status().code(), sim::fault_where(ctx.rank, step) + ": " + trained.status().message() +
                                                 " [injected faults: " + view_fault->describe() + "]");
    }
    SHARDLAB_RETURN_IF_ERROR(trained.status());
    if (view_fault != nullptr && !view_corrupted) {
      return Status::invalid_argument(view_fault->origin + ": view_offset: unit " + std::to_string(view_fault->unit) +
                                      " is not an FSDP unit of this run, which has " +
                                      std::to_string(trained->num_units) + " (allowed: unit 0 to " +
                                      std::to_string(trained->num_units - 1) + ")");
    }
    per_rank[static_cast<std::size_t>(ctx.rank)] = std::move(*trained);
    return Status::ok();
  });
  RunRecord record = make_record(a, a.world_size, "sim");
  record.stack["network"] = o.network_model->describe();  // the default one too
  record.faults = fault_lines(a);
  record.device_peak_flops = mfu_peak_flops(a.train, o.device);
  // A failed run reports every failed rank (with injected faults, the faulty rank first:
  // the others' errors are its consequences), and still writes a readable summary.
  std::vector<std::size_t> failed;
  for (std::size_t r = 0; r < results.size(); ++r)
    if (!results[r].status.is_ok()) failed.push_back(r);
  if (!failed.empty()) {
    if (a.faults) {
      std::stable_partition(failed.begin(), failed.end(),
                            [&](std::size_t r) { return a.faults->has_rank_faults(static_cast<int>(r)); });
    }
    // NOTE [Agreeing on bad input] (runtime/train/fsdp_train.cc): the rank that found the
    // problem first, the ranks that only learned of it after.
    std::stable_partition(failed.begin(), failed.end(), [&](std::size_t r) {
      return results[r].status.message().find("(its error says why)") == std::string::npos;
    });
    int code = 0;
    for (std::size_t r : failed) {
      const std::string rank = "rank " + std::to_string(r);
      const Status& raw = results[r].status;
      const Status s = raw.message().rfind(rank + ",", 0) == 0 || raw.message().rfind(rank + ":", 0) == 0
                           ? raw
                           : raw.with_context(rank);
      record.failures.push_back(s.to_string());
      code = std::max(code, s.exit_code());
    }
    record.status = report_failures(record.failures, a.world_size);
    if (per_rank[0].num_units > 0) record.header = header_line(a, a.world_size, per_rank[0].num_units);
    // What the ranks had when they stopped: steps, memory, trace (outputs keep it).
    record.ranks = std::move(per_rank);
    add_traces(
        a, a.world_size, [&](int r) { return world.trace(r); }, record);
    return write_outputs(a, record, code);
  }
  const FsdpTrainResult& r0 = per_rank[0];
  record.header = header_line(a, a.world_size, r0.num_units);
  print_header(a, a.world_size, r0.num_units);
  print_faults(a);
  note_resume(r0, record);
  print_steps(r0, "simulated step time");
  int code = report_oracle(a, r0, a.world_size, /*simulated=*/true, record);
  record.ranks = std::move(per_rank);
  add_traces(
      a, a.world_size, [&](int r) { return world.trace(r); }, record);
  code = apply_expectations(a, record, code);
  return write_outputs(a, record, code);
}

// Timing mode (cli/run_timing.h): no values, so no oracle check (said on stdout and in the
// outputs); expectations still apply.
int run_timing_mode(const RunArgs& a) {
  TimingRunOptions o;
  o.device = a.device;
  o.network = a.network;
  o.dump_graph = a.dump_graph;
  o.trace_ranks = a.trace_ranks;
  RunRecord record;
  if (Status s = run_timing(a, o, record); !s.is_ok()) {
    // One line per failed rank when injected faults stopped ranks, grouped as run_sim's.
    std::istringstream lines(s.to_string());
    for (std::string line; std::getline(lines, line);) record.failures.push_back(line);
    record.status = report_failures(record.failures, a.world_size);
    return write_outputs(a, record, s.exit_code());
  }
  std::printf("%s\n", record.header.c_str());
  print_faults(a);
  if (!record.ranks.empty()) print_steps(record.ranks[0], "simulated step time (timing mode)", /*timing=*/true);
  std::printf("%s", host_bound_line(record).c_str());
  if (!a.dump_graph.empty()) std::printf("op graph: %s\n", a.dump_graph.c_str());
  record.oracle_not_run = "timing mode computes no values, only time: nothing to compare";
  std::printf("unsharded oracle: not run (%s)\n", record.oracle_not_run.c_str());
  return write_outputs(a, record, apply_expectations(a, record, 0));
}

// Real processes under mpiexec/mpirun: `mpi` computes on the CPU and reduces with Open MPI;
// `hpu` computes on this process's Gaudi card and reduces with HCCL (bootstrapped over MPI).
int run_mpi(const RunArgs& a, int* argc, char*** argv) {
  auto env = runtime::comm::mpi::MpiEnvironment::initialize(argc, argv);
  if (!env.is_ok()) return fail(env.status());
  SteadyClock clock;
  auto world = runtime::comm::mpi::MpiEnvironment::create_world(clock);
  if (!world.is_ok()) return fail(world.status());
  const BackendInfo& backend_info = backend(a.backend);
  auto process = backend_info.open(std::move(*world), clock);
  if (!process.is_ok()) return fail(process.status());
  runtime::comm::mpi::MpiCommunicator* roll = &(*process)->mpi_world();
  runtime::comm::Communicator& base = (*process)->communicator();
  if (Status s = check_run_device_id(a, torch_device_of(a.backend, a.device), base.size()); !s.is_ok()) return fail(s);
  runtime::device::Device& raw_dev = (*process)->device();
  // NOTE [Ending a failed job] (runtime/comm/mpi/communicator.h): once ranks may be inside
  // collectives, a runtime failure (exit 3) ends the whole job rather than waiting in
  // MPI_Finalize for ranks that never arrive; bad input (exit 2), seen alike by every rank,
  // ends normally.
  // Before it ends the job, a failed rank holds a roll call (NOTE [Roll call],
  // runtime/comm/mpi/communicator.h) so that its report names the ranks that are hung or
  // dead, as the simulator names the ranks that never arrived.
  const auto fail_job = [roll](const Status& s) {
    const int code = fail(s);
    if (code == 3) {
      std::string why = s.to_string();
      why = why.substr(0, why.find('\n'));
      std::fprintf(stderr, "shardlab run: rank %d: %s\n", roll->rank(), roll->roll_call(why, kRollCallGrace).c_str());
      runtime::comm::mpi::MpiEnvironment::abort_job(code);
    }
    return code;
  };
  {
    // NOTE [Output folder check]: rank 0 writes the outputs, so rank 0 checks the folder
    // and every rank leaves with its verdict before training starts.
    Status out_ok = base.rank() == 0 ? check_output_folder(a.out_dir).with_context("--out") : Status::ok();
    auto flag = raw_dev.zeros({1}, DType::kI64, MemoryCategory::kOther, "out_ok");
    if (!flag.is_ok()) return fail_job(flag.status());
    if (Status s = runtime::device::values_from_host(raw_dev, std::vector<std::int64_t>{out_ok.is_ok() ? 1 : 0}, *flag);
        !s.is_ok()) {
      return fail_job(s);
    }
    if (Status s = base.broadcast(*flag, 0)->wait(a.train.fsdp.collective_timeout); !s.is_ok()) return fail_job(s);
    if (!out_ok.is_ok()) return fail(out_ok);
    auto agreed = runtime::device::values_to_host<std::int64_t>(raw_dev, *flag);
    if (!agreed.is_ok()) return fail_job(agreed.status());
    if ((*agreed)[0] != 1) {
      return fail(Status::invalid_argument("--out: rank 0 cannot write the output folder '" + a.out_dir +
                                           "' (its error says why)"));
    }
  }
  runtime::comm::CheckingCommunicator checked(&base, a.train.fsdp.collective_timeout);
  runtime::comm::Communicator& unchecked =
      a.check_collectives ? static_cast<runtime::comm::Communicator&>(checked) : base;
  if (Status s = runtime::train::validate(a.train, unchecked.size()); !s.is_ok()) return fail_job(s);
  // Traces in wall time (NOTE [Wall-clock traces] in cli/trace_backends.h): every rank
  // records its ops, collectives and FSDP phases from a common origin after a barrier;
  // rank 0 gathers them for trace.json. The tracing wrappers are outermost, so the
  // collective checker's own exchanges are not traced.
  const bool traced = !a.out_dir.empty();
  sim::TraceRecorder trace;
  Nanos origin = 0;
  if (traced) {
    if (Status s = base.barrier()->wait(a.train.fsdp.collective_timeout); !s.is_ok()) return fail_job(s);
    origin = clock.now();
  }
  TracingDevice traced_dev(&raw_dev, &clock, origin, &trace);
  TracingCommunicator traced_comm(&unchecked, &clock, origin, &trace, std::string(backend_info.trace_algorithm));
  if (a.train.fsdp.devices_per_node > 0) traced_comm.set_nodes(a.train.fsdp.devices_per_node);
  FsdpTraceSink phases(&clock, origin, traced ? &trace : nullptr);
  runtime::device::Device& dev = traced ? static_cast<runtime::device::Device&>(traced_dev) : raw_dev;
  runtime::comm::Communicator& c = traced ? static_cast<runtime::comm::Communicator&>(traced_comm) : unchecked;
  RunArgs args = a;
  if (backend_info.runtime_checks_device_id) {  // against the device this process opened
    const int dpn = a.train.fsdp.devices_per_node > 0 ? a.train.fsdp.devices_per_node : c.size();
    args.train.fsdp.device_id = device_id_of_rank(a.device_id, std::string(backend_info.torch_device), c.rank(), dpn);
  }
  args.train.record_memory_timeline = c.rank() == 0 && !a.out_dir.empty();
  if (c.rank() == 0) args.train.on_step = progress_printer(a, "wall");
  if (traced) {
    args.train.fsdp.on_fsdp_event = phases.hook();
    args.train.before_step = [&phases](int s) {
      phases.set_step(s + 1);
      return Status::ok();
    };
  }
  const Nanos train_start = clock.now();
  auto result = runtime::train::train_fsdp(c, dev, clock, args.train);
  if (!result.is_ok()) return fail_job(result.status().with_context("rank " + std::to_string(c.rank())));
  const Nanos trained = clock.now() - train_start;
  // A rank's own training time, counting a step as at least 1 ms: what the waits after
  // training scale with (NOTE [Waiting after training], NOTE [Waiting for rank 0's verdict]).
  const double per_rank_work = std::max(static_cast<double>(trained), 1e6 * static_cast<double>(a.train.steps));
  const Nanos timeout = a.train.fsdp.collective_timeout;
  // NOTE [Waiting after training]: between its last step and the gathers below each rank
  // serializes its own trace — every op of every step —, and under load one rank can get
  // there seconds after the others, longer than a collective timeout sized for one
  // collective (world.collective_timeout_s: 5 ended a healthy 3,770-step MLP run on 2 x 2
  // namespace nodes in a false TIMEOUT here, rank 0 arriving after the other three had
  // given up). So these gathers wait the collective timeout plus twice a rank's own
  // training time.
  const Nanos gather_timeout = extended_timeout(timeout, 2.0 * per_rank_work);
  std::vector<std::vector<sim::TraceEvent>> traces;
  std::vector<RunRecord::RankSteps> rank_steps;
  if (traced) {
    // The outputs' times all count from the trace's origin (step starts, memory samples).
    for (Nanos& t : result->step_starts) t -= origin;
    for (auto& m : result->memory_timeline) m.time -= origin;
    auto gathered = gather_traces(base, raw_dev, trace.events(), gather_timeout);
    if (!gathered.is_ok()) return fail_job(gathered.status().with_context("rank " + std::to_string(c.rank())));
    traces = std::move(*gathered);
    // Every rank's step starts and times, for the per-rank breakdown: [count, starts…, times…].
    std::vector<std::int64_t> mine{static_cast<std::int64_t>(result->step_starts.size())};
    mine.insert(mine.end(), result->step_starts.begin(), result->step_starts.end());
    mine.insert(mine.end(), result->step_times.begin(), result->step_times.end());
    auto steps = gather_words(base, raw_dev, mine, gather_timeout);
    if (!steps.is_ok()) return fail_job(steps.status().with_context("rank " + std::to_string(c.rank())));
    for (const auto& w : *steps) {
      const auto n = static_cast<std::ptrdiff_t>(w.at(0));
      rank_steps.push_back({{w.begin() + 1, w.begin() + 1 + n}, {w.begin() + 1 + n, w.end()}});
    }
  }
  int code = 0;
  if (c.rank() == 0) {
    print_header(a, c.size(), result->num_units);
    RunRecord record = make_record(a, c.size(), a.backend);
    note_resume(*result, record);
    print_steps(*result, "wall step time");
    record.header = header_line(a, c.size(), result->num_units);
    code = report_oracle(a, *result, c.size(), /*simulated=*/false, record);
    record.ranks.push_back(*result);
    record.rank_steps = std::move(rank_steps);
    add_traces(
        a, c.size(), [&](int r) { return std::move(traces[static_cast<std::size_t>(r)]); }, record);
    code = apply_expectations(a, record, code);
    code = write_outputs(a, record, code);
  }
  // Every rank leaves with rank 0's verdict.
  // NOTE [Waiting for rank 0's verdict]: meanwhile rank 0 has run the oracle — the whole
  // world's batches on one process, about world_size times a rank's training — and
  // written the outputs, work that the collective timeout (sized for one collective)
  // does not cover: with world.collective_timeout_s: 5, a 3,320-step MLP run on 4 ranks
  // ended in a false TIMEOUT here. So the others wait the collective timeout plus twice
  // (world_size + 1) times their own training time before calling rank 0 hung — counting
  // a step as at least 1 ms: rank 0's work per step (the oracle's step, every rank's trace
  // events to write) does not shrink with fast training steps (2,990 MLP steps on 4 ranks:
  // 0.74 s of training, ~10 s of oracle and outputs on rank 0).
  const Nanos verdict_timeout = extended_timeout(timeout, 2.0 * static_cast<double>(c.size() + 1) * per_rank_work);
  auto verdict = raw_dev.zeros({1}, DType::kI64, MemoryCategory::kOther, "verdict");
  if (!verdict.is_ok()) return fail_job(verdict.status());
  if (Status s = runtime::device::values_from_host(raw_dev, std::vector<std::int64_t>{code}, *verdict); !s.is_ok()) {
    return fail_job(s);
  }
  if (Status s = base.broadcast(*verdict, 0)->wait(verdict_timeout); !s.is_ok()) return fail_job(s);
  auto agreed = runtime::device::values_to_host<std::int64_t>(raw_dev, *verdict);
  if (!agreed.is_ok()) return fail_job(agreed.status());
  return static_cast<int>((*agreed)[0]);
}

}  // namespace

int replay_command(const ReplayArgs& r) {
  const auto bad = [](const Status& s) {
    std::fprintf(stderr, "shardlab replay: %s\n", s.to_string().c_str());
    return s.exit_code();
  };
  auto graph = sim::timing::read_graph_json(r.graph);
  if (!graph.is_ok()) return bad(graph.status());
  const std::string out_dir =
      r.out_dir.empty() ? "out/replay-" + std::filesystem::path(r.graph).stem().string() : r.out_dir;
  if (Status s = check_output_folder(out_dir); !s.is_ok()) return bad(s.with_context("--out"));
  // The network: as the graph recorded it, with the flags' overrides.
  sim::NetworkSpec spec;
  if (graph->network) {
    spec.topology = graph->network->topology;
    spec.nodes = graph->network->nodes;
    spec.devices_per_node = graph->network->devices_per_node;
  } else {
    spec.nodes = 1;
    spec.devices_per_node = graph->world_size;
  }
  const auto choose = [](const std::string& given, const std::string& recorded) {
    return given.empty() ? recorded : given;
  };
  const std::string model = choose(r.network_model, graph->network ? graph->network->model : "alpha_beta");
  const std::string algorithm = choose(r.collective_algorithm, graph->network ? graph->network->algorithm : "auto");
  if (!r.topology.empty()) spec.topology = r.topology;
  auto parsed_model = sim::parse_network_model(model);
  if (!parsed_model.is_ok())
    return bad(
        parsed_model.status().with_context(r.network_model.empty() ? r.graph + ": network.model" : "--network-model"));
  spec.model = *parsed_model;
  auto parsed_algorithm = sim::parse_algorithm(algorithm);
  if (!parsed_algorithm.is_ok()) {
    return bad(parsed_algorithm.status().with_context(r.collective_algorithm.empty() ? r.graph + ": network.algorithm"
                                                                                     : "--collective-algorithm"));
  }
  spec.algorithm = *parsed_algorithm;
  auto network = sim::make_network(spec);
  if (!network.is_ok()) {
    return bad(network.status().with_context(r.topology.empty() ? r.graph + ": network.topology" : "--topology"));
  }
  TimingRunOptions o;
  o.network = *network;
  if (!graph->device.empty()) {
    auto device = sim::load_device_profile(graph->device);
    if (device.is_ok()) o.device = *device;  // only for MFU; an unknown profile leaves it unknown
  }
  RunRecord record;
  record.stack = {{"device", graph->device.empty() ? std::string("unknown (not recorded in the graph)")
                                                   : graph->device + " (simulated)"},
                  {"network", (*network)->describe()},
                  {"cpu_offload", false}};
  record.version = std::string(shardlab_version());
  record.host = this_host();
  RunArgs out;
  out.out_dir = out_dir;
  Status s = replay_graph_file(r.graph, o, record);
  if (!s.is_ok()) {
    std::istringstream lines(s.to_string());
    for (std::string line; std::getline(lines, line);) record.failures.push_back(line);
    record.status = report_failures(record.failures, graph->world_size);
    return write_outputs(out, record, s.exit_code());
  }
  std::printf("%s\n", record.header.c_str());
  std::printf("network: %s\n", (*network)->describe().c_str());
  if (!record.ranks.empty()) print_steps(record.ranks[0], "simulated step time (replayed)", /*timing=*/true);
  std::printf("%s", host_bound_line(record).c_str());
  record.oracle_not_run = "a replayed graph has no values, only time: nothing to compare";
  return write_outputs(out, record, 0);
}

Status check_run_plan(const RunArgs& a) {
  if (backend(a.backend).simulated && a.mode == RunMode::kTiming)
    return Status::ok();  // no values: timing mode plans its own
  if (backend(a.backend).simulated && a.world_size > sim::kMaxNumericsRanks)
    return numerics_world_too_big(a.world_size);
  SHARDLAB_RETURN_IF_ERROR(runtime::train::validate(a.train, a.world_size));
  if (!backend(a.backend).simulated) return Status::ok();  // one rank a process: each holds one shard
  return runtime::train::check_numerics_host_memory(a.train, runtime::train::host_memory_bytes());
}

int run_command(const RunArgs& in, int* argc, char*** argv) {
  RunArgs args = in;
  if (backend(args.backend).simulated) {
    // NOTE [Output folder check]; under MPI rank 0 checks it (run_mpi).
    if (Status s = check_output_folder(args.out_dir); !s.is_ok()) return fail(s.with_context("--out"));
    if (Status s = check_run_device_id(args, torch_device_of("sim", args.device), args.world_size); !s.is_ok()) {
      return fail(s);
    }
  }
  if (backend(args.backend).simulated && args.mode == RunMode::kTiming) return run_timing_mode(args);
  if (backend(args.backend).simulated) return run_sim(args);
  return run_mpi(args, argc, argv);  // a real backend: one rank per process
}

}  // namespace shardlab::cli
