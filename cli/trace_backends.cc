#include "cli/trace_backends.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include <nlohmann/json.hpp>

namespace shardlab::cli {

namespace {

using runtime::comm::OpKind;
using runtime::comm::WorkPtr;
using Json = nlohmann::json;

int stream_of(OpKind kind) {
  switch (kind) {
    case OpKind::kAllGather: return sim::kTraceAllGather;
    case OpKind::kReduceScatter: return sim::kTraceReduceScatter;
    case OpKind::kAllReduce: return sim::kTraceAllReduce;
    default: return sim::kTraceOtherComm;
  }
}

// Records its operation when the first wait returns (NOTE [Wall-clock traces]).
class TracedWork final : public runtime::comm::Work {
 public:
  TracedWork(WorkPtr inner, std::function<void(Nanos end)> record, const Clock* clock)
      : inner_(std::move(inner)), record_(std::move(record)), clock_(clock) {}
  Status wait(Nanos timeout) override {
    Status s = inner_->wait(timeout);
    if (record_) {
      record_(clock_->now());
      record_ = nullptr;
    }
    return s;
  }
  bool is_completed() override { return inner_->is_completed(); }
  Status issue_error() override { return inner_->issue_error(); }

 private:
  WorkPtr inner_;
  std::function<void(Nanos)> record_;
  const Clock* clock_;
};

}  // namespace

Status TracingDevice::traced(const char* name, Nanos start, Status s, std::initializer_list<const Tensor*> tensors) {
  if (!s.is_ok()) return s;
  trace_->add_op(name, start - origin_, clock_->now() - start);
  for (const Tensor* t : tensors) {
    trace_->add_op_shape(t->defined() ? std::span<const std::int64_t>(t->shape()) : std::span<const std::int64_t>());
  }
  return s;
}

// Each op: the start time first, then the forwarded call, then the record.
#define SHARDLAB_TRACED(name, call, ...) \
  const Nanos start = clock_->now();     \
  return traced(name, start, inner_->call, {__VA_ARGS__})

Status TracingDevice::copy(const Tensor& src, const Tensor& dst, StreamId stream) {
  SHARDLAB_TRACED("copy", copy(src, dst, stream), &src, &dst);
}
Status TracingDevice::fill(const Tensor& dst, float value, StreamId stream) {
  SHARDLAB_TRACED("fill", fill(dst, value, stream), &dst);
}
Status TracingDevice::copy_many(std::span<const CopyPair> pairs, StreamId stream) {
  // One recorded op (the first source's and the last destination's shapes), as it is one
  // device op below.
  static const Tensor kNone;
  SHARDLAB_TRACED("copy_many", copy_many(pairs, stream), pairs.empty() ? &kNone : &pairs.front().src,
                  pairs.empty() ? &kNone : &pairs.back().dst);
}
Status TracingDevice::cast(const Tensor& src, const Tensor& dst, StreamId stream) {
  SHARDLAB_TRACED("cast", cast(src, dst, stream), &src, &dst);
}
Status TracingDevice::axpy(float alpha, const Tensor& x, const Tensor& y, StreamId stream) {
  SHARDLAB_TRACED("axpy", axpy(alpha, x, y, stream), &x, &y);
}
Status TracingDevice::scale(const Tensor& x, float alpha, StreamId stream) {
  SHARDLAB_TRACED("scale", scale(x, alpha, stream), &x);
}
Status TracingDevice::gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c, float alpha,
                           float beta, StreamId stream) {
  SHARDLAB_TRACED("gemm", gemm(a, trans_a, b, trans_b, c, alpha, beta, stream), &a, &b, &c);
}
Status TracingDevice::batched_gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c,
                                   float alpha, float beta, StreamId stream) {
  SHARDLAB_TRACED("batched_gemm", batched_gemm(a, trans_a, b, trans_b, c, alpha, beta, stream), &a, &b, &c);
}
Status TracingDevice::add_bias(const Tensor& x, const Tensor& bias, StreamId stream) {
  SHARDLAB_TRACED("add_bias", add_bias(x, bias, stream), &x, &bias);
}
Status TracingDevice::bias_grad(const Tensor& dy, const Tensor& dbias, bool accumulate, StreamId stream) {
  SHARDLAB_TRACED("bias_grad", bias_grad(dy, dbias, accumulate, stream), &dy, &dbias);
}
Status TracingDevice::activation(Activation act, const Tensor& x, const Tensor& y, StreamId stream) {
  SHARDLAB_TRACED("activation", activation(act, x, y, stream), &x, &y);
}
Status TracingDevice::activation_backward(Activation act, const Tensor& x, const Tensor& dy, const Tensor& dx,
                                          StreamId stream) {
  SHARDLAB_TRACED("activation_backward", activation_backward(act, x, dy, dx, stream), &x, &dy, &dx);
}
Status TracingDevice::layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, const Tensor& y,
                                 const Tensor& mean, const Tensor& rstd, StreamId stream) {
  SHARDLAB_TRACED("layer_norm", layer_norm(x, gamma, beta, eps, y, mean, rstd, stream), &x, &gamma, &beta, &y, &mean,
                  &rstd);
}
Status TracingDevice::layer_norm_backward(const Tensor& x, const Tensor& dy, const Tensor& mean, const Tensor& rstd,
                                          const Tensor& gamma, const Tensor& dx, const Tensor& dgamma,
                                          const Tensor& dbeta, bool accumulate, StreamId stream) {
  SHARDLAB_TRACED("layer_norm_backward",
                  layer_norm_backward(x, dy, mean, rstd, gamma, dx, dgamma, dbeta, accumulate, stream), &x, &dy, &mean,
                  &rstd, &gamma, &dx, &dgamma, &dbeta);
}
Status TracingDevice::attention_softmax(const Tensor& scores, const Tensor& attention_mask, float scale,
                                        const Tensor& probs, StreamId stream) {
  SHARDLAB_TRACED("attention_softmax", attention_softmax(scores, attention_mask, scale, probs, stream), &scores,
                  &attention_mask, &probs);
}
Status TracingDevice::attention_softmax_backward(const Tensor& probs, const Tensor& dprobs, float scale,
                                                 const Tensor& dscores, StreamId stream) {
  SHARDLAB_TRACED("attention_softmax_backward", attention_softmax_backward(probs, dprobs, scale, dscores, stream),
                  &probs, &dprobs, &dscores);
}
Status TracingDevice::embedding(const Tensor& table, const Tensor& ids, const Tensor& out, StreamId stream) {
  SHARDLAB_TRACED("embedding", embedding(table, ids, out, stream), &table, &ids, &out);
}
Status TracingDevice::embedding_backward(const Tensor& dout, const Tensor& ids, const Tensor& dtable, bool accumulate,
                                         StreamId stream) {
  SHARDLAB_TRACED("embedding_backward", embedding_backward(dout, ids, dtable, accumulate, stream), &dout, &ids,
                  &dtable);
}
Status TracingDevice::softmax_cross_entropy(const Tensor& logits, const Tensor& labels, const Tensor& loss_sum,
                                            const Tensor& dlogits, float grad_scale, std::int64_t ignore_index,
                                            StreamId stream) {
  SHARDLAB_TRACED("softmax_cross_entropy",
                  softmax_cross_entropy(logits, labels, loss_sum, dlogits, grad_scale, ignore_index, stream), &logits,
                  &labels, &loss_sum, &dlogits);
}
Status TracingDevice::transpose_1_2(const Tensor& x, const Tensor& y, StreamId stream) {
  SHARDLAB_TRACED("transpose_1_2", transpose_1_2(x, y, stream), &x, &y);
}
Status TracingDevice::to_host(const Tensor& src, std::span<std::byte> dst, StreamId stream) {
  SHARDLAB_TRACED("to_host", to_host(src, dst, stream), &src);
}
Status TracingDevice::from_host(std::span<const std::byte> src, const Tensor& dst, StreamId stream) {
  SHARDLAB_TRACED("from_host", from_host(src, dst, stream), &dst);
}
Status TracingDevice::dropout_mask(const Tensor& mask, float p, const Rng& base, std::int64_t first_row,
                                   std::uint64_t site, StreamId stream) {
  SHARDLAB_TRACED("dropout_mask", dropout_mask(mask, p, base, first_row, site, stream), &mask);
}
Status TracingDevice::multiply(const Tensor& a, const Tensor& b, const Tensor& c, StreamId stream) {
  SHARDLAB_TRACED("multiply", multiply(a, b, c, stream), &a, &b, &c);
}
Status TracingDevice::optimizer_step(const runtime::device::OptimizerUpdate& update, const Tensor& param,
                                     const Tensor& grad, const Tensor& state0, const Tensor& state1, StreamId stream) {
  SHARDLAB_TRACED("optimizer_step", optimizer_step(update, param, grad, state0, state1, stream), &param, &grad, &state0,
                  &state1);
}
#undef SHARDLAB_TRACED

