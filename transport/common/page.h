// The system page size, for code that rounds mappings and registrations to pages. Thread-safe.
#pragma once

#include <unistd.h>

#include <cstddef>

namespace ferry::common {

inline size_t PageSize() {
  static const size_t page = [] {
    const long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? static_cast<size_t>(p) : size_t{4096};
  }();
  return page;
}

}  // namespace ferry::common
