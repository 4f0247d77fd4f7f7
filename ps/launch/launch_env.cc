#include "ps/launch/launch_env.h"

#include <charconv>
#include <cstdlib>
#include <initializer_list>
#include <optional>
#include <system_error>
#include <utility>

#include "ps/job/job.h"

namespace ferry::ps {
namespace {

using Getenv = std::function<const char*(const char*)>;

// An unset variable is nullopt; a set but empty one is "" (and fails number parsing, on purpose:
// `FERRY_RANK= prog` is a mistake worth reporting).
std::optional<std::string_view> Get(const Getenv& getenv_fn, const char* name) {
  const char* v = getenv_fn(name);
  if (v == nullptr) return std::nullopt;
  return std::string_view(v);
}

// The first of `names` that is set (Slurm spells some variables two ways: SLURM_JOB_ID and the
// older SLURM_JOBID). `*which` names the one found, for error messages.
std::optional<std::string_view> GetFirst(const Getenv& getenv_fn,
                                         std::initializer_list<const char*> names,
                                         const char** which) {
  for (const char* name : names) {
    if (auto v = Get(getenv_fn, name)) {
      if (which != nullptr) *which = name;
      return v;
    }
  }
  return std::nullopt;
}

std::string Quoted(std::string_view name, std::string_view value) {
  std::string s(name);
  s += "='";
  s += value;
  s += "'";
  return s;
}

// A non-negative decimal int, the whole string: no sign, no spaces, no suffix.
Result<int> ParseCount(std::string_view name, std::string_view value) {
  if (!value.empty() && value.front() == '-') {
    return InvalidArgument(Quoted(name, value) + " is negative; it must be a count >= 0");
  }
  int out = 0;
  const char* end = value.data() + value.size();
  auto [ptr, ec] = std::from_chars(value.data(), end, out);
  if (value.empty() || ec == std::errc::invalid_argument || ptr != end) {
    return InvalidArgument(Quoted(name, value) + " is not a decimal number");
  }
  if (ec == std::errc::result_out_of_range) {
    return InvalidArgument(Quoted(name, value) + " is out of range");
  }
  return out;
}

// The required variable `name` as a count.
Result<int> RequireCount(const Getenv& getenv_fn, const char* name, const char* because) {
  auto v = Get(getenv_fn, name);
  if (!v) return InvalidArgument(std::string(name) + " is not set but " + because + " is");
  return ParseCount(name, *v);
}

// Optional count: `fallback` when unset.
Result<int> OptionalCount(const Getenv& getenv_fn, const char* name, int fallback) {
  auto v = Get(getenv_fn, name);
  if (!v) return fallback;
  return ParseCount(name, *v);
}

// Rank/size sanity shared by every launcher; the names are the variables the values came from.
Status CheckConsistent(const LaunchEnv& env, std::string_view rank_var, std::string_view size_var,
                       std::string_view local_rank_var, std::string_view local_size_var) {
  auto num = [](std::string_view var, int v) { return Quoted(var, std::to_string(v)); };
  if (env.size < 1) return InvalidArgument(num(size_var, env.size) + " must be at least 1");
  if (env.rank >= env.size) {
    return InvalidArgument(num(rank_var, env.rank) + " is not below " + num(size_var, env.size));
  }
  if (env.local_size < 1) {
    return InvalidArgument(num(local_size_var, env.local_size) + " must be at least 1");
  }
  if (env.local_size > env.size) {
    return InvalidArgument(num(local_size_var, env.local_size) + " exceeds " +
                           num(size_var, env.size));
  }
  if (env.local_rank >= env.local_size) {
    return InvalidArgument(num(local_rank_var, env.local_rank) + " is not below " +
                           num(local_size_var, env.local_size));
  }
  return Status::Ok();
}

// SLURM_STEP_TASKS_PER_NODE: "2(x3),1" = 2 tasks on each of 3 nodes, then 1 task on one node.
Result<std::vector<int>> ParseTasksPerNode(std::string_view name, std::string_view value) {
  std::vector<int> out;
  size_t pos = 0;
  while (pos <= value.size()) {
    size_t comma = value.find(',', pos);
    if (comma == std::string_view::npos) comma = value.size();
    std::string_view item = value.substr(pos, comma - pos);
    std::string_view count = item;
    int repeat = 1;
    if (size_t paren = item.find("(x"); paren != std::string_view::npos) {
      if (item.back() != ')') return InvalidArgument(Quoted(name, value) + " is malformed");
      count = item.substr(0, paren);
      std::string_view times = item.substr(paren + 2, item.size() - paren - 3);
      FERRY_ASSIGN_OR_RETURN(repeat, ParseCount(name, times));
      if (repeat < 1 || repeat > (1 << 20)) {
        return InvalidArgument(Quoted(name, value) + " has a bad repeat count");
      }
    }
    FERRY_ASSIGN_OR_RETURN(int tasks, ParseCount(name, count));
    out.insert(out.end(), static_cast<size_t>(repeat), tasks);
    pos = comma + 1;
  }
  return out;
}

Status DetectFerry(const Getenv& getenv_fn, LaunchEnv* env) {
  env->launcher = Launcher::kFerry;
  FERRY_ASSIGN_OR_RETURN(env->rank, RequireCount(getenv_fn, "FERRY_RANK", "FERRY_SIZE"));
  FERRY_ASSIGN_OR_RETURN(env->size, RequireCount(getenv_fn, "FERRY_SIZE", "FERRY_RANK"));
  // ferry-launch starts every rank on the local host.
  FERRY_ASSIGN_OR_RETURN(env->local_rank, OptionalCount(getenv_fn, "FERRY_LOCAL_RANK", env->rank));
  FERRY_ASSIGN_OR_RETURN(env->local_size, OptionalCount(getenv_fn, "FERRY_LOCAL_SIZE", env->size));
  return CheckConsistent(*env, "FERRY_RANK", "FERRY_SIZE", "FERRY_LOCAL_RANK", "FERRY_LOCAL_SIZE");
}

Status DetectMpirun(const Getenv& getenv_fn, LaunchEnv* env) {
  env->launcher = Launcher::kMpirun;
  FERRY_ASSIGN_OR_RETURN(env->rank,
                         RequireCount(getenv_fn, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"));
  FERRY_ASSIGN_OR_RETURN(env->size,
                         RequireCount(getenv_fn, "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"));
  FERRY_ASSIGN_OR_RETURN(env->local_rank,
                         OptionalCount(getenv_fn, "OMPI_COMM_WORLD_LOCAL_RANK", 0));
  FERRY_ASSIGN_OR_RETURN(env->local_size,
                         OptionalCount(getenv_fn, "OMPI_COMM_WORLD_LOCAL_SIZE", 1));
  return CheckConsistent(*env, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                         "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE");
}

Status DetectSrun(const Getenv& getenv_fn, std::string_view step_id, LaunchEnv* env) {
  env->launcher = Launcher::kSrun;
  env->step_id = std::string(step_id);
  FERRY_ASSIGN_OR_RETURN(env->rank, RequireCount(getenv_fn, "SLURM_PROCID", "SLURM_STEP_ID"));
  const char* size_var = "SLURM_STEP_NUM_TASKS";
  auto size =
      GetFirst(getenv_fn, {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS"}, &size_var);
  if (!size) {
    return InvalidArgument(
        "SLURM_PROCID is set but none of SLURM_STEP_NUM_TASKS, SLURM_NTASKS, SLURM_NPROCS is");
  }
  FERRY_ASSIGN_OR_RETURN(env->size, ParseCount(size_var, *size));
  FERRY_ASSIGN_OR_RETURN(env->local_rank, OptionalCount(getenv_fn, "SLURM_LOCALID", 0));

  const char* job_var = "SLURM_JOB_ID";
  if (auto job = GetFirst(getenv_fn, {"SLURM_JOB_ID", "SLURM_JOBID"}, &job_var)) {
    env->job_id = std::string(*job);
  }
  const char* nodes_var = "SLURM_STEP_NODELIST";
  if (auto list = GetFirst(
          getenv_fn, {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"}, &nodes_var)) {
    auto nodes = ExpandHostlist(*list);
    if (!nodes.ok()) return nodes.status().Annotate(nodes_var);
    env->nodes = std::move(nodes).value();
  }
  if (auto name = Get(getenv_fn, "SLURMD_NODENAME")) env->node_name = std::string(*name);

  // Local size: this node's entry of the step's tasks-per-node list; without one, a one-node step
  // holds every task on this node.
  env->local_size = env->nodes.size() == 1 ? env->size : 1;
  const char* tpn_var = "SLURM_STEP_TASKS_PER_NODE";
  if (auto tpn =
          GetFirst(getenv_fn, {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}, &tpn_var)) {
    FERRY_ASSIGN_OR_RETURN(std::vector<int> per_node, ParseTasksPerNode(tpn_var, *tpn));
    FERRY_ASSIGN_OR_RETURN(int node_id, OptionalCount(getenv_fn, "SLURM_NODEID", 0));
    if (static_cast<size_t>(node_id) >= per_node.size()) {
      return InvalidArgument(Quoted("SLURM_NODEID", std::to_string(node_id)) + " has no entry in " +
                             Quoted(tpn_var, *tpn));
    }
    env->local_size = per_node[static_cast<size_t>(node_id)];
  }
  return CheckConsistent(*env, "SLURM_PROCID", size_var, "SLURM_LOCALID", tpn_var);
}

}  // namespace

std::string_view LauncherName(Launcher launcher) {
  switch (launcher) {
    case Launcher::kNone:
      return "none";
    case Launcher::kFerry:
      return "ferry-launch";
    case Launcher::kMpirun:
      return "mpirun";
    case Launcher::kSrun:
      return "srun";
  }
  return "unknown";
}

Result<LaunchEnv> DetectLaunchEnv(const std::function<const char*(const char*)>& getenv_fn) {
  LaunchEnv env;
  auto copy = [&](const char* name, std::string* out) {
    if (auto v = Get(getenv_fn, name)) *out = std::string(*v);
  };
  copy("FERRY_COORDINATOR", &env.coordinator);
  copy("FERRY_COORDINATOR_FILE", &env.coordinator_file);
  copy("FERRY_COORDINATOR_BIND", &env.coordinator_bind);
  copy("FERRY_COORDINATOR_HOST", &env.coordinator_host);
  env.pmix =
      Get(getenv_fn, "PMIX_NAMESPACE").has_value() && Get(getenv_fn, "PMIX_RANK").has_value();

  if (Get(getenv_fn, "FERRY_RANK") || Get(getenv_fn, "FERRY_SIZE")) {
    FERRY_RETURN_IF_ERROR(DetectFerry(getenv_fn, &env));
    return env;
  }
  if (Get(getenv_fn, "OMPI_COMM_WORLD_RANK") || Get(getenv_fn, "OMPI_COMM_WORLD_SIZE")) {
    FERRY_RETURN_IF_ERROR(DetectMpirun(getenv_fn, &env));
    return env;
  }
  if (Get(getenv_fn, "SLURM_PROCID")) {
    // A step's tasks carry a step id; the batch script's shell (SLURM_PROCID=0) does not.
    if (auto step = GetFirst(getenv_fn, {"SLURM_STEP_ID", "SLURM_STEPID"}, nullptr)) {
      FERRY_RETURN_IF_ERROR(DetectSrun(getenv_fn, *step, &env));
      return env;
    }
  }
  if (auto pmix_rank = Get(getenv_fn, "PMIX_RANK")) {
    return Unsupported(Quoted("PMIX_RANK", *pmix_rank) +
                       " is set but no launcher variable gives the job size (FERRY_SIZE, "
                       "OMPI_COMM_WORLD_SIZE or SLURM_NTASKS); start the ranks with ferry-launch, "
                       "mpirun or srun, or set FERRY_RANK and FERRY_SIZE");
  }
  return env;  // a plain process: rank 0 of 1
}

Result<LaunchEnv> DetectLaunchEnv() {
  return DetectLaunchEnv([](const char* name) -> const char* { return std::getenv(name); });
}

namespace {

// FERRY_SERVERS / FERRY_WORKERS: a count >= 1, or -1 when unset.
Result<int> ShapeCount(const Getenv& getenv_fn, const char* name) {
  auto v = Get(getenv_fn, name);
  if (!v) return -1;
  FERRY_ASSIGN_OR_RETURN(int n, ParseCount(name, *v));
  if (n < 1) return InvalidArgument(Quoted(name, *v) + " must be at least 1");
  return n;
}

// "2 servers", "1 worker".
std::string Count(int64_t n, const char* noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

// "4 ranks (started by mpirun)": the launch's size and who set it, for the errors below.
std::string LaunchSize(const LaunchEnv& env) {
  if (env.launcher == Launcher::kNone) return Count(env.size, "rank") + " (no launcher)";
  return Count(env.size, "rank") + " (started by " + std::string(LauncherName(env.launcher)) + ")";
}

}  // namespace

Result<LaunchShape> ReadLaunchShape(const std::function<const char*(const char*)>& getenv_fn) {
  LaunchShape shape;
  FERRY_ASSIGN_OR_RETURN(shape.servers, ShapeCount(getenv_fn, kEnvServers));
  FERRY_ASSIGN_OR_RETURN(shape.workers, ShapeCount(getenv_fn, kEnvWorkers));
  FERRY_ASSIGN_OR_RETURN(shape.server_threads, ShapeCount(getenv_fn, kEnvServerThreads));
  if (auto t = Get(getenv_fn, kEnvTransport)) {
    if (*t != "auto" && *t != "verbs" && *t != "ucx" && *t != "tcp") {
      return InvalidArgument(Quoted(kEnvTransport, *t) + " is not auto, verbs, ucx or tcp");
    }
    shape.transport = std::string(*t);
  }
  if (auto r = Get(getenv_fn, kEnvRoleRule)) {
    if (!ParseRoleRule(*r).ok()) {
      return InvalidArgument(Quoted(kEnvRoleRule, *r) + " is not servers-first or colocated");
    }
    shape.role_rule = std::string(*r);
  }
  return shape;
}

Result<LaunchShape> ReadLaunchShape() {
  return ReadLaunchShape([](const char* name) -> const char* { return std::getenv(name); });
}

Status ApplyLaunchShape(const LaunchShape& shape, const LaunchEnv& env, JobSpec* job) {
  if (!shape.transport.empty()) job->transport = shape.transport;
  if (!shape.role_rule.empty()) {
    FERRY_ASSIGN_OR_RETURN(job->role_rule, ParseRoleRule(shape.role_rule));
  }
  if (shape.servers > 0) job->servers = static_cast<uint32_t>(shape.servers);
  if (shape.workers > 0) job->workers = static_cast<uint32_t>(shape.workers);
  if (shape.server_threads > 0) job->server_threads = static_cast<uint32_t>(shape.server_threads);
  // Where each count came from, for the messages.
  std::string servers_from = shape.servers > 0 ? kEnvServers : "job spec";
  std::string workers_from = shape.workers > 0 ? kEnvWorkers : "job spec";
  const bool colocated = job->role_rule == RoleRule::kColocated;
  const int64_t size = env.size;
  if (job->servers == 0 && job->workers == 0) {
    return InvalidArgument("the job's shape is unknown: " + LaunchSize(env) +
                           " but neither the number of servers nor of workers is given; give "
                           "the program's server count or set " +
                           kEnvServers);
  }
  if (job->servers == 0 || job->workers == 0) {
    const bool derive_workers = job->workers == 0;
    const int64_t known = derive_workers ? job->servers : job->workers;
    const int64_t derived = colocated ? size : size - known;
    if (derived < 1) {
      return InvalidArgument((derive_workers ? Count(known, "server") + " (" + servers_from + ")"
                                             : Count(known, "worker") + " (" + workers_from + ")") +
                             " leave no rank for " + (derive_workers ? "workers" : "servers") +
                             " in a job of " + LaunchSize(env) +
                             "; start more ranks or ask for fewer");
    }
    (derive_workers ? job->workers : job->servers) = static_cast<uint32_t>(derived);
    (derive_workers ? workers_from : servers_from) = "derived from the size";
  }
  const int need = RanksNeeded(*job);
  if (need != size) {
    return InvalidArgument(Count(job->servers, "server") + " (" + servers_from + ") and " +
                           Count(job->workers, "worker") + " (" + workers_from + ") under the " +
                           std::string(RoleRuleName(job->role_rule)) + " rule need " +
                           Count(need, "rank") + ", but the job has " + LaunchSize(env) +
                           "; start " + std::to_string(need) + " ranks or change the counts");
  }
  return Status::Ok();
}

namespace {

// One host pattern of a hostlist, e.g. "r[1-2]n[01,3]-ib", as alternating pieces:
//   struct HostPattern {
//     std::string literal[k + 1];              // "r", "n", "-ib"
//     std::vector<std::string> group[k];       // {"1","2"}, {"01","3"}
//   };
// Expansion is the cartesian product of the groups, leftmost slowest.
constexpr size_t kMaxHosts = size_t{1} << 20;

// Expands one bracket group's body ("01-03,7") into its numbers as text, appending to `out`.
Status ExpandGroup(std::string_view list, std::string_view body, std::vector<std::string>* out) {
  auto bad = [&](std::string_view why) {
    return InvalidArgument("hostlist '" + std::string(list) + "': " + std::string(why));
  };
  if (body.empty()) return bad("empty bracket group");
  size_t pos = 0;
  while (pos <= body.size()) {
    size_t comma = body.find(',', pos);
    if (comma == std::string_view::npos) comma = body.size();
    std::string_view item = body.substr(pos, comma - pos);
    size_t dash = item.find('-');
    std::string_view lo_text = item.substr(0, dash);
    std::string_view hi_text = dash == std::string_view::npos ? lo_text : item.substr(dash + 1);
    auto digits = [](std::string_view s) {
      if (s.empty() || s.size() > 18) return false;
      for (char c : s) {
        if (c < '0' || c > '9') return false;
      }
      return true;
    };
    if (!digits(lo_text) || !digits(hi_text)) {
      return bad("'" + std::string(item) + "' is not a number or lo-hi range");
    }
    uint64_t lo = 0, hi = 0;
    std::from_chars(lo_text.data(), lo_text.data() + lo_text.size(), lo);
    std::from_chars(hi_text.data(), hi_text.data() + hi_text.size(), hi);
    if (hi < lo) return bad("range '" + std::string(item) + "' runs backwards");
    if (hi - lo >= kMaxHosts || out->size() + (hi - lo + 1) > kMaxHosts) {
      return bad("expands to more than 1M hosts");
    }
    // Slurm pads every number of a range to the width of its lower bound: 08-10 -> 08 09 10.
    const size_t width = lo_text.size();
    for (uint64_t n = lo; n <= hi; ++n) {
      std::string s = std::to_string(n);
      if (s.size() < width) s.insert(0, width - s.size(), '0');
      out->push_back(std::move(s));
    }
    pos = comma + 1;
  }
  return Status::Ok();
}

Status ExpandHost(std::string_view list, std::string_view host, std::vector<std::string>* out) {
  auto bad = [&](std::string_view why) {
    return InvalidArgument("hostlist '" + std::string(list) + "': " + std::string(why));
  };
  if (host.empty()) return bad("empty host name");
  std::vector<std::string> literals(1);
  std::vector<std::vector<std::string>> groups;
  size_t pos = 0;
  while (pos < host.size()) {
    const char c = host[pos];
    if (c == ']') return bad("']' without '['");
    if (c == '[') {
      size_t close = host.find(']', pos + 1);
      if (close == std::string_view::npos) return bad("'[' without ']'");
      std::string_view body = host.substr(pos + 1, close - pos - 1);
      if (body.find('[') != std::string_view::npos) return bad("nested '['");
      groups.emplace_back();
      FERRY_RETURN_IF_ERROR(ExpandGroup(list, body, &groups.back()));
      literals.emplace_back();
      pos = close + 1;
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\n') return bad("white space in a host name");
    literals.back() += c;
    ++pos;
  }
  size_t total = 1;
  for (const auto& g : groups) {
    if (total * g.size() > kMaxHosts) return bad("expands to more than 1M hosts");
    total *= g.size();
  }
  if (out->size() + total > kMaxHosts) return bad("expands to more than 1M hosts");
  // Odometer over the groups, the last one turning fastest.
  std::vector<size_t> at(groups.size(), 0);
  for (size_t n = 0; n < total; ++n) {
    std::string name = literals[0];
    for (size_t g = 0; g < groups.size(); ++g) {
      name += groups[g][at[g]];
      name += literals[g + 1];
    }
    out->push_back(std::move(name));
    for (size_t g = groups.size(); g-- > 0;) {
      if (++at[g] < groups[g].size()) break;
      at[g] = 0;
    }
  }
  return Status::Ok();
}

}  // namespace

Result<std::vector<std::string>> ExpandHostlist(std::string_view list) {
  std::vector<std::string> out;
  if (list.empty()) return out;
  // Split at the commas outside brackets.
  size_t start = 0;
  int depth = 0;
  for (size_t i = 0; i <= list.size(); ++i) {
    if (i < list.size()) {
      if (list[i] == '[') ++depth;
      if (list[i] == ']') --depth;
      if (list[i] != ',' || depth != 0) continue;
    }
    FERRY_RETURN_IF_ERROR(ExpandHost(list, list.substr(start, i - start), &out));
    start = i + 1;
  }
  return out;
}

uint16_t DerivedCoordinatorPort(std::string_view job_id, std::string_view step_id) {
  // FNV-1a 64: fixed constants, so every binary on every node agrees (std::hash need not).
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&h](std::string_view s) {
    for (unsigned char c : s) {
      h ^= c;
      h *= 0x100000001b3ull;
    }
  };
  mix(job_id);
  mix(".");
  mix(step_id);
  return static_cast<uint16_t>(20000 + h % 20000);
}

}  // namespace ferry::ps
