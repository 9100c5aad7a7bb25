// Device and topology profiles: the built-in files load, keep the default's numbers, carry
// the reference figures, and bad files are refused naming the file, the key and what is
// allowed. SimDevice charges the dtype-aware roofline.
#include "sim/models/device/profiles.h"
#include "sim/models/device/stack.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <tuple>

#include "sim/models/device/device.h"
#include "sim/models/network/topology.h"
#include "testing/status_matchers.h"

using shardlab::testlib::IsOk;

namespace shardlab::sim {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::filesystem::path temp_dir() {
  return std::filesystem::temp_directory_path() / ("shardlab_profiles_test_" + std::to_string(::getpid()));
}

// The files temp_file writes go when the test program ends (none stay behind).
class RemoveTempDir : public ::testing::Environment {
 public:
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(temp_dir(), ignored);
  }
};
[[maybe_unused]] ::testing::Environment* const kRemoveTempDir = ::testing::AddGlobalTestEnvironment(new RemoveTempDir);

std::string temp_file(const std::string& name, const std::string& text) {
  const auto dir = temp_dir();
  std::filesystem::create_directories(dir);
  const std::string path = (dir / name).string();
  std::ofstream(path) << text;
  return path;
}

TEST(DeviceProfiles, BuiltInsAreListed) {
  EXPECT_EQ(list_device_profiles(), (std::vector<std::string>{"cpu-sim", "gaudi1", "gaudi2", "gaudi3"}));
  EXPECT_EQ(list_topologies(), (std::vector<std::string>{"fully_connected", "hls1", "hls2", "hls3", "ring", "switch"}));
}

TEST(DeviceProfiles, CpuSimIsExactlyTheDefaultSoGoldensKeep) {
  const DeviceProfile d;
  for (const char* name : {"cpu-sim", "cpu"}) {
    auto p = load_device_profile(name);
    ASSERT_THAT(p, IsOk());
    EXPECT_EQ(p->name, d.name);
    EXPECT_EQ(p->matrix_flops_per_s, d.matrix_flops_per_s);
    EXPECT_EQ(p->matrix_bf16_flops_per_s, d.matrix_bf16_flops_per_s);
    EXPECT_EQ(p->vector_flops_per_s, d.vector_flops_per_s);
    EXPECT_EQ(p->vector_bf16_flops_per_s, d.vector_bf16_flops_per_s);
    EXPECT_EQ(p->memory_bytes_per_s, d.memory_bytes_per_s);
    EXPECT_EQ(p->launch_ns, d.launch_ns);
    EXPECT_EQ(p->capacity_bytes, d.capacity_bytes);
    EXPECT_EQ(p->matrix_efficiency, 1.0);
    EXPECT_EQ(p->vector_efficiency, 1.0);
    EXPECT_EQ(p->memory_efficiency, 1.0);
    EXPECT_EQ(p->op_time(2e9, 1e6, true), d.op_time(2e9, 1e6, true));
  }
}

TEST(DeviceProfiles, GaudiNumbersComeFromTheReference) {
  auto g1 = load_device_profile("gaudi1"), g2 = load_device_profile("gaudi2"), g3 = load_device_profile("gaudi3");
  ASSERT_TRUE(g1.is_ok() && g2.is_ok() && g3.is_ok())
      << g1.status().to_string() << g2.status().to_string() << g3.status().to_string();
  EXPECT_EQ(g1->matrix_bf16_flops_per_s, 60e12);
  EXPECT_EQ(g2->matrix_bf16_flops_per_s, 432e12);
  EXPECT_EQ(g3->matrix_bf16_flops_per_s, 1677e12);  // at the shipped 1.6 GHz
  EXPECT_EQ(g2->vector_bf16_flops_per_s, 11e12);
  EXPECT_EQ(g3->vector_bf16_flops_per_s, 28.7e12);
  EXPECT_EQ(g2->memory_bytes_per_s, 2.45e12);
  EXPECT_EQ(g3->memory_bytes_per_s, 3.67e12);
  // NOTE [Host link]: PCIe Gen4 x16 (Gaudi1, Gaudi2) and Gen5 x16 (Gaudi3) at 0.8 of the line rate.
  EXPECT_EQ(g1->host_link_bytes_per_s, 25.2e9);
  EXPECT_EQ(g2->host_link_bytes_per_s, 25.2e9);
  EXPECT_EQ(g3->host_link_bytes_per_s, 50.4e9);
  EXPECT_NEAR(static_cast<double>(g2->capacity_bytes) / kGiB, 94.6, 1e-9);
  EXPECT_LT(g1->capacity_bytes, std::int64_t{32} << 30);
  EXPECT_LT(g3->capacity_bytes, std::int64_t{128} << 30);
  // Sanity, not a fit: a large bf16 GEMM lands within 20% of the published measurements
  // (Gaudi2 ~419, Gaudi3 ~1243 TFLOP/s).
  const double m = 8192, flops = 2 * m * m * m, bytes = 3 * m * m * 2;
  for (auto [p, measured] : {std::pair{&*g2, 419e12}, std::pair{&*g3, 1243e12}}) {
    const double achieved =
        flops / (static_cast<double>(p->op_time(flops, bytes, ComputeUnit::kMatrix, DType::kBF16)) / 1e9);
    EXPECT_NEAR(achieved / measured, 1.0, 0.2) << p->name;
  }
  // Generations are ordered.
  EXPECT_LT(g1->matrix_rate(DType::kBF16), g2->matrix_rate(DType::kBF16));
  EXPECT_LT(g2->matrix_rate(DType::kBF16), g3->matrix_rate(DType::kBF16));
}

TEST(DeviceProfiles, RooflineIsDtypeAware) {
  auto g2 = *load_device_profile("gaudi2");
  const double flops = 1e12, bytes = 1e6;
  const Nanos bf16 = g2.op_time(flops, bytes, ComputeUnit::kMatrix, DType::kBF16);
  const Nanos fp32 = g2.op_time(flops, bytes, ComputeUnit::kMatrix, DType::kF32);
  EXPECT_EQ(bf16, g2.launch_ns + std::llround(flops / (432e12 * 0.97) * 1e9));
  EXPECT_EQ(fp32, g2.launch_ns + std::llround(flops / (108e12 * 0.97) * 1e9));
  EXPECT_EQ(g2.op_time(flops, bytes, ComputeUnit::kMatrix, DType::kF16), bf16);
  // Memory bound: the efficiency-scaled bandwidth decides.
  EXPECT_EQ(g2.op_time(1, 2.45e9, ComputeUnit::kVector, DType::kBF16),
            g2.launch_ns + std::llround(2.45e9 / (2.45e12 * 0.85) * 1e9));
}

TEST(DeviceProfiles, SimDeviceChargesTheProfile) {
  auto g3 = *load_device_profile("gaudi3");
  VirtualClock clock;
  SimDevice dev(0, g3, &clock);
  auto a = dev.empty({256, 512}, DType::kF32, MemoryCategory::kOther, "a");
  auto b = dev.empty({512, 128}, DType::kF32, MemoryCategory::kOther, "b");
  auto c = dev.empty({256, 128}, DType::kF32, MemoryCategory::kOther, "c");
  ASSERT_TRUE(a.is_ok() && b.is_ok() && c.is_ok());
  ASSERT_TRUE(dev.gemm(*a, false, *b, false, *c, 1, 0, runtime::device::kComputeStream).is_ok());
  // NOTE [Matrix engine geometry]: the [256, 128] output fills a quarter of the 256x256
  // tiles of eight engines (one tile, one engine busy: 1/32).
  const double util = g3.matrix_utilization(1, 256, 128);
  EXPECT_EQ(util, 256.0 * 128 / (8 * 65536));
  const double flops = 2.0 * 256 * 128 * 512, bytes = (256 * 512 + 512 * 128 + 2 * 256 * 128) * 4.0;
  EXPECT_EQ(clock.now(), g3.op_time(flops / util, bytes, ComputeUnit::kMatrix, DType::kF32));
  EXPECT_EQ(dev.memory().capacity(), g3.capacity_bytes);
}

