#include "cli/run_outputs.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <regex>
#include <sstream>

#include "cli/backends.h"
#include "cli/scenario.h"
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
// Steps start in order, so an event's step is found by binary search (a run of 40,000
// steps has ~10^6 events).
std::vector<double> compute_per_step(const std::vector<Nanos>& step_starts, const std::vector<Nanos>& step_times,
                                     const std::vector<sim::TraceEvent>& trace) {
  std::vector<double> out(step_times.size(), 0.0);
  // A failed run's last step may have begun without ending: only completed steps count.
  const std::size_t steps = std::min(step_starts.size(), step_times.size());
  const auto first = step_starts.begin(), last = step_starts.begin() + static_cast<std::ptrdiff_t>(steps);
  for (const auto& e : trace) {
    if (e.stream != sim::kTraceCompute) continue;
    // The last step starting at or before the event.
    const auto after = std::upper_bound(first, last, e.start);
    if (after == first) continue;
    const auto s = static_cast<std::size_t>(after - first - 1);
    if (e.start < step_starts[s] + step_times[s]) out[s] += seconds(e.duration);
  }
  return out;
}

// Whether traces[k] is rank k's for every k (no trace.ranks subset).
bool traced_ranks_are_all(const RunRecord& r) {
  for (std::size_t i = 0; i < r.traces.size(); ++i) {
    if (r.traced_rank(i) != static_cast<int>(i)) return false;
  }
  return true;
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

std::vector<int> traced_ranks(const RunRecord& r) {
  std::vector<int> out;
  for (std::size_t i = 0; i < r.traces.size(); ++i) out.push_back(r.traced_rank(i));
  return out;
}

std::string rank_ranges(const std::vector<int>& ranks) {
  std::string out;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    out += (out.empty() ? "" : ", ") + std::to_string(ranks[i]);
    if (j > i) out += (j == i + 1 ? ", " : "-") + std::to_string(ranks[j]);
    i = j + 1;
  }
  return out;
}

