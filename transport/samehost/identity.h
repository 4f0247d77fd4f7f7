// Who a process is, for deciding whether a peer can be reached by the same-host engine
// (samehost.h), and the one way to take a descriptor out of a peer process.
//
// Contract: plain data and functions; thread-safe.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "transport/common/fd.h"
#include "transport/status.h"

namespace ferry::samehost {

// Sent in a backend's handshake (transport_data), little-endian:
//   struct { u64 pid; u64 pid_ns_inode; u64 host (FNV-1a of boot_id); u64 probe_addr;
//            u64 table_fd (~0: none); u64 table_token; }
// table_fd / table_token name the sender's published region table (region_table.h).
struct HostIdentity {
  static constexpr size_t kWireSize = 48;
  uint64_t pid = 0;
  uint64_t pid_ns = 0;
  uint64_t host = 0;
  uint64_t probe_addr = 0;
  uint64_t table_fd = ~uint64_t{0};
  uint64_t table_token = 0;
  static HostIdentity Local();
  static HostIdentity Parse(const uint8_t* p);  // kWireSize bytes
  void Append(std::vector<uint8_t>* out) const;
};

// True when `peer` is a process on this host in our PID namespace (possibly this one) whose
// memory we may read (checked with a 1-byte process_vm_readv of its probe address).
bool CmaUsable(const HostIdentity& me, const HostIdentity& peer);

// A duplicate of descriptor `remote_fd` of process `pid` (pidfd_open + pidfd_getfd: the same
// ptrace right that cross-memory attach needs). `who` names the object in errors.
Result<common::UniqueFd> TakePeerFd(pid_t pid, int remote_fd, const std::string& who);

}  // namespace ferry::samehost
