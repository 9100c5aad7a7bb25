#include "cli/run_outputs.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "runtime/io/safetensors.h"

namespace shardlab::cli {

namespace {

using runtime::train::FsdpTrainResult;
using Json = nlohmann::json;

double seconds(Nanos n) { return static_cast<double>(n) / 1e9; }

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

// Shortest text that reads back as the same double (for bitwise comparisons in reports).
std::string exact(double v) {
  char buf[40];
  for (int precision = 9; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

// Per step of rank `r`: simulated compute time (sum of compute events inside the step).
std::vector<double> compute_per_step(const FsdpTrainResult& res, const std::vector<sim::TraceEvent>& trace) {
  std::vector<double> out(res.step_times.size(), 0.0);
  for (const auto& e : trace) {
    if (e.stream != sim::kTraceCompute) continue;
    for (std::size_t s = 0; s < res.step_starts.size(); ++s) {
      if (e.start >= res.step_starts[s] && e.start < res.step_starts[s] + res.step_times[s]) {
        out[s] += seconds(e.duration);
        break;
      }
    }
  }
  return out;
}

const char* comm_key(int stream) {
  switch (stream) {
    case sim::kTraceAllGather: return "all_gather";
    case sim::kTraceReduceScatter: return "reduce_scatter";
    case sim::kTraceAllReduce: return "all_reduce";
    default: return "broadcast";
  }
}

}  // namespace

double mfu_peak_flops(const runtime::train::FsdpTrainOptions& o, const sim::DeviceProfile& device) {
  const bool low = o.model_kind == runtime::train::ModelKind::kBert && o.bert.compute_dtype != DType::kF32;
  return low ? device.matrix_bf16_flops_per_s : device.matrix_flops_per_s;
}

double analytic_step_flops(const runtime::train::FsdpTrainOptions& o) {
  const auto B = static_cast<double>(o.global_batch);
  if (o.model_kind == runtime::train::ModelKind::kMlp) {
    const auto& m = o.model;
    double weights = 0, in = static_cast<double>(m.input_dim);
    for (int l = 0; l < m.num_hidden_layers; ++l) {
      weights += in * static_cast<double>(m.hidden_dim);
      in = static_cast<double>(m.hidden_dim);
    }
    weights += in * static_cast<double>(m.num_classes);
    return 6.0 * weights * B;
  }
  const auto& c = o.bert.config;
  const double T = static_cast<double>(o.bert.seq_len), N = B * T, H = static_cast<double>(c.hidden_size),
               I = static_cast<double>(c.intermediate_size), A = static_cast<double>(c.num_attention_heads),
               d = H / A, V = static_cast<double>(c.vocab_size);
  // Per layer forward: Q, K, V, output (4·H²) and the two FFN GEMMs (2·H·I) per token, plus
  // scores and context (2 · 2·T²·d per row and head).
  double forward = c.num_hidden_layers * (2.0 * N * (4.0 * H * H + 2.0 * H * I) + 4.0 * B * A * T * T * d);
  switch (o.bert.head) {
    case runtime::model::BertHead::kSequenceClassification: forward += 2.0 * B * (H * H + H * c.num_labels); break;
    case runtime::model::BertHead::kMaskedLM: forward += 2.0 * 0.15 * N * (H * H + H * V); break;  // masked tokens only
    case runtime::model::BertHead::kQuestionAnswering: forward += 2.0 * N * H * 2.0; break;
  }
  return 3.0 * forward;
}

Json metrics_json(const RunRecord& r) {
  Json j;
  j["scenario"] = r.scenario;
  j["seed"] = r.seed;
  j["backend"] = r.backend;
  j["mode"] = r.mode;
  j["world_size"] = r.world_size;
  j["model"] = r.model;
  j["fsdp"] = r.fsdp;
  j["global_batch"] = r.global_batch;
  j["seq_len"] = r.seq_len;
  j["status"] = r.status;
  if (!r.faults.empty()) j["faults"] = r.faults;
  if (!r.device_id.empty()) j["device_id"] = r.device_id;
  if (r.check) {
    j["oracle"] = {{"ran", true}, {"verdict", r.check->describe()}};
  } else if (!r.oracle_not_run.empty()) {
    j["oracle"] = {{"ran", false}, {"why", r.oracle_not_run}};
  }
  if (r.ranks.empty()) return j;
  const FsdpTrainResult& r0 = r.ranks.front();
  j["steps"] = r0.losses.size();
  // Step time: the slowest rank per step (on sim every rank reports; under MPI rank 0).
  std::vector<double> per_step(r0.step_times.size(), 0.0);
  for (const auto& rank : r.ranks) {
    for (std::size_t s = 0; s < per_step.size() && s < rank.step_times.size(); ++s) {
      per_step[s] = std::max(per_step[s], seconds(rank.step_times[s]));
    }
  }
  const double med = median(per_step);
  j["step_time_s"] = {{"median", med},
                      {"min", per_step.empty() ? 0.0 : *std::min_element(per_step.begin(), per_step.end())},
                      {"max", per_step.empty() ? 0.0 : *std::max_element(per_step.begin(), per_step.end())},
                      {"per_step", per_step}};
  const double samples = med > 0 ? static_cast<double>(r.global_batch) / med : 0.0;
  j["samples_per_s"] = samples;
  j["tokens_per_s"] = samples * static_cast<double>(r.seq_len);
  const double tflops = med > 0 ? r.flops_per_step / med / r.world_size / 1e12 : 0.0;
  j["tflops_per_device"] = tflops;
  j["mfu"] = r.device_peak_flops > 0 ? Json(tflops * 1e12 / r.device_peak_flops) : Json(nullptr);
  // Breakdown (rank 0, median over steps): compute from the trace; on the simulator every
  // other advance of a rank's clock inside a step is a wait on communication.
  if (!r.traces.empty() && !r.traces.front().empty()) {
    const std::vector<double> compute = compute_per_step(r0, r.traces.front());
    std::vector<double> exposed;
    for (std::size_t s = 0; s < compute.size(); ++s) exposed.push_back(std::max(0.0, seconds(r0.step_times[s]) - compute[s]));
    j["step_breakdown_s"] = {{"compute", median(compute)}, {"exposed_comm", median(exposed)}, {"idle", 0.0}};
    j["exposed_comm_s"] = median(exposed);
    // Every rank's breakdown when every rank was traced (the simulator): a straggler shows
    // as the rank with the most compute, the ranks waiting for it as exposed communication.
    if (r.traces.size() == r.ranks.size() && r.ranks.size() > 1) {
      Json per_rank = Json::array();
      for (std::size_t k = 0; k < r.ranks.size(); ++k) {
        const FsdpTrainResult& rk = r.ranks[k];
        const std::vector<double> c = compute_per_step(rk, r.traces[k]);
        std::vector<double> e;
        for (std::size_t s = 0; s < c.size() && s < rk.step_times.size(); ++s) {
          e.push_back(std::max(0.0, seconds(rk.step_times[s]) - c[s]));
        }
        per_rank.push_back({{"compute", median(c)}, {"exposed_comm", median(e)}});
      }
      j["step_breakdown_s_per_rank"] = per_rank;
    }
    Json bytes = {{"all_gather", 0}, {"reduce_scatter", 0}, {"all_reduce", 0}, {"broadcast", 0}};
    for (const auto& e : r.traces.front()) {
      if (e.stream != sim::kTraceCompute && e.bytes > 0) bytes[comm_key(e.stream)] = bytes[comm_key(e.stream)].get<std::int64_t>() + e.bytes;
    }
    for (auto& [k, v] : bytes.items()) v = v.get<std::int64_t>() / std::max<std::int64_t>(1, static_cast<std::int64_t>(per_step.size()));
    j["comm_bytes"] = bytes;
  }
  // {"parameters": …, …, "other": …} of per-category bytes.
  const auto by_category = [](const std::array<std::int64_t, kNumMemoryCategories>& bytes) {
    Json o = Json::object();
    for (int c = 0; c < kNumMemoryCategories; ++c) {
      o[std::string(category_name(static_cast<MemoryCategory>(c)))] = bytes[static_cast<std::size_t>(c)];
    }
    return o;
  };
  Json peaks = Json::array();
  std::array<std::int64_t, kNumMemoryCategories> by_cat{};
  std::size_t highest = 0;  // the lowest rank with the highest peak
  for (std::size_t k = 0; k < r.ranks.size(); ++k) {
    const MemoryStats& m = r.ranks[k].memory;
    peaks.push_back(m.peak_total);
    for (std::size_t c = 0; c < by_cat.size(); ++c) by_cat[c] = std::max(by_cat[c], m.peak[c]);
    if (m.peak_total > r.ranks[highest].memory.peak_total) highest = k;
  }
  j["peak_memory_bytes"] = peaks;
  j["peak_memory_bytes_by_category"] = by_category(by_cat);
  // What the highest peak was made of: sums to that peak.
  Json at_peak = by_category(r.ranks[highest].memory.at_peak);
  at_peak["rank"] = static_cast<std::int64_t>(highest);
  j["peak_memory_breakdown_bytes"] = at_peak;
  j["loss"] = r0.losses;
  j["first_step"] = r0.first_step;
  // FNV-1a of the final parameters' bits: equal runs (or a resumed and an uninterrupted
  // one) have equal checksums.
  std::uint64_t h = 1469598103934665603ull;
  for (float v : r0.final_params) {
    std::uint32_t bits = 0;
    std::memcpy(&bits, &v, sizeof bits);
    for (int k = 0; k < 4; ++k) {
      h ^= (bits >> (8 * k)) & 0xffu;
      h *= 1099511628211ull;
    }
  }
  char hex[20];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  j["final_params_fnv1a"] = hex;
  if (!r.oracle_loss.empty()) j["oracle_loss"] = r.oracle_loss;
  if (r.check) {
    j["grads_match_unsharded"] = {{"bitwise", r.check->bitwise},
                                  {"within_tolerance", r.check->within_tolerance || r.check->bitwise},
                                  {"max_grad_diff", r.check->max_grad_diff},
                                  {"max_param_diff", r.check->max_param_diff},
                                  {"rtol", r.check->rtol},
                                  {"atol", r.check->atol}};
  }
  Json ex = Json::array();
  for (const auto& e : r.expects) ex.push_back({{"name", e.name}, {"ok", e.ok}, {"detail", e.detail}});
  j["expect"] = ex;
  return j;
}

std::string summary_text(const RunRecord& r) {
  std::ostringstream o;
  o << (r.header.empty() ? "shardlab run: " + r.scenario : r.header) << "\n";
  o << "scenario " << r.scenario << " · backend " << r.backend << " (" << r.mode << ") · " << r.world_size
    << " rank" << (r.world_size == 1 ? "" : "s") << " · seed " << r.seed << "\n";
  if (!r.device_id.empty()) o << "device_id: " << r.device_id << "\n";
  if (!r.faults.empty()) {
    o << "faults:";
    for (std::size_t i = 0; i < r.faults.size(); ++i) o << (i == 0 ? " " : "; ") << r.faults[i];
    o << "\n";
  }
  if (!r.ranks.empty()) {
    const FsdpTrainResult& r0 = r.ranks.front();
    char line[320];
    std::snprintf(line, sizeof line, "%6s  %-14s  %s\n", "step", "loss", r.backend == "sim" ? "simulated step time" : "step time");
    o << line;
    for (std::size_t i = 0; i < r0.losses.size(); ++i) {
      // Timing mode computes no loss (NaN by construction): "-" rather than "nan".
      char loss[32] = "-";
      if (!(std::isnan(r0.losses[i]) && r.mode == "timing")) std::snprintf(loss, sizeof loss, "%.8f", r0.losses[i]);
      std::snprintf(line, sizeof line, "%6zu  %-14s  %.6f s\n", i + 1 + static_cast<std::size_t>(r0.first_step), loss,
                    seconds(r0.step_times[i]));
      o << line;
    }
    const Json m = metrics_json(r);
    std::snprintf(line, sizeof line, "throughput: %.1f samples/s, %.1f tokens/s, %.3g TFLOP/s per device\n",
                  m.value("samples_per_s", 0.0), m.value("tokens_per_s", 0.0), m.value("tflops_per_device", 0.0));
    o << line;
    o << "peak memory per rank (rank 0): " << format_bytes(r0.memory.peak_total)
      << " (at the peak: " << r0.memory.breakdown(MemoryStats::Of::kAtPeak) << ")\n";
    o << "category peaks (rank 0, each at its own moment): " << r0.memory.breakdown(MemoryStats::Of::kCategoryPeaks)
      << "\n";
    // With faults: where the time went (a straggler computes longest, the others wait).
    if (!r.faults.empty() && m.contains("step_breakdown_s_per_rank")) {
      const Json& per_rank = m["step_breakdown_s_per_rank"];
      std::size_t slow = 0, fast = 0;
      for (std::size_t k = 0; k < per_rank.size(); ++k) {
        if (per_rank[k]["compute"].get<double>() > per_rank[slow]["compute"].get<double>()) slow = k;
        if (per_rank[k]["compute"].get<double>() < per_rank[fast]["compute"].get<double>()) fast = k;
      }
      std::snprintf(line, sizeof line,
                    "where the time went (median per step): compute %.6f s on rank %zu (most) … %.6f s on rank %zu "
                    "(least); exposed communication %.6f s on rank %zu, %.6f s on rank %zu\n",
                    per_rank[slow]["compute"].get<double>(), slow, per_rank[fast]["compute"].get<double>(), fast,
                    per_rank[slow]["exposed_comm"].get<double>(), slow, per_rank[fast]["exposed_comm"].get<double>(), fast);
      o << line;
    }
  }
  if (r.check) o << "gradients vs unsharded training: " << r.check->describe() << "\n";
  if (!r.oracle_not_run.empty()) o << "oracle: not run (" << r.oracle_not_run << ")\n";
  for (const auto& e : r.expects) o << "expect " << e.name << ": " << (e.ok ? "ok" : "FAILED") << " — " << e.detail << "\n";
  o << "status: " << r.status << "\n";
  return o.str();
}

Status write_run_outputs(const std::string& dir, const RunRecord& r) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::invalid_argument("cannot create output folder '" + dir + "': " + ec.message());
  const auto path = [&](const char* f) { return (std::filesystem::path(dir) / f).string(); };
  SHARDLAB_RETURN_IF_ERROR(runtime::io::write_file_atomic(path("summary.txt"), summary_text(r)));
  SHARDLAB_RETURN_IF_ERROR(runtime::io::write_file_atomic(path("metrics.json"), metrics_json(r).dump(2) + "\n"));
  if (r.ranks.empty()) return Status::ok();
  const FsdpTrainResult& r0 = r.ranks.front();
  std::string loss = "step,loss,oracle_loss\n";
  for (std::size_t i = 0; i < r0.losses.size(); ++i) {
    const std::size_t step = i + static_cast<std::size_t>(r0.first_step);
    const bool no_loss = std::isnan(r0.losses[i]) && r.mode == "timing";  // timing mode: empty
    loss += std::to_string(step + 1) + "," + (no_loss ? std::string() : exact(r0.losses[i])) + "," +
            (step < r.oracle_loss.size() ? exact(r.oracle_loss[step]) : std::string()) + "\n";
  }
  SHARDLAB_RETURN_IF_ERROR(runtime::io::write_file_atomic(path("loss.csv"), loss));
  std::string mem = "rank,step,event,time_s,parameters,gradients,optimizer_state,activations,comm_buffers,other\n";
  for (std::size_t rank = 0; rank < r.ranks.size(); ++rank) {
    for (const auto& s : r.ranks[rank].memory_timeline) {
      mem += std::to_string(rank) + "," + std::to_string(s.step + 1) + "," + s.event + "," + exact(seconds(s.time));
      for (std::int64_t b : s.bytes) mem += "," + std::to_string(b);
      mem += "\n";
    }
  }
  SHARDLAB_RETURN_IF_ERROR(runtime::io::write_file_atomic(path("memory.csv"), mem));
  // trace.json (Chrome trace): pid = rank, tid = stream; microseconds.
  Json events = Json::array();
  for (std::size_t rank = 0; rank < r.traces.size(); ++rank) {
    events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", rank}, {"args", {{"name", "rank " + std::to_string(rank)}}}});
    for (int t = sim::kTraceCompute; t <= sim::kTraceOtherComm; ++t) {
      events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", rank}, {"tid", t}, {"args", {{"name", sim::trace_stream_name(t)}}}});
    }
    for (const auto& e : r.traces[rank]) {
      Json ev = {{"ph", "X"},
                 {"name", e.name},
                 {"cat", e.stream == sim::kTraceCompute ? "compute" : "comm"},
                 {"pid", rank},
                 {"tid", e.stream},
                 {"ts", static_cast<double>(e.start) / 1e3},
                 {"dur", static_cast<double>(e.duration) / 1e3}};
      if (e.stream != sim::kTraceCompute) ev["args"] = {{"bytes", e.bytes}, {"algorithm", e.algorithm}, {"group", e.group}};
      events.push_back(std::move(ev));
    }
  }
  const Json trace = {{"traceEvents", events},
                      {"displayTimeUnit", "ms"},
                      {"otherData", {{"scenario", r.scenario}, {"seed", r.seed}, {"backend", r.backend}}}};
  return runtime::io::write_file_atomic(path("trace.json"), trace.dump() + "\n");
}

}  // namespace shardlab::cli
