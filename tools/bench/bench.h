// dit-bench's parts (tools/dit-bench.cpp is the driver and main): the options, layouts,
// and the worker that one rank of a measured run executes.
#pragma once

#include <string>
#include <vector>

#include "parallel/mesh.h"

namespace dit::bench {

struct Opts {
  std::string model, preset, cache_dir, layouts = "serial", sizes, dtypes = "f32", output;
  int64_t sp_min_tokens = 0;
  int ulysses_chunks = 0;  // 0: dit-gen's default
  std::string transport = "auto";  // --transport auto|tcp (parallel/process_group.h)
  std::string share_rows = "auto";  // --share-rows auto|on|off (parallel/shared_rows.h)
  int layers = 0, text_layers = 0, steps = 5, warmup = 1, threads = 1, gemm_runs = 5, rounds = 1;
  bool no_pin = false;
  std::string weight_cache;  // --weight-cache as dit-gen takes it: "" = the default directory, "off", or DIR
  bool load_only = false;    // memory after loading only: no GEMM reference, no steps (any --dtype)
  // several machines (or simulated ones, tools/netbench.sh): every machine runs the driver
  std::string rendezvous;
  int nnodes = 1, node_rank = 0;
  double guidance = 4.0;
  std::string gemm = "1024,1152,4608";
  // worker
  std::string qkv = "auto";
  bool worker = false;
  std::string layout, result_dir, dtype = "f32";
  int size = 0;
};

struct Layout {
  std::string name;
  MeshDegrees deg;
  bool all_cores = false;
  // serial-each: one rank on every machine at once, each its own serial run (with --nnodes:
  // a machine's step while every machine is busy, the baseline that shares the box's memory,
  // caches and power as the layouts' machines do when simulated on one box)
  bool every_node = false;
};

// "serial", "serial-all", "serial-each", or degrees like cfg2, u2, r2, tp2, u2r2, cfg2u2;
// throws dit::Error.
Layout parse_layout(const std::string& s);
std::vector<std::string> split_list(const std::string& s);  // comma-separated, empty items dropped
// Every option's range, before a model is created or a rank started; throws dit::Error naming the flag.
void check_options(const Opts& o);
double median(std::vector<double> v);                       // 0 for none

// One rank of a measured run (--worker): places itself, loads the model, times the GEMM
// reference and the denoising steps (not with --load-only), and writes rank<R>.json (and
// rank 0's final latents) into --result-dir. Returns the process's exit code.
int run_worker(const Opts& o);

}  // namespace dit::bench
