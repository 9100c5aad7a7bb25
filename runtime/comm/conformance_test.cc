// The Communicator conformance suite (see conformance_test.h). Values are small
// integers so that sums are exact whatever the backend's reduction order.
#include "runtime/comm/conformance_test.h"

#include <algorithm>
#include <cstring>

#include "testing/status_matchers.h"

using shardlab::testlib::IsOk;

namespace shardlab::runtime::comm::testing {

std::vector<ConformanceParam> conformance_params(std::shared_ptr<CommHarness> harness, const std::vector<int>& sizes) {
  std::vector<ConformanceParam> out;
  for (int s : sizes) out.push_back({harness, s});
  return out;
}

std::string conformance_param_name(const ::testing::TestParamInfo<ConformanceParam>& info) {
  return info.param.harness->name() + "_world" + std::to_string(info.param.world_size);
}

namespace {

constexpr Nanos kLong = 60 * kNanosPerSecond;

Tensor make(RankEnv& env, std::int64_t n, DType dtype, const std::string& name) {
  auto t = env.device.empty({n}, dtype, MemoryCategory::kCommBuffers, name);
  SHARDLAB_CHECK_OK(t.status());
  return *t;
}

// Writes value v (a small integer) at index i in any supported dtype, and reads it back:
// through the device's host access (NOTE [Host access] in runtime/device/device.h), so
// the suite runs on device memory too.
void set(device::Device& dev, const Tensor& t, std::int64_t i, double v) {
  const Tensor at = *t.narrow(i, 1);
  Status s;
  switch (t.dtype()) {
    case DType::kF32: s = device::values_from_host(dev, std::vector<float>{static_cast<float>(v)}, at); break;
    case DType::kBF16:
      s = device::values_from_host(dev, std::vector<std::uint16_t>{float_to_bf16(static_cast<float>(v))}, at);
      break;
    case DType::kF16:
      s = device::values_from_host(dev, std::vector<std::uint16_t>{float_to_fp16(static_cast<float>(v))}, at);
      break;
    case DType::kI64:
      s = device::values_from_host(dev, std::vector<std::int64_t>{static_cast<std::int64_t>(v)}, at);
      break;
  }
  SHARDLAB_CHECK_OK(s);
}
double get(device::Device& dev, const Tensor& t, std::int64_t i) {
  const Tensor at = *t.narrow(i, 1);
  switch (t.dtype()) {
    case DType::kF32: return (*device::values_to_host<float>(dev, at))[0];
    case DType::kBF16: return bf16_to_float((*device::values_to_host<std::uint16_t>(dev, at))[0]);
    case DType::kF16: return fp16_to_float((*device::values_to_host<std::uint16_t>(dev, at))[0]);
    case DType::kI64: return static_cast<double>((*device::values_to_host<std::int64_t>(dev, at))[0]);
  }
  return 0;
}

// A value that depends on (rank, index) and stays exact in bf16 (|v| < 256).
double value(int rank, std::int64_t i) { return static_cast<double>((rank * 7 + i * 3) % 23) - 11.0; }

void expect_ok(const WorkPtr& w, const std::string& what) {
  const Status s = w->wait(kLong);
  EXPECT_THAT(s, IsOk()) << what;
}

const DType kDtypes[] = {DType::kF32, DType::kBF16, DType::kI64};
const std::int64_t kCounts[] = {0, 1, 7, 1000};

}  // namespace

TEST_P(CommConformance, AllGatherEveryDtypeAndCount) {
  run([&](RankEnv& env) {
    const int w = env.comm.size(), r = env.comm.rank();
    ASSERT_EQ(w, world_size());
    for (DType dt : kDtypes) {
      for (std::int64_t n : kCounts) {
        Tensor in = make(env, n, dt, "in"), out = make(env, n * w, dt, "out");
        for (std::int64_t i = 0; i < n; ++i) set(env.device, in, i, value(r, i));
        expect_ok(env.comm.all_gather_into(out, in), "all_gather");
        for (int src = 0; src < w; ++src) {
          for (std::int64_t i = 0; i < n; ++i) {
            ASSERT_EQ(get(env.device, out, src * n + i), value(src, i))
                << dtype_name(dt) << " n=" << n << " src=" << src;
          }
        }
      }
    }
  });
}

TEST_P(CommConformance, AllGatherInPlace) {
  run([&](RankEnv& env) {
    const int w = env.comm.size(), r = env.comm.rank();
    const std::int64_t n = 13;
    Tensor out = make(env, n * w, DType::kF32, "out");
    Tensor mine = *out.narrow(n * r, n);
    for (std::int64_t i = 0; i < n; ++i) set(env.device, mine, i, value(r, i));
    expect_ok(env.comm.all_gather_into(out, mine), "all_gather in place");
    for (int src = 0; src < w; ++src)
      for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(get(env.device, out, src * n + i), value(src, i));
  });
}

TEST_P(CommConformance, ReduceScatterSumAndAvg) {
  run([&](RankEnv& env) {
    const int w = env.comm.size(), r = env.comm.rank();
    for (DType dt : kDtypes) {
      for (std::int64_t n : kCounts) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
          if (op == ReduceOp::kAvg && dt == DType::kI64) continue;  // rejected; tested in ArgumentErrors
          Tensor in = make(env, n * w, dt, "in"), out = make(env, n, dt, "out");
          for (std::int64_t i = 0; i < n * w; ++i) set(env.device, in, i, value(r, i));
          expect_ok(env.comm.reduce_scatter(out, in, op), "reduce_scatter");
          for (std::int64_t i = 0; i < n; ++i) {
            double expect = op == ReduceOp::kMax ? -1e9 : op == ReduceOp::kMin ? 1e9 : 0.0;
            for (int src = 0; src < w; ++src) {
              const double v = value(src, r * n + i);
              expect = op == ReduceOp::kMax   ? std::max(expect, v)
                       : op == ReduceOp::kMin ? std::min(expect, v)
                                              : expect + v;
            }
            if (op == ReduceOp::kAvg) {
              const float avg = static_cast<float>(expect) / static_cast<float>(w);
              const double want = dt == DType::kBF16 ? round_to_bf16(avg) : avg;
              ASSERT_NEAR(get(env.device, out, i), want, dt == DType::kBF16 ? 0.02 : 1e-6)
                  << dtype_name(dt) << " n=" << n;
            } else {
              ASSERT_EQ(get(env.device, out, i), expect)
                  << dtype_name(dt) << " n=" << n << " op=" << reduce_op_name(op);
            }
          }
        }
      }
    }
  });
}

