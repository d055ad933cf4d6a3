#include "parallel/worker_processes.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "parallel/placement.h"
#include "runtime/error.h"

extern char** environ;

namespace dit {
namespace launch {

namespace {

// ---- signal plumbing: handlers write the signal number into a pipe the loop polls.
int g_signal_pipe[2] = {-1, -1};
struct sigaction g_old[4];
constexpr int kRelayed[4] = {SIGINT, SIGTERM, SIGHUP, SIGCHLD};

void on_signal(int sig) {
  int saved = errno;
  unsigned char b = static_cast<unsigned char>(sig);
  if (g_signal_pipe[1] >= 0) (void)!write(g_signal_pipe[1], &b, 1);
  errno = saved;
}

void write_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = write(fd, s.data() + off, s.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    off += size_t(n);
  }
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    int s = WTERMSIG(status);
    const char* name = sigabbrev_np(s);
    return "was killed by signal " + std::to_string(s) + (name ? std::string(" (SIG") + name + ")" : "");
  }
  return "ended with status " + std::to_string(status);
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

// Emits complete lines from `partial` (+ `data`) prefixed; keeps the incomplete tail.
void forward_lines(Worker& w, std::string& partial, const char* data, size_t n, int to_fd, bool is_err) {
  partial.append(data, n);
  size_t start = 0;
  std::string out;
  for (;;) {
    size_t nl = partial.find('\n', start);
    if (nl == std::string::npos) break;
    std::string line = partial.substr(start, nl - start);
    out += "[rank " + std::to_string(w.rank) + "] " + line + "\n";
    // The worker's own account of its failure: its last line that reports an error.
    if (is_err && line.find("error") != std::string::npos) w.last_err_line = line;
    start = nl + 1;
  }
  partial.erase(0, start);
  if (!out.empty()) write_all(to_fd, out);
}

void flush_partial(Worker& w) {
  if (!w.err_partial.empty()) forward_lines(w, w.err_partial, "\n", 1, 2, true);
  if (!w.out_partial.empty()) forward_lines(w, w.out_partial, "\n", 1, 1, false);
}

// Reads what is available on one of a worker's pipes and forwards it; closes it at EOF.
void forward_output(Worker& w, bool is_err) {
  int& fd = is_err ? w.err_fd : w.out_fd;
  char buf[65536];
  ssize_t got = read(fd, buf, sizeof(buf));
  if (got > 0) {
    forward_lines(w, is_err ? w.err_partial : w.out_partial, buf, size_t(got), is_err ? 2 : 1, is_err);
  } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
    close(fd);
    fd = -1;
  }
}

}  // namespace

// ---------------------------------------------------------------- plan

WorkerPlan plan_workers(int argc, char** argv, int nproc, int first_rank, int world, const std::string& rendezvous,
                        int64_t generation, int threads) {
  WorkerPlan plan;
  plan.argv.assign(argv, argv + argc);
  static const char* kOurs[] = {"DIT_RANK=", "DIT_WORLD_SIZE=", "DIT_LOCAL_RANK=", "DIT_LOCAL_WORLD_SIZE=",
                                "DIT_RENDEZVOUS=", "DIT_RENDEZVOUS_GENERATION=", "DIT_THREADS=",
                                "OMP_NUM_THREADS="};
  // Every worker's own value above; OpenMP's binding not at all: each rank places itself on
  // its own cores (placement.h), and libgomp would bind every rank's threads from the first.
  const auto ours = [](const char* e) {
    for (const char* p : kOurs)
      if (std::strncmp(e, p, std::strlen(p)) == 0) return true;
    for (const char* v : kOpenMPBindingVars)
      if (std::strncmp(e, v, std::strlen(v)) == 0 && e[std::strlen(v)] == '=') return true;
    return false;
  };
  std::vector<std::string> base_env;
  for (char** e = environ; *e; e++)
    if (!ours(*e)) base_env.push_back(*e);
  plan.cpus = startup_cpus();
  for (int i = 0; i < nproc; i++) {
    plan.ranks.push_back(first_rank + i);
    auto e = base_env;
    e.push_back("DIT_RANK=" + std::to_string(first_rank + i));
    e.push_back("DIT_WORLD_SIZE=" + std::to_string(world));
    e.push_back("DIT_LOCAL_RANK=" + std::to_string(i));
    e.push_back("DIT_LOCAL_WORLD_SIZE=" + std::to_string(nproc));
    e.push_back("DIT_RENDEZVOUS=" + rendezvous);
    e.push_back("DIT_RENDEZVOUS_GENERATION=" + std::to_string(generation));
    e.push_back("DIT_THREADS=" + std::to_string(threads));
    e.push_back("OMP_NUM_THREADS=" + std::to_string(threads));
    plan.envs.push_back(std::move(e));
  }
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  DIT_CHECK(n > 0, "launcher: cannot resolve /proc/self/exe: " << std::strerror(errno));
  plan.exe.assign(exe, size_t(n));
  return plan;
}

