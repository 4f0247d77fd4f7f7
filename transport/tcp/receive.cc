// tcp receive side: the per-connection state machine that reads frame headers into a small
// control buffer, validates them, and readv()s payloads straight into their destination (a
// posted receive, the target region at each segment, or the initiator's local segments).
#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstring>
#include <limits>

#include "transport/common/copy_row.h"
#include "transport/common/segment_check.h"
#include "transport/common/segment_codec.h"
#include "transport/tcp/tcp_transport.h"

namespace ferry::tcp {

// ---- Receive side --------------------------------------------------------------------------

void TcpTransport::SetDiscard(Conn& c, uint64_t n) {
  if (c.scratch.empty()) c.scratch.resize(kScratchSize);
  c.rx.dst.SetDiscard(c.scratch.data(), n);
}

void TcpTransport::ReadData(Conn& c) {
  Rx& rx = c.rx;
  ReadRound round;
  while (c.state == Conn::State::kOpen) {
    if (rx.phase == Rx::Phase::kHeader) {
      if (!ReadHeader(c, round)) break;
      continue;
    }
    if (!ReadPayload(c, round)) break;
    if (rx.dst.remaining > 0) continue;
    if (!OnBodyDone(c)) break;
  }
  if (c.state == Conn::State::kOpen && !c.tx.empty() && !c.want_out) FlushTx(c);
}

bool TcpTransport::ReadOk(Conn& c, ssize_t n) {
  if (n > 0) {
    c.last_rx = Clock::now();
    return true;
  }
  if (n == 0) {
    Fail(c, PeerFailure("peer closed the connection (" + c.peer_address + ")"));
  } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
    const int err = errno;
    Fail(c, err == ECONNRESET ? PeerFailure("peer closed the connection (" + c.peer_address +
                                            ": connection reset)")
                              : IoError("tcp receive from " + c.peer_address, err));
  }
  return false;
}

// A header already in the look-ahead is handled; otherwise the look-ahead is refilled with one
// recv(). False: stop reading this round.
bool TcpTransport::ReadHeader(Conn& c, ReadRound& round) {
  Rx& rx = c.rx;
  const size_t avail = rx.ctrl_end - rx.ctrl_begin;
  if (avail >= kHeaderSize) {
    rx.hdr = DecodeHeader(rx.ctrl + rx.ctrl_begin);
    rx.ctrl_begin += kHeaderSize;
    return OnHeader(c);
  }
  if (round.Spent()) return false;
  if (rx.ctrl_begin > 0) {
    std::memmove(rx.ctrl, rx.ctrl + rx.ctrl_begin, avail);
    rx.ctrl_begin = 0;
    rx.ctrl_end = avail;
  }
  const size_t want = kCtrlSize - rx.ctrl_end;
  const ssize_t n = recv(c.fd.get(), rx.ctrl + rx.ctrl_end, want, 0);
  if (!ReadOk(c, n)) return false;
  rx.ctrl_end += static_cast<size_t>(n);
  round.drained = static_cast<size_t>(n) < want;
  return true;
}

// kTable or kBody: first what the look-ahead already holds, then one readv() straight from the
// socket. False: stop reading this round.
bool TcpTransport::ReadPayload(Conn& c, ReadRound& round) {
  Rx& rx = c.rx;
  if (rx.dst.remaining > 0 && rx.ctrl_end > rx.ctrl_begin) {
    const uint64_t take = std::min<uint64_t>(rx.ctrl_end - rx.ctrl_begin, rx.dst.remaining);
    rx.dst.CopyIn(rx.ctrl + rx.ctrl_begin, take);
    rx.ctrl_begin += take;
  }
  if (rx.dst.remaining == 0) return true;
  if (round.Spent()) return false;
  rx.ctrl_begin = rx.ctrl_end = 0;
  uint64_t want = 0;
  size_t n;
  if (rx.bounce) {
    want = std::min<uint64_t>(rx.dst.remaining, kScratchSize);
    c.iov[0] = {c.scratch.data(), want};
    n = 1;
  } else {
    n = rx.dst.Fill(c.iov, kMaxIov - 1, &want);
  }
  // Append the look-ahead only when these iovecs end the frame: then whatever follows is the
  // next header.
  const bool tail = want == rx.dst.remaining;
  if (tail) {
    c.iov[n++] = {rx.ctrl, kTailLookAhead};
    want += kTailLookAhead;
  }
  const ssize_t got = readv(c.fd.get(), c.iov, static_cast<int>(n));
  if (!ReadOk(c, got)) return false;
  const uint64_t body = std::min<uint64_t>(static_cast<uint64_t>(got), rx.dst.remaining);
  if (rx.bounce) {
    rx.dst.CopyIn(c.scratch.data(), body);
  } else {
    rx.dst.Advance(body);
  }
  rx.ctrl_end = static_cast<size_t>(static_cast<uint64_t>(got) - body);
  round.drained = static_cast<uint64_t>(got) < want;
  return true;
}

