// The entry points the CLI uses for `--backend hpu` and `shardlab devices`.
//
//   probe_hpu()  — is Gaudi software present, how many cards, which type (never fails;
//                  used by `shardlab devices`).
//   open_hpu()   — for one process of an mpirun: load Synapse (synapse_library.h,
//                  NOTE [Synapse library location]), synInitialize, acquire this process's
//                  card (HpuDevice, module from HABANA_VISIBLE_MODULES and the local rank)
//                  and, given a bootstrap communicator (the MpiCommunicator of the world),
//                  build the HCCL world communicator over it. Without Gaudi software it
//                  returns UNAVAILABLE "no Gaudi software found …" naming the paths it looked
//                  in and how to run the same scenario with `--backend sim`.
//
// Thread safety: one HpuContext per process, used by the thread that owns the rank.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/comm/communicator.h"
#include "runtime/core/clock.h"
#include "runtime/platform/hpu/device/device.h"

namespace shardlab::runtime::comm::hccl {
class HcclCommunicator;
}

namespace shardlab::runtime::device::hpu {

struct HpuProbe {
  bool found = false;                 // a Synapse library loaded and initialized
  std::vector<std::string> searched;  // library paths tried, in order
  std::string library;                // the one that loaded (when found)
  std::string error;                  // why not found, or why the cards could not be counted
  int device_count = 0;               // synDeviceGetCount
  std::string device_type;            // "Gaudi2", … of this process's module; empty when it
                                      // could not be acquired (e.g. held by another process)
};

// Never fails; never leaves a card acquired or Synapse initialized.
HpuProbe probe_hpu();

struct HpuOpenOptions {
  HpuDeviceOptions device;
  // The library to load; empty: synapse_search_paths() ($SHARDLAB_SYNAPSE_LIB, else
  // /usr/lib/habanalabs/libSynapse.so).
  std::string library_path;
};

class HpuContext {
 public:
  // Destroys the communicator, then the device (releasing the card), then synDestroy.
  ~HpuContext();
  HpuContext(const HpuContext&) = delete;
  HpuContext& operator=(const HpuContext&) = delete;

  Device& device();
  HpuDevice& hpu_device() { return *device_; }
  bool has_communicator() const { return communicator_ != nullptr; }
  // The HCCL world communicator (CHECK: has_communicator()).
  comm::Communicator& communicator();
  const SynapseLibrary& library() const { return *library_; }

 private:
  friend Result<std::unique_ptr<HpuContext>> open_hpu(const HpuOpenOptions&, std::unique_ptr<comm::Communicator>,
                                                      const Clock&);
  HpuContext() = default;

  std::shared_ptr<SynapseLibrary> library_;
  bool initialized_ = false;
  std::unique_ptr<HpuDevice> device_;
  std::unique_ptr<comm::hccl::HcclCommunicator> communicator_;
};

// `bootstrap` may be null (device only, no collectives). Collective over the bootstrap
// group when given. `clock` (the steady clock in real runs) must outlive the context.
Result<std::unique_ptr<HpuContext>> open_hpu(const HpuOpenOptions& options,
                                             std::unique_ptr<comm::Communicator> bootstrap, const Clock& clock);

}  // namespace shardlab::runtime::device::hpu
