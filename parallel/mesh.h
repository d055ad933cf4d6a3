// Device mesh: world = dp x cfg x ring x ulysses, in xDiT's rank layout
//
//   rank = ((dp * cfg_degree + cfg) * ring_degree + ring) * ulysses_degree + ulysses
//
// so Ulysses takes contiguous ranks, Ring is strided by the Ulysses degree inside a
// sequence-parallel (SP = ring x ulysses) group, CFG pairs rank i with i + sp_degree, and
// data parallel is outermost. 8 ranks, cfg=2, ring=2, ulysses=2: SP groups [0-3] [4-7],
// CFG pairs [0,4] [1,5] [2,6] [3,7], Ulysses [0,1] [2,3] ..., Ring [0,2] [1,3] ...
//
//   MeshLayout l = mesh_layout({.dp = 1, .cfg = 2, .ring = 2, .ulysses = 2}, 8, rank);  // pure
//   DeviceMesh mesh(world, degrees);             // builds this rank's process groups
//   mesh.ulysses().all_to_all(...); mesh.cfg().all_gather(...);
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "parallel/process_group.h"

namespace dit {

struct MeshDegrees {
  int dp = 1, cfg = 1, ring = 1, ulysses = 1;
  int sp() const { return ring * ulysses; }
  int world() const { return dp * cfg * ring * ulysses; }
};

struct MeshCoord {
  int dp = 0, cfg = 0, ring = 0, ulysses = 0;
  int sp_rank = 0;       // ring * ulysses_degree + ulysses: rank inside the SP group
  int replica_rank = 0;  // cfg * sp_degree + sp_rank: rank inside the model replica (cfg x sp)
};

struct MeshLayout {
  MeshDegrees degrees;
  int world = 1, rank = 0;
  MeshCoord coord;
  // Member global ranks of each group this rank belongs to, in group-rank order.
  std::vector<int> ulysses, ring, sp, cfg, dp, replica;
};

// Throws dit::Error when a degree is < 1 or the product is not the world size:
// "mesh: dp(1) x cfg(2) x ring(1) x ulysses(4) = 8, but the world size is 6".
void validate_mesh(const MeshDegrees& d, int world);
// The global rank at the given coordinates.
int mesh_rank(const MeshDegrees& d, int dp, int cfg, int ring, int ulysses);
// Coordinates and groups of `rank`. Pure: no communication.
MeshLayout mesh_layout(const MeshDegrees& d, int world, int rank);
// "dp2 x cfg2 x ring2 x ulysses2"
std::string mesh_str(const MeshDegrees& d);

// The process groups of the calling rank. Every rank constructs its mesh with the same
// degrees; groups are created in a fixed order (ulysses, ring, sp, cfg, dp, replica) and
// destroyed in reverse order with a barrier each on the clean path.
class DeviceMesh {
 public:
  DeviceMesh(std::shared_ptr<ProcessGroup> world, const MeshDegrees& degrees);
  ~DeviceMesh();

  const MeshLayout& layout() const { return layout_; }
  const MeshCoord& coord() const { return layout_.coord; }
  const MeshDegrees& degrees() const { return layout_.degrees; }
  ProcessGroup& world() { return *world_; }
  ProcessGroup& ulysses() { return *ulysses_; }
  ProcessGroup& ring() { return *ring_; }
  ProcessGroup& sp() { return *sp_; }
  ProcessGroup& cfg() { return *cfg_; }
  ProcessGroup& dp() { return *dp_; }
  ProcessGroup& replica() { return *replica_; }
  std::shared_ptr<ProcessGroup> world_ptr() const { return world_; }

 private:
  MeshLayout layout_;
  std::shared_ptr<ProcessGroup> world_, ulysses_, ring_, sp_, cfg_, dp_, replica_;
};

}  // namespace dit
