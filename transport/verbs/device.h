// Device, port and GID selection; device listing for ferry-info; the backend's probe.
//
// Selection rules:
//   device: params["device"] by name, else NearestActiveDevice() (see there).
//   port:   params["port"], else the device's first ACTIVE port.
//   GID:    params["gid_index"], else on Ethernet (RoCE) the RoCEv2 GID that maps the netdev's
//           IPv4 address (::ffff:a.b.c.d; index 1 on rxe), else index 0 (InfiniBand, by LID).
// Thread-safety: pure functions over a device context.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "transport/topology.h"
#include "transport/transport.h"
#include "transport/verbs/objects.h"

namespace ferry::verbs {

struct PortChoice {
  std::string device;  // "rxe0"
  uint8_t port = 1;
  uint8_t link_layer = IBV_LINK_LAYER_ETHERNET;
  ibv_mtu active_mtu = IBV_MTU_1024;
  uint32_t max_msg_sz = 0;
  uint16_t lid = 0;
  int gid_index = 0;
  ibv_gid gid{};
  std::string ipv4;  // dotted quad when the GID is IPv4-mapped (RoCEv2), else empty
};

struct DeviceLimits {
  uint32_t max_sge = 1;
  uint32_t max_sge_rd = 1;
  uint32_t max_qp_wr = 1;
  uint32_t max_cqe = 1;
  uint32_t max_srq_wr = 1;
  uint32_t max_rd_atom = 1;       // max_qp_rd_atom
  uint32_t max_init_rd_atom = 1;  // max_qp_init_rd_atom
};

std::string GidToString(const ibv_gid& gid);
// "::ffff:a.b.c.d" -> "a.b.c.d"; empty if the GID is not IPv4-mapped.
std::string Ipv4OfGid(const ibv_gid& gid);
int MtuBytes(ibv_mtu mtu);

// A device as the choice below sees it.
struct DeviceCandidate {
  std::string name;     // "mlx5_0"
  bool active = false;  // has at least one ACTIVE port
};

// The choice behind NearestActiveDevice, free of verbs calls so it can be tested on any host:
// the index in `devices` of the ACTIVE device nearest to the PUs `pus` by `topo`
// (Topology::NearestDeviceTo: same NUMA node first, then NUMA distance, then package), or of the
// first ACTIVE device when `topo` is null, `pus` is empty, the topology fails, or hwloc knows none
// of the active devices. -1 when no device is active.
int ChooseNearestActive(std::span<const DeviceCandidate> devices, const Topology* topo,
                        std::span<const unsigned> pus);

// The device to use when none is named: the ACTIVE device nearest to the CPUs the calling thread
// is bound to (all allowed CPUs when unbound), by hwloc; the first ACTIVE one when hwloc cannot
// tell (soft-RoCE devices such as rxe0 have no PCI locality, so they always tie). nullptr when no
// device has an ACTIVE port. Blocking: loads the hwloc topology (milliseconds).
ibv_context* NearestActiveDevice(const DeviceList& list);

Result<ibv_context*> SelectDevice(const DeviceList& list, const std::string& name);
Result<PortChoice> SelectPort(ibv_context* ctx, uint64_t port_param, int64_t gid_index_param);
Result<DeviceLimits> QueryLimits(ibv_context* ctx);

// Largest max_inline_data the device accepts for an RC QP (probe QPs, descending sizes).
uint32_t ProbeMaxInline(ibv_context* ctx, ibv_pd* pd, ibv_cq* cq, uint32_t max_sge);

// Empty when an RDMA device with an ACTIVE port exists; otherwise why not.
std::string ProbeVerbs();
// Every RDMA device/port with state, link layer, MTU, GIDs and limits.
std::vector<DeviceInfo> ListRdmaDevices();

}  // namespace ferry::verbs
