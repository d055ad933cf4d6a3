// Placement: which cores each local rank runs on.
//
// Local rank r of a machine's L ranks, each with T threads, gets the allowed cores
// allowed[r*T .. r*T+T-1] (`allowed` is the process's CPU set from sched_getaffinity, in
// order), so the ranks of one machine never share a core. Only when L×T exceeds the allowed
// cores do the sets wrap around and overlap (`oversubscribed`).
//
// A rank applies its placement with sched_setaffinity before it starts any thread (the
// OpenMP threads it creates later inherit the set). The launcher's workers and externally
// launched ranks that know their local rank and local world size (DIT_LOCAL_RANK /
// DIT_LOCAL_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_*, SLURM_LOCALID) are placed alike; a rank
// whose allowed set is already no larger than its threads (srun --cpu-bind, taskset per
// rank) keeps it. --no-pin leaves the affinity alone.
#pragma once

#include <string>
#include <vector>

namespace dit {

struct LaunchEnv;

struct Placement {
  std::vector<int> cpus;        // this rank's cores
  bool pinned = false;          // sched_setaffinity was (or is to be) applied
  bool oversubscribed = false;  // local ranks × threads > allowed cores: sets wrap and overlap
  std::string note;             // why not pinned, when not
};

// Pure: the cores of local rank `local_rank` of `local_world` ranks with `threads` threads
// each, out of `allowed`. Throws dit::Error on an empty set or out-of-range arguments.
Placement rank_cores(const std::vector<int>& allowed, int local_rank, int local_world, int threads);

// This process's allowed CPUs (sched_getaffinity), ascending.
std::vector<int> allowed_cpus();

// Restricts this process (its calling thread, and the threads it starts afterwards) to
// `cpus`. Throws dit::Error naming the cores and errno on failure.
void pin_to_cpus(const std::vector<int>& cpus);

// The placement of this rank: computed from env's local rank and local world size and
// applied, unless `pin` is false, the process is not one of several local ranks, its local
// rank and local world size were not given (env.local_known), or its allowed set is already
// at most `threads` cores (then `note` says why).
Placement place_rank(const LaunchEnv& env, int threads, bool pin);

// "0-3,8,10-11"
std::string cpu_list_string(const std::vector<int>& cpus);

// The one-line warning (with its newline) when `local_ranks` × `threads` exceed this
// process's allowed cores, or "" when they fit. threads_from_flag: -t chose the threads.
std::string oversubscription_warning(const std::string& program, int local_ranks, int threads,
                                     bool threads_from_flag);

}  // namespace dit
