// Packed linear weights (runtime/packed_weights.h): a Linear reading the weights in the
// matmul's layout from a packed entry gives the bits of one reading them in place; entries are
// made once per key and layout, mapped by later users, remade when damaged; an unusable
// directory falls back (optional) or names the file (required); WeightStore's keys follow the
// checkpoint's content.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "io_test_util.h"
#include "packed_test_util.h"
#include "runtime/atomic_file.h"
#include "runtime/error.h"
#include "runtime/linear.h"
#include "runtime/packed_weights.h"
#include "runtime/process_identity.h"
#include "runtime/safetensors.h"
#include "runtime/weight_cache.h"
#include "runtime/weight_shard.h"
#include "tests/compute_types.h"

using namespace dit;
namespace fs = std::filesystem;

namespace {

using dit_test::random_tensor;

bool packed_in(const Linear& l) { return l.impl_info().find("(packed weights, shared)") != std::string::npos; }

// y of a Linear of `spec` over weight w (optionally packed from `src`), x random; the output
// type and epilogue operands as the spec asks.
std::vector<float> run_linear(const LinearSpec& spec, LinearWeight w, PackedSource src, bool* packed = nullptr) {
  w.packed = std::move(src);
  Linear l(spec, w);
  if (packed) *packed = packed_in(l);
  const int64_t rows = spec.batch * spec.rows, ldy = spec.out_stride ? spec.out_stride : spec.out;
  const Tensor x = random_tensor({rows, spec.in}, 7);
  const Tensor gate = random_tensor({spec.batch, spec.out}, 8);
  std::vector<float> y(size_t(rows * ldy), 0.5f);
  if (spec.output == DType::BF16) {
    std::vector<uint16_t> y16(y.size(), 0);
    l.run(x.f32(), y16.data());
    for (size_t i = 0; i < y.size(); ++i) y[i] = bf16_to_f32(y16[i]);
  } else {
    l.run(x.f32(), y.data(), spec.gated_residual ? gate.f32() : nullptr);
  }
  return y;
}

LinearSpec spec_of(int64_t batch, int64_t rows, int64_t in, int64_t out) {
  LinearSpec s;
  s.batch = batch;
  s.rows = rows;
  s.in = in;
  s.out = out;
  return s;
}

}  // namespace

TEST_CASE("packed weights: a Linear reading the packed entry gives the bits of one reading the weights in place",
          "[runtime][packed]") {
  dit_test::TempDir d;
  auto dir = std::make_shared<PackedWeightDir>(d.path() + "/packed", false);
  const std::vector<DType> types = dit_test::compute_types();
  int used = 0, n = 0;
  for (DType compute : types) {
    const LinearWeight w = LinearWeight::prepare(random_tensor({160, 96}, 1, compute), random_tensor({160}, 2), compute);
    std::vector<LinearSpec> specs;
    LinearSpec plain = spec_of(1, 37, 96, 160);
    plain.act = Act::GeluTanh;
    specs.push_back(plain);
    LinearSpec gated = spec_of(2, 19, 96, 160);
    gated.gated_residual = true;
    specs.push_back(gated);
    LinearSpec wide = spec_of(1, 37, 96, 160);
    wide.out_stride = 480;  // a column block of a wider buffer, as Q, K and V are written
    specs.push_back(wide);
    LinearSpec acc = spec_of(1, 5, 96, 160);
    acc.accumulate = true;
    specs.push_back(acc);
    if (compute == DType::BF16) {
      LinearSpec out16 = spec_of(1, 37, 96, 160);
      out16.output = DType::BF16;
      specs.push_back(out16);
    }
    for (const LinearSpec& s : specs) {
      bool packed = false;
      const std::vector<float> want = run_linear(s, w, {});
      const std::vector<float> got = run_linear(s, w, {dir, std::string("w|") + dtype_name(compute)}, &packed);
      INFO(dtype_name(compute) << " spec " << n);
      CHECK(std::memcmp(want.data(), got.data(), want.size() * 4) == 0);
      used += packed;
      ++n;
    }
  }
  // An entry per type and layout (the gated form's weights are 3-D, and a strided output asks
  // for another layout), each made by the first Linear that asked for it.
  CHECK(dir->made() == int(dit_test::packed_entries(d.path() + "/packed")));
  // Where oneDNN's kernels prefer a blocked layout (AVX-512: the dense 2-D forms, the gated one
  // included), the entries are used; f32 also packs into a plain layout (a transpose: the
  // strided output's), bf16 only into blocked ones.
  if (dit_test::onednn_brgemm()) {
    CHECK(used >= n - 1);
    CHECK(dir->made() >= int(types.size()) + 1);
    CHECK(dir->made() < n);
  }
  // No bf16 entry is in a plain layout: a bf16 matmul copies its weights into pairs of rows
  // at every call from any plain layout, so packing into one only moved that copy's source.
  for (const auto& e : fs::directory_iterator(d.path() + "/packed")) {
    if (e.path().extension() != ".packed") continue;
    const std::string head = dit_test::read_bytes(e.path().string()).substr(0, 4096);
    INFO(head.substr(0, head.find('\0')));
    if (head.find("w|bf16") != std::string::npos) CHECK(head.find(" blocks= ") == std::string::npos);
  }
}

