// Mapping a peer's shareable region (see peer_mapping.h).
#include "transport/samehost/peer_mapping.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <utility>

#include "transport/samehost/identity.h"

namespace ferry::samehost {

PeerMapping::~PeerMapping() {
  if (base_ != nullptr) munmap(base_, bytes_);
}

PeerMapping::PeerMapping(PeerMapping&& o) noexcept {
  *this = std::move(o);
}

PeerMapping& PeerMapping::operator=(PeerMapping&& o) noexcept {
  if (this != &o) {
    if (base_ != nullptr) munmap(base_, bytes_);
    base_ = std::exchange(o.base_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    data_ = std::exchange(o.data_, nullptr);
    epoch_ = std::exchange(o.epoch_, 0);
  }
  return *this;
}

Result<PeerMapping> PeerMapping::Map(pid_t pid, const RegionEntry& e) {
  const std::string who = "shareable region of pid " + std::to_string(pid);
  if (e.shm_fd < 0 || e.length == 0) return InvalidArgument(who + ": not shareable");
  FERRY_ASSIGN_OR_RETURN(common::UniqueFd fd, TakePeerFd(pid, e.shm_fd, who));
  struct stat st {};
  const int seals = fcntl(fd.get(), F_GET_SEALS);
  const bool ok_file =
      fstat(fd.get(), &st) == 0 && static_cast<uint64_t>(st.st_ino) == e.shm_inode && seals >= 0 &&
      (seals & F_SEAL_SHRINK) != 0 && e.shm_offset <= static_cast<uint64_t>(st.st_size) &&
      e.length <= static_cast<uint64_t>(st.st_size) - e.shm_offset;
  if (!ok_file) {
    return ProtocolError(who + ": fd " + std::to_string(e.shm_fd) +
                         " is not the sealed memfd its table entry names");
  }
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t start = e.shm_offset / page * page;
  const size_t bytes = static_cast<size_t>(e.shm_offset - start + e.length);
  const int prot = PROT_READ | ((e.access & kAccessRemoteWrite) ? PROT_WRITE : 0);
  void* p = mmap(nullptr, bytes, prot, MAP_SHARED, fd.get(), static_cast<off_t>(start));
  if (p == MAP_FAILED) return IoError(who + ": mmap", errno);
  PeerMapping m;  // the mapping keeps the memfd alive; fd closes here
  m.base_ = p;
  m.bytes_ = bytes;
  m.data_ = static_cast<uint8_t*>(p) + (e.shm_offset - start);
  m.epoch_ = e.epoch;
  return m;
}

}  // namespace ferry::samehost
