#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>

#include "runtime/json_config.h"
#include "runtime/safetensors.h"
#include "tests/runtime/io_test_util.h"

using namespace dit;
using dit_test::error_of;
using dit_test::TempDir;
using dit_test::write_bytes;
using Catch::Matchers::Contains;

namespace {

std::string u64le(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = char((n >> (8 * i)) & 0xff);
  return s;
}

// A safetensors file from a raw header text and `data_bytes` bytes of data (value 0x11).
std::string st_bytes(const std::string& header, size_t data_bytes) {
  return u64le(header.size()) + header + std::string(data_bytes, '\x11');
}

Tensor iota(const Shape& shape, float scale) {
  Tensor t = Tensor::empty(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = float(i) * scale - 3.0f;
  return t;
}

// Opens the file and gets every tensor; returns the error message.
std::string open_error(const std::string& path) {
  return error_of([&] {
    auto f = SafeTensorsFile::open(path);
    for (const auto& n : f->names()) f->get(n);
  });
}

struct BadCase {
  const char* what;
  std::string bytes;
  const char* expect;
};

}  // namespace

TEST_CASE("safetensors round trip F32 and BF16 with metadata", "[io][safetensors]") {
  TempDir dir;
  Tensor a = iota({2, 3}, 0.5f);
  Tensor b = iota({5}, 0.25f).to(DType::BF16);
  Tensor s = Tensor::empty({});  // 0-dim
  s.f32()[0] = 7.0f;
  Tensor z = Tensor::empty({0, 4});  // zero-size
  const std::string path = dir.file("rt.safetensors");
  write_safetensors(path, {{"b.weight", b}, {"a", a}, {"scalar", s}, {"empty", z}}, {{"format", "pt"}});
  REQUIRE(dir.count() == 1);  // no temporary file left

  // Header length is a multiple of 8, so the data starts aligned.
  std::string raw = dit_test::read_bytes(path);
  uint64_t n = 0;
  std::memcpy(&n, raw.data(), 8);
  CHECK(n % 8 == 0);

  auto f = SafeTensorsFile::open(path);
  CHECK(f->names() == std::vector<std::string>{"a", "b.weight", "empty", "scalar"});
  CHECK(f->metadata().at("format") == "pt");
  CHECK(f->info("b.weight").dtype == "BF16");
  CHECK(f->info("a").shape == Shape{2, 3});
  Tensor a2 = f->get("a");
  REQUIRE(a2.dtype() == DType::F32);
  REQUIRE(a2.shape() == Shape{2, 3});
  CHECK(std::memcmp(a2.data(), a.data(), a.nbytes()) == 0);
  CHECK(f->get("a").data() == a2.data());  // zero-copy: both are views of the mapping
  Tensor b2 = f->get("b.weight");
  REQUIRE(b2.dtype() == DType::BF16);
  CHECK(std::memcmp(b2.data(), b.data(), b.nbytes()) == 0);
  CHECK(f->get("scalar").shape().empty());
  CHECK(f->get("scalar").f32()[0] == 7.0f);
  CHECK(f->get("empty").numel() == 0);

  // Views keep the file alive after the handle is dropped.
  f.reset();
  CHECK(a2.f32()[5] == a.f32()[5]);
}

TEST_CASE("sharded safetensors round trip through WeightStore", "[io][safetensors][sharded]") {
  TempDir dir;
  NamedTensors ts;
  for (int i = 0; i < 7; ++i) ts.push_back({"layer" + std::to_string(i) + ".w", iota({3, 4 + i}, 0.1f * i)});
  write_sharded_safetensors(dir.path(), "diffusion_pytorch_model", ts, 3, {{"format", "pt"}});
  for (int i = 1; i <= 3; ++i)
    CHECK(std::ifstream(dir.file("diffusion_pytorch_model-0000" + std::to_string(i) + "-of-00003.safetensors")).good());
  Config idx = Config::load(dir.file("diffusion_pytorch_model.safetensors.index.json"));
  CHECK(idx.child("metadata").get_int("total_size") > 0);
  CHECK(idx.child("weight_map").get_string("layer0.w") == "diffusion_pytorch_model-00001-of-00003.safetensors");

  WeightStore ws = WeightStore::open_dir(dir.path());
  CHECK(ws.names().size() == 7);
  CHECK_THAT(ws.describe(), Contains("index.json") && Contains("3 shards"));
  for (const auto& nt : ts) {
    Tensor t = ws.get(nt.first, nt.second.shape());
    CHECK(std::memcmp(t.data(), nt.second.data(), t.nbytes()) == 0);
  }

  // shards <= 1 writes a single file.
  TempDir one;
  write_sharded_safetensors(one.path(), "model", ts, 1);
  CHECK(WeightStore::open_dir(one.path(), "model").describe() == one.file("model.safetensors"));
}

TEST_CASE("reads the golden dit-tiny checkpoint", "[io][safetensors]") {
  const std::string dir = std::string(DIT_TEST_DATA) + "/dit-tiny/transformer";
  WeightStore ws = WeightStore::open_dir(dir);
  REQUIRE(ws.has("pos_embed.proj.weight"));
  Tensor w = ws.get("pos_embed.proj.weight", {32, 4, 2, 2});
  CHECK(w.dtype() == DType::F32);
  bool finite = true;
  for (int64_t i = 0; i < w.numel(); ++i) finite = finite && std::isfinite(w.f32()[i]);
  CHECK(finite);
  CHECK_THAT(error_of([&] { ws.get("pos_embed.proj.weight", {32, 4, 2, 3}); }),
             Contains("pos_embed.proj.weight") && Contains("[32, 4, 2, 3]") && Contains("[32, 4, 2, 2]"));
  CHECK_THAT(error_of([&] { ws.get("no.such.weight"); }),
             Contains("missing tensor 'no.such.weight'") && Contains("dit-tiny/transformer"));
}

TEST_CASE("F16 tensors are converted to F32", "[io][safetensors][f16]") {
  TempDir dir;
  const uint16_t h[8] = {0x3C00, 0xC000, 0x7BFF, 0x0001, 0x7C00, 0x3555, 0x8000, 0x0400};
  const float want[8] = {1.0f, -2.0f, 65504.0f, 5.9604644775390625e-08f, INFINITY, 0.333251953125f, -0.0f,
                         6.103515625e-05f};
  std::string header = R"({"h":{"dtype":"F16","shape":[2,4],"data_offsets":[0,16]}})";
  std::string bytes = u64le(header.size()) + header + std::string(reinterpret_cast<const char*>(h), 16);
  write_bytes(dir.file("h.safetensors"), bytes);
  Tensor t = SafeTensorsFile::open(dir.file("h.safetensors"))->get("h");
  REQUIRE(t.dtype() == DType::F32);
  REQUIRE(t.shape() == Shape{2, 4});
  for (int i = 0; i < 8; ++i) CHECK(std::memcmp(&t.f32()[i], &want[i], 4) == 0);
}

TEST_CASE("misaligned F32 data is copied, not read in place", "[io][safetensors]") {
  TempDir dir;
  std::string header = R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}})";
  while (header.size() % 4 != 1) header += ' ';  // data starts at an odd offset
  const float v[3] = {1.5f, -2.25f, 3.0f};
  write_bytes(dir.file("m.safetensors"), u64le(header.size()) + header + std::string(reinterpret_cast<const char*>(v), 12));
  Tensor t = SafeTensorsFile::open(dir.file("m.safetensors"))->get("x");
  CHECK(reinterpret_cast<uintptr_t>(t.data()) % 4 == 0);
  CHECK(t.f32()[0] == 1.5f);
  CHECK(t.f32()[1] == -2.25f);
  CHECK(t.f32()[2] == 3.0f);
}

