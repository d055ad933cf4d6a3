#include "parallel/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/error.h"

extern char** environ;

namespace dit {

namespace {

const char* env_str(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : nullptr;
}

int env_int(const char* name, int fallback) {
  const char* v = env_str(name);
  if (!v) return fallback;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  DIT_CHECK(*end == 0 && x >= 0 && x < (1 << 24), "environment variable " << name << "='" << v << "' is not a number");
  return int(x);
}

// The world size of an srun step: SLURM_STEP_NUM_TASKS, or SLURM_NTASKS inside a step
// (SLURM_STEP_ID set). A batch script itself (no step) is not a rank of a parallel run.
const char* slurm_world_var() {
  if (env_str("SLURM_STEP_NUM_TASKS")) return "SLURM_STEP_NUM_TASKS";
  if (env_str("SLURM_NTASKS") && env_str("SLURM_STEP_ID")) return "SLURM_NTASKS";
  return nullptr;
}

// Tasks of this step on this node, from SLURM_STEP_TASKS_PER_NODE ("4", "4(x2)",
// "2(x3),1": counts per node of the step, in node order) at this node's index
// SLURM_NODEID. Unparsable or absent: every task is on this node.
int slurm_tasks_on_this_node(int world) {
  const char* v = env_str("SLURM_STEP_TASKS_PER_NODE");
  if (!v) v = env_str("SLURM_TASKS_PER_NODE");
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

// ---- signal plumbing: handlers write the signal number into a pipe the loop polls.
int g_signal_pipe[2] = {-1, -1};

void on_signal(int sig) {
  int saved = errno;
  unsigned char b = static_cast<unsigned char>(sig);
  if (g_signal_pipe[1] >= 0) (void)!write(g_signal_pipe[1], &b, 1);
  errno = saved;
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

void write_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = write(fd, s.data() + off, s.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    off += size_t(n);
  }
}

struct Worker {
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
  int status = 0;
  int err_fd = -1, out_fd = -1;  // read ends (-1: not captured)
  std::string err_partial, out_partial, last_err_line;
};

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

}  // namespace

int threads_per_rank(int threads_flag, int local_ranks) {
  if (threads_flag > 0) return threads_flag;
  cpu_set_t set;
  int cores = 0;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) cores = CPU_COUNT(&set);
  if (cores <= 0) cores = int(sysconf(_SC_NPROCESSORS_ONLN));
  return std::max(1, cores / std::max(1, local_ranks));
}

LaunchEnv detect_launch_env(const LaunchOptions& opts) {
  LaunchEnv env;
  if (env_str("DIT_RANK") || env_str("DIT_WORLD_SIZE")) {
    DIT_CHECK(env_str("DIT_RANK") && env_str("DIT_WORLD_SIZE"), "DIT_RANK and DIT_WORLD_SIZE must be set together");
    env.rank = env_int("DIT_RANK", 0);
    env.world = env_int("DIT_WORLD_SIZE", 1);
    env.local_rank = env_int("DIT_LOCAL_RANK", env.rank);
    env.local_world = env_int("DIT_LOCAL_WORLD_SIZE", env.world);
    env.source = "DIT_RANK";
  } else if (env_str("OMPI_COMM_WORLD_RANK") && env_str("OMPI_COMM_WORLD_SIZE")) {
    env.rank = env_int("OMPI_COMM_WORLD_RANK", 0);
    env.world = env_int("OMPI_COMM_WORLD_SIZE", 1);
    env.local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK", env.rank);
    env.local_world = env_int("OMPI_COMM_WORLD_LOCAL_SIZE", env.world);
    env.source = "OMPI_COMM_WORLD_RANK";
  } else if (env_str("SLURM_PROCID") && slurm_world_var()) {
    env.rank = env_int("SLURM_PROCID", 0);
    env.world = env_int(slurm_world_var(), 1);
    env.local_rank = env_int("SLURM_LOCALID", env.rank);
    env.local_world = slurm_tasks_on_this_node(env.world);
    env.source = "SLURM_PROCID";
  } else {
    return env;  // a single process; maybe_launch decides whether to start workers
  }
  env.external = true;
  DIT_CHECK(env.world >= 1 && env.rank < env.world,
            env.source << ": rank " << env.rank << " is not in a world of size " << env.world);
  const char* r = env_str("DIT_RENDEZVOUS");
  env.rendezvous = r ? r : opts.rendezvous;
  DIT_CHECK(env.world == 1 || !env.rendezvous.empty(),
            "rank " << env.rank << " of " << env.world << " (from " << env.source
                    << "): no rendezvous; pass --rendezvous redis://HOST:PORT (several machines) or "
                       "file:DIR (a directory all ranks share), or set DIT_RENDEZVOUS");
  env.threads = env_int("DIT_THREADS", 0);
  return env;
}

std::optional<int> maybe_launch(int argc, char** argv, const LaunchOptions& opts) {
  LaunchEnv env = detect_launch_env(opts);
  if (env.external) return std::nullopt;
  DIT_CHECK(opts.world_size >= 1, "world size must be >= 1, got " << opts.world_size);
  DIT_CHECK(opts.nnodes >= 1, "--nnodes must be >= 1, got " << opts.nnodes);
  if (opts.nnodes == 1 && opts.world_size == 1) return std::nullopt;
  int nproc = opts.nproc_per_node > 0 ? opts.nproc_per_node : opts.world_size / opts.nnodes;
  DIT_CHECK(nproc >= 1 && nproc * opts.nnodes == opts.world_size,
            "--nnodes " << opts.nnodes << " × --nproc-per-node " << nproc << " = " << nproc * opts.nnodes
                        << " ranks, but the parallel degrees need " << opts.world_size);
  DIT_CHECK(opts.node_rank >= 0 && opts.node_rank < opts.nnodes,
            "--node-rank " << opts.node_rank << " is not in 0.." << opts.nnodes - 1);
  if (opts.nnodes > 1) {
    DIT_CHECK(!opts.rendezvous.empty(),
              "--nnodes " << opts.nnodes << " needs --rendezvous redis://HOST:PORT[/RUN] (a redis-server all "
                                            "machines reach) or file:DIR on a shared filesystem");
    parse_rendezvous(opts.rendezvous);
  }
  return launch_local_workers(argc, argv, nproc, opts.node_rank * nproc, opts.world_size, opts.rendezvous, opts);
}

int launch_local_workers(int argc, char** argv, int nproc, int first_rank, int world,
                         const std::string& rendezvous_flag, const LaunchOptions& opts) {
  const std::string me = opts.program;
  std::string rendezvous = rendezvous_flag, private_dir;
  if (rendezvous.empty()) {
    private_dir = make_private_rendezvous_dir();
    rendezvous = "file:" + private_dir;
  } else {
    parse_rendezvous(rendezvous);
  }
  int threads = threads_per_rank(opts.threads, nproc);
  // Join the rendezvous for all local ranks (a fresh generation of it, see rendezvous.h)
  // and wait for the other machines' ranks; the workers use that generation.
  std::vector<int> local_ranks(nproc);
  for (int i = 0; i < nproc; i++) local_ranks[i] = first_rank + i;
  std::shared_ptr<RendezvousStore> store = RendezvousStore::join(rendezvous, world, local_ranks, opts.timeout);

  // Everything the children need is built before fork: the child only calls
  // async-signal-safe functions between fork and exec.
  std::vector<std::string> args(argv, argv + argc);
  std::vector<char*> cargv;
  for (auto& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  static const char* kOurs[] = {"DIT_RANK=", "DIT_WORLD_SIZE=", "DIT_LOCAL_RANK=", "DIT_LOCAL_WORLD_SIZE=",
                                "DIT_RENDEZVOUS=", "DIT_RENDEZVOUS_GENERATION=", "DIT_THREADS=",
                                "OMP_NUM_THREADS="};
  std::vector<std::string> base_env;
  for (char** e = environ; *e; e++) {
    bool ours = false;
    for (const char* p : kOurs) ours = ours || std::strncmp(*e, p, std::strlen(p)) == 0;
    if (!ours) base_env.push_back(*e);
  }
  std::vector<std::vector<std::string>> envs(nproc, base_env);
  std::vector<std::vector<char*>> cenvs(nproc);
  for (int i = 0; i < nproc; i++) {
    auto& e = envs[i];
    e.push_back("DIT_RANK=" + std::to_string(first_rank + i));
    e.push_back("DIT_WORLD_SIZE=" + std::to_string(world));
    e.push_back("DIT_LOCAL_RANK=" + std::to_string(i));
    e.push_back("DIT_LOCAL_WORLD_SIZE=" + std::to_string(nproc));
    e.push_back("DIT_RENDEZVOUS=" + rendezvous);
    e.push_back("DIT_RENDEZVOUS_GENERATION=" + std::to_string(store->generation()));
    e.push_back("DIT_THREADS=" + std::to_string(threads));
    e.push_back("OMP_NUM_THREADS=" + std::to_string(threads));
    for (auto& s : e) cenvs[i].push_back(s.data());
    cenvs[i].push_back(nullptr);
  }
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  DIT_CHECK(n > 0, "launcher: cannot resolve /proc/self/exe: " << std::strerror(errno));
  exe[n] = 0;

  if (opts.announce) {
    std::string line = me + ": starting ranks " + std::to_string(first_rank) + ".." +
                       std::to_string(first_rank + nproc - 1) + " of " + std::to_string(world) +
                       " on this machine, " + std::to_string(threads) + " thread" + (threads == 1 ? "" : "s") +
                       " each (rendezvous " + rendezvous + ")\n";
    write_all(2, line);
  }

  // Signals: SIGINT/SIGTERM/SIGHUP stop the workers; SIGCHLD wakes the loop.
  DIT_CHECK(pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) == 0, "launcher: pipe: " << std::strerror(errno));
  struct sigaction sa, old_int, old_term, old_hup, old_chld;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  sigaction(SIGHUP, &sa, &old_hup);
  sigaction(SIGCHLD, &sa, &old_chld);

  int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
  pid_t launcher_pid = getpid();
  std::vector<Worker> workers(nproc);
  int spawn_error = 0;
  for (int i = 0; i < nproc; i++) {
    Worker& w = workers[i];
    w.rank = first_rank + i;
    bool inherit = w.rank == 0;  // rank 0 owns the terminal (progress bar)
    int errp[2] = {-1, -1}, outp[2] = {-1, -1};
    if (!inherit) {
      if (pipe2(errp, O_CLOEXEC) != 0) {
        spawn_error = errno;
        break;
      }
      if (opts.forward_stdout && pipe2(outp, O_CLOEXEC) != 0) {
        spawn_error = errno;
        break;
      }
    }
    pid_t pid = fork();
    if (pid < 0) {
      spawn_error = errno;
      break;
    }
    if (pid == 0) {
      // Child: die with the launcher; own the pipes; default signal dispositions.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != launcher_pid) _exit(127);
      signal(SIGINT, SIG_DFL);
      signal(SIGTERM, SIG_DFL);
      signal(SIGHUP, SIG_DFL);
      signal(SIGCHLD, SIG_DFL);
      if (!inherit) {
        dup2(devnull, 0);
        dup2(errp[1], 2);
        dup2(opts.forward_stdout ? outp[1] : devnull, 1);
      }
      execve(exe, cargv.data(), cenvs[i].data());
      const char msg[] = "launcher: execve failed\n";
      (void)!write(2, msg, sizeof(msg) - 1);
      _exit(127);
    }
    w.pid = pid;
    w.running = true;
    if (!inherit) {
      close(errp[1]);
      w.err_fd = errp[0];
      if (opts.forward_stdout) {
        close(outp[1]);
        w.out_fd = outp[0];
      }
    }
  }
  if (devnull >= 0) close(devnull);

  using Clock = std::chrono::steady_clock;
  int first_failed = -1;  // index into workers
  int interrupted = 0;    // signal that asked us to stop
  Clock::time_point stop_at{}, kill_at{}, attribute_at{};
  std::vector<int> failures;                // worker indices in the order they were reaped
  std::vector<bool> ended_before_signals;  // ... and whether that was before we signalled anyone
  bool termed = false, killed = false;
  auto alive = [&] {
    int k = 0;
    for (auto& w : workers) k += w.running;
    return k;
  };
  auto signal_all = [&](int sig) {
    for (auto& w : workers)
      if (w.running) {
        kill(w.pid, sig);
        if (sig == SIGTERM) kill(w.pid, SIGCONT);  // a stopped worker acts on it now
      }
  };
  if (spawn_error) {
    write_all(2, me + ": cannot start the worker processes: " + std::strerror(spawn_error) + "\n");
    interrupted = SIGTERM;
    signal_all(SIGKILL);
    killed = true;
  }

  auto begin_stop = [&](Clock::duration grace) {
    if (stop_at == Clock::time_point{}) {
      stop_at = Clock::now() + grace;
      kill_at = stop_at + std::chrono::seconds(2);
    }
  };

  while (alive() > 0 || std::any_of(workers.begin(), workers.end(), [](const Worker& w) {
           return w.err_fd >= 0 || w.out_fd >= 0;
         })) {
    std::vector<pollfd> fds;
    std::vector<std::pair<int, bool>> who;  // worker index, is_err
    fds.push_back({g_signal_pipe[0], POLLIN, 0});
    who.push_back({-1, false});
    for (int i = 0; i < nproc; i++) {
      if (workers[i].err_fd >= 0) {
        fds.push_back({workers[i].err_fd, POLLIN, 0});
        who.push_back({i, true});
      }
      if (workers[i].out_fd >= 0) {
        fds.push_back({workers[i].out_fd, POLLIN, 0});
        who.push_back({i, false});
      }
    }
    int ready = poll(fds.data(), fds.size(), 100);
    if (ready < 0 && errno != EINTR) break;
    for (size_t k = 0; ready > 0 && k < fds.size(); k++) {
      if (!(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      if (who[k].first < 0) {
        unsigned char sigs[64];
        ssize_t got = read(g_signal_pipe[0], sigs, sizeof(sigs));
        for (ssize_t j = 0; j < got; j++) {
          int s = sigs[j];
          if (s == SIGCHLD) continue;
          if (interrupted) {  // second Ctrl-C: no more patience
            signal_all(SIGKILL);
            killed = true;
          } else {
            interrupted = s;
            write_all(2, me + ": " + (s == SIGINT ? "interrupted" : "terminated") + ", stopping all ranks\n");
            signal_all(SIGTERM);
            termed = true;
            begin_stop(Clock::duration::zero());
          }
        }
        continue;
      }
      Worker& w = workers[who[k].first];
      int& fd = who[k].second ? w.err_fd : w.out_fd;
      char buf[65536];
      ssize_t got = read(fd, buf, sizeof(buf));
      if (got > 0) {
        forward_lines(w, who[k].second ? w.err_partial : w.out_partial, buf, size_t(got), who[k].second ? 2 : 1,
                      who[k].second);
      } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
        close(fd);
        fd = -1;
      }
    }
    // Reap. Several ranks may end in one pass; a rank killed by a signal is the likelier
    // cause, then the lowest rank.
    std::vector<int> ended;
    for (int i = 0; i < nproc; i++) {
      Worker& w = workers[i];
      if (!w.running) continue;
      int status = 0;
      pid_t r = waitpid(w.pid, &status, WNOHANG);
      if (r == w.pid) {
        w.running = false;
        w.status = status;
        if (status != 0) ended.push_back(i);
      }
    }
    for (int i : ended) {
      failures.push_back(i);
      ended_before_signals.push_back(!termed && !killed);
      // A worker killed by a signal (not ours) could not say so itself: say it for it, so
      // ranks on other machines, which cannot see its pid, name it as the cause.
      if (!termed && !killed && WIFSIGNALED(workers[i].status)) {
        char host[256] = {0};
        gethostname(host, sizeof(host) - 1);
        store->post_abort(workers[i].rank, "killed by signal " + std::to_string(WTERMSIG(workers[i].status)) + " on " +
                                               host + " (seen by its launcher)");
      }
    }
    if (!failures.empty() && !interrupted && attribute_at == Clock::time_point{}) {
      // Who failed first? Ranks that fail because another one did end a moment later, and
      // may be reaped first; wait a little, then prefer a rank killed by a signal (not
      // ours), then one that reported its own failure, then the first one reaped.
      attribute_at = Clock::now() + std::chrono::milliseconds(300);
      begin_stop(opts.grace);
    }
    if (first_failed < 0 && attribute_at != Clock::time_point{} && (Clock::now() >= attribute_at || alive() == 0)) {
      for (size_t k = 0; k < failures.size() && first_failed < 0; k++)
        if (ended_before_signals[k] && WIFSIGNALED(workers[failures[k]].status)) first_failed = failures[k];
      if (first_failed < 0) {
        if (auto ab = store->find_abort())
          for (int i : failures)
            if (!ab->secondary && workers[i].rank == ab->rank) first_failed = i;
      }
      if (first_failed < 0) first_failed = failures.front();
      int others = alive();
      write_all(2, me + ": rank " + std::to_string(workers[first_failed].rank) + " " +
                       describe_status(workers[first_failed].status) +
                       (others ? "; stopping the other " + std::to_string(others) + " rank" + (others == 1 ? "" : "s")
                               : std::string()) +
                       "\n");
    }
    auto now = Clock::now();
    if (stop_at != Clock::time_point{} && alive() > 0) {
      if (!termed && now >= stop_at) {
        signal_all(SIGTERM);
        termed = true;
      }
      if (!killed && now >= kill_at) {
        signal_all(SIGKILL);
        killed = true;
      }
    }
  }
  for (auto& w : workers) flush_partial(w);

  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  sigaction(SIGHUP, &old_hup, nullptr);
  sigaction(SIGCHLD, &old_chld, nullptr);
  close(g_signal_pipe[0]);
  close(g_signal_pipe[1]);
  g_signal_pipe[0] = g_signal_pipe[1] = -1;
  store->leave(false);
  store.reset();
  if (!private_dir.empty()) remove_rendezvous_dir(private_dir);

  if (interrupted) return 128 + interrupted;
  if (first_failed >= 0) {
    const Worker& w = workers[first_failed];
    std::string msg = me + ": failed: rank " + std::to_string(w.rank) + " " + describe_status(w.status);
    if (!w.last_err_line.empty()) msg += ": " + w.last_err_line;
    write_all(2, msg + "\n");
    return exit_code_of(w.status);
  }
  return spawn_error ? 1 : 0;
}

std::shared_ptr<ProcessGroup> connect_world(const LaunchEnv& env, CommOptions opts) {
  if (env.world == 1) {
    auto store = RendezvousStore::wrap(std::make_shared<MemoryStore>(), 1, opts.timeout);
    return ProcessGroup::create_world(store, 0, 1, opts);
  }
  if (const char* iface = env_str("DIT_IFACE")) {
    opts.iface = iface;
  } else if (const char* addr = env_str("DIT_ADDR")) {
    opts.hostname = addr;
  } else if (parse_rendezvous(env.rendezvous).kind == RendezvousSpec::Kind::Redis || env.local_world < env.world) {
    // Ranks on other machines must reach this one: listen on the address of our host name.
    char host[256] = {0};
    if (gethostname(host, sizeof(host) - 1) == 0 && host[0]) opts.hostname = host;
  }
  // Our launcher joined the rendezvous for its workers (DIT_RENDEZVOUS_GENERATION); a rank
  // started otherwise joins here, and again if its generation is superseded while forming.
  for (;;) {
    std::shared_ptr<RendezvousStore> store;
    if (const char* g = env_str("DIT_RENDEZVOUS_GENERATION"))
      store = RendezvousStore::attach(env.rendezvous, env.world, std::atoll(g), opts.timeout);
    else
      store = RendezvousStore::join(env.rendezvous, env.world, {env.rank}, opts.timeout);
    try {
      return ProcessGroup::create_world(store, env.rank, env.world, opts);
    } catch (const GenerationSuperseded&) {
      store->leave(false);
    }
  }
}

void report_rank_failure(const LaunchEnv& env, const std::string& message) noexcept {
  if (env.world <= 1 || env.rendezvous.empty()) return;
  report_rank_failure(env.rendezvous, env.rank, env.world, message);
}

}  // namespace dit
