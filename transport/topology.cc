// hwloc wrapper. hwloc types stay in this file; the header exposes plain structs.
//
// Locality of an I/O device: hwloc hangs PCI devices below bridges below the normal object
// (Package, Group, Machine) whose CPUs are close to the PCIe root complex; the OS device (eth0,
// mlx5_0) is a child of its PCI device. The "smallest non-I/O ancestor" therefore carries the
// device's cpuset and nodeset. On a 2-socket machine a NIC behind socket 1 looks like
//
//   Machine                        nodeset {0,1}
//     Package:0  (NUMANode 0)      nodeset {0}
//     Package:1  (NUMANode 1)      nodeset {1}
//       Bridge > PCIDev 0000:81:00.0 > OSDev mlx5_1, OSDev ib1
//
// and mlx5_1's locality is Package:1. A virtio NIC on a one-node VM hangs from Machine.
#include "transport/topology.h"

#include <hwloc.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <tuple>

namespace ferry {

namespace {

struct BitmapFree {
  void operator()(hwloc_bitmap_s* b) const { hwloc_bitmap_free(b); }
};
using Bitmap = std::unique_ptr<hwloc_bitmap_s, BitmapFree>;

Result<Bitmap> NewBitmap() {
  Bitmap b(hwloc_bitmap_alloc());
  if (!b) return ResourceExhausted("hwloc_bitmap_alloc: out of memory");
  return b;
}

std::string ListString(hwloc_const_bitmap_t set) {
  char* text = nullptr;
  if (set == nullptr || hwloc_bitmap_list_asprintf(&text, set) < 0 || text == nullptr) return {};
  std::string out(text);
  std::free(text);
  return out;
}

// "mlx5_0:1" -> "mlx5_0"; "eth0" stays. Only an all-digit suffix is a port.
std::string_view StripPort(std::string_view name) {
  size_t colon = name.rfind(':');
  if (colon == std::string_view::npos || colon + 1 == name.size()) return name;
  for (size_t i = colon + 1; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return name;
  }
  return name.substr(0, colon);
}

bool IsFabricDevice(hwloc_obj_t obj) {
  return obj->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK ||
         obj->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS;
}

hwloc_obj_t FindDevice(hwloc_topology_t topo, std::string_view name) {
  std::string_view bare = StripPort(name);
  for (hwloc_obj_t o = hwloc_get_next_osdev(topo, nullptr); o; o = hwloc_get_next_osdev(topo, o)) {
    if (IsFabricDevice(o) && o->name != nullptr && bare == o->name) return o;
  }
  return nullptr;
}

// Loaded distances matrix, released on destruction.
class NumaDistances {
 public:
  explicit NumaDistances(hwloc_topology_t topo) : topo_(topo) {
    unsigned nr = 1;
    hwloc_distances_s* d = nullptr;
    if (hwloc_distances_get_by_type(topo, HWLOC_OBJ_NUMANODE, &nr, &d,
                                    HWLOC_DISTANCES_KIND_MEANS_LATENCY, 0) == 0 &&
        nr >= 1) {
      dist_ = d;
    }
  }
  ~NumaDistances() {
    if (dist_ != nullptr) hwloc_distances_release(topo_, dist_);
  }
  NumaDistances(const NumaDistances&) = delete;
  NumaDistances& operator=(const NumaDistances&) = delete;

  // Smallest latency between a node of `from` and a node of `to`; 0 when no matrix is known
  // (every candidate then ties on this criterion).
  uint64_t Min(hwloc_const_bitmap_t from, hwloc_const_bitmap_t to) const {
    if (dist_ == nullptr) return 0;
    uint64_t best = std::numeric_limits<uint64_t>::max();
    for (unsigned i = 0; i < dist_->nbobjs; ++i) {
      if (!hwloc_bitmap_isset(from, dist_->objs[i]->os_index)) continue;
      for (unsigned j = 0; j < dist_->nbobjs; ++j) {
        if (!hwloc_bitmap_isset(to, dist_->objs[j]->os_index)) continue;
        best = std::min(best, dist_->values[i * dist_->nbobjs + j]);
      }
    }
    return best;
  }