TracingCommunicator::TracingCommunicator(runtime::comm::Communicator* inner, const Clock* clock, Nanos origin,
                                         sim::TraceRecorder* trace, std::string algorithm)
    : ForwardingCommunicator(inner),
      clock_(clock),
      origin_(origin),
      trace_(trace),
      algorithm_(algorithm),
      base_algorithm_(std::move(algorithm)) {}
TracingCommunicator::TracingCommunicator(std::unique_ptr<runtime::comm::Communicator> owned, const Clock* clock,
                                         Nanos origin, sim::TraceRecorder* trace, std::string algorithm)
    : ForwardingCommunicator(std::move(owned)),
      clock_(clock),
      origin_(origin),
      trace_(trace),
      algorithm_(algorithm),
      base_algorithm_(std::move(algorithm)) {}

void TracingCommunicator::set_nodes(int devices_per_node) {
  SHARDLAB_CHECK_GT(devices_per_node, 0);
  devices_per_node_ = devices_per_node;
  world_ranks_.resize(static_cast<std::size_t>(size()));
  for (int r = 0; r < size(); ++r) world_ranks_[static_cast<std::size_t>(r)] = r;
  describe_placement();
}

void TracingCommunicator::describe_placement() {
  bool across = false;
  for (int r : world_ranks_) across = across || r / devices_per_node_ != world_ranks_.front() / devices_per_node_;
  algorithm_ = base_algorithm_ + (across ? ", across nodes" : ", within a node");
}

