// The same-host engine: one-sided transfers between two processes of one host (or two
// transports of one process) without the network stack and without the target's CPU, with the
// target-side checks an HCA would make. A backend uses it for peers its handshake proves local
// (today: ucx; see docs/architecture.md); nothing here knows a backend.
//
// The narrow interface, in three steps:
//   publish  the target keeps a RegionTable (region_table.h) of its live registrations: epoch,
//            address, length, rights, key digest, and the memfd of shareable memory. Its fd and
//            token travel in the handshake (HostIdentity, identity.h).
//   check    the initiator maps the peer's table read-only (Peer::Open) and, before every Op,
//            checks the descriptor against the target's own entry (PeerRegionTable::Check):
//            live epoch at that address, key digest, rights, every segment's bounds.
//   copy     then moves the bytes: memcpy through a mapping of the target's shareable memfd
//            (PeerMapping, made once per imported key), or cross-memory attach
//            (process_vm_writev/readv, up to IOV_MAX merged runs per call).
//
// Why not UCX's own cma/shm: UCX 1.13's cma transport cannot be used with peer error handling,
// so UCX would emulate put/get over active messages (two copies, the target's CPU; ~40-130 MB/s
// against ~1 GB/s here), one emulated put per row of a sparse list. The kernel checks nothing
// but ptrace rights, hence the table.
//
// Guarantee, the same as an HCA's: an Op whose check starts after the target's deregistration
// (RegionTable::Remove) returned is refused and touches nothing; an Op checked before may still
// land (the copy runs right after the check). A pid could in principle be reused after the peer
// dies; the backend's control connection fails the endpoint within one liveness interval, and
// the table's token no longer matches anything the new process publishes.
//
// Threading: a Peer is read-only after Open and may be used from any thread; a KeyState belongs
// to one imported key and is guarded by its transport. Transfer blocks only in the copy itself.
#pragma once

#include <sys/types.h>

#include <cstdint>

#include "transport/samehost/identity.h"
#include "transport/samehost/peer_mapping.h"
#include "transport/samehost/region_table.h"
#include "transport/status.h"
#include "transport/transport.h"

namespace ferry::samehost {

// What the initiator keeps per imported key.
struct KeyState {
  uint32_t slot = PeerRegionTable::kNoSlot;  // the region's slot in the peer's table (Import)
  PeerMapping mapping;                       // the target's shareable memory, mapped on first use
  bool mapping_failed = false;               // mapping it failed once: this key uses CMA
};

class Peer {
 public:
  Peer() = default;
  // The engine toward `peer`, when it shares our host and PID namespace, lets us read its memory
  // and published a table that we could map; an error otherwise (the backend then uses another
  // path for this peer: nothing could check the target's rules).
  static Result<Peer> Open(const HostIdentity& me, const HostIdentity& peer);

  bool valid() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  // The state of a newly imported descriptor. An epoch the table does not hold is still
  // imported (as an HCA would): its Ops fail with kStale at the check.
  KeyState Import(const RemoteRegion& desc) const;

  // Checks `op` (already through ValidateOp) against the target's table and moves its bytes.
  // `key` is KeyDigest(desc.rkey). Ok: *bytes moved. Errors: the check's (kStale,
  // kPermissionDenied, kOutOfRange); kOutOfRange when the target memory is no longer mapped;
  // kIoError; kPeerFailure when the peer process is gone (the caller fails its endpoint).
  Status Transfer(const Op& op, const RemoteRegion& desc, uint64_t key, KeyState* state,
                  uint64_t* bytes) const;

 private:
  // The target region mapped into this process, or nullptr (then CMA is used).
  uint8_t* SharedMapping(KeyState* state, const RegionEntry& entry) const;

  pid_t pid_ = 0;
  PeerRegionTable table_;
};

}  // namespace ferry::samehost