 private:
  hwloc_topology_t topo_;
  hwloc_distances_s* dist_ = nullptr;
};

}  // namespace

struct Topology::Impl {
  explicit Impl(hwloc_topology_t t) : topo(t) {}
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  hwloc_topology_t topo;
  ~Impl() {
    if (topo != nullptr) hwloc_topology_destroy(topo);
  }
};

namespace {

struct TopologyDestroy {
  void operator()(hwloc_topology* t) const { hwloc_topology_destroy(t); }
};

// Returns an owned, loaded hwloc topology; the caller wraps it in a Topology::Impl.
template <typename Configure>
Result<hwloc_topology_t> LoadWith(const char* what, Configure configure) {
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) return IoError("hwloc_topology_init", errno);
  std::unique_ptr<hwloc_topology, TopologyDestroy> topo(raw);
  FERRY_RETURN_IF_ERROR(configure(topo.get()));
  // Discovery plugins we do not need. The linux component finds PCI devices in sysfs by itself;
  // the libpciaccess plugin ("pci") adds nothing for network/RDMA devices and leaks ~600 KiB per
  // load (seen under LeakSanitizer); "gl" probes X displays and "opencl" loads GPU runtimes.
  for (const char* name : {"pci", "gl", "opencl"}) {
    // Fails only for an unknown name on an older hwloc: harmless, the plugin is then just used.
    (void)hwloc_topology_set_components(topo.get(), HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, name);
  }
  // KEEP_IMPORTANT keeps bridges and PCI devices leading to interesting OS devices, and the
  // network / OpenFabrics / GPU OS devices themselves (block devices and the like are dropped).
  if (hwloc_topology_set_io_types_filter(topo.get(), HWLOC_TYPE_FILTER_KEEP_IMPORTANT) != 0) {
    return IoError("hwloc_topology_set_io_types_filter", errno);
  }
  if (hwloc_topology_load(topo.get()) != 0) {
    return IoError(std::string("hwloc_topology_load (") + what + ")", errno);
  }
  return topo.release();
}

}  // namespace

Result<BindTarget> BindTarget::Parse(std::string_view text) {
  auto number = [&](std::string_view digits) -> Result<unsigned> {
    if (digits.empty() || digits.size() > 9) {
      return InvalidArgument("bind target '" + std::string(text) + "': expected a number");
    }
    unsigned v = 0;
    for (char c : digits) {
      if (c < '0' || c > '9') {
        return InvalidArgument("bind target '" + std::string(text) + "': expected a number");
      }
      v = v * 10 + static_cast<unsigned>(c - '0');
    }
    return v;
  };
  if (text.empty()) return InvalidArgument("bind target is empty (use numa:N, core:N or a device)");
  if (text.starts_with("numa:")) {
    FERRY_ASSIGN_OR_RETURN(unsigned n, number(text.substr(5)));
    return NumaNode(n);
  }
  if (text.starts_with("core:")) {
    FERRY_ASSIGN_OR_RETURN(unsigned n, number(text.substr(5)));
    return Core(n);
  }
  return Device(std::string(text));
}

Topology::Topology(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Topology::Topology(Topology&&) noexcept = default;
Topology& Topology::operator=(Topology&&) noexcept = default;
Topology::~Topology() = default;

Result<Topology> Topology::Load() {
  FERRY_ASSIGN_OR_RETURN(hwloc_topology_t handle,
                         LoadWith("this system", [](hwloc_topology_t) { return Status::Ok(); }));
  return Topology(std::make_unique<Impl>(handle));
}

Result<Topology> Topology::LoadSynthetic(std::string_view description) {
  std::string desc(description);
  FERRY_ASSIGN_OR_RETURN(
      hwloc_topology_t handle, LoadWith("synthetic", [&](hwloc_topology_t t) {
        if (hwloc_topology_set_synthetic(t, desc.c_str()) != 0) {
          return InvalidArgument("invalid hwloc synthetic description '" + desc + "'");
        }
        return Status::Ok();
      }));
  return Topology(std::make_unique<Impl>(handle));
}

Result<Topology> Topology::LoadXml(std::string_view xml) {
  std::string buf(xml);
  FERRY_ASSIGN_OR_RETURN(
      hwloc_topology_t handle, LoadWith("xml", [&](hwloc_topology_t t) {
        // The length includes the terminating NUL.
        if (hwloc_topology_set_xmlbuffer(t, buf.c_str(), static_cast<int>(buf.size() + 1)) != 0) {
          return InvalidArgument("hwloc refused the XML topology buffer");
        }
        return Status::Ok();
      }));
  return Topology(std::make_unique<Impl>(handle));
}

bool Topology::is_this_system() const {
  return hwloc_topology_is_thissystem(impl_->topo) != 0;
}

TopologySummary Topology::Summary() const {
  hwloc_topology_t t = impl_->topo;
  TopologySummary s;
  auto count = [&](hwloc_obj_type_t type) {
    int n = hwloc_get_nbobjs_by_type(t, type);
    return n > 0 ? static_cast<unsigned>(n) : 0u;
  };
  s.packages = count(HWLOC_OBJ_PACKAGE);
  s.cores = count(HWLOC_OBJ_CORE);
  s.pus = count(HWLOC_OBJ_PU);
  s.total_memory_bytes = hwloc_get_root_obj(t)->total_memory;
  for (hwloc_obj_t n = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_NUMANODE, nullptr); n;
       n = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_NUMANODE, n)) {
    NumaNodeSummary ns;
    ns.os_index = n->os_index;
    ns.memory_bytes = n->attr->numanode.local_memory;
    int cores = hwloc_get_nbobjs_inside_cpuset_by_type(t, n->cpuset, HWLOC_OBJ_CORE);
    int pus = hwloc_get_nbobjs_inside_cpuset_by_type(t, n->cpuset, HWLOC_OBJ_PU);
    ns.cores = cores > 0 ? static_cast<unsigned>(cores) : 0u;
    ns.pus = pus > 0 ? static_cast<unsigned>(pus) : 0u;
    ns.cpuset = ListString(n->cpuset);
    for (int i = hwloc_bitmap_first(n->cpuset); i >= 0; i = hwloc_bitmap_next(n->cpuset, i)) {
      ns.pu_ids.push_back(static_cast<unsigned>(i));
    }
    s.numa_nodes.push_back(std::move(ns));
  }
  std::sort(
      s.numa_nodes.begin(), s.numa_nodes.end(),
      [](const NumaNodeSummary& a, const NumaNodeSummary& b) { return a.os_index < b.os_index; });
  return s;
}

