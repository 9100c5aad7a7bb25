// SynapseLibrary: libSynapse.so (which also exports the hccl* symbols) opened at run time.
//
// Where it is looked for (NOTE [Synapse library location]):
//   1. $SHARDLAB_SYNAPSE_LIB — the full path of a library file (used as is, nothing
//      else is tried). Tests point it at the test double libshardlab_fake_synapse.so.
//   2. /usr/lib/habanalabs/libSynapse.so — where the Intel Gaudi software installs it.
// When nothing loads, open() returns UNAVAILABLE: "no Gaudi software found", each path it
// tried with the loader's reason, and how to run the same scenario with `--backend sim`.
//
// Every Synapse symbol the backend uses (synapse_api.h) must resolve, or open() fails
// naming the missing symbol. The hccl* symbols are optional at open time (has_hccl());
// the hccl communicator refuses to start without them.
//
// Errors: synapse_error()/hccl_error() turn a status into a Status whose message names
// the call, the status name and number, and a hint where one helps, e.g.
//   "synDeviceAcquireByModuleId: synDeviceAlreadyAcquired (20) — another process holds
//    module 3; check HABANA_VISIBLE_MODULES".
//
// Thread safety: the api() table is immutable after open(); calling through it is as
// thread-safe as the library (shardlab calls it from one thread per process).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/core/status.h"
#include "runtime/platform/hpu/synapse_api.h"

namespace shardlab::runtime::device::hpu {

constexpr const char* kSynapseLibEnv = "SHARDLAB_SYNAPSE_LIB";
constexpr const char* kDefaultSynapseLib = "/usr/lib/habanalabs/libSynapse.so";

// The paths open() tries, in order (reads the environment).
std::vector<std::string> synapse_search_paths();

// "synDeviceAlreadyAcquired" for 20; "synStatus 99" for unknown values.
std::string synapse_status_name(int status);
// "hcclInternalError" for 3 (our own table; the library's hcclGetErrorString is preferred
// by hccl_error when available).
std::string hccl_result_name(int result);

// "<call>: <name> (<number>)[ — <hint>]" as a Status; the code follows the status
// (out of memory → OUT_OF_MEMORY, no device / already acquired / device reset →
// UNAVAILABLE, timeouts → TIMEOUT, everything else → INTERNAL).
Status synapse_error(const std::string& call, int status, const std::string& hint = "");

class SynapseLibrary {
 public:
  // Opens the first library of synapse_search_paths() that loads and resolves.
  static Result<std::shared_ptr<SynapseLibrary>> open();
  // Opens exactly `path` (no fallbacks).
  static Result<std::shared_ptr<SynapseLibrary>> open_path(const std::string& path);
  ~SynapseLibrary();
  SynapseLibrary(const SynapseLibrary&) = delete;
  SynapseLibrary& operator=(const SynapseLibrary&) = delete;

  const SynapseApi& api() const { return api_; }
  const std::string& path() const { return path_; }
  bool has_hccl() const { return api_.has_hccl; }

  // As synapse_error, for HCCL results; uses the library's hcclGetErrorString.
  Status hccl_error(const std::string& call, int result, const std::string& hint = "") const;

 private:
  SynapseLibrary(void* handle, std::string path) : handle_(handle), path_(std::move(path)) {}

  void* handle_;
  std::string path_;
  SynapseApi api_;
};

}  // namespace shardlab::runtime::device::hpu