bool TcpTransport::StartMessage(Conn& c) {
  Rx& rx = c.rx;
  const uint64_t len = rx.hdr.length;
  rx.phase = Rx::Phase::kBody;
  if (!c.recvs.empty() || !shared_recvs_.empty()) {
    rx.recv = !c.recvs.empty() ? c.recvs.pop() : shared_recvs_.pop();
    rx.has_recv = true;
    rx.recv_too_small = len > rx.recv.capacity;
    if (rx.recv_too_small) {
      SetDiscard(c, len);
    } else {
      rx.dst.SetContig(rx.recv.dst, len);
    }
    return true;
  }
  if (c.unexpected_bytes + len > params_.unexpected_limit) {
    Fail(c, ResourceExhausted("peer " + c.peer_address + " sent " +
                              std::to_string(c.unexpected_bytes + len) +
                              " bytes of messages with no receive posted (limit " +
                              std::to_string(params_.unexpected_limit) +
                              " per endpoint, parameter max_unexpected_bytes); post receives "
                              "before the peer sends"));
    return false;
  }
  rx.unexpected = true;
  rx.unexpected_buf.resize(len);
  rx.dst.SetContig(rx.unexpected_buf.data(), len);
  return true;
}

bool TcpTransport::OnHeader(Conn& c) {
  const FrameHeader& h = c.rx.hdr;
  Status s = ValidateHeader(h, limits_);
  if (!s.ok()) {
    Fail(c, s.Annotate("from " + c.peer_address));
    return false;
  }
  switch (h.kind) {
    case FrameKind::kHeartbeat:
      return true;
    case FrameKind::kMessage:
      return StartMessage(c);
    case FrameKind::kWrite:
      StartWrite(c);
      return true;
    case FrameKind::kRead:
      ServeRead(c);
      return true;
    case FrameKind::kSparseWrite:
    case FrameKind::kSparseRead:
      StartTable(c);
      return true;
    case FrameKind::kReadResponse:
    case FrameKind::kResponse:
      return StartReply(c);
  }
  Fail(c, ProtocolError("unknown frame kind from " + c.peer_address));
  return false;
}

Status TcpTransport::CheckTargetRange(const FrameHeader& h, uint32_t needed, RegionEntry** e) {
  Status v = CheckTarget(h.key, needed, e);
  if (v.ok()) v = common::CheckRemoteAccess((*e)->size, (*e)->access, h.arg, h.length, needed);
  return v;
}

void TcpTransport::StartWrite(Conn& c) {
  Rx& rx = c.rx;
  const FrameHeader& h = rx.hdr;
  RegionEntry* e = nullptr;
  rx.verdict = CheckTargetRange(h, kAccessRemoteWrite, &e);
  if (rx.verdict.ok()) {
    rx.dst.SetContig(e->base + h.arg, h.length);
    rx.region_key = h.key;
  } else {
    SetDiscard(c, h.length);  // refused: the payload is drained, not a byte lands
  }
  rx.phase = Rx::Phase::kBody;
}

// The response streams straight out of the region, which stays pinned until it is sent.
void TcpTransport::ServeRead(Conn& c) {
  const FrameHeader& h = c.rx.hdr;
  RegionEntry* e = nullptr;
  Status v = CheckTargetRange(h, kAccessRemoteRead, &e);
  if (!v.ok()) {
    QueueResponse(c, h.req_id, v);
    return;
  }
  FrameHeader r;
  r.kind = FrameKind::kReadResponse;
  r.req_id = h.req_id;
  r.length = h.length;
  TxItem& item = PushFrame(c, r);
  item.data.SetContig(e->base + h.arg, h.length);
  item.pin_key = h.key;
  ++e->pins;
}

