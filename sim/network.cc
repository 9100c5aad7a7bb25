#include "sim/network.h"

#include <cstdio>
#include <vector>

namespace shardlab::sim {

namespace {

class AlphaBetaRing final : public NetworkCostModel {
 public:
  explicit AlphaBetaRing(NetworkModel net) : net_(net) {}

  CollectiveTiming collective(const CollectiveQuery& q) const override {
    const std::vector<Nanos> arrivals(q.arrivals.begin(), q.arrivals.end());
    const bool ring = q.kind == runtime::comm::OpKind::kAllGather || q.kind == runtime::comm::OpKind::kReduceScatter ||
                      q.kind == runtime::comm::OpKind::kAllReduce;
    return {collective_completion_times(q.kind, arrivals, q.bytes, net_),
            ring ? "ring" : (q.kind == runtime::comm::OpKind::kBroadcast ? "binomial_tree" : "dissemination")};
  }

  Nanos message(int, int, std::int64_t bytes, Nanos start) const override { return start + net_.message_time(bytes); }

  std::string describe() const override {
    char buf[128];
    std::snprintf(buf, sizeof buf, "alpha-beta ring, %.3g us latency, %.3g GB/s per link",
                  static_cast<double>(net_.latency_ns) / 1e3, net_.bandwidth_bytes_per_s / 1e9);
    return buf;
  }

 private:
  NetworkModel net_;
};

}  // namespace

std::shared_ptr<const NetworkCostModel> make_alpha_beta_ring(NetworkModel net) {
  return std::make_shared<const AlphaBetaRing>(net);
}

}  // namespace shardlab::sim