TEST_P(CommConformance, ReduceScatterInPlace) {
  run([&](RankEnv& env) {
    const int w = env.comm.size(), r = env.comm.rank();
    const std::int64_t n = 5;
    Tensor buf = make(env, n * w, DType::kF32, "buf");
    for (std::int64_t i = 0; i < n * w; ++i) set(env.device, buf, i, value(r, i));
    Tensor mine = *buf.narrow(n * r, n);
    expect_ok(env.comm.reduce_scatter(mine, buf, ReduceOp::kSum), "reduce_scatter in place");
    for (std::int64_t i = 0; i < n; ++i) {
      double expect = 0;
      for (int src = 0; src < w; ++src) expect += value(src, r * n + i);
      ASSERT_EQ(get(env.device, mine, i), expect);
    }
  });
}

TEST_P(CommConformance, AllReduceOps) {
  run([&](RankEnv& env) {
    const int w = env.comm.size(), r = env.comm.rank();
    for (DType dt : kDtypes) {
      for (std::int64_t n : kCounts) {
        Tensor t = make(env, n, dt, "t");
        for (std::int64_t i = 0; i < n; ++i) set(env.device, t, i, value(r, i));
        expect_ok(env.comm.all_reduce(t, ReduceOp::kSum), "all_reduce");
        for (std::int64_t i = 0; i < n; ++i) {
          double expect = 0;
          for (int src = 0; src < w; ++src) expect += value(src, i);
          ASSERT_EQ(get(env.device, t, i), expect) << dtype_name(dt) << " n=" << n;
        }
        for (std::int64_t i = 0; i < n; ++i) set(env.device, t, i, value(r, i));
        expect_ok(env.comm.all_reduce(t, ReduceOp::kMax), "all_reduce max");
        for (std::int64_t i = 0; i < n; ++i) {
          double expect = -1e9;
          for (int src = 0; src < w; ++src) expect = std::max(expect, value(src, i));
          ASSERT_EQ(get(env.device, t, i), expect);
        }
      }
    }
  });
}

