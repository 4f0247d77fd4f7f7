// The backend configurations every conformance case runs against, and which of them exist here.
//
// A configuration is a backend name plus TransportOptions::params, e.g. "ucx-shm" is the ucx
// backend with UCX_TLS=shm,self. It is available when its backend is compiled in and reports itself
// available (ferry::ListBackends()) and, for configurations that need RDMA hardware, when
// /sys/class/infiniband lists a device.
//
// A "fault+" configuration ("fault+tcp", "fault+ucx-shm", ...) is its base configuration with
// every transport a suite creates through its harness wrapped in a FaultTransport
// (transport/fault/fault.h) whose plan starts clean: the suite must pass unchanged (the wrapper
// is transparent), and cases that inject faults run only there. They double a suite's run time
// and test the wrapper rather than a backend, so they run only when FERRY_TEST_BACKENDS names
// them (tests/conformance/meson.build does, for the error and failure cases).
//
// A "single+" configuration ("single+tcp", "single+ucx-shm", ...) is its base configuration with
// TransportOptions::thread_mode = ThreadMode::kSingle: the suite's cases that keep to one thread
// per transport must pass unchanged without any transport lock (the ones that start a second
// thread on one transport, or a progress thread, are filtered out where tests/conformance/
// meson.build runs them). Like "fault+", they run only when FERRY_TEST_BACKENDS names them.
//
// FERRY_TEST_BACKENDS=name,name,... narrows the list (e.g. FERRY_TEST_BACKENDS=verbs,verbs-oob in
// the soft-RoCE VM). A configuration named there that is unknown or unavailable is an error the
// suite reports as a failing test, never a silent skip.
#pragma once

#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "transport/transport.h"

namespace ferry::testing {

struct BackendConfig {
  std::string name;     // "ucx-shm"
  std::string backend;  // "ucx"
  std::map<std::string, std::string> params;
  bool needs_rdma = false;
  bool fault_wrapped = false;    // a "fault+" configuration: see above
  bool single_threaded = false;  // a "single+" configuration: see above

  // TransportOptions with params (and a "single+" configuration's thread mode) filled in; other
  // fields at their defaults.
  TransportOptions Options() const;
  // `name` with every character gtest does not allow in a test name replaced by '_'.
  std::string TestName() const;
};

void PrintTo(const BackendConfig& config, std::ostream* os);

// Every configuration this suite knows, in a fixed order.
const std::vector<BackendConfig>& AllConfigs();

struct ConfigSelection {
  std::vector<BackendConfig> run;    // instantiate these
  std::vector<std::string> not_run;  // "verbs: no RDMA device" (informational)
  std::vector<std::string> errors;   // requested by FERRY_TEST_BACKENDS but unavailable
};

// Computes the selection once (reads the environment and ListBackends()) and caches it.
const ConfigSelection& SelectedConfigs();

// True when /sys/class/infiniband has at least one entry.
bool HaveRdmaDevice();

}  // namespace ferry::testing
