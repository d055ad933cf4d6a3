#include "parallel/mesh.h"

#include <sstream>

#include "runtime/error.h"

namespace dit {

std::string mesh_str(const MeshDegrees& d) {
  std::ostringstream os;
  os << "dp" << d.dp << " x cfg" << d.cfg << " x ring" << d.ring << " x ulysses" << d.ulysses;
  return os.str();
}

void validate_mesh(const MeshDegrees& d, int world) {
  DIT_CHECK(d.dp >= 1 && d.cfg >= 1 && d.ring >= 1 && d.ulysses >= 1,
            "mesh: every degree must be >= 1, got dp(" << d.dp << ") cfg(" << d.cfg << ") ring(" << d.ring
                                                       << ") ulysses(" << d.ulysses << ")");
  DIT_CHECK(d.cfg <= 2, "mesh: the CFG degree is 1 or 2 (one rank per branch), got " << d.cfg);
  long long product = 1LL * d.dp * d.cfg * d.ring * d.ulysses;
  DIT_CHECK(product == world, "mesh: dp(" << d.dp << ") × cfg(" << d.cfg << ") × ring(" << d.ring << ") × ulysses("
                                          << d.ulysses << ") = " << product << ", but the world size is " << world);
}

int mesh_rank(const MeshDegrees& d, int dp, int cfg, int ring, int ulysses) {
  return ((dp * d.cfg + cfg) * d.ring + ring) * d.ulysses + ulysses;
}

MeshLayout mesh_layout(const MeshDegrees& d, int world, int rank) {
  validate_mesh(d, world);
  DIT_CHECK(rank >= 0 && rank < world, "mesh: rank " << rank << " is not in a world of size " << world);
  MeshLayout l;
  l.degrees = d;
  l.world = world;
  l.rank = rank;
  MeshCoord& c = l.coord;
  int r = rank;
  c.ulysses = r % d.ulysses;
  r /= d.ulysses;
  c.ring = r % d.ring;
  r /= d.ring;
  c.cfg = r % d.cfg;
  c.dp = r / d.cfg;
  c.sp_rank = c.ring * d.ulysses + c.ulysses;
  c.replica_rank = c.cfg * d.sp() + c.sp_rank;

  for (int u = 0; u < d.ulysses; u++) l.ulysses.push_back(mesh_rank(d, c.dp, c.cfg, c.ring, u));
  for (int g = 0; g < d.ring; g++) l.ring.push_back(mesh_rank(d, c.dp, c.cfg, g, c.ulysses));
  for (int g = 0; g < d.ring; g++)
    for (int u = 0; u < d.ulysses; u++) l.sp.push_back(mesh_rank(d, c.dp, c.cfg, g, u));
  for (int f = 0; f < d.cfg; f++) l.cfg.push_back(mesh_rank(d, c.dp, f, c.ring, c.ulysses));
  for (int p = 0; p < d.dp; p++) l.dp.push_back(mesh_rank(d, p, c.cfg, c.ring, c.ulysses));
  for (int f = 0; f < d.cfg; f++)
    for (int g = 0; g < d.ring; g++)
      for (int u = 0; u < d.ulysses; u++) l.replica.push_back(mesh_rank(d, c.dp, f, g, u));
  return l;
}

DeviceMesh::DeviceMesh(std::shared_ptr<ProcessGroup> world, const MeshDegrees& degrees) : world_(std::move(world)) {
  DIT_CHECK(world_ && world_->name() == "world", "DeviceMesh: needs the world group");
  layout_ = mesh_layout(degrees, world_->size(), world_->rank());
  // Group names carry the member list (split adds it), so every instance is unique.
  ulysses_ = world_->split("ulysses", layout_.ulysses);
  ring_ = world_->split("ring", layout_.ring);
  sp_ = world_->split("sp", layout_.sp);
  cfg_ = world_->split("cfg", layout_.cfg);
  dp_ = world_->split("dp", layout_.dp);
  replica_ = world_->split("replica", layout_.replica);
}

DeviceMesh::~DeviceMesh() {
  // Reverse order of creation, the same on every rank, so teardown barriers cannot cross.
  replica_.reset();
  dp_.reset();
  cfg_.reset();
  sp_.reset();
  ring_.reset();
  ulysses_.reset();
}

}  // namespace dit
