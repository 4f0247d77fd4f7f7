// Topology: summary of synthetic machines, nearest-device choice on described multi-socket
// machines (hwloc XML with PCI and OS devices), binding on this machine.
#include "transport/topology.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <string>
#include <thread>
#include <vector>

namespace ferry {
namespace {

// A device to hang in a generated machine: below NUMA node `node`'s group when node >= 0, else
// below package `package`, else (-1) below the machine itself.
struct FakeDevice {
  std::string name;
  int osdev_type;  // 2 = network, 3 = OpenFabrics (hwloc_obj_osdev_type_e)
  int package;
  int node = -1;
};

std::string Hex(uint64_t mask) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "0x%08llx", static_cast<unsigned long long>(mask));
  return buf;
}

// hwloc 2 XML of a machine with `packages` packages of `nodes_per_package` NUMA nodes of
// `cores_per_node` single-PU cores, and `devices` behind PCI bridges. With one node per package
// the node hangs from the package; with several (sub-NUMA clustering) each node and its cores sit
// in a Group. `distances` (row-major node x node latencies) is added when not empty.
//
//   Machine
//     Package p
//       [Group]  NUMANode n = p * nodes_per_package + k; Core/PU n * cores_per_node + c
std::string MachineXml(int packages, int nodes_per_package, int cores_per_node,
                       const std::vector<FakeDevice>& devices,
                       const std::vector<uint64_t>& distances = {}) {
  const int nodes = packages * nodes_per_package;
  const int pus = nodes * cores_per_node;
  auto cpu_mask = [&](int first, int count) { return ((1ull << count) - 1) << first; };
  int gp = 1;
  // Unique gp_index values (their order does not matter).
  auto id = [&gp] { return std::to_string(gp++); };
  int bus = 1;
  std::string x =
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!DOCTYPE topology SYSTEM "
      "\"hwloc2.dtd\">\n<topology version=\"2.0\">\n";
  auto sets = [](uint64_t cpus, uint64_t node_mask) {
    return " cpuset=\"" + Hex(cpus) + "\" complete_cpuset=\"" + Hex(cpus) + "\" nodeset=\"" +
           Hex(node_mask) + "\" complete_nodeset=\"" + Hex(node_mask) + "\"";
  };
  auto io = [&](const FakeDevice& d) {
    char busid[32];
    std::snprintf(busid, sizeof(busid), "0000:%02x:00.0", bus);
    std::string b = std::string(busid).substr(5, 2);
    ++bus;
    return "<object type=\"Bridge\" gp_index=\"" + id() +
           "\" bridge_type=\"0-1\" depth=\"0\" bridge_pci=\"0000:[" + b + "-" + b +
           "]\">\n<object type=\"PCIDev\" gp_index=\"" + id() + "\" pci_busid=\"" + busid +
           "\" pci_type=\"0200 [15b3:1017] [15b3:0007] 00\" pci_link_speed=\"0.0\">\n"
           "<object type=\"OSDev\" gp_index=\"" +
           id() + "\" name=\"" + d.name + "\" osdev_type=\"" + std::to_string(d.osdev_type) +
           "\"/>\n</object>\n</object>\n";
  };
  const uint64_t all_cpus = cpu_mask(0, pus);
  const uint64_t all_nodes = (1ull << nodes) - 1;
  x += "<object type=\"Machine\" os_index=\"0\"" + sets(all_cpus, all_nodes) +
       " allowed_cpuset=\"" + Hex(all_cpus) + "\" allowed_nodeset=\"" + Hex(all_nodes) +
       "\" gp_index=\"" + id() + "\">\n";
  for (int p = 0; p < packages; ++p) {
    const int first_node = p * nodes_per_package;
    x += "<object type=\"Package\" os_index=\"" + std::to_string(p) + "\"" +
         sets(cpu_mask(first_node * cores_per_node, nodes_per_package * cores_per_node),
              ((1ull << nodes_per_package) - 1) << first_node) +
         " gp_index=\"" + id() + "\">\n";
    for (int n = first_node; n < first_node + nodes_per_package; ++n) {
      const uint64_t cpus = cpu_mask(n * cores_per_node, cores_per_node);
      const uint64_t node = 1ull << n;
      if (nodes_per_package > 1) {
        x += "<object type=\"Group\" os_index=\"" + std::to_string(n) + "\"" + sets(cpus, node) +
             " gp_index=\"" + id() + "\" kind=\"1000\" subkind=\"0\" dont_merge=\"1\">\n";
      }
      x += "<object type=\"NUMANode\" os_index=\"" + std::to_string(n) + "\"" + sets(cpus, node) +
           " gp_index=\"" + id() + "\" local_memory=\"1073741824\"/>\n";
      for (int c = 0; c < cores_per_node; ++c) {
        int pu = n * cores_per_node + c;
        uint64_t m = 1ull << pu;
        x += "<object type=\"Core\" os_index=\"" + std::to_string(c) + "\"" + sets(m, node) +
             " gp_index=\"" + id() + "\">\n<object type=\"PU\" os_index=\"" + std::to_string(pu) +
             "\"" + sets(m, node) + " gp_index=\"" + id() + "\"/>\n</object>\n";
      }
      if (nodes_per_package > 1) {
        for (const auto& d : devices) {
          if (d.node == n) x += io(d);
        }
        x += "</object>\n";
      }
    }
    for (const auto& d : devices) {
      if (d.package == p && (d.node < 0 || nodes_per_package == 1)) x += io(d);
    }
    x += "</object>\n";
  }
  for (const auto& d : devices) {
    if (d.package < 0 && d.node < 0) x += io(d);
  }
  x += "</object>\n";
  if (!distances.empty()) {
    std::string idx, vals;
    for (int n = 0; n < nodes; ++n) idx += std::to_string(n) + " ";
    for (uint64_t v : distances) vals += std::to_string(v) + " ";
    x += "<distances2 type=\"NUMANode\" nbobjs=\"" + std::to_string(nodes) +
         "\" kind=\"5\" indexing=\"os\">\n<indexes length=\"" + std::to_string(idx.size()) + "\">" +
         idx + "</indexes>\n<u64values length=\"" + std::to_string(vals.size()) + "\">" + vals +
         "</u64values>\n</distances2>\n";
  }
  x += "</topology>\n";
  return x;
}

