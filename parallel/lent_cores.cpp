#include "parallel/lent_cores.h"

#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <set>
#include <string>

#include "parallel/placement.h"
#include "parallel/process_group.h"
#include "runtime/engine.h"
#include "runtime/error.h"

namespace dit {

namespace {

constexpr int kMaxCpus = 1024;  // CPU ids in the exchanged mask; larger ones are not lent

// Host name, boot id and network namespace: ranks with equal keys share the machine's cores.
unsigned long long host_key() {
  char name[256] = {};
  ::gethostname(name, sizeof(name) - 1);
  std::string id = name;
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string b;
  if (boot >> b) id += "|" + b;
  struct stat st {};
  if (::stat("/proc/self/ns/net", &st) == 0) id += "|" + std::to_string(st.st_ino);
  return std::hash<std::string>{}(id);
}

struct Wire {  // what each rank contributes to the all-gather
  uint64_t host;
  int32_t threads;
  int32_t pad;
  uint8_t mask[kMaxCpus / 8];
};

}  // namespace

LocalCores combine_local_cores(const std::vector<RankCores>& all, unsigned long long mine) {
  std::set<int> cpus;
  LocalCores out;
  out.ranks = 0;
  out.threads = 0;
  for (const RankCores& r : all) {
    if (r.host != mine) continue;
    ++out.ranks;
    out.threads += std::max(1, r.threads);
    cpus.insert(r.cpus.begin(), r.cpus.end());
  }
  out.cpus.assign(cpus.begin(), cpus.end());
  out.threads = std::max(1, std::min<int>(out.threads, int(out.cpus.size())));
  out.ranks = std::max(1, out.ranks);
  return out;
}

std::vector<int> machine_leaders(const std::vector<RankCores>& all) {
  std::set<unsigned long long> seen;
  std::vector<int> out;
  for (size_t r = 0; r < all.size(); ++r)
    if (seen.insert(all[r].host).second) out.push_back(int(r));
  return out;
}

LocalCores gather_local_cores(ProcessGroup& group, int my_threads) {
  Wire me{};
  me.host = host_key();
  me.threads = my_threads;
  for (int c : allowed_cpus())
    if (c >= 0 && c < kMaxCpus) me.mask[c / 8] |= uint8_t(1u << (c % 8));
  std::vector<Wire> all(size_t(group.size()));
  group.all_gather_bytes(&me, all.data(), sizeof(Wire));
  std::vector<RankCores> ranks;
  for (const Wire& w : all) {
    RankCores r;
    r.host = w.host;
    r.threads = w.threads;
    for (int c = 0; c < kMaxCpus; ++c)
      if (w.mask[c / 8] & (1u << (c % 8))) r.cpus.push_back(c);
    ranks.push_back(std::move(r));
  }
  LocalCores out = combine_local_cores(ranks, me.host);
  out.leaders = machine_leaders(ranks);
  return out;
}

LentCores::LentCores(const LocalCores& cores) {
  saved_threads_ = num_threads();
  saved_cpus_ = allowed_cpus();
  if (cores.ranks <= 1 || cores.threads <= saved_threads_) return;  // nothing lent
  pin_to_cpus(cores.cpus);
  set_num_threads(cores.threads);
  active_ = true;
}

LentCores::~LentCores() {
  if (!active_) return;
  set_num_threads(saved_threads_);
  try {
    pin_to_cpus(saved_cpus_);
  } catch (const Error&) {
    // The wider set stays: only placement is lost, never correctness.
  }
}

}  // namespace dit
