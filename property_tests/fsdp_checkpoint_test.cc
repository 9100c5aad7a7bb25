// Property 7 of the FSDP core: checkpoints reshard. Save at W1, load at W2 (any strategy),
// or whole on one process (load_checkpoint_unsharded, the oracle's start), and every full
// parameter and optimizer state is identical; an interrupted save leaves the previous
// checkpoint loadable.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "property_tests/fsdp_generators.h"
#include "runtime/fsdp/checkpoint.h"
#include "runtime/io/safetensors.h"
#include "sim/engine/world.h"
#include "testing/status_matchers.h"

using shardlab::testlib::IsOk;

namespace shardlab::property {
namespace {

namespace fs = std::filesystem;
using runtime::fsdp::StateDictType;
using runtime::train::FsdpTrainer;

struct Snapshot {
  std::vector<float> params;
  std::vector<std::vector<float>> states;
  std::int64_t optimizer_steps = 0;
  bool operator==(const Snapshot&) const = default;
};

Result<Snapshot> snapshot(runtime::fsdp::FullyShardedModel& m) {
  Snapshot s;
  const std::int64_t total = runtime::model::total_numel(m.specs());
  SHARDLAB_ASSIGN_OR_RETURN(Tensor out, m.device().zeros({total}, DType::kF32, MemoryCategory::kOther, "snapshot"));
  SHARDLAB_RETURN_IF_ERROR(m.gather_full_params(out));
  s.params.assign(out.data<float>(), out.data<float>() + total);
  const std::size_t n_states = m.optimizers().empty() ? 0 : m.optimizers()[0].state_names().size();
  for (std::size_t k = 0; k < n_states; ++k) {
    SHARDLAB_RETURN_IF_ERROR(m.device().fill(out, 0.0f));
    SHARDLAB_RETURN_IF_ERROR(m.gather_full_optimizer_state(static_cast<int>(k), out));
    s.states.emplace_back(out.data<float>(), out.data<float>() + total);
  }
  s.optimizer_steps = m.optimizers().empty() ? 0 : m.optimizers()[0].steps();
  return s;
}

std::string fresh_dir() {
  static std::atomic<int> counter{0};
  const fs::path p =
      fs::temp_directory_path() / ("shardlab-ckpt-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  fs::remove_all(p);
  return p.string();
}

// Runs `body` with a trainer on every rank of a sim world; returns rank 0's snapshot.
Snapshot on_world(int world, const runtime::train::FsdpTrainOptions& options,
                  const std::function<Status(FsdpTrainer&, sim::RankContext&)>& body) {
  sim::WorldOptions wo;
  wo.world_size = world;
  sim::World w(wo);
  std::vector<Snapshot> snaps(static_cast<std::size_t>(world));
  const auto results = w.run([&](sim::RankContext& ctx) -> Status {
    SHARDLAB_ASSIGN_OR_RETURN(auto trainer, FsdpTrainer::create(ctx.comm, ctx.device, ctx.clock, options));
    SHARDLAB_RETURN_IF_ERROR(body(*trainer, ctx));
    SHARDLAB_ASSIGN_OR_RETURN(snaps[static_cast<std::size_t>(ctx.rank)], snapshot(trainer->model()));
    return Status::ok();
  });
  for (const auto& r : results) {
    if (!r.status.is_ok()) RC_FAIL(r.status.to_string());
  }
  for (const auto& s : snaps) RC_ASSERT(s == snaps[0]);  // every rank sees the same full state
  return snaps[0];
}

runtime::train::FsdpTrainOptions at_world(runtime::train::FsdpTrainOptions o, int world) {
  o.global_batch = static_cast<std::int64_t>(world) * o.grad_accumulation;
  if (runtime::fsdp::is_hybrid(o.fsdp.strategy)) o.fsdp.devices_per_node = 1;
  // reshard_after_forward=N only where N still divides the world size and is smaller.
  if (const int n = o.fsdp.reshard_after_forward_size; n > 0 && (n >= world || world % n != 0))
    o.fsdp.reshard_after_forward_size = 0;
  return o;
}

RC_GTEST_PROP(FsdpCheckpoint, SaveAtOneWorldSizeLoadAtAnotherGivesIdenticalState, ()) {
  const FsdpCase c = *gen_fsdp_case();
  const StateDictType type = *rc::gen::element(StateDictType::kFull, StateDictType::kSharded, StateDictType::kLocal);
  RC_TAG(runtime::fsdp::state_dict_type_name(type));
  const int w1 = c.world_size;
  const int w2 = type == StateDictType::kLocal ? w1 : *rc::gen::inRange(1, 9);
  const std::string dir = fresh_dir();
  const int failing_rank = *rc::gen::oneOf(rc::gen::just(0), rc::gen::inRange(0, w1));

  // World 1: two steps, save, one more step, then a save that dies on one rank if that
  // rank writes any file (under FULL only rank 0 writes; under NO_SHARD and HYBRID_SHARD
  // only one replica does) — otherwise that save legitimately succeeds.
  Snapshot saved2, saved3;
  std::atomic<bool> crashed{false};
  on_world(w1, c.options, [&](FsdpTrainer& t, sim::RankContext& ctx) -> Status {
    SHARDLAB_RETURN_IF_ERROR(t.step());
    SHARDLAB_RETURN_IF_ERROR(t.step());
    runtime::fsdp::CheckpointOptions opts;
    opts.type = type;
    SHARDLAB_RETURN_IF_ERROR(runtime::fsdp::save_checkpoint(t.model(), dir, 2, opts));
    SHARDLAB_ASSIGN_OR_RETURN(Snapshot s2, snapshot(t.model()));
    if (ctx.rank == 0) saved2 = s2;
    SHARDLAB_RETURN_IF_ERROR(t.step());
    SHARDLAB_ASSIGN_OR_RETURN(Snapshot s3, snapshot(t.model()));
    if (ctx.rank == 0) saved3 = s3;
    opts.before_write = [&](const std::string& path) -> Status {
      if (ctx.rank != failing_rank) return Status::ok();
      crashed = true;
      return Status::unavailable("simulated crash before writing " + path);
    };
    const Status second = runtime::fsdp::save_checkpoint(t.model(), dir, 3, opts);
    if (second.is_ok() && ctx.rank == failing_rank && crashed)
      return Status::internal("the interrupted save reported success");
    return Status::ok();
  });
  std::error_code ec;
  RC_ASSERT(fs::exists(dir + "/latest"));

  // World 2 (another size, strategy and initial values): load and compare.
  runtime::train::FsdpTrainOptions o2 = at_world(c.options, w2);
  if (type != StateDictType::kLocal) {
    o2.fsdp.strategy =
        *rc::gen::element(runtime::fsdp::ShardingStrategy::kFullShard, runtime::fsdp::ShardingStrategy::kShardGradOp,
                          runtime::fsdp::ShardingStrategy::kNoShard);
    o2.fsdp.align_bytes = *rc::gen::element<std::int64_t>(0, 16);
    o2.wrap = *rc::gen::element(runtime::train::WrapPolicy::kPerLayer, runtime::train::WrapPolicy::kNone);
    if (o2.fsdp.strategy != runtime::fsdp::ShardingStrategy::kFullShard) o2.fsdp.reshard_after_forward_size = 0;
  } else {
    o2 = c.options;
  }
  o2.seed = c.options.seed + 1;
  std::int64_t loaded_step = -1;
  std::vector<runtime::model::ParamSpec> specs;
  std::vector<std::string> names;
  const Snapshot loaded = on_world(w2, o2, [&](FsdpTrainer& t, sim::RankContext& ctx) -> Status {
    SHARDLAB_ASSIGN_OR_RETURN(loaded_step, runtime::fsdp::load_checkpoint(t.model(), dir));
    if (ctx.rank == 0) {
      specs = t.model().specs();
      if (!t.model().optimizers().empty()) names = t.model().optimizers()[0].state_names();
    }
    return Status::ok();
  });
  // The same checkpoint loaded whole by one process (the oracle's start) gives the same state.
  const auto step_dir = runtime::fsdp::latest_step_dir(dir);
  RC_ASSERT(step_dir.is_ok());
  const auto whole = runtime::fsdp::load_checkpoint_unsharded(*step_dir, specs, names);
  if (!whole.is_ok()) RC_FAIL(whole.status().to_string());
  RC_ASSERT(whole->step == loaded_step);
  RC_ASSERT(whole->optimizer_steps == loaded.optimizer_steps);
  RC_ASSERT(whole->params == loaded.params);
  if (!names.empty()) RC_ASSERT(whole->optimizer_state == loaded.states);
  fs::remove_all(dir, ec);
  RC_TAG(crashed ? "interrupted" : "second save completed");
  RC_ASSERT(loaded_step == (crashed ? 2 : 3));  // an interrupted step-3 save never becomes `latest`
  RC_ASSERT(loaded == (crashed ? saved2 : saved3));
}

// Regression: loading at a world size far larger than most parameters' numel (ranks that
// own nothing but padding), for model and AdamW state.
TEST(FsdpCheckpoint, ShardedSaveAtThreeLoadsAtSixtyFour) {
  FsdpCase c;
  c.world_size = 3;
  c.options.global_batch = 6;
  c.options.optimizer.kind = runtime::optim::OptimizerConfig::Kind::kAdamW;
  c.options.optimizer.lr = 0.01f;
  const std::string dir = fresh_dir();
  std::vector<Snapshot> saved(3), loaded(64);
  sim::WorldOptions wo;
  wo.world_size = 3;
  for (const auto& r : sim::World(wo).run([&](sim::RankContext& ctx) -> Status {
         SHARDLAB_ASSIGN_OR_RETURN(auto t, FsdpTrainer::create(ctx.comm, ctx.device, ctx.clock, c.options));
         SHARDLAB_RETURN_IF_ERROR(t->step());
         SHARDLAB_RETURN_IF_ERROR(runtime::fsdp::save_checkpoint(t->model(), dir, 1));
         SHARDLAB_ASSIGN_OR_RETURN(saved[static_cast<std::size_t>(ctx.rank)], snapshot(t->model()));
         return Status::ok();
       })) {
    ASSERT_THAT(r.status, IsOk());
  }
  wo.world_size = 64;
  c.options.global_batch = 64;
  c.options.seed = 99;
  for (const auto& r : sim::World(wo).run([&](sim::RankContext& ctx) -> Status {
         SHARDLAB_ASSIGN_OR_RETURN(auto t, FsdpTrainer::create(ctx.comm, ctx.device, ctx.clock, c.options));
         SHARDLAB_RETURN_IF_ERROR(runtime::fsdp::load_checkpoint(t->model(), dir).status());
         SHARDLAB_ASSIGN_OR_RETURN(loaded[static_cast<std::size_t>(ctx.rank)], snapshot(t->model()));
         return Status::ok();
       })) {
    ASSERT_THAT(r.status, IsOk());
  }
  std::filesystem::remove_all(dir);
  ASSERT_EQ(saved[0].states.size(), 2u);  // exp_avg, exp_avg_sq
  for (const auto& l : loaded) EXPECT_TRUE(l == saved[0]);
}

TEST(FsdpCheckpoint, LocalStateDictRefusesAnotherWorldSizeWithAClearMessage) {
  FsdpCase c;
  c.world_size = 2;
  c.options.global_batch = 4;
  const std::string dir = fresh_dir();
  sim::WorldOptions wo;
  wo.world_size = 2;
  sim::World(wo).run([&](sim::RankContext& ctx) -> Status {
    SHARDLAB_ASSIGN_OR_RETURN(auto t, FsdpTrainer::create(ctx.comm, ctx.device, ctx.clock, c.options));
    runtime::fsdp::CheckpointOptions opts;
    opts.type = StateDictType::kLocal;
    return runtime::fsdp::save_checkpoint(t->model(), dir, 0, opts);
  });
  wo.world_size = 4;
  c.options.global_batch = 8;
  const auto results = sim::World(wo).run([&](sim::RankContext& ctx) -> Status {
    SHARDLAB_ASSIGN_OR_RETURN(auto t, FsdpTrainer::create(ctx.comm, ctx.device, ctx.clock, c.options));
    return runtime::fsdp::load_checkpoint(t->model(), dir).status();
  });
  std::filesystem::remove_all(dir);
  EXPECT_EQ(results[0].status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(results[0].status.message().find("LOCAL_STATE_DICT was saved at world size 2"), std::string::npos)
      << results[0].status.message();
}

TEST(FsdpCheckpoint, AMalformedIndexIsBadInputNamingTheFile) {
  FsdpCase c;
  c.world_size = 1;
  c.options.global_batch = 2;
  const std::string dir = fresh_dir();
  sim::WorldOptions wo;
  const auto results = sim::World(wo).run([&](sim::RankContext& ctx) -> Status {
    SHARDLAB_ASSIGN_OR_RETURN(auto t, FsdpTrainer::create(ctx.comm, ctx.device, ctx.clock, c.options));
    SHARDLAB_RETURN_IF_ERROR(runtime::fsdp::save_checkpoint(t->model(), dir, 5));
    // Corrupt one piece's offset type, as a hand-edited or truncated index would.
    SHARDLAB_ASSIGN_OR_RETURN(std::string text, runtime::io::read_file(dir + "/step-00000005/index.json"));
    const auto at = text.find("\"offset\": 0");
    if (at == std::string::npos) return Status::internal("no offset in index.json");
    text.replace(at, 11, "\"offset\": \"zero\"");
    SHARDLAB_RETURN_IF_ERROR(runtime::io::write_file_atomic(dir + "/step-00000005/index.json", text));
    SHARDLAB_RETURN_IF_ERROR(runtime::fsdp::reseal_index(dir + "/step-00000005"));
    return runtime::fsdp::load_checkpoint(t->model(), dir).status();
  });
  std::filesystem::remove_all(dir);
  EXPECT_EQ(results[0].status.code(), StatusCode::kInvalidArgument) << results[0].status.to_string();
  EXPECT_NE(results[0].status.message().find("step-00000005/index.json: tensor '"), std::string::npos)
      << results[0].status.message();
  EXPECT_NE(results[0].status.message().find("offset is not an integer"), std::string::npos)
      << results[0].status.message();
}

TEST(FsdpCheckpoint, AMissingCheckpointNamesThePath) {
  FsdpCase c;
  c.world_size = 1;
  c.options.global_batch = 2;
  sim::WorldOptions wo;
  const auto results = sim::World(wo).run([&](sim::RankContext& ctx) -> Status {
    SHARDLAB_ASSIGN_OR_RETURN(auto t, FsdpTrainer::create(ctx.comm, ctx.device, ctx.clock, c.options));
    return runtime::fsdp::load_checkpoint(t->model(), "/nonexistent/ckpt").status();
  });
  EXPECT_EQ(results[0].status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(results[0].status.message().find("/nonexistent/ckpt/latest: missing"), std::string::npos)
      << results[0].status.message();
}

// ---------------------------------------------------------------------------------------
// Hostile checkpoints (NOTE [Checkpoint integrity], NOTE [Checkpoint writers]): every
// kind of tampering, mixing and odd file is refused with INVALID_ARGUMENT naming the
// file, before any data is used — never a crash, a hang or a read outside the checkpoint.

// A saved checkpoint of a 2-rank run (step 1) in a fresh directory.
struct Saved {
  FsdpCase c;
  std::string dir;
  StateDictType type;
  explicit Saved(StateDictType t = StateDictType::kSharded) : dir(fresh_dir()), type(t) {
    c.world_size = 2;
    c.options.global_batch = 4;
    sim::WorldOptions wo;
    wo.world_size = 2;
    for (const auto& r : sim::World(wo).run([&](sim::RankContext& ctx) -> Status {
           SHARDLAB_ASSIGN_OR_RETURN(auto t, FsdpTrainer::create(ctx.comm, ctx.device, ctx.clock, c.options));
           SHARDLAB_RETURN_IF_ERROR(t->step());
           runtime::fsdp::CheckpointOptions o;
           o.type = type;
           return runtime::fsdp::save_checkpoint(t->model(), dir, 1, o);
         })) {
      EXPECT_THAT(r.status, IsOk());
    }
  }
  ~Saved() { fs::remove_all(dir); }
  std::string step() const { return dir + "/step-00000001"; }
  // The first failing rank's load status (each rank reads the files its pieces are in).
  Status load() const {
    sim::WorldOptions wo;
    wo.world_size = 2;
    for (const auto& r : sim::World(wo).run([&](sim::RankContext& ctx) -> Status {
           SHARDLAB_ASSIGN_OR_RETURN(auto t, FsdpTrainer::create(ctx.comm, ctx.device, ctx.clock, c.options));
           return runtime::fsdp::load_checkpoint(t->model(), dir).status();
         })) {
      if (!r.status.is_ok()) return r.status;
    }
    return Status::ok();
  }
  nlohmann::ordered_json index() const {
    return nlohmann::ordered_json::parse(*runtime::io::read_file(step() + "/index.json"));
  }
  // Writes `j` as the index and recomputes its checksum (a forger who knows the format).
  void forge(const nlohmann::ordered_json& j) const {
    ASSERT_TRUE(runtime::io::write_file_atomic(step() + "/index.json", j.dump(2)).is_ok());
    ASSERT_TRUE(runtime::fsdp::reseal_index(step()).is_ok());
  }
};

void expect_refused(const Status& s, const std::vector<std::string>& words) {
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  for (const auto& w : words) EXPECT_NE(s.message().find(w), std::string::npos) << s.message() << "\nmissing: " << w;
}

TEST(HostileCheckpoint, AnUntouchedCheckpointLoads) {
  Saved s;
  EXPECT_TRUE(s.load().is_ok());
  const auto j = s.index();
  EXPECT_EQ(j["version"], 2);
  EXPECT_EQ(j["files"].size(), 2u);  // rank-00000, rank-00001
  EXPECT_EQ(j["files"]["rank-00000.safetensors"]["sha256"].get<std::string>().size(), 64u);
}

TEST(HostileCheckpoint, PieceFilesOutsideTheStepDirectoryAreRefused) {
  Saved s;
  const auto pristine = s.index();
  for (const char* evil : {"../../../../etc/passwd", "/etc/passwd", "../x.safetensors", ".hidden", "a/b"}) {
    auto j = pristine;
    const std::string key = j["tensors"].begin().key();
    j["tensors"][key]["pieces"][0]["file"] = evil;
    j["files"][evil] = j["files"]["rank-00000.safetensors"];
    s.forge(j);
    expect_refused(s.load(), {"index.json", "is not a plain file name"});
  }
}

TEST(HostileCheckpoint, SymlinksFifosAndDevicesAreRefusedWithoutReadingThem) {
  Saved s;
  const std::string file = s.step() + "/rank-00001.safetensors";
  const std::string outside = s.dir + "/outside.safetensors";
  fs::rename(file, outside);
  fs::create_symlink(outside, file);
  expect_refused(s.load(), {"rank-00001.safetensors", "is a symbolic link"});
  fs::remove(file);
  ASSERT_EQ(::mkfifo(file.c_str(), 0644), 0);  // would block a plain open() forever
  expect_refused(s.load(), {"rank-00001.safetensors", "is a FIFO"});
  fs::remove(file);
  fs::create_symlink("/dev/zero", file);
  expect_refused(s.load(), {"rank-00001.safetensors", "is a symbolic link"});
  // `latest` may not point anywhere else either.
  fs::remove(s.dir + "/latest");
  fs::create_symlink("/etc/passwd", s.dir + "/latest");
  expect_refused(s.load(), {"latest", "is a symbolic link"});
  fs::remove(s.dir + "/latest");
  ASSERT_TRUE(runtime::io::write_file_atomic(s.dir + "/latest", "root:x:0:0:root:/root:/bin/bash\n").is_ok());
  expect_refused(s.load(), {"latest", "is not a step directory name"});
}

TEST(HostileCheckpoint, HugeOffsetsAndLengthsAreRefusedBeforeAnyRead) {
  Saved s;
  const auto pristine = s.index();
  for (const auto& [field, value] : std::vector<std::pair<std::string, std::int64_t>>{
           {"length", std::int64_t{1} << 62}, {"offset", std::int64_t{1} << 62}, {"length", -1}, {"offset", -5}}) {
    auto j = pristine;
    const std::string key = j["tensors"].begin().key();
    j["tensors"][key]["pieces"][0][field] = value;
    s.forge(j);
    expect_refused(s.load(), {"index.json: tensor '" + key + "'", field});
  }
  auto j = pristine;
  const std::string key = j["tensors"].begin().key();
  j["tensors"][key]["shape"] = {std::int64_t{1} << 40, std::int64_t{1} << 40};
  s.forge(j);
  expect_refused(s.load(), {"more than 2^40 elements"});
}

TEST(HostileCheckpoint, PiecesMustTileTheirTensorExactly) {
  Saved s;
  auto j = s.index();
  // A parameter split across both ranks: duplicate its first piece (overlap), then drop it (gap).
  std::string key;
  for (const auto& [k, t] : j["tensors"].items())
    if (t["pieces"].size() >= 2) key = k;
  ASSERT_FALSE(key.empty());
  auto overlap = j;
  overlap["tensors"][key]["pieces"].push_back(overlap["tensors"][key]["pieces"][0]);
  s.forge(overlap);
  expect_refused(s.load(), {key, "do not tile it: overlap"});
  auto gap = j;
  gap["tensors"][key]["pieces"].erase(0);
  s.forge(gap);
  expect_refused(s.load(), {key, "do not tile it: gap"});
}

TEST(HostileCheckpoint, AnyEditOfTheIndexOrAFileIsAChecksumMismatch) {
  Saved s;
  // An edited step count (not resealed).
  std::string text = *runtime::io::read_file(s.step() + "/index.json");
  text.replace(text.find("\"step\": 1"), 9, "\"step\": 7");
  ASSERT_TRUE(runtime::io::write_file_atomic(s.step() + "/index.json", text).is_ok());
  expect_refused(s.load(), {"index.json: checksum mismatch"});
}

TEST(HostileCheckpoint, OneFlippedBitInShardDataIsCaught) {
  Saved s;
  const std::string file = s.step() + "/rank-00001.safetensors";
  std::string bytes = *runtime::io::read_file(file);
  bytes[bytes.size() - 3] = static_cast<char>(bytes[bytes.size() - 3] ^ 0x01);
  ASSERT_TRUE(runtime::io::write_file_atomic(file, bytes).is_ok());
  expect_refused(s.load(), {"rank-00001.safetensors: checksum mismatch"});
}

TEST(HostileCheckpoint, SwappedLocalRankFilesAreCaught) {
  Saved s(StateDictType::kLocal);
  const std::string a = s.step() + "/local-rank-00000.safetensors", b = s.step() + "/local-rank-00001.safetensors";
  fs::rename(a, s.step() + "/swap");
  fs::rename(b, a);
  fs::rename(s.step() + "/swap", b);
  expect_refused(s.load(), {"local-rank-0000", "checksum mismatch"});
}

TEST(HostileCheckpoint, AnIndexOfAnEarlierFormatIsRefusedWithWhatToDo) {
  Saved s;
  auto j = s.index();
  j["version"] = 1;
  s.forge(j);
  expect_refused(s.load(), {"version 1", "save the checkpoint again"});
}

TEST(CheckpointWriters, ASecondWriterIsLockedOut) {
  Saved s;
  // Another process's lock, as flock sees it: a separate open file description.
  const int fd = ::open((s.dir + "/.lock").c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  const std::string other = fresh_dir();
  fs::create_directories(other);
  const int other_fd = ::open((other + "/.lock").c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_EQ(::flock(other_fd, LOCK_EX | LOCK_NB), 0);
  FsdpCase c;
  c.world_size = 1;
  c.options.global_batch = 2;
  const auto results = sim::World(sim::WorldOptions{}).run([&](sim::RankContext& ctx) -> Status {
    SHARDLAB_ASSIGN_OR_RETURN(auto t, FsdpTrainer::create(ctx.comm, ctx.device, ctx.clock, c.options));
    return runtime::fsdp::save_checkpoint(t->model(), other, 1);
  });
  expect_refused(results[0].status,
                 {"another run is writing checkpoints here", "give each run its own checkpoint.dir"});
  EXPECT_FALSE(fs::exists(other + "/step-00000001"));
  ::close(other_fd);
  ::close(fd);
  fs::remove_all(other);
}

TEST(CheckpointWriters, AStepIsReplacedWholeAndLeftoversAreCleaned) {
  Saved s;
  // A stale file in the step a new save replaces, and what killed saves leave behind.
  std::ofstream(s.step() + "/stale.bin") << "old";
  std::ofstream(s.dir + "/latest.tmp.99999") << "x";
  fs::create_directories(s.dir + "/.step-00000009.partial");
  std::ofstream(s.dir + "/.step-00000009.partial/rank-00000.safetensors") << "half";
  sim::WorldOptions wo;
  wo.world_size = 2;
  for (const auto& r : sim::World(wo).run([&](sim::RankContext& ctx) -> Status {
         SHARDLAB_ASSIGN_OR_RETURN(auto t, FsdpTrainer::create(ctx.comm, ctx.device, ctx.clock, s.c.options));
         return runtime::fsdp::save_checkpoint(t->model(), s.dir, 1);
       })) {
    ASSERT_THAT(r.status, IsOk());
  }
  EXPECT_FALSE(fs::exists(s.step() + "/stale.bin"));
  EXPECT_FALSE(fs::exists(s.dir + "/latest.tmp.99999"));
  EXPECT_FALSE(fs::exists(s.dir + "/.step-00000009.partial"));
  EXPECT_FALSE(s.index()["files"].contains("stale.bin"));
  EXPECT_TRUE(s.load().is_ok());
}

}  // namespace
}  // namespace shardlab::property