TEST_CASE("unsupported dtypes fail only when requested", "[io][safetensors]") {
  TempDir dir;
  std::string header =
      R"({"f":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"i":{"dtype":"I64","shape":[1],"data_offsets":[4,12]}})";
  write_bytes(dir.file("i.safetensors"), st_bytes(header, 12));
  auto f = SafeTensorsFile::open(dir.file("i.safetensors"));
  CHECK(f->get("f").numel() == 1);
  CHECK_THAT(error_of([&] { f->get("i"); }),
             Contains(dir.file("i.safetensors")) && Contains("tensor 'i'") && Contains("I64"));
  CHECK_THAT(error_of([&] { f->get("nope"); }), Contains("tensor 'nope'") && Contains("not found"));
}

TEST_CASE("malformed safetensors files are rejected with a clear error", "[io][safetensors][malformed]") {
  auto T = [](const std::string& body) { return "{" + body + "}"; };
  const std::vector<BadCase> cases = {
      {"empty file", "", "too small"},
      {"shorter than 8 bytes", "abcde", "too small"},
      {"header length past end", u64le(100) + "{}", "past end of file"},
      {"header length > 100MB", u64le(200000000) + std::string(16, ' '), "too large"},
      {"header length 2^64-1", u64le(~0ull) + "{}", "too large"},
      {"bad JSON", st_bytes(R"({"a": {"dtype": )", 0), "not valid JSON"},
      {"header not an object", st_bytes("[1, 2]", 0), "not a JSON object"},
      {"empty header", st_bytes("", 0), "not a JSON object"},
      {"trailing garbage", st_bytes("{} x", 0), "not valid JSON"},
      {"unknown dtype", st_bytes(T(R"("a":{"dtype":"Q9","shape":[1],"data_offsets":[0,4]})"), 4), "unknown dtype 'Q9'"},
      {"dtype not a string", st_bytes(T(R"("a":{"dtype":5,"shape":[1],"data_offsets":[0,4]})"), 4), "dtype"},
      {"negative shape", st_bytes(T(R"("a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]})"), 4), "negative dimension"},
      {"non-integer shape", st_bytes(T(R"("a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]})"), 4), "bad shape dimension"},
      {"string shape", st_bytes(T(R"("a":{"dtype":"F32","shape":["1"],"data_offsets":[0,4]})"), 4), "bad shape dimension"},
      {"shape not an array", st_bytes(T(R"("a":{"dtype":"F32","shape":3,"data_offsets":[0,4]})"), 4), "shape"},
      {"offsets past data", st_bytes(T(R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})"), 4), "end past the data buffer"},
      {"negative offset", st_bytes(T(R"("a":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]})"), 4), "data_offsets"},
      {"offsets arity", st_bytes(T(R"("a":{"dtype":"F32","shape":[1],"data_offsets":[0]})"), 4), "data_offsets"},
      {"begin > end", st_bytes(T(R"("a":{"dtype":"F32","shape":[1],"data_offsets":[8,4]})"), 8), "begin > end"},
      {"overlapping offsets",
       st_bytes(T(R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]})"), 12),
       "overlaps tensor 'a'"},
      {"hole between tensors",
       st_bytes(T(R"("a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]})"), 12),
       "hole"},
      {"trailing uncovered bytes", st_bytes(T(R"("a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]})"), 8), "not fully covered"},
      {"shape x size != span", st_bytes(T(R"("a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]})"), 8), "expected 12 bytes, found 8"},
      {"shape product overflows int64",
       st_bytes(T(R"("a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]})"), 4), "overflows int64"},
      {"byte size overflows",
       st_bytes(T(R"("a":{"dtype":"F32","shape":[2305843009213693952],"data_offsets":[0,4]})"), 4), "overflows"},
      {"dimension above int64", st_bytes(T(R"("a":{"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,4]})"), 4),
       "bad shape dimension"},
      {"entry not an object", st_bytes(T(R"("a":[1,2])"), 0), "not an object"},
      {"deeply nested header", st_bytes("{\"a\":" + std::string(100000, '[') + std::string(100000, ']') + "}", 0),
       "nested too deeply"},
      {"huge entry value", st_bytes(T(R"("a":)" + std::string(5000, '[') + std::string(5000, ']')), 0), "nested too deeply"},
      {"control characters in a name", st_bytes(T(R"("a\nb":{"dtype":"X\tY","shape":[1],"data_offsets":[0,4]})"), 4),
       "tensor 'a\\nb': unknown dtype 'X\\tY'"},
      {"metadata value not a string", st_bytes(T(R"("__metadata__":{"format":1})"), 0), "__metadata__ key 'format'"},
  };
  TempDir dir;
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string path = dir.file("bad" + std::to_string(i) + ".safetensors");
    write_bytes(path, cases[i].bytes);
    std::string msg = open_error(path);
    INFO(cases[i].what << ": " << msg);
    CHECK_THAT(msg, Contains(path) && Contains(cases[i].expect));
    CHECK(msg.find('\n') == std::string::npos);
  }
  CHECK_THAT(open_error(dir.file("does-not-exist.safetensors")), Contains("cannot open"));
  CHECK_THAT(open_error(dir.path()), Contains("not a regular file"));
}

