#include "ps/launch/rendezvous.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <climits>
#include <fstream>
#include <thread>
#include <utility>

#if defined(FERRY_HAVE_PMIX) && FERRY_HAVE_PMIX
#include <pmix.h>
#endif

namespace ferry::ps {
namespace {

struct HostPort {
  std::string host;  // without IPv6 brackets
  uint16_t port = 0;
};

// "host:port" or "[v6]:port"; the port is decimal, 0..65535.
Result<HostPort> ParseHostPort(std::string_view what, std::string_view address) {
  auto bad = [&](std::string_view why) {
    return InvalidArgument(std::string(what) + "='" + std::string(address) + "' " +
                           std::string(why) + "; expected host:port, e.g. node1:29500");
  };
  HostPort out;
  std::string_view port_text;
  if (!address.empty() && address.front() == '[') {
    size_t close = address.find(']');
    if (close == std::string_view::npos || close + 1 >= address.size() ||
        address[close + 1] != ':') {
      return bad("has a malformed [IPv6] host");
    }
    out.host = std::string(address.substr(1, close - 1));
    port_text = address.substr(close + 2);
  } else {
    size_t colon = address.rfind(':');
    if (colon == std::string_view::npos) return bad("has no port");
    out.host = std::string(address.substr(0, colon));
    port_text = address.substr(colon + 1);
    if (out.host.find(':') != std::string::npos) return bad("needs brackets around an IPv6 host");
  }
  if (out.host.empty()) return bad("has no host");
  unsigned port = 0;
  const char* end = port_text.data() + port_text.size();
  auto [ptr, ec] = std::from_chars(port_text.data(), end, port);
  if (port_text.empty() || ec != std::errc() || ptr != end || port > 65535) {
    return bad("has a bad port");
  }
  out.port = static_cast<uint16_t>(port);
  return out;
}

std::string JoinHostPort(std::string_view host, uint16_t port) {
  std::string s;
  const bool v6 = host.find(':') != std::string_view::npos;
  if (v6) s += '[';
  s += host;
  if (v6) s += ']';
  s += ':';
  s += std::to_string(port);
  return s;
}

bool IsNumericIp(const std::string& host) {
  in6_addr buf;
  return inet_pton(AF_INET, host.c_str(), &buf) == 1 ||
         inet_pton(AF_INET6, host.c_str(), &buf) == 1;
}

bool IsWildcard(const std::string& host) {
  return host == "0.0.0.0" || host == "::";
}

// True when `host` resolves to at least one address outside 127.0.0.0/8 and ::1, i.e. one that
// other nodes might reach. (Debian maps the host name to 127.0.1.1 by default: useless to them.)
bool ResolvesToNonLoopback(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) return false;
  bool found = false;
  for (addrinfo* ai = res; ai != nullptr && !found; ai = ai->ai_next) {
    if (ai->ai_family == AF_INET) {
      auto* sin = reinterpret_cast<const sockaddr_in*>(ai->ai_addr);
      found = (ntohl(sin->sin_addr.s_addr) >> 24) != 127;
    } else if (ai->ai_family == AF_INET6) {
      auto* sin6 = reinterpret_cast<const sockaddr_in6*>(ai->ai_addr);
      found = !IN6_IS_ADDR_LOOPBACK(&sin6->sin6_addr) && !IN6_IS_ADDR_V4MAPPED(&sin6->sin6_addr);
    }
  }
  freeaddrinfo(res);
  return found;
}

// The first non-loopback IPv4 address of an interface that is up, or "" if there is none.
std::string FirstNonLoopbackIpv4() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "";
  std::string out;
  for (ifaddrs* ifa = list; ifa != nullptr && out.empty(); ifa = ifa->ifa_next) {
    if (ifa->ifa_addr == nullptr || ifa->ifa_addr->sa_family != AF_INET) continue;
    if ((ifa->ifa_flags & IFF_UP) == 0 || (ifa->ifa_flags & IFF_LOOPBACK) != 0) continue;
    char text[INET_ADDRSTRLEN] = {};
    auto* sin = reinterpret_cast<const sockaddr_in*>(ifa->ifa_addr);
    if (inet_ntop(AF_INET, &sin->sin_addr, text, sizeof(text)) != nullptr) out = text;
  }
  freeifaddrs(list);
  return out;
}

