#include "parallel/mesh.h"

#include <sstream>

#include "parallel/shared_projection.h"
#include "runtime/error.h"

namespace dit {

namespace {

constexpr Axis kAxes[kNumAxes] = {Axis::Dp, Axis::Cfg, Axis::Ring, Axis::Ulysses, Axis::Tp};

}  // namespace

const char* axis_name(Axis a) {
  static const char* names[kNumAxes] = {"dp", "cfg", "ring", "ulysses", "tp"};
  return names[size_t(a)];
}

const std::vector<GroupDef>& mesh_groups() {
  static const std::vector<GroupDef> g = {
      {Group::Ulysses, "ulysses", {Axis::Ulysses}},
      {Group::Ring, "ring", {Axis::Ring}},
      {Group::Sp, "sp", {Axis::Ring, Axis::Ulysses}},
      {Group::Tp, "tp", {Axis::Tp}},
      {Group::Mp, "mp", {Axis::Ring, Axis::Ulysses, Axis::Tp}},
      {Group::Cfg, "cfg", {Axis::Cfg}},
      {Group::Dp, "dp", {Axis::Dp}},
      // Its window holds the shared rows' uses (parallel/shared_rows.h), where the Q, K, V
      // projection is shared inside the attention's window use (qkv_destination): a window of
      // its own there (DeviceMesh's constructor).
      {Group::Replica, "replica", {Axis::Cfg, Axis::Ring, Axis::Ulysses, Axis::Tp}, /*own_window=*/true},
  };
  return g;
}

int MeshDegrees::world() const {
  return product({kAxes, kAxes + kNumAxes});
}

int MeshDegrees::product(const std::vector<Axis>& axes) const {
  long long p = 1;
  for (Axis a : axes) p *= (*this)[a];
  return int(p);
}

std::string mesh_str(const MeshDegrees& d) {
  std::ostringstream os;
  for (int i = 0; i < kNumAxes; ++i) os << (i ? " x " : "") << axis_name(kAxes[i]) << d[kAxes[i]];
  return os.str();
}

void validate_mesh(const MeshDegrees& d, int world) {
  std::ostringstream terms;
  long long product = 1;
  bool positive = true;
  for (int i = 0; i < kNumAxes; ++i) {
    terms << (i ? " × " : "") << axis_name(kAxes[i]) << "(" << d[kAxes[i]] << ")";
    positive = positive && d[kAxes[i]] >= 1;
    product *= d[kAxes[i]];
  }
  DIT_CHECK(positive, "mesh: every degree must be >= 1, got " << terms.str());
  DIT_CHECK(d[Axis::Cfg] <= 2, "mesh: the CFG degree is 1 or 2 (one rank per branch), got " << d[Axis::Cfg]);
  DIT_CHECK(product == world, "mesh: " << terms.str() << " = " << product << ", but the world size is " << world);
}

int mesh_rank(const MeshDegrees& d, const std::array<int, kNumAxes>& coord) {
  int r = 0;
  for (int i = 0; i < kNumAxes; ++i) r = r * d[kAxes[i]] + coord[size_t(i)];
  return r;
}

MeshLayout mesh_layout(const MeshDegrees& d, int world, int rank) {
  validate_mesh(d, world);
  DIT_CHECK(rank >= 0 && rank < world, "mesh: rank " << rank << " is not in a world of size " << world);
  MeshLayout l;
  l.degrees = d;
  l.world = world;
  l.rank = rank;
  for (int i = kNumAxes - 1, r = rank; i >= 0; --i) {  // last axis fastest
    l.coord[size_t(i)] = r % d[kAxes[i]];
    r /= d[kAxes[i]];
  }
  // A group's members: every coordinate combination of its axes (in axis order, the last
  // fastest), the other coordinates fixed at this rank's.
  for (const GroupDef& g : mesh_groups()) {
    std::vector<int>& members = l.members[size_t(g.group)];
    const int n = d.product(g.axes);
    for (int k = 0; k < n; ++k) {
      std::array<int, kNumAxes> c = l.coord;
      for (int j = int(g.axes.size()) - 1, rest = k; j >= 0; --j) {
        const Axis a = g.axes[size_t(j)];
        c[size_t(a)] = rest % d[a];
        rest /= d[a];
      }
      const int member = mesh_rank(d, c);
      if (member == rank) l.group_rank[size_t(g.group)] = int(members.size());
      members.push_back(member);
    }
  }
  return l;
}

DeviceMesh::DeviceMesh(std::shared_ptr<ProcessGroup> world, const MeshDegrees& degrees) : world_(std::move(world)) {
  DIT_CHECK(world_ && world_->name() == "world", "DeviceMesh: needs the world group");
  layout_ = mesh_layout(degrees, world_->size(), world_->rank());
  // Group names carry the member list (split adds it), so every instance is unique.
  // A window of its own only where it is used inside another's: elsewhere one segment's windows
  // serve both (another segment's measured 1-3% of a bf16 --ulysses 2 step on the 2-core VM:
  // docs/benchmarks.md).
  for (const GroupDef& g : mesh_groups())
    groups_[size_t(g.group)] = world_->split(g.name, layout_.group(g.group), g.own_window && shares_projection(degrees));
}

DeviceMesh::~DeviceMesh() {
  // Reverse order of creation, the same on every rank, so teardown barriers cannot cross.
  for (auto it = mesh_groups().rbegin(); it != mesh_groups().rend(); ++it) groups_[size_t(it->group)].reset();
}

std::shared_ptr<ProcessGroup> DeviceMesh::group_ref(Group g) {
  return std::shared_ptr<ProcessGroup>(std::shared_ptr<ProcessGroup>(), groups_[size_t(g)].get());
}

bool DeviceMesh::any_failed() const {
  if (world_->failed()) return true;
  for (const auto& g : groups_)
    if (g && g->failed()) return true;
  return false;
}

}  // namespace dit