TEST_P(CommConformance, BroadcastFromEveryRoot) {
  run([&](RankEnv& env) {
    const int w = env.comm.size(), r = env.comm.rank();
    for (int root = 0; root < w; ++root) {
      Tensor t = make(env, 11, DType::kBF16, "t");
      for (std::int64_t i = 0; i < 11; ++i) set(env.device, t, i, value(r, i));
      expect_ok(env.comm.broadcast(t, root), "broadcast");
      for (std::int64_t i = 0; i < 11; ++i) ASSERT_EQ(get(env.device, t, i), value(root, i)) << "root " << root;
    }
  });
}

TEST_P(CommConformance, BarrierAndManyOutstandingWorksWaitedInReverse) {
  run([&](RankEnv& env) {
    const int w = env.comm.size(), r = env.comm.rank();
    expect_ok(env.comm.barrier(), "barrier");
    std::vector<Tensor> ts;
    std::vector<WorkPtr> works;
    for (int k = 0; k < 6; ++k) {
      ts.push_back(make(env, 3, DType::kI64, "t" + std::to_string(k)));
      for (std::int64_t i = 0; i < 3; ++i) set(env.device, ts.back(), i, r + k);
      works.push_back(env.comm.all_reduce(ts.back(), ReduceOp::kSum));
    }
    for (int k = 5; k >= 0; --k) expect_ok(works[static_cast<std::size_t>(k)], "all_reduce #" + std::to_string(k));
    for (int k = 0; k < 6; ++k) {
      const double expect = static_cast<double>(w) * (w - 1) / 2 + static_cast<double>(k) * w;
      ASSERT_EQ(get(env.device, ts[static_cast<std::size_t>(k)], 2), expect);
    }
    expect_ok(env.comm.barrier(), "barrier");
  });
}

// Work::wait_on_compute: device work issued afterwards on the compute stream sees the
// collective's result, and a later wait() still reports the operation's status.
TEST_P(CommConformance, WaitOnComputeOrdersLaterDeviceWork) {
  run([&](RankEnv& env) {
    const int w = env.comm.size(), r = env.comm.rank();
    const std::int64_t n = 257;
    Tensor in = make(env, n, DType::kF32, "in"), out = make(env, n * w, DType::kF32, "out");
    std::vector<float> mine(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) mine[static_cast<std::size_t>(i)] = static_cast<float>(value(r, i));
    ASSERT_TRUE(device::values_from_host(env.device, mine, in).is_ok());
    const WorkPtr work = env.comm.all_gather_into(out, in);
    const Status ordered = work->wait_on_compute(kLong);
    ASSERT_THAT(ordered, IsOk());
    ASSERT_TRUE(env.device.scale(out, 2.0f).is_ok());
    expect_ok(work, "all_gather after wait_on_compute");
    const auto got = device::values_to_host<float>(env.device, out);
    ASSERT_THAT(got, IsOk());
    for (int src = 0; src < w; ++src) {
      for (std::int64_t i = 0; i < n; ++i) {
        ASSERT_EQ((*got)[static_cast<std::size_t>(src * n + i)], 2.0f * static_cast<float>(value(src, i)))
            << "src=" << src << " i=" << i;
      }
    }
  });
}

TEST_P(CommConformance, SendRecvRingKeepsOrderPerTag) {
  run([&](RankEnv& env) {
    const int w = env.comm.size(), r = env.comm.rank();
    if (w == 1) {  // no peer exists: messaging yourself is an argument error
      Tensor t = make(env, 4, DType::kF32, "t");
      EXPECT_EQ(env.comm.send(t, 0, 5)->wait(kLong).code(), StatusCode::kInvalidArgument);
      EXPECT_EQ(env.comm.recv(t, 0, 5)->wait(kLong).code(), StatusCode::kInvalidArgument);
      return;
    }
    const int next = (r + 1) % w, prev = (r + w - 1) % w;
    Tensor a = make(env, 4, DType::kF32, "a"), b = make(env, 4, DType::kF32, "b");
    Tensor ra = make(env, 4, DType::kF32, "ra"), rb = make(env, 4, DType::kF32, "rb");
    for (std::int64_t i = 0; i < 4; ++i) {
      set(env.device, a, i, value(r, i));
      set(env.device, b, i, value(r, i + 10));
    }
    WorkPtr s1 = env.comm.send(a, next, 5), s2 = env.comm.send(b, next, 5);
    WorkPtr q1 = env.comm.recv(ra, prev, 5), q2 = env.comm.recv(rb, prev, 5);
    expect_ok(q2, "recv 2");
    expect_ok(q1, "recv 1");
    expect_ok(s1, "send 1");
    expect_ok(s2, "send 2");
    for (std::int64_t i = 0; i < 4; ++i) {
      ASSERT_EQ(get(env.device, ra, i), value(prev, i));
      ASSERT_EQ(get(env.device, rb, i), value(prev, i + 10));
    }
  });
}