std::vector<std::string> group_failures(const std::vector<std::string>& lines, int world_size) {
  static const std::regex own_rank(R"(^(\w+: )rank (\d+)([,:]))");
  static const std::regex masks(R"( on rank \d+ of group|\d+\.\d+)");
  struct Group {
    std::string first;
    std::vector<int> ranks;
  };
  std::vector<Group> groups;
  std::map<std::string, std::size_t> by_key;
  for (const std::string& line : lines) {
    std::smatch m;
    if (!std::regex_search(line, m, own_rank)) {  // not a rank's error: as it is
      groups.push_back({line, {}});
      continue;
    }
    const int rank = std::stoi(m[2].str());
    const std::string key = std::regex_replace(m[1].str() + "rank *" + m[3].str() + m.suffix().str(), masks, "*");
    auto [it, fresh] = by_key.emplace(key, groups.size());
    if (fresh) groups.push_back({line, {}});
    groups[it->second].ranks.push_back(rank);
  }
  std::vector<std::string> out;
  for (Group& g : groups) {
    if (g.ranks.size() <= 1) {
      out.push_back(g.first);
      continue;
    }
    const std::size_t colon = g.first.find(": ");
    std::vector<int> sorted = g.ranks;
    std::sort(sorted.begin(), sorted.end());
    out.push_back(g.first.substr(0, colon) + ": " + std::to_string(g.ranks.size()) + " of " +
                  std::to_string(world_size) + " ranks (" + rank_ranges(sorted) + ") failed the same way, e.g. " +
                  g.first.substr(colon + 2));
  }
  return out;
}

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
               I = static_cast<double>(c.intermediate_size), A = static_cast<double>(c.num_attention_heads), d = H / A,
               V = static_cast<double>(c.vocab_size);
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
  if (!r.approximation.empty()) j["approximation"] = r.approximation;
  j["world_size"] = r.world_size;
  j["model"] = r.model;
  j["fsdp"] = r.fsdp;
  j["global_batch"] = r.global_batch;
  j["seq_len"] = r.seq_len;
  if (!r.stack.empty()) j["stack"] = r.stack;
  j["provenance"] = {{"shardlab_version", r.version}, {"host", r.host}};
  j["status"] = r.status;
  if (!r.failures.empty()) j["failures"] = r.failures;
  if (!r.resumed.empty()) j["resumed_from"] = r.resumed;
  if (!r.traces.empty()) j["traced_ranks"] = traced_ranks(r);
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
  // Breakdown (the first traced rank, rank 0 unless trace.ranks chose others; median over
  // steps): compute from the trace; on the simulator every other advance of a rank's clock
  // inside a step is a wait on communication.
  if (!r.traces.empty() && !r.traces.front().empty()) {
    const std::size_t k0 = static_cast<std::size_t>(r.traced_rank(0));
    const FsdpTrainResult& rt = k0 < r.ranks.size() ? r.ranks[k0] : r0;
    const std::vector<double> compute = compute_per_step(rt.step_starts, rt.step_times, r.traces.front());
    // Under a software stack the device also waits for its host: that time is host-bound,
    // not communication.
    const bool stack = !r.host_bound.empty();
    std::vector<double> exposed, host_bound;
    for (std::size_t s = 0; s < compute.size(); ++s) {
      const double hb = stack && s < r.host_bound.size() ? seconds(r.host_bound[s]) : 0.0;
      host_bound.push_back(hb);
      exposed.push_back(std::max(0.0, seconds(rt.step_times[s]) - compute[s] - hb));
    }
    j["step_breakdown_s"] = {{"compute", median(compute)}, {"exposed_comm", median(exposed)}, {"idle", 0.0}};
    if (stack) {
      j["step_breakdown_s"]["host_bound"] = median(host_bound);
      j["host_bound_s_per_step"] = host_bound;
    }
    j["exposed_comm_s"] = median(exposed);
    j["exposed_comm_s_per_step"] = exposed;
    // Every rank's breakdown when every rank was traced — the simulator, and Open MPI runs,
    // whose step times rank 0 gathered (rank_steps): a straggler shows as the rank with the
    // most compute, the ranks waiting for it as exposed communication.
    const std::size_t world = std::max(r.ranks.size(), r.rank_steps.size());
    if (r.traces.size() == world && world > 1 && traced_ranks_are_all(r)) {
      Json per_rank = Json::array();
      for (std::size_t k = 0; k < world; ++k) {
        const bool own = k < r.ranks.size();
        const std::vector<Nanos>& starts = own ? r.ranks[k].step_starts : r.rank_steps[k].starts;
        const std::vector<Nanos>& times = own ? r.ranks[k].step_times : r.rank_steps[k].times;
        const std::vector<double> c = compute_per_step(starts, times, r.traces[k]);
        std::vector<double> e;
        for (std::size_t s = 0; s < c.size() && s < times.size(); ++s)
          e.push_back(std::max(0.0, seconds(times[s]) - c[s]));
        per_rank.push_back({{"compute", median(c)}, {"exposed_comm", median(e)}});
      }
      j["step_breakdown_s_per_rank"] = per_rank;
    }
    Json bytes = {{"all_gather", 0}, {"reduce_scatter", 0}, {"all_reduce", 0}, {"broadcast", 0}};
    for (const auto& e : r.traces.front()) {
      if (e.stream != sim::kTraceCompute && e.bytes > 0)
        bytes[comm_key(e.stream)] = bytes[comm_key(e.stream)].get<std::int64_t>() + e.bytes;
    }
    for (auto& [k, v] : bytes.items())
      v = v.get<std::int64_t>() / std::max<std::int64_t>(1, static_cast<std::int64_t>(per_step.size()));
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
  // Rank 0's bytes between host and device memory per step (empty in timing mode, which
  // moves no bytes).
  j["host_transfer_bytes_per_step"] = r.ranks.empty() ? std::vector<std::int64_t>{} : r.ranks[0].host_transfer_bytes;
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
  if (!r0.final_params.empty()) j["final_params_fnv1a"] = hex;  // none when the run failed
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
  for (const auto& e : r.expects) {
    Json one = {{"name", e.name}, {"ok", e.ok}, {"detail", e.detail}};
    if (e.skipped) one["skipped"] = true;
    ex.push_back(std::move(one));
  }
  j["expect"] = ex;
  return j;
}

