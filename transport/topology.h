// Machine topology (hwloc): NUMA nodes, packages, cores, the network and RDMA devices with their
// locality, the device nearest to a thread, and binding progress threads near a device.
//
// Usage:
//   FERRY_ASSIGN_OR_RETURN(ferry::Topology topo, ferry::Topology::Load());
//   FERRY_ASSIGN_OR_RETURN(std::string dev, topo.NearestDevice({"mlx5_0", "mlx5_1"}));
//   // in the progress thread:
//   FERRY_RETURN_IF_ERROR(topo.BindThisThreadNear(ferry::BindTarget::Device(dev)));
//
// Ownership: a Topology owns its hwloc topology (move-only; destruction frees it).
// Thread-safety: a loaded Topology is read-only; every const method may be called from any number
//   of threads at once. BindThisThreadNear changes only the calling thread's binding.
// Blocking: Load() reads sysfs/procfs (milliseconds); nothing else blocks.
//
// Identifiers: NUMA nodes are named by their OS index (as in /sys/devices/system/node/nodeN and
// DeviceInfo::numa_node); PUs by their OS index (= Linux CPU number); cores by their logical index
// (0..cores-1 in topology order), because Linux core ids repeat across packages.
// A cpuset is printed in hwloc/Linux list syntax, e.g. "0-3,8-11".
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "transport/status.h"

namespace ferry {

struct NumaNodeSummary {
  unsigned os_index = 0;
  uint64_t memory_bytes = 0;  // local memory (0 if the OS does not say)
  unsigned cores = 0;         // cores whose PUs all belong to this node
  unsigned pus = 0;
  std::string cpuset;            // list syntax
  std::vector<unsigned> pu_ids;  // OS indices of its PUs (for NearestDeviceTo)
};

struct TopologySummary {
  unsigned packages = 0;
  unsigned cores = 0;
  unsigned pus = 0;
  uint64_t total_memory_bytes = 0;
  std::vector<NumaNodeSummary> numa_nodes;  // by increasing OS index
};

// A network or OpenFabrics (RDMA) OS device as hwloc sees it.
struct TopologyDevice {
  std::string name;        // "eth0", "ib0", "mlx5_0", "rxe0"
  std::string kind;        // "netdev" (network interface) or "rdma" (OpenFabrics device)
  std::string pci_bus_id;  // "0000:3b:00.0"; empty for virtual devices (rxe, some netdevs)
  // Locality: the NUMA node the device is attached to, or -1 when it is attached above several
  // nodes (e.g. the host bridge of a single-socket machine is local to all of them) or unknown.
  int numa_node = -1;
  std::string cpuset;       // CPUs local to the device (list syntax)
  std::string attached_to;  // the non-I/O object it hangs from, e.g. "Package:1", "Machine:0"
};

// Where to bind a thread.
struct BindTarget {
  enum class Kind : uint8_t { kDevice, kNumaNode, kCore };
  Kind kind = Kind::kDevice;
  std::string device;  // kDevice; a ":port" suffix ("mlx5_0:1") is ignored
  unsigned index = 0;  // kNumaNode: OS index; kCore: logical index

  static BindTarget Device(std::string name) { return {Kind::kDevice, std::move(name), 0}; }
  static BindTarget NumaNode(unsigned os_index) { return {Kind::kNumaNode, {}, os_index}; }
  static BindTarget Core(unsigned logical_index) { return {Kind::kCore, {}, logical_index}; }
  // "numa:N", "core:N", or a device name (e.g. from a configuration file).
  static Result<BindTarget> Parse(std::string_view text);
};

class Topology {
 public:
  // This machine, with I/O devices (PCI devices and network/OpenFabrics OS devices are kept).
  static Result<Topology> Load();
  // A synthetic machine, e.g. "pack:2 numa:1 core:4 pu:2" (hwloc synthetic syntax). It has no I/O
  // devices and cannot be used for binding; for tests and what-if analysis.
  static Result<Topology> LoadSynthetic(std::string_view description);
  // A machine described by hwloc XML (as written by `lstopo --of xml`), including its I/O
  // devices. Cannot be used for binding.
  static Result<Topology> LoadXml(std::string_view xml);

  Topology(Topology&&) noexcept;
  Topology& operator=(Topology&&) noexcept;
  Topology(const Topology&) = delete;
  Topology& operator=(const Topology&) = delete;
  ~Topology();

  // True when loaded from the running machine (binding is possible).
  bool is_this_system() const;

  TopologySummary Summary() const;
  // Network and OpenFabrics OS devices (loopback and purely virtual interfaces without a device
  // node are not reported by hwloc), in hwloc's order.
  std::vector<TopologyDevice> Devices() const;

  // Of `candidates` (device names; a ":port" suffix is ignored), the one nearest to the CPUs the
  // calling thread is currently bound to (all allowed CPUs when unbound). See NearestDeviceTo.
  // Fails with kUnsupported on a topology that is not this system.
  Result<std::string> NearestDevice(std::span<const std::string> candidates) const;

  // Of `candidates`, the one nearest to the PUs `pus` (OS indices). Candidates are ranked by, in
  // order (first difference decides):
  //   1. known to hwloc before unknown;
  //   2. NUMA relation of the device's nodes D to the nodes F that hold `pus`: D inside F (same
  //      NUMA node), then D overlapping F (device attached above several nodes), then disjoint;
  //   3. the smallest NUMA distance between F and D, when the machine reports a latency matrix
  //      (ACPI SLIT); otherwise equal;
  //   4. the deeper common ancestor of the device's locality and `pus` (same package before
  //      another package, for sub-NUMA clustering machines);
  //   5. the caller's order: the first listed candidate wins a tie.
  // So the result is deterministic; when no candidate is known, the first one is returned.
  // Errors: kInvalidArgument for an empty candidate list or a PU that does not exist.
  Result<std::string> NearestDeviceTo(std::span<const std::string> candidates,
                                      std::span<const unsigned> pus) const;

  // The PUs (OS indices) the calling thread is bound to. kUnsupported if not this system.
  Result<std::vector<unsigned>> CurrentThreadPus() const;

  // Binds the calling thread to the CPUs local to `target` (a device's locality, a NUMA node's
  // CPUs, or one core's PUs). Intended for progress threads. kNotFound for an unknown device,
  // node or core; kUnsupported on a topology that is not this system; kIoError if the OS refuses.
  Status BindThisThreadNear(const BindTarget& target) const;

 private:
  struct Impl;
  explicit Topology(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ferry