// NOTE [Emulated low precision]: with bf16 emulation, an fp32 activation GEMM costs what
// the bf16 GEMM costs (rate and bytes), a GEMM led by fp32 parameters keeps the fp32 cost,
// the bf16 storage round trip of an activation is free, and activations are charged at
// their bf16 size while parameters keep theirs.
TEST(DeviceProfiles, EmulatedBf16ChargesActivationsAsBf16) {
  auto g2 = *load_device_profile("gaudi2");
  VirtualClock clock;
  SimDevice dev(0, g2, &clock);
  dev.set_emulated_dtype(DType::kBF16);
  const auto make = [&](Shape s, DType d, MemoryCategory c) {
    auto t = dev.empty(std::move(s), d, c, "t");
    EXPECT_TRUE(t.is_ok());
    return *t;
  };
  const double flops = 2.0 * 256 * 128 * 512, fp32_bytes = (256 * 512 + 512 * 128 + 2 * 256 * 128) * 4.0;
  const Tensor a = make({256, 512}, DType::kF32, MemoryCategory::kActivations);
  const Tensor b = make({512, 128}, DType::kF32, MemoryCategory::kActivations);
  const Tensor c = make({256, 128}, DType::kF32, MemoryCategory::kActivations);
  // Activations are charged at their bf16 size.
  const auto act = static_cast<std::size_t>(MemoryCategory::kActivations);
  EXPECT_EQ(dev.memory().stats().current[act], (256 * 512 + 512 * 128 + 256 * 128) * 2);
  ASSERT_TRUE(dev.gemm(a, false, b, false, c, 1, 0, runtime::device::kComputeStream).is_ok());
  const double util = g2.matrix_utilization(1, 256, 128);  // NOTE [Matrix engine geometry]
  EXPECT_EQ(clock.now(), g2.op_time(flops / util, fp32_bytes / 2, ComputeUnit::kMatrix, DType::kBF16));

  const Nanos before = clock.now();
  const Tensor p = make({256, 512}, DType::kF32, MemoryCategory::kParameters);
  EXPECT_EQ(dev.memory().stats().current[static_cast<std::size_t>(MemoryCategory::kParameters)], 256 * 512 * 4);
  ASSERT_TRUE(dev.gemm(p, false, b, false, c, 1, 0, runtime::device::kComputeStream).is_ok());
  EXPECT_EQ(clock.now() - before, g2.op_time(flops / util, fp32_bytes, ComputeUnit::kMatrix, DType::kF32));

  const Nanos before_cast = clock.now();
  const Tensor scratch = make({256, 128}, DType::kBF16, MemoryCategory::kActivations);
  ASSERT_TRUE(dev.cast(c, scratch, runtime::device::kComputeStream).is_ok());
  ASSERT_TRUE(dev.cast(scratch, c, runtime::device::kComputeStream).is_ok());
  EXPECT_EQ(clock.now(), before_cast);
  // A real cast (fp32 parameters to a bf16 buffer, as FSDP's param_dtype does) is charged.
  const Tensor pb = make({256, 512}, DType::kBF16, MemoryCategory::kCommBuffers);
  ASSERT_TRUE(dev.cast(p, pb, runtime::device::kComputeStream).is_ok());
  EXPECT_GT(clock.now(), before_cast);
}

TEST(DeviceProfiles, RoundTripThroughJson) {
  auto g1 = *load_device_profile("gaudi1");
  const std::string path = temp_file("g1.json", device_profile_to_json(g1));
  auto back = load_device_profile(path);
  ASSERT_THAT(back, IsOk());
  EXPECT_EQ(back->matrix_flops_per_s, g1.matrix_flops_per_s);
  EXPECT_EQ(back->capacity_bytes, g1.capacity_bytes);
  EXPECT_EQ(back->memory_efficiency, g1.memory_efficiency);
  EXPECT_EQ(back->torch_device, "hpu");
  auto hls3 = *load_topology("hls3");
  auto tback = parse_topology(topology_to_json(hls3), "x.json");
  ASSERT_THAT(tback, IsOk());
  EXPECT_EQ(tback->peer.gbit_per_s, 600);
  EXPECT_EQ(tback->nodes_per_leaf, hls3.nodes_per_leaf);
  EXPECT_EQ(tback->efficiency, hls3.efficiency);
}

// NOTE [Matrix engine geometry]: closed forms at BERT-large's shapes on Gaudi2 (2 engines,
// tiles 256x256, 128x512, 512x128; batch 32 x 384 tokens, 16 heads of 64).
TEST(DeviceProfiles, MatrixUtilizationIsTheFilledFractionOfTheEnginesTiles) {
  const DeviceProfile g2 = *load_device_profile("gaudi2");
  EXPECT_EQ(g2.matrix_engines, 2);
  // A Linear layer, [12288 tokens, 1024 or 4096 features]: every tile full.
  EXPECT_EQ(g2.matrix_utilization(1, 12288, 1024), 1.0);
  EXPECT_EQ(g2.matrix_utilization(1, 12288, 4096), 1.0);
  // Attention scores, 512 heads of [384, 384]: 128x512 (or 512x128) tiles, 3 per head,
  // 1536 tiles in 768 waves of two: 384·384 / (3 · 65536) = 0.75 (256x256: 0.5625).
  EXPECT_EQ(g2.matrix_utilization(512, 384, 384), 0.75);
  // Context, 512 heads of [384, 64]: one 512x128 tile each: 384·64 / 65536 = 0.375.
  EXPECT_EQ(g2.matrix_utilization(512, 384, 64), 0.375);
  // One tile on two engines: the second idles.
  EXPECT_EQ(g2.matrix_utilization(1, 256, 256), 0.5);
  EXPECT_EQ(g2.matrix_utilization(1, 1, 1), 1.0 / (2 * 65536));
  // An odd batch: 3 full tiles in 2 waves.
  EXPECT_EQ(g2.matrix_utilization(3, 256, 256), 0.75);
  // No engine (the CPU profiles, Gaudi1): shape-independent.
  EXPECT_EQ(load_device_profile("gaudi1")->matrix_utilization(512, 384, 64), 1.0);
  EXPECT_EQ(DeviceProfile{}.matrix_utilization(1, 1, 1), 1.0);
  // SimDevice charges a GEMM its flops over the utilization: the context GEMM takes
  // 1 / 0.375 of its flops' time at the sustained rate (bf16; memory made free, as this
  // GEMM is otherwise bandwidth-bound on Gaudi2).
  DeviceProfile fast_memory = g2;
  fast_memory.memory_bytes_per_s = 1e20;
  VirtualClock clock;
  SimDevice dev(0, fast_memory, &clock);
  dev.set_timing_mode(true);  // phantom operands: only the charge matters
  auto a = dev.zeros({512, 384, 384}, DType::kBF16, MemoryCategory::kOther, "p");
  auto b = dev.zeros({512, 384, 64}, DType::kBF16, MemoryCategory::kOther, "v");
  auto c = dev.zeros({512, 384, 64}, DType::kBF16, MemoryCategory::kOther, "ctx");
  ASSERT_TRUE(a.is_ok() && b.is_ok() && c.is_ok());
  const Nanos start = clock.now();
  ASSERT_TRUE(dev.batched_gemm(*a, false, *b, false, *c, 1, 0, runtime::device::kComputeStream).is_ok());
  const double flops = 2.0 * 512 * 384 * 64 * 384;
  EXPECT_EQ(clock.now() - start, g2.launch_ns + std::llround(flops / 0.375 / (432e12 * 0.97) * 1e9));
  // And round trips through JSON.
  auto back = parse_device_profile(device_profile_to_json(g2), "g2.json");
  ASSERT_THAT(back, IsOk());
  EXPECT_EQ(back->matrix_engines, 2);
  EXPECT_EQ(back->matrix_tiles, g2.matrix_tiles);
}

// Each kind of bad file: the message names the file, the key and what is allowed.
struct BadCase {
  std::string what, json, key, allowed;
};

