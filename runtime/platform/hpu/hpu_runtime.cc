#include "runtime/platform/hpu/hpu_runtime.h"

#include "runtime/platform/hpu/comm/communicator.h"

namespace shardlab::runtime::device::hpu {

namespace {

Status initialize(const SynapseLibrary& lib) {
  const int st = lib.api().synInitialize();
  if (st == synSuccess || st == synAlreadyInitialized || st == synObjectAlreadyInitialized) return Status::ok();
  return synapse_error("synInitialize", st, "the Gaudi driver may not be loaded; check `hl-smi`");
}

}  // namespace

HpuProbe probe_hpu() {
  HpuProbe probe;
  probe.searched = synapse_search_paths();
  auto lib = SynapseLibrary::open();
  if (!lib.is_ok()) {
    probe.error = lib.status().message();
    return probe;
  }
  probe.library = (*lib)->path();
  const Status init = initialize(**lib);
  if (!init.is_ok()) {
    probe.error = init.message();
    return probe;
  }
  probe.found = true;
  const SynapseApi& api = (*lib)->api();
  std::uint32_t count = 0;
  const int st = api.synDeviceGetCount(&count);
  if (st != synSuccess) {
    probe.error = synapse_error("synDeviceGetCount", st).message();
  } else {
    probe.device_count = static_cast<int>(count);
  }
  auto module = select_module();
  synDeviceId id = 0;
  if (probe.device_count > 0 && module.is_ok() && api.synDeviceAcquireByModuleId(&id, *module) == synSuccess) {
    SynDeviceInfoBuffer info;
    if (api.synDeviceGetInfo(id, &info.info) == synSuccess) {
      switch (info.info.deviceType) {
        case synDeviceGaudi: probe.device_type = "Gaudi"; break;
        case synDeviceGaudi2: probe.device_type = "Gaudi2"; break;
        case synDeviceGaudi3: probe.device_type = "Gaudi3"; break;
        default: probe.device_type = "synDeviceType " + std::to_string(info.info.deviceType);
      }
    }
    api.synDeviceRelease(id);
  }
  api.synDestroy();
  return probe;
}

HpuContext::~HpuContext() {
  communicator_.reset();
  device_.reset();
  if (initialized_) library_->api().synDestroy();
}

Device& HpuContext::device() { return *device_; }

comm::Communicator& HpuContext::communicator() {
  SHARDLAB_CHECK(communicator_ != nullptr);
  return *communicator_;
}

Result<std::unique_ptr<HpuContext>> open_hpu(const HpuOpenOptions& options,
                                             std::unique_ptr<comm::Communicator> bootstrap, const Clock& clock) {
  std::unique_ptr<HpuContext> ctx(new HpuContext());
  if (options.library_path.empty()) {
    SHARDLAB_ASSIGN_OR_RETURN(ctx->library_, SynapseLibrary::open());
  } else {
    auto lib = SynapseLibrary::open_path(options.library_path);
    if (!lib.is_ok()) {
      return Status::unavailable("no Gaudi software found: could not load " + lib.status().message() +
                                 "; to run the same scenario without Gaudi hardware, use `--backend sim`");
    }
    ctx->library_ = std::move(lib).value();
  }
  SHARDLAB_RETURN_IF_ERROR(initialize(*ctx->library_));
  ctx->initialized_ = true;
  SHARDLAB_ASSIGN_OR_RETURN(ctx->device_, HpuDevice::open(ctx->library_, options.device));
  if (bootstrap) {
    SHARDLAB_ASSIGN_OR_RETURN(ctx->communicator_,
                              comm::hccl::HcclCommunicator::create(*ctx->device_, std::move(bootstrap), clock));
  }
  return ctx;
}

}  // namespace shardlab::runtime::device::hpu
