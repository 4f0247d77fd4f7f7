// The replacement operator new behind CountAllocs (count_allocs.h): malloc underneath, counted
// while this thread counts.
#include "tests/common/count_allocs.h"

#include <atomic>
#include <cstdlib>
#include <new>

namespace {
thread_local bool g_counting = false;
thread_local uint64_t g_allocs = 0;
std::atomic<bool> g_others_counting{false};
std::atomic<uint64_t> g_others{0};
}  // namespace

namespace {
void* Counted(size_t n) noexcept {
  if (g_counting) {
    ++g_allocs;
  } else if (g_others_counting.load(std::memory_order_relaxed)) {
    g_others.fetch_add(1, std::memory_order_relaxed);
  }
  return std::malloc(n == 0 ? 1 : n);
}
}  // namespace

// Every unaligned form, plain and array, throwing and nothrow: a form left to the runtime
// (ASan's nothrow new, say) would hand its memory to this file's delete, which frees with free().
void* operator new(size_t n) {
  if (void* p = Counted(n)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n) {
  if (void* p = Counted(n)) return p;
  throw std::bad_alloc();
}
void* operator new(size_t n, const std::nothrow_t&) noexcept {
  return Counted(n);
}
void* operator new[](size_t n, const std::nothrow_t&) noexcept {
  return Counted(n);
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
void operator delete[](void* p) noexcept {
  std::free(p);
}
void operator delete[](void* p, size_t) noexcept {
  std::free(p);
}
void operator delete(void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}
void operator delete[](void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}
#pragma GCC diagnostic pop

namespace ferry::testing {

CountAllocs::CountAllocs() {
  g_allocs = 0;
  g_others.store(0);
  g_others_counting.store(true);
  g_counting = true;
}

uint64_t CountAllocs::Stop() {
  g_counting = false;
  g_others_counting.store(false);
  return g_allocs;
}

uint64_t CountAllocs::others() const {
  return g_others.load();
}

}  // namespace ferry::testing