TEST_P(CommConformance, SplitByParityWithReversedKeys) {
  run([&](RankEnv& env) {
    const int w = env.comm.size(), r = env.comm.rank();
    // The last rank of an odd-sized world opts out (color < 0) when w > 2.
    const bool opt_out = w > 2 && (w % 2 == 1) && r == w - 1;
    auto sub = env.comm.split(opt_out ? -1 : r % 2, -r);
    ASSERT_THAT(sub, IsOk());
    if (opt_out) {
      EXPECT_EQ(*sub, nullptr);
    } else {
      ASSERT_NE(*sub, nullptr);
      Communicator& g = **sub;
      std::vector<int> members;
      for (int q = 0; q < w; ++q) {
        const bool q_out = w > 2 && (w % 2 == 1) && q == w - 1;
        if (!q_out && q % 2 == r % 2) members.push_back(q);
      }
      ASSERT_EQ(g.size(), static_cast<int>(members.size()));
      // Keys are -rank: new rank order is the reverse of the old one.
      const int expect_rank = static_cast<int>(members.end() - std::find(members.begin(), members.end(), r)) - 1;
      EXPECT_EQ(g.rank(), expect_rank);
      EXPECT_NE(g.group_name(), env.comm.group_name());
      Tensor t = make(env, 1, DType::kI64, "t");
      set(env.device, t, 0, r);
      expect_ok(g.all_reduce(t, ReduceOp::kSum), "all_reduce in subgroup");
      double expect = 0;
      for (int q : members) expect += q;
      EXPECT_EQ(get(env.device, t, 0), expect);
    }
    // The parent group still works after a split.
    Tensor u = make(env, 1, DType::kI64, "u");
    set(env.device, u, 0, 1);
    expect_ok(env.comm.all_reduce(u, ReduceOp::kSum), "all_reduce in parent");
    EXPECT_EQ(get(env.device, u, 0), w);
  });
}

// NOTE [Strided groups]: split_strided(stride, size) forms the groups of a regular mesh —
// rank r with the ranks of its block of stride·size that share r % stride, ordered by
// rank — on every backend (HYBRID_SHARD's node groups are (1, devices per node), its
// replica groups (devices per node, nodes)); bad layouts fail locally, before any message.
TEST_P(CommConformance, SplitStridedFormsTheGroupsOfAMesh) {
  run([&](RankEnv& env) {
    const int w = env.comm.size(), r = env.comm.rank();
    for (int stride = 1; stride <= w; ++stride) {
      for (int size = 1; stride * size <= w; ++size) {
        if (w % (stride * size) != 0) continue;
        SCOPED_TRACE("stride " + std::to_string(stride) + ", size " + std::to_string(size));
        auto sub = env.comm.split_strided(stride, size);
        ASSERT_THAT(sub, IsOk());
        ASSERT_NE(*sub, nullptr);
        Communicator& g = **sub;
        const int block = r / (stride * size) * stride * size;
        std::vector<int> members;
        for (int k = 0; k < size; ++k) members.push_back(block + r % stride + stride * k);
        ASSERT_EQ(g.size(), size);
        EXPECT_EQ(g.rank(), static_cast<int>(std::find(members.begin(), members.end(), r) - members.begin()));
        EXPECT_EQ(g.rank(), strided_key(r, stride, size));
        // Each member's world rank, gathered in group order: exactly the expected members.
        Tensor all = make(env, size, DType::kI64, "all");
        Tensor mine = *all.narrow(g.rank(), 1);
        set(env.device, mine, 0, r);
        expect_ok(g.all_gather_into(all, mine), "all_gather in the strided group");
        for (int k = 0; k < size; ++k)
          EXPECT_EQ(get(env.device, all, k), members[static_cast<std::size_t>(k)]) << "member " << k;
      }
    }
    for (const auto& [stride, size] : {std::pair{0, 1}, std::pair{1, 0}, std::pair{w + 1, 1}, std::pair{1, w + 1}}) {
      auto bad = env.comm.split_strided(stride, size);
      ASSERT_FALSE(bad.is_ok());
      EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
      EXPECT_NE(bad.status().message().find("must divide the group size"), std::string::npos) << bad.status().message();
    }
    if (w % 2 == 1 && w > 1) {  // 2 does not divide an odd world
      auto bad = env.comm.split_strided(1, 2);
      ASSERT_FALSE(bad.is_ok());
      EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
    }
  });
}

