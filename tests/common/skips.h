// Skipped cases made visible (issue #25 item 2). meson counts a test binary's exit 0 as OK
// whatever GTEST_SKIP did inside it, and exit 77 as SKIP. RunAllTestsVisibly() runs the selected
// cases like RUN_ALL_TESTS() and then
//   - when any case skipped, prints one line that names them with the first line of each reason:
//       SKIPPED 1 of 2 cases: Launchers.Srun (SKIP: srun not found ...)
//     so a skip inside an otherwise passing test stays visible in its log (gtest's own
//     "[  SKIPPED ]" lines are what scripts/reliability_doc.py and
//     scripts/check-must-run.py count);
//   - returns 77 when cases ran and every one of them skipped (none passed, none failed).
// gtest_main.cc (ferry_gtest_main_dep, tests/common/meson.build) is main() for the test binaries
// that have no main of their own; a binary with its own main returns RunAllTestsVisibly().
#pragma once

namespace ferry::testing {

// meson's exit code for a skipped test.
inline constexpr int kMesonSkip = 77;

// RUN_ALL_TESTS(), the skip line, and kMesonSkip when every case that ran skipped.
int RunAllTestsVisibly();

}  // namespace ferry::testing
