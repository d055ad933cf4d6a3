// Placement: which cores each local rank runs on.
//
// Local rank r of a machine's L ranks, each with T threads, gets the CPUs
// order[r*T .. r*T+T-1] of the process's allowed set (sched_getaffinity) in placement order,
// so the ranks of one machine never share a CPU. Only when L×T exceeds the allowed CPUs do
// the sets wrap around and overlap (`oversubscribed`).
//
// Placement order knows SMT: the CPUs of one physical core (hyperthreads) are siblings
// (sysfs topology). When L×T fits in the allowed set's physical cores, every thread gets a core
// of its own (each core's first CPU, cores in order); otherwise each core's CPUs go together,
// so that a rank shares cores only with itself. Without SMT (or without sysfs) the order is
// the allowed set's, ascending.
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

// Pure: the CPUs of local rank `local_rank` of `local_world` ranks with `threads` threads
// each, out of `allowed` taken in its order (placement_order). Throws dit::Error on an empty
// set or out-of-range arguments.
Placement rank_cores(const std::vector<int>& allowed, int local_rank, int local_world, int threads);

// This process's allowed CPUs (sched_getaffinity), ascending.
std::vector<int> allowed_cpus();

// The CPUs this process was started on, ascending: allowed_cpus(), and where OpenMP binds
// threads (OMP_PROC_BIND, OMP_PLACES, GOMP_CPU_AFFINITY) the CPUs of all its places too. With
// binding on, libgomp binds the first thread to one place before main, so allowed_cpus() then
// says one core; its places are made from the set the process started with. What a launcher
// shares out among its ranks and gives its workers to start on.
std::vector<int> startup_cpus();

inline constexpr const char* kOpenMPBindingVars[] = {"OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY"};
// The OpenMP binding variables set in this process's environment ("OMP_PROC_BIND=true", ...),
// which a launcher does not pass to the ranks it places itself (they would bind every rank's
// threads to the same first cores).
std::vector<std::string> openmp_binding_vars();

// `allowed` by physical core: each core's allowed CPUs (its SMT siblings) together, cores in
// the order of their first CPU. From <sysfs>/cpuN/topology/core_cpus_list (or
// thread_siblings_list, its older name); a CPU whose topology cannot be read is a core of its
// own.
std::vector<std::vector<int>> physical_cores(const std::vector<int>& allowed,
                                             const std::string& sysfs = "/sys/devices/system/cpu");

// The order in which ranks take CPUs for `need` = ranks × threads of them (above): one CPU of
// each core first when `need` fits the cores, else each core's CPUs together.
std::vector<int> placement_order(const std::vector<std::vector<int>>& cores, size_t need);

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

// The one-line warning (with its newline), or "": a rank started by another launcher (mpirun,
// srun, a script) alongside other local ranks, with OpenMP's binding set and more cores to
// start on than its `threads`. libgomp then binds its threads from the first of those cores,
// as it does every other local rank's started on the same set, and dit-gen cannot move them.
std::string openmp_binding_warning(const std::string& program, const LaunchEnv& env, int threads);

}  // namespace dit
