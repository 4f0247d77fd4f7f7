// ps/store: the memory a parameter server keeps its parameters in. The bottom layer of ps/: it
// includes nothing else from ps/ (only transport/transport.h and transport/status.h).
//
//   array_hash_map.h   ArrayHashMap: feature id -> fixed-width row in one contiguous, registered
//                      buffer (the rows a pull is served from and a push is applied to in place);
//                      snapshots of it (snapshot.cc), its registration (table_transport.cc)
//   hash_index.h       the key -> slot index under it
//   mapped_buffer.h    mmap'd buffers grown with mremap or reserved address space
//   admission.h        which new keys get a row, and which rows are evicted
//   optimizer.h        the server-side optimizers' update of one row
//   range_allocator.h  first-fit ranges inside one registered region (worker arenas, server rings)
//
// Threading: single writer per table (see array_hash_map.h); nothing here takes a lock.
#pragma once

#include "ps/store/admission.h"
#include "ps/store/array_hash_map.h"
#include "ps/store/hash_index.h"
#include "ps/store/mapped_buffer.h"
#include "ps/store/optimizer.h"
#include "ps/store/range_allocator.h"
