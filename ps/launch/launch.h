// ps/launch: how the processes of a job find each other and are started. Depends on job/ only;
// node.h uses it to turn a process into a coordinator, server or worker.
//
//   launch_env.h     which launcher started this process (ferry-launch, mpirun, srun, none) and
//                    its rank and size
//   rendezvous.h     where the coordinator listens: FERRY_COORDINATOR, PMIx, a shared file
//   spawn.h          child processes with their output and exit watched
//   local_cluster.h  a whole job as local processes (ferry-launch, `--local N`)
//
// Threading: blocking calls on the caller's thread (spawn.h says which may be called from where).
#pragma once

#include "ps/launch/launch_env.h"
#include "ps/launch/local_cluster.h"
#include "ps/launch/rendezvous.h"
#include "ps/launch/spawn.h"