std::vector<unsigned> PusOfPackage(int package, int cores_per_package) {
  std::vector<unsigned> pus;
  for (int c = 0; c < cores_per_package; ++c) {
    pus.push_back(static_cast<unsigned>(package * cores_per_package + c));
  }
  return pus;
}

TEST(TopologySynthetic, SummaryCountsEveryLevel) {
  auto topo = Topology::LoadSynthetic("pack:2 numa:1 core:4 pu:2");
  ASSERT_TRUE(topo.ok()) << topo.status().ToString();
  EXPECT_FALSE(topo->is_this_system());
  TopologySummary s = topo->Summary();
  EXPECT_EQ(s.packages, 2u);
  EXPECT_EQ(s.cores, 8u);
  EXPECT_EQ(s.pus, 16u);
  ASSERT_EQ(s.numa_nodes.size(), 2u);
  EXPECT_EQ(s.numa_nodes[0].os_index, 0u);
  EXPECT_EQ(s.numa_nodes[1].os_index, 1u);
  for (const auto& n : s.numa_nodes) {
    EXPECT_EQ(n.cores, 4u);
    EXPECT_EQ(n.pus, 8u);
  }
  EXPECT_EQ(s.numa_nodes[0].cpuset, "0-7");
  EXPECT_EQ(s.numa_nodes[1].cpuset, "8-15");
  EXPECT_EQ(s.numa_nodes[1].pu_ids.size(), 8u);
  EXPECT_EQ(s.numa_nodes[1].pu_ids.front(), 8u);
  EXPECT_TRUE(topo->Devices().empty());  // synthetic machines have no I/O
}

TEST(TopologySynthetic, RejectsBadDescription) {
  auto topo = Topology::LoadSynthetic("pack:2 bogus:7");
  ASSERT_FALSE(topo.ok());
  EXPECT_EQ(topo.status().code(), Code::kInvalidArgument);
  EXPECT_NE(topo.status().message().find("bogus"), std::string::npos);
}

