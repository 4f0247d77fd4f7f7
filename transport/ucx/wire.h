// What the ucx backend puts on the wire itself, next to what UCX moves for it.
//
// Contract: plain layouts, little-endian hosts only (like UCX itself here); every field a peer
// sends is hostile until the receiving handler has checked it.
//
// Handshake transport_data (the Ferry handshake's opaque bytes, see connect.cc):
//   struct { u64 my_id_of_this_connection;           // the tag the peer sends to (Identity)
//            samehost::HostIdentity identity;        // 48 bytes, samehost/identity.h
//            u8 worker_address[]; }                  // ucp_worker_query, to the end
//
// Control connection after the handshake: one-byte frames (u32 LE length prefix, as the
// handshake frames): 'P' (ping) answered by 'O' (pong).
//
// Active messages (UCP_AM_FLAG_WHOLE_MSG, eager):
//   kAmNotify      header NotifyHeader, no payload           (paths 1 and 2 of ucx_transport.h)
//   kAmRmaRequest  header RmaHeader; payload: the packed segment table of num_segments entries
//                  (table_bytes bytes, transport/common/segment_codec.h: offsets in the target's
//                  region and lengths), then a write's data, segment after segment  (path 3)
//   kAmRmaReply    header RmaReplyHeader; payload: a read's data, or the error text (path 3)
#pragma once

#include <cstdint>

namespace ferry::ucx {

enum AmId : unsigned {
  kAmNotify = 1,
  kAmRmaRequest = 2,
  kAmRmaReply = 3,
};

struct NotifyHeader {
  uint64_t target_ep;  // the receiver's id of the endpoint
  uint64_t bytes;
  uint32_t imm;
  uint32_t reserved;
};

struct RmaHeader {
  uint64_t target_ep;    // the receiver's id of the endpoint
  uint64_t req_id;       // echoed in the reply
  uint64_t region_addr;  // RemoteRegion::addr of the target's region
  uint64_t epoch;        // RemoteRegion::epoch: names the registration
  uint64_t total;        // sum of the segment lengths
  uint64_t key;          // samehost::KeyDigest of the descriptor's rkey: must match
  uint32_t num_segments;
  uint8_t write;   // 1: write, 0: read
  uint8_t notify;  // 1: the target queues a kNotify completion after the write landed
  uint16_t reserved;
  uint32_t imm;
  uint32_t table_bytes;  // the packed table's size at the start of the payload
};

struct RmaReplyHeader {
  uint64_t target_ep;  // the receiver's id of the endpoint
  uint64_t req_id;
  uint64_t bytes;  // bytes moved (a read's payload length)
  uint32_t code;   // ferry::Code; non-zero: the payload is the error text
  uint32_t reserved;
};

static_assert(sizeof(NotifyHeader) == 24 && sizeof(RmaHeader) == 64 &&
              sizeof(RmaReplyHeader) == 32);

}  // namespace ferry::ucx
