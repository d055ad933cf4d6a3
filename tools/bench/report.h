// dit-bench's report: the figures of one measured run's JSON from its ranks' results, and the
// summary over rounds (tools/dit-bench.cpp is the driver that compares runs).
#pragma once

#include <nlohmann/json.hpp>
#include <vector>

#include "tools/bench/bench.h"

namespace dit::bench {

using json = nlohmann::ordered_json;

// Relative L2 difference of a to b (-1 when the sizes differ or a is empty).
double rel_diff(const std::vector<float>& a, const std::vector<float>& b);
// Every rank's memory: peak RSS, RSS and PSS now, and the PSS summed (shared pages once).
void add_memory_summary(json& run, const std::vector<json>& ranks);
// The step's figures from rank 0's result (and every local rank's memory and breakdown);
// ranks_here > 0: the ranks this machine ran (several machines).
void add_step_figures(json& run, const Layout& lay, const json& r0, const std::vector<json>& ranks, int ranks_here);
// Per layout, dtype and size, the medians over the rounds of the step and of each round's
// speedups (over that round's serial and serial-all runs: the same machine state), with
// every round's value. Failed runs are left out (the runs array has their error).
json summarize(const json& runs);

}  // namespace dit::bench
