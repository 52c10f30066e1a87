// main() of kiln_dist_tests: the same GoogleTest binary runs as one process
// (world size 1, the "single" group) or as every rank of `mpirun -np N`
// (tests/dist.cmake). Each rank runs every test; the tests' collectives match
// because every rank runs them in the same order.
#include <gtest/gtest.h>

#include <cstdio>

#include "dist/process_group.h"
#include "kiln.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  // One kiln thread per rank: the ranks share the machine's cores. Results do
  // not depend on the thread count (Note [Deterministic chunking]).
  kiln::set_num_threads(1);
  kiln::dist::ProcessGroupPtr pg = kiln::dist::init_process_group();
  std::printf("kiln_dist_tests: rank %d of %d (%s backend, timeout %g s)\n", pg->rank(), pg->size(),
              pg->backend().c_str(), pg->timeout_seconds());
  const int rc = RUN_ALL_TESTS();
  kiln::dist::destroy_process_group();
  return rc;
}