WorkPtr TracingCommunicator::traced(OpKind kind, std::int64_t bytes, WorkPtr work, Nanos start) {
  auto record = [this, kind, bytes, start](Nanos end) {
    sim::TraceEvent e{std::string(runtime::comm::op_kind_name(kind)),
                      stream_of(kind),
                      start - origin_,
                      end - start,
                      bytes,
                      inner()->group_name(),
                      algorithm_};
    trace_->add_comm(std::move(e));
  };
  return std::make_shared<TracedWork>(std::move(work), std::move(record), clock_);
}

WorkPtr TracingCommunicator::all_gather_into(const Tensor& output, const Tensor& input) {
  const Nanos start = clock_->now();
  return traced(OpKind::kAllGather, input.nbytes(), inner()->all_gather_into(output, input), start);
}
WorkPtr TracingCommunicator::reduce_scatter(const Tensor& output, const Tensor& input, runtime::comm::ReduceOp op) {
  const Nanos start = clock_->now();
  return traced(OpKind::kReduceScatter, output.nbytes(), inner()->reduce_scatter(output, input, op), start);
}
WorkPtr TracingCommunicator::all_reduce(const Tensor& inout, runtime::comm::ReduceOp op) {
  const Nanos start = clock_->now();
  return traced(OpKind::kAllReduce, inout.nbytes(), inner()->all_reduce(inout, op), start);
}
WorkPtr TracingCommunicator::broadcast(const Tensor& inout, int root) {
  const Nanos start = clock_->now();
  return traced(OpKind::kBroadcast, inout.nbytes(), inner()->broadcast(inout, root), start);
}
WorkPtr TracingCommunicator::barrier() {
  const Nanos start = clock_->now();
  return traced(OpKind::kBarrier, 0, inner()->barrier(), start);
}
WorkPtr TracingCommunicator::send(const Tensor& input, int peer, int tag) {
  const Nanos start = clock_->now();
  return traced(OpKind::kSend, input.nbytes(), inner()->send(input, peer, tag), start);
}
WorkPtr TracingCommunicator::recv(const Tensor& output, int peer, int tag) {
  const Nanos start = clock_->now();
  return traced(OpKind::kRecv, output.nbytes(), inner()->recv(output, peer, tag), start);
}
Result<std::unique_ptr<runtime::comm::Communicator>> TracingCommunicator::split(int color, int key) {
  SHARDLAB_ASSIGN_OR_RETURN(std::unique_ptr<runtime::comm::Communicator> group, inner()->split(color, key));
  if (!group) return group;  // not a member of any new group
  return std::unique_ptr<runtime::comm::Communicator>(
      std::make_unique<TracingCommunicator>(std::move(group), clock_, origin_, trace_, base_algorithm_));
}