namespace {
std::string host_bound_line(const RunRecord& r, const Json& m) {
  if (!m.contains("host_bound_s_per_step") || !m.contains("step_time_s")) return "";
  const auto hb = m["host_bound_s_per_step"].get<std::vector<double>>();
  const double step = m["step_time_s"].value("median", 0.0), bound = median(hb);
  char line[320];
  std::snprintf(line, sizeof line,
                "host: %s stack · host-bound %.0f%% of the step (rank %d, median: the device waited %.6f s per step "
                "for its host)\n",
                r.host_stack.c_str(), step > 0 ? 100.0 * bound / step : 0.0, r.traced_rank(0), bound);
  return line;
}
}  // namespace

std::string host_bound_line(const RunRecord& r) {
  return r.host_bound.empty() ? "" : host_bound_line(r, metrics_json(r));
}

std::string summary_text(const RunRecord& r) {
  std::ostringstream o;
  o << (r.header.empty() ? "shardlab run: " + r.scenario : r.header) << "\n";
  o << "scenario " << r.scenario << " · backend " << r.backend << " (" << r.mode << ") · " << r.world_size << " rank"
    << (r.world_size == 1 ? "" : "s") << " · seed " << r.seed << "\n";
  if (!r.traces.empty() && r.traces.size() < static_cast<std::size_t>(r.world_size)) {
    o << "trace: ranks " << rank_ranges(traced_ranks(r)) << " of " << r.world_size << " (trace.ranks chooses)\n";
  }
  if (!r.stack.empty()) {
    o << "stack: device " << r.stack.value("device", "?") << " · network " << r.stack.value("network", "?")
      << " · cpu offload "
      << (r.stack.value("cpu_offload", false) ? "on, host " + r.stack.value("offload_host", "?") : "off")
      << (r.stack.contains("software") ? " · software " + r.stack.value("software", "?") : "") << "\n";
  }
  o << "provenance: shardlab " << (r.version.empty() ? "unknown" : r.version) << " on "
    << (r.host.empty() ? "unknown host" : r.host) << "\n";
  if (!r.device_id.empty()) o << "device_id: " << r.device_id << "\n";
  if (!r.resumed.empty()) o << "resumed from " << r.resumed << "\n";
  if (!r.faults.empty()) {
    o << "faults:";
    for (std::size_t i = 0; i < r.faults.size(); ++i) o << (i == 0 ? " " : "; ") << r.faults[i];
    o << "\n";
  }
  if (!r.ranks.empty()) {
    const FsdpTrainResult& r0 = r.ranks.front();
    const Json m = metrics_json(r);
    // Exposed communication per step (the first traced rank's step time not covered by its
    // compute), when there is a trace to tell.
    std::vector<double> exposed;
    if (m.contains("exposed_comm_s_per_step")) exposed = m["exposed_comm_s_per_step"].get<std::vector<double>>();
    if (exposed.size() != r0.losses.size()) exposed.clear();
    const std::string exposed_head = "exposed comm (rank " + std::to_string(r.traced_rank(0)) + ")";
    char line[320];
    std::snprintf(line, sizeof line, "%6s  %-14s  %-19s%s%s\n", "step", "loss",
                  backend(r.backend).simulated ? "simulated step time" : "step time", exposed.empty() ? "" : "  ",
                  exposed.empty() ? "" : exposed_head.c_str());
    o << line;
    for (std::size_t i = 0; i < r0.losses.size(); ++i) {
      // Timing mode computes no loss (NaN by construction): "-" rather than "nan".
      char loss[32] = "-";
      if (!(std::isnan(r0.losses[i]) && r.mode == run_mode_name(RunMode::kTiming)))
        std::snprintf(loss, sizeof loss, "%.8f", r0.losses[i]);
      char time[40];
      std::snprintf(time, sizeof time, "%.6f s", seconds(r0.step_times[i]));
      if (exposed.empty()) {
        std::snprintf(line, sizeof line, "%6zu  %-14s  %s\n", i + 1 + static_cast<std::size_t>(r0.first_step), loss,
                      time);
      } else {
        std::snprintf(line, sizeof line, "%6zu  %-14s  %-19s  %.6f s\n",
                      i + 1 + static_cast<std::size_t>(r0.first_step), loss, time, exposed[i]);
      }
      o << line;
    }
    std::snprintf(line, sizeof line, "throughput: %.1f samples/s, %.1f tokens/s, %.3g TFLOP/s per device\n",
                  m.value("samples_per_s", 0.0), m.value("tokens_per_s", 0.0), m.value("tflops_per_device", 0.0));
    o << line;
    o << host_bound_line(r, m);
    o << "peak memory per rank (rank 0): " << format_bytes(r0.memory.peak_total)
      << " (at the peak: " << r0.memory.breakdown(MemoryStats::Of::kAtPeak) << ")\n";
    o << "category peaks (rank 0, each at its own moment): " << r0.memory.breakdown(MemoryStats::Of::kCategoryPeaks)
      << "\n";
    // With faults, and on Open MPI or HCCL (a slow link, a slow node): where the time went
    // (a straggler computes longest, the others wait).
    if ((!r.faults.empty() || !r.rank_steps.empty()) && m.contains("step_breakdown_s_per_rank")) {
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
                    per_rank[slow]["exposed_comm"].get<double>(), slow, per_rank[fast]["exposed_comm"].get<double>(),
                    fast);
      o << line;
    }
  }
  if (r.check) o << "gradients vs unsharded training: " << r.check->describe() << "\n";
  if (!r.oracle_not_run.empty()) o << "oracle: not run (" << r.oracle_not_run << ")\n";
  for (const auto& e : r.expects) {
    o << "expect " << e.name << ": " << (e.skipped ? "skipped" : e.ok ? "ok" : "FAILED") << " — " << e.detail << "\n";
  }
  o << "status: " << r.status << "\n";
  return o.str();
}

