// A per-process scratch path under GoogleTest's temporary directory, shared by the models tests
// that write files (one definition: the sanitizer stage compiles these tests as unity sources).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

namespace ferry::models::testing {

inline std::string TempPath(const char* name) {
  return ::testing::TempDir() + "/" + name + "." + std::to_string(::getpid());
}

}  // namespace ferry::models::testing
