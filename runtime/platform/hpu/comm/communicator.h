// HcclCommunicator: the Intel Gaudi backend of the Communicator seam (HCCL, reached
// through the dlopen'ed Synapse library of an HpuDevice; one rank per process and card).
//
// Creation (collective over the bootstrap group): rank 0 of `bootstrap` calls
// hcclGetUniqueId and broadcasts the id (with its status, so a failure on rank 0 fails
// every rank instead of leaving them waiting) over `bootstrap` — any Communicator with
// host tensors, in practice the MpiCommunicator of the same processes; then every rank
// calls hcclCommInitRank. When HCCL_COMM_ID=<ip>:<port> is set and the bootstrap group is
// "world", every rank calls hcclGetUniqueId itself (HCCL derives the id from that
// variable) and nothing is broadcast. rank(), size() and group_name() are the bootstrap's.
//
// Operations (see communicator.h one folder up for the shared contract). Each one:
//   1. records an event on the device's compute stream and makes the collective stream
//      wait on it (work already issued on compute comes first);
//   2. calls hcclAllGather/hcclReduceScatter/hcclAllReduce/hcclBroadcast on the device
//      addresses of its views (NOTE [HPU device memory] in runtime/platform/hpu/device/device.h) on
//      the dedicated collective stream (hcclSend/hcclRecv on a send and a receive stream),
//      and records a completion event;
//   3. returns a Work whose wait() polls synEventQuery until the event completes or the
//      injected Clock passes the deadline (TIMEOUT naming the operation; a later wait keeps
//      waiting on the same operation, so a late peer still completes it). While polling it
//      asks hcclCommGetAsyncError; an asynchronous error, or any failing hccl* call, makes
//      the communicator call hcclCommAbort (so no rank hangs on it) and every later
//      operation fails with FAILED_PRECONDITION naming the first failure.
//   4. Work::wait_on_compute makes the compute stream wait for the completion event
//      (synStreamWaitEvent) and records a fence after it, without blocking the host; the
//      events and buffers live until the host's wait() and the fence have both passed.
// kAvg is a sum followed by the mpi backend's division, through the host (FSDP never asks
// for it; see divide_on_host in communicator.cc). barrier()
// is an all-reduce of one element. Tensors must live in the HpuDevice's memory.
// send/recv: HCCL has no tags; messages between a pair are matched in issue order, so the
// tag only has to be >= 0 (the seam's per-(pair, tag) order holds for one tag per pair).
// split(color, key) splits the bootstrap and builds a new HCCL communicator over the new
// group (group names follow the bootstrap: "world/<color>").
//
// Lifetimes: the HpuDevice and the Clock outlive the communicator. Destruction calls
// hcclCommDestroy, or hcclCommAbort when an operation never completed (its buffers are
// then leaked on purpose: the device may still write into them).
//
// Thread safety: one owning thread, like every Communicator.
#pragma once

#include <memory>
#include <string>

#include "runtime/comm/communicator.h"
#include "runtime/platform/hpu/device/device.h"

namespace shardlab::runtime::comm::hccl {

struct HcclShared;  // the HCCL handle, streams and abort state shared with Works

class HcclCommunicator final : public Communicator {
 public:
  static Result<std::unique_ptr<HcclCommunicator>> create(device::hpu::HpuDevice& device,
                                                          std::unique_ptr<Communicator> bootstrap, const Clock& clock);
  ~HcclCommunicator() override;
  HcclCommunicator(const HcclCommunicator&) = delete;
  HcclCommunicator& operator=(const HcclCommunicator&) = delete;

  int rank() const override { return bootstrap_->rank(); }
  int size() const override { return bootstrap_->size(); }
  const std::string& group_name() const override { return bootstrap_->group_name(); }

  WorkPtr all_gather_into(const Tensor& output, const Tensor& input) override;
  WorkPtr reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) override;
  WorkPtr all_reduce(const Tensor& inout, ReduceOp op) override;
  WorkPtr broadcast(const Tensor& inout, int root) override;
  WorkPtr barrier() override;
  WorkPtr send(const Tensor& input, int peer, int tag) override;
  WorkPtr recv(const Tensor& output, int peer, int tag) override;
  Result<std::unique_ptr<Communicator>> split(int color, int key) override;

  // True once the communicator was aborted (a failed or asynchronously failing operation).
  bool aborted() const;

 private:
  HcclCommunicator(device::hpu::HpuDevice& device, std::unique_ptr<Communicator> bootstrap, const Clock& clock,
                   std::shared_ptr<HcclShared> shared);

  // Enqueues compute→collective ordering, uploads, `call`, downloads and the completion
  // event on `stream`; returns the Work.
  struct Plan;
  WorkPtr launch(Plan plan);

  device::hpu::HpuDevice& device_;
  std::unique_ptr<Communicator> bootstrap_;
  const Clock& clock_;
  std::shared_ptr<HcclShared> shared_;
  Tensor barrier_buffer_;
};

}  // namespace shardlab::runtime::comm::hccl
