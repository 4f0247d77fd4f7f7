// Host identity and the peer-fd duplication of the same-host engine (see identity.h).
#include "transport/samehost/identity.h"

#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <fstream>

#include "transport/common/bytes.h"

namespace ferry::samehost {
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
  common::AppendLe64(out, pid);
  common::AppendLe64(out, pid_ns);
  common::AppendLe64(out, host);
  common::AppendLe64(out, probe_addr);
  common::AppendLe64(out, table_fd);
  common::AppendLe64(out, table_token);
}

HostIdentity HostIdentity::Parse(const uint8_t* p) {
  HostIdentity id;
  id.pid = common::GetLe64(p);
  id.pid_ns = common::GetLe64(p + 8);
  id.host = common::GetLe64(p + 16);
  id.probe_addr = common::GetLe64(p + 24);
  id.table_fd = common::GetLe64(p + 32);
  id.table_token = common::GetLe64(p + 40);
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

Result<common::UniqueFd> TakePeerFd(pid_t pid, int remote_fd, const std::string& who) {
  const common::UniqueFd pidfd(static_cast<int>(syscall(SYS_pidfd_open, pid, 0)));
  if (!pidfd) return IoError(who + ": pidfd_open", errno);
  common::UniqueFd fd(static_cast<int>(syscall(SYS_pidfd_getfd, pidfd.get(), remote_fd, 0)));
  if (!fd) return IoError(who + ": pidfd_getfd", errno);
  return fd;
}

}  // namespace ferry::samehost
