// Entry point of the netns suite: removes namespaces left by crashed earlier runs and makes sure
// SIGTERM/SIGINT (e.g. meson's timeout) remove this run's namespaces before the process dies.
#include <gtest/gtest.h>

#include <cstdio>

#include "tests/common/skips.h"
#include "tests/netns/netns.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const std::string missing = ferry::netns::MissingRequirements();
  if (missing.empty()) {
    ferry::netns::SweepStaleNamespaces();
    ferry::netns::InstallCleanupHandlers();
  } else {
    std::printf("netns suite: every case skips: %s\n", missing.c_str());
  }
  // Without root (or ip, nft) every case skips: exit 77, meson's SKIP.
  int rc = ferry::testing::RunAllTestsVisibly();
  ferry::netns::EmergencyCleanup();  // nothing left normally; covers fatal early returns
  return rc;
}