TEST_CASE("WeightStore rejects bad directories and indexes", "[io][safetensors][weightstore]") {
  TempDir dir;
  CHECK_THAT(error_of([&] { WeightStore::open_dir(dir.file("nope")); }), Contains("does not exist"));
  CHECK_THAT(error_of([&] { WeightStore::open_dir(dir.path()); }),
             Contains("diffusion_pytorch_model.safetensors") && Contains("index.json") && Contains(dir.path()));
  write_bytes(dir.file("diffusion_pytorch_model.bin"), "PK");
  CHECK_THAT(error_of([&] { WeightStore::open_dir(dir.path()); }), Contains("pickle") && Contains(".bin"));

  TempDir sh;
  write_safetensors(sh.file("part1.safetensors"), {{"a", iota({2}, 1.0f)}});
  auto index = [&](const std::string& weight_map) {
    write_bytes(sh.file("m.safetensors.index.json"), R"({"metadata":{"total_size":8},"weight_map":)" + weight_map + "}");
    return error_of([&] { WeightStore::open_dir(sh.path(), "m"); });
  };
  CHECK(index(R"({"a":"part1.safetensors"})") == "<no error>");
  CHECK_THAT(index(R"({"a":"part2.safetensors"})"), Contains("part2.safetensors") && Contains("does not exist"));
  CHECK_THAT(index(R"({"a":"../part1.safetensors"})"), Contains("../part1.safetensors") && Contains("plain file name"));
  CHECK_THAT(index(R"({"a":"sub/part1.safetensors"})"), Contains("plain file name"));
  CHECK_THAT(index(R"({"b":"part1.safetensors"})"), Contains("tensor 'b'") && Contains("missing from shard"));
  CHECK_THAT(index(R"({"a":3})"), Contains("weight_map['a']"));
  CHECK_THAT(index(R"([1])"), Contains("weight_map") && Contains("expected object"));
}