TEST_CASE("packed weights: a block of a weight's columns read as a strided view gives the bits of its copy, in place "
          "and packed",
          "[runtime][packed]") {
  // Tensor parallelism's row-parallel shard (runtime/weight_shard.h) without a private copy.
  dit_test::TempDir d;
  auto dir = std::make_shared<PackedWeightDir>(d.path() + "/packed", false);
  const std::vector<DType> types = dit_test::compute_types();
  for (DType compute : types) {
    const Tensor full = random_tensor({160, 96}, 4, compute), bias = random_tensor({160}, 5);
    const TokenRange cols{32, 80};
    const LinearWeight copy = shard_cols(full, bias, compute, cols);
    const LinearWeight view = shard_cols_view(full, bias, compute, cols);
    CHECK(view.weight.data() == full.data());  // no copy
    CHECK(view.in() == 48);
    CHECK(view.ld() == 96);
    LinearSpec plain = spec_of(1, 37, 48, 160);
    LinearSpec gated = spec_of(2, 19, 48, 160);
    gated.gated_residual = true;
    for (LinearSpec s : {plain, gated}) {
      INFO(dtype_name(compute) << (s.gated_residual ? " gated" : " plain"));
      const std::vector<float> want = run_linear(s, copy, {});
      const std::vector<float> in_place = run_linear(s, view, {});
      bool shared = false;
      const std::vector<float> from_entry =
          run_linear(s, view, {dir, std::string("cols|") + dtype_name(compute)}, &shared);
      s.pack_weights = true;
      const std::vector<float> private_pack = run_linear(s, view, {});
      CHECK(std::memcmp(want.data(), in_place.data(), want.size() * 4) == 0);
      CHECK(std::memcmp(want.data(), from_entry.data(), want.size() * 4) == 0);
      CHECK(std::memcmp(want.data(), private_pack.data(), want.size() * 4) == 0);
      CHECK(shared);  // a strided weight is never the layout the matmul asks for
    }
  }
  // Where an optional directory fails, the block is packed privately (the bits of its copy, the
  // memory a copy would take; a strided weight read in place may take another kernel), and the
  // plain pages are given back.
  dit_test::write_bytes(d.file("file"), "x");
  auto broken = std::make_shared<PackedWeightDir>(d.file("file") + "/packed", true);
  const Tensor full = random_tensor({160, 96}, 4), bias = random_tensor({160}, 5);
  const LinearWeight copy = shard_cols(full, bias, DType::F32, {48, 96});
  int released = 0;
  const PackedSource src(broken, "c", [&released] {
    ++released;
    return size_t(0);
  });
  const LinearSpec s = spec_of(1, 37, 48, 160);
  LinearWeight view = shard_cols_view(full, bias, DType::F32, {48, 96});
  view.packed = src;
  const Linear l(s, view);
  CHECK(l.impl_info().find(" (packed weights)") != std::string::npos);
  CHECK(released == 1);
  const std::vector<float> want = run_linear(s, copy, {}), got = run_linear(s, view, src);
  CHECK(std::memcmp(want.data(), got.data(), want.size() * 4) == 0);

  // Columns beyond the weight are refused, naming them.
  LinearWeight bad = shard_cols_view(random_tensor({16, 8}, 6), Tensor(), DType::F32, {0, 8});
  bad.col_begin = 4;
  bad.cols = 8;
  CHECK_THROWS_WITH(Linear(spec_of(1, 2, 8, 16), bad), Catch::Contains("columns [4, 12)"));
  CHECK_THROWS_WITH(shard_cols_view(random_tensor({16, 8}, 6), Tensor(), DType::BF16, {0, 4}),
                    Catch::Contains("stored as bf16"));
}

