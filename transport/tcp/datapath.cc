// tcp data path, send side: the ownership hook and PostValidated (framing, matching receives
// against buffered messages) and
// FlushTx, which gathers frames straight from registered memory with sendmsg().
//
// Steady state allocates nothing: queues are Rings, the iovec array lives in the Conn, and only
// error texts, unexpected messages and first-time growth allocate.
#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstring>
#include <typeinfo>

#include "transport/common/segment_codec.h"
#include "transport/tcp/tcp_transport.h"

namespace ferry::tcp {
namespace {

uint64_t SumLengths(const Segment* segs, size_t n) {
  uint64_t total = 0;
  for (size_t i = 0; i < n; ++i) total += segs[i].length;
  return total;
}

}  // namespace

// ---- Post ----------------------------------------------------------------------------------

// Reads only what is fixed while the objects live (a handle's transport_ and conn_ change only
// in ~TcpTransport; a Conn's peer limits are set before its handle exists), so no lock. The
// classes are final: an exact typeid match replaces dynamic_cast (~90 instructions each, three
// per Op).
Status TcpTransport::CheckOwnership(const Op& op, size_t index) const {
  // Built only on error: the happy path must not allocate.
  auto who = [index] { return "op " + std::to_string(index); };
  const TcpEndpoint* ep = nullptr;
  if (op.ep != nullptr) {
    if (typeid(*op.ep) != typeid(TcpEndpoint)) return ForeignError(op, index, Foreign::kEndpoint);
    ep = static_cast<const TcpEndpoint*>(op.ep);
    if (ep->transport_ != this || ep->conn_ == nullptr) {
      return ForeignError(op, index, Foreign::kEndpoint);
    }
  }
  if (op.local == nullptr || typeid(*op.local) != typeid(TcpRegion) ||
      static_cast<const TcpRegion*>(op.local)->transport_ != this) {
    return ForeignError(op, index, Foreign::kLocalRegion);
  }
  if (op.type == OpType::kRecv) return Status::Ok();
  if (op.type == OpType::kSend)
    return CheckPeerMessageLimit(op, index, ep->conn_->peer_max_message);
  const auto* key = static_cast<const TcpRemoteKey*>(op.remote);
  if (op.remote == nullptr || typeid(*op.remote) != typeid(TcpRemoteKey) ||
      key->conn_ != ep->conn_) {
    return ForeignError(op, index, Foreign::kRemoteKey);
  }
  const Conn& c = *ep->conn_;
  const bool sparse = op.type == OpType::kSparseWrite || op.type == OpType::kSparseRead;
  const uint64_t bytes = sparse ? SumLengths(op.segments, op.num_segments) : op.length;
  if (bytes > c.peer_max_message) {
    return InvalidArgument(who() + ": " + std::to_string(bytes) +
                           " bytes exceed the peer's max_message_size of " +
                           std::to_string(c.peer_max_message));
  }
  if (sparse && op.num_segments > c.peer_max_segments) {
    return InvalidArgument(who() + ": " + std::to_string(op.num_segments) +
                           " segments exceed the peer's max_segments of " +
                           std::to_string(c.peer_max_segments));
  }
  return Status::Ok();
}

Status TcpTransport::PostValidated(std::span<const Op> ops) {
  Lock lk(mu_);
  const size_t before = completions_.size();
  touched_.clear();
  for (const Op& op : ops) {
    PostOne(op);
    if (op.ep != nullptr && op.type != OpType::kRecv) {
      Conn* c = static_cast<TcpEndpoint*>(op.ep)->conn_;
      if (touched_.empty() || touched_.back() != c) touched_.push_back(c);
    }
  }
  // One sendmsg per connection for the whole batch (FlushTx is idempotent for repeats). A socket
  // known to be full (EPOLLOUT armed) is left to the progress engine: retrying it here would
  // rebuild a long iovec list only to get EAGAIN.
  for (Conn* c : touched_) {
    if (c->state == Conn::State::kOpen && !c->want_out) FlushTx(*c);
  }
  if (completions_.size() != before) cv_.notify_all();
  return Status::Ok();
}

TxItem& TcpTransport::PushFrame(Conn& c, const FrameHeader& h) {
  TxItem& item = c.tx.push();
  EncodeHeader(h, item.header);
  return item;
}

void TcpTransport::PostOne(const Op& op) {
  if (op.type == OpType::kRecv) {
    PostRecv(op);
    return;
  }
  Conn& c = *static_cast<TcpEndpoint*>(op.ep)->conn_;
  if (c.state != Conn::State::kOpen) {
    Complete(ErrorCompletion(op.context, op.type, op.ep, c.status));
    return;
  }
  if (op.type == OpType::kSend) {
    FrameHeader h;
    h.kind = FrameKind::kMessage;
    h.length = op.length;
    TxItem& item = PushFrame(c, h);
    item.data.SetContig(op.local->data() + op.local_offset, op.length);
    item.complete_send = true;
    item.context = op.context;
    item.bytes = op.length;
    return;
  }
  PostRequest(c, op);
}

// A one-sided op: its PendingOp (awaiting the reply), then its frame: header, segment table
// (sparse) and payload (writes), all sent straight from where they are.
void TcpTransport::PostRequest(Conn& c, const Op& op) {
  uint8_t* local = op.local->data();
  const auto* key = static_cast<const TcpRemoteKey*>(op.remote);
  const bool sparse = op.type == OpType::kSparseWrite || op.type == OpType::kSparseRead;
  const uint64_t bytes = sparse ? SumLengths(op.segments, op.num_segments) : op.length;
  PendingOp& p = c.pending.push();
  p.req_id = c.next_req++;
  p.type = op.type;
  p.context = op.context;
  p.bytes = bytes;
  p.local = local;
  p.local_offset = op.local_offset;
  p.segs = op.segments;
  p.nsegs = op.num_segments;

  FrameHeader h = RequestHeader(op, p.req_id, key->key_, bytes);
  std::vector<uint8_t> packed;
  if (sparse && op.num_segments <= 0xffffffffu) PackTable(c, op, &h, &packed);
  TxItem& item = PushFrame(c, h);
  if (h.flags & kFramePackedTable) {
    item.packed = std::move(packed);
    item.table = item.packed.data();
    item.table_len = item.packed.size();
  } else if (sparse) {
    // The caller's Segment array, sent as is (layout pinned in wire.h).
    item.table = reinterpret_cast<const uint8_t*>(op.segments);
    item.table_len = op.num_segments * kWireSegmentSize;
  }
  if (op.type == OpType::kWrite) item.data.SetContig(local + op.local_offset, op.length);
  if (op.type == OpType::kSparseWrite) {
    item.data.SetSegments(local, op.segments, op.num_segments, false, bytes);
    // Small scattered rows: copied into the tx scratch and sent as one buffer (FlushTx).
    item.gather =
        ShouldGatherSource(op.segments, op.num_segments, bytes, params_.gather_max_row);
  }
}

// The packed table (segment_codec.h): a few bytes a row instead of 24, in a recycled buffer. Used
// (flag and arg set in *h) when its size fits the header's 32 bits; else the caller's Segment
// array is sent.
void TcpTransport::PackTable(Conn& c, const Op& op, FrameHeader* h, std::vector<uint8_t>* packed) {
  if (!c.packed_pool.empty()) {
    *packed = std::move(c.packed_pool.back());
    c.packed_pool.pop_back();
  }
  const size_t bytes =
      common::EncodePackedTable(std::span<const Segment>(op.segments, op.num_segments), packed);
  if (bytes <= 0xffffffffu) {
    h->flags |= kFramePackedTable;
    h->arg = op.num_segments | (uint64_t{bytes} << 32);
  }
}

void TcpTransport::DeliverUnexpected(Conn& c, std::vector<uint8_t>& msg, const PostedRecv& r) {
  if (msg.size() > r.capacity) {
    Completion e =
        ErrorCompletion(r.context, OpType::kRecv, c.handle,
                        OutOfRange("message of " + std::to_string(msg.size()) +
                                   " bytes does not fit the receive buffer of " +
                                   std::to_string(r.capacity) + " bytes; it was discarded"));
    e.bytes = msg.size();
    Complete(std::move(e));
    return;
  }
  if (!msg.empty()) std::memcpy(r.dst, msg.data(), msg.size());
  Complete(DoneCompletion(r.context, OpType::kRecv, c.handle, msg.size()));
}

void TcpTransport::PostRecv(const Op& op) {
  PostedRecv r{op.context, op.local->data() + op.local_offset, op.length};
  auto take = [&](Conn& c) {
    std::vector<uint8_t> msg = std::move(c.unexpected.front());
    c.unexpected.pop_front();
    c.unexpected_bytes -= msg.size();
    DeliverUnexpected(c, msg, r);
  };
  if (op.ep != nullptr) {
    Conn& c = *static_cast<TcpEndpoint*>(op.ep)->conn_;
    if (c.state != Conn::State::kOpen) {
      Complete(ErrorCompletion(op.context, OpType::kRecv, op.ep, c.status));
    } else if (!c.unexpected.empty()) {
      take(c);
    } else {
      c.recvs.push(r);
    }
    return;
  }
  for (auto& [id, cp] : conns_) {
    if (cp->state == Conn::State::kOpen && !cp->unexpected.empty()) {
      take(*cp);
      return;
    }
  }
  shared_recvs_.push(r);
}

// ---- Send side -----------------------------------------------------------------------------

void TcpTransport::FlushTx(Conn& c) {
  if (!c.fd || c.state == Conn::State::kConnecting) return;
  for (;;) {
    size_t n = 0;
    uint64_t want = 0;
    if (c.hs_out_done < c.hs_out.size()) {
      c.iov[n++] = {c.hs_out.data() + c.hs_out_done, c.hs_out.size() - c.hs_out_done};
      want += c.hs_out.size() - c.hs_out_done;
    }
    for (size_t i = 0; i < c.tx.size() && n < kMaxIov; ++i) {
      TxItem& item = c.tx[i];
      if (item.gather) {
        if (i > 0) break;  // it gathers through the one tx scratch: only from the front
        PrepareGather(c, item);
      }
      const uint64_t before = want;
      n += item.Fill(c.iov + n, kMaxIov - n, &want);
      if (item.gather) break;  // its next chunk is gathered once this one has gone
      // An item Fill left partly out (Cursor::Fill stops at kFillBytes) must end the gather:
      // the next item's header would otherwise be sent in the middle of this one's payload.
      if (want - before < item.left()) break;
    }
    if (n == 0) {
      SetWantOut(c, false);
      return;
    }
    msghdr m{};
    m.msg_iov = c.iov;
    m.msg_iovlen = n;
    const ssize_t w = sendmsg(c.fd.get(), &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        SetWantOut(c, true);
        return;
      }
      const int err = errno;
      Fail(c, err == EPIPE || err == ECONNRESET
                  ? PeerFailure("peer closed the connection (" + c.peer_address + ": " +
                                std::strerror(err) + ")")
                  : IoError("tcp send to " + c.peer_address, err));
      return;
    }
    c.last_tx = Clock::now();
    uint64_t left = static_cast<uint64_t>(w);
    if (c.hs_out_done < c.hs_out.size()) {
      const uint64_t h = std::min<uint64_t>(left, c.hs_out.size() - c.hs_out_done);
      c.hs_out_done += h;
      left -= h;
      if (c.hs_out_done == c.hs_out.size()) {
        c.hs_out.clear();
        c.hs_out_done = 0;
      }
    }
    while (left > 0) {
      TxItem& front = c.tx.front();
      left -= front.Advance(left);
      if (!front.done()) break;
      TxItem item = c.tx.pop();
      OnTxDone(c, item);
    }
    if (static_cast<uint64_t>(w) < want) {
      SetWantOut(c, true);
      return;
    }
  }
}