namespace {

// Writes the record's files into `dir`, their names into `written`.
Status write_run_files(const std::filesystem::path& dir, const RunRecord& r, std::vector<std::string>& written);

namespace fs = std::filesystem;

constexpr const char* kOutputFiles[] = {"summary.txt", "metrics.json", "loss.csv", "memory.csv", "trace.json"};

bool is_output_file(const std::string& name) {
  return std::any_of(std::begin(kOutputFiles), std::end(kOutputFiles), [&](const char* f) { return name == f; });
}

// NOTE [Whole output folders]: moves the files written into `staged` to `dir`. A folder
// that holds nothing but a run's outputs is exchanged with the staged one in one step
// (renameat2 RENAME_EXCHANGE) and the old one removed, so a reader sees the old run or
// the new one, never a mix; a folder that also holds other files (a checkpoint the
// scenario put there) keeps them, and each output file is replaced on its own, the
// previous run's files this run did not write removed.
Status publish(const fs::path& staged, const fs::path& dir, const std::vector<std::string>& written) {
  std::error_code ec;
  const auto failed = [&](const std::string& what) {
    fs::remove_all(staged, ec);
    return Status::unavailable("cannot write the output folder '" + dir.string() + "': " + what);
  };
  if (!fs::exists(dir, ec)) {
    if (!dir.parent_path().empty()) fs::create_directories(dir.parent_path(), ec);
    if (::rename(staged.c_str(), dir.c_str()) != 0) return failed(std::strerror(errno));
    return Status::ok();
  }
  if (!fs::is_directory(dir, ec)) return failed("it exists and is not a folder");
  bool only_outputs = true;
  for (const auto& e : fs::directory_iterator(dir, ec))
    only_outputs = only_outputs && is_output_file(e.path().filename());
  if (ec) return failed(ec.message());
  if (only_outputs && ::renameat2(AT_FDCWD, staged.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) == 0) {
    fs::remove_all(staged, ec);  // now the previous run's folder
    return Status::ok();
  }
  for (const char* f : kOutputFiles) {
    const bool wrote = std::find(written.begin(), written.end(), f) != written.end();
    if (wrote ? ::rename((staged / f).c_str(), (dir / f).c_str()) != 0 : (fs::remove(dir / f, ec), false)) {
      return failed(std::string(f) + ": " + std::strerror(errno));
    }
  }
  fs::remove_all(staged, ec);
  return Status::ok();
}

}  // namespace