TEST_CASE("weights stacked from row blocks: read from one packed entry, the bits of their concatenation",
          "[runtime][packed]") {
  // Q, K and V as one matmul while each stays a view (LinearWeight::stack, row_blocks).
  dit_test::TempDir d;
  const std::vector<DType> types = dit_test::compute_types();
  for (DType compute : types) {
    INFO(dtype_name(compute));
    auto dir = std::make_shared<PackedWeightDir>(d.path() + "/packed-" + dtype_name(compute), false);
    std::vector<LinearWeight> parts;
    std::vector<Tensor> plain;
    int released = 0;
    for (int i = 0; i < 3; ++i) {
      plain.push_back(random_tensor({48, 96}, 20 + unsigned(i), compute));
      LinearWeight p = LinearWeight::prepare(plain.back(), random_tensor({48}, 30 + unsigned(i)), compute);
      p.packed = PackedSource(dir, "part " + std::to_string(i), [&released] {
        ++released;
        return size_t(0);
      });
      parts.push_back(p);
    }
    const LinearWeight stacked = LinearWeight::stack(parts);
    REQUIRE(stacked.row_blocks.size() == 3);
    CHECK_FALSE(stacked.weight.defined());
    CHECK(stacked.row_blocks[1].data() == plain[1].data());  // views, nothing copied
    CHECK(stacked.out() == 144);
    CHECK(stacked.in() == 96);
    CHECK(stacked.packed.key.find("part 0|stacked with ") == 0);
    // The reference: one private [144, 96] weight, the biases concatenated likewise.
    std::vector<Tensor> biases;
    for (const LinearWeight& p : parts) biases.push_back(p.bias.reshape({48, 1}));
    const LinearWeight concat = LinearWeight::prepare(concat_rows(plain), concat_rows(biases).reshape({144}), compute);
    const LinearSpec s = spec_of(1, 37, 96, 144);
    const std::vector<float> want = run_linear(s, concat, {});
    bool shared = false;
    const std::vector<float> got = run_linear(s, stacked, stacked.packed, &shared);
    CHECK(std::memcmp(want.data(), got.data(), want.size() * 4) == 0);
    if (dit_test::onednn_brgemm()) {  // (a blocked layout asked for: packed)
      CHECK(shared);
      CHECK(dir->made() == 1);
      CHECK(released == 3);  // each part's plain pages given back once the entry is made
      run_linear(s, stacked, stacked.packed);
      CHECK(dir->made() == 1);  // mapped by the next user
    }
    // No packed source: stacked into a private copy by the Linear, the same bits.
    LinearWeight unpacked = stacked;
    unpacked.packed = PackedSource{};
    CHECK(std::memcmp(want.data(), run_linear(s, unpacked, {}).data(), want.size() * 4) == 0);
    // An optional directory that fails: likewise.
    dit_test::write_bytes(d.file("file"), "x");
    const PackedSource broken(std::make_shared<PackedWeightDir>(d.file("file") + "/packed", true), "k");
    CHECK(std::memcmp(want.data(), run_linear(s, stacked, broken).data(), want.size() * 4) == 0);
    // Parts without packed sources are concatenated at once.
    std::vector<LinearWeight> bare = parts;
    for (LinearWeight& p : bare) p.packed = PackedSource{};
    const LinearWeight joined = LinearWeight::stack(bare);
    CHECK(joined.row_blocks.empty());
    CHECK(std::memcmp(joined.weight.data(), concat.weight.data(), concat.weight.nbytes()) == 0);
  }
  // Parts of another kind are refused.
  const LinearWeight a = LinearWeight::prepare(random_tensor({8, 4}, 1), Tensor(), DType::F32);
  const LinearWeight b = LinearWeight::prepare(random_tensor({8, 5}, 2), Tensor(), DType::F32);
  CHECK_THROWS_WITH(LinearWeight::stack({a, b}), Catch::Contains("a part of another kind"));
}

