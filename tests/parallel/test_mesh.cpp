// Mesh layout against hand-written tables (pure, no processes).
#include <catch2/catch.hpp>

#include "parallel/mesh.h"
#include "runtime/error.h"

using namespace dit;
using V = std::vector<int>;

TEST_CASE("mesh: xDiT layout, cfg2 x ulysses2 x ring2 on 8 ranks (PEERS.md)", "[parallel]") {
  MeshDegrees d;
  d[Axis::Cfg] = 2;
  d[Axis::Ring] = 2;
  d[Axis::Ulysses] = 2;
  // rank: cfg ring ulysses | ulysses group | ring group | sp group | cfg pair
  struct Row {
    int c, g, u;
    V uly, ring, sp, cfg;
  } table[8] = {
      {0, 0, 0, {0, 1}, {0, 2}, {0, 1, 2, 3}, {0, 4}}, {0, 0, 1, {0, 1}, {1, 3}, {0, 1, 2, 3}, {1, 5}},
      {0, 1, 0, {2, 3}, {0, 2}, {0, 1, 2, 3}, {2, 6}}, {0, 1, 1, {2, 3}, {1, 3}, {0, 1, 2, 3}, {3, 7}},
      {1, 0, 0, {4, 5}, {4, 6}, {4, 5, 6, 7}, {0, 4}}, {1, 0, 1, {4, 5}, {5, 7}, {4, 5, 6, 7}, {1, 5}},
      {1, 1, 0, {6, 7}, {4, 6}, {4, 5, 6, 7}, {2, 6}}, {1, 1, 1, {6, 7}, {5, 7}, {4, 5, 6, 7}, {3, 7}},
  };
  for (int r = 0; r < 8; r++) {
    INFO("rank " << r);
    MeshLayout l = mesh_layout(d, 8, r);
    CHECK(l[Axis::Dp] == 0);
    CHECK(l[Axis::Cfg] == table[r].c);
    CHECK(l[Axis::Ring] == table[r].g);
    CHECK(l[Axis::Ulysses] == table[r].u);
    CHECK(l.rank_in(Group::Sp) == r % 4);
    CHECK(l.rank_in(Group::Replica) == r);
    CHECK(l.group(Group::Ulysses) == table[r].uly);
    CHECK(l.group(Group::Ring) == table[r].ring);
    CHECK(l.group(Group::Sp) == table[r].sp);
    CHECK(l.group(Group::Cfg) == table[r].cfg);
    CHECK(l.group(Group::Dp) == V{r});
    CHECK(l.group(Group::Replica) == V{0, 1, 2, 3, 4, 5, 6, 7});
  }
}

TEST_CASE("mesh: dp2 x cfg2 x ring2 x ulysses2 on 16 ranks", "[parallel]") {
  MeshDegrees d{2, 2, 2, 2};
  // rank: dp cfg ring uly | ulysses | ring | sp | cfg | dp | replica
  struct Row {
    int p, c, g, u;
    V uly, ring, sp, cfg, dp, rep;
  } table[] = {
      {0, 0, 0, 0, {0, 1}, {0, 2}, {0, 1, 2, 3}, {0, 4}, {0, 8}, {0, 1, 2, 3, 4, 5, 6, 7}},
      {0, 0, 1, 1, {2, 3}, {1, 3}, {0, 1, 2, 3}, {3, 7}, {3, 11}, {0, 1, 2, 3, 4, 5, 6, 7}},
      {0, 1, 0, 1, {4, 5}, {5, 7}, {4, 5, 6, 7}, {1, 5}, {5, 13}, {0, 1, 2, 3, 4, 5, 6, 7}},
      {1, 0, 0, 0, {8, 9}, {8, 10}, {8, 9, 10, 11}, {8, 12}, {0, 8}, {8, 9, 10, 11, 12, 13, 14, 15}},
      {1, 0, 1, 0, {10, 11}, {8, 10}, {8, 9, 10, 11}, {10, 14}, {2, 10}, {8, 9, 10, 11, 12, 13, 14, 15}},
      {1, 1, 1, 1, {14, 15}, {13, 15}, {12, 13, 14, 15}, {11, 15}, {7, 15}, {8, 9, 10, 11, 12, 13, 14, 15}},
  };
  int ranks[] = {0, 3, 5, 8, 10, 15};
  for (int i = 0; i < 6; i++) {
    int r = ranks[i];
    INFO("rank " << r);
    MeshLayout l = mesh_layout(d, 16, r);
    const Row& t = table[i];
    CHECK(l[Axis::Dp] == t.p);
    CHECK(l[Axis::Cfg] == t.c);
    CHECK(l[Axis::Ring] == t.g);
    CHECK(l[Axis::Ulysses] == t.u);
    CHECK(l.group(Group::Ulysses) == t.uly);
    CHECK(l.group(Group::Ring) == t.ring);
    CHECK(l.group(Group::Sp) == t.sp);
    CHECK(l.group(Group::Cfg) == t.cfg);
    CHECK(l.group(Group::Dp) == t.dp);
    CHECK(l.group(Group::Replica) == t.rep);
    CHECK(mesh_rank(d, {t.p, t.c, t.g, t.u}) == r);
  }
}

