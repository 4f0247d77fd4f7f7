// The replacement operator new behind CountAllocs (count_allocs.h): malloc underneath, counted
// while this thread counts.
#include "tests/common/count_allocs.h"

#include <cstdlib>
#include <new>

namespace {
thread_local bool g_counting = false;
thread_local uint64_t g_allocs = 0;
}  // namespace

void* operator new(size_t n) {
  if (g_counting) ++g_allocs;
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
// gcc cannot see that this file's operator new is malloc underneath.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, size_t) noexcept {
  std::free(p);
}
#pragma GCC diagnostic pop

namespace ferry::testing {

CountAllocs::CountAllocs() {
  g_allocs = 0;
  g_counting = true;
}

uint64_t CountAllocs::Stop() {
  g_counting = false;
  return g_allocs;
}

}  // namespace ferry::testing