Result<std::unique_ptr<runtime::comm::Communicator>> TracingCommunicator::split_strided(int stride, int group_size) {
  SHARDLAB_ASSIGN_OR_RETURN(std::unique_ptr<runtime::comm::Communicator> group,
                            inner()->split_strided(stride, group_size));
  if (!group) return group;
  auto traced_group = std::make_unique<TracingCommunicator>(std::move(group), clock_, origin_, trace_, base_algorithm_);
  if (devices_per_node_ > 0) {  // NOTE [Strided groups] in runtime/comm/communicator.h: the members
    const int color = runtime::comm::strided_color(rank(), stride, group_size);
    const int first = color / stride * stride * group_size + color % stride;
    traced_group->devices_per_node_ = devices_per_node_;
    for (int k = 0; k < group_size; ++k) {
      traced_group->world_ranks_.push_back(
          world_ranks_[static_cast<std::size_t>(first) +
                       static_cast<std::size_t>(stride) * static_cast<std::size_t>(k)]);
    }
    traced_group->describe_placement();
  }
  return std::unique_ptr<runtime::comm::Communicator>(std::move(traced_group));
}

std::function<void(const runtime::fsdp::FsdpEvent&)> FsdpTraceSink::hook() {
  return [this](const runtime::fsdp::FsdpEvent& e) { on_event(e); };
}

void FsdpTraceSink::on_event(const runtime::fsdp::FsdpEvent& e) {
  const Nanos now = clock_->now();
  if (e.begin) {
    open_.push_back(now);
    return;
  }
  SHARDLAB_CHECK(!open_.empty());
  const Nanos start = open_.back();
  open_.pop_back();
  sim::TraceEvent ev{e.name, sim::kTraceFsdp, start - origin_, now - start};
  ev.unit = e.unit;
  ev.step = step_;
  ev.phase = e.phase;
  ev.collective = e.collective;
  ev.prefetch = e.prefetch;
  trace_->add_compute(std::move(ev));
}

std::string serialize_trace_events(const std::vector<sim::TraceEvent>& events) {
  Json out = Json::array();
  for (const auto& e : events) {
    out.push_back({e.name, e.stream, e.start, e.duration, e.bytes, e.group, e.algorithm, e.shapes, e.unit, e.step,
                   e.phase, e.collective, e.prefetch});
  }
  return out.dump();
}

Result<std::vector<sim::TraceEvent>> parse_trace_events(const std::string& text) {
  std::vector<sim::TraceEvent> events;
  try {
    const Json in = Json::parse(text);
    for (const Json& j : in) {
      sim::TraceEvent e;
      e.name = j.at(0).get<std::string>();
      e.stream = j.at(1).get<int>();
      e.start = j.at(2).get<Nanos>();
      e.duration = j.at(3).get<Nanos>();
      e.bytes = j.at(4).get<std::int64_t>();
      e.group = j.at(5).get<std::string>();
      e.algorithm = j.at(6).get<std::string>();
      e.shapes = j.at(7).get<std::vector<std::vector<std::int64_t>>>();
      e.unit = j.at(8).get<int>();
      e.step = j.at(9).get<int>();
      e.phase = j.at(10).get<std::string>();
      e.collective = j.at(11).get<std::string>();
      e.prefetch = j.at(12).get<bool>();
      events.push_back(std::move(e));
    }
  } catch (const Json::exception& ex) {
    return Status::data_loss(std::string("a rank's trace events do not parse: ") + ex.what());
  }
  return events;
}

