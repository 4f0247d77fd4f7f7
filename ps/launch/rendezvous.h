// Finding the parameter server's coordinator: rank 0 starts it (a TCP listener), every rank
// learns its "host:port".
//
// Usage (every rank runs the same code):
//   FERRY_ASSIGN_OR_RETURN(LaunchEnv env, DetectLaunchEnv());
//   FERRY_ASSIGN_OR_RETURN(std::string coordinator, FindCoordinator(env,
//       [&](const std::string& bind) { return coordinator_server.Listen(bind); },  // rank 0 only
//       Millis(60000)));
//   // rank != 0: connect to `coordinator`, retrying until your deadline (see "Timing").
//
// How the address is found, first matching rule wins:
//   (a) FERRY_COORDINATOR=host:port is set: rank 0 starts the coordinator on "<host>:<port>" when
//       host is a numeric IP (127.0.0.1, 10.1.2.3, [::1]), else on "0.0.0.0:<port>"; every rank
//       returns FERRY_COORDINATOR unchanged. Works under every launcher; the way to go when the
//       others do not apply (mpirun without PMIx, a firewall, a chosen port).
//   (b) FERRY_COORDINATOR_FILE is set (ferry-launch): rank 0 starts the coordinator on
//       FERRY_COORDINATOR_BIND, default "127.0.0.1:0", and writes the reachable address (the bound
//       one; a wildcard host is replaced as in (c)) plus '\n' to the file atomically (a temporary
//       file in the same folder, then rename). ferry-launch then starts the other ranks with
//       FERRY_COORDINATOR (rule a); a rank != 0 that has only the file polls it until `timeout`.
//       The file must not exist when the job starts (ferry-launch uses a fresh path): a rank
//       != 0 would take a stale one for the answer.
//   (c) PMIx (env.pmix, and this library built with libpmix: RendezvousHasPmix()): rank 0 starts
//       the coordinator on "0.0.0.0:0" and publishes "<host>:<port>" under the key
//       "ferry.coordinator" (PMIx_Put(PMIX_GLOBAL) + PMIx_Commit); all ranks PMIx_Fence with data
//       collection; the others PMIx_Get it from rank 0 of their namespace. host is
//       FERRY_COORDINATOR_HOST if set; else 127.0.0.1 when all ranks share this host
//       (size == local_size); else gethostname() if it resolves to a non-loopback address; else
//       the first non-loopback IPv4 address of an interface that is up. If rank 0 fails to start
//       the coordinator it publishes the failure, so every rank fails with rank 0's reason
//       instead of waiting. Works under OpenMPI 4.1's mpirun and `srun --mpi=pmix`.
//   (d) srun without PMIx: rank 0 starts the coordinator on
//       "0.0.0.0:<DerivedCoordinatorPort(job, step)>"; every rank returns
//       "<first node of the step>:<port>" (127.0.0.1 on a one-node step; FERRY_COORDINATOR_HOST
//       overrides the host). Rank 0 checks it runs on the first node (SLURMD_NODENAME). If the
//       derived port is taken, the start fails: set FERRY_COORDINATOR.
//   (e) mpirun without PMIx (not in this build, or no PMIX_* variables): kUnsupported, asking for
//       FERRY_COORDINATOR.
//   (f) size == 1 (a plain process, or any launcher with one rank; checked right after (b), as
//       one rank needs no rendezvous): rank 0 starts the coordinator on "127.0.0.1:0" and
//       returns the bound address.
//   (g) ferry-launch with neither variable: kInvalidArgument, asking for one of them.
//
// start_on_rank0(bind_address) is called on rank 0 only, at most once, on the calling thread. It
// must bind and listen on bind_address ("host:port", port 0 = any) and return the bound
// "host:port" with the actual port. Its error is returned annotated with what to set instead.
// Ownership: the listener belongs to whatever start_on_rank0 created; FindCoordinator keeps
// nothing and owns no socket.
//
// Timing: `timeout` bounds the waits inside FindCoordinator (the PMIx fence and get, where the
// PMIx server honours PMIX_TIMEOUT, which OpenMPI 4.1 and Slurm 22.05 do; polling the coordinator
// file). Under rules (a) and (d) a rank != 0 returns at once, possibly before rank 0 listens:
// callers connect with retries until their own deadline. Under (c) the fence orders rank 0's
// listen before everyone's return.
//
// Side effects: rule (c) calls PMIx_Init and PMIx_Finalize (reference counted by PMIx, so a
// process that already holds PMIx, e.g. through MPI, keeps it). Thread-safety: call once per
// process, from one thread.
#pragma once

#include <functional>
#include <string>

#include "ps/launch/launch_env.h"
#include "transport/status.h"
#include "transport/transport.h"

namespace ferry::ps {

using StartCoordinatorFn = std::function<Result<std::string>(const std::string& bind_address)>;

Result<std::string> FindCoordinator(const LaunchEnv& env, const StartCoordinatorFn& start_on_rank0,
                                    Millis timeout);

// True when this library was built with libpmix (rule c is available).
bool RendezvousHasPmix();

}  // namespace ferry::ps
