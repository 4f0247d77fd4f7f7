// The one explicit list of backends, highest priority first. The engine falls back
// verbs -> ucx -> tcp by availability; tcp is always built and always available.
#include <algorithm>
#include <vector>

#include "transport/backend.h"
#include "config.h"

namespace ferry {

#if FERRY_HAVE_VERBS
const BackendEntry& VerbsBackendEntry();
#endif
#if FERRY_HAVE_UCX
const BackendEntry& UcxBackendEntry();
#endif
const BackendEntry& TcpBackendEntry();

namespace {

std::vector<const BackendEntry*> Entries() {
  std::vector<const BackendEntry*> entries;
#if FERRY_HAVE_VERBS
  entries.push_back(&VerbsBackendEntry());
#endif
#if FERRY_HAVE_UCX
  entries.push_back(&UcxBackendEntry());
#endif
  entries.push_back(&TcpBackendEntry());
  std::stable_sort(entries.begin(), entries.end(),
                   [](const BackendEntry* a, const BackendEntry* b) {
                     return a->priority > b->priority;
                   });
  return entries;
}

}  // namespace

std::vector<BackendInfo> ListBackends() {
  std::vector<BackendInfo> out;
  for (const BackendEntry* e : Entries()) {
    std::string why = e->probe();
    out.push_back({e->name, e->priority, why.empty(), why});
  }
  const char* known[] = {"verbs", "ucx"};
  for (const char* name : known) {
    bool present = std::any_of(out.begin(), out.end(), [&](const BackendInfo& b) {
      return b.name == name;
    });
    if (!present) out.push_back({name, 0, false, "not built (meson feature disabled or missing)"});
  }
  return out;
}

Result<std::unique_ptr<Transport>> CreateTransport(std::string_view name,
                                                   const TransportOptions& options) {
  for (const BackendEntry* e : Entries()) {
    if (name == e->name) return e->create(options);
  }
  for (const BackendInfo& b : ListBackends()) {
    if (name == b.name) return Unsupported("backend '" + std::string(name) + "': " + b.reason);
  }
  return NotFound("no backend named '" + std::string(name) + "' (known: verbs, ucx, tcp)");
}

Result<std::unique_ptr<Transport>> CreateBestTransport(const TransportOptions& options) {
  std::string tried;
  for (const BackendEntry* e : Entries()) {
    if (!e->probe().empty()) continue;
    auto t = e->create(options);
    if (t.ok()) return t;
    tried += std::string(e->name) + ": " + t.status().ToString() + "; ";
  }
  return NotFound("no transport could be created: " + tried);
}

}  // namespace ferry