void TcpTransport::StartTable(Conn& c) {
  Rx& rx = c.rx;
  const FrameHeader& h = rx.hdr;
  // Sizes bounded by ValidateHeader: count <= max_segments, a packed table by its count.
  if (h.flags & kFramePackedTable) {
    rx.packed.resize(SparseTableBytes(h));
    rx.dst.SetContig(rx.packed.data(), rx.packed.size());
  } else {
    if (rx.table.size() != h.arg) rx.table.resize(h.arg);
    rx.dst.SetContig(reinterpret_cast<uint8_t*>(rx.table.data()), h.arg * kWireSegmentSize);
  }
  rx.phase = Rx::Phase::kTable;
}

Status CheckReply(const PendingOp* oldest, const FrameHeader& h, const std::string& peer) {
  if (oldest == nullptr || oldest->req_id != h.req_id) {
    return ProtocolError(std::string(FrameKindName(h.kind)) + " for request " +
                         std::to_string(h.req_id) + " from " + peer +
                         " does not answer the oldest outstanding request");
  }
  const bool read = oldest->type == OpType::kRead || oldest->type == OpType::kSparseRead;
  if (h.kind == FrameKind::kResponse) {
    if (read && h.imm == 0) return ProtocolError("empty success response to a read from " + peer);
  } else if (!read || h.length != oldest->bytes) {
    return ProtocolError("read response of " + std::to_string(h.length) + " bytes from " + peer +
                         " does not match request " + std::to_string(oldest->req_id));
  }
  return Status::Ok();
}

// A kResponse's text lands in rx.text; a kReadResponse's bytes in the read's destination.
bool TcpTransport::StartReply(Conn& c) {
  Rx& rx = c.rx;
  const FrameHeader& h = rx.hdr;
  Status s = CheckReply(c.pending.empty() ? nullptr : &c.pending.front(), h, c.peer_address);
  if (!s.ok()) {
    Fail(c, s);
    return false;
  }
  const PendingOp& p = c.pending.front();
  if (h.kind == FrameKind::kResponse) {
    rx.text.resize(h.length);
    rx.dst.SetContig(reinterpret_cast<uint8_t*>(rx.text.data()), h.length);
  } else if (p.type == OpType::kRead) {
    rx.dst.SetContig(p.local + p.local_offset, h.length);
  } else {
    rx.dst.SetSegments(p.local, p.segs, p.nsegs, false, h.length);
  }
  rx.phase = Rx::Phase::kBody;
  return true;
}

// The whole table is validated before a single payload byte is placed.
bool TcpTransport::OnTable(Conn& c) {
  Rx& rx = c.rx;
  const FrameHeader& h = rx.hdr;
  uint64_t total = 0;
  if (h.flags & kFramePackedTable) {
    Status s = common::DecodePackedTable(rx.packed, SparseCount(h), &rx.table, &total);
    if (s.ok() && total != h.length) {
      s = ProtocolError(std::string(FrameKindName(h.kind)) + ": segment lengths sum to " +
                        std::to_string(total) + " but the header says " + std::to_string(h.length));
    }
    if (!s.ok()) {
      Fail(c, s.Annotate("from " + c.peer_address));
      return false;
    }
  } else {
    Result<uint64_t> sum = SegmentTableTotal(h.kind, rx.table, h.length);
    if (!sum.ok()) {
      Fail(c, sum.status().Annotate("from " + c.peer_address));
      return false;
    }
    total = *sum;
  }
  const bool write = h.kind == FrameKind::kSparseWrite;
  const uint32_t needed = write ? kAccessRemoteWrite : kAccessRemoteRead;
  RegionEntry* e = nullptr;
  rx.verdict = CheckTarget(h.key, needed, &e);
  if (rx.verdict.ok())
    rx.verdict = common::CheckSegmentsInRegion(rx.table, e->size, e->access, needed);
  if (write) {
    if (rx.verdict.ok()) {
      rx.dst.SetSegments(e->base, rx.table.data(), rx.table.size(), true, total);
      rx.region_key = h.key;
      // Rows this small cost more as iovecs (kernel per-iovec work, IOV_MAX readv calls) than
      // as one bulk receive plus memcpy; see docs/perf/tcp-profile.md for the measurement.
      // Only the target does this, after every segment was checked above.
      if (ShouldBounce(total, rx.table.size(), params_.bounce_max_row)) {
        if (c.scratch.empty()) c.scratch.resize(kScratchSize);
        rx.bounce = true;
      }
    } else {
      SetDiscard(c, total);
    }
    rx.phase = Rx::Phase::kBody;
    return true;
  }
  rx.phase = Rx::Phase::kHeader;
  if (!rx.verdict.ok()) {
    QueueResponse(c, h.req_id, rx.verdict);
    rx.verdict = Status::Ok();
    return true;
  }
  FrameHeader r;
  r.kind = FrameKind::kReadResponse;
  r.req_id = h.req_id;
  r.length = total;
  TxItem& item = PushFrame(c, r);
  // The response streams from the request's table; rx takes a recycled one for the next.
  item.owned_table = std::move(rx.table);
  rx.table = std::vector<Segment>();
  if (!c.table_pool.empty()) {
    rx.table = std::move(c.table_pool.back());
    c.table_pool.pop_back();
  }
  item.data.SetSegments(e->base, item.owned_table.data(), item.owned_table.size(), true, total);
  // Small rows: gathered into the tx scratch and sent as one buffer (FlushTx), the mirror of
  // the bounce receive of small-row writes; one iovec a row costs the kernel more per row.
  item.gather = ShouldBounce(total, item.owned_table.size(), params_.gather_max_row);
  item.pin_key = h.key;
  ++e->pins;
  return true;
}