namespace {

// The output folder as a normalized path with a file name, and where it is staged.
std::pair<fs::path, fs::path> output_paths(const std::string& out) {
  fs::path dir = fs::path(out).lexically_normal();
  if (!dir.has_filename()) dir = dir.parent_path();  // "out/x/" → "out/x"
  if (dir.empty() || dir.filename() == "." || dir.filename() == "..") dir = fs::absolute(dir).lexically_normal();
  if (!dir.has_filename()) dir = dir.parent_path();
  // Staged beside the destination (same file system, so the final renames are atomic).
  const fs::path staged = dir.parent_path() / ("." + dir.filename().string() + ".staged." + std::to_string(::getpid()));
  return {dir, staged};
}

}  // namespace

Status check_output_folder(const std::string& out) {
  if (out.empty()) return Status::ok();
  const auto bad = [&](const std::string& why) {
    return Status::invalid_argument("output folder '" + out.substr(0, 200) + (out.size() > 200 ? "…" : "") +
                                    "': " + why);
  };
  for (const auto& part : fs::path(out)) {
    if (part.native().size() > 255) return bad("a path component is longer than 255 bytes");
  }
  if (out.size() > 4000) return bad("the path is longer than 4000 bytes");
  const auto [dir, staged] = output_paths(out);
  std::error_code ec;
  const auto st = fs::status(dir, ec);
  if (fs::exists(st) && !fs::is_directory(st)) return bad("exists and is not a folder; give a folder path");
  if (!dir.parent_path().empty()) {
    fs::create_directories(dir.parent_path(), ec);
    if (ec) return bad("cannot create " + dir.parent_path().string() + " (" + ec.message() + ")");
  }
  fs::remove_all(staged, ec);
  if (!fs::create_directory(staged, ec) || ec) {
    return bad("cannot write in " + (dir.parent_path().empty() ? std::string(".") : dir.parent_path().string()) + " (" +
               (ec ? ec.message() : std::string("cannot create a folder there")) + ")");
  }
  fs::remove(staged, ec);
  return Status::ok();
}

Status write_run_outputs(const std::string& out, const RunRecord& r, std::vector<std::string>* written) {
  std::vector<std::string> files;
  if (written == nullptr) written = &files;
  written->clear();
  const auto [dir, staged] = output_paths(out);
  std::error_code ec;
  fs::remove_all(staged, ec);
  fs::create_directories(staged, ec);
  if (ec) return Status::invalid_argument("cannot create output folder '" + out + "': " + ec.message());
  Status s = write_run_files(staged, r, *written);
  if (!s.is_ok()) {
    fs::remove_all(staged, ec);
    return s;
  }
  return publish(staged, dir, *written);
}

