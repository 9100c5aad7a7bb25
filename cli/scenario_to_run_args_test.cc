// From a scenario to the run's arguments: the keys whose meaning follows PyTorch FSDP
// (use_orig_params, mixed precision, device_id).
#include "cli/scenario_to_run_args.h"

#include <gtest/gtest.h>

#include <string>

#include "testing/status_matchers.h"

using shardlab::testlib::IsOk;

namespace shardlab::cli {
namespace {

Result<RunArgs> args_of(const std::string& yaml) {
  auto sc = parse_scenario("s.yaml", "name: t\nmodel: {preset: bert-tiny, head: mlm}\n" + yaml);
  if (!sc.is_ok()) return sc.status();
  RunArgs a;
  SHARDLAB_RETURN_IF_ERROR(scenario_to_run_args(*sc, a));
  return a;
}

// PyTorch FSDP1 aligns original parameters to 16 bytes inside a flat parameter only with
// use_orig_params=True (FlatParamHandle: align_addresses = use_orig_params).
TEST(ScenarioRun, UseOrigParamsDecidesTheAlignmentPadding) {
  auto on = args_of("fsdp: {use_orig_params: true}\n");
  ASSERT_THAT(on, IsOk());
  EXPECT_EQ(on->train.fsdp.align_bytes, 16);
  auto off = args_of("fsdp: {use_orig_params: false}\n");
  ASSERT_THAT(off, IsOk());
  EXPECT_EQ(off->train.fsdp.align_bytes, 0);
  auto unset = args_of("");
  ASSERT_THAT(unset, IsOk());
  EXPECT_EQ(unset->train.fsdp.align_bytes, 16);  // accelerate's default, use_orig_params: true
}

// fp16 needs a gradient scaler shardlab does not model: refused at its line (so `validate`
// refuses it too), never accepted and then failed on every rank.
TEST(ScenarioRun, Fp16IsRefusedAtItsLine) {
  for (const char* key : {"param_dtype", "reduce_dtype", "buffer_dtype"}) {
    auto a = args_of(std::string("fsdp:\n  mixed_precision: {") + key + ": fp16}\n");
    ASSERT_FALSE(a.is_ok()) << key;
    EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument);
    const std::string m = a.status().message();
    EXPECT_NE(m.find("s.yaml:4:"), std::string::npos) << m;
    EXPECT_NE(m.find(std::string("fsdp.mixed_precision.") + key + ": fp16 needs a gradient scaler"), std::string::npos)
        << m;
    EXPECT_NE(m.find("allowed: fp32, bf16"), std::string::npos) << m;
  }
}

// NOTE [Simulated device_id] (cli/scenario_to_run_args.h).
TEST(ScenarioRun, DeviceIdResolvesOrFailsInPyTorchsWords) {
  for (const char* ok : {"hpu", "hpu:0"}) EXPECT_TRUE(check_device_id(ok, "hpu", 8, 8).is_ok()) << ok;
  EXPECT_TRUE(check_device_id("", "hpu", 8, 8).is_ok());
  EXPECT_TRUE(check_device_id("cpu", "cpu", 4, 4).is_ok());
  EXPECT_TRUE(check_device_id("local_rank", "hpu", 4, 1).is_ok());  // one card per node: local rank 0

  const Status local = check_device_id("local_rank", "hpu", 8, 8);
  EXPECT_EQ(local.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(local.message().find("Inconsistent compute device and `device_id` on rank 1: hpu:0 vs hpu:1"),
            std::string::npos)
      << local.message();
  EXPECT_NE(local.message().find("7 of 8 ranks fail (ranks 1-7)"), std::string::npos) << local.message();
  // Two nodes of 4: local ranks 1-3 on each, so the failing ranks are not one range.
  const Status two_nodes = check_device_id("local_rank", "hpu", 8, 4);
  EXPECT_NE(two_nodes.message().find("6 of 8 ranks fail (ranks 1 … 7)"), std::string::npos) << two_nodes.message();

  const Status other = check_device_id("hpu:3", "hpu", 2, 2);
  EXPECT_NE(other.message().find("on rank 0: hpu:0 vs hpu:3"), std::string::npos) << other.message();
  const Status type = check_device_id("cpu", "hpu", 2, 2);
  EXPECT_NE(type.message().find("on rank 0: hpu:0 vs cpu"), std::string::npos) << type.message();

  EXPECT_EQ(device_id_of_rank("local_rank", "hpu", 5, 4), "hpu:1");
  EXPECT_EQ(device_id_of_rank("hpu", "hpu", 5, 4), "hpu");
}

TEST(ScenarioRun, DeviceIdIsCheckedWhereTheScenarioSaysIt) {
  auto bad = args_of("fsdp:\n  device_id: local_rank\nworld: {device: gaudi2, devices_per_node: 4}\n");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("s.yaml:4:14: fsdp.device_id: Inconsistent compute device"), std::string::npos)
      << bad.status().message();
  auto junk = args_of("fsdp: {device_id: 'gpu:x'}\n");
  ASSERT_FALSE(junk.is_ok());
  EXPECT_NE(junk.status().message().find("allowed: hpu, hpu:N, cpu, or local_rank"), std::string::npos)
      << junk.status().message();
  auto good = args_of("fsdp: {device_id: hpu}\nworld: {device: gaudi2, devices_per_node: 4}\n");
  ASSERT_THAT(good, IsOk());
  EXPECT_EQ(good->device_id, "hpu");
}

}  // namespace
}  // namespace shardlab::cli
