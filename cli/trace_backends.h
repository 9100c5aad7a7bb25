// Traces on the real backends (mpi, hpu): decorators that record each rank's compute ops
// and collectives into a sim::TraceRecorder in wall time, the FSDP phases through the
// runtime's on_fsdp_event hook (every backend), and the gather of every rank's events to
// rank 0, so that trace.json has one schema on every backend (reports/FORMATS.md).
//
// NOTE [Wall-clock traces]
// A real run's events are times on the rank's SteadyClock minus the rank's origin, taken
// right after a barrier before the first step, so ranks line up to within the barrier's
// skew. A compute event spans the op's host call (the cpu backend computes inside it;
// hpu enqueues, so there it is the launch). A collective spans its issue to the end of
// its first wait (the runtime waits when it needs the result), so overlapped compute
// shows inside it. The simulator records both in virtual time instead (sim/engine/trace.h).
//
// Thread safety: one rank's thread, as Device and Communicator.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/comm/forwarding_communicator.h"
#include "runtime/core/clock.h"
#include "runtime/device/device.h"
#include "runtime/fsdp/options.h"
#include "sim/engine/trace.h"

namespace shardlab::cli {

// Forwards every op to `inner` and records each successful one as a compute event with
// its tensors' shapes. `inner`, `clock` and `trace` must outlive it.
class TracingDevice final : public runtime::device::Device {
 public:
  TracingDevice(runtime::device::Device* inner, const Clock* clock, Nanos origin, sim::TraceRecorder* trace)
      : inner_(inner), clock_(clock), origin_(origin), trace_(trace) {}

  runtime::device::DeviceId id() const override { return inner_->id(); }
  MemoryTracker& memory() override { return inner_->memory(); }
  Result<std::shared_ptr<Storage>> allocate(std::int64_t nbytes, MemoryCategory category,
                                            std::string_view label) override {
    return inner_->allocate(nbytes, category, label);
  }
  Result<runtime::device::StreamId> create_stream(std::string_view name) override {
    return inner_->create_stream(name);
  }
  Result<runtime::device::EventId> record_event(runtime::device::StreamId stream) override {
    return inner_->record_event(stream);
  }
  Status wait_event(runtime::device::StreamId waiter, runtime::device::EventId event) override {
    return inner_->wait_event(waiter, event);
  }
  Status synchronize(runtime::device::StreamId stream) override { return inner_->synchronize(stream); }
  std::int64_t host_transfer_bytes() const override { return inner_->host_transfer_bytes(); }

  using StreamId = runtime::device::StreamId;
  using Activation = runtime::device::Activation;
  Status to_host(const Tensor& src, std::span<std::byte> dst, StreamId stream) override;
  Status from_host(std::span<const std::byte> src, const Tensor& dst, StreamId stream) override;
  Status copy(const Tensor& src, const Tensor& dst, StreamId stream) override;
  Status fill(const Tensor& dst, float value, StreamId stream) override;
  Status cast(const Tensor& src, const Tensor& dst, StreamId stream) override;
  Status copy_many(std::span<const CopyPair> pairs, StreamId stream) override;
  Status axpy(float alpha, const Tensor& x, const Tensor& y, StreamId stream) override;
  Status scale(const Tensor& x, float alpha, StreamId stream) override;
  Status gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c, float alpha, float beta,
              StreamId stream) override;
  Status batched_gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c, float alpha,
                      float beta, StreamId stream) override;
  Status add_bias(const Tensor& x, const Tensor& bias, StreamId stream) override;
  Status bias_grad(const Tensor& dy, const Tensor& dbias, bool accumulate, StreamId stream) override;
  Status activation(Activation act, const Tensor& x, const Tensor& y, StreamId stream) override;
  Status activation_backward(Activation act, const Tensor& x, const Tensor& dy, const Tensor& dx,
                             StreamId stream) override;
  Status layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, const Tensor& y,
                    const Tensor& mean, const Tensor& rstd, StreamId stream) override;
  Status layer_norm_backward(const Tensor& x, const Tensor& dy, const Tensor& mean, const Tensor& rstd,
                             const Tensor& gamma, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,
                             bool accumulate, StreamId stream) override;
  Status attention_softmax(const Tensor& scores, const Tensor& attention_mask, float scale, const Tensor& probs,
                           StreamId stream) override;
  Status attention_softmax_backward(const Tensor& probs, const Tensor& dprobs, float scale, const Tensor& dscores,
                                    StreamId stream) override;
  Status embedding(const Tensor& table, const Tensor& ids, const Tensor& out, StreamId stream) override;
  Status embedding_backward(const Tensor& dout, const Tensor& ids, const Tensor& dtable, bool accumulate,
                            StreamId stream) override;
  Status softmax_cross_entropy(const Tensor& logits, const Tensor& labels, const Tensor& loss_sum,
                               const Tensor& dlogits, float grad_scale, std::int64_t ignore_index,
                               StreamId stream) override;
  Status transpose_1_2(const Tensor& x, const Tensor& y, StreamId stream) override;
  Status multiply(const Tensor& a, const Tensor& b, const Tensor& c, StreamId stream) override;
  Status dropout_mask(const Tensor& mask, float p, const Rng& base, std::int64_t first_row, std::uint64_t site,
                      StreamId stream) override;
  Status optimizer_step(const runtime::device::OptimizerUpdate& update, const Tensor& param, const Tensor& grad,
                        const Tensor& state0, const Tensor& state1, StreamId stream) override;

 private:
  // Runs `op` and, when it succeeds, records it from `start` with the tensors' shapes.
  Status traced(const char* name, Nanos start, Status s, std::initializer_list<const Tensor*> tensors);

  runtime::device::Device* inner_;
  const Clock* clock_;
  Nanos origin_;
  sim::TraceRecorder* trace_;
};