// ---------------------------------------------------------------- signals

SignalRelay::SignalRelay() {
  DIT_CHECK(pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) == 0, "launcher: pipe: " << std::strerror(errno));
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  for (int i = 0; i < 4; i++) sigaction(kRelayed[i], &sa, &g_old[i]);
}

SignalRelay::~SignalRelay() {
  for (int i = 0; i < 4; i++) sigaction(kRelayed[i], &g_old[i], nullptr);
  close(g_signal_pipe[0]);
  close(g_signal_pipe[1]);
  g_signal_pipe[0] = g_signal_pipe[1] = -1;
}

int SignalRelay::fd() const { return g_signal_pipe[0]; }

std::vector<int> SignalRelay::drain() {
  std::vector<int> sigs;
  unsigned char buf[64];
  ssize_t got;
  while ((got = read(g_signal_pipe[0], buf, sizeof(buf))) > 0)
    for (ssize_t j = 0; j < got; j++) sigs.push_back(buf[j]);
  return sigs;
}

// ---------------------------------------------------------------- spawn

int spawn_workers(const WorkerPlan& plan, bool forward_stdout, std::vector<Worker>& workers) {
  // Everything the children need is built before fork: the child only calls
  // async-signal-safe functions between fork and exec.
  std::vector<std::string> args = plan.argv;
  std::vector<char*> cargv;
  for (auto& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  std::vector<std::vector<std::string>> envs = plan.envs;
  std::vector<std::vector<char*>> cenvs(envs.size());
  for (size_t i = 0; i < envs.size(); i++) {
    for (auto& s : envs[i]) cenvs[i].push_back(s.data());
    cenvs[i].push_back(nullptr);
  }
  // The workers start on every CPU this process started on, not on the one core OpenMP's
  // binding may have left this thread (placement.h, startup_cpus).
  cpu_set_t start_cpus;
  CPU_ZERO(&start_cpus);
  for (int c : plan.cpus) CPU_SET(c, &start_cpus);
  const int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
  const pid_t launcher_pid = getpid();
  int spawn_error = 0;
  workers.assign(plan.ranks.size(), Worker{});
  for (size_t i = 0; i < plan.ranks.size(); i++) {
    Worker& w = workers[i];
    w.rank = plan.ranks[i];
    const bool inherit = w.rank == 0;  // rank 0 owns the terminal (progress bar)
    int errp[2] = {-1, -1}, outp[2] = {-1, -1};
    if (!inherit && (pipe2(errp, O_CLOEXEC) != 0 || (forward_stdout && pipe2(outp, O_CLOEXEC) != 0))) {
      spawn_error = errno;
      break;
    }
    const pid_t pid = fork();
    if (pid < 0) {
      spawn_error = errno;
      break;
    }
    if (pid == 0) {
      // Child: die with the launcher; own the pipes; default signal dispositions.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != launcher_pid) _exit(127);
      for (int s : kRelayed) signal(s, SIG_DFL);
      if (!plan.cpus.empty()) sched_setaffinity(0, sizeof(start_cpus), &start_cpus);
      if (!inherit) {
        dup2(devnull, 0);
        dup2(errp[1], 2);
        dup2(forward_stdout ? outp[1] : devnull, 1);
      }
      execve(plan.exe.c_str(), cargv.data(), cenvs[i].data());
      const char msg[] = "launcher: execve failed\n";
      (void)!write(2, msg, sizeof(msg) - 1);
      _exit(127);
    }
    w.pid = pid;
    w.running = true;
    if (!inherit) {
      close(errp[1]);
      w.err_fd = errp[0];
      if (forward_stdout) {
        close(outp[1]);
        w.out_fd = outp[0];
      }
    }
  }
  if (devnull >= 0) close(devnull);
  return spawn_error;
}

// ---------------------------------------------------------------- supervise

Supervisor::Supervisor(std::vector<Worker>& workers, RendezvousStore& store, const LaunchOptions& opts,
                       SignalRelay& signals)
    : workers_(workers), store_(store), opts_(opts), signals_(signals) {}

int Supervisor::alive() const {
  int k = 0;
  for (const auto& w : workers_) k += w.running;
  return k;
}

bool Supervisor::output_open() const {
  return std::any_of(workers_.begin(), workers_.end(), [](const Worker& w) { return w.err_fd >= 0 || w.out_fd >= 0; });
}

void Supervisor::signal_all(int sig) {
  for (auto& w : workers_)
    if (w.running) {
      kill(w.pid, sig);
      if (sig == SIGTERM) kill(w.pid, SIGCONT);  // a stopped worker acts on it now
    }
}

void Supervisor::begin_stop(Clock::duration grace) {
  if (stop_at_ == Clock::time_point{}) {
    stop_at_ = Clock::now() + grace;
    kill_at_ = stop_at_ + std::chrono::seconds(2);
  }
}

int Supervisor::run(int spawn_error) {
  spawn_error_ = spawn_error;
  if (spawn_error_) {
    write_all(2, opts_.program + ": cannot start the worker processes: " + std::strerror(spawn_error_) + "\n");
    interrupted_ = SIGTERM;
    signal_all(SIGKILL);
    killed_ = true;
  }
  while (alive() > 0 || output_open()) {
    poll_once();
    reap();
    attribute_failure();
    escalate();
  }
  for (auto& w : workers_) flush_partial(w);
  return outcome();
}

// Waits up to 100 ms for a signal or worker output, and handles what came.
void Supervisor::poll_once() {
  std::vector<pollfd> fds{{signals_.fd(), POLLIN, 0}};
  std::vector<std::pair<int, bool>> who{{-1, false}};  // worker index, is_err
  for (size_t i = 0; i < workers_.size(); i++) {
    if (workers_[i].err_fd >= 0) {
      fds.push_back({workers_[i].err_fd, POLLIN, 0});
      who.push_back({int(i), true});
    }
    if (workers_[i].out_fd >= 0) {
      fds.push_back({workers_[i].out_fd, POLLIN, 0});
      who.push_back({int(i), false});
    }
  }
  const int ready = poll(fds.data(), fds.size(), 100);
  for (size_t k = 0; ready > 0 && k < fds.size(); k++) {
    if (!(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    if (who[k].first < 0)
      on_signals(signals_.drain());
    else
      forward_output(workers_[size_t(who[k].first)], who[k].second);
  }
}

void Supervisor::on_signals(const std::vector<int>& sigs) {
  for (int s : sigs) {
    if (s == SIGCHLD) continue;
    if (interrupted_) {  // second Ctrl-C: no more patience
      signal_all(SIGKILL);
      killed_ = true;
    } else {
      interrupted_ = s;
      write_all(2, opts_.program + ": " + (s == SIGINT ? "interrupted" : "terminated") + ", stopping all ranks\n");
      signal_all(SIGTERM);
      termed_ = true;
      begin_stop(Clock::duration::zero());
    }
  }
}

// Reaps the workers that ended. Several may end in one pass; a rank killed by a signal
// (not ours) could not say so itself: its abort is posted for it, so ranks on other
// machines, which cannot see its pid, name it as the cause.
void Supervisor::reap() {
  std::vector<int> ended;
  for (size_t i = 0; i < workers_.size(); i++) {
    Worker& w = workers_[i];
    if (!w.running) continue;
    int status = 0;
    if (waitpid(w.pid, &status, WNOHANG) == w.pid) {
      w.running = false;
      w.status = status;
      if (status != 0) ended.push_back(int(i));
    }
  }
  for (int i : ended) {
    failures_.push_back(i);
    ended_before_signals_.push_back(!termed_ && !killed_);
    const Worker& w = workers_[size_t(i)];
    if (!termed_ && !killed_ && WIFSIGNALED(w.status)) {
      char host[256] = {0};
      gethostname(host, sizeof(host) - 1);
      store_.post_abort(w.rank, "killed by signal " + std::to_string(WTERMSIG(w.status)) + " on " + host +
                                    " (seen by its launcher)");
    }
  }
}

// Who failed first? Ranks that fail because another one did end a moment later, and may
// be reaped first; wait a little, then prefer a worker reported as not responding (it is
// still there, stopped), then one killed by a signal (not ours), then one that reported its
// own failure, then one that did not stop for another rank (kPeerFailedExit), then the first
// one reaped. Ranks still running are told why they are being stopped; the verdict is
// outcome()'s one line.
void Supervisor::attribute_failure() {
  if (!failures_.empty() && !interrupted_ && attribute_at_ == Clock::time_point{}) {
    attribute_at_ = Clock::now() + std::chrono::milliseconds(300);
    begin_stop(opts_.grace);
  }
  if (first_failed_ >= 0 || attribute_at_ == Clock::time_point{} || (Clock::now() < attribute_at_ && alive() > 0))
    return;
  const auto ab = store_.find_abort();
  if (ab && ab->unresponsive)
    for (const auto& w : workers_)
      if (w.rank == ab->rank && w.running) unresponsive_ = ab->describe();
  for (size_t k = 0; k < failures_.size() && first_failed_ < 0; k++)
    if (ended_before_signals_[k] && WIFSIGNALED(workers_[size_t(failures_[k])].status)) first_failed_ = failures_[k];
  if (first_failed_ < 0 && ab && !ab->secondary)
    for (int i : failures_)
      if (workers_[size_t(i)].rank == ab->rank) first_failed_ = i;
  for (size_t k = 0; k < failures_.size() && first_failed_ < 0; k++)  // not one that stopped for another
    if (exit_code_of(workers_[size_t(failures_[k])].status) != kPeerFailedExit) first_failed_ = failures_[k];
  if (first_failed_ < 0) first_failed_ = failures_.front();
  const int others = alive();
  const std::string rest =
      others ? "; stopping the other " + std::to_string(others) + " rank" + (others == 1 ? "" : "s") : std::string();
  const int code = exit_code_of(workers_[size_t(first_failed_)].status);
  if (others == 0) return;  // nothing to stop: outcome() says it once
  if (!unresponsive_.empty())
    write_all(2, opts_.program + ": " + unresponsive_ + rest + "\n");
  else if (code != kInputErrorExit && code != kPeerFailedExit)  // those: see outcome()
    write_all(2, opts_.program + ": rank " + std::to_string(workers_[size_t(first_failed_)].rank) + " " +
                     describe_status(workers_[size_t(first_failed_)].status) + rest + "\n");
}

// After a failure or a signal: SIGTERM once the grace period is over, SIGKILL 2 s later.
void Supervisor::escalate() {
  if (stop_at_ == Clock::time_point{} || alive() == 0) return;
  const auto now = Clock::now();
  if (!termed_ && now >= stop_at_) {
    signal_all(SIGTERM);
    termed_ = true;
  }
  if (!killed_ && now >= kill_at_) {
    signal_all(SIGKILL);
    killed_ = true;
  }
}

int Supervisor::outcome() const {
  if (interrupted_) return 128 + interrupted_;
  if (!unresponsive_.empty()) {
    write_all(2, opts_.program + ": failed: " + unresponsive_ + "\n");
    return 1;
  }
  if (first_failed_ >= 0) {
    const Worker& w = workers_[size_t(first_failed_)];
    if (exit_code_of(w.status) == kInputErrorExit) {
      // Bad input every rank found alike: this machine's first rank printed it, unless it
      // ended otherwise (stopped before it got there): then say it here, once.
      const Worker& first = workers_.front();
      if (WIFEXITED(first.status) && WEXITSTATUS(first.status) == kInputErrorExit) return kInputErrorExit;
      const auto ab = store_.find_abort();
      write_all(2, opts_.program + ": error: " + (ab ? ab->message : "rank " + std::to_string(w.rank) + " " +
                                                                           describe_status(w.status)) + "\n");
      return kInputErrorExit;
    }
    if (exit_code_of(w.status) == kPeerFailedExit) {
      // Every rank here stopped because a rank elsewhere failed: its launcher or itself
      // posted the cause.
      const auto ab = store_.find_abort();
      write_all(2, opts_.program + ": failed: " +
                       (ab ? ab->describe() : "rank " + std::to_string(w.rank) + " stopped because another rank failed") +
                       "\n");
      return 1;
    }
    std::string msg = opts_.program + ": failed: rank " + std::to_string(w.rank) + " " + describe_status(w.status);
    if (!w.last_err_line.empty()) msg += ": " + w.last_err_line;
    write_all(2, msg + "\n");
    return exit_code_of(w.status);
  }
  return spawn_error_ ? 1 : 0;
}

}  // namespace launch
}  // namespace dit