// NOTE [Software stack]: the built-in stacks load, and every kind of bad stack file is
// refused naming the file, the key and what is allowed.
TEST(SoftwareStacks, BuiltInsLoadAndBadFilesAreRefusedNamingTheKey) {
  EXPECT_EQ(list_stacks(), (std::vector<std::string>{"ideal", "pytorch_compile", "pytorch_eager", "pytorch_lazy"}));
  for (const auto& name : list_stacks()) {
    auto s = load_stack(name);
    ASSERT_THAT(s, IsOk());
    EXPECT_EQ(s->name, name);
    auto back = parse_stack(stack_to_json(*s), "back.json");
    ASSERT_THAT(back, IsOk());
    EXPECT_EQ(*back, *s);
  }
  EXPECT_TRUE(load_stack("ideal")->ideal());
  EXPECT_EQ(load_stack("pytorch_eager")->execution, StackExecution::kEager);
  EXPECT_TRUE(load_stack("pytorch_lazy")->graphs());
  EXPECT_EQ(load_stack("pytorch_compile")->op_dispatch_ns, 0);
  auto unknown = load_stack("pytorch_jit");
  ASSERT_FALSE(unknown.is_ok());
  EXPECT_NE(unknown.status().message().find("unknown software stack 'pytorch_jit'; built-in: ideal, pytorch_compile"),
            std::string::npos)
      << unknown.status().to_string();
  const std::string head = R"("name": "s", )";
  const std::vector<BadCase> cases = {
      {"no execution", R"("op_dispatch_ns": 5)", "execution", "missing (a string)"},
      {"unknown execution", R"("execution": "jit")", "execution", "allowed: ideal, eager, lazy, compiled"},
      {"unknown key", R"("execution": "eager", "dispatch_ns": 5)", "dispatch_ns", "unknown key; allowed: name"},
      {"fractional ns", R"("execution": "eager", "op_dispatch_ns": 1.5)", "op_dispatch_ns", "integer"},
      {"negative ns", R"("execution": "eager", "fsdp_hook_ns": -1)", "fsdp_hook_ns", "[0, 1e9]"},
      {"ns a string", R"("execution": "lazy", "graph_launch_ns": "50")", "graph_launch_ns", "must be a number"},
      {"overlap a number", R"("execution": "eager", "host_device_overlap": 1)", "host_device_overlap", "true or false"},
      {"graph key on eager", R"("execution": "eager", "fuse_elementwise": true)", "fuse_elementwise",
       "only a graph-building execution (lazy, compiled) has it"},
      {"host key on ideal", R"("execution": "ideal", "op_dispatch_ns": 5)", "op_dispatch_ns",
       "the ideal execution has no host time"},
  };
  for (const auto& c : cases) {
    auto r = parse_stack("{" + head + c.json + "}", "stack.json");
    ASSERT_FALSE(r.is_ok()) << c.what;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << c.what;
    const std::string& m = r.status().message();
    EXPECT_NE(m.find("stack.json: key '" + c.key + "'"), std::string::npos) << c.what << ": " << m;
    EXPECT_NE(m.find(c.allowed), std::string::npos) << c.what << ": " << m;
  }
  auto no_name = parse_stack(R"({"execution": "ideal"})", "stack.json");
  ASSERT_FALSE(no_name.is_ok());
  EXPECT_NE(no_name.status().message().find("key 'name': missing"), std::string::npos);
}

TEST(DeviceProfiles, BadFilesAreInvalidArgumentNamingFileKeyAndAllowed) {
  const std::string good_rest =
      R"("vector_flops_per_s": {"fp32": 1e10, "bf16": 1e10}, "memory_bytes_per_s": 1e10, "launch_ns": 100, "capacity_gib": 1)";
  const std::vector<BadCase> cases = {
      {"not json", "{", "", "not valid JSON"},
      {"not an object", "[1]", "", "JSON object"},
      {"unknown key", R"({"name": "x", "matrix_flops": 1})", "matrix_flops", "allowed: name, description"},
      {"missing", R"({"name": "x", )" + good_rest + "}", "matrix_flops_per_s", "missing"},
      {"wrong type", R"({"name": "x", "matrix_flops_per_s": {"fp32": "fast", "bf16": 1}, )" + good_rest + "}",
       "matrix_flops_per_s.fp32", "must be a number"},
      {"negative", R"({"name": "x", "matrix_flops_per_s": {"fp32": -1, "bf16": 1}, )" + good_rest + "}",
       "matrix_flops_per_s.fp32", "FLOP/s in [1e6, 1e20]"},
      {"bad dtype", R"({"name": "x", "matrix_flops_per_s": {"fp32": 1, "fp8": 1}, )" + good_rest + "}",
       "matrix_flops_per_s.fp8", "allowed: fp32, bf16"},
      {"efficiency > 1",
       R"({"name": "x", "matrix_flops_per_s": {"fp32": 1e12, "bf16": 1e12}, "efficiency": {"matrix": 1.5}, )" +
           good_rest + "}",
       "efficiency.matrix", "[0.001, 1]"},
      {"fractional launch",
       R"({"name": "x", "matrix_flops_per_s": {"fp32": 1e12, "bf16": 1e12}, )" +
           std::string(
               R"("vector_flops_per_s": {"fp32": 1e10, "bf16": 1e10}, "memory_bytes_per_s": 1e10, "launch_ns": 1.5, "capacity_gib": 1})"),
       "launch_ns", "integer"},
  };
  for (const auto& c : cases) {
    const std::string path = temp_file("bad.json", c.json);
    auto r = load_device_profile(path);
    ASSERT_FALSE(r.is_ok()) << c.what;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << c.what;
    const std::string& m = r.status().message();
    EXPECT_NE(m.find(path), std::string::npos) << c.what << ": " << m;
    if (!c.key.empty()) {
      EXPECT_NE(m.find("'" + c.key + "'"), std::string::npos) << c.what << ": " << m;
    }
    EXPECT_NE(m.find(c.allowed), std::string::npos) << c.what << ": " << m;
  }
  auto unknown = load_device_profile("gaudi9");
  EXPECT_EQ(unknown.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("gaudi1, gaudi2, gaudi3"), std::string::npos) << unknown.status().message();
  auto missing = load_device_profile("/nonexistent/dir/p.json");
  EXPECT_EQ(missing.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(missing.status().message().find("/nonexistent/dir/p.json"), std::string::npos);
}

TEST(TopologyProfiles, BadFilesAreInvalidArgumentNamingFileKeyAndAllowed) {
  const std::vector<BadCase> cases = {
      {"bad kind", R"({"name": "t", "kind": "torus"})", "kind", "allowed: hls, fully_connected, switch, ring"},
      {"port on a ring", R"({"name": "t", "kind": "ring", "peer": {"gbit_per_s": 1, "latency_ns": 1}, "port": {}})",
       "port", "no switch ports"},
      {"hls without servers", R"({"name": "t", "kind": "hls", "peer": {"gbit_per_s": 1, "latency_ns": 1},
        "port": {"gbit_per_s": 1, "latency_ns": 1}})",
       "max_devices_per_node", "an integer >= 1"},
      {"oversubscription < 1", R"({"name": "t", "kind": "hls", "max_devices_per_node": 8, "oversubscription": 0.5,
        "peer": {"gbit_per_s": 1, "latency_ns": 1}, "port": {"gbit_per_s": 1, "latency_ns": 1}})",
       "oversubscription", "in [1, 1000]"},
      {"zero bandwidth", R"({"name": "t", "kind": "switch", "port": {"gbit_per_s": 0, "latency_ns": 1}})",
       "port.gbit_per_s", "Gbit/s in [0.001, 1e9]"},
      {"leaf on a switch", R"({"name": "t", "kind": "switch", "nodes_per_leaf": 2,
        "port": {"gbit_per_s": 1, "latency_ns": 1}})",
       "nodes_per_leaf", "only 'hls'"},
      {"ports per rack", R"({"name": "t", "kind": "hls", "max_devices_per_node": 8, "ports_per": "rack",
        "peer": {"gbit_per_s": 1, "latency_ns": 1}, "port": {"gbit_per_s": 1, "latency_ns": 1}})",
       "ports_per", "allowed: device, node"},
      {"ports per node on a switch", R"({"name": "t", "kind": "switch", "ports_per": "node",
        "port": {"gbit_per_s": 1, "latency_ns": 1}})",
       "ports_per", "only 'hls'"},
  };
  for (const auto& c : cases) {
    const std::string path = temp_file("badtopo.json", c.json);
    auto r = load_topology(path);
    ASSERT_FALSE(r.is_ok()) << c.what;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << c.what;
    const std::string& m = r.status().message();
    EXPECT_NE(m.find(path), std::string::npos) << c.what << ": " << m;
    EXPECT_NE(m.find("'" + c.key + "'"), std::string::npos) << c.what << ": " << m;
    EXPECT_NE(m.find(c.allowed), std::string::npos) << c.what << ": " << m;
  }
}

TEST(TopologyProfiles, HlsPortCountsMatchTheReference) {
  // reference/gaudi.md: per peer 1 × 100 GbE (HLS-1), 3 × 100 GbE (HLS-2), 3 × 200 GbE
  // (HLS-3); scale-out 3 ports per card of the same speed.
  const std::vector<std::pair<std::string, double>> peer = {{"hls1", 100}, {"hls2", 300}, {"hls3", 600}};
  const std::vector<double> port = {300, 300, 600};
  for (std::size_t i = 0; i < peer.size(); ++i) {
    auto t = load_topology(peer[i].first);
    ASSERT_THAT(t, IsOk());
    EXPECT_EQ(t->kind, TopologyKind::kHls);
    EXPECT_EQ(t->max_devices_per_node, 8);
    EXPECT_EQ(t->peer.gbit_per_s, peer[i].second) << peer[i].first;
    EXPECT_EQ(t->port.gbit_per_s, port[i]) << peer[i].first;
    EXPECT_GE(t->oversubscription, 1.0);
  }
}

