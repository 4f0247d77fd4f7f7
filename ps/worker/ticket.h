// Ticket: the handle a worker's Pull, Push, PushPull or PushGradients returns (worker.h); Wait,
// Test, Rows and Release take it. A value type; a ticket is valid until released.
#pragma once

#include <cstdint>

namespace ferry::ps {

using Ticket = uint64_t;

}  // namespace ferry::ps