// The host name rank 0 advertises for a coordinator bound to a wildcard address (rule c).
Result<std::string> AdvertisedHost(const LaunchEnv& env) {
  if (!env.coordinator_host.empty()) return env.coordinator_host;
  if (env.size == env.local_size) return std::string("127.0.0.1");  // every rank is on this host
  char name[HOST_NAME_MAX + 1] = {};
  if (gethostname(name, sizeof(name) - 1) == 0 && name[0] != '\0' && ResolvesToNonLoopback(name)) {
    return std::string(name);
  }
  std::string ip = FirstNonLoopbackIpv4();
  if (!ip.empty()) return ip;
  return NotFound(std::string("no address other hosts can reach for the coordinator: host name '") +
                  name +
                  "' does not resolve to a non-loopback address and no interface has a "
                  "non-loopback IPv4 address; set FERRY_COORDINATOR_HOST to rank 0's host name");
}

// Calls start_on_rank0 and parses what it returns.
Result<HostPort> Start(const StartCoordinatorFn& start_on_rank0, const std::string& bind,
                       std::string_view hint) {
  if (!start_on_rank0) return InvalidArgument("FindCoordinator on rank 0 needs start_on_rank0");
  Result<std::string> bound = start_on_rank0(bind);
  if (!bound.ok()) {
    Status s = bound.status().Annotate("starting the coordinator on " + bind);
    if (hint.empty()) return s;
    return Status(s.code(), s.message() + "; " + std::string(hint));
  }
  auto parsed = ParseHostPort("start_on_rank0's bound address", *bound);
  if (!parsed.ok()) return Internal(parsed.status().message());
  if (parsed->port == 0) {
    return Internal("start_on_rank0 returned port 0 for " + bind +
                    "; it must return the bound port");
  }
  return parsed;
}

// Checks that a fixed-port bind got that port.
Status ExpectPort(const HostPort& bound, uint16_t port, const std::string& bind) {
  if (bound.port == port) return Status::Ok();
  return Internal("start_on_rank0(" + bind + ") returned port " + std::to_string(bound.port));
}

// tmp file in the same folder + rename: a reader sees no file or the whole address.
Status WriteFileAtomically(const std::string& path, const std::string& contents) {
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return IoError("FERRY_COORDINATOR_FILE: open " + tmp, errno);
  size_t done = 0;
  while (done < contents.size()) {
    ssize_t n = write(fd, contents.data() + done, contents.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      close(fd);
      unlink(tmp.c_str());
      return IoError("FERRY_COORDINATOR_FILE: write " + tmp, err);
    }
    done += static_cast<size_t>(n);
  }
  if (close(fd) != 0) {
    int err = errno;
    unlink(tmp.c_str());
    return IoError("FERRY_COORDINATOR_FILE: close " + tmp, err);
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    unlink(tmp.c_str());
    return IoError("FERRY_COORDINATOR_FILE: rename " + tmp + " to " + path, err);
  }
  return Status::Ok();
}

// Rule (b) on a rank != 0 without FERRY_COORDINATOR: poll the file rank 0 writes.
Result<std::string> WaitForFile(const std::string& path, Millis timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    std::ifstream in(path);
    if (in) {
      std::string line;
      std::getline(in, line);
      if (!line.empty()) {
        FERRY_RETURN_IF_ERROR(ParseHostPort("FERRY_COORDINATOR_FILE " + path, line).status());
        return line;
      }
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      return Timeout("FERRY_COORDINATOR_FILE " + path + " did not appear within " +
                     std::to_string(timeout.count()) +
                     " ms; rank 0 writes it once its coordinator listens (is rank 0 running?), or "
                     "set FERRY_COORDINATOR=host:port on every rank");
    }
    std::this_thread::sleep_for(Millis(20));
  }
}

