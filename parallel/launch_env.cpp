// Who this process is: the launch environment (DIT_*, mpirun's OMPI_*, srun's SLURM_*)
// and the threads each rank gets.
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "parallel/launcher.h"
#include "parallel/placement.h"
#include "runtime/environment.h"
#include "runtime/error.h"

namespace dit {

namespace {

int env_int(const char* name, int fallback) {
  const char* v = env_nonempty(name);
  if (!v) return fallback;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  DIT_CHECK(*end == 0 && x >= 0 && x < (1 << 24), "environment variable " << name << "='" << v << "' is not a number");
  return int(x);
}

// The world size of an srun step: SLURM_STEP_NUM_TASKS, or SLURM_NTASKS inside a step
// (SLURM_STEP_ID set). A batch script itself (no step) is not a rank of a parallel run.
const char* slurm_world_var() {
  if (env_nonempty("SLURM_STEP_NUM_TASKS")) return "SLURM_STEP_NUM_TASKS";
  if (env_nonempty("SLURM_NTASKS") && env_nonempty("SLURM_STEP_ID")) return "SLURM_NTASKS";
  return nullptr;
}

// Tasks of this step on this node, from SLURM_STEP_TASKS_PER_NODE ("4", "4(x2)",
// "2(x3),1": counts per node of the step, in node order) at this node's index
// SLURM_NODEID. Unparsable or absent: every task is on this node.
int slurm_tasks_on_this_node(int world) {
  const char* v = env_nonempty("SLURM_STEP_TASKS_PER_NODE");
  if (!v) v = env_nonempty("SLURM_TASKS_PER_NODE");
  if (!v) return world;
  const int node = env_int("SLURM_NODEID", 0);
  int index = 0;
  for (const char* p = v; *p;) {
    char* end = nullptr;
    const long count = std::strtol(p, &end, 10);
    if (end == p || count <= 0) return world;
    long repeat = 1;
    if (*end == '(') {
      if (end[1] != 'x') return world;
      repeat = std::strtol(end + 2, &end, 10);
      if (repeat <= 0 || *end != ')') return world;
      ++end;
    }
    if (node < index + repeat) return int(std::min<long>(count, world));
    index += int(std::min<long>(repeat, 1 << 24));
    if (*end == ',') ++end;
    else if (*end) return world;
    p = end;
  }
  return world;
}

}  // namespace

int threads_per_rank(int threads_flag, int local_ranks) {
  if (threads_flag > 0) return threads_flag;
  int cores = int(startup_cpus().size());  // OpenMP's binding may have narrowed this thread's set
  if (cores <= 0) cores = int(sysconf(_SC_NPROCESSORS_ONLN));
  return std::max(1, cores / std::max(1, local_ranks));
}

LaunchEnv detect_launch_env(const LaunchOptions& opts) {
  LaunchEnv env;
  if (env_nonempty("DIT_RANK") || env_nonempty("DIT_WORLD_SIZE")) {
    DIT_CHECK(env_nonempty("DIT_RANK") && env_nonempty("DIT_WORLD_SIZE"), "DIT_RANK and DIT_WORLD_SIZE must be set together");
    env.rank = env_int("DIT_RANK", 0);
    env.world = env_int("DIT_WORLD_SIZE", 1);
    env.local_rank = env_int("DIT_LOCAL_RANK", env.rank);
    env.local_world = env_int("DIT_LOCAL_WORLD_SIZE", env.world);
    env.local_known = env_nonempty("DIT_LOCAL_RANK") && env_nonempty("DIT_LOCAL_WORLD_SIZE");
    env.source = "DIT_RANK";
    env.supervised = env_nonempty("DIT_RENDEZVOUS_GENERATION") != nullptr;
  } else if (env_nonempty("OMPI_COMM_WORLD_RANK") && env_nonempty("OMPI_COMM_WORLD_SIZE")) {
    env.rank = env_int("OMPI_COMM_WORLD_RANK", 0);
    env.world = env_int("OMPI_COMM_WORLD_SIZE", 1);
    env.local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK", env.rank);
    env.local_world = env_int("OMPI_COMM_WORLD_LOCAL_SIZE", env.world);
    env.local_known = env_nonempty("OMPI_COMM_WORLD_LOCAL_RANK") && env_nonempty("OMPI_COMM_WORLD_LOCAL_SIZE");
    env.source = "OMPI_COMM_WORLD_RANK";
  } else if (env_nonempty("SLURM_PROCID") && slurm_world_var()) {
    env.rank = env_int("SLURM_PROCID", 0);
    env.world = env_int(slurm_world_var(), 1);
    env.local_rank = env_int("SLURM_LOCALID", env.rank);
    env.local_world = slurm_tasks_on_this_node(env.world);
    env.local_known = env_nonempty("SLURM_LOCALID") &&
                      (env_nonempty("SLURM_STEP_TASKS_PER_NODE") || env_nonempty("SLURM_TASKS_PER_NODE"));
    env.source = "SLURM_PROCID";
  } else {
    return env;  // a single process; maybe_launch decides whether to start workers
  }
  env.external = true;
  DIT_CHECK(env.world >= 1 && env.rank < env.world,
            env.source << ": rank " << env.rank << " is not in a world of size " << env.world);
  const char* r = env_nonempty("DIT_RENDEZVOUS");
  env.rendezvous = r ? r : opts.rendezvous;
  DIT_CHECK(env.world == 1 || !env.rendezvous.empty(),
            "rank " << env.rank << " of " << env.world << " (from " << env.source
                    << "): no rendezvous; pass --rendezvous redis://HOST:PORT (several machines) or "
                       "file:DIR (a directory all ranks share), or set DIT_RENDEZVOUS");
  env.threads = env_int("DIT_THREADS", 0);
  return env;
}

}  // namespace dit
