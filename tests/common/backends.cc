#include "tests/common/backends.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <sstream>

namespace ferry::testing {

TransportOptions BackendConfig::Options() const {
  TransportOptions o;
  o.params = params;
  if (single_threaded) o.thread_mode = ThreadMode::kSingle;
  return o;
}

std::string BackendConfig::TestName() const {
  std::string out = name;
  for (char& c : out) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return out;
}

void PrintTo(const BackendConfig& config, std::ostream* os) {
  *os << config.name << " (" << config.backend;
  for (const auto& [k, v] : config.params) *os << " " << k << "=" << v;
  *os << ")";
}

const std::vector<BackendConfig>& AllConfigs() {
  static const std::vector<BackendConfig> kConfigs = {
      {"tcp", "tcp", {}, false},
      {"ucx-shm", "ucx", {{"UCX_TLS", "shm,self"}}, false},
      {"ucx-tcp", "ucx", {{"UCX_TLS", "tcp,self"}}, false},
      {"verbs", "verbs", {}, true},
      {"verbs-oob", "verbs", {{"connect", "oob"}}, true},
      {"ucx-rc",
       "ucx",
       {{"UCX_TLS", "rc_verbs,ud_verbs,self"}, {"UCX_UD_ETH_DGID_CHECK", "n"}},
       true},
      {"fault+tcp", "tcp", {}, false, true},
      {"fault+ucx-shm", "ucx", {{"UCX_TLS", "shm,self"}}, false, true},
      {"fault+ucx-tcp", "ucx", {{"UCX_TLS", "tcp,self"}}, false, true},
      {"single+tcp", "tcp", {}, false, false, true},
      {"single+ucx-shm", "ucx", {{"UCX_TLS", "shm,self"}}, false, false, true},
      {"single+ucx-tcp", "ucx", {{"UCX_TLS", "tcp,self"}}, false, false, true},
      {"single+verbs", "verbs", {}, true, false, true},
  };
  return kConfigs;
}

bool HaveRdmaDevice() {
  std::error_code ec;
  std::filesystem::directory_iterator it("/sys/class/infiniband", ec);
  return !ec && it != std::filesystem::directory_iterator();
}

namespace {

std::vector<std::string> SplitList(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

ConfigSelection Compute() {
  ConfigSelection sel;
  const std::vector<BackendInfo> backends = ListBackends();
  const bool rdma = HaveRdmaDevice();

  // Why a configuration cannot run here; empty when it can.
  auto unavailable = [&](const BackendConfig& c) -> std::string {
    auto it = std::find_if(backends.begin(), backends.end(),
                           [&](const BackendInfo& b) { return b.name == c.backend; });
    if (it == backends.end()) return "backend '" + c.backend + "' unknown to ListBackends()";
    if (!it->available) return "backend '" + c.backend + "' unavailable: " + it->reason;
    if (c.needs_rdma && !rdma) return "no RDMA device (/sys/class/infiniband is empty)";
    return "";
  };

  const char* env = std::getenv("FERRY_TEST_BACKENDS");
  if (env != nullptr && *env != '\0') {
    for (const std::string& want : SplitList(env)) {
      auto it = std::find_if(AllConfigs().begin(), AllConfigs().end(),
                             [&](const BackendConfig& c) { return c.name == want; });
      if (it == AllConfigs().end()) {
        sel.errors.push_back("FERRY_TEST_BACKENDS names unknown configuration '" + want + "'");
        continue;
      }
      std::string why = unavailable(*it);
      if (!why.empty()) {
        sel.errors.push_back("FERRY_TEST_BACKENDS requests '" + want + "' but " + why);
      } else if (std::none_of(sel.run.begin(), sel.run.end(),
                              [&](const BackendConfig& c) { return c.name == want; })) {
        sel.run.push_back(*it);
      }
    }
    return sel;
  }
  for (const BackendConfig& c : AllConfigs()) {
    if (c.fault_wrapped || c.single_threaded) continue;  // on request only (see backends.h)
    std::string why = unavailable(c);
    if (why.empty()) {
      sel.run.push_back(c);
    } else {
      sel.not_run.push_back(c.name + ": " + why);
    }
  }
  return sel;
}

}  // namespace

const ConfigSelection& SelectedConfigs() {
  static const ConfigSelection kSelection = Compute();
  return kSelection;
}

}  // namespace ferry::testing
