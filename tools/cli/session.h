// One rank's view of a dit-gen run: its launch environment, its process groups (for a
// parallel run) and the loaded pipeline. Shared by single-image and batch mode.
#pragma once

#include <memory>

#include "models/dit_gen.h"
#include "parallel/launcher.h"
#include "parallel/mesh.h"
#include "runtime/error.h"
#include "tools/cli/options.h"

namespace dit::cli {

struct Session {
  LaunchEnv env;
  std::shared_ptr<ProcessGroup> world;  // null for one process
  std::shared_ptr<DeviceMesh> mesh;     // null for one process
  std::unique_ptr<Pipeline> pipe;
  double connect_seconds = 0;  // rendezvous and the mesh (0 for one process)
  double load_seconds = 0;     // Pipeline::load: configs, weights mapped or converted, VAE
};

// An error every rank of a parallel run meets alike (a checkpoint or a request the pipeline
// refuses): the first rank of each machine reports it, the others exit quietly
// (parallel/launcher.h: kInputErrorExit), so bad input is one line however many ranks run.
struct SameOnEveryRank : Error {
  using Error::Error;
};
template <class F>
auto same_on_every_rank(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error& e) {
    throw SameOnEveryRank(e.what());
  }
}

// Sets threads, connects the ranks (when world > 1), builds the mesh and loads the pipeline.
// `world` is filled as soon as it exists so the caller can abort it on failure.
void open_session(const GenOptions& o, const MeshDegrees& degrees, Session& s);

// Prints the mesh: one line per rank, in rank order (rank 0's terminal gets them all).
void print_layout(Session& s, const MeshDegrees& degrees, int64_t tokens);

// -v: this rank's shared memory of 2 MB and more, on 2 MB pages or not (parallel/shm_mapping.h).
void print_shm_pages();

// This process's resident memory now (VmRSS), in MB.
double resident_mb();

// Launch options from the flags.
LaunchOptions launch_options(const GenOptions& o, int world_size);

}  // namespace dit::cli
