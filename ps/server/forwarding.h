// What a replicating server keeps per forward and per chain neighbour (server_replication.cc,
// server_repair.cc; docs/ps.md "Replicas"). Plain records owned by one Server and touched only on
// its serve thread: no locking, no behaviour beyond TakePushFields.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <vector>

#include "ps/store/range_allocator.h"
#include "ps/wire/protocol.h"
#include "transport/transport.h"

namespace ferry::ps::forwarding {

struct Forward {  // a push (or a row record) on its way down a chain from here
  uint32_t shard = 0, worker = 0, clock = 0;
  uint64_t push_id = 0;
  uint16_t table = 0;
  uint8_t flags = 0;
  uint32_t num_keys = 0, dim = 0;
  uint64_t payload_at = 0;  // keys and gradients: offset in the ring block (block_region_)
  uint64_t payload_bytes = 0;
  // Whom to answer once the successor acknowledged: worker `from` (its request `from_seq`
  // at ring offset `from_offset`, a push or a push-pull), or predecessor server `from`
  // (forward seq `from_seq`).
  bool from_worker = true;
  RequestType type = RequestType::kPush;
  uint32_t from = 0, from_seq = 0;
  uint64_t from_offset = 0;
  // A row record (flags & kForwardRecord): its keys and ops, copied into the record scratch
  // (record_at, block offset) when posted; from_self: this server (the head) made it and
  // answers nobody.
  std::vector<uint8_t> record;
  uint64_t op_id = 0;
  int64_t record_at = -1;
  bool from_self = false;
  // Downstream: where it went.
  int successor = -1;
  uint32_t lane = 0;  // Downstream::lanes
  uint8_t copy = 0;   // kForwardCopy: its CopyKind (the payload is in `record`)
  uint32_t seq = 0;
  uint64_t ring_at = 0, ring_bytes = 0;  // space in the successor's forward ring
  int64_t header_at = -1;                // scratch header (block offset), until written
  Segment segs[2];                       // header, payload: borrowed by the posted write
  bool posted = false;
  bool written = false;    // the write completed here
  bool acked = false;      // the successor acknowledged it
  bool abandoned = false;  // re-sent under another id after its successor died

  // The push's fields as a worker's request or a predecessor's forward carries them (the
  // two headers name them alike).
  template <typename Header>
  void TakePushFields(const Header& h) {
    clock = h.clock;
    push_id = h.push_id;
    table = h.table;
    flags = h.flags;
    num_keys = h.num_keys;
    dim = h.dim;
    payload_bytes = h.payload_bytes;
  }
};
struct Lane {  // one forward ring of a successor's that this server writes
  std::unique_ptr<RemoteKey> ring;
  RangeAllocator space;
};
struct Held {  // BSP: ring space of a forward the successor applies at the clock boundary
  uint32_t clock = 0, lane = 0;
  uint64_t at = 0, bytes = 0;
};
struct Downstream {  // a successor: this server forwards to it
  std::shared_ptr<Endpoint> ep;
  // Its forward ring for this server (lane 0); a spare's: its ring of each slot it may adopt
  // (lane = slot, imported from spare_rings when it adopts: chain.h "Repairs").
  std::vector<Lane> lanes;
  std::vector<RemoteRegion> spare_rings;
  uint32_t next_seq = 0;
  std::deque<uint64_t> queue;             // forward ids not yet posted, in order
  std::map<uint32_t, uint64_t> inflight;  // seq -> forward id, posted and not acknowledged
  std::deque<Held> held;
  bool suspected = false;
};
struct Upstream {  // a predecessor: it forwards to this server
  std::shared_ptr<Endpoint> ep;
  std::unique_ptr<RemoteKey> ack;  // its ack word
  // Its forward ring here is pred_rings_[distance - 1] (an elastic job's distance is
  // Server::ElasticRing; a spare's 0: each forward's imm names the ring, ForwardImm).
  uint32_t distance = 0;
  uint32_t next_seq = 0;
  bool suspected = false;
};

}  // namespace ferry::ps::forwarding
