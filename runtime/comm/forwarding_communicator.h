// ForwardingCommunicator: the base of communicator decorators, as leveldb's EnvWrapper is
// for Env. Every operation goes to the wrapped communicator unchanged, so a decorator
// (the collective checker, the fault injector, the wall-clock tracer) overrides only what
// it changes.
//
// split is forwarded too: the group it returns is the wrapped communicator's, undecorated.
// A decorator that must also see its groups' operations overrides split and wraps the
// result. split_strided is not forwarded: Communicator's default calls split (NOTE
// [Strided groups]), so it reaches the decorator's split.
//
// Thread safety: as for Communicator.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "runtime/comm/communicator.h"

namespace shardlab::runtime::comm {

class ForwardingCommunicator : public Communicator {
 public:
  // Wraps `inner`, which must outlive this.
  explicit ForwardingCommunicator(Communicator* inner) : inner_(inner) {}
  // Wraps and owns `owned` (a group made by split).
  explicit ForwardingCommunicator(std::unique_ptr<Communicator> owned)
      : owned_(std::move(owned)), inner_(owned_.get()) {}

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const std::string& group_name() const override { return inner_->group_name(); }
  WorkPtr all_gather_into(const Tensor& output, const Tensor& input) override {
    return inner_->all_gather_into(output, input);
  }
  WorkPtr reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) override {
    return inner_->reduce_scatter(output, input, op);
  }
  WorkPtr all_reduce(const Tensor& inout, ReduceOp op) override { return inner_->all_reduce(inout, op); }
  WorkPtr broadcast(const Tensor& inout, int root) override { return inner_->broadcast(inout, root); }
  WorkPtr barrier() override { return inner_->barrier(); }
  WorkPtr send(const Tensor& input, int peer, int tag) override { return inner_->send(input, peer, tag); }
  WorkPtr recv(const Tensor& output, int peer, int tag) override { return inner_->recv(output, peer, tag); }
  Result<std::unique_ptr<Communicator>> split(int color, int key) override { return inner_->split(color, key); }

 protected:
  Communicator* inner() const { return inner_; }

 private:
  std::unique_ptr<Communicator> owned_;
  Communicator* inner_;
};

}  // namespace shardlab::runtime::comm
