// The launcher's worker processes (internal to parallel/, used by launch_local_workers):
// the four steps of a local launch, each on its own.
//
//   WorkerPlan plan = plan_workers(argc, argv, ...);   // argv/env of each worker, built before fork
//   SignalRelay signals;                               // Ctrl-C etc. become bytes on a pipe
//   std::vector<Worker> workers;
//   int err = spawn_workers(plan, forward_stdout, workers);   // fork + exec; rank 0 keeps the terminal
//   Supervisor sup(workers, store, opts, signals);            // forward output, reap, stop the rest
//   int rc = sup.run(err);                                    // the launcher's exit code
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "parallel/launcher.h"

namespace dit {
namespace launch {

// What each worker is started with: this executable, the launcher's argv, and its
// environment plus the rank variables.
struct WorkerPlan {
  std::string exe;
  std::vector<std::string> argv;
  std::vector<int> ranks;                      // global rank of each worker
  std::vector<std::vector<std::string>> envs;  // per worker
  std::vector<int> cpus;                       // what the workers start on (startup_cpus)
};
WorkerPlan plan_workers(int argc, char** argv, int nproc, int first_rank, int world, const std::string& rendezvous,
                        int64_t generation, int threads);

struct Worker {
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
  int status = 0;
  int err_fd = -1, out_fd = -1;  // read ends (-1: not captured)
  std::string err_partial, out_partial, last_err_line;
};

// SIGINT/SIGTERM/SIGHUP/SIGCHLD handlers that write the signal number into a pipe the
// supervisor polls; the previous handlers come back on destruction. One at a time.
class SignalRelay {
 public:
  SignalRelay();
  ~SignalRelay();
  SignalRelay(const SignalRelay&) = delete;
  SignalRelay& operator=(const SignalRelay&) = delete;
  int fd() const;
  std::vector<int> drain();  // the signals received since the last call
};

// Forks and execs every worker of `plan` (rank 0 inherits the terminal; the others' stderr,
// and stdout with forward_stdout, come through pipes). Returns 0, or the errno that
// stopped it (the workers started so far are in `workers`).
int spawn_workers(const WorkerPlan& plan, bool forward_stdout, std::vector<Worker>& workers);

// Runs the launch until every worker has ended and its output is drained: forwards their
// lines as "[rank N] ...", stops them all on a signal or on the first failure (after
// opts.grace: SIGTERM, 2 s later SIGKILL), names the rank that failed first, and returns
// the launcher's exit code (the failed rank's, 128+signal when interrupted, 1 when the
// workers could not be started).
class Supervisor {
 public:
  Supervisor(std::vector<Worker>& workers, RendezvousStore& store, const LaunchOptions& opts, SignalRelay& signals);
  int run(int spawn_error);

 private:
  using Clock = std::chrono::steady_clock;
  int alive() const;
  bool output_open() const;
  void signal_all(int sig);
  void begin_stop(Clock::duration grace);
  void poll_once();
  void on_signals(const std::vector<int>& sigs);
  void reap();
  void attribute_failure();
  void escalate();
  int outcome() const;

  std::vector<Worker>& workers_;
  RendezvousStore& store_;
  const LaunchOptions& opts_;
  SignalRelay& signals_;
  int first_failed_ = -1;  // index into workers_
  int interrupted_ = 0;    // the signal that asked us to stop
  int spawn_error_ = 0;
  Clock::time_point stop_at_{}, kill_at_{}, attribute_at_{};
  std::vector<int> failures_;               // worker indices in the order they were reaped
  std::vector<bool> ended_before_signals_;  // ... and whether that was before we signalled anyone
  bool termed_ = false, killed_ = false;
  std::string unresponsive_;  // the abort report naming a stopped worker of ours, if any
};

}  // namespace launch
}  // namespace dit
