// One-sided transfers between processes of the same host through cross-memory attach
// (process_vm_writev / process_vm_readv), bypassing UCP's put/get.
//
// Why: UCX 1.13's cma transport does not support UCP_ERR_HANDLING_MODE_PEER, which the failure
// model needs, so with UCX_TLS=shm,self an endpoint gets no RMA lane at all and ucp_put_nbx /
// ucp_get_nbx fall back to active-message emulation over sysv/posix: every byte is copied twice
// and the target's CPU must progress (measured here: ~40-130 MB/s instead of ~1 GB/s). And a
// sparse list would be one emulated put per segment. Doing CMA ourselves keeps one-sided
// semantics (no target CPU), moves a sparse list with one system call per 1024 segments
// (zero-copy: the kernel copies straight between the two address spaces), and reports a dead
// peer as ESRCH instead of hanging.
//
// When: the UCX_TLS in use allows cma (or shm / all), and the handshake proves the peer shares
// this host and PID namespace (boot id, /proc/self/ns/pid inode) and lets us read its memory
// (a 1-byte probe read of an address it sent; ptrace rules may forbid it, then UCP is used).
//
// The peer may be this very process (two transports in one process): CMA to oneself works the
// same way, and it keeps in-process pairs (the conformance suite) on the path real peers use.
//
// Safety: the kernel checks nothing but ptrace rights, so the target's checks are done here,
// against the target's own published region table (region_table.h): before any byte moves,
// every segment is checked for a live registration with the descriptor's epoch, address and key
// digest, bounds and the access right. An endpoint whose peer table cannot be mapped does not
// use CMA at all (FinishHandshake). A pid could in principle be reused after the peer dies; the
// control connection's EOF fails the endpoint within one liveness interval, and the table's
// token no longer matches anything the new process publishes.
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>

#include "transport/copy_row.h"
#include "transport/ucx/ucx_status.h"
#include "transport/ucx/ucx_transport.h"

namespace ferry::ucx {
namespace {

// A byte whose address peers read once to check that CMA is permitted.
volatile uint8_t g_cma_probe = 0x5a;

uint64_t Fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

void PutU64(std::vector<uint8_t>* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<uint8_t>(v >> (8 * i)));
}

uint64_t GetU64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

}  // namespace

HostIdentity HostIdentity::Local() {
  HostIdentity id;
  id.pid = static_cast<uint64_t>(getpid());
  struct stat st {};
  if (stat("/proc/self/ns/pid", &st) == 0) id.pid_ns = st.st_ino;
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string boot_id;
  if (boot >> boot_id) id.host = Fnv1a(boot_id);
  id.probe_addr = reinterpret_cast<uint64_t>(&g_cma_probe);
  return id;
}

void HostIdentity::Append(std::vector<uint8_t>* out) const {
  PutU64(out, pid);
  PutU64(out, pid_ns);
  PutU64(out, host);
  PutU64(out, probe_addr);
  PutU64(out, table_fd);
  PutU64(out, table_token);
}

HostIdentity HostIdentity::Parse(const uint8_t* p) {
  HostIdentity id;
  id.pid = GetU64(p);
  id.pid_ns = GetU64(p + 8);
  id.host = GetU64(p + 16);
  id.probe_addr = GetU64(p + 24);
  id.table_fd = GetU64(p + 32);
  id.table_token = GetU64(p + 40);
  return id;
}

bool CmaUsable(const HostIdentity& me, const HostIdentity& peer) {
  if (me.host == 0 || me.pid_ns == 0 || peer.host != me.host || peer.pid_ns != me.pid_ns ||
      peer.pid == 0 || peer.pid > static_cast<uint64_t>(INT_MAX)) {
    return false;
  }
  uint8_t byte = 0;
  iovec local{&byte, 1};
  iovec remote{reinterpret_cast<void*>(peer.probe_addr), 1};
  return process_vm_readv(static_cast<pid_t>(peer.pid), &local, 1, &remote, 1, 0) == 1 &&
         byte == 0x5a;
}