TEST(DeviceProfiles, OptimizerStepIsChargedAsOneStreamingVectorOp) {
  auto g2 = *load_device_profile("gaudi2");
  VirtualClock clock;
  SimDevice dev(0, g2, &clock);
  const auto make = [&](const char* name) {
    auto t = dev.zeros({1000}, DType::kF32, MemoryCategory::kOptimizerState, name);
    EXPECT_TRUE(t.is_ok());
    return *t;
  };
  const Tensor p = make("p"), g = make("g"), m = make("m"), v = make("v");
  const Nanos start = clock.now();  // after the zero fills
  runtime::device::OptimizerUpdate adamw;
  adamw.kind = runtime::device::OptimizerKind::kAdamW;
  ASSERT_TRUE(dev.optimizer_step(adamw, p, g, m, v, runtime::device::kComputeStream).is_ok());
  // Reads p, g, m, v and writes p, m, v: 28 bytes and 14 flops per element.
  EXPECT_EQ(clock.now() - start, g2.op_time(14.0 * 1000, 28.0 * 1000, ComputeUnit::kVector, DType::kF32));
  const Nanos before = clock.now();
  runtime::device::OptimizerUpdate sgd;  // plain SGD: read p and g, write p
  ASSERT_TRUE(dev.optimizer_step(sgd, p, g, Tensor(), Tensor(), runtime::device::kComputeStream).is_ok());
  EXPECT_EQ(clock.now() - before, g2.op_time(2.0 * 1000, 12.0 * 1000, ComputeUnit::kVector, DType::kF32));
}

// Two fp32 buffers and a bf16 one of 1000 elements on `dev` (the copy and cast tests').
std::tuple<Result<Tensor>, Result<Tensor>, Result<Tensor>> three_buffers(SimDevice& dev) {
  return {dev.empty({1000}, DType::kF32, MemoryCategory::kOther, "a"),
          dev.empty({1000}, DType::kF32, MemoryCategory::kOther, "b"),
          dev.empty({1000}, DType::kBF16, MemoryCategory::kOther, "h")};
}

// copy_many (FSDP2's copy-in/copy-out): one launch for all its pairs, their bytes at the
// memory rate (copy's factor), the values as copy and cast give them; with a conversion
// among the pairs, cast's compute term for the converted elements.
TEST(DeviceProfiles, SimDeviceChargesCopyManyAsOneOp) {
  DeviceProfile d;  // cpu-sim: vector 20 GFLOP/s, memory 20 GB/s, launch 2 µs
  VirtualClock clock;
  SimDevice dev(0, d, &clock);
  auto [a, b, h] = three_buffers(dev);
  ASSERT_TRUE(a.is_ok() && b.is_ok() && h.is_ok());
  for (int i = 0; i < 1000; ++i) a->data<float>()[i] = 1.0f + static_cast<float>(i) / 3.0f;
  std::vector<runtime::device::Device::CopyPair> pairs;
  for (int k = 0; k < 4; ++k) pairs.push_back({*a->narrow(250 * k, 250), *b->narrow(250 * (3 - k), 250)});
  const Nanos t0 = clock.now();
  ASSERT_TRUE(dev.copy_many(pairs, runtime::device::kComputeStream).is_ok());
  // 4 × 250 fp32 read and written: 8000 bytes at 20 GB/s = 400 ns, after one launch.
  EXPECT_EQ(clock.now() - t0, 2000 + 400);
  EXPECT_EQ(dev.ops_charged(), 1);
  for (int k = 0; k < 4; ++k) EXPECT_EQ(b->data<float>()[250 * (3 - k) + 7], a->data<float>()[250 * k + 7]) << k;
  // Casting pairs: 1000 conversions at 20 GFLOP/s = 50 ns against 6000 bytes = 300 ns.
  pairs = {{*a->narrow(0, 500), *h->narrow(500, 500)}, {*a->narrow(500, 500), *h->narrow(0, 500)}};
  const Nanos t1 = clock.now();
  ASSERT_TRUE(dev.copy_many(pairs, runtime::device::kComputeStream).is_ok());
  EXPECT_EQ(clock.now() - t1, 2000 + 300);
  EXPECT_EQ(dev.ops_charged(), 2);
  auto back = dev.empty({1000}, DType::kF32, MemoryCategory::kOther, "back");
  ASSERT_TRUE(back.is_ok());
  ASSERT_TRUE(dev.cast(*h, *back, runtime::device::kComputeStream).is_ok());
  EXPECT_EQ(back->data<float>()[600], round_to_bf16(a->data<float>()[100]));
}

