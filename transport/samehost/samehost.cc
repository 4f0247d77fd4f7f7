// The same-host engine's initiator side: check, then copy (see samehost.h for the contract).
#include "transport/samehost/samehost.h"

#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <string>

#include "transport/common/copy_row.h"
#include "transport/common/merged_runs.h"

namespace ferry::samehost {
namespace {

// Moves [liov, riov) pairs (equal lengths pairwise) with as few system calls as possible.
// Returns 0 or an errno. A short count (a fault part-way) is resumed; a fault on the first
// remaining iovec is reported as EFAULT.
int CmaBatch(pid_t pid, bool write, iovec* liov, iovec* riov, size_t n) {
  size_t i = 0;
  while (i < n) {
    const size_t cnt = std::min<size_t>(n - i, IOV_MAX);
    size_t want = 0;
    for (size_t j = 0; j < cnt; ++j) want += liov[i + j].iov_len;
    ssize_t got = write ? process_vm_writev(pid, liov + i, cnt, riov + i, cnt, 0)
                        : process_vm_readv(pid, liov + i, cnt, riov + i, cnt, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (static_cast<size_t>(got) == want) {
      i += cnt;
      continue;
    }
    if (got == 0) return EFAULT;
    // Partial: skip what was moved and resume inside the current pair.
    size_t moved = static_cast<size_t>(got);
    while (moved > 0) {
      if (moved >= liov[i].iov_len) {
        moved -= liov[i].iov_len;
        ++i;
      } else {
        liov[i].iov_base = static_cast<uint8_t*>(liov[i].iov_base) + moved;
        riov[i].iov_base = static_cast<uint8_t*>(riov[i].iov_base) + moved;
        liov[i].iov_len -= moved;
        riov[i].iov_len -= moved;
        moved = 0;
      }
    }
  }
  return 0;
}

// Row by row through our mapping of the target's memory: no system call at all.
uint64_t CopyMapped(const Op& op, bool write, uint8_t* local, uint8_t* mapped) {
  if (op.type == OpType::kWrite || op.type == OpType::kRead) {
    if (write) {
      std::memcpy(mapped + op.remote_offset, local + op.local_offset, op.length);
    } else {
      std::memcpy(local + op.local_offset, mapped + op.remote_offset, op.length);
    }
    return op.length;
  }
  uint64_t moved = 0;
  const Segment* seg = op.segments;
  const Segment* end = seg + op.num_segments;
  if (write) {
    // Scattered over the peer's region: whole aligned lines are streamed (common::ScatterRow),
    // fenced before Transfer returns, i.e. before the Op's completion or notification.
    for (; seg != end; ++seg) {
      common::ScatterRow(mapped + seg->remote_offset, local + seg->local_offset, seg->length);
      moved += seg->length;
    }
    common::ScatterFence();
  } else {
    for (; seg != end; ++seg) {
      common::CopyRow(local + seg->local_offset, mapped + seg->remote_offset, seg->length);
      moved += seg->length;
    }
  }
  return moved;
}

}  // namespace

Result<Peer> Peer::Open(const HostIdentity& me, const HostIdentity& peer) {
  if (!CmaUsable(me, peer)) {
    return Unsupported("the peer is not a process of this host whose memory we may read");
  }
  if (peer.table_fd > uint64_t{INT32_MAX}) return InvalidArgument("no region table");
  Peer p;
  FERRY_ASSIGN_OR_RETURN(
      p.table_, PeerRegionTable::Open(static_cast<pid_t>(peer.pid), static_cast<int>(peer.table_fd),
                                      peer.table_token));
  p.pid_ = static_cast<pid_t>(peer.pid);
  return p;
}

KeyState Peer::Import(const RemoteRegion& desc) const {
  KeyState s;
  s.slot = table_.Find(desc.epoch);
  return s;
}

uint8_t* Peer::SharedMapping(KeyState* state, const RegionEntry& entry) const {
  if (state->mapping.data() != nullptr && state->mapping.epoch() == entry.epoch) {
    return state->mapping.data();
  }
  if (state->mapping_failed) return nullptr;
  auto m = PeerMapping::Map(pid_, entry);
  if (!m.ok()) {
    // Not fatal: this key keeps using CMA, which needs no mapping.
    state->mapping_failed = true;
    return nullptr;
  }
  state->mapping = std::move(*m);
  return state->mapping.data();
}

Status Peer::Transfer(const Op& op, const RemoteRegion& desc, uint64_t key, KeyState* state,
                      uint64_t* bytes) const {
  const bool write = op.type == OpType::kWrite || op.type == OpType::kSparseWrite;
  uint8_t* local = op.local->data();
  // The target's rule, from the target's own table, before anything moves.
  RegionEntry entry;
  Status allowed = table_.Check(state->slot, desc, key,
                                write ? kAccessRemoteWrite : kAccessRemoteRead, op, &entry);
  if (!allowed.ok()) {
    if (allowed.code() == Code::kStale) state->mapping = PeerMapping();  // the region is gone
    return allowed;
  }
  // Shareable target memory: plain copies through our mapping of it.
  if (uint8_t* mapped = entry.shm_fd >= 0 ? SharedMapping(state, entry) : nullptr) {
    *bytes = CopyMapped(op, write, local, mapped);
    return Status::Ok();
  }
  auto* remote = reinterpret_cast<uint8_t*>(desc.addr);
  constexpr size_t kBatch = IOV_MAX;
  iovec liov[kBatch];
  iovec riov[kBatch];
  size_t k = 0;
  uint64_t total = 0;
  int err = 0;
  common::ForEachMergedRun(op, [&](uint64_t lo, uint64_t ro, uint64_t len) {
    if (len == 0) return true;
    liov[k] = {local + lo, len};
    riov[k] = {remote + ro, len};
    total += len;
    if (++k == kBatch) {
      err = CmaBatch(pid_, write, liov, riov, k);
      k = 0;
    }
    return err == 0;
  });
  if (err == 0 && k != 0) err = CmaBatch(pid_, write, liov, riov, k);
  *bytes = total;
  if (err == 0) return Status::Ok();
  const char* call = write ? "process_vm_writev" : "process_vm_readv";
  if (err == ESRCH) {
    return PeerFailure("pid " + std::to_string(pid_) + " is gone: " + IoError(call, err).message());
  }
  // EFAULT: the peer has no memory there any more (deregistered and unmapped); EPERM: ptrace
  // rules changed. Either way this Op failed; the endpoint stays usable.
  if (err == EFAULT) return OutOfRange("remote memory is not mapped (region deregistered?)");
  return IoError(call, err);
}

}  // namespace ferry::samehost
