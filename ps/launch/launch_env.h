// Which launcher started this process, and where it says the process stands: rank, size, local
// rank, Slurm job/step/nodes, PMIx presence, and the coordinator variables of ferry-launch.
//
// A parameter-server job is one process per rank, started by ferry-launch, OpenMPI's mpirun or
// Slurm's srun. Each launcher describes the job in its own environment variables; this file turns
// them into one LaunchEnv so the rest of ps/ never reads a launcher's variables itself. Finding the
// coordinator from a LaunchEnv is ps/launch/rendezvous.h's job.
//
// Precedence (the first family present wins; the others are ignored):
//   1. ferry-launch  FERRY_RANK, FERRY_SIZE (both required), FERRY_LOCAL_RANK, FERRY_LOCAL_SIZE
//                    (optional: ferry-launch starts every rank on one host, so they default to
//                    FERRY_RANK and FERRY_SIZE).
//   2. mpirun        OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE (both required),
//                    OMPI_COMM_WORLD_LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_SIZE (optional: 0 and 1).
//   3. srun          SLURM_PROCID and SLURM_STEP_ID (a task of a job step), size from
//                    SLURM_STEP_NUM_TASKS else SLURM_NTASKS, SLURM_LOCALID, local size from
//                    SLURM_STEP_TASKS_PER_NODE ("2(x3),1") at SLURM_NODEID; nodes from
//                    SLURM_STEP_NODELIST else SLURM_JOB_NODELIST. A batch script's own shell
//                    has SLURM_PROCID=0 but no step id: it is not a task and counts as kNone.
//   4. PMIX_RANK alone (some other PMIx launcher): the size is not in the environment, so this
//      is an error (kUnsupported) saying which variables to set.
//   5. none of them: Launcher::kNone, rank 0 of 1.
// Independently of the family, pmix is true when PMIX_NAMESPACE and PMIX_RANK are both set (mpirun
// and `srun --mpi=pmix` set them), and FERRY_COORDINATOR, FERRY_COORDINATOR_FILE,
// FERRY_COORDINATOR_BIND and FERRY_COORDINATOR_HOST are copied whatever the launcher.
//
// Errors: a variable that is not a decimal number, is negative, or is inconsistent with the
// others (rank >= size, local_rank >= local_size, local_size > size, size 0, only one of a
// required pair set) is kInvalidArgument naming the variable and its value.
//
// The job shape. A launcher may also say how the ranks divide into servers and workers:
// ferry-launch sets FERRY_SERVERS, FERRY_WORKERS, FERRY_TRANSPORT and FERRY_ROLE_RULE on every
// rank; under mpirun or srun a user may pass some of them (`mpirun -x FERRY_SERVERS=2 ...`).
// ReadLaunchShape reads them, ApplyLaunchShape lays them over the program's JobSpec:
//
//   FERRY_ASSIGN_OR_RETURN(LaunchEnv env, DetectLaunchEnv());
//   FERRY_ASSIGN_OR_RETURN(LaunchShape shape, ReadLaunchShape());
//   JobSpec job = ...;                      // from the program's flags; workers = 0 if not given
//   FERRY_RETURN_IF_ERROR(ApplyLaunchShape(shape, env, &job));
//   auto node = Node::Start(job, env);
//
// Thread-safety: the functions are pure (DetectLaunchEnv() and ReadLaunchShape() read the process
// environment, which must not be modified concurrently, as for ::getenv).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "transport/status.h"

namespace ferry::ps {

struct JobSpec;  // ps/job/job.h

enum class Launcher : uint8_t {
  kNone,    // a plain process
  kFerry,   // ferry-launch
  kMpirun,  // OpenMPI's mpirun (ORTE/PRRTE)
  kSrun,    // a task of a Slurm job step
};

// "none", "ferry-launch", "mpirun", "srun".
std::string_view LauncherName(Launcher launcher);

struct LaunchEnv {
  Launcher launcher = Launcher::kNone;
  int rank = 0;
  int size = 1;
  int local_rank = 0;  // rank among the processes of this host
  int local_size = 1;  // processes of this job on this host; == size when all share one host