// NOTE [Per-op memory factors]: the factor scales the op's memory term only, and only for
// its own key; a compute-bound op is not sped up by it.
TEST(DeviceProfiles, MemoryFactorScalesOnlyTheMemoryTermOfItsOp) {
  DeviceProfile d;  // cpu-sim: vector 20 GFLOP/s, memory 20 GB/s, launch 2 µs
  d.memory_factors = {{"optimizer_step", 0.5}};
  // 1e6 flops = 50 µs of compute, 4e6 bytes = 200 µs of memory → 100 µs with the factor.
  EXPECT_EQ(d.op_time("optimizer_step", 1e6, 4e6, ComputeUnit::kVector, DType::kF32), 2000 + 100'000);
  EXPECT_EQ(d.op_time("axpy", 1e6, 4e6, ComputeUnit::kVector, DType::kF32), 2000 + 200'000);
  // Compute-bound (4e6 flops = 200 µs): the memory factor changes nothing.
  EXPECT_EQ(d.op_time("optimizer_step", 4e6, 4e6, ComputeUnit::kVector, DType::kF32), 2000 + 200'000);
}

// A cast to the tensor's own dtype is the copy CpuDevice makes of it: charged as a copy,
// never at the conversion's compute factor (a calibrated cpu profile measures fp32 → bf16
// at ~2.5× its flops; bert-tiny's same-dtype casts were charged 165 µs for ~0.1 ms copies).
TEST(DeviceProfiles, SimDeviceChargesASameDtypeCastAsACopy) {
  DeviceProfile d;  // cpu-sim: vector 20 GFLOP/s, memory 20 GB/s, launch 2 µs
  d.compute_factors = {{"cast", 100.0}};
  VirtualClock clock;
  SimDevice dev(0, d, &clock);
  auto [a, b, h] = three_buffers(dev);
  ASSERT_TRUE(a.is_ok() && b.is_ok() && h.is_ok());
  ASSERT_TRUE(dev.fill(*a, 1.5f, runtime::device::kComputeStream).is_ok());
  const Nanos t0 = clock.now();
  ASSERT_TRUE(dev.cast(*a, *b, runtime::device::kComputeStream).is_ok());
  // A copy of 4000 bytes: 8000 bytes at 20 GB/s = 400 ns, after the launch.
  EXPECT_EQ(clock.now() - t0, 2000 + 400);
  EXPECT_EQ(b->data<float>()[999], 1.5f);
  // fp32 → bf16 converts: 1000 flops × 100 at 20 GFLOP/s = 5 µs, compute-bound.
  const Nanos t1 = clock.now();
  ASSERT_TRUE(dev.cast(*a, *h, runtime::device::kComputeStream).is_ok());
  EXPECT_EQ(clock.now() - t1, 2000 + 5000);
  EXPECT_EQ(dev.ops_charged(), 3);
}

// NOTE [Host link]: a copy or cast with one side in host memory (another device's
// storage) is charged launch + bytes / host_link_bytes_per_s — the narrower side's bytes
// for a cast — and a copy inside the device stays a memory copy; without a host link (cpu
// profiles) a host copy is an ordinary copy.
TEST(DeviceProfiles, SimDeviceChargesHostCopiesAtTheHostLink) {
  runtime::device::cpu::CpuDevice host({"cpu", 0});
  auto h32 = host.zeros({1000}, DType::kF32, MemoryCategory::kParameters, "host");
  ASSERT_TRUE(h32.is_ok());
  h32->data<float>()[7] = 2.5f;
  for (const double link : {0.0, 5e9}) {
    DeviceProfile d;  // cpu-sim: memory 20 GB/s, launch 2 µs
    d.host_link_bytes_per_s = link;
    VirtualClock clock;
    SimDevice dev(0, d, &clock);
    auto a = dev.empty({1000}, DType::kF32, MemoryCategory::kParameters, "a");
    auto b = dev.empty({1000}, DType::kF32, MemoryCategory::kParameters, "b");
    auto low = dev.empty({1000}, DType::kBF16, MemoryCategory::kParameters, "low");
    ASSERT_TRUE(a.is_ok() && b.is_ok() && low.is_ok());
    // Over the link: 4000 bytes at 5 GB/s = 800 ns; without one, 8000 bytes at 20 GB/s = 400.
    const Nanos crossing = link > 0 ? 2000 + 800 : 2000 + 400;
    Nanos t = clock.now();
    ASSERT_TRUE(dev.copy(*h32, *a, runtime::device::kComputeStream).is_ok());  // host → device
    EXPECT_EQ(a->data<float>()[7], 2.5f);
    EXPECT_EQ(clock.now() - t, crossing) << "link " << link;
    t = clock.now();
    ASSERT_TRUE(dev.copy(*a, *h32, runtime::device::kComputeStream).is_ok());  // device → host
    EXPECT_EQ(clock.now() - t, crossing) << "link " << link;
    t = clock.now();
    ASSERT_TRUE(dev.copy(*a, *b, runtime::device::kComputeStream).is_ok());  // inside the device
    EXPECT_EQ(clock.now() - t, 2000 + 400) << "link " << link;
    t = clock.now();
    ASSERT_TRUE(dev.cast(*h32, *low, runtime::device::kComputeStream).is_ok());  // fp32 host → bf16 device
    // Over the link the 2000 bf16 bytes cross: 400 ns. Without one it is the conversion
    // (1000 flops at 20 GFLOP/s = 50 ns, 6000 bytes at 20 GB/s = 300 ns: memory-bound).
    EXPECT_EQ(clock.now() - t, link > 0 ? 2000 + 400 : 2000 + 300) << "link " << link;
  }
}

// NOTE [Host time per op]: every op carries op_host_ns on top of its launch and roofline
// time, whatever its kind; the op counter counts each charged op once.
TEST(DeviceProfiles, SimDeviceChargesHostTimeWithEveryOp) {
  DeviceProfile d;  // cpu-sim: vector 20 GFLOP/s, memory 20 GB/s, launch 2 µs
  d.op_host_ns = 300;
  VirtualClock clock;
  SimDevice dev(0, d, &clock);
  auto a = dev.empty({1000}, DType::kF32, MemoryCategory::kOther, "a");
  auto b = dev.empty({1000}, DType::kF32, MemoryCategory::kOther, "b");
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  EXPECT_EQ(dev.ops_charged(), 0);
  // scale 2000 + 400 ns, axpy 2000 + 600 ns, each + 300.
  ASSERT_TRUE(dev.scale(*a, 2.0f, runtime::device::kComputeStream).is_ok());
  EXPECT_EQ(clock.now(), 2400 + 300);
  ASSERT_TRUE(dev.axpy(1.0f, *a, *b, runtime::device::kComputeStream).is_ok());
  EXPECT_EQ(clock.now(), 2700 + 2600 + 300);
  EXPECT_EQ(dev.ops_charged(), 2);
  EXPECT_EQ(d.op_time("scale", 1000, 8000, ComputeUnit::kVector, DType::kF32), 2700);
  DeviceProfile none = d;
  none.op_host_ns = 0;
  EXPECT_EQ(none.op_time("scale", 1000, 8000, ComputeUnit::kVector, DType::kF32), 2400);
}

// NOTE [Host time per allocation]: allocations charge nothing until the next op, which
// carries alloc_ns for each of them; the op after that carries none.
TEST(DeviceProfiles, SimDeviceChargesAllocTimeToTheNextOp) {
  DeviceProfile d;  // cpu-sim: vector 20 GFLOP/s, memory 20 GB/s, launch 2 µs
  d.alloc_ns = 700;
  VirtualClock clock;
  SimDevice dev(0, d, &clock);
  auto a = dev.empty({1000}, DType::kF32, MemoryCategory::kOther, "a");
  auto b = dev.empty({1000}, DType::kF32, MemoryCategory::kOther, "b");
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  EXPECT_EQ(clock.now(), 0);
  // scale: 1000 flops = 50 ns, 8000 bytes = 400 ns → 2000 + 400; plus 2 × 700.
  ASSERT_TRUE(dev.scale(*a, 2.0f, runtime::device::kComputeStream).is_ok());
  EXPECT_EQ(clock.now(), 2 * 700 + 2400);
  EXPECT_EQ(clock.now(), 2 * d.alloc_ns + d.op_time("scale", 1000, 8000, ComputeUnit::kVector, DType::kF32));
  // axpy, no allocation since: 2000 flops = 100 ns, 12000 bytes = 600 ns → 2600.
  ASSERT_TRUE(dev.axpy(1.0f, *a, *b, runtime::device::kComputeStream).is_ok());
  EXPECT_EQ(clock.now(), 3800 + 2600);
  // zeros: one allocation, then its fill (2000 bytes = 100 ns) carries it.
  auto z = dev.zeros({500}, DType::kF32, MemoryCategory::kOther, "z");
  ASSERT_TRUE(z.is_ok());
  EXPECT_EQ(clock.now(), 6400 + 700 + 2100);
  EXPECT_EQ(dev.busy_time(), 9200);
}

// NOTE [Matrix ops on a CPU]: SimDevice's GEMMs take the factor of min(m, n, k).
TEST(DeviceProfiles, SimDeviceGemmUsesTheSmallestDimensionsFactor) {
  DeviceProfile d;
  d.matrix_flops_per_s = d.matrix_bf16_flops_per_s = 65.536e9;  // 65536 flops = 1 µs
  d.memory_bytes_per_s = 1e12;                                  // memory well under compute
  DeviceProfile plain = d;
  d.small_dim_factors = {{8, 2.0}, {64, 1.0}};
  const auto gemm_time = [](const DeviceProfile& p, Shape sa, bool trans_a, Shape sb, Shape sc) {
    VirtualClock clock;
    SimDevice dev(0, p, &clock);
    auto a = dev.zeros(sa, DType::kF32, MemoryCategory::kOther, "a");
    auto b = dev.zeros(sb, DType::kF32, MemoryCategory::kOther, "b");
    auto c = dev.zeros(sc, DType::kF32, MemoryCategory::kOther, "c");
    EXPECT_TRUE(a.is_ok() && b.is_ok() && c.is_ok());
    const Nanos start = clock.now();
    const Status s = sa.size() == 3
                         ? dev.batched_gemm(*a, trans_a, *b, false, *c, 1, 0, runtime::device::kComputeStream)
                         : dev.gemm(*a, trans_a, *b, false, *c, 1, 0, runtime::device::kComputeStream);
    EXPECT_THAT(s, IsOk());
    return clock.now() - start;
  };
  // [8x64]·[64x64]: 2·8·64·64 = 65536 flops = 1 µs, min dim 8 → factor 2; 22528 bytes = 23 ns.
  EXPECT_EQ(gemm_time(plain, {8, 64}, false, {64, 64}, {8, 64}), 2000 + 1000);
  EXPECT_EQ(gemm_time(d, {8, 64}, false, {64, 64}, {8, 64}), 2000 + 2000);
  // The same with A transposed ([64x8]ᵀ), and with k = 8 ([64x8]·[8x64], also 65536 flops).
  EXPECT_EQ(gemm_time(d, {64, 8}, true, {64, 64}, {8, 64}), 2000 + 2000);
  EXPECT_EQ(gemm_time(d, {64, 8}, false, {8, 64}, {64, 64}), 2000 + 2000);
  // All dims 64: factor 1, 524288 flops = 8 µs.
  EXPECT_EQ(gemm_time(d, {64, 64}, false, {64, 64}, {64, 64}), 2000 + 8000);
  // min dim 32: 2 + (1 - 2)·(5 - 3)/(6 - 3) = 4/3; 262144 flops = 4 µs → 5333.33 ns.
  EXPECT_EQ(gemm_time(d, {32, 64}, false, {64, 64}, {32, 64}), 2000 + 5333);
  // batched [2x8x64]·[2x64x64]: 131072 flops = 2 µs, min dim 8 → 4 µs.
  EXPECT_EQ(gemm_time(plain, {2, 8, 64}, false, {2, 64, 64}, {2, 8, 64}), 2000 + 2000);
  EXPECT_EQ(gemm_time(d, {2, 8, 64}, false, {2, 64, 64}, {2, 8, 64}), 2000 + 4000);
}

// NOTE [Per-op compute factors]: activations are keyed by kind and direction; other ops by name.
// NOTE [Matrix ops on a CPU]: operand passes multiply A's and B's bytes, not C's.
TEST(DeviceProfiles, SimDeviceGemmStreamsItsOperandsMatrixOperandPassesTimes) {
  DeviceProfile d;
  d.launch_ns = 0;
  d.matrix_flops_per_s = d.matrix_bf16_flops_per_s = 1e15;  // compute ~free
  d.memory_bytes_per_s = 1e9;                               // 1 byte = 1 ns
  d.matrix_memory_overlap = false;
  const auto gemm_time = [](const DeviceProfile& p) {
    VirtualClock clock;
    SimDevice dev(0, p, &clock);
    auto a = dev.zeros({8, 64}, DType::kF32, MemoryCategory::kOther, "a");    // 2048 B
    auto b = dev.zeros({64, 256}, DType::kF32, MemoryCategory::kOther, "b");  // 65536 B
    auto c = dev.zeros({8, 256}, DType::kF32, MemoryCategory::kOther, "c");   // 8192 B
    EXPECT_TRUE(a.is_ok() && b.is_ok() && c.is_ok());
    const Nanos start = clock.now();
    EXPECT_TRUE(dev.gemm(*a, false, *b, false, *c, 1, 0, runtime::device::kComputeStream).is_ok());
    return clock.now() - start;
  };
  // 262144 flops at 1e15 = 0.26 ns; bytes (2048 + 65536)·passes + 2·8192.
  EXPECT_EQ(gemm_time(d), 67584 + 16384);
  d.matrix_operand_passes = 3.0;
  EXPECT_EQ(gemm_time(d), 3 * 67584 + 16384);
  // In JSON: written when not 1, read back; outside [1, 3] refused naming the key.
  auto back = parse_device_profile(device_profile_to_json(d), "d.json");
  ASSERT_THAT(back, IsOk());
  EXPECT_EQ(back->matrix_operand_passes, 3.0);
  EXPECT_EQ(device_profile_to_json(DeviceProfile{}).find("matrix_operand_passes"), std::string::npos);
  std::string json = device_profile_to_json(d);
  for (const char* bad : {"0.5", "3.5", "\"two\""}) {
    std::string text = json;
    const auto at = text.find("\"matrix_operand_passes\": 3.0");
    ASSERT_NE(at, std::string::npos) << text;
    text.replace(at, std::string("\"matrix_operand_passes\": 3.0").size(),
                 std::string("\"matrix_operand_passes\": ") + bad);
    auto r = parse_device_profile(text, "d.json");
    ASSERT_FALSE(r.is_ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("matrix_operand_passes"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("[1, 3]"), std::string::npos) << r.status().message();
  }
  for (const std::string& name : list_device_profiles()) {
    EXPECT_EQ(load_device_profile(name)->matrix_operand_passes, 1.0) << name;
  }
}

TEST(DeviceProfiles, SimDeviceUsesPerOpComputeFactorKeys) {
  DeviceProfile d;  // cpu-sim: vector 20 GFLOP/s (50 ps/flop), memory 20 GB/s (50 ps/byte), launch 2 µs
  d.compute_factors = {{"activation_relu", 4.0}, {"activation_backward_gelu", 2.0}, {"optimizer_step", 3.0}};
  VirtualClock clock;
  SimDevice dev(0, d, &clock);
  const auto make = [&](const char* name) {
    auto t = dev.zeros({1000}, DType::kF32, MemoryCategory::kOther, name);
    EXPECT_TRUE(t.is_ok());
    return *t;
  };
  const Tensor x = make("x"), y = make("y"), dy = make("dy"), dx = make("dx"), m = make("m"), v = make("v");
  const auto timed = [&](const std::function<Status()>& op) {
    const Nanos start = clock.now();
    EXPECT_TRUE(op().is_ok());
    return clock.now() - start;
  };
  using runtime::device::Activation;
  const auto fwd = [&](Activation a) {
    return timed([&] { return dev.activation(a, x, y, runtime::device::kComputeStream); });
  };
  const auto bwd = [&](Activation a) {
    return timed([&] { return dev.activation_backward(a, x, dy, dx, runtime::device::kComputeStream); });
  };
  // Forward: 8000 flops = 400 ns, 8000 bytes = 400 ns.
  EXPECT_EQ(fwd(Activation::kRelu), 2000 + 4 * 400);
  EXPECT_EQ(fwd(Activation::kGelu), 2000 + 400);
  EXPECT_EQ(fwd(Activation::kTanh), 2000 + 400);
  // Backward: 12000 flops = 600 ns, 12000 bytes = 600 ns.
  EXPECT_EQ(bwd(Activation::kRelu), 2000 + 600);
  EXPECT_EQ(bwd(Activation::kGelu), 2000 + 2 * 600);
  EXPECT_EQ(bwd(Activation::kGeluTanh), 2000 + 600);
  // AdamW: 14000 flops = 700 ns × 3 = 2100 ns > 28000 bytes = 1400 ns.
  runtime::device::OptimizerUpdate adamw;
  adamw.kind = runtime::device::OptimizerKind::kAdamW;
  EXPECT_EQ(timed([&] { return dev.optimizer_step(adamw, x, dy, m, v, runtime::device::kComputeStream); }),
            2000 + 2100);
  // SGD: 2000 flops = 100 ns × 3 = 300 ns < 12000 bytes = 600 ns: still memory bound.
  runtime::device::OptimizerUpdate sgd;
  EXPECT_EQ(timed([&] { return dev.optimizer_step(sgd, x, dy, Tensor(), Tensor(), runtime::device::kComputeStream); }),
            2000 + 600);
}

DeviceProfile profile_with_new_fields() {
  DeviceProfile p;
  p.name = "calibrated";
  p.description = "measured";
  p.alloc_ns = 1234;
  p.op_host_ns = 321;
  p.memory_factors = {{"optimizer_step", 0.625}};
  p.compute_factors = {{"activation_gelu", 2.5}, {"optimizer_step", 0.75}, {"batched_gemm", 1.0 / 3.0}};
  p.matrix_memory_overlap = false;
  p.small_dim_factors = {{8, 3.0}, {64, 1.25}, {1024, 0.9}};
  p.host_link_bytes_per_s = 12.5e9;
  return p;
}

// NOTE [Simulated device_id] (cli/scenario_to_run_args.h): the Gaudi profiles compute on "hpu", the
// CPU ones (and files without the key, e.g. calibrated hosts) on "cpu".
TEST(DeviceProfiles, TorchDeviceNamesWhatDeviceIdMustSay) {
  for (const char* g : {"gaudi1", "gaudi2", "gaudi3"}) EXPECT_EQ(load_device_profile(g)->torch_device, "hpu") << g;
  EXPECT_EQ(load_device_profile("cpu")->torch_device, "cpu");
  EXPECT_EQ(DeviceProfile{}.torch_device, "cpu");
  std::string text = device_profile_to_json(*load_device_profile("gaudi2"));
  text.replace(text.find("\"hpu\""), 5, "\"gpu\"");
  auto bad = parse_device_profile(text, "x.json");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("torch_device"), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("allowed: hpu, cpu"), std::string::npos) << bad.status().message();
}

TEST(DeviceProfiles, NewFieldsRoundTripThroughJson) {
  const DeviceProfile p = profile_with_new_fields();
  const std::string text = device_profile_to_json(p);
  auto back = parse_device_profile(text, "calibrated.json");
  ASSERT_THAT(back, IsOk()) << text;
  EXPECT_EQ(back->name, "calibrated");
  EXPECT_EQ(back->alloc_ns, 1234);
  EXPECT_EQ(back->op_host_ns, 321);
  EXPECT_EQ(back->host_link_bytes_per_s, 12.5e9);
  EXPECT_EQ(back->memory_factors, p.memory_factors);
  EXPECT_EQ(back->compute_factors, p.compute_factors);  // exactly, 1/3 included
  EXPECT_FALSE(back->matrix_memory_overlap);
  EXPECT_EQ(back->small_dim_factors, p.small_dim_factors);
  EXPECT_EQ(back->matrix_flops_per_s, p.matrix_flops_per_s);
  EXPECT_EQ(back->capacity_bytes, p.capacity_bytes);
  EXPECT_EQ(device_profile_to_json(*back), text);
  // And through a file.
  auto loaded = load_device_profile(temp_file("calibrated.json", text));
  ASSERT_THAT(loaded, IsOk());
  EXPECT_EQ(loaded->small_dim_factors, p.small_dim_factors);
  EXPECT_EQ(loaded->alloc_ns, 1234);
  // The defaults write none of the new keys, so existing profile files read the same.
  const std::string plain = device_profile_to_json(DeviceProfile{});
  for (const char* key :
       {"alloc_ns", "op_host_ns", "compute_factors", "memory_factors", "matrix_memory_overlap", "small_dim_factors"}) {
    EXPECT_EQ(plain.find(key), std::string::npos) << key << " in\n" << plain;
    EXPECT_NE(text.find(key), std::string::npos) << key << " not in\n" << text;
  }
  auto plain_back = parse_device_profile(plain, "plain.json");
  ASSERT_THAT(plain_back, IsOk());
  EXPECT_EQ(plain_back->alloc_ns, 0);
  EXPECT_EQ(plain_back->op_host_ns, 0);
  EXPECT_TRUE(plain_back->memory_factors.empty());
  EXPECT_TRUE(plain_back->compute_factors.empty());
  EXPECT_TRUE(plain_back->matrix_memory_overlap);
  EXPECT_TRUE(plain_back->small_dim_factors.empty());
}

const std::string kGoodDeviceKeys =
    R"("name": "x", "matrix_flops_per_s": {"fp32": 1e10, "bf16": 1e10},)"
    R"( "vector_flops_per_s": {"fp32": 1e10, "bf16": 1e10}, "memory_bytes_per_s": 1e10, "launch_ns": 100, "capacity_gib": 1)";

TEST(DeviceProfiles, NewKeysAcceptTheirRanges) {
  const auto parse = [](const std::string& extra) {
    return parse_device_profile("{" + kGoodDeviceKeys + extra + "}", "ok.json");
  };
  auto base = parse("");
  ASSERT_THAT(base, IsOk());
  auto r = parse(
      R"(, "alloc_ns": 0, "op_host_ns": 0, "compute_factors": {}, "matrix_memory_overlap": true, "small_dim_factors": {})");
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->alloc_ns, 0);
  EXPECT_TRUE(r->compute_factors.empty());
  EXPECT_TRUE(r->small_dim_factors.empty());
  // Bounds are inclusive at 1000; dimension keys sort by value, not as strings ("64" < "8").
  r = parse(
      R"(, "alloc_ns": 1000000000, "op_host_ns": 1000000000, "compute_factors": {"gemm": 1000, "activation_backward_tanh": 0.001},)"
      R"( "small_dim_factors": {"64": 1, "8": 1000, "1": 2.5}, "matrix_memory_overlap": false)");
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->alloc_ns, 1'000'000'000);
  EXPECT_EQ(r->op_host_ns, 1'000'000'000);
  EXPECT_EQ(r->compute_factor("gemm"), 1000.0);
  EXPECT_EQ(r->compute_factor("activation_backward_tanh"), 0.001);
  EXPECT_EQ(r->compute_factor("axpy"), 1.0);
  EXPECT_EQ(r->small_dim_factors, (std::vector<std::pair<std::int64_t, double>>{{1, 2.5}, {8, 1000.0}, {64, 1.0}}));
  EXPECT_FALSE(r->matrix_memory_overlap);
  // Every key compute_factor_keys() lists is accepted.
  std::string all;
  for (const auto& k : compute_factor_keys()) all += (all.empty() ? "" : ", ") + ("\"" + k + "\": 2");
  r = parse(R"(, "compute_factors": {)" + all + "}");
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->compute_factors.size(), compute_factor_keys().size());
  // NOTE [Cache-resident bytes]: absent, no cache; present, read and written back.
  EXPECT_EQ(base->cache_bytes, 0);
  EXPECT_EQ(device_profile_to_json(*base).find("cache"), std::string::npos);
  r = parse(R"(, "cache": {"kib": 2048, "bytes_per_s": 9.5e10}, "memory_factors": {"fill": 4, "optimizer_step": 0.5})");
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->cache_bytes, 2048 * 1024);
  EXPECT_EQ(r->cache_bytes_per_s, 9.5e10);
  EXPECT_EQ(r->memory_factor("fill"), 4.0);
  auto back = parse_device_profile(device_profile_to_json(*r), "back.json");
  ASSERT_THAT(back, IsOk());
  EXPECT_EQ(back->cache_bytes, r->cache_bytes);
  EXPECT_EQ(back->cache_bytes_per_s, r->cache_bytes_per_s);
  EXPECT_EQ(back->memory_factors, r->memory_factors);
}

TEST(DeviceProfiles, BadNewKeysAreInvalidArgumentNamingTheKey) {
  const std::string factor_range = "[0.001, 1000]";
  const std::vector<BadCase> cases = {
      {"unknown compute factor", R"("compute_factors": {"activation_swish": 2})", "compute_factors.activation_swish",
       "unknown key; allowed: activation_backward_gelu, activation_backward_gelu_tanh"},
      {"factor 0", R"("compute_factors": {"gemm": 0})", "compute_factors.gemm", factor_range},
      {"negative factor", R"("compute_factors": {"optimizer_step": -1})", "compute_factors.optimizer_step",
       factor_range},
      {"factor > 1000", R"("compute_factors": {"gemm": 1000.5})", "compute_factors.gemm", factor_range},
      {"factor not a number", R"("compute_factors": {"gemm": "2"})", "compute_factors.gemm", "must be a number"},
      {"compute_factors not an object", R"("compute_factors": [1])", "compute_factors", "must be an object"},
      {"fractional alloc_ns", R"("alloc_ns": 1.5)", "alloc_ns", "integer"},
      {"negative alloc_ns", R"("alloc_ns": -1)", "alloc_ns", "out of range; allowed: an integer number of ns"},
      {"alloc_ns too large", R"("alloc_ns": 2e9)", "alloc_ns", "[0, 1e9]"},
      {"alloc_ns a string", R"("alloc_ns": "5")", "alloc_ns", "must be a number"},
      {"negative host link", R"("host_link_bytes_per_s": -1)", "host_link_bytes_per_s",
       "out of range; allowed: bytes/s >= 0 one way between host and device memory"},
      {"host link a string", R"("host_link_bytes_per_s": "pcie")", "host_link_bytes_per_s", "must be a number"},
      {"memory factor 0", R"("memory_factors": {"optimizer_step": 0})", "memory_factors.optimizer_step", "[0.001, 4]"},
      {"memory factor > 4", R"("memory_factors": {"fill": 4.5})", "memory_factors.fill",
       "a factor on the op's memory time in [0.001, 4]"},
      {"cache not an object", R"("cache": 2048)", "cache", "must be an object"},
      {"unknown cache key", R"("cache": {"kib": 2048, "bytes_per_s": 1e11, "ways": 16})", "cache.ways", "unknown key"},
      {"cache without rate", R"("cache": {"kib": 2048})", "cache.bytes_per_s", "bytes/s in [1e6, 1e20]"},
      {"cache size 0", R"("cache": {"kib": 0, "bytes_per_s": 1e11})", "cache.kib",
       "KiB of per-core cache in [1, 1073741824]"},
      {"cache rate a string", R"("cache": {"kib": 2048, "bytes_per_s": "fast"})", "cache.bytes_per_s",
       "must be a number"},
      {"unknown memory factor", R"("memory_factors": {"memcpy": 0.5})", "memory_factors.memcpy", "unknown key"},
      {"memory factor a string", R"("memory_factors": {"axpy": "0.5"})", "memory_factors.axpy", "must be a number"},
      {"memory_factors not an object", R"("memory_factors": 0.5)", "memory_factors", "must be an object"},
      {"fractional op_host_ns", R"("op_host_ns": 0.5)", "op_host_ns", "integer"},
      {"negative op_host_ns", R"("op_host_ns": -3)", "op_host_ns", "out of range; allowed: an integer number of ns"},
      {"op_host_ns too large", R"("op_host_ns": 1e10)", "op_host_ns", "[0, 1e9]"},
      {"op_host_ns a string", R"("op_host_ns": "200")", "op_host_ns", "must be a number"},
      {"dimension 'abc'", R"("small_dim_factors": {"abc": 1})", "small_dim_factors.abc", "not a dimension"},
      {"dimension 0", R"("small_dim_factors": {"0": 1})", "small_dim_factors.0", "not a dimension"},
      {"negative dimension", R"("small_dim_factors": {"-8": 1})", "small_dim_factors.-8", "not a dimension"},
      {"trailing junk", R"("small_dim_factors": {"16x": 1})", "small_dim_factors.16x", "integers in [1, 2^30]"},
      {"dimension spelled twice", R"("small_dim_factors": {"16": 1, "016": 2})", "small_dim_factors.16", "given twice"},
      {"dimension factor 0", R"("small_dim_factors": {"16": 0})", "small_dim_factors.16", factor_range},
      {"dimension factor > 1000", R"("small_dim_factors": {"16": 1001})", "small_dim_factors.16", factor_range},
      {"small_dim_factors not an object", R"("small_dim_factors": 16)", "small_dim_factors", "must be an object"},
      {"overlap a string", R"("matrix_memory_overlap": "false")", "matrix_memory_overlap", "true or false"},
      {"overlap a number", R"("matrix_memory_overlap": 0)", "matrix_memory_overlap", "true or false"},
      {"no engines", R"("matrix_engine": {"tiles": ["256x256"]})", "matrix_engine.engines", "[1, 1024]"},
      {"0 engines", R"("matrix_engine": {"engines": 0, "tiles": ["256x256"]})", "matrix_engine.engines", "[1, 1024]"},
      {"fractional engines", R"("matrix_engine": {"engines": 1.5, "tiles": ["256x256"]})", "matrix_engine.engines",
       "integer"},
      {"no tiles", R"("matrix_engine": {"engines": 2})", "matrix_engine.tiles", "tile shapes \"HxW\""},
      {"empty tiles", R"("matrix_engine": {"engines": 2, "tiles": []})", "matrix_engine.tiles", "1 to 16 tile shapes"},
      {"tiles a string", R"("matrix_engine": {"engines": 2, "tiles": "256x256"})", "matrix_engine.tiles",
       "must be an array of strings"},
      {"tile a number", R"("matrix_engine": {"engines": 2, "tiles": [256]})", "matrix_engine.tiles", "not a string"},
      {"tile 'by'", R"("matrix_engine": {"engines": 2, "tiles": ["256by256"]})", "matrix_engine.tiles",
       "'256by256' is not a tile shape"},
      {"tile 0 wide", R"("matrix_engine": {"engines": 2, "tiles": ["256x0"]})", "matrix_engine.tiles", "[1, 65536]"},
      {"tile too high", R"("matrix_engine": {"engines": 2, "tiles": ["131072x8"]})", "matrix_engine.tiles",
       "not a tile shape"},
      {"unknown engine key", R"("matrix_engine": {"engines": 2, "tiles": ["8x8"], "clock": 1})", "matrix_engine.clock",
       "unknown key; allowed: engines, tiles"},
      {"matrix_engine not an object", R"("matrix_engine": 2)", "matrix_engine", "must be an object"},
  };
  for (const auto& c : cases) {
    auto r = parse_device_profile("{" + kGoodDeviceKeys + ", " + c.json + "}", "custom.json");
    ASSERT_FALSE(r.is_ok()) << c.what;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << c.what;
    const std::string& m = r.status().message();
    EXPECT_NE(m.find("custom.json"), std::string::npos) << c.what << ": " << m;
    EXPECT_NE(m.find("'" + c.key + "'"), std::string::npos) << c.what << ": " << m;
    EXPECT_NE(m.find(c.allowed), std::string::npos) << c.what << ": " << m;
  }
  // The unknown-key message lists every allowed key.
  auto r = parse_device_profile("{" + kGoodDeviceKeys + R"(, "compute_factors": {"relu": 2}})", "custom.json");
  ASSERT_FALSE(r.is_ok());
  for (const auto& k : compute_factor_keys()) {
    EXPECT_NE(r.status().message().find(k), std::string::npos) << k << ": " << r.status().message();
  }
}

// The built-in profiles carry none of the new fields, so their times (and the goldens
// built on them) are those of the plain roofline.
TEST(DeviceProfiles, BuiltInsHaveNoFactorsAllocTimeOrSmallDimTable) {
  for (const auto& name : list_device_profiles()) {
    auto p = load_device_profile(name);
    ASSERT_THAT(p, IsOk());
    EXPECT_TRUE(p->compute_factors.empty()) << name;
    EXPECT_EQ(p->alloc_ns, 0) << name;
    EXPECT_EQ(p->op_host_ns, 0) << name;
    EXPECT_TRUE(p->memory_factors.empty()) << name;
    EXPECT_TRUE(p->matrix_memory_overlap) << name;
    EXPECT_TRUE(p->small_dim_factors.empty()) << name;
    EXPECT_EQ(p->small_dim_factor(8), 1.0) << name;
    for (const auto& key : compute_factor_keys()) EXPECT_EQ(p->compute_factor(key), 1.0) << name << " " << key;
    EXPECT_EQ(p->op_time("gemm", 2e9, 1e8, ComputeUnit::kMatrix, DType::kBF16, 8),
              p->op_time(2e9, 1e8, ComputeUnit::kMatrix, DType::kBF16))
        << name;
  }
  EXPECT_EQ(list_device_profiles().size(), 4u);  // cpu-sim, gaudi1, gaudi2, gaudi3
}

// NOTE [Profile bounds]: tiny positive rates and factors, numbers past the double range and
// a capacity that rounds to 0 bytes are refused when loaded, naming the key, the value and
// the allowed range (never a CHECK failure, exit 70, or an uncaught JSON exception).
// A profile of odd.json with a value out of its bounds: refused (exit 2) naming the key,
// the value and what is allowed.
struct OddProfileCase {
  std::string json, key, value, allowed;
};
void expect_refused(const Status& s, const OddProfileCase& c) {
  ASSERT_FALSE(s.is_ok()) << c.json;
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("odd.json: key '" + c.key + "'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(c.value), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(c.allowed), std::string::npos) << s.message();
}

TEST(DeviceProfiles, RatesOutsideTheirBoundsAreRefusedWithKeyValueAndRange) {
  const std::string rest = R"("memory_bytes_per_s": 2e10, "launch_ns": 2000, "capacity_gib": 16)";
  const std::string rates =
      R"("matrix_flops_per_s": {"fp32": 1e11, "bf16": 1e11}, "vector_flops_per_s": {"fp32": 2e10, "bf16": 2e10})";
  using Case = OddProfileCase;
  const std::vector<Case> cases = {
      {R"({"name": "x", "matrix_flops_per_s": {"fp32": 1e-3, "bf16": 1e11}, "vector_flops_per_s": {"fp32": 2e10, "bf16": 2e10}, )" +
           rest + "}",
       "matrix_flops_per_s.fp32", "value 0.001 out of range", "FLOP/s in [1e6, 1e20]"},
      {R"({"name": "x", )" + rates + R"(, "memory_bytes_per_s": 1e-6, "launch_ns": 2000, "capacity_gib": 16})",
       "memory_bytes_per_s", "value 1e-06 out of range", "bytes/s in [1e6, 1e20]"},
      {R"({"name": "x", )" + rates + ", " + rest + R"(, "efficiency": {"matrix": 1e-300}})", "efficiency.matrix",
       "value 1e-300 out of range", "[0.001, 1]"},
      {R"({"name": "x", )" + rates + ", " + rest + R"(, "host_link_bytes_per_s": 1e-300})", "host_link_bytes_per_s",
       "value 1e-300 out of range", "or in [1e6, 1e20]"},
      {R"({"name": "x", )" + rates + R"(, "memory_bytes_per_s": 2e10, "launch_ns": 2000, "capacity_gib": 1e-12})",
       "capacity_gib", "value 1e-12 out of range", "[0.0009765625 (1 MiB), 1048576]"},
      {R"({"name": "x", "matrix_flops_per_s": {"fp32": 1e11, "bf16": 1e11}, "vector_flops_per_s": {"fp32": 1e400, "bf16": 2e10}, )" +
           rest + "}",
       "vector_flops_per_s.fp32", "number overflow parsing '1e400'", "allowed: a finite number"},
      {R"({"name": "x", )" + rates + ", " + rest + R"(, "compute_factors": {"gemm": 1e-9}})", "compute_factors.gemm",
       "value 1e-09 out of range", "[0.001, 1000]"},
  };
  for (const Case& c : cases) expect_refused(parse_device_profile(c.json, "odd.json").status(), c);
  // The lower bounds themselves are accepted.
  auto lowest = parse_device_profile(
      R"({"name": "x", "matrix_flops_per_s": {"fp32": 1e6, "bf16": 1e6}, "vector_flops_per_s": {"fp32": 1e6, "bf16": 1e6},
          "memory_bytes_per_s": 1e6, "host_link_bytes_per_s": 1e6, "launch_ns": 0, "capacity_gib": 0.0009765625,
          "efficiency": {"matrix": 0.001, "vector": 0.001, "memory": 0.001}})",
      "lowest.json");
  ASSERT_THAT(lowest, IsOk());
  EXPECT_EQ(lowest->capacity_bytes, 1 << 20);
}

