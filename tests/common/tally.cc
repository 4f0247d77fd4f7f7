#include "tests/common/tally.h"

#include <algorithm>
#include <cstdio>
#include <utility>

namespace ferry::testing {
namespace {

std::mutex g_mu;
std::string g_current;

std::string TakeCurrent() {
  std::lock_guard<std::mutex> lock(g_mu);
  return std::exchange(g_current, std::string());
}

// The first line of a skip message, without gtest's "Skipped" header.
std::string SkipReason(const ::testing::TestResult& result) {
  for (int i = 0; i < result.total_part_count(); ++i) {
    const ::testing::TestPartResult& part = result.GetTestPartResult(i);
    if (!part.skipped()) continue;
    std::string m = part.message();
    if (m.rfind("Skipped", 0) == 0)
      m.erase(0, m.find('\n') == std::string::npos ? m.size() : m.find('\n') + 1);
    if (size_t nl = m.find('\n'); nl != std::string::npos) m.resize(nl);
    return m.empty() ? "no reason given" : m;
  }
  return "no reason given";
}

}  // namespace

void SetCurrentConfig(const std::string& name) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_current = name;
}

ConfigTallyListener::ConfigTallyListener(std::string label, std::vector<std::string> order,
                                         std::vector<std::string> not_run)
    : label_(std::move(label)), order_(std::move(order)), not_run_(std::move(not_run)) {}

void ConfigTallyListener::OnTestStart(const ::testing::TestInfo&) {
  TakeCurrent();
}

void ConfigTallyListener::OnTestEnd(const ::testing::TestInfo& info) {
  std::string config = TakeCurrent();
  if (config.empty()) config = "(setup)";
  const ::testing::TestResult& r = *info.result();
  Tally& t = tallies_[config];
  if (r.Skipped()) {
    ++t.skipped;
    ++t.skip_reasons[SkipReason(r)];
  } else if (r.Failed()) {
    ++t.failed;
  } else {
    ++t.passed;
  }
}

void ConfigTallyListener::OnTestProgramEnd(const ::testing::UnitTest&) {
  std::vector<std::string> names = order_;
  for (const auto& [name, tally] : tallies_) {
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  }
  std::printf("\n");
  for (const std::string& name : names) {
    auto it = tallies_.find(name);
    if (it == tallies_.end()) continue;
    const Tally& t = it->second;
    std::string line = label_ + ": " + name + " ran " + std::to_string(t.passed + t.failed) +
                       " (passed " + std::to_string(t.passed) + ", failed " +
                       std::to_string(t.failed) + "), skipped " + std::to_string(t.skipped);
    if (!t.skip_reasons.empty()) {
      line += " (";
      bool first = true;
      for (const auto& [reason, count] : t.skip_reasons) {
        if (!first) line += "; ";
        first = false;
        line += reason;
        if (count > 1) line += " x" + std::to_string(count);
      }
      line += ")";
    }
    std::printf("%s\n", line.c_str());
  }
  for (const std::string& line : not_run_) {
    // "name: why" -> "<label>: name not instantiated (why)"
    const size_t colon = line.find(": ");
    const std::string name = line.substr(0, colon);
    const std::string why = colon == std::string::npos ? "" : line.substr(colon + 2);
    std::printf("%s: %s not instantiated (%s)\n", label_.c_str(), name.c_str(), why.c_str());
  }
  std::fflush(stdout);
}

}  // namespace ferry::testing