TEST(TopologySynthetic, CannotBindOrReadBinding) {
  auto topo = Topology::LoadSynthetic("pack:2 numa:1 core:4 pu:2");
  ASSERT_TRUE(topo.ok());
  EXPECT_EQ(topo->BindThisThreadNear(BindTarget::NumaNode(0)).code(), Code::kUnsupported);
  std::vector<std::string> c{"x"};
  EXPECT_EQ(topo->NearestDevice(c).status().code(), Code::kUnsupported);
}

TEST(TopologyXml, DevicesCarryTheirNumaNode) {
  auto topo =
      Topology::LoadXml(MachineXml(2, 1, 4, {{"mlx5_0", 3, 0}, {"ib1", 2, 1}, {"eth0", 2, -1}}));
  ASSERT_TRUE(topo.ok()) << topo.status().ToString();
  auto devs = topo->Devices();
  ASSERT_EQ(devs.size(), 3u);
  std::map<std::string, TopologyDevice> by_name;
  for (auto& d : devs) by_name[d.name] = d;
  EXPECT_EQ(by_name["mlx5_0"].kind, "rdma");
  EXPECT_EQ(by_name["mlx5_0"].numa_node, 0);
  EXPECT_EQ(by_name["mlx5_0"].cpuset, "0-3");
  EXPECT_EQ(by_name["mlx5_0"].attached_to, "Package:0");
  EXPECT_FALSE(by_name["mlx5_0"].pci_bus_id.empty());
  EXPECT_EQ(by_name["ib1"].kind, "netdev");
  EXPECT_EQ(by_name["ib1"].numa_node, 1);
  EXPECT_EQ(by_name["ib1"].cpuset, "4-7");
  EXPECT_EQ(by_name["eth0"].numa_node, -1);  // attached above both nodes
  EXPECT_EQ(by_name["eth0"].cpuset, "0-7");
}

TEST(TopologyXml, NearestPrefersTheSameNumaNode) {
  auto topo = Topology::LoadXml(MachineXml(2, 1, 4, {{"mlx5_0", 3, 0}, {"mlx5_1", 3, 1}}));
  ASSERT_TRUE(topo.ok()) << topo.status().ToString();
  std::vector<std::string> both{"mlx5_0", "mlx5_1"};
  std::vector<std::string> reversed{"mlx5_1", "mlx5_0"};
  for (const auto* cands : {&both, &reversed}) {
    auto p0 = topo->NearestDeviceTo(*cands, PusOfPackage(0, 4));
    ASSERT_TRUE(p0.ok()) << p0.status().ToString();
    EXPECT_EQ(*p0, "mlx5_0");
    auto p1 = topo->NearestDeviceTo(*cands, PusOfPackage(1, 4));
    ASSERT_TRUE(p1.ok());
    EXPECT_EQ(*p1, "mlx5_1");
  }
  // One CPU is enough to decide; ports are ignored.
  std::vector<unsigned> cpu6{6};
  std::vector<std::string> ported{"mlx5_0:1", "mlx5_1:1"};
  EXPECT_EQ(*topo->NearestDeviceTo(ported, cpu6), "mlx5_1:1");
}

TEST(TopologyXml, TiesAndUnknownsFallBackToCallerOrder) {
  auto topo = Topology::LoadXml(MachineXml(2, 1, 4, {{"mlx5_0", 3, 0}, {"mlx5_1", 3, 1}}));
  ASSERT_TRUE(topo.ok());
  // A thread spanning both nodes is equally close to both: the first listed wins.
  std::vector<unsigned> all{0, 1, 2, 3, 4, 5, 6, 7};
  std::vector<std::string> a{"mlx5_1", "mlx5_0"};
  std::vector<std::string> b{"mlx5_0", "mlx5_1"};
  EXPECT_EQ(*topo->NearestDeviceTo(a, all), "mlx5_1");
  EXPECT_EQ(*topo->NearestDeviceTo(b, all), "mlx5_0");
  // Unknown names rank after every known device, even a remote one.
  std::vector<std::string> unknown_first{"nosuch0", "mlx5_1"};
  EXPECT_EQ(*topo->NearestDeviceTo(unknown_first, PusOfPackage(0, 4)), "mlx5_1");
  // Nothing known: the first candidate.
  std::vector<std::string> none{"nosuch0", "nosuch1"};
  EXPECT_EQ(*topo->NearestDeviceTo(none, PusOfPackage(0, 4)), "nosuch0");
}

