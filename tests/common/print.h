// Readable gtest output for ferry::Code (found by argument-dependent lookup).
#pragma once

#include <ostream>

#include "transport/status.h"

namespace ferry {

inline void PrintTo(Code code, std::ostream* os) {
  *os << CodeName(code);
}

}  // namespace ferry