std::string RankText(const LaunchEnv& env) {
  return std::string(LauncherName(env.launcher)) + " rank " + std::to_string(env.rank) + " of " +
         std::to_string(env.size);
}

constexpr std::string_view kSetCoordinator =
    "set FERRY_COORDINATOR=host:port (rank 0's host and a free port) for every rank";

// Rule (a).
Result<std::string> FromCoordinatorVariable(const LaunchEnv& env,
                                            const StartCoordinatorFn& start_on_rank0) {
  FERRY_ASSIGN_OR_RETURN(HostPort want, ParseHostPort("FERRY_COORDINATOR", env.coordinator));
  if (want.port == 0) {
    return InvalidArgument("FERRY_COORDINATOR='" + env.coordinator +
                           "' has port 0; the other ranks need the real port: choose a free one");
  }
  if (env.rank == 0) {
    const std::string bind =
        JoinHostPort(IsNumericIp(want.host) ? want.host : "0.0.0.0", want.port);
    FERRY_ASSIGN_OR_RETURN(HostPort bound, Start(start_on_rank0, bind,
                                                 "FERRY_COORDINATOR='" + env.coordinator +
                                                     "' must name a free port on rank 0's host"));
    FERRY_RETURN_IF_ERROR(ExpectPort(bound, want.port, bind));
  }
  return env.coordinator;
}

// Rule (b).
Result<std::string> FromCoordinatorFile(const LaunchEnv& env,
                                        const StartCoordinatorFn& start_on_rank0, Millis timeout) {
  if (env.rank != 0) return WaitForFile(env.coordinator_file, timeout);
  const std::string bind = env.coordinator_bind.empty() ? "127.0.0.1:0" : env.coordinator_bind;
  FERRY_RETURN_IF_ERROR(ParseHostPort("FERRY_COORDINATOR_BIND", bind).status());
  FERRY_ASSIGN_OR_RETURN(HostPort bound,
                         Start(start_on_rank0, bind, "check FERRY_COORDINATOR_BIND"));
  if (IsWildcard(bound.host)) {
    FERRY_ASSIGN_OR_RETURN(bound.host, AdvertisedHost(env));
  }
  std::string address = JoinHostPort(bound.host, bound.port);
  FERRY_RETURN_IF_ERROR(WriteFileAtomically(env.coordinator_file, address + "\n"));
  return address;
}

// Rule (d).
Result<std::string> FromSlurmStep(const LaunchEnv& env, const StartCoordinatorFn& start_on_rank0) {
  if (env.job_id.empty() || env.step_id.empty()) {
    return InvalidArgument(RankText(env) +
                           ": SLURM_JOB_ID or SLURM_STEP_ID is missing, so no coordinator port "
                           "can be derived; " +
                           std::string(kSetCoordinator));
  }
  if (env.nodes.empty()) {
    return InvalidArgument(RankText(env) +
                           ": SLURM_STEP_NODELIST is missing, so rank 0's node is unknown; " +
                           std::string(kSetCoordinator));
  }
  const uint16_t port = DerivedCoordinatorPort(env.job_id, env.step_id);
  std::string host = env.coordinator_host;
  if (host.empty()) host = env.nodes.size() == 1 ? "127.0.0.1" : env.nodes.front();
  if (env.rank == 0) {
    if (env.coordinator_host.empty() && env.nodes.size() > 1 && !env.node_name.empty() &&
        env.node_name != env.nodes.front()) {
      return InvalidArgument(RankText(env) + " runs on " + env.node_name +
                             ", not on the step's first node " + env.nodes.front() +
                             " (a non-block task distribution?); set FERRY_COORDINATOR_HOST=" +
                             env.node_name + " or FERRY_COORDINATOR=host:port");
    }
    const std::string bind = JoinHostPort("0.0.0.0", port);
    FERRY_ASSIGN_OR_RETURN(
        HostPort bound,
        Start(start_on_rank0, bind,
              "the port derived from Slurm job " + env.job_id + " step " + env.step_id +
                  " may be in use; " + std::string(kSetCoordinator) + ", or use srun --mpi=pmix"));
    FERRY_RETURN_IF_ERROR(ExpectPort(bound, port, bind));
  }
  return JoinHostPort(host, port);
}

