// A test binary that links tests/common/counting_allocator.cc replaces the
// global operator new/delete with malloc/free-based versions that count
// every allocation in the process (all threads). Used by the tests that
// check "no heap allocation per step in steady state".
#ifndef PDSERVE_TESTS_COMMON_COUNTING_ALLOCATOR_H_
#define PDSERVE_TESTS_COMMON_COUNTING_ALLOCATOR_H_

#include <cstdint>

namespace pdserve::test {

// Number of operator new calls (all forms) since the process started.
int64_t AllocationCount();

}  // namespace pdserve::test

#endif  // PDSERVE_TESTS_COMMON_COUNTING_ALLOCATOR_H_