// Moves [liov, riov) pairs (equal lengths pairwise) with as few system calls as possible.
// Returns 0 or an errno. A short count (a fault part-way) is resumed; a fault on the first
// remaining iovec is reported as EFAULT.
static int CmaBatch(pid_t pid, bool write, iovec* liov, iovec* riov, size_t n) {
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

uint8_t* UcxTransport::SharedMapping(const UcxRemoteKey* rk, const RegionEntry& entry) {
  if (rk->shm_.data() != nullptr && rk->shm_.epoch() == entry.epoch) return rk->shm_.data();
  if (rk->shm_failed_) return nullptr;
  auto m = PeerMapping::Map(rk->endpoint()->cma_pid_, entry);
  if (!m.ok()) {
    // Not fatal: this key keeps using CMA, which needs no mapping.
    rk->shm_failed_ = true;
    return nullptr;
  }
  rk->shm_ = std::move(*m);
  return rk->shm_.data();
}

void UcxTransport::PostCma(OpState* st, const Op& op) {
  const auto* rk = static_cast<const UcxRemoteKey*>(op.remote);
  UcxEndpoint* ep = st->ep;
  uint8_t* local = op.local->data();
  auto* remote = reinterpret_cast<uint8_t*>(rk->region().addr);
  const bool write = op.type == OpType::kWrite || op.type == OpType::kSparseWrite;
  const pid_t pid = ep->cma_pid_;
  // The target's rule, from the target's own table, before anything moves.
  RegionEntry entry;
  Status allowed =
      ep->peer_table_.Check(rk->table_slot(), rk->region(), rk->key(),
                            write ? kAccessRemoteWrite : kAccessRemoteRead, op, &entry);
  if (!allowed.ok()) {
    if (allowed.code() == Code::kStale) rk->shm_ = PeerMapping();  // the region is gone
    st->cma_error = allowed.Annotate("ucx: one-sided access to " + ep->peer_address_);
    Finish(st, UCS_ERR_IO_ERROR);
    return;
  }
  // Shareable target memory: plain copies through our mapping of it, no system call at all.
  if (uint8_t* mapped = entry.shm_fd >= 0 ? SharedMapping(rk, entry) : nullptr) {
    uint64_t moved = 0;
    if (op.type == OpType::kWrite || op.type == OpType::kRead) {
      if (write)
        std::memcpy(mapped + op.remote_offset, local + op.local_offset, op.length);
      else
        std::memcpy(local + op.local_offset, mapped + op.remote_offset, op.length);
      moved = op.length;
    } else {
      const Segment* seg = op.segments;
      const Segment* end = seg + op.num_segments;
      if (write) {
        for (; seg != end; ++seg) {
          internal::CopyRow(mapped + seg->remote_offset, local + seg->local_offset, seg->length);
          moved += seg->length;
        }
      } else {
        for (; seg != end; ++seg) {
          internal::CopyRow(local + seg->local_offset, mapped + seg->remote_offset, seg->length);
          moved += seg->length;
        }
      }
    }
    st->bytes = moved;
    StepDone(st, UCS_OK);
    return;
  }
  constexpr size_t kBatch = IOV_MAX;
  iovec liov[kBatch];
  iovec riov[kBatch];
  size_t k = 0;
  uint64_t total = 0;
  int err = 0;
  ForEachMergedRun(op, [&](uint64_t lo, uint64_t ro, uint64_t len) {
    if (len == 0) return true;
    liov[k] = {local + lo, len};
    riov[k] = {remote + ro, len};
    total += len;
    if (++k == kBatch) {
      err = CmaBatch(pid, write, liov, riov, k);
      k = 0;
    }
    return err == 0;
  });
  if (err == 0 && k != 0) err = CmaBatch(pid, write, liov, riov, k);
  st->bytes = total;
  if (err == 0) {
    StepDone(st, UCS_OK);
    return;
  }
  if (err == ESRCH) {
    FailEndpoint(
        ep,
        PeerFailure(
            "peer " + ep->peer_address_ + " (pid " + std::to_string(pid) + ") is gone: " +
            IoError("process_vm_" + std::string(write ? "writev" : "readv"), err).message()),
        /*graceful=*/false);
    Finish(st, UCS_ERR_CONNECTION_RESET);
    return;
  }
  // EFAULT: the peer has no memory there any more (deregistered and unmapped); EPERM: ptrace
  // rules changed. Either way this Op failed, the endpoint stays usable.
  const Status s = err == EFAULT ? OutOfRange("remote memory of " + ep->peer_address_ +
                                              " is not mapped (region deregistered?)")
                                 : IoError(write ? "process_vm_writev" : "process_vm_readv", err);
  st->cma_error = s;
  Finish(st, UCS_ERR_IO_ERROR);
}

}  // namespace ferry::ucx