  // Coordinator settings (any launcher; see ps/launch/rendezvous.h for how they are used).
  std::string coordinator;       // FERRY_COORDINATOR: "host:port" every rank uses
  std::string coordinator_file;  // FERRY_COORDINATOR_FILE: rank 0 writes its bound address here
  std::string coordinator_bind;  // FERRY_COORDINATOR_BIND: rank 0's bind address with the file
  std::string coordinator_host;  // FERRY_COORDINATOR_HOST: host name rank 0 advertises

  // Slurm (launcher == kSrun only).
  std::vector<std::string> nodes;  // expanded SLURM_STEP_NODELIST (else SLURM_JOB_NODELIST)
  std::string job_id;              // SLURM_JOB_ID
  std::string step_id;             // SLURM_STEP_ID
  std::string node_name;           // SLURMD_NODENAME: the node this task runs on

  bool pmix = false;  // PMIX_NAMESPACE and PMIX_RANK are present
};

// Reads the launcher variables through `getenv_fn` (same contract as ::getenv: nullptr when unset;
// injectable for tests). See the precedence and error rules above.
Result<LaunchEnv> DetectLaunchEnv(const std::function<const char*(const char*)>& getenv_fn);
// The same, from the process environment.
Result<LaunchEnv> DetectLaunchEnv();

// The job shape variables (set by ferry-launch on every rank).
inline constexpr const char* kEnvServers = "FERRY_SERVERS";
inline constexpr const char* kEnvWorkers = "FERRY_WORKERS";
inline constexpr const char* kEnvTransport = "FERRY_TRANSPORT";
inline constexpr const char* kEnvRoleRule = "FERRY_ROLE_RULE";
inline constexpr const char* kEnvServerThreads = "FERRY_SERVER_THREADS";

// What the launcher says about the job's shape; each field is "not given" when its variable is
// unset.
struct LaunchShape {
  int servers = -1;         // FERRY_SERVERS: a count >= 1, or -1
  int workers = -1;         // FERRY_WORKERS: a count >= 1, or -1
  std::string transport;    // FERRY_TRANSPORT: auto | verbs | ucx | tcp, or ""
  std::string role_rule;    // FERRY_ROLE_RULE: servers-first | colocated, or ""
  int server_threads = -1;  // FERRY_SERVER_THREADS: shard servers per server rank >= 1, or -1
};

// Reads the five variables through `getenv_fn` (nullptr when unset). A value that is set but not
// a decimal count >= 1 (servers, workers, server threads), not a transport name or not a role rule
// is kInvalidArgument naming the variable and its value.
Result<LaunchShape> ReadLaunchShape(const std::function<const char*(const char*)>& getenv_fn);
// The same, from the process environment.
Result<LaunchShape> ReadLaunchShape();

// Lays `shape` over `job`: every field the shape gives replaces the job's. Then, if exactly one of
// job->servers and job->workers is unknown (0: not given by the program's flags, nor by the shape),
// it is derived from env.size so that the job fills the launch:
//   servers-first  workers = size - servers   (`mpirun -np 4 prog --servers 2`: 2 + 2)
//                  servers = size - workers
//   colocated      the unknown one = size     (every rank is a worker, or a server)
// Errors (kInvalidArgument, naming the launcher, its size and where each count came from):
// both counts unknown; a derived count below 1; a shape that does not fit env.size (e.g.
// FERRY_SERVERS=2 FERRY_WORKERS=3 under `mpirun -np 4`). On error *job may be partly updated.
Status ApplyLaunchShape(const LaunchShape& shape, const LaunchEnv& env, JobSpec* job);

// Expands a Slurm hostlist: comma-separated hosts, each with any number of bracket groups of
// comma-separated numbers and lo-hi ranges; a range keeps the zero padding of its lower bound.
//   "n[01-03,7],m,x[1-2]-ib" -> n01 n02 n03 n7 m x1-ib x2-ib
//   "r[1-2]n[1-2]"           -> r1n1 r1n2 r2n1 r2n2 (the leftmost group varies slowest)
// Malformed lists (unbalanced or nested brackets, empty hosts or groups, hi < lo, non-digits in a
// group, more than 1M hosts) are kInvalidArgument.
Result<std::vector<std::string>> ExpandHostlist(std::string_view list);

// A coordinator port every task of a Slurm job step derives alike, without talking:
// 20000 + FNV-1a-64("<job_id>.<step_id>") % 20000 (in [20000, 40000)).
uint16_t DerivedCoordinatorPort(std::string_view job_id, std::string_view step_id);

}  // namespace ferry::ps