TEST_CASE("packed weights: made once per key, mapped by the next user, remade when damaged", "[runtime][packed]") {
  if (!dit_test::onednn_brgemm()) return;  // (where plain layouts are preferred nothing is packed)
  dit_test::TempDir d;
  const std::string pd = d.path() + "/packed";
  const LinearWeight w = LinearWeight::prepare(random_tensor({64, 48}, 3), Tensor(), DType::F32);
  const LinearSpec s = spec_of(1, 9, 48, 64);
  const std::vector<float> want = run_linear(s, w, {});
  auto check = [&](const char* key, int made, size_t files) {
    auto dir = std::make_shared<PackedWeightDir>(pd, false);
    bool packed = false;
    int released = 0;  // the plain weight's pages are given back once, after an entry is made from them
    const std::vector<float> got = run_linear(s, w, {dir, key, [&] { return size_t(++released); }}, &packed);
    INFO(key << ": made " << dir->made() << ", entries " << dit_test::packed_entries(pd));
    CHECK(packed);
    CHECK(dir->made() == made);
    CHECK(released == made);
    CHECK(dit_test::packed_entries(pd) == files);
    CHECK(std::memcmp(want.data(), got.data(), want.size() * 4) == 0);
  };
  check("a", 1, 1);
  check("a", 0, 1);  // mapped, not packed again
  check("b", 1, 2);  // another weight
  // Damaged entries (truncated; a header of another key with the right size) are made again.
  for (const auto& e : fs::directory_iterator(pd))
    if (e.path().extension() == ".packed") fs::resize_file(e.path(), 100);
  check("a", 1, 2);
  for (const auto& e : fs::directory_iterator(pd))
    if (e.path().extension() == ".packed") {
      std::string bytes = dit_test::read_bytes(e.path().string());
      bytes.replace(0, 8, "{\"key\":1");  // no longer this key's JSON
      dit_test::write_bytes(e.path().string(), bytes);
    }
  check("b", 1, 2);
  check("a", 1, 2);
  // A header that parses, with fields of other types.
  for (const auto& e : fs::directory_iterator(pd))
    if (e.path().extension() == ".packed") {
      std::string bytes = dit_test::read_bytes(e.path().string());
      const std::string h = R"({"version":1,"key":[],"layout":{},"bytes":"x"})";
      bytes.replace(0, h.size(), h);
      bytes.replace(h.size(), 4096 - h.size() - 1, std::string(4096 - h.size() - 1, ' '));
      dit_test::write_bytes(e.path().string(), bytes);
    }
  check("a", 1, 2);
  // Processes (here threads, each with its own lock descriptor) asking at once make it once.
  std::vector<std::shared_ptr<PackedWeightDir>> dirs;
  for (int i = 0; i < 4; ++i) dirs.push_back(std::make_shared<PackedWeightDir>(pd, false));
  std::vector<std::thread> ts;
  std::vector<int> ok(4, 0);
  for (int i = 0; i < 4; ++i)
    ts.emplace_back([&, i] {
      bool packed = false;
      const std::vector<float> got = run_linear(s, w, {dirs[size_t(i)], "c"}, &packed);
      ok[size_t(i)] = packed && std::memcmp(want.data(), got.data(), want.size() * 4) == 0;
    });
  for (auto& t : ts) t.join();
  int made = 0;
  for (const auto& dir : dirs) made += dir->made();
  CHECK(made == 1);
  CHECK(ok == std::vector<int>(4, 1));
  CHECK(dit_test::packed_entries(pd) == 3);
}