TEST(TopologyXml, MachineLevelDeviceBeatsRemoteNode) {
  auto topo = Topology::LoadXml(MachineXml(2, 1, 4, {{"mlx5_1", 3, 1}, {"eth0", 2, -1}}));
  ASSERT_TRUE(topo.ok());
  std::vector<std::string> c{"mlx5_1", "eth0"};
  EXPECT_EQ(*topo->NearestDeviceTo(c, PusOfPackage(0, 4)), "eth0");
  EXPECT_EQ(*topo->NearestDeviceTo(c, PusOfPackage(1, 4)), "mlx5_1");
}

TEST(TopologyXml, NumaDistanceMatrixOrdersRemoteNodes) {
  // Four nodes; from node 0, node 2 is nearer (15) than node 3 (30) and node 1 (40).
  std::vector<uint64_t> d = {10, 40, 15, 30,  //
                             40, 10, 30, 15,  //
                             15, 30, 10, 40,  //
                             30, 15, 40, 10};
  auto topo = Topology::LoadXml(
      MachineXml(4, 1, 2, {{"mlx5_1", 3, 1}, {"mlx5_2", 3, 2}, {"mlx5_3", 3, 3}}, d));
  ASSERT_TRUE(topo.ok()) << topo.status().ToString();
  std::vector<std::string> c{"mlx5_1", "mlx5_3", "mlx5_2"};
  EXPECT_EQ(*topo->NearestDeviceTo(c, PusOfPackage(0, 2)), "mlx5_2");
  std::vector<std::string> c2{"mlx5_1", "mlx5_3"};
  EXPECT_EQ(*topo->NearestDeviceTo(c2, PusOfPackage(0, 2)), "mlx5_3");
  // From node 1: node 3 at 15 beats node 2 at 30.
  EXPECT_EQ(*topo->NearestDeviceTo(c, PusOfPackage(1, 2)), "mlx5_1");
  std::vector<std::string> c3{"mlx5_2", "mlx5_3"};
  EXPECT_EQ(*topo->NearestDeviceTo(c3, PusOfPackage(1, 2)), "mlx5_3");
}

TEST(TopologyXml, SubNumaClusteringPrefersTheSamePackage) {
  // Two packages of two NUMA nodes each; no distance matrix. From node 0, the devices on node 1
  // (same package) and node 2 (other package) are both on another node; the common ancestor
  // decides: Package 0 is deeper than the Machine.
  auto topo = Topology::LoadXml(
      MachineXml(2, 2, 2, {{"same_pkg", 3, 0, 1}, {"other_pkg", 3, 1, 2}, {"local", 3, 0, 0}}));
  ASSERT_TRUE(topo.ok()) << topo.status().ToString();
  TopologySummary s = topo->Summary();
  ASSERT_EQ(s.numa_nodes.size(), 4u);
  EXPECT_EQ(s.packages, 2u);
  std::map<std::string, int> node_of;
  for (const auto& d : topo->Devices()) node_of[d.name] = d.numa_node;
  EXPECT_EQ(node_of["same_pkg"], 1);
  EXPECT_EQ(node_of["other_pkg"], 2);
  std::vector<unsigned> node0{0, 1};
  std::vector<std::string> a{"other_pkg", "same_pkg"};
  std::vector<std::string> b{"same_pkg", "other_pkg"};
  EXPECT_EQ(*topo->NearestDeviceTo(a, node0), "same_pkg");
  EXPECT_EQ(*topo->NearestDeviceTo(b, node0), "same_pkg");
  std::vector<std::string> c{"other_pkg", "same_pkg", "local"};
  EXPECT_EQ(*topo->NearestDeviceTo(c, node0), "local");
  // From node 3 (package 1), other_pkg (node 2) shares the package.
  std::vector<unsigned> node3{6, 7};
  EXPECT_EQ(*topo->NearestDeviceTo(b, node3), "other_pkg");
}

