// The launcher: maybe_launch decides whether this process starts the ranks, and
// launch_local_workers does it in four steps (worker_processes.h): plan the workers'
// argv and environment, spawn them, supervise them (forward their output, reap them,
// stop the rest after a failure or a signal), tear down (rendezvous, private directory).
// connect_world and report_rank_failure are what a rank does.
#include "parallel/launcher.h"

#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "parallel/placement.h"
#include "parallel/worker_processes.h"
#include "runtime/environment.h"
#include "runtime/error.h"

namespace dit {

namespace {

void announce(const LaunchOptions& opts, int first_rank, int nproc, int world, int threads,
              const std::string& rendezvous) {
  const std::string line = opts.program + ": starting ranks " + std::to_string(first_rank) + ".." +
                           std::to_string(first_rank + nproc - 1) + " of " + std::to_string(world) +
                           " on this machine, " + std::to_string(threads) + " thread" + (threads == 1 ? "" : "s") +
                           " each (rendezvous " + rendezvous + ")\n";
  (void)!write(2, line.data(), line.size());
  // More threads than cores: the ranks time-share cores (pinned sets wrap and overlap).
  const std::string warn = oversubscription_warning(opts.program, nproc, threads, opts.threads > 0);
  (void)!write(2, warn.data(), warn.size());
  // The workers start without OpenMP's binding (worker_processes.cpp, plan_workers): say so.
  std::string vars;
  for (const std::string& v : openmp_binding_vars()) vars += (vars.empty() ? "" : ", ") + v;
  if (!vars.empty()) {
    const std::string note = opts.program + ": note: " + vars +
                             " not passed to the ranks: each rank is placed on its own cores instead\n";
    (void)!write(2, note.data(), note.size());
  }
}

}  // namespace

std::optional<int> maybe_launch(int argc, char** argv, const LaunchOptions& opts) {
  LaunchEnv env = detect_launch_env(opts);
  if (env.external) return std::nullopt;
  DIT_CHECK(opts.world_size >= 1, "world size must be >= 1, got " << opts.world_size);
  DIT_CHECK(opts.nnodes >= 1, "--nnodes must be >= 1, got " << opts.nnodes);
  // A malformed --rendezvous is refused even where one process needs none.
  if (!opts.rendezvous.empty()) parse_rendezvous(opts.rendezvous);
  if (opts.nnodes == 1 && opts.world_size == 1) return std::nullopt;
  DIT_CHECK(opts.nproc_per_node > 0 || opts.world_size % opts.nnodes == 0,
            "--nnodes " << opts.nnodes << ": the parallel degrees make " << opts.world_size << " rank"
                        << (opts.world_size == 1 ? "" : "s") << ", which do not split evenly over " << opts.nnodes
                        << " machines (give --nproc-per-node, or degrees whose product is a multiple of --nnodes)");
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
  }
  return launch_local_workers(argc, argv, nproc, opts.node_rank * nproc, opts.world_size, opts.rendezvous, opts);
}

int launch_local_workers(int argc, char** argv, int nproc, int first_rank, int world,
                         const std::string& rendezvous_flag, const LaunchOptions& opts) {
  std::string rendezvous = rendezvous_flag, private_dir;
  if (rendezvous.empty()) {
    private_dir = make_private_rendezvous_dir();
    rendezvous = "file:" + private_dir;
  } else {
    parse_rendezvous(rendezvous);
  }
  const int threads = threads_per_rank(opts.threads, nproc);
  // Join the rendezvous for all local ranks (a fresh generation of it, see rendezvous.h)
  // and wait for the other machines' ranks; the workers use that generation.
  std::vector<int> local_ranks(nproc);
  for (int i = 0; i < nproc; i++) local_ranks[i] = first_rank + i;
  std::shared_ptr<RendezvousStore> store = RendezvousStore::join(rendezvous, world, local_ranks, opts.timeout);

  const launch::WorkerPlan plan =
      launch::plan_workers(argc, argv, nproc, first_rank, world, rendezvous, store->generation(), threads);
  if (opts.announce) announce(opts, first_rank, nproc, world, threads, rendezvous);
  int rc = 1;
  {
    launch::SignalRelay signals;  // Ctrl-C stops the workers from here on
    std::vector<launch::Worker> workers;
    const int spawn_error = launch::spawn_workers(plan, opts.forward_stdout, workers);
    rc = launch::Supervisor(workers, *store, opts, signals).run(spawn_error);
  }
  store->leave(false);
  store.reset();
  if (!private_dir.empty()) remove_rendezvous_dir(private_dir);
  return rc;
}

std::shared_ptr<ProcessGroup> connect_world(const LaunchEnv& env, CommOptions opts) {
  if (env.world == 1) {
    auto store = RendezvousStore::wrap(std::make_shared<MemoryStore>(), 1, opts.timeout);
    return ProcessGroup::create_world(store, 0, 1, opts);
  }
  if (const char* iface = env_nonempty("DIT_IFACE")) {
    opts.iface = iface;
  } else if (const char* addr = env_nonempty("DIT_ADDR")) {
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
    if (const char* g = env_nonempty("DIT_RENDEZVOUS_GENERATION"))
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

void fail_rank(ProcessGroup* world, const LaunchEnv& env, const std::string& message) noexcept {
  if (world)
    world->abort(message);
  else
    report_rank_failure(env, message);
}

}  // namespace dit
