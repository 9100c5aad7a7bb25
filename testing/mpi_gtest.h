// What a gtest binary run under mpiexec needs, one rank per process (the mpi and hccl
// communicator tests): the world's size, output only from rank 0 with the other ranks'
// failures prefixed by their rank, and one exit code for the whole world.
//
// Use in main, after MPI is initialized and ::testing::InitGoogleTest ran:
//   shardlab::testlib::print_only_failures_off_rank_0(rank);
//   return shardlab::testlib::worst_over_ranks(RUN_ALL_TESTS(), "comm_mpi_test");
#pragma once

namespace shardlab::testlib {

// MPI_COMM_WORLD's size.
int mpi_world_size();

// On ranks other than 0, replaces gtest's printer (and XML output) with one that prints
// only failures, as "[rank N] Suite.Test: file:line: Failure\n<message>". Rank 0 keeps
// gtest's usual output.
void print_only_failures_off_rank_0(int rank);

// The worst (largest) of every rank's `mine`, on every rank; rank 0 says when only other
// ranks failed (naming `program`). Nobody returns — which would make mpiexec kill the
// others — before rank 0 has reported. Collective over MPI_COMM_WORLD.
int worst_over_ranks(int mine, const char* program);

}  // namespace shardlab::testlib
