// Registration (ucp_mem_map + ucp_rkey_pack) and import (ucp_ep_rkey_unpack + ucp_rkey_ptr).
#include <atomic>

#include "transport/ucx/ucx_status.h"
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
}

UcxMemoryRegion::~UcxMemoryRegion() {
  std::lock_guard<std::mutex> lock(t_->mu_);
  t_->regions_.erase(descriptor_.epoch);  // AM requests naming it are refused from now on
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

  std::lock_guard<std::mutex> lock(mu_);
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
  auto* region = new UcxMemoryRegion(this, static_cast<uint8_t*>(addr), length, access,
                                     std::move(owned), std::move(rkey), g_epoch.fetch_add(1));
  regions_[region->descriptor().epoch] = region;
  return std::unique_ptr<MemoryRegion>(region);
}

UcxRemoteKey::UcxRemoteKey(UcxTransport* t, UcxEndpoint* ep, RemoteRegion region,
                           RkeyHandle rkey, uint8_t* mapped)
    : RemoteKey(std::move(region)), t_(t), ep_(ep), rkey_(std::move(rkey)), mapped_(mapped) {}

UcxRemoteKey::~UcxRemoteKey() {
  std::lock_guard<std::mutex> lock(t_->mu_);
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
  std::lock_guard<std::mutex> lock(t_->mu_);
  if (state_ != State::kReady) {
    return state_ == State::kFailed ? status_ : Internal("ucx: endpoint is not connected");
  }
  ucp_rkey_h rkey = nullptr;
  ucs_status_t st = ucp_ep_rkey_unpack(ep_.get(), region.rkey.data(), &rkey);
  if (st != UCS_OK) return UcsError("ucp_ep_rkey_unpack", st);
  RkeyHandle owned(rkey);
  // Shared-memory fast path: when the whole region (first and last byte, contiguously) maps into
  // this process, sparse/contiguous transfers become plain copies.
  uint8_t* mapped = nullptr;
  void* first = nullptr;
  void* last = nullptr;
  if (ucp_rkey_ptr(rkey, region.addr, &first) == UCS_OK &&
      ucp_rkey_ptr(rkey, region.addr + region.length - 1, &last) == UCS_OK &&
      static_cast<uint8_t*>(last) == static_cast<uint8_t*>(first) + region.length - 1) {
    mapped = static_cast<uint8_t*>(first);
  }
  return std::unique_ptr<RemoteKey>(new UcxRemoteKey(t_, this, region, std::move(owned), mapped));
}

}  // namespace ferry::ucx