TEST_CASE("packed weights: Linears of one weight with other row counts read one mapping of its entry",
          "[runtime][packed]") {
  if (!dit_test::onednn_brgemm()) return;  // (where plain layouts are preferred nothing is packed)
  dit_test::TempDir d;
  const std::string pd = fs::canonical(d.path()).string() + "/packed";
  const LinearWeight w = LinearWeight::prepare(random_tensor({64, 48}, 3), Tensor(), DType::F32);
  auto dir = std::make_shared<PackedWeightDir>(pd, false);
  bool p9 = false, p5 = false;
  {
    LinearWeight wp = w;
    wp.packed = PackedSource(dir, "a");
    Linear l9(spec_of(1, 9, 48, 64), wp), l5(spec_of(2, 5, 48, 64), wp);  // e.g. a task and a shorter last one
    p9 = packed_in(l9);
    p5 = packed_in(l5);
    CHECK(dir->made() == 1);
    CHECK(dit_test::mappings_of(pd) == 1);  // was 2: each Linear mapped the entry again
  }
  CHECK(p9);
  CHECK(p5);
  CHECK(dit_test::mappings_of(pd) == 0);  // unmapped with its last reader
  // Mapped again (not packed again) by the next reader, which gives the bits of the weight in place.
  const LinearSpec s = spec_of(1, 9, 48, 64);
  bool packed = false;
  const std::vector<float> got = run_linear(s, w, {dir, "a"}, &packed);
  CHECK(packed);
  CHECK(dir->made() == 1);
  const std::vector<float> want = run_linear(s, w, {});
  CHECK(std::memcmp(want.data(), got.data(), want.size() * 4) == 0);
}

TEST_CASE("packed weights: an unusable directory falls back when optional, names itself when required",
          "[runtime][packed]") {
  if (!dit_test::onednn_brgemm()) return;
  dit_test::TempDir d;
  dit_test::write_bytes(d.file("file"), "x");
  const std::string bad = d.file("file") + "/packed";  // under a regular file: cannot be created
  const LinearWeight w = LinearWeight::prepare(random_tensor({64, 48}, 3), Tensor(), DType::F32);
  const LinearSpec s = spec_of(1, 9, 48, 64);
  const std::vector<float> want = run_linear(s, w, {});
  bool packed = true;
  const std::vector<float> got = run_linear(s, w, {std::make_shared<PackedWeightDir>(bad, true), "a"}, &packed);
  CHECK_FALSE(packed);
  CHECK(std::memcmp(want.data(), got.data(), want.size() * 4) == 0);
  const std::string e =
      dit_test::error_of([&] { run_linear(s, w, {std::make_shared<PackedWeightDir>(bad, false), "a"}); });
  CHECK(e.find(bad) != std::string::npos);
  // A Linear on packed weights cannot be pointed at other weights.
  LinearWeight pw = w;
  pw.packed = {std::make_shared<PackedWeightDir>(d.path() + "/p", false), "a"};
  Linear l(s, pw);
  CHECK_THROWS_WITH(l.set_weight(w), Catch::Contains("set_weight with packed weights"));
}

