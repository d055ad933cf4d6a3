// Device mesh: the parallel axes of a run as data — a list of named degrees, outermost first:
//
//   dp × cfg × ring × ulysses × tp          (world = the product)
//
// A rank's coordinates are its digits in that mixed radix, the last axis fastest, which is
// xDiT's rank layout with tensor parallelism innermost (Megatron's: TP ranks are contiguous,
// on the fastest links): Ulysses takes contiguous groups of TP ranks, Ring is strided by the
// Ulysses degree inside a sequence-parallel (SP = ring × ulysses) group, CFG pairs rank i with
// i + sp·tp, and data parallel is outermost. 8 ranks, cfg=2, ring=2, ulysses=2: SP groups [0-3]
// [4-7], CFG pairs [0,4] [1,5] [2,6] [3,7], Ulysses [0,1] [2,3] ..., Ring [0,2] [1,3] ...
//
// The process groups are data too (mesh_groups()): each is the set of axes its members differ
// in. A new axis is one more Axis entry, its name, and the groups it joins.
//
//   MeshDegrees d;  d[Axis::Cfg] = 2;  d[Axis::Ulysses] = 2;  d[Axis::Ring] = 2;
//   MeshLayout l = mesh_layout(d, 8, rank);              // pure: coordinates and group members
//   DeviceMesh mesh(world, d);                           // builds this rank's process groups
//   mesh.group(Group::Ulysses).all_to_all(...);  mesh.cfg().all_gather(...);
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "parallel/process_group.h"

namespace dit {

// The axes, outermost first (the order is the rank layout).
enum class Axis { Dp, Cfg, Ring, Ulysses, Tp };
constexpr int kNumAxes = 5;
const char* axis_name(Axis a);  // "dp", "cfg", "ring", "ulysses", "tp"

// The process groups a rank belongs to, in creation order (every rank creates them in this order).
enum class Group { Ulysses, Ring, Sp, Tp, Mp, Cfg, Dp, Replica };
constexpr int kNumGroups = 8;
struct GroupDef {
  Group group;
  const char* name;
  std::vector<Axis> axes;  // the axes along which the members differ
  bool own_window = false;  // ProcessGroup::split's: a window not shared with a group of the same members
};
// ulysses {ulysses}, ring {ring}, sp {ring, ulysses}, tp {tp}, mp {ring, ulysses, tp} (the model-
// parallel ranks of one guidance half), cfg {cfg}, dp {dp}, replica {cfg, ring, ulysses, tp}.
const std::vector<GroupDef>& mesh_groups();

// A degree per axis (all 1 by default).
struct MeshDegrees {
  std::array<int, kNumAxes> degree{1, 1, 1, 1, 1};

  MeshDegrees() = default;
  MeshDegrees(int dp, int cfg, int ring, int ulysses, int tp = 1) : degree{dp, cfg, ring, ulysses, tp} {}
  int& operator[](Axis a) { return degree[size_t(a)]; }
  int operator[](Axis a) const { return degree[size_t(a)]; }
  int sp() const { return (*this)[Axis::Ring] * (*this)[Axis::Ulysses]; }
  // The product of all degrees, or of the given axes.
  int world() const;
  int product(const std::vector<Axis>& axes) const;
};

struct MeshLayout {
  MeshDegrees degrees;
  int world = 1, rank = 0;
  std::array<int, kNumAxes> coord{};                     // this rank's digit per axis
  std::array<std::vector<int>, kNumGroups> members;      // global ranks of each group, in group-rank order
  std::array<int, kNumGroups> group_rank{};              // this rank's position in each group

  int operator[](Axis a) const { return coord[size_t(a)]; }
  const std::vector<int>& group(Group g) const { return members[size_t(g)]; }
  int rank_in(Group g) const { return group_rank[size_t(g)]; }
};

// Throws dit::Error when a degree is < 1, cfg > 2, or the product is not the world size:
// "mesh: dp(1) × cfg(2) × ring(1) × ulysses(4) × tp(1) = 8, but the world size is 6".
void validate_mesh(const MeshDegrees& d, int world);
// The global rank at the given coordinates (one per axis).
int mesh_rank(const MeshDegrees& d, const std::array<int, kNumAxes>& coord);
// Coordinates and groups of `rank`. Pure: no communication.
MeshLayout mesh_layout(const MeshDegrees& d, int world, int rank);
// "dp2 x cfg2 x ring2 x ulysses2 x tp1"
std::string mesh_str(const MeshDegrees& d);

// The process groups of the calling rank. Every rank constructs its mesh with the same
// degrees; groups are created in mesh_groups() order and destroyed in reverse order with a
// barrier each on the clean path.
class DeviceMesh {
 public:
  DeviceMesh(std::shared_ptr<ProcessGroup> world, const MeshDegrees& degrees);
  ~DeviceMesh();

  const MeshLayout& layout() const { return layout_; }
  const MeshDegrees& degrees() const { return layout_.degrees; }
  int coord(Axis a) const { return layout_[a]; }
  int rank_in(Group g) const { return layout_.rank_in(g); }
  ProcessGroup& world() { return *world_; }
  ProcessGroup& group(Group g) { return *groups_[size_t(g)]; }
  ProcessGroup& ulysses() { return group(Group::Ulysses); }
  ProcessGroup& ring() { return group(Group::Ring); }
  ProcessGroup& sp() { return group(Group::Sp); }
  ProcessGroup& tp() { return group(Group::Tp); }
  ProcessGroup& mp() { return group(Group::Mp); }
  ProcessGroup& cfg() { return group(Group::Cfg); }
  ProcessGroup& dp() { return group(Group::Dp); }
  ProcessGroup& replica() { return group(Group::Replica); }
  std::shared_ptr<ProcessGroup> world_ptr() const { return world_; }
  // A non-owning pointer to a group (valid while the mesh lives).
  std::shared_ptr<ProcessGroup> group_ref(Group g);
  // Whether any group of this rank has failed (a peer died, a timeout).
  bool any_failed() const;

 private:
  MeshLayout layout_;
  std::shared_ptr<ProcessGroup> world_;
  std::array<std::shared_ptr<ProcessGroup>, kNumGroups> groups_;
};

}  // namespace dit
