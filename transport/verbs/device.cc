#include "transport/verbs/device.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "transport/verbs/errors.h"

namespace ferry::verbs {
namespace {

bool GidIsZero(const ibv_gid& gid) {
  static const ibv_gid kZero{};
  return std::memcmp(&gid, &kZero, sizeof(gid)) == 0;
}

const char* PortStateName(ibv_port_state s) {
  switch (s) {
    case IBV_PORT_DOWN:
      return "DOWN";
    case IBV_PORT_INIT:
      return "INIT";
    case IBV_PORT_ARMED:
      return "ARMED";
    case IBV_PORT_ACTIVE:
      return "ACTIVE";
    case IBV_PORT_ACTIVE_DEFER:
      return "ACTIVE_DEFER";
    default:
      return "NOP";
  }
}

const char* LinkLayerName(uint8_t ll) {
  switch (ll) {
    case IBV_LINK_LAYER_INFINIBAND:
      return "InfiniBand";
    case IBV_LINK_LAYER_ETHERNET:
      return "Ethernet";
    default:
      return "unknown";
  }
}

bool PortActive(ibv_context* ctx, uint8_t port) {
  ibv_port_attr attr{};
  return ibv_query_port(ctx, port, &attr) == 0 && attr.state == IBV_PORT_ACTIVE;
}

int NumaNode(const std::string& device) {
  std::ifstream f("/sys/class/infiniband/" + device + "/device/numa_node");
  int node = -1;
  if (f >> node) return node;
  return -1;
}

// GID entry type name (RoCE v1 / v2 / IB) via ibv_query_gid_ex; "" if unavailable.
std::string GidType(ibv_context* ctx, uint8_t port, int index) {
  ibv_gid_entry entry{};
  if (ibv_query_gid_ex(ctx, port, index, &entry, 0) != 0) return "";
  switch (entry.gid_type) {
    case IBV_GID_TYPE_IB:
      return "IB";
    case IBV_GID_TYPE_ROCE_V1:
      return "RoCEv1";
    case IBV_GID_TYPE_ROCE_V2:
      return "RoCEv2";
    default:
      return "";
  }
}

}  // namespace

std::string GidToString(const ibv_gid& gid) {
  char buf[INET6_ADDRSTRLEN] = {};
  inet_ntop(AF_INET6, gid.raw, buf, sizeof(buf));
  return buf;
}

std::string Ipv4OfGid(const ibv_gid& gid) {
  static const uint8_t kPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (std::memcmp(gid.raw, kPrefix, sizeof(kPrefix)) != 0) return "";
  char buf[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, gid.raw + 12, buf, sizeof(buf));
  return buf;
}

int MtuBytes(ibv_mtu mtu) {
  return 128 << static_cast<int>(mtu);
}

int ChooseNearestActive(std::span<const DeviceCandidate> devices, const Topology* topo,
                        std::span<const unsigned> pus) {
  std::vector<std::string> active;
  std::vector<int> index_of;
  for (size_t i = 0; i < devices.size(); ++i) {
    if (!devices[i].active) continue;
    active.push_back(devices[i].name);
    index_of.push_back(static_cast<int>(i));
  }
  if (active.empty()) return -1;
  if (topo == nullptr || pus.empty() || active.size() == 1) return index_of.front();
  // NearestDeviceTo ranks devices hwloc does not know after known ones and keeps our order on
  // ties, so with no PCI locality at all (soft-RoCE) the first active device wins.
  Result<std::string> nearest = topo->NearestDeviceTo(active, pus);
  if (!nearest.ok()) return index_of.front();
  for (size_t k = 0; k < active.size(); ++k) {
    if (active[k] == *nearest) return index_of[k];
  }
  return index_of.front();
}

ibv_context* NearestActiveDevice(const DeviceList& list) {
  std::vector<DeviceCandidate> devices;
  for (int i = 0; i < list.size(); ++i) {
    ibv_context* ctx = list.at(i);
    DeviceCandidate c{ibv_get_device_name(ctx->device), false};
    ibv_device_attr attr{};
    if (ibv_query_device(ctx, &attr) == 0) {
      for (uint8_t p = 1; p <= attr.phys_port_cnt && !c.active; ++p) c.active = PortActive(ctx, p);
    }
    devices.push_back(std::move(c));
  }
  int chosen = -1;
  const auto active_count = std::count_if(devices.begin(), devices.end(),
                                          [](const DeviceCandidate& c) { return c.active; });
  if (active_count > 1) {
    // Only worth loading hwloc when there is a choice to make. A topology or binding query that
    // fails is not an error here: the first active device is still a correct answer.
    Result<Topology> topo = Topology::Load();
    if (topo.ok()) {
      Result<std::vector<unsigned>> pus = topo->CurrentThreadPus();
      if (pus.ok()) chosen = ChooseNearestActive(devices, &*topo, *pus);
    }
  }
  if (chosen < 0) chosen = ChooseNearestActive(devices, nullptr, {});
  return chosen < 0 ? nullptr : list.at(chosen);
}

Result<ibv_context*> SelectDevice(const DeviceList& list, const std::string& name) {
  if (list.size() == 0) {
    return NotFound(
        "no RDMA devices (ibv_get_device_list returned none); on a kernel without rdma_rxe use "
        "tools/softroce/ferry-vm");
  }
  if (name.empty()) {
    ibv_context* ctx = NearestActiveDevice(list);
    if (ctx == nullptr) return NotFound("no RDMA device has an ACTIVE port");
    return ctx;
  }
  std::string known;
  for (int i = 0; i < list.size(); ++i) {
    std::string n = ibv_get_device_name(list.at(i)->device);
    if (n == name) return list.at(i);
    known += (known.empty() ? "" : ", ") + n;
  }
  return NotFound("RDMA device '" + name + "' not found (present: " + known + ")");
}

Result<PortChoice> SelectPort(ibv_context* ctx, uint64_t port_param, int64_t gid_index_param) {
  PortChoice pc;
  pc.device = ibv_get_device_name(ctx->device);
  ibv_device_attr dattr{};
  FERRY_RETURN_IF_ERROR(
      CheckCall("ibv_query_device(" + pc.device + ")", ibv_query_device(ctx, &dattr)));
  if (port_param != 0) {
    if (port_param > dattr.phys_port_cnt) {
      return InvalidArgument("port " + std::to_string(port_param) + " does not exist on " +
                             pc.device + " (it has " + std::to_string(dattr.phys_port_cnt) + ")");
    }
    pc.port = static_cast<uint8_t>(port_param);
  } else {
    pc.port = 0;
    for (uint8_t p = 1; p <= dattr.phys_port_cnt && pc.port == 0; ++p) {
      if (PortActive(ctx, p)) pc.port = p;
    }
    if (pc.port == 0) return NotFound("no ACTIVE port on RDMA device " + pc.device);
  }
  ibv_port_attr pattr{};
  FERRY_RETURN_IF_ERROR(
      CheckCall("ibv_query_port(" + pc.device + ")", ibv_query_port(ctx, pc.port, &pattr)));
  const std::string where = pc.device + ":" + std::to_string(pc.port);
  if (pattr.state != IBV_PORT_ACTIVE) {
    return Unsupported("port " + where + " is " + PortStateName(pattr.state) + ", not ACTIVE");
  }
  pc.link_layer = pattr.link_layer;
  pc.active_mtu = pattr.active_mtu;
  pc.max_msg_sz = pattr.max_msg_sz;
  pc.lid = pattr.lid;

  if (gid_index_param >= 0) {
    if (gid_index_param >= pattr.gid_tbl_len) {
      return InvalidArgument("gid_index " + std::to_string(gid_index_param) + " is outside the " +
                             std::to_string(pattr.gid_tbl_len) + "-entry GID table of " + where);
    }
    pc.gid_index = static_cast<int>(gid_index_param);
    FERRY_RETURN_IF_ERROR(CheckCall("ibv_query_gid(" + where + ")",
                                    ibv_query_gid(ctx, pc.port, pc.gid_index, &pc.gid)));
    if (GidIsZero(pc.gid)) {
      return InvalidArgument("gid_index " + std::to_string(gid_index_param) + " on " + where +
                             " is an empty GID table entry");
    }
    pc.ipv4 = Ipv4OfGid(pc.gid);
    return pc;
  }
  if (pattr.link_layer != IBV_LINK_LAYER_ETHERNET) {
    pc.gid_index = 0;
    (void)ibv_query_gid(ctx, pc.port, 0, &pc.gid);
    return pc;
  }
  // RoCE: prefer a RoCEv2 entry that maps an IPv4 address (routable, what rdma_cm uses too).
  int fallback = -1;
  for (int i = 0; i < pattr.gid_tbl_len; ++i) {
    ibv_gid gid{};
    if (ibv_query_gid(ctx, pc.port, i, &gid) != 0 || GidIsZero(gid)) continue;
    if (Ipv4OfGid(gid).empty()) continue;
    std::string type = GidType(ctx, pc.port, i);
    if (type == "RoCEv2") {
      pc.gid_index = i;
      pc.gid = gid;
      pc.ipv4 = Ipv4OfGid(gid);
      return pc;
    }
    if (fallback < 0) fallback = i;
  }
  if (fallback < 0) {
    return NotFound("RoCE port " + where +
                    " has no IPv4-mapped GID: give its netdev an IPv4 address or pass "
                    "{\"gid_index\": \"N\"}");
  }
  pc.gid_index = fallback;
  (void)ibv_query_gid(ctx, pc.port, fallback, &pc.gid);
  pc.ipv4 = Ipv4OfGid(pc.gid);
  return pc;
}

Result<DeviceLimits> QueryLimits(ibv_context* ctx) {
  ibv_device_attr a{};
  FERRY_RETURN_IF_ERROR(CheckCall("ibv_query_device", ibv_query_device(ctx, &a)));
  DeviceLimits l;
  l.max_sge = static_cast<uint32_t>(a.max_sge);
  l.max_sge_rd = static_cast<uint32_t>(a.max_sge_rd > 0 ? a.max_sge_rd : a.max_sge);
  l.max_qp_wr = static_cast<uint32_t>(a.max_qp_wr);
  l.max_cqe = static_cast<uint32_t>(a.max_cqe);
  l.max_srq_wr = static_cast<uint32_t>(a.max_srq_wr);
  l.max_rd_atom = static_cast<uint32_t>(a.max_qp_rd_atom);
  l.max_init_rd_atom = static_cast<uint32_t>(a.max_qp_init_rd_atom);
  return l;
}

uint32_t ProbeMaxInline(ibv_context* ctx, ibv_pd* pd, ibv_cq* cq, uint32_t max_sge) {
  (void)ctx;
  for (uint32_t size : {1024u, 512u, 256u, 128u, 64u, 32u}) {
    ibv_qp_init_attr init{};
    init.send_cq = cq;
    init.recv_cq = cq;
    init.qp_type = IBV_QPT_RC;
    init.cap.max_send_wr = 1;
    init.cap.max_recv_wr = 1;
    init.cap.max_send_sge = max_sge;
    init.cap.max_recv_sge = 1;
    init.cap.max_inline_data = size;
    ibv_qp* qp = ibv_create_qp(pd, &init);
    if (qp != nullptr) {
      uint32_t got = init.cap.max_inline_data;
      (void)ibv_destroy_qp(qp);
      return got;
    }
  }
  return 0;
}

std::string ProbeVerbs() {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr || n == 0) {
    if (list != nullptr) ibv_free_device_list(list);
    return "no RDMA devices (ibv_get_device_list returned none); on a kernel without rdma_rxe "
           "use tools/softroce/ferry-vm";
  }
  std::string states;
  bool active = false;
  for (int i = 0; i < n && !active; ++i) {
    ibv_context* ctx = ibv_open_device(list[i]);
    if (ctx == nullptr) continue;
    ibv_device_attr attr{};
    if (ibv_query_device(ctx, &attr) == 0) {
      for (uint8_t p = 1; p <= attr.phys_port_cnt; ++p) {
        ibv_port_attr pa{};
        if (ibv_query_port(ctx, p, &pa) != 0) continue;
        if (pa.state == IBV_PORT_ACTIVE) active = true;
        states += std::string(states.empty() ? "" : ", ") + ibv_get_device_name(list[i]) + ":" +
                  std::to_string(p) + " " + PortStateName(pa.state);
      }
    }
    (void)ibv_close_device(ctx);
  }
  ibv_free_device_list(list);
  if (active) return "";
  return "RDMA devices present but no port is ACTIVE (" + states + ")";
}