TEST_CASE("packed weights: WeightStore keys name the file's identity, the tensor and the type", "[runtime][packed]") {
  dit_test::TempDir d;
  const std::string src = d.file("diffusion_pytorch_model.safetensors");
  write_safetensors(src, {{"a.weight", random_tensor({4, 3}, 1)}});
  WeightStore ws = WeightStore::open_dir(d.path());
  CHECK_FALSE(ws.packed_source("a.weight", DType::F32));  // packing off
  auto dir = std::make_shared<PackedWeightDir>(d.path() + "/packed", false);
  ws.use_packed_weights(dir);
  const PackedSource a = ws.packed_source("a.weight", DType::F32), b = ws.packed_source("a.weight", DType::BF16);
  REQUIRE(a);
  CHECK(a.dir == dir);
  CHECK(a.key.find(fs::canonical(src).string()) == 0);
  CHECK(a.key.find("|a.weight|f32") != std::string::npos);
  CHECK(a.key != b.key);
  struct timespec times[2] = {{0, UTIME_OMIT}, {1700000000, 123}};
  REQUIRE(::utimensat(AT_FDCWD, src.c_str(), times, 0) == 0);
  CHECK(ws.packed_source("a.weight", DType::F32).key != a.key);  // a changed checkpoint: new entries
  CHECK_THROWS_WITH(ws.packed_source("missing", DType::F32), Catch::Contains("missing tensor"));
}

TEST_CASE("WeightStore::releaser gives back a tensor's mapped pages when called, nothing for others",
          "[runtime][packed]") {
  dit_test::TempDir d;
  write_safetensors(d.file("diffusion_pytorch_model.safetensors"), {{"big", random_tensor({4, 4096}, 1)}});
  std::function<size_t()> release;
  {
    WeightStore ws = WeightStore::open_dir(d.path());
    const Tensor t = ws.get("big");
    volatile float sum = 0;
    for (int64_t i = 0; i < t.numel(); ++i) sum = sum + t.f32()[i];  // resident now
    release = ws.releaser(t);
    CHECK(ws.releaser(random_tensor({4, 4096}, 2))() == 0);  // not the store's
  }
  CHECK(release() >= 4 * 4096);  // whole pages inside the tensor, after the store is gone
}

TEST_CASE("packed weights: a writer killed mid-entry leaves a temporary file the next writer removes",
          "[runtime][packed]") {
  if (!dit_test::onednn_brgemm()) return;
  dit_test::TempDir d;
  const std::string pd = d.path() + "/packed";
  fs::create_directories(pd);
  dit_test::kill_writer(dit_test::start_partial_writer(pd + "/0123456789abcdef.packed"), SIGKILL);  // mid-entry
  auto temps = [&] {
    size_t n = 0;
    for (const auto& e : fs::directory_iterator(pd)) n += e.path().filename().string().find(".dit-tmp.") != std::string::npos;
    return n;
  };
  REQUIRE(temps() == 1);
  const LinearWeight w = LinearWeight::prepare(random_tensor({64, 48}, 3), Tensor(), DType::F32);
  auto dir = std::make_shared<PackedWeightDir>(pd, false);
  bool packed = false;
  run_linear(spec_of(1, 9, 48, 64), w, {dir, "a"}, &packed);
  CHECK(packed);
  CHECK(temps() == 0);
  CHECK(dit_test::packed_entries(pd) == 1);
}

namespace {
// A file named `name` in `dir` with an entry's 4096-byte header `h` (and no payload).
void write_header(const std::string& dir, const std::string& name, const nlohmann::json& h) {
  std::string bytes = h.dump();
  bytes.resize(4096, ' ');
  dit_test::write_bytes(dir + "/" + name, bytes);
}
}  // namespace

