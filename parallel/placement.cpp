#include "parallel/placement.h"

#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "parallel/launcher.h"
#include "runtime/error.h"

namespace dit {

Placement rank_cores(const std::vector<int>& allowed, int local_rank, int local_world, int threads) {
  DIT_CHECK(!allowed.empty(), "placement: no allowed CPUs");
  DIT_CHECK(local_world >= 1 && local_rank >= 0 && local_rank < local_world,
            "placement: local rank " << local_rank << " is not in 0.." << local_world - 1);
  DIT_CHECK(threads >= 1, "placement: threads per rank must be >= 1, got " << threads);
  const size_t n = allowed.size(), t = size_t(threads);
  Placement p;
  p.pinned = true;
  p.oversubscribed = size_t(local_world) * t > n;
  const size_t first = size_t(local_rank) * t;
  for (size_t i = 0; i < std::min(t, n); ++i) p.cpus.push_back(allowed[(first + i) % n]);
  std::sort(p.cpus.begin(), p.cpus.end());
  return p;
}

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
  if (cpus.empty()) cpus.push_back(0);
  return cpus;
}

std::vector<int> startup_cpus() {
  std::vector<int> cpus = allowed_cpus();
  // OpenMP's places only where its binding is asked for: the query starts the OpenMP runtime,
  // and LLVM's aborts in a pid namespace without its own /proc (it reads /proc/<pid>/maps).
  const int places = openmp_binding_vars().empty() ? 0 : omp_get_num_places();
  for (int p = 0; p < places; ++p) {
    std::vector<int> ids(size_t(std::max(0, omp_get_place_num_procs(p))));
    if (!ids.empty()) omp_get_place_proc_ids(p, ids.data());
    for (int c : ids)
      if (c >= 0 && c < CPU_SETSIZE) cpus.push_back(c);
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

std::vector<std::string> openmp_binding_vars() {
  std::vector<std::string> set;
  for (const char* name : kOpenMPBindingVars)
    if (const char* v = std::getenv(name)) set.push_back(std::string(name) + "=" + v);
  return set;
}

namespace {

// "0-3,8,10-11" -> {0, 1, 2, 3, 8, 10, 11}; empty on anything else.
std::vector<int> parse_cpu_list(const std::string& text) {
  std::vector<int> out;
  std::stringstream ss(text);
  std::string part;
  while (std::getline(ss, part, ',')) {
    while (!part.empty() && (part.back() == '\n' || part.back() == ' ')) part.pop_back();
    if (part.empty()) continue;
    int a = 0, b = 0;
    char dash = 0;
    std::istringstream in(part);
    if (!(in >> a) || a < 0 || a >= CPU_SETSIZE) return {};
    b = a;
    if (in >> dash) {
      if (dash != '-' || !(in >> b) || b < a || b >= CPU_SETSIZE) return {};
    }
    for (int c = a; c <= b; ++c) out.push_back(c);
  }
  return out;
}

std::vector<int> read_siblings(const std::string& sysfs, int cpu) {
  for (const char* name : {"core_cpus_list", "thread_siblings_list"}) {
    std::ifstream f(sysfs + "/cpu" + std::to_string(cpu) + "/topology/" + name);
    std::string line;
    if (f && std::getline(f, line)) {
      std::vector<int> sib = parse_cpu_list(line);
      // (a list without the CPU is not its core's)
      if (std::find(sib.begin(), sib.end(), cpu) != sib.end()) return sib;
    }
  }
  return {cpu};
}

}  // namespace

std::vector<std::vector<int>> physical_cores(const std::vector<int>& allowed, const std::string& sysfs) {
  std::vector<int> sorted = allowed;
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  std::map<int, size_t> core_of;  // a core's first sibling -> its index in `cores`
  std::vector<std::vector<int>> cores;
  for (int c : sorted) {
    const std::vector<int> sib = read_siblings(sysfs, c);
    const int key = *std::min_element(sib.begin(), sib.end());
    auto [it, fresh] = core_of.emplace(key, cores.size());
    if (fresh) cores.emplace_back();
    cores[it->second].push_back(c);
  }
  return cores;
}

std::vector<int> placement_order(const std::vector<std::vector<int>>& cores, size_t need) {
  std::vector<int> order;
  if (need <= cores.size()) {  // every thread on a core of its own: first CPUs, then the rest
    for (size_t k = 0;; ++k) {
      bool any = false;
      for (const std::vector<int>& core : cores)
        if (k < core.size()) {
          order.push_back(core[k]);
          any = true;
        }
      if (!any) break;
    }
  } else {
    for (const std::vector<int>& core : cores) order.insert(order.end(), core.begin(), core.end());
  }
  return order;
}

void pin_to_cpus(const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) {
    DIT_CHECK(c >= 0 && c < CPU_SETSIZE, "placement: CPU " << c << " is out of range");
    CPU_SET(c, &set);
  }
  DIT_CHECK(sched_setaffinity(0, sizeof(set), &set) == 0,
            "sched_setaffinity to cores " << cpu_list_string(cpus) << " failed: " << std::strerror(errno));
}

Placement place_rank(const LaunchEnv& env, int threads, bool pin) {
  const std::vector<int> allowed = allowed_cpus();
  Placement keep;
  keep.cpus = allowed;
  if (!pin) {
    keep.note = "--no-pin";
    return keep;
  }
  if (!env.external || env.local_world <= 1) {
    keep.note = "the only rank on this machine";
    return keep;
  }
  if (!env.local_known) {
    keep.note = "local rank unknown (set DIT_LOCAL_RANK and DIT_LOCAL_WORLD_SIZE)";
    return keep;
  }
  if (int(allowed.size()) <= threads) {
    keep.note = "already bound to " + std::to_string(allowed.size()) + " core(s)";
    return keep;
  }
  const size_t need = size_t(env.local_world) * size_t(threads);
  Placement p = rank_cores(placement_order(physical_cores(allowed), need), env.local_rank, env.local_world, threads);
  pin_to_cpus(p.cpus);
  return p;
}

std::string cpu_list_string(const std::vector<int>& cpus) {
  std::string s;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!s.empty()) s += ",";
    s += std::to_string(cpus[i]);
    if (j > i) s += "-" + std::to_string(cpus[j]);
    i = j + 1;
  }
  return s;
}