TEST_CASE("mesh: ulysses4 and ring4 and dp4", "[parallel]") {
  MeshDegrees u;
  u[Axis::Ulysses] = 4;
  MeshDegrees g;
  g[Axis::Ring] = 4;
  MeshDegrees p;
  p[Axis::Dp] = 4;
  for (int r = 0; r < 4; r++) {
    auto lu = mesh_layout(u, 4, r);
    CHECK(lu.group(Group::Ulysses) == V{0, 1, 2, 3});
    CHECK(lu.group(Group::Ring) == V{r});
    CHECK(lu[Axis::Ulysses] == r);
    CHECK(lu.rank_in(Group::Sp) == r);
    auto lg = mesh_layout(g, 4, r);
    CHECK(lg.group(Group::Ring) == V{0, 1, 2, 3});
    CHECK(lg.group(Group::Ulysses) == V{r});
    CHECK(lg[Axis::Ring] == r);
    CHECK(lg.rank_in(Group::Sp) == r);
    auto lp = mesh_layout(p, 4, r);
    CHECK(lp.group(Group::Dp) == V{0, 1, 2, 3});
    CHECK(lp.group(Group::Sp) == V{r});
    CHECK(lp.group(Group::Replica) == V{r});
    CHECK(lp[Axis::Dp] == r);
  }
  // ring2 x ulysses3 on 6: Ulysses contiguous triples, Ring strided by 3.
  MeshDegrees m;
  m[Axis::Ring] = 2;
  m[Axis::Ulysses] = 3;
  auto l4 = mesh_layout(m, 6, 4);
  CHECK(l4.group(Group::Ulysses) == V{3, 4, 5});
  CHECK(l4.group(Group::Ring) == V{1, 4});
  CHECK(l4[Axis::Ring] == 1);
  CHECK(l4[Axis::Ulysses] == 1);
}

TEST_CASE("mesh: degrees are validated with a clear message", "[parallel]") {
  MeshDegrees d;
  d[Axis::Cfg] = 2;
  d[Axis::Ulysses] = 4;
  REQUIRE_THROWS_WITH(validate_mesh(d, 6),
                      "mesh: dp(1) × cfg(2) × ring(1) × ulysses(4) × tp(1) = 8, but the world size is 6");
  REQUIRE_NOTHROW(validate_mesh(d, 8));
  MeshDegrees z;
  z[Axis::Ring] = 0;
  REQUIRE_THROWS_WITH(validate_mesh(z, 1), Catch::Contains("must be >= 1"));
  MeshDegrees c3;
  c3[Axis::Cfg] = 3;
  REQUIRE_THROWS_WITH(validate_mesh(c3, 3), Catch::Contains("CFG degree is 1 or 2"));
  REQUIRE_THROWS_WITH(mesh_layout(d, 8, 8), Catch::Contains("rank 8 is not in a world of size 8"));
  CHECK(mesh_str(d) == "dp1 x cfg2 x ring1 x ulysses4 x tp1");
}

TEST_CASE("mesh: tensor parallelism is the innermost axis (Megatron: TP ranks contiguous)", "[parallel]") {
  // cfg2 x ulysses2 x tp2 on 8 ranks: TP pairs [0,1] [2,3] ...; Ulysses pairs with the same TP
  // coordinate [0,2] [1,3] ...; CFG pairs i, i + 4; the model-parallel group of a half is 4 ranks.
  MeshDegrees d(1, 2, 1, 2, 2);
  struct Row {
    int c, u, t;
    V tp, uly, cfg, mp;
  } table[] = {{0, 0, 0, {0, 1}, {0, 2}, {0, 4}, {0, 1, 2, 3}}, {0, 0, 1, {0, 1}, {1, 3}, {1, 5}, {0, 1, 2, 3}},
               {0, 1, 0, {2, 3}, {0, 2}, {2, 6}, {0, 1, 2, 3}}, {1, 1, 1, {6, 7}, {5, 7}, {3, 7}, {4, 5, 6, 7}}};
  const int ranks[] = {0, 1, 2, 7};
  for (int i = 0; i < 4; ++i) {
    const int r = ranks[i];
    INFO("rank " << r);
    const MeshLayout l = mesh_layout(d, 8, r);
    CHECK(l[Axis::Cfg] == table[i].c);
    CHECK(l[Axis::Ulysses] == table[i].u);
    CHECK(l[Axis::Tp] == table[i].t);
    CHECK(l.group(Group::Tp) == table[i].tp);
    CHECK(l.group(Group::Ulysses) == table[i].uly);
    CHECK(l.group(Group::Cfg) == table[i].cfg);
    CHECK(l.group(Group::Mp) == table[i].mp);
    CHECK(l.group(Group::Sp).size() == 2);
    CHECK(l.rank_in(Group::Mp) == r % 4);
  }
  // tp = 1 leaves every other layout as it was.
  CHECK(mesh_rank(MeshDegrees(2, 2, 2, 2), {1, 0, 1, 0, 0}) == mesh_rank(MeshDegrees(2, 2, 2, 2, 1), {1, 0, 1, 0, 0}));
}
