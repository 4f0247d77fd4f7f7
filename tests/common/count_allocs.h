// Counting allocations on the calling thread, for tests that claim a path allocates nothing. A
// binary that uses it links tests/common/count_allocs.cc, which replaces the global operator new
// (so it must be that binary's own source: never part of a library other tests link).
//
// Threading: the count is per thread; only the thread that counts is counted.
#pragma once

#include <cstdint>

namespace ferry::testing {

// operator new calls on this thread between construction and Stop() (or destruction), and on
// every other thread meanwhile (others(): a server's or a progress thread's, in-process jobs).
// One counter at a time.
class CountAllocs {
 public:
  CountAllocs();
  ~CountAllocs() { Stop(); }
  CountAllocs(const CountAllocs&) = delete;
  CountAllocs& operator=(const CountAllocs&) = delete;
  // Stops counting and returns this thread's count.
  uint64_t Stop();
  // The other threads' count (final after Stop()).
  uint64_t others() const;
};

}  // namespace ferry::testing
