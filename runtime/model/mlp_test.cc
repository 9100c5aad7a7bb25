// The MLP's backward against central finite differences of its loss: the unsharded
// oracle and FSDP share this backward, so only an independent check can catch a wrong
// gradient formula.
#include "runtime/model/mlp.h"

#include <gtest/gtest.h>

#include <cmath>

#include "runtime/device/cpu/device.h"

namespace shardlab::runtime::model {
namespace {

void check_gradients(device::Activation act, std::uint64_t frozen_mask) {
  MlpConfig c;
  c.input_dim = 5;
  c.hidden_dim = 6;
  c.num_classes = 3;
  c.num_hidden_layers = 2;
  c.activation = act;
  c.frozen_mask = frozen_mask;
  const Mlp mlp(c);
  device::cpu::CpuDevice dev;
  const std::int64_t total = total_numel(mlp.params());
  Tensor p = *dev.zeros({total}, DType::kF32, MemoryCategory::kParameters, "p");
  Tensor g = *dev.zeros({total}, DType::kF32, MemoryCategory::kGradients, "g");
  FlatParamAccess access(mlp.params(), p, g);
  ASSERT_TRUE(mlp.init_params(dev, access.params(), 7).is_ok());
  const std::int64_t batch = 4;
  Tensor x = *dev.empty({batch, c.input_dim}, DType::kF32, MemoryCategory::kActivations, "x");
  Tensor y = *dev.empty({batch}, DType::kI64, MemoryCategory::kActivations, "y");
  ASSERT_TRUE(synthetic_rows(dev, c, 3, 0, 0, x, y).is_ok());
  const float scale = 1.0f / static_cast<float>(batch);
  auto loss = [&]() {
    EXPECT_TRUE(dev.fill(g, 0.0f, device::kComputeStream).is_ok());
    auto l = mlp.forward_backward(dev, access, x, y, scale);
    EXPECT_TRUE(l.is_ok());
    return *l * scale;
  };
  loss();
  const std::vector<float> analytic(g.data<float>(), g.data<float>() + total);
  float* pv = p.data<float>();
  std::int64_t index = 0;
  for (const auto& spec : mlp.params()) {
    const std::int64_t n = *checked_numel(spec.shape);
    for (std::int64_t i = index; i < index + n; ++i) {
      if (!spec.requires_grad) {
        EXPECT_EQ(analytic[static_cast<std::size_t>(i)], 0.0f) << spec.name << " is frozen";
        continue;
      }
      const float saved = pv[i];
      const float h = 1e-2f;
      pv[i] = saved + h;
      const double up = loss();
      pv[i] = saved - h;
      const double down = loss();
      pv[i] = saved;
      const double numeric = (up - down) / (2.0 * h);
      EXPECT_NEAR(analytic[static_cast<std::size_t>(i)], numeric, 2e-3 + 2e-2 * std::fabs(numeric))
          << spec.name << "[" << (i - index) << "]";
    }
    index += n;
  }
}

TEST(MlpGradients, MatchFiniteDifferencesWithExactGelu) { check_gradients(device::Activation::kGelu, 0); }
TEST(MlpGradients, MatchFiniteDifferencesWithTanhGelu) { check_gradients(device::Activation::kGeluTanh, 0); }
TEST(MlpGradients, FrozenParametersGetNoGradient) { check_gradients(device::Activation::kGelu, 0b101001); }

TEST(MlpParams, NamesAndShapesFollowPyTorchLinear) {
  MlpConfig c;
  c.input_dim = 3;
  c.hidden_dim = 4;
  c.num_classes = 2;
  c.num_hidden_layers = 1;
  const Mlp mlp(c);
  ASSERT_EQ(mlp.params().size(), 4u);
  EXPECT_EQ(mlp.params()[0].name, "layers.0.weight");
  EXPECT_EQ(mlp.params()[0].shape, (Shape{4, 3}));
  EXPECT_EQ(mlp.params()[2].name, "head.weight");
  EXPECT_EQ(mlp.params()[2].shape, (Shape{2, 4}));
  EXPECT_EQ(mlp.params()[3].layer, 1);
}

}  // namespace
}  // namespace shardlab::runtime::model
