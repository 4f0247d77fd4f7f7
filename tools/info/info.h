// ferry-info internals: collect what the runtime sees into one JSON document, then print it
// either as JSON or as aligned human-readable sections. Both outputs come from the same document,
// so they always carry the same information.
#pragma once

#include <iosfwd>
#include <nlohmann/json.hpp>
#include <string>

namespace ferry::info {

// Backends (all, or only `only_backend` when not empty), each available one created with default
// options to list its capabilities and devices (a creation failure is recorded, not fatal), and the
// hwloc topology.
//
// Document shape:
//   { "version": "0.1.0",
//     "backends": [ { "name", "priority", "available", "reason",
//                     "created", "error",                       // when available
//                     "capabilities": {...}, "devices": [ {name, kind, numa_node, attributes} ],
//                     "nearest_device_by_numa_node": { "0": "mlx5_0", ... } } ],
//     "topology": { "loaded", "error", "packages", "cores", "pus", "total_memory_bytes",
//                   "numa_nodes": [ {os_index, memory_bytes, cores, pus, cpuset, devices: [..]} ],
//                   "devices": [ {name, kind, pci_bus_id, numa_node, cpuset, attached_to} ] } }
nlohmann::ordered_json Collect(const std::string& only_backend);

void PrintHuman(const nlohmann::ordered_json& doc, std::ostream& out);

}  // namespace ferry::info