std::vector<TopologyDevice> Topology::Devices() const {
  hwloc_topology_t t = impl_->topo;
  std::vector<TopologyDevice> out;
  for (hwloc_obj_t o = hwloc_get_next_osdev(t, nullptr); o; o = hwloc_get_next_osdev(t, o)) {
    if (!IsFabricDevice(o) || o->name == nullptr) continue;
    TopologyDevice d;
    d.name = o->name;
    d.kind = o->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK ? "netdev" : "rdma";
    for (hwloc_obj_t p = o->parent; p; p = p->parent) {
      if (p->type == HWLOC_OBJ_PCI_DEVICE) {
        char bus[32];
        std::snprintf(bus, sizeof(bus), "%04x:%02x:%02x.%01x", p->attr->pcidev.domain,
                      p->attr->pcidev.bus, p->attr->pcidev.dev, p->attr->pcidev.func);
        d.pci_bus_id = bus;
        break;
      }
    }
    hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(t, o);
    if (anc != nullptr) {
      d.cpuset = ListString(anc->cpuset);
      if (anc->nodeset != nullptr && hwloc_bitmap_weight(anc->nodeset) == 1) {
        d.numa_node = hwloc_bitmap_first(anc->nodeset);
      }
      d.attached_to =
          std::string(hwloc_obj_type_string(anc->type)) + ":" + std::to_string(anc->logical_index);
    }
    out.push_back(std::move(d));
  }
  return out;
}

Result<std::vector<unsigned>> Topology::CurrentThreadPus() const {
  hwloc_topology_t t = impl_->topo;
  if (!is_this_system()) {
    return Unsupported("the thread binding is only known on a topology loaded from this machine");
  }
  FERRY_ASSIGN_OR_RETURN(Bitmap set, NewBitmap());
  if (hwloc_get_cpubind(t, set.get(), HWLOC_CPUBIND_THREAD) != 0) {
    return IoError("hwloc_get_cpubind(thread)", errno);
  }
  hwloc_bitmap_and(set.get(), set.get(), hwloc_topology_get_topology_cpuset(t));
  std::vector<unsigned> pus;
  for (int i = hwloc_bitmap_first(set.get()); i >= 0; i = hwloc_bitmap_next(set.get(), i)) {
    pus.push_back(static_cast<unsigned>(i));
  }
  if (pus.empty()) return Internal("the calling thread is bound to no CPU of the topology");
  return pus;
}

Result<std::string> Topology::NearestDevice(std::span<const std::string> candidates) const {
  if (candidates.empty()) return InvalidArgument("NearestDevice: no candidate devices given");
  FERRY_ASSIGN_OR_RETURN(std::vector<unsigned> pus, CurrentThreadPus());
  return NearestDeviceTo(candidates, pus);
}

