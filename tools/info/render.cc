// Human-readable rendering of the ferry-info document: one section per topic, aligned columns.
#include <algorithm>
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include "tools/info/info.h"

namespace ferry::info {

namespace {

using json = nlohmann::ordered_json;

// Rows of cells printed with every column padded to its widest cell.
class Table {
 public:
  explicit Table(std::vector<std::string> header) { rows_.push_back(std::move(header)); }
  void Add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void Print(std::ostream& out, const std::string& indent) const {
    std::vector<size_t> width;
    for (const auto& row : rows_) {
      if (width.size() < row.size()) width.resize(row.size(), 0);
      for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
    }
    for (const auto& row : rows_) {
      std::string line = indent;
      for (size_t i = 0; i < row.size(); ++i) {
        line += row[i];
        if (i + 1 < row.size()) line += std::string(width[i] - row[i].size() + 2, ' ');
      }
      out << line << '\n';
    }
  }

 private:
  std::vector<std::vector<std::string>> rows_;
};

std::string Bytes(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

std::string Numa(const json& v) {
  int n = v.get<int>();
  return n < 0 ? "-" : std::to_string(n);
}

std::string Text(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "yes" : "no";
  return v.dump();
}

void PrintBackend(const json& b, std::ostream& out) {
  out << "\nBackend " << b["name"].get<std::string>() << '\n';
  if (!b.value("created", false)) {
    out << "  could not be created: " << b.value("error", std::string("unknown reason")) << '\n';
    return;
  }
  out << "  Capabilities\n";
  Table caps({"CAPABILITY", "VALUE"});
  for (const auto& [k, v] : b["capabilities"].items()) caps.Add({k, Text(v)});
  caps.Print(out, "    ");
  out << "  Devices\n";
  if (b["devices"].empty()) {
    out << "    (none reported)\n";
  } else {
    Table devs({"NAME", "KIND", "NUMA", "ATTRIBUTES"});
    for (const auto& d : b["devices"]) {
      std::string attrs;
      for (const auto& [k, v] : d["attributes"].items()) {
        attrs += (attrs.empty() ? "" : " ") + k + "=" + Text(v);
      }
      devs.Add({d["name"], d["kind"], Numa(d["numa_node"]), attrs});
    }
    devs.Print(out, "    ");
  }
  if (!b["nearest_device_by_numa_node"].empty()) {
    out << "  Nearest device per NUMA node\n";
    Table near({"NUMA", "DEVICE"});
    for (const auto& [node, dev] : b["nearest_device_by_numa_node"].items()) {
      near.Add({node, Text(dev)});
    }
    near.Print(out, "    ");
  }
}

void PrintTopology(const json& t, std::ostream& out) {
  out << "\nTopology (hwloc)\n";
  if (!t.value("loaded", false)) {
    out << "  not available: " << t.value("error", std::string("unknown reason")) << '\n';
    return;
  }
  out << "  " << t["packages"].get<unsigned>() << " package(s), " << t["cores"].get<unsigned>()
      << " core(s), " << t["pus"].get<unsigned>() << " PU(s), "
      << Bytes(t["total_memory_bytes"].get<uint64_t>()) << " memory\n";
  out << "  NUMA nodes\n";
  Table nodes({"NODE", "MEMORY", "CORES", "PUS", "CPUS", "LOCAL DEVICES"});
  for (const auto& n : t["numa_nodes"]) {
    std::string devs;
    for (const auto& d : n["devices"]) devs += (devs.empty() ? "" : ", ") + d.get<std::string>();
    nodes.Add({std::to_string(n["os_index"].get<unsigned>()),
               Bytes(n["memory_bytes"].get<uint64_t>()), std::to_string(n["cores"].get<unsigned>()),
               std::to_string(n["pus"].get<unsigned>()), n["cpuset"], devs.empty() ? "-" : devs});
  }
  nodes.Print(out, "    ");
  out << "  Network and RDMA devices\n";
  if (t["devices"].empty()) {
    out << "    (none found by hwloc)\n";
    return;
  }
  Table devs({"NAME", "KIND", "NUMA", "PCI", "CPUS", "ATTACHED TO"});
  bool above_nodes = false;
  for (const auto& d : t["devices"]) {
    above_nodes = above_nodes || d["numa_node"].get<int>() < 0;
    std::string pci = d["pci_bus_id"];
    devs.Add({d["name"], d["kind"], Numa(d["numa_node"]), pci.empty() ? "-" : pci, d["cpuset"],
              d["attached_to"]});
  }
  devs.Print(out, "    ");
  if (above_nodes)
    out << "    (NUMA '-': attached above several NUMA nodes, equally near to all)\n";
}

}  // namespace

void PrintHuman(const json& doc, std::ostream& out) {
  out << "Ferry " << doc["version"].get<std::string>() << '\n';
  out << "\nBackends\n";
  Table table({"NAME", "PRIORITY", "STATUS"});
  for (const auto& b : doc["backends"]) {
    std::string status =
        b["available"].get<bool>() ? "available" : "unavailable: " + b["reason"].get<std::string>();
    table.Add({b["name"], std::to_string(b["priority"].get<int>()), status});
  }
  table.Print(out, "  ");
  for (const auto& b : doc["backends"]) {
    if (b["available"].get<bool>()) PrintBackend(b, out);
  }
  PrintTopology(doc["topology"], out);
}

}  // namespace ferry::info
