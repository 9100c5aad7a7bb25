// Device profiles: the roofline numbers of a simulated device (DeviceProfile, sim/models/device/cost_model.h)
// as data files. The built-in ones (sim/profiles/devices/*.json: cpu-sim, gaudi1, gaudi2,
// gaudi3) are compiled into the library from those files by a CMake step, so the CLI
// finds them from any directory; a user profile is loaded from a path. The file format
// and the reasoning behind every built-in number are in sim/profiles/README.md.
// Topology profiles follow the same rules (sim/models/network/topology.h).
//
// Thread safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "runtime/core/status.h"
#include "sim/models/device/cost_model.h"

namespace shardlab::sim {

// Built-in device profile names (sorted), as the files under sim/profiles/devices/ name them.
std::vector<std::string> list_device_profiles();
// The names world.device takes for the built-in profiles (sorted): list_device_profiles()
// with cpu-sim under its scenario name "cpu". `shardlab devices` and the scenario parser
// both use this list, so the names one prints are the names the other accepts.
std::vector<std::string> device_profile_names();
// A built-in profile by name ("cpu" is an alias of "cpu-sim", the scenario default), or
// a JSON file by path (anything containing a '/' or ending in ".json"). Errors are
// INVALID_ARGUMENT naming the file, the key and what is allowed.
Result<DeviceProfile> load_device_profile(const std::string& name_or_path);
// The rank's host when FSDP offloads to the CPU in a simulated run (a SimDevice named
// "host:<rank>" on the rank's clock): cpu-sim's rates — a host core's, not a measured
// Xeon's — with unlimited memory (a node's host RAM is far larger than any offloaded
// shard) and no host link (it is the host). The optimizer steps over offloaded shards on
// it, so their time is on the rank's clock. The scenario key world.offload_host replaces
// it with a device profile file (e.g. one `shardlab calibrate` wrote on the real host).
DeviceProfile offload_host_profile();
// Parses a device profile's JSON text; `origin` names it in messages.
Result<DeviceProfile> parse_device_profile(const std::string& json_text, const std::string& origin);
// The profile as JSON (what parse_device_profile reads back).
std::string device_profile_to_json(const DeviceProfile& profile);
// Writes device_profile_to_json atomically (temporary file + rename).
Status write_device_profile(const DeviceProfile& profile, const std::string& path);

namespace detail {
// The JSON files of sim/profiles/, compiled in (generated builtin_profiles.cc).
struct BuiltinProfile {
  const char* kind;  // "devices", "topologies" or "stacks"
  const char* name;  // file name without ".json"
  const char* json;
};
extern const BuiltinProfile kBuiltinProfiles[];
extern const int kNumBuiltinProfiles;

std::vector<std::string> builtin_names(const char* kind);
// The text of a built-in profile (`kind`, name) or of a file; *origin is set to what
// names it in messages ("built-in device profile gaudi2" / the path).
Result<std::string> read_profile(const char* kind, const std::string& name_or_path, std::string* origin);
}  // namespace detail

}  // namespace shardlab::sim