Result<std::vector<std::vector<sim::TraceEvent>>> gather_traces(runtime::comm::Communicator& comm,
                                                                runtime::device::Device& dev,
                                                                const std::vector<sim::TraceEvent>& mine,
                                                                Nanos timeout) {
  // The text as int64 words (zero-padded), its length in bytes first.
  const std::string text = serialize_trace_events(mine);
  std::vector<std::int64_t> words(1 + (text.size() + 7) / 8, 0);
  words[0] = static_cast<std::int64_t>(text.size());
  std::memcpy(words.data() + 1, text.data(), text.size());
  SHARDLAB_ASSIGN_OR_RETURN(const auto all, gather_words(comm, dev, words, timeout));
  std::vector<std::vector<sim::TraceEvent>> out;
  for (const auto& w : all) {
    const auto bytes = static_cast<std::size_t>(w[0]);
    SHARDLAB_ASSIGN_OR_RETURN(std::vector<sim::TraceEvent> events,
                              parse_trace_events(std::string(reinterpret_cast<const char*>(w.data() + 1), bytes)));
    out.push_back(std::move(events));
  }
  return out;
}

Result<std::vector<std::vector<std::int64_t>>> gather_words(runtime::comm::Communicator& comm,
                                                            runtime::device::Device& dev,
                                                            const std::vector<std::int64_t>& mine, Nanos timeout) {
  const int w = comm.size();
  // Lengths first, then every rank's words padded to the longest (the collectives move
  // whole elements of one count on every rank).
  SHARDLAB_ASSIGN_OR_RETURN(Tensor my_len, dev.zeros({1}, DType::kI64, MemoryCategory::kOther, "gather_len"));
  SHARDLAB_RETURN_IF_ERROR(runtime::device::values_from_host(
      dev, std::vector<std::int64_t>{static_cast<std::int64_t>(mine.size())}, my_len));
  SHARDLAB_ASSIGN_OR_RETURN(Tensor lens, dev.zeros({w}, DType::kI64, MemoryCategory::kOther, "gather_lens"));
  SHARDLAB_RETURN_IF_ERROR(comm.all_gather_into(lens, my_len)->wait(timeout).with_context("gathering traces"));
  SHARDLAB_ASSIGN_OR_RETURN(const std::vector<std::int64_t> lengths,
                            runtime::device::values_to_host<std::int64_t>(dev, lens));
  const std::int64_t longest = std::max<std::int64_t>(1, *std::max_element(lengths.begin(), lengths.end()));
  std::vector<std::int64_t> padded(static_cast<std::size_t>(longest), 0);
  std::copy(mine.begin(), mine.end(), padded.begin());
  SHARDLAB_ASSIGN_OR_RETURN(Tensor my_words, dev.zeros({longest}, DType::kI64, MemoryCategory::kOther, "gather_words"));
  SHARDLAB_RETURN_IF_ERROR(runtime::device::values_from_host(dev, padded, my_words));
  SHARDLAB_ASSIGN_OR_RETURN(Tensor all, dev.zeros({w * longest}, DType::kI64, MemoryCategory::kOther, "gather_all"));
  SHARDLAB_RETURN_IF_ERROR(comm.all_gather_into(all, my_words)->wait(timeout).with_context("gathering traces"));
  std::vector<std::vector<std::int64_t>> out;
  if (comm.rank() != 0) return out;
  SHARDLAB_ASSIGN_OR_RETURN(const std::vector<std::int64_t> flat,
                            runtime::device::values_to_host<std::int64_t>(dev, all));
  for (int r = 0; r < w; ++r) {
    const auto begin = flat.begin() + static_cast<std::ptrdiff_t>(r) * longest;
    out.emplace_back(begin, begin + lengths[static_cast<std::size_t>(r)]);
  }
  return out;
}

}  // namespace shardlab::cli
