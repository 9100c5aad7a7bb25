#include "testing/mpi_gtest.h"

#include <mpi.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

namespace shardlab::testlib {

namespace {

class RankFailurePrinter final : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  // gtest holds its lock while calling OnTestPartResult, so the test's name is recorded
  // here rather than asked for there.
  void OnTestStart(const ::testing::TestInfo& info) override {
    test_ = std::string(info.test_suite_name()) + "." + info.name();
  }
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s: %s:%d: Failure\n%s\n", rank_, test_.c_str(),
                 result.file_name() ? result.file_name() : "?", result.line_number(), result.message());
  }

 private:
  int rank_;
  std::string test_;
};

}  // namespace

int mpi_world_size() {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

void print_only_failures_off_rank_0(int rank) {
  if (rank == 0) return;
  ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
  delete listeners.Release(listeners.default_result_printer());
  delete listeners.Release(listeners.default_xml_generator());
  listeners.Append(new RankFailurePrinter(rank));
}

int worst_over_ranks(int mine, const char* program) {
  int worst = mine;
  MPI_Allreduce(&mine, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0 && mine == 0 && worst != 0) {
    std::fprintf(stderr, "%s: tests failed on other ranks (see the [rank N] lines above)\n", program);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return worst;
}

}  // namespace shardlab::testlib