TEST_CASE("packed weights: the next writer removes this host's entries of changed or deleted checkpoints and of "
          "version 1, not other hosts' entries or other files",
          "[runtime][packed]") {
  if (!dit_test::onednn_brgemm()) return;  // (where plain layouts are preferred nothing is packed)
  dit_test::TempDir d;
  const std::string pd = d.path() + "/packed", src = d.file("diffusion_pytorch_model.safetensors");
  write_safetensors(src, {{"a.weight", random_tensor({64, 48}, 1)}});
  const LinearSpec s = spec_of(1, 9, 48, 64);
  auto run_from_store = [&] {  // a process: a store, a directory object, one Linear packed from the checkpoint
    WeightStore ws = WeightStore::open_dir(d.path());
    auto dir = std::make_shared<PackedWeightDir>(pd, false);
    ws.use_packed_weights(dir);
    bool packed = false;
    const LinearWeight w = LinearWeight::prepare(ws.get("a.weight"), Tensor(), DType::F32);
    const std::vector<float> y = run_linear(s, w, ws.packed_source("a.weight", DType::F32), &packed);
    CHECK(packed);
    return dir->made();
  };
  REQUIRE(run_from_store() == 1);
  REQUIRE(dit_test::packed_entries(pd) == 1);
  std::string first;
  for (const auto& e : fs::directory_iterator(pd))
    if (e.path().extension() == ".packed") first = e.path().string();
  // The entry names this host and its checkpoint file.
  const nlohmann::json h = nlohmann::json::parse(dit_test::read_bytes(first).substr(0, 4096));
  CHECK(h.at("host") == host_name());
  CHECK(h.at("source").at("path") == fs::canonical(src).string());
  CHECK(h.at("source").at("size") == fs::file_size(src));

  const nlohmann::json gone = {{"path", d.file("gone.safetensors")}, {"size", 8}, {"mtime_ns", 1}};
  write_header(pd, "v1.packed", {{"version", "1"}, {"key", "k"}, {"layout", "l"}, {"bytes", 0}});
  write_header(pd, "mine-gone.packed", {{"version", "2"}, {"key", "k"}, {"host", host_name()}, {"source", gone}});
  write_header(pd, "mine-v3.packed", {{"version", "3"}, {"key", "k"}, {"host", host_name()}});
  write_header(pd, "theirs-gone.packed", {{"version", "2"}, {"key", "k"}, {"host", "elsewhere"}, {"source", gone}});
  write_header(pd, "theirs-v3.packed", {{"version", "3"}, {"key", "k"}, {"host", "elsewhere"}});
  write_header(pd, "no-source.packed", {{"version", "2"}, {"key", "k"}, {"host", host_name()}});
  write_header(pd, "odd-types.packed", {{"version", "2"}, {"host", host_name()}, {"source", {{"path", 3}}}});
  dit_test::write_bytes(pd + "/garbage.packed", std::string(4096, 'x'));
  dit_test::write_bytes(pd + "/notes.txt", "{\"version\": \"1\"}");
  CHECK(dit_test::packed_entries(pd) == 9);

  // A process that only maps entries removes nothing.
  REQUIRE(run_from_store() == 0);
  CHECK(dit_test::packed_entries(pd) == 9);

  // The checkpoint changes: the next process makes a new entry, and removes the old one with the stale ones.
  struct timespec times[2] = {{0, UTIME_OMIT}, {1700000000, 123}};
  REQUIRE(::utimensat(AT_FDCWD, src.c_str(), times, 0) == 0);
  REQUIRE(run_from_store() == 1);
  std::set<std::string> left;
  for (const auto& e : fs::directory_iterator(pd)) left.insert(e.path().filename().string());
  CHECK_FALSE(left.count(fs::path(first).filename().string()));
  for (const char* kept : {"theirs-gone.packed", "theirs-v3.packed", "no-source.packed", "odd-types.packed",
                           "garbage.packed", "notes.txt"})
    CHECK(left.count(kept));
  for (const char* removed : {"v1.packed", "mine-gone.packed", "mine-v3.packed"}) CHECK_FALSE(left.count(removed));
  CHECK(dit_test::packed_entries(pd) == 6);  // the new entry and the five kept .packed files
  // Nothing stale is left to remove.
  CHECK(remove_stale_entries(pd) == 0);
  CHECK(remove_stale_entries(d.file("no-such-dir")) == 0);
}