Result<std::string> Topology::NearestDeviceTo(std::span<const std::string> candidates,
                                              std::span<const unsigned> pus) const {
  hwloc_topology_t t = impl_->topo;
  if (candidates.empty()) return InvalidArgument("NearestDeviceTo: no candidate devices given");
  if (pus.empty()) return InvalidArgument("NearestDeviceTo: no CPUs given");
  FERRY_ASSIGN_OR_RETURN(Bitmap from, NewBitmap());
  for (unsigned pu : pus) {
    if (hwloc_get_pu_obj_by_os_index(t, pu) == nullptr) {
      return InvalidArgument("NearestDeviceTo: CPU " + std::to_string(pu) +
                             " is not in the topology");
    }
    hwloc_bitmap_set(from.get(), pu);
  }
  FERRY_ASSIGN_OR_RETURN(Bitmap from_nodes, NewBitmap());
  hwloc_cpuset_to_nodeset(t, from.get(), from_nodes.get());
  hwloc_obj_t from_obj = hwloc_get_obj_covering_cpuset(t, from.get());
  NumaDistances distances(t);

  // Lexicographic rank; smaller is nearer. See the header for the criteria.
  using Rank = std::tuple<int, int, uint64_t, int, size_t>;
  Rank best{};
  size_t best_index = 0;
  for (size_t i = 0; i < candidates.size(); ++i) {
    Rank rank{1, 3, std::numeric_limits<uint64_t>::max(), 0, i};
    hwloc_obj_t dev = FindDevice(t, candidates[i]);
    hwloc_obj_t loc = dev ? hwloc_get_non_io_ancestor_obj(t, dev) : nullptr;
    if (loc != nullptr && loc->nodeset != nullptr) {
      int relation = 2;
      if (!hwloc_bitmap_iszero(loc->nodeset) &&
          hwloc_bitmap_isincluded(loc->nodeset, from_nodes.get())) {
        relation = 0;
      } else if (hwloc_bitmap_intersects(loc->nodeset, from_nodes.get())) {
        relation = 1;
      }
      int depth = 0;
      if (from_obj != nullptr) {
        hwloc_obj_t common = hwloc_get_common_ancestor_obj(t, loc, from_obj);
        if (common != nullptr) depth = common->depth;
      }
      rank = Rank{0, relation, distances.Min(from_nodes.get(), loc->nodeset), -depth, i};
    }
    if (i == 0 || rank < best) {
      best = rank;
      best_index = i;
    }
  }
  return candidates[best_index];
}

Status Topology::BindThisThreadNear(const BindTarget& target) const {
  hwloc_topology_t t = impl_->topo;
  if (!is_this_system()) {
    return Unsupported(
        "cannot bind a thread with a topology that was not loaded from this "
        "machine (synthetic or XML)");
  }
  hwloc_const_cpuset_t local = nullptr;
  std::string what;
  switch (target.kind) {
    case BindTarget::Kind::kDevice: {
      what = "device " + target.device;
      hwloc_obj_t dev = FindDevice(t, target.device);
      if (dev == nullptr) {
        return NotFound("bind: no network or RDMA device named '" + target.device +
                        "' in the topology (see ferry-info)");
      }
      hwloc_obj_t loc = hwloc_get_non_io_ancestor_obj(t, dev);
      if (loc != nullptr) local = loc->cpuset;
      break;
    }
    case BindTarget::Kind::kNumaNode: {
      what = "NUMA node " + std::to_string(target.index);
      hwloc_obj_t node = hwloc_get_numanode_obj_by_os_index(t, target.index);
      if (node == nullptr) return NotFound("bind: no " + what + " on this machine");
      local = node->cpuset;
      break;
    }
    case BindTarget::Kind::kCore: {
      what = "core " + std::to_string(target.index);
      hwloc_obj_t core = hwloc_get_obj_by_type(t, HWLOC_OBJ_CORE, target.index);
      if (core == nullptr) return NotFound("bind: no " + what + " on this machine");
      local = core->cpuset;
      break;
    }
  }
  if (local == nullptr) return Internal("bind: " + what + " has no cpuset in hwloc");
  FERRY_ASSIGN_OR_RETURN(Bitmap set, NewBitmap());
  // Restrict to the CPUs this process may use (cgroups, taskset).
  hwloc_bitmap_and(set.get(), local, hwloc_topology_get_allowed_cpuset(t));
  if (hwloc_bitmap_iszero(set.get())) {
    return PermissionDenied("bind: none of the CPUs local to " + what + " (" + ListString(local) +
                            ") is allowed to this process (cgroup cpuset or taskset)");
  }
  if (hwloc_set_cpubind(t, set.get(), HWLOC_CPUBIND_THREAD) != 0) {
    return IoError("bind to " + what + " (CPUs " + ListString(set.get()) + ")", errno);
  }
  return Status::Ok();
}

}  // namespace ferry
