// CheckingCommunicator: a decorator that verifies every rank issues the same collective
// sequence (op, dtype, count, root/reduce op, group) and reports the first divergence,
// with both ranks' calls, instead of hanging or silently mixing buffers.
//
// Before each collective it all-gathers a small fingerprint of the call over the wrapped
// communicator (like c10d's ProcessGroupWrapper) and compares all ranks' fingerprints.
// On a mismatch the collective is not issued; the Work fails with FAILED_PRECONDITION:
//   "collective #7 in group 'world' diverged: rank 0 called all_reduce(fp32 × 4096, sum)
//    but rank 3 called all_gather(fp32 × 1024)".
// A rank that never arrives makes the fingerprint exchange time out, naming the call that
// was waiting. Point-to-point operations pass through unchecked. Costs one extra small
// blocking all-gather per collective: a debugging and CI tool, off in benchmarks.
//
// Thread safety: as for Communicator.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "runtime/comm/forwarding_communicator.h"

namespace shardlab::runtime::comm {

class CheckingCommunicator final : public ForwardingCommunicator {
 public:
  // `timeout` bounds the fingerprint exchange (on the inner communicator's clock).
  explicit CheckingCommunicator(Communicator* inner, Nanos timeout = kDefaultTimeout);
  // Takes ownership (used for split results).
  explicit CheckingCommunicator(std::unique_ptr<Communicator> owned, Nanos timeout = kDefaultTimeout);

  WorkPtr all_gather_into(const Tensor& output, const Tensor& input) override;
  WorkPtr reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) override;
  WorkPtr all_reduce(const Tensor& inout, ReduceOp op) override;
  WorkPtr broadcast(const Tensor& inout, int root) override;
  WorkPtr barrier() override;
  Result<std::unique_ptr<Communicator>> split(int color, int key) override;

  // What one rank called, as exchanged between ranks.
  struct Fingerprint {
    std::int64_t seq, kind, dtype, count, arg, group_hash;
    std::string describe() const;  // "all_reduce(fp32 × 4096, sum)"
  };

 private:
  // Exchanges fingerprints; ok when every rank issued the same call.
  Status verify(const Fingerprint& mine);

  Nanos timeout_;
  std::int64_t seq_ = 0;
  std::shared_ptr<Storage> scratch_;  // host bytes for fingerprints
};

}  // namespace shardlab::runtime::comm