std::vector<DeviceInfo> ListRdmaDevices() {
  std::vector<DeviceInfo> out;
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr) return out;
  for (int i = 0; i < n; ++i) {
    ibv_context* ctx = ibv_open_device(list[i]);
    if (ctx == nullptr) continue;
    const std::string name = ibv_get_device_name(list[i]);
    ibv_device_attr attr{};
    if (ibv_query_device(ctx, &attr) == 0) {
      // max_inline needs a probe QP on a throwaway PD and CQ.
      uint32_t max_inline = 0;
      ibv_pd* pd = ibv_alloc_pd(ctx);
      ibv_cq* cq = pd != nullptr ? ibv_create_cq(ctx, 4, nullptr, nullptr, 0) : nullptr;
      if (cq != nullptr) {
        max_inline = ProbeMaxInline(ctx, pd, cq, 1);
        (void)ibv_destroy_cq(cq);
      }
      if (pd != nullptr) (void)ibv_dealloc_pd(pd);
      for (uint8_t p = 1; p <= attr.phys_port_cnt; ++p) {
        ibv_port_attr pa{};
        if (ibv_query_port(ctx, p, &pa) != 0) continue;
        DeviceInfo d;
        d.name = name + ":" + std::to_string(p);
        d.kind = "rdma";
        d.numa_node = NumaNode(name);
        d.attributes["state"] = PortStateName(pa.state);
        d.attributes["link_layer"] = LinkLayerName(pa.link_layer);
        d.attributes["active_mtu"] = std::to_string(MtuBytes(pa.active_mtu));
        d.attributes["max_mtu"] = std::to_string(MtuBytes(pa.max_mtu));
        d.attributes["lid"] = std::to_string(pa.lid);
        d.attributes["max_msg_sz"] = std::to_string(pa.max_msg_sz);
        d.attributes["max_sge"] = std::to_string(attr.max_sge);
        d.attributes["max_sge_rd"] = std::to_string(attr.max_sge_rd);
        d.attributes["max_qp_wr"] = std::to_string(attr.max_qp_wr);
        d.attributes["max_cqe"] = std::to_string(attr.max_cqe);
        d.attributes["max_inline"] = std::to_string(max_inline);
        std::string gids;
        for (int g = 0; g < pa.gid_tbl_len; ++g) {
          ibv_gid gid{};
          if (ibv_query_gid(ctx, p, g, &gid) != 0 || GidIsZero(gid)) continue;
          std::string type = GidType(ctx, p, g);
          gids += (gids.empty() ? "" : ", ") + std::to_string(g) + ": " + GidToString(gid) +
                  (type.empty() ? "" : " (" + type + ")");
        }
        d.attributes["gids"] = gids;
        out.push_back(std::move(d));
      }
    }
    (void)ibv_close_device(ctx);
  }
  ibv_free_device_list(list);
  return out;
}

}  // namespace ferry::verbs