namespace {

Status write_run_files(const std::filesystem::path& dir, const RunRecord& r, std::vector<std::string>& written_) {
  std::vector<std::string>* written = &written_;
  const auto write = [&](const char* f, const std::string& text) {
    SHARDLAB_RETURN_IF_ERROR(runtime::io::write_file_atomic((dir / f).string(), text));
    written->push_back(f);
    return Status::ok();
  };
  SHARDLAB_RETURN_IF_ERROR(write("summary.txt", summary_text(r)));
  SHARDLAB_RETURN_IF_ERROR(write("metrics.json", metrics_json(r).dump(2) + "\n"));
  if (r.ranks.empty()) return Status::ok();
  const FsdpTrainResult& r0 = r.ranks.front();
  std::string loss = "step,loss,oracle_loss\n";
  for (std::size_t i = 0; i < r0.losses.size(); ++i) {
    const std::size_t step = i + static_cast<std::size_t>(r0.first_step);
    const bool no_loss = std::isnan(r0.losses[i]) && r.mode == run_mode_name(RunMode::kTiming);  // timing mode: empty
    loss += std::to_string(step + 1) + "," + (no_loss ? std::string() : exact(r0.losses[i])) + "," +
            (step < r.oracle_loss.size() ? exact(r.oracle_loss[step]) : std::string()) + "\n";
  }
  SHARDLAB_RETURN_IF_ERROR(write("loss.csv", loss));
  std::string mem = "rank,step,event,time_s,parameters,gradients,optimizer_state,activations,comm_buffers,other\n";
  for (std::size_t rank = 0; rank < r.ranks.size(); ++rank) {
    for (const auto& s : r.ranks[rank].memory_timeline) {
      mem += std::to_string(rank) + "," + std::to_string(s.step + 1) + "," + s.event + "," + exact(seconds(s.time));
      for (std::int64_t b : s.bytes) mem += "," + std::to_string(b);
      mem += "\n";
    }
  }
  SHARDLAB_RETURN_IF_ERROR(write("memory.csv", mem));
  if (r.traces.empty()) return Status::ok();
  // trace.json (Chrome trace): pid = rank, tid = stream; microseconds.
  Json events = Json::array();
  for (std::size_t i = 0; i < r.traces.size(); ++i) {
    const int rank = r.traced_rank(i);
    events.push_back(
        {{"ph", "M"}, {"name", "process_name"}, {"pid", rank}, {"args", {{"name", "rank " + std::to_string(rank)}}}});
    // The host stream only where a software stack put work on it.
    const bool host = std::any_of(r.traces[i].begin(), r.traces[i].end(),
                                  [](const sim::TraceEvent& e) { return e.stream == sim::kTraceHost; });
    for (int t = 0; t < sim::kNumTraceStreams; ++t) {
      if (t == sim::kTraceHost && !host) continue;
      events.push_back({{"ph", "M"},
                        {"name", "thread_name"},
                        {"pid", rank},
                        {"tid", t},
                        {"args", {{"name", sim::trace_stream_name(t)}}}});
    }
    for (const auto& e : r.traces[i]) {
      const char* cat = e.stream == sim::kTraceCompute ? "compute"
                        : e.stream == sim::kTraceFsdp  ? "fsdp"
                        : e.stream == sim::kTraceHost  ? "host"
                                                       : "comm";
      Json ev = {{"ph", "X"},
                 {"name", e.name},
                 {"cat", cat},
                 {"pid", rank},
                 {"tid", e.stream},
                 {"ts", static_cast<double>(e.start) / 1e3},
                 {"dur", static_cast<double>(e.duration) / 1e3}};
      if (e.stream == sim::kTraceCompute) {
        if (!e.shapes.empty()) ev["args"] = {{"shapes", e.shapes}};
      } else if (e.stream == sim::kTraceHost) {
      } else if (e.stream == sim::kTraceFsdp) {
        ev["args"] = {{"unit", e.unit}, {"step", e.step}, {"phase", e.phase}};
        if (!e.collective.empty()) ev["args"]["collective"] = e.collective;
        if (e.prefetch) ev["args"]["prefetch"] = true;
      } else {
        ev["args"] = {{"bytes", e.bytes}, {"algorithm", e.algorithm}, {"group", e.group}};
      }
      events.push_back(std::move(ev));
    }
  }
  const Json trace = {{"traceEvents", events},
                      {"displayTimeUnit", "ms"},
                      {"otherData",
                       {{"scenario", r.scenario},
                        {"seed", r.seed},
                        {"backend", r.backend},
                        {"world_size", r.world_size},
                        {"traced_ranks", rank_ranges(traced_ranks(r))}}}};
  return write("trace.json", trace.dump() + "\n");
}

}  // namespace

}  // namespace shardlab::cli
