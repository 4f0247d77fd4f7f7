// Context and worker setup, parameters, the registry entry, devices(), and the progress engine.
#include <poll.h>
#include <sys/epoll.h>
#include <ucs/config/parser.h>
#include <uct/api/uct.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>

#include "transport/common/coarse_clock.h"
#include "transport/ucx/errors.h"
#include "transport/ucx/ucx_transport.h"

namespace ferry::ucx {
namespace {

constexpr const char* kParamPrefix = "UCX_";
// Capacity of the region table published to same-host peers (samehost/region_table.h).
constexpr const char* kTableParam = "region_table_entries";

// UCX reads time values with a unit suffix ("250ms").
std::string UcxTime(ferry::Millis m) {
  return std::to_string(std::max<int64_t>(1, m.count())) + "ms";
}

bool UserSet(const TransportOptions& o, const char* key) {
  return o.params.count(std::string(kParamPrefix) + key) != 0;
}

// Registrations on RDMA devices are made and dropped at once, unless the caller chose
// UCX_IB_REG_METHODS (as a parameter or in the environment): UCX 1.13's default registration
// cache ("rcache" first) keeps an MR alive after ucp_mem_unmap, so a deregistered key still
// reached the memory (measured on rxe in the VM; with "direct" the conformance case
// DeregisteredRegionIsRefusedByTheTarget passes over ucx-rc). Ferry registers each region once
// and hands UCX its memh on every operation, so the cache saves nothing on Ferry's data path.
// (ucp_config_modify takes an md setting under its name without the md's prefix: "REG_METHODS"
// is UCX_IB_REG_METHODS; "IB_REG_METHODS" is stored, never applied, and warned about.)
constexpr const char* kRegMethods = "REG_METHODS";
constexpr const char* kRegMethodsEnv = "UCX_IB_REG_METHODS";
constexpr const char* kDirectRegistration = "direct";

// Any RDMA device (verbs' sysfs class), whatever UCX_TLS allows.
bool HasRdmaDevices() {
  std::error_code ec;
  std::filesystem::directory_iterator it("/sys/class/infiniband", ec);
  return !ec && it != std::filesystem::directory_iterator();
}

// Applies TransportOptions::params (and this backend's defaults) to a UCX configuration.
// *direct_registration: RDMA registrations bypass UCX's cache (see kRegMethods).
Status ApplyParams(const TransportOptions& options, ucp_config_t* config,
                   bool* direct_registration) {
  for (const auto& [key, value] : options.params) {
    if (key.rfind(kParamPrefix, 0) != 0 || key.size() == std::strlen(kParamPrefix)) {
      return InvalidArgument("ucx: unknown parameter '" + key +
                             "' (this backend accepts UCX_* variables only, e.g. UCX_TLS)");
    }
    const std::string name = key.substr(std::strlen(kParamPrefix));
    ucs_status_t st = ucp_config_modify(config, name.c_str(), value.c_str());
    if (st != UCS_OK) {
      return InvalidArgument("ucx: parameter " + key + "='" + value +
                             "' rejected: " + UcsError("ucp_config_modify", st).message());
    }
  }
  // Defaults that make the failure model hold (the caller's explicit UCX_* values win):
  //  - UCX keepalive at a third of peer_timeout on every endpoint, so UCX itself notices a dead
  //    peer well inside the bound (its default is 20 s on 128 endpoints);
  //  - error handling on the shared-memory transports: without it UCX 1.13 drops posix/sysv
  //    from endpoints created with UCP_ERR_HANDLING_MODE_PEER ("no peer failure handler"), and
  //    "shm,self" could not connect. Quirk: ucp_config_modify applies a transport (UCT) setting
  //    only under the name of the table that declares it, so it is MM_ERROR_HANDLING (the
  //    shared base of posix and sysv), not POSIX_/SYSV_ERROR_HANDLING.
  struct Default {
    const char* name;
    std::string value;
  };
  const Default defaults[] = {
      {"KEEPALIVE_INTERVAL", UcxTime(std::max(options.peer_timeout / 3, ferry::Millis(1)))},
      {"KEEPALIVE_NUM_EPS", "inf"},
      {"MM_ERROR_HANDLING", "y"},
      // No eager zero-copy sends: when a tcp peer dies with a zcopy send in flight, UCX 1.13
      // completes the request from the ep-failure purge and then again from the tcp ep's error
      // path (uct_iface.h:884 "Assertion comp->count > 0", aborting the process). Seen with the
      // one-sided active messages (iov payloads) in the PeerKilled conformance test. Only where
      // tcp may be used: on rc lanes zero-copy is what moves large puts/gets at speed (with
      // bcopy a 4 MiB get is 512 8 KiB reads through bounce buffers).
      {"ZCOPY_THRESH", "inf"},
  };
  // MM_* only matters when a shared-memory transport may be opened (otherwise UCX warns that
  // the setting was not used).
  std::string tls = "all";
  if (auto it = options.params.find("UCX_TLS"); it != options.params.end()) tls = it->second;
  const bool maybe_shm =
      tls.find("shm") != std::string::npos || tls.find("sm") != std::string::npos ||
      tls.find("posix") != std::string::npos || tls.find("sysv") != std::string::npos ||
      tls.find("all") != std::string::npos || tls.find('^') != std::string::npos;
  const bool maybe_tcp = tls.find("tcp") != std::string::npos ||
                         tls.find("all") != std::string::npos || tls.find('^') != std::string::npos;
  bool maybe_rdma = tls.find("all") != std::string::npos || tls.find('^') != std::string::npos;
  for (const char* t : {"rc", "ud", "dc", "ib", "verbs", "mlx"}) {
    maybe_rdma = maybe_rdma || tls.find(t) != std::string::npos;
  }
  if (auto it = options.params.find(kRegMethodsEnv); it != options.params.end()) {
    *direct_registration = it->second == kDirectRegistration;
  } else if (const char* env = std::getenv(kRegMethodsEnv); env != nullptr) {
    *direct_registration = std::string_view(env) == kDirectRegistration;
  } else if (maybe_rdma && HasRdmaDevices()) {
    // (Where no RDMA transport is opened UCX warns, on stdout, that the setting went unused.)
    // Fails only where UCX was built without IB support (no RDMA lanes either): nothing to do.
    *direct_registration = ucp_config_modify(config, kRegMethods, kDirectRegistration) == UCS_OK;
  }
  for (const Default& d : defaults) {
    if (UserSet(options, d.name)) continue;
    if (!maybe_shm && std::strncmp(d.name, "MM_", 3) == 0) continue;
    if (!maybe_tcp && std::strcmp(d.name, "ZCOPY_THRESH") == 0) continue;
    ucs_status_t st = ucp_config_modify(config, d.name, d.value.c_str());
    if (st != UCS_OK) {
      return UcsError(std::string("ucp_config_modify(") + d.name + "=" + d.value + ")", st);
    }
  }
  return Status::Ok();
}

// True when the context holds an RDMA transport whose RMA UCP may pick for put/get (path 2).
// There the target is protected only by the HCA's view of UCX's registrations, and that view is
// wider than Ferry's regions (measured on rxe, UCX 1.13: a key stays usable after
// ucp_mem_unmap because UCX's registration cache keeps the MR, and every region is registered
// with remote read AND write whatever access Ferry asked for), so target_checks cannot be
// promised. ucp_context_print_info lists the context's resources after UCX_TLS filtering
// ("# resource N : md M dev D flags -- rc_verbs/rxe0:1").
bool HasVerbsRmaLane(ucp_context_h context) {
  char* text = nullptr;
  size_t size = 0;
  FILE* stream = open_memstream(&text, &size);
  if (stream == nullptr) return true;  // cannot tell: do not promise checks
  ucp_context_print_info(context, stream);
  std::fclose(stream);
  const std::string info(text, size);
  std::free(text);
  for (const char* tl : {"rc_verbs/", "rc_mlx5/", "dc_mlx5/", "rc_x/"}) {
    if (info.find(tl) != std::string::npos) return true;
  }
  return false;
}

// ucp_config_modify accepts any name and only warns ("invalid configurations") when a worker
// starts, so typos would pass silently. After ucp_init every UCX component has registered its
// configuration table; a name is known if UCX prints it (or names it as inherited) in the full
// option listing, the same one `ucx_info -cf` shows. (ucs/config/parser.h is part of UCX's
// installed development headers.)
Status CheckParamNames(const TransportOptions& options) {
  char* text = nullptr;
  size_t size = 0;
  FILE* stream = open_memstream(&text, &size);
  if (stream == nullptr) return IoError("open_memstream", errno);
  ucs_config_parser_print_all_opts(
      stream, kParamPrefix,
      static_cast<ucs_config_print_flags_t>(UCS_CONFIG_PRINT_CONFIG | UCS_CONFIG_PRINT_DOC |
                                            UCS_CONFIG_PRINT_HIDDEN),
      &ucs_config_global_list);
  std::fclose(stream);
  std::string listing(text, size);
  std::free(text);
  std::set<std::string> known;
  size_t pos = 0;
  while (pos < listing.size()) {
    size_t end = listing.find('\n', pos);
    if (end == std::string::npos) end = listing.size();
    std::string_view line(listing.data() + pos, end - pos);
    pos = end + 1;
    size_t start = line.find(kParamPrefix);
    if (start == std::string_view::npos) continue;
    size_t stop = start;
    while (stop < line.size() &&
           (std::isalnum(static_cast<unsigned char>(line[stop])) || line[stop] == '_')) {
      ++stop;
    }
    known.emplace(line.substr(start, stop - start));
  }
  for (const auto& [key, value] : options.params) {
    if (known.count(key) == 0) {
      return InvalidArgument("ucx: unknown parameter '" + key +
                             "': UCX has no such variable (see `ucx_info -cf`)");
    }
  }
  return Status::Ok();
}

// Whether UCX_TLS lets UCX use cma (then Ferry's own CMA path may serve one-sided ops).
bool TlsAllowsCma(const TransportOptions& options) {
  auto it = options.params.find("UCX_TLS");
  if (it == options.params.end()) return true;  // default: all
  const std::string& tls = it->second;
  if (!tls.empty() && tls[0] == '^') return tls.find("cma") == std::string::npos;
  return tls.find("cma") != std::string::npos || tls.find("shm") != std::string::npos ||
         tls.find("all") != std::string::npos || tls == "sm" ||
         tls.find("sm,") != std::string::npos || tls.find(",sm") != std::string::npos;
}

ucp_params_t ContextParams() {
  ucp_params_t p{};
  p.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
  p.features = UCP_FEATURE_TAG | UCP_FEATURE_RMA | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  p.name = "ferry";
  return p;
}

std::string Probe() {
  ucp_config_t* raw = nullptr;
  ucs_status_t st = ucp_config_read(nullptr, nullptr, &raw);
  if (st != UCS_OK) return UcsError("ucp_config_read", st).message();
  ConfigHandle config(raw);
  ucp_params_t params = ContextParams();
  ucp_context_h ctx = nullptr;
  st = ucp_init(&params, config.get(), &ctx);
  if (st != UCS_OK) return UcsError("ucp_init", st).message();
  ContextHandle owned(ctx);
  return "";
}

Result<std::unique_ptr<Transport>> CreateUcx(const TransportOptions& options) {
  return UcxTransport::Create(options);
}

std::string DeviceKind(uct_device_type_t type) {
  switch (type) {
    case UCT_DEVICE_TYPE_NET:
      return "netdev";
    case UCT_DEVICE_TYPE_SHM:
      return "shm";
    case UCT_DEVICE_TYPE_ACC:
      return "accelerator";
    case UCT_DEVICE_TYPE_SELF:
      return "self";
    default:
      return "other";
  }
}

}  // namespace

Result<std::unique_ptr<Transport>> UcxTransport::Create(const TransportOptions& options) {
  FERRY_RETURN_IF_ERROR(common::CheckThreadMode(options, kBackendName));
  std::unique_ptr<UcxTransport> t(new UcxTransport(options));
  FERRY_RETURN_IF_ERROR(t->Init());
  return std::unique_ptr<Transport>(std::move(t));
}

UcxTransport::UcxTransport(const TransportOptions& options)
    : options_(options), mu_(options.thread_mode), advertise_(options.advertise) {
  caps_.send_recv = true;
  caps_.write = true;
  caps_.read = true;
  caps_.sparse_write = true;
  caps_.sparse_read = true;
  caps_.notify = true;
  caps_.zero_copy_sparse = true;  // per-segment put/get or direct copies; never packed
  caps_.shared_recv = true;
  caps_.target_checks = true;  // paths 1 and 3 check; Init() clears it where path 2 may run
  caps_.final_deregistration = true;
  caps_.max_message_size = options.max_message_size;
  caps_.max_segments = options.max_segments;
}

Status UcxTransport::Init() {
  ucp_config_t* raw = nullptr;
  ucs_status_t st = ucp_config_read(nullptr, nullptr, &raw);
  if (st != UCS_OK) return UcsError("ucp_config_read", st);
  ConfigHandle config(raw);
  // Ferry's own parameter of this backend; the rest must be UCX variables.
  TransportOptions ucx_options = options_;
  ucx_options.params.erase(kTableParam);
  bool direct_registration = false;
  FERRY_RETURN_IF_ERROR(ApplyParams(ucx_options, config.get(), &direct_registration));

  ucp_params_t params = ContextParams();
  ucp_context_h ctx = nullptr;
  st = ucp_init(&params, config.get(), &ctx);
  if (st != UCS_OK) return UcsError("ucp_init", st);
  context_ = ContextHandle(ctx);
  FERRY_RETURN_IF_ERROR(CheckParamNames(ucx_options));
  verbs_lanes_ = HasVerbsRmaLane(context_.get());
  // Over an RDMA lane (path 2) the HCA is the target's only check, and UCX 1.13 registers every
  // region with full remote rights (measured on rxe: a read-only region took writes, an rkey
  // with its first byte flipped still worked), so target_checks cannot hold. Deregistration is
  // final when registrations bypass UCX's cache (kRegMethods).
  if (verbs_lanes_) {
    caps_.target_checks = false;
    caps_.final_deregistration = direct_registration;
  }

  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  // Every call is made under mu_ (kMulti) or by the caller's one thread at a time (kSingle),
  // which may still be a different thread from call to call: serialised, not single.
  wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  ucp_worker_h worker = nullptr;
  st = ucp_worker_create(context_.get(), &wp, &worker);
  if (st != UCS_OK) return UcsError("ucp_worker_create", st);
  worker_ = WorkerHandle(worker);
  if (ucp_worker_get_efd(worker_.get(), &efd_) != UCS_OK) efd_ = -1;  // Wait() then polls

  FERRY_RETURN_IF_ERROR(SetAmHandler(kAmNotify, &UcxTransport::OnAmNotify));
  FERRY_RETURN_IF_ERROR(SetAmHandler(kAmRmaRequest, &UcxTransport::OnAmRmaRequest));
  FERRY_RETURN_IF_ERROR(SetAmHandler(kAmRmaReply, &UcxTransport::OnAmRmaReply));

  ucp_worker_attr_t wa{};
  wa.field_mask = UCP_WORKER_ATTR_FIELD_ADDRESS;
  st = ucp_worker_query(worker_.get(), &wa);
  if (st != UCS_OK) return UcsError("ucp_worker_query(address)", st);
  const auto* addr = reinterpret_cast<const uint8_t*>(wa.address);
  worker_address_.assign(addr, addr + wa.address_length);
  ucp_worker_release_address(worker_.get(), wa.address);

  identity_ = samehost::HostIdentity::Local();
  cma_allowed_ = TlsAllowsCma(options_);
  if (cma_allowed_) {
    FERRY_ASSIGN_OR_RETURN(uint64_t entries, ParamUint(options_, kTableParam,
                                                       samehost::RegionTable::kDefaultCapacity));
    if (entries > samehost::RegionTable::kMaxCapacity) entries = 0;  // Create() names the range
    FERRY_ASSIGN_OR_RETURN(region_table_,
                           samehost::RegionTable::Create(static_cast<uint32_t>(entries)));
    identity_.table_fd = static_cast<uint64_t>(region_table_.fd());
    identity_.table_token = region_table_.token();
  }

  epoll_ = UniqueFd(epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_) return IoError("epoll_create1", errno);
  // A failed control connection is news for whoever drives progress: signal the worker (thread-
  // safe, takes no lock: the heartbeat thread never waits for mu_).
  FERRY_ASSIGN_OR_RETURN(liveness_, Liveness::Start(options_.peer_timeout, [this] {
                           liveness_event_.store(true, std::memory_order_release);
                           ucp_worker_signal(worker_.get());
                         }));

  next_liveness_ = Clock::now();
  if (options_.progress_thread) {
    progress_thread_ = std::thread([this] { ProgressThreadMain(); });
  }
  return Status::Ok();
}

Status UcxTransport::SetAmHandler(unsigned id, ucp_am_recv_callback_t cb) {
  ucp_am_handler_param_t p{};
  p.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                 UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
  p.id = id;
  p.flags = UCP_AM_FLAG_WHOLE_MSG;
  p.cb = cb;
  p.arg = this;
  ucs_status_t st = ucp_worker_set_am_recv_handler(worker_.get(), &p);
  if (st != UCS_OK) return UcsError("ucp_worker_set_am_recv_handler", st);
  return Status::Ok();
}

UcxTransport::~UcxTransport() {
  stop_ = true;
  if (progress_thread_.joinable()) {
    if (worker_) ucp_worker_signal(worker_.get());
    progress_thread_.join();
  }
  if (!worker_) return;
  Lock lock(mu_);
  // Close every endpoint (pending Ops complete with kCancelled), cancel shared Recvs, then let
  // UCX finish the close requests within a bounded time.
  std::vector<UcxEndpoint*> live;
  for (auto& [id, ep] : live_) live.push_back(ep);
  for (UcxEndpoint* ep : live) {
    FailEndpoint(ep, Cancelled("transport destroyed"), /*graceful=*/false);
  }
  for (auto& st : op_storage_) {
    if (st->t != nullptr && st->request != nullptr && st->type == OpType::kRecv) {
      ucp_request_cancel(worker_.get(), st->request);
    }
  }
  const auto deadline = Clock::now() + std::chrono::seconds(2);
  while (!closing_.empty() && Clock::now() < deadline) ProgressLocked();
  for (void* req : closing_) ucp_request_free(req);
  closing_.clear();
  liveness_.reset();  // its thread signals the worker: it stops before the worker goes
  // The worker goes here, not with the members: destroying it purges the requests UCX still
  // holds (a send to a peer that never answered, a wireup probe) and runs their callbacks, which
  // use Op states, endpoints and reply sets declared after the worker (as members they would
  // already be gone). by_id_ endpoints hold only closed handles now; the sockets and the context
  // go with the members.
  worker_.reset();
  efd_ = -1;
}

unsigned UcxTransport::ProgressLocked() {
  unsigned n = ucp_worker_progress(worker_.get());
  if (control_pending_) HandleControlLocked();
  if (handshakes_ != 0) PollSockets();
  if (!deferred_.empty()) ServeDeferred();
  if (!replies_.empty()) SendReplies();
  if ((++tick_ & 63) == 0 || n == 0) {
    // The coarse clock (vDSO, no TSC read; lags by at most a jiffy) only gates the check: reading
    // steady_clock on every idle turn of a busy-polling caller was ~16 % of a ping-pong process's
    // samples (perf, ucx shm; docs/perf/transport-analysis.md). The check uses the real time.
    if (common::CoarseNow() >= next_liveness_) CheckLiveness(Clock::now());
  }
  if (liveness_event_.load(std::memory_order_relaxed)) {
    liveness_event_.store(false, std::memory_order_relaxed);
    CheckLiveness(Clock::now());
  }
  return n;
}

void UcxTransport::WakeProgressThread() {
  if (thread_sleeping_.load(std::memory_order_relaxed)) ucp_worker_signal(worker_.get());
}

void UcxTransport::ProgressThreadMain() {
  Lock lock(mu_);
  while (!stop_.load()) {
    const size_t before = done_.size();
    unsigned n = ProgressLocked();
    if (done_.size() != before) cv_.notify_all();
    if (n != 0) {
      // Let other threads take the lock between rounds.
      lock.unlock();
      lock.lock();
      continue;
    }
    thread_sleeping_ = true;
    SleepOnWorker(lock, Clock::now() + std::chrono::milliseconds(1));
    thread_sleeping_ = false;
  }
}

void UcxTransport::SleepOnWorker(Lock& lock, Clock::time_point deadline) {
  const auto now = Clock::now();
  if (now >= deadline) return;
  int ms = static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count());
  ms = std::clamp(ms, 0, 2);
  ucs_status_t st = efd_ >= 0 ? ucp_worker_arm(worker_.get()) : UCS_ERR_UNSUPPORTED;
  if (st == UCS_ERR_BUSY) {  // events pending: progress again right away, but let others in
    lock.unlock();
    std::this_thread::yield();
  } else {
    // Sleep on the worker's event fd (when armed) and on the control connections.
    pollfd pfd[2] = {{epoll_.get(), POLLIN, 0}, {efd_, POLLIN, 0}};
    const nfds_t nfds = st == UCS_OK ? 2 : 1;
    if (st != UCS_OK) ms = std::min(ms, 1);  // no worker events: poll UCX at least every ms
    lock.unlock();
    ::poll(pfd, nfds, ms);
  }
  lock.lock();
}