#if defined(FERRY_HAVE_PMIX) && FERRY_HAVE_PMIX

constexpr char kPmixKey[] = "ferry.coordinator";
// Rank 0 publishes "error:<reason>" instead of an address when its coordinator failed to start.
constexpr std::string_view kPmixErrorPrefix = "error:";

Status PmixStatus(std::string_view call, pmix_status_t rc) {
  std::string m = std::string(call) + ": " + PMIx_Error_string(rc);
  if (rc == PMIX_ERR_TIMEOUT) return Timeout(m + "; is every rank running?");
  return Status(Code::kIoError, m + "; " + std::string(kSetCoordinator) + " to bypass PMIx");
}

// PMIx_Init on construction, PMIx_Finalize on destruction (PMIx counts the pairs).
class PmixSession {
 public:
  static Result<PmixSession> Create() {
    PmixSession session;
    pmix_status_t rc = PMIx_Init(&session.self_, nullptr, 0);
    if (rc != PMIX_SUCCESS) return PmixStatus("PMIx_Init", rc);
    session.live_ = true;
    return session;
  }
  PmixSession(PmixSession&& other) noexcept : self_(other.self_), live_(other.live_) {
    other.live_ = false;
  }
  PmixSession& operator=(PmixSession&&) = delete;
  ~PmixSession() {
    if (live_) PMIx_Finalize(nullptr, 0);
  }
  const pmix_proc_t& self() const { return self_; }

 private:
  PmixSession() = default;
  pmix_proc_t self_{};
  bool live_ = false;
};