TEST_P(CommConformance, ArgumentErrorsAreReportedLocally) {
  run([&](RankEnv& env) {
    const int w = env.comm.size();
    Tensor in = make(env, 3, DType::kF32, "in"), bad_out = make(env, 3 * w + 1, DType::kF32, "bad_out");
    Status s = env.comm.all_gather_into(bad_out, in)->wait(kLong);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("all_gather"), std::string::npos) << s.message();
    Tensor i64 = make(env, static_cast<std::int64_t>(w), DType::kI64, "i64"), o64 = make(env, 1, DType::kI64, "o64");
    s = env.comm.reduce_scatter(o64, i64, ReduceOp::kAvg)->wait(kLong);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
    s = env.comm.broadcast(in, w)->wait(kLong);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
    s = env.comm.send(in, env.comm.rank(), 0)->wait(kLong);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
    Tensor f16 = make(env, 2, DType::kF16, "f16");
    s = env.comm.all_reduce(f16, ReduceOp::kSum)->wait(kLong);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
    // Nothing was sent: the group is still in step.
    expect_ok(env.comm.barrier(), "barrier after argument errors");
  });
}

TEST_P(CommConformance, MissingPeerTimesOutThenLatePeerCompletes) {
  run([&](RankEnv& env) {
    const int w = env.comm.size(), r = env.comm.rank();
    if (w == 1) {  // nobody can be missing: a collective completes within the short timeout
      Tensor t = make(env, 2, DType::kF32, "t");
      set(env.device, t, 0, 3);
      EXPECT_TRUE(env.comm.all_reduce(t, ReduceOp::kSum)->wait(env.short_timeout).is_ok());
      EXPECT_EQ(get(env.device, t, 0), 3);
      return;
    }
    const int late = w - 1;
    Tensor t = make(env, 2, DType::kF32, "t");
    set(env.device, t, 0, r);
    set(env.device, t, 1, 1);
    Tensor go = make(env, 1, DType::kI64, "go");
    if (r == late) {
      // Wait for rank 0 to say the others have timed out, then join late.
      expect_ok(env.comm.recv(go, 0, 99), "recv go");
      expect_ok(env.comm.all_reduce(t, ReduceOp::kSum), "late all_reduce");
    } else {
      WorkPtr work = env.comm.all_reduce(t, ReduceOp::kSum);
      const Status s = work->wait(env.short_timeout);
      EXPECT_EQ(s.code(), StatusCode::kTimeout) << s.to_string();
      EXPECT_NE(s.message().find("all_reduce"), std::string::npos) << s.message();
      // Rank 0 lets the late rank in only after every waiting rank has timed out;
      // otherwise a slow-to-schedule rank could see the collective complete.
      if (r == 0) {
        for (int peer = 1; peer < late; ++peer) expect_ok(env.comm.recv(go, peer, 98), "recv timed-out ack");
        set(env.device, go, 0, 1);
        expect_ok(env.comm.send(go, late, 99), "send go");
      } else {
        set(env.device, go, 0, 1);
        expect_ok(env.comm.send(go, 0, 98), "send timed-out ack");
      }
      expect_ok(work, "all_reduce after the late peer arrived");
    }
    EXPECT_EQ(get(env.device, t, 0), static_cast<double>(w) * (w - 1) / 2);
    EXPECT_EQ(get(env.device, t, 1), w);
  });
}

}  // namespace shardlab::runtime::comm::testing
