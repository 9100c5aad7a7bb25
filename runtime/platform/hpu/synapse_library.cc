#include "runtime/platform/hpu/synapse_library.h"

#include <dlfcn.h>

#include <cstdlib>

namespace shardlab::runtime::device::hpu {

namespace {

// All synStatus values of the public synapse_common_types.h, indexed by value.
constexpr const char* kSynStatusNames[] = {
    "synSuccess",
    "synInvalidArgument",
    "synCbFull",
    "synOutOfHostMemory",
    "synOutOfDeviceMemory",
    "synObjectAlreadyInitialized",
    "synObjectNotInitialized",
    "synCommandSubmissionFailure",
    "synNoDeviceFound",
    "synDeviceTypeMismatch",
    "synFailedToInitializeCb",
    "synFailedToFreeCb",
    "synFailedToMapCb",
    "synFailedToUnmapCb",
    "synFailedToAllocateDeviceMemory",
    "synFailedToFreeDeviceMemory",
    "synFailedNotEnoughDevicesFound",
    "synDeviceReset",
    "synUnsupported",
    "synWrongParamsFile",
    "synDeviceAlreadyAcquired",
    "synNameIsAlreadyUsed",
    "synBusy",
    "synAllResourcesTaken",
    "synUnavailable",
    "synInvalidTensorDimensions",
    "synFail",
    "synOutOfResources",
    "synUninitialized",
    "synAlreadyInitialized",
    "synFailedSectionValidation",
    "synSynapseTerminated",
    "synAssertAsync",
    "synInvalidEventHandle",
    "synMappingNotFound",
    "synFailedDynamicPatching",
    "synFailedStaticPatching",
    "synFailedToSubmitWorkload",
    "synInvalidSectionsDefinition",
    "synInvalidTensorProperties",
    "synFailHccl",
    "synFailedToCollectTime",
    "synTimeout",
    "synResourceBadUsage",
};

constexpr const char* kHcclResultNames[] = {
    "hcclSuccess",         "hcclUnhandledSynapseError", "hcclSystemError", "hcclInternalError",
    "hcclInvalidArgument", "hcclInvalidUsage",          "hcclRemoteError", "hcclInProgress",
};

std::string format_error(const std::string& call, const std::string& name, int value, const std::string& hint) {
  std::string m = call + ": " + name + " (" + std::to_string(value) + ")";
  if (!hint.empty()) m += " \u2014 " + hint;
  return m;
}

std::string dl_error() {
  const char* e = dlerror();
  return e ? e : "unknown dlopen error";
}

}  // namespace

std::vector<std::string> synapse_search_paths() {
  const char* env = std::getenv(kSynapseLibEnv);
  if (env != nullptr && env[0] != '\0') return {env};
  return {kDefaultSynapseLib};
}

std::string synapse_status_name(int status) {
  constexpr int n = static_cast<int>(sizeof(kSynStatusNames) / sizeof(kSynStatusNames[0]));
  if (status >= 0 && status < n) return kSynStatusNames[status];
  return "synStatus " + std::to_string(status);
}

std::string hccl_result_name(int result) {
  constexpr int n = static_cast<int>(sizeof(kHcclResultNames) / sizeof(kHcclResultNames[0]));
  if (result >= 0 && result < n) return kHcclResultNames[result];
  return "hcclResult " + std::to_string(result);
}

Status synapse_error(const std::string& call, int status, const std::string& hint) {
  const std::string m = format_error(call, synapse_status_name(status), status, hint);
  switch (status) {
    case synOutOfDeviceMemory:
    case synOutOfHostMemory:
    case 14:  // synFailedToAllocateDeviceMemory
      return Status::out_of_memory(m);
    case synNoDeviceFound:
    case synDeviceAlreadyAcquired:
    case 16:  // synFailedNotEnoughDevicesFound
    case 17:  // synDeviceReset
      return Status::unavailable(m);
    case synTimeout: return Status::timeout(m);
    default: return Status::internal(m);
  }
}

Status SynapseLibrary::hccl_error(const std::string& call, int result, const std::string& hint) const {
  std::string name = hccl_result_name(result);
  if (api_.hcclGetErrorString != nullptr) {
    const char* s = api_.hcclGetErrorString(static_cast<hcclResult_t>(result));
    if (s != nullptr && s[0] != '\0') name = s;
  }
  return Status::internal(format_error(call, name, result, hint));
}

Result<std::shared_ptr<SynapseLibrary>> SynapseLibrary::open_path(const std::string& path) {
  dlerror();
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) return Status::unavailable(path + ": " + dl_error());
  std::shared_ptr<SynapseLibrary> lib(new SynapseLibrary(handle, path));
  SynapseApi& api = lib->api_;
  std::string missing;
#define SHARDLAB_RESOLVE(name, ret, params)                         \
  api.name = reinterpret_cast<ret(*) params>(dlsym(handle, #name)); \
  if (api.name == nullptr && missing.empty()) missing = #name;
  SHARDLAB_SYNAPSE_FUNCTIONS(SHARDLAB_RESOLVE)
  if (!missing.empty()) {
    return Status::unavailable(path + " loaded but does not export " + missing +
                               " (not a Synapse library, or an unsupported Gaudi software version)");
  }
  SHARDLAB_HCCL_FUNCTIONS(SHARDLAB_RESOLVE)
#undef SHARDLAB_RESOLVE
  api.has_hccl = missing.empty();
  return lib;
}

Result<std::shared_ptr<SynapseLibrary>> SynapseLibrary::open() {
  std::string tried;
  for (const std::string& path : synapse_search_paths()) {
    auto lib = open_path(path);
    if (lib.is_ok()) return lib;
    tried += "\n  " + lib.status().message();
  }
  return Status::unavailable(
      "no Gaudi software found: could not load the Synapse library; looked in:" + tried +
      "\nInstall the Intel Gaudi software (libSynapse.so in /usr/lib/habanalabs) or set " + kSynapseLibEnv +
      " to the full path of libSynapse.so. To run the same scenario without Gaudi hardware, use `--backend sim` "
      "(e.g. `shardlab run SCENARIO.yaml --backend sim`).");
}

SynapseLibrary::~SynapseLibrary() {
  if (handle_ != nullptr) dlclose(handle_);
}

}  // namespace shardlab::runtime::device::hpu