TEST(TopologyProfiles, LinkRatesOutsideTheirBoundsAreRefusedWithKeyValueAndRange) {
  using Case = OddProfileCase;
  const std::vector<Case> cases = {
      {R"({"name": "t", "kind": "switch", "port": {"gbit_per_s": 1e-20, "latency_ns": 2500}})", "port.gbit_per_s",
       "value 1e-20 out of range", "Gbit/s in [0.001, 1e9]"},
      {R"({"name": "t", "kind": "ring", "peer": {"gbit_per_s": 100, "latency_ns": 1}, "efficiency": 1e-300})",
       "efficiency", "value 1e-300 out of range", "[0.001, 1]"},
      {R"({"name": "t", "kind": "ring", "peer": {"gbit_per_s": 100, "latency_ns": 1}, "reduce_gbyte_per_s": 1e-9})",
       "reduce_gbyte_per_s", "value 1e-09 out of range", "[0.001, 1e9]"},
      {R"({"name": "t", "kind": "ring", "peer": {"gbit_per_s": 1e400, "latency_ns": 1}})", "peer.gbit_per_s",
       "number overflow parsing '1e400'", "allowed: a finite number"},
  };
  for (const Case& c : cases) expect_refused(parse_topology(c.json, "odd.json").status(), c);
}

}  // namespace
}  // namespace shardlab::sim
