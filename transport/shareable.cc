// The process-wide index of published shareable mappings and ShareableMemory (shareable.h).
#include "transport/shareable.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <map>
#include <mutex>
#include <string>

#include "transport/common/page.h"

namespace ferry {

namespace {

using common::PageSize;

}  // namespace

// The index of published mappings (begin address -> (length, fd, offset)) and the withdrawal
// listeners, process-wide. Lookups happen once per registration, so one mutex each is plenty.
// Listeners run under their own mutex, never under the index's: a listener may take its own
// locks and call FindShareableBacking from elsewhere (lock order: listener mutex -> listener's
// lock -> index mutex), and RemoveMappingWithdrawnListener returning means no call is running.
namespace {

struct Published {
  size_t length;
  int fd;
  uint64_t offset;
};

struct Mappings {
  std::mutex index_mu;
  std::map<uintptr_t, Published> index;  // guarded by index_mu
  std::mutex listener_mu;
  std::map<uint64_t, MappingWithdrawnListener> listeners;  // guarded by listener_mu
  uint64_t next_listener_id = 1;                           // guarded by listener_mu
};

Mappings& Global() {
  static Mappings m;
  return m;
}

}  // namespace

void PublishShareableMapping(const void* addr, size_t length, int fd, uint64_t offset) {
  if (addr == nullptr || length == 0 || fd < 0) return;
  Mappings& m = Global();
  std::lock_guard<std::mutex> lock(m.index_mu);
  m.index[reinterpret_cast<uintptr_t>(addr)] = Published{length, fd, offset};
}

uint64_t AddMappingWithdrawnListener(MappingWithdrawnListener fn) {
  Mappings& m = Global();
  std::lock_guard<std::mutex> lock(m.listener_mu);
  const uint64_t id = m.next_listener_id++;
  m.listeners.emplace(id, std::move(fn));
  return id;
}

void RemoveMappingWithdrawnListener(uint64_t id) {
  Mappings& m = Global();
  std::lock_guard<std::mutex> lock(m.listener_mu);
  m.listeners.erase(id);
}

void WithdrawShareableMapping(const void* addr) {
  Mappings& m = Global();
  size_t length = 0;
  {
    std::lock_guard<std::mutex> lock(m.index_mu);
    auto it = m.index.find(reinterpret_cast<uintptr_t>(addr));
    if (it == m.index.end()) return;
    length = it->second.length;
    m.index.erase(it);
  }
  std::lock_guard<std::mutex> lock(m.listener_mu);
  for (auto& [id, fn] : m.listeners) fn(addr, length);
}

MemoryBacking FindShareableBacking(const void* addr, size_t length) {
  const auto a = reinterpret_cast<uintptr_t>(addr);
  Mappings& m = Global();
  std::lock_guard<std::mutex> lock(m.index_mu);
  auto it = m.index.upper_bound(a);
  if (it == m.index.begin()) return {};
  --it;
  const uintptr_t begin = it->first;
  const Published& p = it->second;
  if (a - begin > p.length || length > p.length - (a - begin)) return {};
  return MemoryBacking{p.fd, p.offset + (a - begin)};
}

ShareableMemory& ShareableMemory::operator=(ShareableMemory&& other) noexcept {
  if (this != &other) {
    Reset();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

void ShareableMemory::Reset() {
  if (data_ != nullptr) {
    WithdrawShareableMapping(data_);
    munmap(data_, size_);
  }
  if (fd_ >= 0) close(fd_);
  data_ = nullptr;
  size_ = 0;
  fd_ = -1;
}

Result<ShareableMemory> ShareableMemory::Allocate(size_t length) {
  if (length == 0) return InvalidArgument("ShareableMemory: length must be > 0");
  ShareableMemory m;
  m.size_ = (length + PageSize() - 1) / PageSize() * PageSize();
  m.fd_ = memfd_create("ferry-shareable", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (m.fd_ < 0) return IoError("memfd_create", errno);
  if (ftruncate(m.fd_, static_cast<off_t>(m.size_)) != 0) {
    return IoError("ftruncate(" + std::to_string(m.size_) + " bytes)", errno);
  }
  // Peers rely on it: a mapping of a memfd that cannot shrink never loses its pages.
  if (fcntl(m.fd_, F_ADD_SEALS, F_SEAL_SHRINK) != 0) return IoError("F_SEAL_SHRINK", errno);
  void* p = mmap(nullptr, m.size_, PROT_READ | PROT_WRITE, MAP_SHARED, m.fd_, 0);
  if (p == MAP_FAILED) return IoError("mmap(" + std::to_string(m.size_) + " bytes)", errno);
  m.data_ = static_cast<uint8_t*>(p);
  PublishShareableMapping(m.data_, m.size_, m.fd_, 0);
  return m;
}

}  // namespace ferry
