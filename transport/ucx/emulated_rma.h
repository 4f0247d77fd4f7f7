// Path (3) of the ucx backend: Ferry's own one-sided protocol over active messages, for
// endpoints without a same-host engine or an rc/dc verbs RMA lane (UCX over tcp, shm without
// cma, self). Implemented by UcxTransport's methods in emulated_rma.cc; wire layout in wire.h.
//
// Why not UCX's own software RMA emulation (ucp/rma/rma_sw.c): its target writes to any address
// the peer names, and when its ack cannot reach a dead peer UCX aborts the process
// ("ucp_request.inl:346 Fatal: unexpected error: Endpoint timeout" from ucp_put_handler).
//
// The protocol:
//   initiator  one kAmRmaRequest per Op, eager and whole (UCP_AM_SEND_FLAG_EAGER): RmaHeader
//              (req id, region addr + epoch + key digest, kind, notify/imm), the packed segment
//              table (common/segment_codec.h: ~3 bytes a scattered row; runs merged by
//              common::ForEachMergedRun), and a write's data as a UCP_DATATYPE_IOV straight
//              from the local region, one iov entry per locally adjacent stretch (rows packed
//              in the source are one entry whatever their targets): nothing is packed. The Op
//              completes when both the request's send and the reply are done, or with the
//              endpoint's status when the endpoint fails.
//   target     finds ITS registration by epoch and address, decodes the table (hostile: counts,
//              sums and varints checked), checks the key digest and the whole table with
//              common::CheckSegmentsInRegion (rights, every segment's bounds) before touching
//              memory, scatters a write in (common::ScatterRow, out of UCX's receive buffer: no
//              rendezvous),
//              queues the kNotify of a kOpNotify write, and answers kAmRmaReply: status code and
//              error text, or a read's data as a UCP iov straight from the region (adjacent rows
//              merged; no gather buffer). Replies go out after worker progress, never from inside
//              a UCX callback; a reply that cannot be sent (dead peer) is dropped through its
//              completion callback, never an abort. Requests that arrive while our side of the
//              handshake is still running are copied (up to kMaxDeferred) and served once it is
//              done.
//   memory     a region counts the read replies sending from it; ~UcxMemoryRegion turns queued
//              ones into kStale errors and waits for those UCX holds (up to peer_timeout, then
//              fails their endpoints), so UCX never reads freed memory.
//
// Threading: everything runs under the transport's mu_ (handlers inside ucp_worker_progress).
#pragma once

#include <ucp/api/ucp.h>

#include <cstdint>
#include <vector>

#include "transport/transport.h"
#include "transport/ucx/wire.h"

namespace ferry::ucx {

class UcxTransport;
class UcxMemoryRegion;

// A reply owed to a request. A read's payload is NOT copied: `iov` points into the target
// region (adjacent segments merged) and the reply is sent with a UCP iov datatype, so `region`
// counts it in `replies_in_flight_` until UCX is done with the memory (OnReplySent or a failed
// send); ~UcxMemoryRegion waits for that count. `data` carries only an error text.
// Pooled by the transport (TakeReply / ReleaseReply): a served request allocates nothing once
// warm. While UCX sends it, it is linked in the transport's list of replies in flight.
struct PendingReply {
  UcxTransport* t = nullptr;
  uint64_t ep_id = 0;
  RmaReplyHeader header{};
  std::vector<uint8_t> data;
  std::vector<ucp_dt_iov_t> iov;
  UcxMemoryRegion* region = nullptr;  // set while it holds a count on the region
  PendingReply* prev = nullptr;       // the list of replies UCX is sending
  PendingReply* next = nullptr;
  bool sending = false;
  ~PendingReply();
};

// A kAmRmaRequest copied out of UCX because its endpoint was still handshaking here.
struct DeferredRequest {
  RmaHeader header{};
  std::vector<uint8_t> data;
};

// The initiator's half of an Op on this path (part of OpState): request header, segment table,
// the write's iov, the read's local segments to scatter the reply into, and which halves are
// still outstanding. The request id names the Op's pool slot and generation (ReqId), so a reply
// finds its Op without a map, and a stale or forged id finds nothing.
struct EmulatedOp {
  RmaHeader rma{};
  std::vector<Segment> runs;   // the merged runs (their remote side goes in `table`)
  std::vector<uint8_t> table;  // the packed table sent first in the payload
  std::vector<ucp_dt_iov_t> iov;
  std::vector<Segment> local_segs;  // read: (local offset, length) per locally adjacent stretch
  uint8_t* local_base = nullptr;
  bool send_pending = false;
  bool reply_pending = false;

  // Back to the pooled state, keeping the vectors' capacity (emulated_rma.cc).
  void Reset();
};

}  // namespace ferry::ucx
