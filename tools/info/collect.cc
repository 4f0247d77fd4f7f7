// Gathers backends, their capabilities and devices, and the topology into a JSON document.
#include <optional>
#include <string>
#include <vector>

#include "ferry_config.h"
#include "tools/info/info.h"
#include "transport/topology.h"
#include "transport/transport.h"

namespace ferry::info {

namespace {

using json = nlohmann::ordered_json;

json CapabilitiesJson(const Capabilities& c) {
  return json{{"send_recv", c.send_recv},
              {"write", c.write},
              {"read", c.read},
              {"sparse_write", c.sparse_write},
              {"sparse_read", c.sparse_read},
              {"notify", c.notify},
              {"zero_copy_sparse", c.zero_copy_sparse},
              {"shared_recv", c.shared_recv},
              {"target_checks", c.target_checks},
              {"final_deregistration", c.final_deregistration},
              {"max_message_size", c.max_message_size},
              {"max_segments", c.max_segments}};
}

json DevicesJson(const std::vector<DeviceInfo>& devices) {
  json out = json::array();
  for (const DeviceInfo& d : devices) {
    json attrs = json::object();
    for (const auto& [k, v] : d.attributes) attrs[k] = v;
    out.push_back(
        {{"name", d.name}, {"kind", d.kind}, {"numa_node", d.numa_node}, {"attributes", attrs}});
  }
  return out;
}

json TopologyJson(const Result<Topology>& topo) {
  if (!topo.ok()) return json{{"loaded", false}, {"error", topo.status().ToString()}};
  TopologySummary s = topo->Summary();
  std::vector<TopologyDevice> devices = topo->Devices();
  json nodes = json::array();
  for (const NumaNodeSummary& n : s.numa_nodes) {
    json local = json::array();
    for (const TopologyDevice& d : devices) {
      if (d.numa_node == static_cast<int>(n.os_index)) local.push_back(d.name);
    }
    nodes.push_back({{"os_index", n.os_index},
                     {"memory_bytes", n.memory_bytes},
                     {"cores", n.cores},
                     {"pus", n.pus},
                     {"cpuset", n.cpuset},
                     {"devices", local}});
  }
  json devs = json::array();
  for (const TopologyDevice& d : devices) {
    devs.push_back({{"name", d.name},
                    {"kind", d.kind},
                    {"pci_bus_id", d.pci_bus_id},
                    {"numa_node", d.numa_node},
                    {"cpuset", d.cpuset},
                    {"attached_to", d.attached_to}});
  }
  return json{{"loaded", true},
              {"packages", s.packages},
              {"cores", s.cores},
              {"pus", s.pus},
              {"total_memory_bytes", s.total_memory_bytes},
              {"numa_nodes", nodes},
              {"devices", devs}};
}

// For each NUMA node, which of the backend's devices Topology::NearestDeviceTo picks for a thread
// running there.
json NearestByNode(const Result<Topology>& topo, const std::vector<DeviceInfo>& devices) {
  json out = json::object();
  if (!topo.ok() || devices.empty()) return out;
  std::vector<std::string> names;
  for (const DeviceInfo& d : devices) names.push_back(d.name);
  for (const NumaNodeSummary& n : topo->Summary().numa_nodes) {
    if (n.pu_ids.empty()) continue;  // memory-only node
    auto nearest = topo->NearestDeviceTo(names, n.pu_ids);
    out[std::to_string(n.os_index)] =
        nearest.ok() ? *nearest : "error: " + nearest.status().ToString();
  }
  return out;
}

}  // namespace

json Collect(const std::string& only_backend) {
  Result<Topology> topo = Topology::Load();
  json backends = json::array();
  for (const BackendInfo& b : ListBackends()) {
    if (!only_backend.empty() && b.name != only_backend) continue;
    json entry{{"name", b.name},
               {"priority", b.priority},
               {"available", b.available},
               {"reason", b.reason}};
    if (b.available) {
      // Default options; a backend that refuses to start (e.g. UCX without a usable transport)
      // is reported with its reason and the tool carries on.
      auto t = CreateTransport(b.name, TransportOptions{});
      entry["created"] = t.ok();
      if (t.ok()) {
        std::vector<DeviceInfo> devices = (*t)->devices();
        entry["capabilities"] = CapabilitiesJson((*t)->capabilities());
        entry["devices"] = DevicesJson(devices);
        entry["nearest_device_by_numa_node"] = NearestByNode(topo, devices);
      } else {
        entry["error"] = t.status().ToString();
      }
    }
    backends.push_back(std::move(entry));
  }
  return json{{"version", FERRY_VERSION}, {"backends", backends}, {"topology", TopologyJson(topo)}};
}

}  // namespace ferry::info
