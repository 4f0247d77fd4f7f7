// Registration (ucp_mem_map + ucp_rkey_pack + the region table entry) and import
// (ucp_ep_rkey_unpack where a verbs RMA lane needs the rkey; a table lookup for same-host
// peers).
#include <sys/stat.h>

#include <atomic>

#include "transport/ucx/errors.h"
#include "transport/ucx/ucx_transport.h"

namespace ferry::ucx {
namespace {

// Registration generations; unique per process so a re-registration at the same address gets a
// new epoch.
std::atomic<uint64_t> g_epoch{1};

}  // namespace

UcxMemoryRegion::UcxMemoryRegion(UcxTransport* t, uint8_t* data, size_t size, uint32_t access,
                                 MemHandle memh, std::vector<uint8_t> packed_rkey, uint64_t epoch)
    : MemoryRegion(data, size, access), t_(t), memh_(std::move(memh)) {
  descriptor_.addr = reinterpret_cast<uint64_t>(data);
  descriptor_.length = size;
  descriptor_.access = access;
  descriptor_.epoch = epoch;
  descriptor_.rkey = std::move(packed_rkey);
  key_ = samehost::KeyDigest(descriptor_.rkey);
}

UcxMemoryRegion::~UcxMemoryRegion() {
  if (t_ == nullptr) {  // RegisterMemory failed after ucp_mem_map (it holds mu_ already)
    memh_.reset();
    return;
  }
  Guard lock(t_->mu_);
  t_->regions_.erase(descriptor_.epoch);  // AM requests naming it are refused from now on
  if (replies_in_flight_ > 0) t_->DrainRepliesFrom(this);
  // CMA peers refuse it from now on (before the memory handle goes and the caller may free).
  if (table_slot_ != samehost::PeerRegionTable::kNoSlot) t_->region_table_.Remove(table_slot_);
  memh_.reset();
}

Result<std::unique_ptr<MemoryRegion>> UcxTransport::RegisterMemory(void* addr, size_t length,
                                                                   uint32_t access) {
  if (addr == nullptr || length == 0) {
    return InvalidArgument("ucx: RegisterMemory needs a non-empty buffer");
  }
  if ((access & ~uint32_t{kAccessRemote}) != 0) {
    return InvalidArgument("ucx: unknown access bits " + std::to_string(access));
  }
  ucp_mem_map_params_t p{};
  p.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                 UCP_MEM_MAP_PARAM_FIELD_PROT;
  p.address = addr;
  p.length = length;
  // Transports that honour protection (verbs MRs) then enforce the access bits themselves.
  p.prot = UCP_MEM_MAP_PROT_LOCAL_READ | UCP_MEM_MAP_PROT_LOCAL_WRITE;
  if (access & kAccessRemoteRead) p.prot |= UCP_MEM_MAP_PROT_REMOTE_READ;
  if (access & kAccessRemoteWrite) p.prot |= UCP_MEM_MAP_PROT_REMOTE_WRITE;

  Guard lock(mu_);
  ucp_mem_h memh = nullptr;
  ucs_status_t st = ucp_mem_map(context_.get(), &p, &memh);
  if (st != UCS_OK) {
    return UcsError("ucp_mem_map(" + std::to_string(length) + " bytes)", st);
  }
  MemHandle owned(context_.get(), memh);
  void* packed = nullptr;
  size_t packed_size = 0;
  st = ucp_rkey_pack(context_.get(), memh, &packed, &packed_size);
  if (st != UCS_OK) return UcsError("ucp_rkey_pack", st);
  RkeyBuffer buffer(packed);
  const auto* bytes = static_cast<const uint8_t*>(buffer.get());
  std::vector<uint8_t> rkey(bytes, bytes + packed_size);
  std::unique_ptr<UcxMemoryRegion> region(
      new UcxMemoryRegion(this, static_cast<uint8_t*>(addr), length, access, std::move(owned),
                          std::move(rkey), g_epoch.fetch_add(1)));
  if (region_table_.valid()) {
    samehost::RegionEntry e;
    e.epoch = region->descriptor().epoch;
    e.addr = region->descriptor().addr;
    e.length = length;
    e.key = region->key();
    e.access = access;
    // Shareable memory (transport.h): same-host peers may map it and copy directly.
    const MemoryBacking backing = FindShareableBacking(addr, length);
    struct stat st {};
    if (backing.fd >= 0 && fstat(backing.fd, &st) == 0) {
      e.shm_fd = backing.fd;
      e.shm_offset = backing.offset;
      e.shm_inode = static_cast<uint64_t>(st.st_ino);
    }
    auto slot = region_table_.Add(e);
    if (!slot.ok()) {
      // ~UcxMemoryRegion locks mu_: release it from under the lock instead.
      region->t_ = nullptr;
      return slot.status();
    }
    region->table_slot_ = *slot;
  }
  regions_[region->descriptor().epoch] = region.get();
  return std::unique_ptr<MemoryRegion>(std::move(region));
}

UcxRemoteKey::UcxRemoteKey(UcxTransport* t, UcxEndpoint* ep, RemoteRegion region, RkeyHandle rkey,
                           samehost::KeyState samehost)
    : RemoteKey(std::move(region)),
      t_(t),
      ep_(ep),
      rkey_(std::move(rkey)),
      key_(samehost::KeyDigest(region_.rkey)),
      samehost_(std::move(samehost)) {}

UcxRemoteKey::~UcxRemoteKey() {
  Guard lock(t_->mu_);
  rkey_.reset();
}

Result<std::unique_ptr<RemoteKey>> UcxEndpoint::Import(const RemoteRegion& region) {
  // ucp_ep_rkey_unpack trusts its buffer (it takes no length); the minimum below rejects empty
  // or truncated-to-nothing keys, the rest is as safe as UCX's own parser.
  if (region.rkey.size() < 2) {
    return InvalidArgument("ucx: remote region has no (or a truncated) UCX rkey");
  }
  if (region.length == 0) return InvalidArgument("ucx: remote region is empty");
  if (region.addr + region.length < region.addr) {
    return InvalidArgument("ucx: remote region wraps around the address space");
  }
  Guard lock(t_->mu_);
  if (state_ != State::kReady) {
    return state_ == State::kFailed ? status_ : Internal("ucx: endpoint is not connected");
  }
  // Only path (2) (ucp_put/get_nbx) uses the UCX rkey. Paths (1) and (3) never unpack it: the
  // target checks the key's digest instead, and UCX's parser (which takes no length) never sees
  // a forged key there.
  RkeyHandle owned;
  if (native_rma_) {
    ucp_rkey_h rkey = nullptr;
    ucs_status_t st = ucp_ep_rkey_unpack(ep_.get(), region.rkey.data(), &rkey);
    if (st != UCS_OK) return UcsError("ucp_ep_rkey_unpack", st);
    owned = RkeyHandle(rkey);
  }
  samehost::KeyState local = samehost_.valid() ? samehost_.Import(region) : samehost::KeyState{};
  return std::unique_ptr<RemoteKey>(
      new UcxRemoteKey(t_, this, region, std::move(owned), std::move(local)));
}

}  // namespace ferry::ucx