Result<std::string> FromPmix(const LaunchEnv& env, const StartCoordinatorFn& start_on_rank0,
                             Millis timeout) {
  FERRY_ASSIGN_OR_RETURN(PmixSession pmix, PmixSession::Create());
  if (pmix.self().rank != static_cast<pmix_rank_t>(env.rank)) {
    return InvalidArgument(RankText(env) + " but PMIx says rank " +
                           std::to_string(pmix.self().rank) +
                           "; the launcher variables and PMIx disagree");
  }
  // PMIX_TIMEOUT is in whole seconds; 0 would mean "forever".
  int timeout_s = static_cast<int>((timeout.count() + 999) / 1000);
  if (timeout_s < 1) timeout_s = 1;

  Result<std::string> address = Internal("unset");
  if (env.rank == 0) {
    Result<HostPort> bound = Start(start_on_rank0, "0.0.0.0:0", "");
    if (bound.ok()) {
      Result<std::string> host = AdvertisedHost(env);
      address = host.ok() ? Result<std::string>(JoinHostPort(*host, bound->port)) : host.status();
    } else {
      address = bound.status();
    }
    // Publish even a failure, so the other ranks stop at the fence with rank 0's reason.
    std::string published =
        address.ok() ? *address : std::string(kPmixErrorPrefix) + address.status().ToString();
    pmix_value_t value;
    PMIX_VALUE_CONSTRUCT(&value);
    value.type = PMIX_STRING;
    value.data.string = published.data();  // PMIx_Put copies it
    pmix_status_t rc = PMIx_Put(PMIX_GLOBAL, kPmixKey, &value);
    if (rc != PMIX_SUCCESS) return PmixStatus("PMIx_Put", rc);
    rc = PMIx_Commit();
    if (rc != PMIX_SUCCESS) return PmixStatus("PMIx_Commit", rc);
  }

  pmix_proc_t all;
  PMIX_LOAD_PROCID(&all, pmix.self().nspace, PMIX_RANK_WILDCARD);
  pmix_info_t info[2];
  PMIX_INFO_CONSTRUCT(&info[0]);
  PMIX_INFO_CONSTRUCT(&info[1]);
  bool collect = true;
  PMIX_INFO_LOAD(&info[0], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
  PMIX_INFO_LOAD(&info[1], PMIX_TIMEOUT, &timeout_s, PMIX_INT);
  pmix_status_t rc = PMIx_Fence(&all, 1, info, 2);
  if (rc != PMIX_SUCCESS) return PmixStatus("PMIx_Fence", rc).Annotate(RankText(env));
  if (env.rank == 0) return address;

  pmix_proc_t root;
  PMIX_LOAD_PROCID(&root, pmix.self().nspace, 0);
  pmix_value_t* got = nullptr;
  rc = PMIx_Get(&root, kPmixKey, &info[1], 1, &got);
  if (rc != PMIX_SUCCESS) {
    return PmixStatus(std::string("PMIx_Get(") + kPmixKey + " of rank 0)", rc)
        .Annotate(RankText(env));
  }
  std::string text;
  const bool is_string = got != nullptr && got->type == PMIX_STRING && got->data.string != nullptr;
  if (is_string) text = got->data.string;
  if (got != nullptr) PMIX_VALUE_RELEASE(got);
  if (!is_string) return ProtocolError(std::string("PMIx key ") + kPmixKey + " is not a string");
  if (text.starts_with(kPmixErrorPrefix)) {
    return PeerFailure("rank 0 failed to start the coordinator: " +
                       text.substr(kPmixErrorPrefix.size()));
  }
  FERRY_RETURN_IF_ERROR(ParseHostPort(std::string("PMIx key ") + kPmixKey, text).status());
  return text;
}

constexpr bool kHavePmix = true;

#else

Result<std::string> FromPmix(const LaunchEnv&, const StartCoordinatorFn&, Millis) {
  return Unsupported("built without PMIx");
}

constexpr bool kHavePmix = false;

#endif

}  // namespace

bool RendezvousHasPmix() {
  return kHavePmix;
}

Result<std::string> FindCoordinator(const LaunchEnv& env, const StartCoordinatorFn& start_on_rank0,
                                    Millis timeout) {
  if (!env.coordinator.empty()) return FromCoordinatorVariable(env, start_on_rank0);
  if (!env.coordinator_file.empty()) return FromCoordinatorFile(env, start_on_rank0, timeout);
  if (env.size == 1) {
    FERRY_ASSIGN_OR_RETURN(HostPort bound, Start(start_on_rank0, "127.0.0.1:0", ""));
    return JoinHostPort(bound.host, bound.port);
  }
  if (env.pmix && kHavePmix) return FromPmix(env, start_on_rank0, timeout);
  switch (env.launcher) {
    case Launcher::kSrun:
      return FromSlurmStep(env, start_on_rank0);
    case Launcher::kMpirun:
      return Unsupported(RankText(env) + ": " +
                         (kHavePmix ? "mpirun set no PMIX_NAMESPACE/PMIX_RANK"
                                    : "this build has no PMIx (install libpmix-dev and rebuild)") +
                         ", so rank 0's address cannot be shared; " + std::string(kSetCoordinator) +
                         ", e.g. mpirun -x FERRY_COORDINATOR=node1:29500 ...");
    case Launcher::kFerry:
      return InvalidArgument(RankText(env) +
                             ": neither FERRY_COORDINATOR nor FERRY_COORDINATOR_FILE is set; start "
                             "the job with ferry-launch, or " +
                             std::string(kSetCoordinator));
    case Launcher::kNone:
      break;
  }
  return InvalidArgument(RankText(env) + ": no launcher detected but size > 1; " +
                         std::string(kSetCoordinator));
}

}  // namespace ferry::ps
