// Device choice without a device: ChooseNearestActive over (name, active) candidates and an hwloc
// topology described in XML (two packages, one NUMA node each, a PCI RDMA device on each node).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "transport/topology.h"
#include "transport/verbs/device.h"

namespace ferry::verbs {
namespace {

// Machine: Package p (p = 0, 1) holds NUMANode p and PUs 2p, 2p+1; below it a PCI bridge with
// the OpenFabrics device named devices[p]. hwloc 2 XML as lstopo writes it, trimmed.
std::string TwoSocketXml(const std::string& dev0, const std::string& dev1) {
  auto sets = [](const char* cpus, const char* nodes) {
    return std::string(" cpuset=\"") + cpus + "\" complete_cpuset=\"" + cpus + "\" nodeset=\"" +
           nodes + "\" complete_nodeset=\"" + nodes + "\"";
  };
  int gp = 1;
  auto id = [&gp] { return " gp_index=\"" + std::to_string(gp++) + "\""; };
  std::string x =
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!DOCTYPE topology SYSTEM \"hwloc2.dtd\">\n"
      "<topology version=\"2.0\">\n<object type=\"Machine\" os_index=\"0\"" +
      sets("0x0000000f", "0x00000003") +
      " allowed_cpuset=\"0x0000000f\" allowed_nodeset=\"0x00000003\"" + id() + ">\n";
  const char* pkg_cpus[2] = {"0x00000003", "0x0000000c"};
  const char* node_mask[2] = {"0x00000001", "0x00000002"};
  const char* pu_mask[4] = {"0x00000001", "0x00000002", "0x00000004", "0x00000008"};
  const std::string* dev[2] = {&dev0, &dev1};
  for (int p = 0; p < 2; ++p) {
    x += "<object type=\"Package\" os_index=\"" + std::to_string(p) + "\"" +
         sets(pkg_cpus[p], node_mask[p]) + id() + ">\n";
    x += "<object type=\"NUMANode\" os_index=\"" + std::to_string(p) + "\"" +
         sets(pkg_cpus[p], node_mask[p]) + id() + " local_memory=\"1073741824\"/>\n";
    for (int c = 0; c < 2; ++c) {
      const int pu = 2 * p + c;
      x += "<object type=\"Core\" os_index=\"" + std::to_string(c) + "\"" +
           sets(pu_mask[pu], node_mask[p]) + id() + ">\n<object type=\"PU\" os_index=\"" +
           std::to_string(pu) + "\"" + sets(pu_mask[pu], node_mask[p]) + id() + "/>\n</object>\n";
    }
    const std::string bus = p == 0 ? "01" : "02";
    x += "<object type=\"Bridge\"" + id() + " bridge_type=\"0-1\" depth=\"0\" bridge_pci=\"0000:[" +
         bus + "-" + bus + "]\">\n<object type=\"PCIDev\"" + id() + " pci_busid=\"0000:" + bus +
         ":00.0\" pci_type=\"0200 [15b3:1017] [15b3:0007] 00\" pci_link_speed=\"0.0\">\n"
         "<object type=\"OSDev\"" +
         id() + " name=\"" + *dev[p] + "\" osdev_type=\"3\"/>\n</object>\n</object>\n";
    x += "</object>\n";
  }
  x += "</object>\n</topology>\n";
  return x;
}

const std::vector<unsigned> kPackage0 = {0, 1};
const std::vector<unsigned> kPackage1 = {2, 3};
const std::vector<unsigned> kEverywhere = {0, 1, 2, 3};

TEST(DeviceChoice, NoActiveDeviceIsMinusOne) {
  std::vector<DeviceCandidate> none;
  EXPECT_EQ(ChooseNearestActive(none, nullptr, {}), -1);
  std::vector<DeviceCandidate> down = {{"mlx5_0", false}, {"mlx5_1", false}};
  auto topo = Topology::LoadXml(TwoSocketXml("mlx5_0", "mlx5_1"));
  ASSERT_TRUE(topo.ok()) << topo.status().ToString();
  EXPECT_EQ(ChooseNearestActive(down, &*topo, kPackage1), -1);
}

TEST(DeviceChoice, PrefersTheActiveDeviceOnTheCallersNode) {
  auto topo = Topology::LoadXml(TwoSocketXml("mlx5_0", "mlx5_1"));
  ASSERT_TRUE(topo.ok()) << topo.status().ToString();
  std::vector<DeviceCandidate> both = {{"mlx5_0", true}, {"mlx5_1", true}};
  EXPECT_EQ(ChooseNearestActive(both, &*topo, kPackage0), 0);
  EXPECT_EQ(ChooseNearestActive(both, &*topo, kPackage1), 1);
  std::vector<unsigned> cpu3 = {3};
  EXPECT_EQ(ChooseNearestActive(both, &*topo, cpu3), 1);
  // The list order does not decide when locality does.
  std::vector<DeviceCandidate> reversed = {{"mlx5_1", true}, {"mlx5_0", true}};
  EXPECT_EQ(ChooseNearestActive(reversed, &*topo, kPackage0), 1);
  // A thread allowed everywhere is equally near to both: the first active wins.
  EXPECT_EQ(ChooseNearestActive(both, &*topo, kEverywhere), 0);
  EXPECT_EQ(ChooseNearestActive(reversed, &*topo, kEverywhere), 0);
}

TEST(DeviceChoice, AnInactiveNearDeviceLosesToAnActiveFarOne) {
  auto topo = Topology::LoadXml(TwoSocketXml("mlx5_0", "mlx5_1"));
  ASSERT_TRUE(topo.ok()) << topo.status().ToString();
  std::vector<DeviceCandidate> near_down = {{"mlx5_0", false}, {"mlx5_1", true}};
  EXPECT_EQ(ChooseNearestActive(near_down, &*topo, kPackage0), 1);
}

TEST(DeviceChoice, DevicesWithoutLocalityFallBackToTheFirstActive) {
  // Soft-RoCE: rxe devices hang from no PCI device, so hwloc does not know them.
  auto topo = Topology::LoadXml(TwoSocketXml("mlx5_0", "mlx5_1"));
  ASSERT_TRUE(topo.ok()) << topo.status().ToString();
  std::vector<DeviceCandidate> rxe = {{"rxe0", false}, {"rxe1", true}, {"rxe2", true}};
  EXPECT_EQ(ChooseNearestActive(rxe, &*topo, kPackage1), 1);
  // A known device beats unknown ones, even when listed last.
  std::vector<DeviceCandidate> mixed = {{"rxe0", true}, {"mlx5_1", true}};
  EXPECT_EQ(ChooseNearestActive(mixed, &*topo, kPackage0), 1);
  // No topology, or no CPUs to be near to: the first active device.
  std::vector<DeviceCandidate> both = {{"mlx5_0", true}, {"mlx5_1", true}};
  EXPECT_EQ(ChooseNearestActive(both, nullptr, kPackage1), 0);
  EXPECT_EQ(ChooseNearestActive(both, &*topo, {}), 0);
}

TEST(DeviceChoice, ATopologyErrorFallsBackToTheFirstActive) {
  auto topo = Topology::LoadXml(TwoSocketXml("mlx5_0", "mlx5_1"));
  ASSERT_TRUE(topo.ok()) << topo.status().ToString();
  std::vector<DeviceCandidate> both = {{"mlx5_0", true}, {"mlx5_1", true}};
  std::vector<unsigned> no_such_pu = {99};
  EXPECT_EQ(ChooseNearestActive(both, &*topo, no_such_pu), 0);
}

}  // namespace
}  // namespace ferry::verbs
