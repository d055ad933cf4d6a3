// Lent cores: after the denoising loop only the replica's output rank has work (the VAE
// decode, then the PNG); the other ranks of the replica wait. The cores of those on the same
// machine are lent to the output rank for that work, so a `--cfg-parallel` run decodes with
// both ranks' cores instead of one rank's (a 256×256 SD-VAE decode: ~10 s on one core).
//
//   LocalCores here = gather_local_cores(replica, rank_threads);   // collective, once
//   if (output rank) { LentCores lend(here); decode(); }            // widened, then restored
//   replica.barrier();                                              // the others wait here
//
// "Same machine" means the same host name, boot and network namespace, so the simulated
// machines of tools/netbench.sh (one namespace each) do not lend each other cores.
#pragma once

#include <vector>

namespace dit {

class ProcessGroup;

struct LocalCores {
  std::vector<int> cpus;  // the union of the CPU sets of the group's ranks on this machine
  int threads = 1;        // their threads together, at most cpus.size()
  int ranks = 1;          // how many of the group's ranks are on this machine
  // Every machine's first rank (group ranks, ascending): the ranks that borrow their
  // machine's cores when work is split over machines (--vae-parallel machines).
  std::vector<int> leaders{0};
};

// Collective over `group`: every rank says where it runs (host, CPU set, threads).
LocalCores gather_local_cores(ProcessGroup& group, int my_threads);

// While alive, the calling thread may run on `cores.cpus` with `cores.threads` OpenMP
// threads; the destructor restores the affinity and thread count it found.
class LentCores {
 public:
  explicit LentCores(const LocalCores& cores);
  ~LentCores();
  LentCores(const LentCores&) = delete;
  LentCores& operator=(const LentCores&) = delete;

 private:
  std::vector<int> saved_cpus_;
  int saved_threads_ = 1;
  bool active_ = false;
};

// Pure: the cores and threads the ranks with host key `mine` lend, from everyone's
// (host key, CPU set, threads). Exposed for tests.
struct RankCores {
  unsigned long long host = 0;
  std::vector<int> cpus;
  int threads = 1;
};
LocalCores combine_local_cores(const std::vector<RankCores>& all, unsigned long long mine);
// Pure: the first group rank of each machine (host key), ascending.
std::vector<int> machine_leaders(const std::vector<RankCores>& all);

}  // namespace dit