TEST(TopologyXml, RejectsBadInput) {
  auto topo = Topology::LoadXml(MachineXml(2, 1, 4, {{"mlx5_0", 3, 0}}));
  ASSERT_TRUE(topo.ok());
  std::vector<std::string> none;
  std::vector<unsigned> cpu0{0};
  EXPECT_EQ(topo->NearestDeviceTo(none, cpu0).status().code(), Code::kInvalidArgument);
  std::vector<std::string> c{"mlx5_0"};
  std::vector<unsigned> bad{99};
  EXPECT_EQ(topo->NearestDeviceTo(c, bad).status().code(), Code::kInvalidArgument);
  EXPECT_FALSE(Topology::LoadXml("<not xml").ok());
}

TEST(BindTargetTest, Parse) {
  auto n = BindTarget::Parse("numa:1");
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n->kind, BindTarget::Kind::kNumaNode);
  EXPECT_EQ(n->index, 1u);
  auto c = BindTarget::Parse("core:12");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->kind, BindTarget::Kind::kCore);
  EXPECT_EQ(c->index, 12u);
  auto d = BindTarget::Parse("mlx5_0:1");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->kind, BindTarget::Kind::kDevice);
  EXPECT_EQ(d->device, "mlx5_0:1");
  EXPECT_FALSE(BindTarget::Parse("numa:").ok());
  EXPECT_FALSE(BindTarget::Parse("core:x").ok());
  EXPECT_FALSE(BindTarget::Parse("").ok());
}

TEST(TopologyThisMachine, LoadsAndBinds) {
  auto topo = Topology::Load();
  ASSERT_TRUE(topo.ok()) << topo.status().ToString();
  EXPECT_TRUE(topo->is_this_system());
  TopologySummary s = topo->Summary();
  EXPECT_GE(s.pus, 1u);
  EXPECT_GE(s.cores, 1u);
  ASSERT_GE(s.numa_nodes.size(), 1u);
  for (const auto& d : topo->Devices()) {
    EXPECT_NE(d.name, "lo");
    EXPECT_TRUE(d.kind == "netdev" || d.kind == "rdma") << d.kind;
  }
  // Bind a fresh thread to the last core and read the binding back.
  std::thread([&] {
    unsigned last = s.cores - 1;
    Status st = topo->BindThisThreadNear(BindTarget::Core(last));
    ASSERT_TRUE(st.ok()) << st.ToString();
    auto pus = topo->CurrentThreadPus();
    ASSERT_TRUE(pus.ok()) << pus.status().ToString();
    EXPECT_GE(pus->size(), 1u);
    EXPECT_LE(pus->size(), s.pus);
    Status node = topo->BindThisThreadNear(BindTarget::NumaNode(s.numa_nodes[0].os_index));
    EXPECT_TRUE(node.ok()) << node.ToString();
    EXPECT_EQ(topo->BindThisThreadNear(BindTarget::NumaNode(4096)).code(), Code::kNotFound);
    EXPECT_EQ(topo->BindThisThreadNear(BindTarget::Core(1u << 20)).code(), Code::kNotFound);
    EXPECT_EQ(topo->BindThisThreadNear(BindTarget::Device("nosuchdev9")).code(), Code::kNotFound);
  }).join();
}

TEST(TopologyThisMachine, NearestAndBindWithARealDevice) {
  auto topo = Topology::Load();
  ASSERT_TRUE(topo.ok());
  auto devs = topo->Devices();
  if (devs.empty()) GTEST_SKIP() << "hwloc sees no network or RDMA device on this machine";
  std::vector<std::string> names{"nosuch0", devs[0].name};
  auto nearest = topo->NearestDevice(names);
  ASSERT_TRUE(nearest.ok()) << nearest.status().ToString();
  EXPECT_EQ(*nearest, devs[0].name);
  std::thread([&] {
    Status st = topo->BindThisThreadNear(BindTarget::Device(devs[0].name));
    EXPECT_TRUE(st.ok()) << st.ToString();
  }).join();
}

}  // namespace
}  // namespace ferry