TEST_CASE("randomly corrupted safetensors files never crash", "[io][safetensors][fuzz]") {
  TempDir dir;
  const std::string valid = dit_test::read_bytes(std::string(DIT_TEST_DATA) + "/golden/randn.seed5.shape1x4x3x5.safetensors");
  REQUIRE(valid.size() > 100);
  uint32_t state = 12345;
  auto rnd = [&](uint32_t n) {
    state = state * 1664525u + 1013904223u;
    return n ? (state >> 8) % n : 0u;
  };
  int opened = 0, rejected = 0;
  for (int it = 0; it < 400; ++it) {
    std::string s = valid;
    for (int m = 0, n = 1 + int(rnd(3)); m < n && !s.empty(); ++m) {
      size_t pos = rnd(uint32_t(std::min<size_t>(s.size(), 120)));  // mostly the header
      switch (rnd(4)) {
        case 0: s[pos] = char(rnd(256)); break;
        case 1: s.erase(pos, 1 + rnd(4)); break;
        case 2: s.insert(pos, 1, "{}[]\",:0-9e"[rnd(12)]); break;
        default: s.resize(rnd(uint32_t(s.size()))); break;
      }
    }
    const std::string path = dir.file("fuzz.safetensors");
    write_bytes(path, s);
    std::string msg = open_error(path);
    if (msg == "<no error>") {
      ++opened;
    } else {
      ++rejected;
      CHECK(msg.find('\n') == std::string::npos);
    }
  }
  CHECK(rejected > 300);
}