bool TcpTransport::OnBodyDone(Conn& c) {
  Rx& rx = c.rx;
  if (rx.phase == Rx::Phase::kTable) return OnTable(c);
  const FrameHeader& h = rx.hdr;
  rx.phase = Rx::Phase::kHeader;
  switch (h.kind) {
    case FrameKind::kMessage:
      if (rx.has_recv) {
        rx.has_recv = false;
        if (rx.recv_too_small) {
          Completion e = ErrorCompletion(
              rx.recv.context, OpType::kRecv, c.handle,
              OutOfRange("message of " + std::to_string(h.length) +
                         " bytes does not fit the receive buffer of " +
                         std::to_string(rx.recv.capacity) + " bytes; it was discarded"));
          e.bytes = h.length;
          Complete(std::move(e));
        } else {
          Complete(DoneCompletion(rx.recv.context, OpType::kRecv, c.handle, h.length));
        }
      } else if (rx.unexpected) {
        rx.unexpected = false;
        std::vector<uint8_t> msg = std::move(rx.unexpected_buf);
        rx.unexpected_buf = std::vector<uint8_t>();
        // A receive may have been posted while the message was arriving.
        if (!c.recvs.empty()) {
          DeliverUnexpected(c, msg, c.recvs.pop());
        } else if (!shared_recvs_.empty()) {
          DeliverUnexpected(c, msg, shared_recvs_.pop());
        } else {
          c.unexpected_bytes += msg.size();
          c.unexpected.push_back(std::move(msg));
        }
      }
      return true;
    case FrameKind::kWrite:
    case FrameKind::kSparseWrite:
      // Rows scattered with streaming stores (Cursor::CopyIn) land before the reply says so.
      if (h.kind == FrameKind::kSparseWrite) common::ScatterFence();
      rx.bounce = false;
      if (rx.verdict.ok() && (h.flags & kFrameNotify)) {
        Completion n = DoneCompletion(0, OpType::kNotify, c.handle, h.length);
        n.imm = h.imm;
        Complete(std::move(n));
      }
      QueueResponse(c, h.req_id, rx.verdict);
      rx.verdict = Status::Ok();
      rx.region_key = 0;
      return true;
    case FrameKind::kReadResponse: {
      PendingOp p = c.pending.pop();
      Complete(DoneCompletion(p.context, p.type, c.handle, p.bytes));
      return true;
    }
    case FrameKind::kResponse: {
      PendingOp p = c.pending.pop();
      if (h.imm == 0) {
        Complete(DoneCompletion(p.context, p.type, c.handle, p.bytes));
      } else {
        Complete(ErrorCompletion(p.context, p.type, c.handle,
                                 Status(static_cast<Code>(h.imm), "target refused: " + rx.text)));
      }
      return true;
    }
    default:
      return true;
  }
}

}  // namespace ferry::tcp