void TcpTransport::PrepareGather(Conn& c, TxItem& item) {
  if (item.chunk_off < item.chunk_len || item.data.remaining == 0) return;
  if (c.tx_scratch.empty()) c.tx_scratch.resize(kScratchSize);
  item.chunk = c.tx_scratch.data();
  item.chunk_len = item.data.GatherOut(c.tx_scratch.data(), c.tx_scratch.size());
  item.chunk_off = 0;
}

void TcpTransport::OnTxDone(Conn& c, TxItem& item) {
  if (item.complete_send)
    Complete(DoneCompletion(item.context, OpType::kSend, c.handle, item.bytes));
  if (item.pin_key != 0) Unpin(item.pin_key);
  if (item.owned_table.capacity() > 0) c.table_pool.push_back(std::move(item.owned_table));
  if (item.packed.capacity() > 0) {
    item.packed.clear();
    c.packed_pool.push_back(std::move(item.packed));
  }
}

void TcpTransport::QueueResponse(Conn& c, uint64_t req_id, const Status& s) {
  FrameHeader h;
  h.kind = FrameKind::kResponse;
  h.req_id = req_id;
  h.imm = static_cast<uint32_t>(s.code());
  if (s.ok()) {
    PushFrame(c, h);
    return;
  }
  std::string text = s.message().substr(0, kMaxErrorText);
  h.length = text.size();
  TxItem& item = PushFrame(c, h);
  item.data_is_text = true;
  item.text = std::move(text);
}

void TcpTransport::QueueHeartbeat(Conn& c) {
  PushFrame(c, FrameHeader{});
}

}  // namespace ferry::tcp
