// tcp memory registration and the target-side checks an HCA would make.
//
// Keys are random 64-bit values that are never reused within a transport: a deregistered key
// stays in dead_keys_ so a late request is answered kStale instead of reaching a new region.
// Deregistration while a peer's request streams:
//   - into the region (a write): the rest of the payload is redirected to the scratch sink and
//     the initiator gets kStale; no byte lands after the destructor returns;
//   - out of the region (a read response): a response not started yet becomes kStale; one
//     already streaming is drained (the destructor drives progress) or, if the peer stops
//     reading for peer_timeout, its connection is failed.
#include <openssl/rand.h>

#include <cstring>

#include "transport/tcp/tcp_transport.h"

namespace ferry::tcp {

TcpRegion::TcpRegion(TcpTransport* t, uint8_t* data, size_t size, uint32_t access, uint64_t key,
                     uint64_t epoch)
    : MemoryRegion(data, size, access), transport_(t), key_(key) {
  descriptor_.addr = reinterpret_cast<uint64_t>(data);
  descriptor_.length = size;
  descriptor_.access = access;
  descriptor_.epoch = epoch;
  descriptor_.rkey.resize(sizeof(key));
  std::memcpy(descriptor_.rkey.data(), &key, sizeof(key));  // little-endian (wire.h)
}

TcpRegion::~TcpRegion() {
  if (transport_ != nullptr) transport_->Deregister(key_);
}

Result<std::unique_ptr<MemoryRegion>> TcpTransport::RegisterMemory(void* addr, size_t length,
                                                                   uint32_t access) {
  if (access & ~static_cast<uint32_t>(kAccessRemote)) {
    return InvalidArgument("tcp register: unknown access bits 0x" + std::to_string(access));
  }
  if (addr == nullptr && length > 0) {
    return InvalidArgument("tcp register: null address with a non-zero length");
  }
  Lock lk(mu_);
  uint64_t key = 0;
  while (key == 0 || regions_.count(key) != 0 || dead_keys_.count(key) != 0) {
    if (RAND_bytes(reinterpret_cast<unsigned char*>(&key), sizeof(key)) != 1) {
      return Internal("tcp register: the random number generator failed");
    }
  }
  RegionEntry& e = regions_[key];
  e.base = static_cast<uint8_t*>(addr);
  e.size = length;
  e.access = access;
  auto region = std::make_unique<TcpRegion>(this, e.base, length, access, key, next_epoch_++);
  e.owner = region.get();
  return std::unique_ptr<MemoryRegion>(std::move(region));
}

Status TcpTransport::CheckTarget(uint64_t key, uint32_t needed, RegionEntry** out) {
  auto it = regions_.find(key);
  if (it == regions_.end() || it->second.dead) {
    if (dead_keys_.count(key) != 0) {
      return Stale("the remote region was deregistered (stale key)");
    }
    return PermissionDenied(std::string("unknown remote key for a remote ") +
                            (needed & kAccessRemoteWrite ? "write" : "read"));
  }
  *out = &it->second;
  return Status::Ok();
}

void TcpTransport::Unpin(uint64_t key) {
  auto it = regions_.find(key);
  if (it != regions_.end() && it->second.pins > 0) {
    if (--it->second.pins == 0 && it->second.dead) cv_.notify_all();
  }
}

void TcpTransport::Deregister(uint64_t key) {
  Lock lk(mu_);
  auto found = regions_.find(key);
  if (found == regions_.end()) return;
  RegionEntry& e = found->second;  // node-based map: stays valid while others insert
  e.dead = true;
  dead_keys_.insert(key);
  for (auto& [id, cp] : conns_) {
    Conn& c = *cp;
    if (c.rx.region_key == key) {
      SetDiscard(c, c.rx.dst.remaining);
      c.rx.verdict = Stale("the target region was deregistered while the write was arriving");
      c.rx.region_key = 0;
    }
    for (size_t i = 0; i < c.tx.size(); ++i) {
      TxItem& item = c.tx[i];
      if (item.pin_key != key || item.started()) continue;
      const uint64_t req_id = DecodeHeader(item.header).req_id;
      if (item.owned_table.capacity() > 0) c.table_pool.push_back(std::move(item.owned_table));
      item = TxItem();
      FrameHeader h;
      h.kind = FrameKind::kResponse;
      h.req_id = req_id;
      h.imm = static_cast<uint32_t>(Code::kStale);
      item.text = "the remote region was deregistered before the read was served";
      h.length = item.text.size();
      EncodeHeader(h, item.header);
      item.data_is_text = true;
      --e.pins;
    }
  }
  if (e.pins > 0) {
    const bool drained =
        DriveUntil(lk, Clock::now() + options_.peer_timeout, [&] { return e.pins == 0; });
    if (!drained) {
      for (auto& [id, cp] : conns_) {
        Conn& c = *cp;
        for (size_t i = 0; i < c.tx.size(); ++i) {
          if (c.tx[i].pin_key == key) {
            Fail(c, PeerFailure("peer " + c.peer_address +
                                " stopped reading a response from a region being deregistered"));
            break;
          }
        }
      }
    }
  }
  regions_.erase(key);
}

}  // namespace ferry::tcp