void UcxTransport::Advertise(std::vector<RemoteRegion> regions) {
  Guard lock(mu_);
  advertise_ = std::move(regions);
}

std::vector<DeviceInfo> UcxTransport::devices() const {
  // The transports/devices UCX can use on this host, from UCT's resource query (the same list
  // `ucx_info -d` prints). UCX_TLS then selects among them.
  std::vector<DeviceInfo> out;
  uct_component_h* components = nullptr;
  unsigned num_components = 0;
  if (uct_query_components(&components, &num_components) != UCS_OK) return out;
  for (unsigned c = 0; c < num_components; ++c) {
    uct_component_attr_t attr{};
    attr.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME | UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT;
    if (uct_component_query(components[c], &attr) != UCS_OK) continue;
    std::vector<uct_md_resource_desc_t> mds(attr.md_resource_count);
    attr.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
    attr.md_resources = mds.data();
    if (mds.empty() || uct_component_query(components[c], &attr) != UCS_OK) continue;
    for (const auto& md_desc : mds) {
      uct_md_config_t* md_config = nullptr;
      if (uct_md_config_read(components[c], nullptr, nullptr, &md_config) != UCS_OK) continue;
      uct_md_h md = nullptr;
      ucs_status_t st = uct_md_open(components[c], md_desc.md_name, md_config, &md);
      uct_config_release(md_config);
      if (st != UCS_OK) continue;
      uct_tl_resource_desc_t* res = nullptr;
      unsigned num_res = 0;
      if (uct_md_query_tl_resources(md, &res, &num_res) == UCS_OK) {
        for (unsigned i = 0; i < num_res; ++i) {
          DeviceInfo d;
          d.name = res[i].dev_name;
          d.kind = DeviceKind(res[i].dev_type);
          d.attributes["transport"] = res[i].tl_name;
          d.attributes["component"] = attr.name;
          d.attributes["memory_domain"] = md_desc.md_name;
          if (res[i].sys_device != UCS_SYS_DEVICE_ID_UNKNOWN) {
            d.attributes["sys_device"] = std::to_string(res[i].sys_device);
          }
          out.push_back(std::move(d));
        }
        uct_release_tl_resource_list(res);
      }
      uct_md_close(md);
    }
  }
  uct_release_component_list(components);
  return out;
}

}  // namespace ferry::ucx

namespace ferry {

const BackendEntry& UcxBackendEntry() {
  static const BackendEntry entry{ucx::kBackendName, 20, &ucx::Probe, &ucx::CreateUcx};
  return entry;
}

}  // namespace ferry
