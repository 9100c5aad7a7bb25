// The output folder of a run (reports/FORMATS.md): metrics.json, trace.json, loss.csv,
// memory.csv and summary.txt, each written atomically. A failed run still gets a
// readable summary.txt (and a metrics.json whose `status` says what failed).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/train/fsdp_train.h"
#include "sim/engine/trace.h"
#include "sim/models/device/cost_model.h"

namespace shardlab::cli {

struct ExpectResult {
  std::string name;
  bool ok = false;
  std::string detail;
  // Not checked (the run made nothing to check it against; `detail` says why): neither
  // ok nor failed, and it does not fail the run.
  bool skipped = false;
};

struct RunRecord {
  std::string scenario = "adhoc";
  std::string backend = "sim", mode = "numerics";
  std::uint64_t seed = 0;
  int world_size = 1;
  nlohmann::json model = nlohmann::json::object();  // name, head, parameters
  nlohmann::json fsdp = nlohmann::json::object();
  std::int64_t global_batch = 0, seq_len = 1;
  double flops_per_step = 0;                           // analytic model FLOPs of one step over all ranks
  double device_peak_flops = 0;                        // per device; 0: unknown (mfu null)
  std::vector<runtime::train::FsdpTrainResult> ranks;  // per rank (sim) or rank 0 only (mpi)
  // NOTE [Traced ranks]: trace.json holds the ranks `traced_ranks` names (the scenario's
  // trace.ranks; by default every rank, in timing mode 0-7), traces[i] being rank
  // traced_ranks[i]'s; empty traced_ranks: traces[i] is rank i's. trace.json (pid, and
  // otherData.traced_ranks), metrics.json (traced_ranks) and summary.txt say which.
  std::vector<std::vector<sim::TraceEvent>> traces;  // empty when not traced
  std::vector<int> traced_ranks;
  // Runs whose `ranks` hold rank 0 only (Open MPI, HCCL): every rank's step starts and step
  // times on the trace's clock, gathered to rank 0, for the per-rank breakdown.
  struct RankSteps {
    std::vector<Nanos> starts, times;
  };
  std::vector<RankSteps> rank_steps;
  int traced_rank(std::size_t i) const { return traced_ranks.empty() ? static_cast<int>(i) : traced_ranks[i]; }
  std::optional<runtime::train::Comparison> check;
  // Why the oracle did not run (NOTE [The oracle by default] in cli/run_command.h), e.g.
  // "turned off by --no-oracle"; empty when it ran or the run ended before it.
  std::string oracle_not_run;
  std::vector<double> oracle_loss;
  std::vector<ExpectResult> expects;
  std::string status = "ok";          // ok | expect_failed | the error (grouped, NOTE [Grouped failures])
  std::vector<std::string> failures;  // a failed run: every failed rank's error, one line each
  std::string header;                 // the run's one-line description (summary.txt)
  // Timing mode: what the replay approximated (OpGraph::approximation; metrics.json's
  // "approximation"); empty when every rank ran its own captured program, or in numerics.
  std::string approximation;
  // fsdp.device_id and what it resolved to, e.g. "hpu → hpu:0 on every rank"; empty: not given.
  std::string device_id;
  std::vector<std::string> faults;  // injected faults, described (sim::Fault::describe without origin)
  // NOTE [Provenance] in cli/run_command.h: {"device", "network", "cpu_offload",
  // "offload_host"?}; empty: unknown (a replayed graph).
  nlohmann::json stack = nlohmann::json::object();
  std::string version, host;  // shardlab's git describe; the host name
  std::string resumed;        // a resumed run: "DIR/step-N (step N, TYPE saved at world size W by {…})"
  // Per step, the first traced rank's device time spent waiting for its host (NOTE [Host and
  // device timelines] in sim/timing/replay.h); empty with the ideal stack.
  std::vector<Nanos> host_bound;
  std::string host_stack;  // that stack's name
};

// The version this binary was built from (`git describe --always --dirty`, "unknown"
// outside a checkout).
std::string_view shardlab_version();

// Analytic training FLOPs of one optimizer step (forward + backward = 3 × forward GEMMs
// and attention; elementwise ops not counted), over the global batch.
double analytic_step_flops(const runtime::train::FsdpTrainOptions& options);
// The peak MFU is measured against: the spec-sheet matrix rate of the run's compute dtype
// (bf16 for BERT with bf16 compute, fp32 otherwise) — not a sustained rate.
double mfu_peak_flops(const runtime::train::FsdpTrainOptions& options, const sim::DeviceProfile& device);

// NOTE [Grouped failures]
// A failed world reports one error per failed rank, and in a large world most of them are
// the same consequence (every survivor timing out in the same collective). For stdout and
// stderr, lines (Status::to_string() form, "CODE: rank R, …") that differ only in the
// rank's own number ("rank R", "on rank R of group") and in times ("at 30.019560 s") are
// grouped: a group of one prints as it is; a larger one as "CODE: N of W ranks (0-1, 3)
// failed the same way; rank 0's error: …". Groups keep the order of their first line
// (faulty ranks first, as the caller orders them). The outputs keep every line.
std::vector<std::string> group_failures(const std::vector<std::string>& lines, int world_size);
// "0-3, 5, 7-9" for sorted, distinct ranks.
std::string rank_ranges(const std::vector<int>& ranks);
// The rank of each of the record's traces (NOTE [Traced ranks]).
std::vector<int> traced_ranks(const RunRecord& r);

// metrics.json as a JSON value (exposed for tests).
nlohmann::json metrics_json(const RunRecord& r);
std::string summary_text(const RunRecord& r);
// Under a software stack other than ideal (RunRecord::host_bound): the line saying how much
// of the step the device waited for its host ("host: pytorch_eager stack · host-bound 52% of
// the step …"), newline-terminated; "" otherwise. summary.txt and the run's stdout print it.
std::string host_bound_line(const RunRecord& r);

// NOTE [Output folder check]: before a run starts, its output folder must be usable:
// every path component at most 255 bytes, the folder a directory if it exists, and its
// parent creatable and writable — proven by creating (and removing) the staging folder
// write_run_outputs will use. INVALID_ARGUMENT (exit 2) naming the problem otherwise, so
// that a bad --out never costs a run; "" (no outputs) passes.
Status check_output_folder(const std::string& out);

// Writes every file the record has content for into `dir` (created if missing):
// summary.txt and metrics.json always; loss.csv and memory.csv when the record has ranks
// (a failed run: up to the failure); trace.json when it has traces. `written` (optional)
// receives the names written, in that order.
Status write_run_outputs(const std::string& dir, const RunRecord& r, std::vector<std::string>* written = nullptr);

}  // namespace shardlab::cli
