#include "sim/engine/world.h"

#include <condition_variable>
#include <exception>
#include <mutex>
#include <new>
#include <system_error>
#include <thread>

#include "sim/engine/communicator.h"
#include "sim/engine/rendezvous.h"
#include "sim/models/device/device.h"

namespace shardlab::sim {

void World::Shared::maybe_resolve() {
  if (blocked < live || waiters.empty()) return;
  Waiter* victim = nullptr;
  for (Waiter* w : waiters) {
    if (w->work->done || w->forced) return;  // someone can still make progress
    if (!victim || w->deadline < victim->deadline ||
        (w->deadline == victim->deadline && w->world_rank < victim->world_rank)) {
      victim = w;
    }
  }
  victim->forced = true;
  cv.notify_all();
}

void World::Shared::complete(WorkState& w, Status s, Nanos at) {
  w.done = true;
  w.status = std::move(s);
  w.completion = at;
  w.pending.reset();
  cv.notify_all();
}

World::World(WorldOptions options) : options_(std::move(options)), shared_(std::make_shared<Shared>()) {
  SHARDLAB_CHECK_GT(options_.world_size, 0);
  shared_->network = options_.network_model ? options_.network_model : make_alpha_beta_ring(options_.network);
}

World::~World() = default;

std::vector<TraceEvent> World::trace(int rank) const {
  if (rank < 0 || rank >= static_cast<int>(traces_.size())) return {};
  return traces_[static_cast<std::size_t>(rank)]->events();
}

std::vector<RankResult> World::run(const std::function<Status(RankContext&)>& body) {
  const int n = options_.world_size;
  // Devices outlive every storage made on them: they are destroyed after the rendezvous
  // state (which may still hold tensors of operations that never completed).
  std::vector<std::unique_ptr<VirtualClock>> clocks;
  std::vector<std::unique_ptr<SimDevice>> devices;
  for (int r = 0; r < n; ++r) {
    clocks.push_back(std::make_unique<VirtualClock>());
    const double slow =
        r < static_cast<int>(options_.slowdown.size()) ? options_.slowdown[static_cast<std::size_t>(r)] : 1.0;
    devices.push_back(std::make_unique<SimDevice>(r, slow == 1.0 ? options_.device : options_.device.slowed_by(slow),
                                                  clocks.back().get()));
    devices.back()->set_emulated_dtype(options_.emulated_dtype);
    devices.back()->set_host_huge_pages(options_.host_huge_pages);
  }
  traces_.clear();
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->traces.assign(static_cast<std::size_t>(n), nullptr);
    if (options_.trace) {
      for (int r = 0; r < n; ++r) {
        traces_.push_back(std::make_unique<TraceRecorder>());
        devices[static_cast<std::size_t>(r)]->set_trace(traces_.back().get());
        shared_->traces[static_cast<std::size_t>(r)] = traces_.back().get();
      }
    }
  }
  auto group = std::make_shared<Group>();
  group->name = "world";
  for (int r = 0; r < n; ++r) group->world_ranks.push_back(r);
  group->next_seq.assign(static_cast<std::size_t>(n), 0);
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->live = n;
    shared_->blocked = 0;
    shared_->stream_tails.assign(static_cast<std::size_t>(n), {});
  }
  std::vector<RankResult> results(static_cast<std::size_t>(n));
  // The start gate: bodies wait until every thread exists, or learn that one could not be
  // created (then none runs: a partial world would wait for ranks that never come).
  enum class Gate { kWaiting, kGo, kAbort };
  std::mutex gate_mu;
  std::condition_variable gate_cv;
  Gate gate = Gate::kWaiting;
  // When a thread cannot be created: which rank, and why (no allocation until every
  // started thread is joined: the host is short of memory then).
  int failed_rank = -1;
  const char* why = "";
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(n));
  const auto body_of = [&](int r) {
    return [&, r]() {
      const auto ur = static_cast<std::size_t>(r);
      RankResult& out = results[ur];
      {
        std::unique_lock<std::mutex> lock(gate_mu);
        gate_cv.wait(lock, [&] { return gate != Gate::kWaiting; });
        if (gate == Gate::kAbort) return;  // World::run fills in its status
      }
      {
        SimCommunicator comm(shared_, group, r, clocks[ur].get(), options_.perturb_seed);
        RankContext ctx{r, n, *clocks[ur], comm, *devices[ur], *devices[ur]};
        try {
          out.status = body(ctx);
        } catch (const std::exception& e) {
          out.status = Status::internal("rank " + std::to_string(r) + " threw: " + e.what());
        }
        out.end_time = clocks[ur]->now();
      }
      std::lock_guard<std::mutex> lock(shared_->mu);
      --shared_->live;
      shared_->maybe_resolve();
      shared_->cv.notify_all();
    };
  };
  for (int r = 0; r < n && failed_rank < 0; ++r) {
    try {
      threads.emplace_back(body_of(r));
    } catch (const std::system_error&) {  // pthread_create failed (EAGAIN: no stack, no thread slot)
      failed_rank = r;
      why = "Resource temporarily unavailable";
    } catch (const std::bad_alloc&) {  // the thread's state could not be allocated
      failed_rank = r;
      why = "out of memory";
    }
  }
  {
    std::lock_guard<std::mutex> lock(gate_mu);
    gate = failed_rank < 0 ? Gate::kGo : Gate::kAbort;
  }
  gate_cv.notify_all();
  for (auto& t : threads) t.join();
  if (failed_rank >= 0) {
    threads.clear();
    threads.shrink_to_fit();
    const Status not_started =
        Status::unavailable("the host could not start a thread for simulated rank " + std::to_string(failed_rank) +
                            " of " + std::to_string(n) + " (" + why +
                            "), so no rank ran; run fewer ranks, or world.mode: timing (no threads per rank)");
    for (auto& r : results) r.status = not_started;
  }
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->sends.clear();
    shared_->recvs.clear();
    shared_->waiters.clear();
    shared_->stream_tails.clear();
  }
  group.reset();
  return results;
}

}  // namespace shardlab::sim