// Forwards every operation to `inner` and records each collective and point-to-point
// operation as a comm event (NOTE [Wall-clock traces]); groups made by split are traced
// too. `algorithm` names the backend's implementation in the events ("mpi", "hccl").
// With set_nodes(devices_per_node) on the world communicator, the events also say whether
// the group's traffic crosses nodes ("mpi, across nodes" / "mpi, within a node"; ranks
// r·K … r·K + K − 1 are node r's, as the scenario maps them), for the world and for groups
// made by split_strided (HYBRID_SHARD's shard groups inside nodes, replica groups across);
// a group made by split(color, key) does not know its members and says neither.
class TracingCommunicator final : public runtime::comm::ForwardingCommunicator {
 public:
  TracingCommunicator(runtime::comm::Communicator* inner, const Clock* clock, Nanos origin, sim::TraceRecorder* trace,
                      std::string algorithm);
  TracingCommunicator(std::unique_ptr<runtime::comm::Communicator> owned, const Clock* clock, Nanos origin,
                      sim::TraceRecorder* trace, std::string algorithm);

  runtime::comm::WorkPtr all_gather_into(const Tensor& output, const Tensor& input) override;
  runtime::comm::WorkPtr reduce_scatter(const Tensor& output, const Tensor& input, runtime::comm::ReduceOp op) override;
  runtime::comm::WorkPtr all_reduce(const Tensor& inout, runtime::comm::ReduceOp op) override;
  runtime::comm::WorkPtr broadcast(const Tensor& inout, int root) override;
  runtime::comm::WorkPtr barrier() override;
  runtime::comm::WorkPtr send(const Tensor& input, int peer, int tag) override;
  runtime::comm::WorkPtr recv(const Tensor& output, int peer, int tag) override;
  Result<std::unique_ptr<runtime::comm::Communicator>> split(int color, int key) override;
  Result<std::unique_ptr<runtime::comm::Communicator>> split_strided(int stride, int group_size) override;
  // The world communicator: `devices_per_node` ranks per node (> 0).
  void set_nodes(int devices_per_node);

 private:
  runtime::comm::WorkPtr traced(runtime::comm::OpKind kind, std::int64_t bytes, runtime::comm::WorkPtr work,
                                Nanos start);
  // algorithm_ from base_algorithm_ and whether world_ranks_ span nodes.
  void describe_placement();

  const Clock* clock_;
  Nanos origin_;
  sim::TraceRecorder* trace_;
  std::string algorithm_;
  std::string base_algorithm_;
  int devices_per_node_ = 0;      // 0: placement unknown
  std::vector<int> world_ranks_;  // this group's members, by group rank, as world ranks
};

// Turns FSDP phase begin/end pairs (runtime::fsdp::FsdpEvent) into FSDP trace events
// (stream sim::kTraceFsdp) at the clock's time minus `origin`. Steps are 1-based from
// set_step (the trainer's 0-based step + 1). One rank's thread.
class FsdpTraceSink {
 public:
  FsdpTraceSink(const Clock* clock, Nanos origin, sim::TraceRecorder* trace)
      : clock_(clock), origin_(origin), trace_(trace) {}
  void set_step(int step) { step_ = step; }
  // For FsdpOptions::on_fsdp_event; `this` must outlive the run.
  std::function<void(const runtime::fsdp::FsdpEvent&)> hook();

 private:
  void on_event(const runtime::fsdp::FsdpEvent& e);

  const Clock* clock_;
  Nanos origin_;
  sim::TraceRecorder* trace_;
  int step_ = -1;
  std::vector<Nanos> open_;  // begin times of the phases not yet ended (they nest)
};

// Every rank's `mine` at rank 0 (rank order; the lists may differ in length), over `comm`
// with buffers on `dev`; other ranks get an empty list. Collective: every rank of `comm`
// calls it. `timeout` bounds each exchange.
Result<std::vector<std::vector<std::int64_t>>> gather_words(runtime::comm::Communicator& comm,
                                                            runtime::device::Device& dev,
                                                            const std::vector<std::int64_t>& mine, Nanos timeout);

// Every rank's events at rank 0 (rank order), as gather_words.
Result<std::vector<std::vector<sim::TraceEvent>>> gather_traces(runtime::comm::Communicator& comm,
                                                                runtime::device::Device& dev,
                                                                const std::vector<sim::TraceEvent>& mine,
                                                                Nanos timeout);

// The JSON form gather_traces exchanges (exposed for tests): read back equal.
std::string serialize_trace_events(const std::vector<sim::TraceEvent>& events);
Result<std::vector<sim::TraceEvent>> parse_trace_events(const std::string& text);

}  // namespace shardlab::cli
