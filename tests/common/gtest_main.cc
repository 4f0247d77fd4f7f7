// main() of the test binaries that have none of their own (in place of gtest_main): a run in
// which every selected case skipped exits 77, meson's SKIP, instead of passing (skips.h).
#include <gtest/gtest.h>

#include "tests/common/skips.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  return ferry::testing::RunAllTestsVisibly();
}