std::string openmp_binding_warning(const std::string& program, const LaunchEnv& env, int threads) {
  const std::vector<std::string> vars = openmp_binding_vars();
  const size_t cores = startup_cpus().size();
  if (!env.external || env.supervised || env.local_world <= 1 || vars.empty() || cores <= size_t(threads)) return "";
  std::string names;
  for (const std::string& v : vars) names += (names.empty() ? "" : ", ") + v;
  return program + ": warning: " + names + ": OpenMP binds this rank's threads from the first of the " +
         std::to_string(cores) + " cores it was started on, as it does every local rank started on them; start "
         "each rank on its own cores (mpirun --bind-to core, srun --cpu-bind=cores) or unset it\n";
}

std::string oversubscription_warning(const std::string& program, int local_ranks, int threads,
                                     bool threads_from_flag) {
  const size_t cores = startup_cpus().size(), need = size_t(local_ranks) * size_t(threads);
  if (cores == 0 || need <= cores) return "";
  const auto count = [](size_t n, const char* what) {
    return std::to_string(n) + " " + what + (n == 1 ? "" : "s");
  };
  return program + ": warning: " + count(size_t(local_ranks), "rank") + " x " + count(size_t(threads), "thread") +
         " on this machine's " + count(cores, "allowed core") + ": ranks share cores and run slower (" +
         (threads_from_flag && size_t(local_ranks) <= cores ? "leave out -t: ranks x threads <= cores"
                                                            : "use fewer ranks per machine, or more machines") +
         ")\n";
}

}  // namespace dit
