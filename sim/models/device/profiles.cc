#include "sim/models/device/profiles.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "runtime/io/safetensors.h"
#include "sim/models/device/profile_json.h"

namespace shardlab::sim {

namespace detail {

std::vector<std::string> builtin_names(const char* kind) {
  std::vector<std::string> names;
  for (int i = 0; i < kNumBuiltinProfiles; ++i) {
    if (std::string_view(kBuiltinProfiles[i].kind) == kind) names.emplace_back(kBuiltinProfiles[i].name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

Result<std::string> read_profile(const char* kind, const std::string& name_or_path, std::string* origin) {
  const bool is_path =
      name_or_path.find('/') != std::string::npos || (name_or_path.size() > 5 && name_or_path.ends_with(".json"));
  const std::string what = std::string_view(kind) == "devices"  ? "device profile"
                           : std::string_view(kind) == "stacks" ? "software stack"
                                                                : "topology profile";
  if (!is_path) {
    for (int i = 0; i < kNumBuiltinProfiles; ++i) {
      if (std::string_view(kBuiltinProfiles[i].kind) == kind && name_or_path == kBuiltinProfiles[i].name) {
        *origin = "built-in " + what + " " + name_or_path;
        return std::string(kBuiltinProfiles[i].json);
      }
    }
    std::string list;
    for (const auto& n : builtin_names(kind)) list += (list.empty() ? "" : ", ") + n;
    return Status::invalid_argument("unknown " + what + " '" + name_or_path + "'; built-in: " + list +
                                    ", or a path to a .json file");
  }
  *origin = name_or_path;
  auto text = runtime::io::read_file(name_or_path);
  if (!text.is_ok()) return Status::invalid_argument(what + " " + name_or_path + ": " + text.status().message());
  return std::move(text).value();
}

}  // namespace detail

std::vector<std::string> list_device_profiles() { return detail::builtin_names("devices"); }

namespace {
constexpr const char* kCpuScenarioName = "cpu";  // the scenario default, an alias of cpu-sim
constexpr const char* kCpuProfile = "cpu-sim";
}  // namespace

std::vector<std::string> device_profile_names() {
  std::vector<std::string> names;
  for (const auto& n : list_device_profiles()) names.push_back(n == kCpuProfile ? kCpuScenarioName : n);
  std::sort(names.begin(), names.end());
  return names;
}

DeviceProfile offload_host_profile() {
  DeviceProfile p;
  p.name = "host";
  p.description = "the rank's host for CPU offload: cpu-sim's rates, unlimited memory";
  p.capacity_bytes = 0;
  return p;
}

Result<DeviceProfile> load_device_profile(const std::string& name_or_path) {
  std::string origin;
  SHARDLAB_ASSIGN_OR_RETURN(
      std::string text,
      detail::read_profile("devices", name_or_path == kCpuScenarioName ? kCpuProfile : name_or_path, &origin));
  return parse_device_profile(text, origin);
}

namespace {

// NOTE [Profile bounds]
// Every rate and factor of a profile lies in a range that holds any real device with a
// wide margin, so that a typo (1e-3 for 1e13) is refused at load time naming the key, the
// value and the range, instead of turning into times past the simulator's limit (NOTE
// [Virtual time limit] in sim/models/device/cost_model.h) or into nonsense: rates from 10^6 (1 MFLOP/s,
// 1 MB/s) to 10^20, efficiencies and per-op factors from 0.001, a capacity of at least
// 1 MiB (one that rounds to 0 bytes would read as "unlimited").
constexpr double kMinRate = 1e6;
constexpr double kMaxRate = 1e20;
constexpr double kMinFactor = 1e-3;
constexpr double kMinCapacityGib = 1.0 / 1024;  // 1 MiB

// {"fp32": x, "bf16": y}
Status read_rates(const detail::JsonObject& root, const std::string& key, double* fp32, double* bf16) {
  SHARDLAB_ASSIGN_OR_RETURN(detail::JsonObject o, root.object(key));
  SHARDLAB_RETURN_IF_ERROR(o.only({"fp32", "bf16"}));
  const std::string allowed = "a number of FLOP/s in [1e6, 1e20], e.g. 4.32e14";
  SHARDLAB_ASSIGN_OR_RETURN(*fp32, o.number("fp32", kMinRate, kMaxRate, false, allowed));
  SHARDLAB_ASSIGN_OR_RETURN(*bf16, o.number("bf16", kMinRate, kMaxRate, false, allowed));
  return Status::ok();
}

}  // namespace

Result<DeviceProfile> parse_device_profile(const std::string& json_text, const std::string& origin) {
  SHARDLAB_ASSIGN_OR_RETURN(nlohmann::json j, detail::JsonObject::parse(json_text, origin));
  detail::JsonObject root(j, origin);
  SHARDLAB_RETURN_IF_ERROR(root.only({"name",
                                      "description",
                                      "torch_device",
                                      "matrix_flops_per_s",
                                      "vector_flops_per_s",
                                      "memory_bytes_per_s",
                                      "cache",
                                      "host_link_bytes_per_s",
                                      "launch_ns",
                                      "alloc_ns",
                                      "op_host_ns",
                                      "capacity_gib",
                                      "efficiency",
                                      "compute_factors",
                                      "memory_factors",
                                      "matrix_memory_overlap",
                                      "matrix_operand_passes",
                                      "small_dim_factors",
                                      "matrix_engine",
                                      "notes"}));
  SHARDLAB_RETURN_IF_ERROR(root.notes_ok("notes"));
  DeviceProfile p;
  SHARDLAB_ASSIGN_OR_RETURN(p.name, root.string("name", true));
  if (p.name.empty()) return root.bad("name", "must not be empty");
  SHARDLAB_ASSIGN_OR_RETURN(p.description, root.string("description", false));
  if (root.has("torch_device")) {
    SHARDLAB_ASSIGN_OR_RETURN(p.torch_device, root.string("torch_device", true));
    if (p.torch_device != "cpu" && p.torch_device != "hpu") return root.bad("torch_device", "allowed: hpu, cpu");
  }
  SHARDLAB_RETURN_IF_ERROR(read_rates(root, "matrix_flops_per_s", &p.matrix_flops_per_s, &p.matrix_bf16_flops_per_s));
  SHARDLAB_RETURN_IF_ERROR(read_rates(root, "vector_flops_per_s", &p.vector_flops_per_s, &p.vector_bf16_flops_per_s));
  SHARDLAB_ASSIGN_OR_RETURN(p.memory_bytes_per_s, root.number("memory_bytes_per_s", kMinRate, kMaxRate, false,
                                                              "bytes/s in [1e6, 1e20], e.g. 2.45e12"));
  // NOTE [Cache-resident bytes]: absent for a device with no cache to count on.
  if (root.has("cache")) {
    SHARDLAB_ASSIGN_OR_RETURN(detail::JsonObject c, root.object("cache"));
    SHARDLAB_RETURN_IF_ERROR(c.only({"kib", "bytes_per_s"}));
    SHARDLAB_ASSIGN_OR_RETURN(
        const double kib, c.number("kib", 1, 1 << 30, false, "KiB of per-core cache in [1, 1073741824], e.g. 2048"));
    p.cache_bytes = static_cast<std::int64_t>(std::llround(kib * 1024.0));
    SHARDLAB_ASSIGN_OR_RETURN(
        p.cache_bytes_per_s, c.number("bytes_per_s", kMinRate, kMaxRate, false, "bytes/s in [1e6, 1e20], e.g. 6.1e10"));
  }
  // NOTE [Host link]: 0 (absent) when the host's memory is the device's.
  const std::string link_allowed =
      "bytes/s >= 0 one way between host and device memory: 0 (the host's memory is the device's) or in [1e6, "
      "1e20], e.g. 2.52e10";
  SHARDLAB_ASSIGN_OR_RETURN(p.host_link_bytes_per_s,
                            root.number_or("host_link_bytes_per_s", 0, 0, kMaxRate, false, link_allowed));
  if (p.host_link_bytes_per_s != 0 && p.host_link_bytes_per_s < kMinRate) {
    char v[32];
    std::snprintf(v, sizeof v, "%.17g", p.host_link_bytes_per_s);
    return root.bad("host_link_bytes_per_s", std::string("value ") + v + " out of range; allowed: " + link_allowed);
  }
  SHARDLAB_ASSIGN_OR_RETURN(p.launch_ns, root.nanos("launch_ns"));
  SHARDLAB_ASSIGN_OR_RETURN(p.alloc_ns, root.nanos("alloc_ns", 0));
  SHARDLAB_ASSIGN_OR_RETURN(p.op_host_ns, root.nanos("op_host_ns", 0));
  // A capacity below 1 MiB (one that rounds to 0 bytes included) is refused: 0 bytes would
  // read as the offload host's "unlimited".
  SHARDLAB_ASSIGN_OR_RETURN(const double gib, root.number("capacity_gib", kMinCapacityGib, 1 << 20, false,
                                                          "GiB (2^30 bytes) in [0.0009765625 (1 MiB), 1048576], "
                                                          "e.g. 94.6"));
  p.capacity_bytes = static_cast<std::int64_t>(std::llround(gib * static_cast<double>(std::int64_t{1} << 30)));
  if (root.has("efficiency")) {
    SHARDLAB_ASSIGN_OR_RETURN(detail::JsonObject e, root.object("efficiency"));
    SHARDLAB_RETURN_IF_ERROR(e.only({"matrix", "vector", "memory"}));
    const std::string allowed = "a fraction of the peak in [0.001, 1]";
    SHARDLAB_ASSIGN_OR_RETURN(p.matrix_efficiency, e.number_or("matrix", 1.0, kMinFactor, 1, false, allowed));
    SHARDLAB_ASSIGN_OR_RETURN(p.vector_efficiency, e.number_or("vector", 1.0, kMinFactor, 1, false, allowed));
    SHARDLAB_ASSIGN_OR_RETURN(p.memory_efficiency, e.number_or("memory", 1.0, kMinFactor, 1, false, allowed));
  }
  // NOTE [Per-op compute factors], NOTE [Per-op memory factors]: {op key: factor}.
  const auto read_factors = [&root](const char* name, double max, const char* allowed,
                                    std::map<std::string, double, std::less<>>* out) -> Status {
    if (!root.has(name)) return Status::ok();
    SHARDLAB_ASSIGN_OR_RETURN(detail::JsonObject f, root.object(name));
    SHARDLAB_RETURN_IF_ERROR(f.only(compute_factor_keys()));
    for (const std::string& key : compute_factor_keys()) {
      if (!f.has(key)) continue;
      SHARDLAB_ASSIGN_OR_RETURN(const double v, f.number(key, kMinFactor, max, false, allowed));
      out->emplace(key, v);
    }
    return Status::ok();
  };
  SHARDLAB_RETURN_IF_ERROR(
      read_factors("compute_factors", 1000, "a factor on the op's compute time in [0.001, 1000]", &p.compute_factors));
  SHARDLAB_RETURN_IF_ERROR(
      read_factors("memory_factors", 4, "a factor on the op's memory time in [0.001, 4]", &p.memory_factors));
  // NOTE [Matrix ops on a CPU]
  SHARDLAB_ASSIGN_OR_RETURN(p.matrix_memory_overlap, root.boolean_or("matrix_memory_overlap", true));
  SHARDLAB_ASSIGN_OR_RETURN(p.matrix_operand_passes,
                            root.number_or("matrix_operand_passes", 1.0, 1, 3, false,
                                           "how often a GEMM streams its A and B operands, in [1, 3]"));
  if (root.has("small_dim_factors")) {
    SHARDLAB_ASSIGN_OR_RETURN(detail::JsonObject f, root.object("small_dim_factors"));
    for (const std::string& key : f.keys()) {
      std::int64_t dim = 0;
      const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), dim);
      if (ec != std::errc() || end != key.data() + key.size() || dim < 1 || dim > (std::int64_t{1} << 30)) {
        return f.bad(key, "not a dimension; allowed: keys are integers in [1, 2^30], e.g. \"16\"");
      }
      SHARDLAB_ASSIGN_OR_RETURN(
          const double v, f.number(key, kMinFactor, 1000, false, "a factor on the compute time in [0.001, 1000]"));
      p.small_dim_factors.emplace_back(dim, v);
    }
    std::sort(p.small_dim_factors.begin(), p.small_dim_factors.end());
    for (std::size_t i = 1; i < p.small_dim_factors.size(); ++i) {
      if (p.small_dim_factors[i].first == p.small_dim_factors[i - 1].first) {
        return f.bad(std::to_string(p.small_dim_factors[i].first), "given twice (as another spelling)");
      }
    }
  }
  // NOTE [Matrix engine geometry]: {"engines": E, "tiles": ["HxW", …]}.
  if (root.has("matrix_engine")) {
    SHARDLAB_ASSIGN_OR_RETURN(detail::JsonObject e, root.object("matrix_engine"));
    SHARDLAB_RETURN_IF_ERROR(e.only({"engines", "tiles"}));
    SHARDLAB_ASSIGN_OR_RETURN(const double engines,
                              e.number("engines", 1, 1024, false, "an integer number of engines in [1, 1024]"));
    if (engines != std::floor(engines)) return e.bad("engines", "must be an integer in [1, 1024]");
    p.matrix_engines = static_cast<int>(engines);
    const std::string allowed =
        "1 to 16 tile shapes \"HxW\" (output rows x columns, each in [1, 65536]), e.g. [\"256x256\"]";
    SHARDLAB_ASSIGN_OR_RETURN(const std::vector<std::string> tiles, e.strings("tiles", allowed));
    if (tiles.empty() || tiles.size() > 16)
      return e.bad("tiles", std::to_string(tiles.size()) + " shapes; allowed: " + allowed);
    for (const std::string& t : tiles) {
      std::int64_t h = 0, w = 0;
      const std::size_t x = t.find('x');
      const auto parse = [](std::string_view s, std::int64_t* v) {
        const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
        return !s.empty() && ec == std::errc() && end == s.data() + s.size() && *v >= 1 && *v <= 65536;
      };
      if (x == std::string::npos || !parse(std::string_view(t).substr(0, x), &h) ||
          !parse(std::string_view(t).substr(x + 1), &w)) {
        return e.bad("tiles", "'" + t + "' is not a tile shape; allowed: " + allowed);
      }
      p.matrix_tiles.emplace_back(h, w);
    }
  }
  return p;
}

std::string device_profile_to_json(const DeviceProfile& p) {
  nlohmann::ordered_json j;
  j["name"] = p.name;
  if (!p.description.empty()) j["description"] = p.description;
  if (p.torch_device != "cpu") j["torch_device"] = p.torch_device;
  j["matrix_flops_per_s"] = {{"fp32", p.matrix_flops_per_s}, {"bf16", p.matrix_bf16_flops_per_s}};
  j["vector_flops_per_s"] = {{"fp32", p.vector_flops_per_s}, {"bf16", p.vector_bf16_flops_per_s}};
  j["memory_bytes_per_s"] = p.memory_bytes_per_s;
  if (p.cache_bytes > 0) {
    j["cache"] = {{"kib", static_cast<double>(p.cache_bytes) / 1024.0}, {"bytes_per_s", p.cache_bytes_per_s}};
  }
  if (p.host_link_bytes_per_s > 0) j["host_link_bytes_per_s"] = p.host_link_bytes_per_s;
  j["launch_ns"] = p.launch_ns;
  if (p.alloc_ns != 0) j["alloc_ns"] = p.alloc_ns;
  if (p.op_host_ns != 0) j["op_host_ns"] = p.op_host_ns;
  j["capacity_gib"] = static_cast<double>(p.capacity_bytes) / static_cast<double>(std::int64_t{1} << 30);
  j["efficiency"] = {{"matrix", p.matrix_efficiency}, {"vector", p.vector_efficiency}, {"memory", p.memory_efficiency}};
  if (!p.matrix_memory_overlap) j["matrix_memory_overlap"] = false;
  if (p.matrix_operand_passes != 1.0) j["matrix_operand_passes"] = p.matrix_operand_passes;
  if (!p.small_dim_factors.empty()) {
    nlohmann::ordered_json f = nlohmann::ordered_json::object();
    for (const auto& [dim, v] : p.small_dim_factors) f[std::to_string(dim)] = v;
    j["small_dim_factors"] = f;
  }
  if (p.matrix_engines > 0) {
    nlohmann::ordered_json tiles = nlohmann::ordered_json::array();
    for (const auto& [h, w] : p.matrix_tiles) tiles.push_back(std::to_string(h) + "x" + std::to_string(w));
    j["matrix_engine"] = {{"engines", p.matrix_engines}, {"tiles", tiles}};
  }
  for (const auto& [name, factors] :
       {std::pair{"compute_factors", &p.compute_factors}, std::pair{"memory_factors", &p.memory_factors}}) {
    if (factors->empty()) continue;
    nlohmann::ordered_json f = nlohmann::ordered_json::object();
    for (const auto& [key, v] : *factors) f[key] = v;
    j[name] = f;
  }
  return j.dump(2) + "\n";
}

Status write_device_profile(const DeviceProfile& profile, const std::string& path) {
  return runtime::io::write_file_atomic(path, device_profile_to_json(profile));
}

}  // namespace shardlab::sim
