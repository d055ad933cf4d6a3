// Launcher: how the ranks of a run get started, and how a rank learns who it is.
//
// One machine (the default): `dit-gen ... --ulysses 2 --ring 2` started by hand sees no rank
// environment and a world size > 1, so it becomes the launcher: it starts the world size
// worker processes (itself, same arguments, plus DIT_RANK etc.), waits for them and returns
// their exit code. Like torchrun. Rank 0 keeps the terminal (progress bar); the other ranks'
// stderr is forwarded line by line as "[rank N] ..." and their stdout is discarded.
// Ctrl-C stops every worker; the first worker to fail stops the others and its exit code
// (128+signal for a signal) becomes the launcher's.
//
// External launch (several machines, or mpirun/srun/a script): each process gets
//   DIT_RANK, DIT_WORLD_SIZE, DIT_RENDEZVOUS (and DIT_LOCAL_RANK, DIT_LOCAL_WORLD_SIZE,
//   DIT_THREADS, DIT_ADDR optionally)
// or OMPI_COMM_WORLD_RANK/SIZE (mpirun) or SLURM_PROCID/SLURM_STEP_NUM_TASKS (srun; or
// SLURM_NTASKS inside a step), with
// the rendezvous from DIT_RENDEZVOUS or --rendezvous. Or per machine:
//   dit-gen ... --nnodes 2 --node-rank K --nproc-per-node 4 --rendezvous redis://host:6379/run1
// which starts ranks K*4 .. K*4+3 here.
//
// The CLI's main:
//   dit::LaunchOptions lo;  lo.world_size = degrees.world(); lo.threads = threads_flag; ...
//   if (auto rc = dit::maybe_launch(argc, argv, lo)) return *rc;        // we were the launcher
//   dit::LaunchEnv env = dit::detect_launch_env(lo);                    // we are rank env.rank
//   std::shared_ptr<dit::ProcessGroup> world;
//   try {
//     world = dit::connect_world(env, {timeout});
//     dit::DeviceMesh mesh(world, degrees); ... run ...
//   } catch (const std::exception& e) {
//     std::fprintf(stderr, "error: %s\n", e.what());
//     dit::fail_rank(world.get(), env, e.what());  // the other ranks stop too
//     return 1;
//   }
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "parallel/process_group.h"

namespace dit {

// A rank's exit code for bad input that every rank finds alike (a checkpoint or a request
// the pipeline refuses): the first rank of each machine prints the one line, the others exit
// quietly, and the launcher adds nothing when that machine's first rank reported it.
constexpr int kInputErrorExit = 2;
// A rank's exit code when it stopped because another rank failed (ProcessGroup::
// failed_because_of_peer): under dit-gen's own launcher it prints nothing, and the launcher
// reports the cause once (the failed rank's own error, its signal, or the abort record of a
// rank on another machine). Ranks started by another launcher print their error as before.
constexpr int kPeerFailedExit = 3;

struct LaunchEnv {
  int rank = 0, world = 1;
  int local_rank = 0, local_world = 1;  // on this machine
  bool local_known = false;             // both came from the environment (else guessed: rank, world)
  std::string rendezvous;               // "file:DIR" or "redis://HOST:PORT[/RUN]"; empty if world == 1
  bool external = false;                // this process was started as a rank (by us or mpirun/srun/...)
  bool supervised = false;              // ... by dit-gen's own launcher (DIT_RENDEZVOUS_GENERATION set)
  int threads = 0;                      // DIT_THREADS (0: not set)
  std::string source;                   // "DIT_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID" or ""
};

struct LaunchOptions {
  int world_size = 1;       // ranks requested (product of the mesh degrees)
  int threads = 0;          // -t: threads per rank; 0 = this machine's cores / local ranks
  int nnodes = 1;           // --nnodes
  int node_rank = 0;        // --node-rank
  int nproc_per_node = 0;   // --nproc-per-node; 0 = world_size / nnodes
  std::string rendezvous;   // --rendezvous; empty: a fresh private file: directory (one machine)
  std::chrono::milliseconds grace{3000};  // after a failure, before the other ranks are killed
  std::chrono::milliseconds timeout = kDefaultCommTimeout;  // --timeout: for the other machines' ranks to join
  bool forward_stdout = false;  // prefix and forward the other ranks' stdout instead of discarding it
  bool announce = true;         // print one line saying what was started
  std::string program = "dit-gen";  // for the launcher's own messages
};

// Who this process is. From DIT_RANK/DIT_WORLD_SIZE/DIT_RENDEZVOUS, else
// OMPI_COMM_WORLD_RANK/SIZE, else SLURM_PROCID/SLURM_STEP_NUM_TASKS or SLURM_NTASKS in an
// srun step (local ranks from SLURM_STEP_TASKS_PER_NODE and SLURM_NODEID; the rendezvous then
// from DIT_RENDEZVOUS or opts.rendezvous); else a single process (rank 0 of 1).
// Throws dit::Error on inconsistent variables.
LaunchEnv detect_launch_env(const LaunchOptions& opts = {});

// Returns the exit code when this process acted as the launcher (started the workers and
// waited for them), or nullopt when this process is a rank (or world size 1) and should go on.
std::optional<int> maybe_launch(int argc, char** argv, const LaunchOptions& opts);

// Starts ranks first_rank .. first_rank+nproc-1 of a world of `world` ranks on this
// machine, all running /proc/self/exe with argv, and supervises them (see the top).
int launch_local_workers(int argc, char** argv, int nproc, int first_rank, int world,
                         const std::string& rendezvous, const LaunchOptions& opts);

// Connects this rank to the others (a world of one needs no connection). The listen
// address: DIT_ADDR (or DIT_IFACE, an interface name) if set, else this machine's host
// name for a redis rendezvous or when some ranks run on other machines (local ranks <
// world), else 127.0.0.1.
std::shared_ptr<ProcessGroup> connect_world(const LaunchEnv& env, CommOptions opts = {});

// For a rank that fails before connect_world returned: posts its abort to the store.
void report_rank_failure(const LaunchEnv& env, const std::string& message) noexcept;

// A failed rank makes the others stop: through its world where connected (world->abort),
// else through the rendezvous store (report_rank_failure). Never throws.
void fail_rank(ProcessGroup* world, const LaunchEnv& env, const std::string& message) noexcept;

// Threads per rank the launcher sets: opts.threads, or cores available / local ranks.
int threads_per_rank(int threads_flag, int local_ranks);

}  // namespace dit
