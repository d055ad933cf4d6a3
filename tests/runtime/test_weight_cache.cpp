// The converted-weight cache (runtime/weight_cache.h): F16/BF16 tensors served as float32
// from a file made once, reused while the source is unchanged, remade when it changes or
// is damaged, made once when several processes ask at the same time.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <omp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "io_test_util.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/process_identity.h"
#include "runtime/safetensors.h"
#include "runtime/weight_cache.h"

using namespace dit;
namespace fs = std::filesystem;

namespace {

struct Raw {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::vector<uint16_t> half;  // F16 / BF16 payload
  std::vector<float> f32;      // F32 payload
};

// A safetensors file with F16, BF16 and F32 tensors (the project's writer has no F16).
void write_raw(const std::string& path, const std::vector<Raw>& ts, const nlohmann::json& metadata = nullptr) {
  nlohmann::json h = nlohmann::json::object();
  if (!metadata.is_null()) h["__metadata__"] = metadata;
  uint64_t off = 0;
  std::string data;
  for (const Raw& t : ts) {
    const bool half = t.dtype != "F32";
    const size_t bytes = half ? t.half.size() * 2 : t.f32.size() * 4;
    h[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {off, off + bytes}}};
    data.append(half ? reinterpret_cast<const char*>(t.half.data()) : reinterpret_cast<const char*>(t.f32.data()), bytes);
    off += bytes;
  }
  std::string text = h.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  const uint64_t n = text.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f << text << data;
}

std::vector<Raw> sample(unsigned seed, int64_t big = 1000) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> bits(0, 0x7bff);  // finite halves of either sign below
  Raw a{"a.weight", "F16", {3, 5}, {}, {}}, b{"b.weight", "BF16", {big}, {}, {}}, c{"c.bias", "F32", {4}, {}, {}};
  for (int i = 0; i < 15; ++i) a.half.push_back(uint16_t(bits(rng) | (i % 2 ? 0x8000 : 0)));
  a.half[0] = 0x0001;  // a subnormal
  for (int64_t i = 0; i < big; ++i) b.half.push_back(f32_to_bf16(float(i) * 0.37f - 100.f));
  c.f32 = {1.f, -2.f, 3.5f, 0.f};
  return {a, b, c};
}

void check_values(const WeightStore& ws, const std::vector<Raw>& ts) {
  for (const Raw& t : ts) {
    const Tensor x = ws.get(t.name);
    REQUIRE(x.dtype() == DType::F32);
    for (size_t i = 0; i < (t.dtype == "F32" ? t.f32.size() : t.half.size()); ++i) {
      const float want = t.dtype == "F16" ? f16_to_f32(t.half[i]) : t.dtype == "BF16" ? bf16_to_f32(t.half[i]) : t.f32[i];
      if (x.f32()[i] != want) FAIL(t.name << "[" << i << "]: " << x.f32()[i] << " != " << want);
    }
  }
}

std::vector<std::string> cache_files(const std::string& dir) {
  std::vector<std::string> out;
  if (!fs::exists(dir)) return out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".safetensors") out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_CASE("weight cache: F16 and BF16 tensors served as float32 from one cache file, reused", "[runtime][cache]") {
  dit_test::TempDir d;
  const std::string src = d.path() + "/m/diffusion_pytorch_model.safetensors", wc = d.path() + "/wc";
  fs::create_directories(d.path() + "/m");
  const auto ts = sample(1);
  write_raw(src, ts);
  WeightStore ws = WeightStore::open_dir(d.path() + "/m");
  ws.use_converted_cache(wc, DType::F32);
  check_values(ws, ts);
  const auto files = cache_files(wc);
  REQUIRE(files.size() == 1);
  auto cached = SafeTensorsFile::open(files[0]);
  CHECK(cached->names() == std::vector<std::string>{"a.weight", "b.weight"});  // the F32 tensor stays in the source
  CHECK(cached->metadata().at("dit_source_size") == std::to_string(fs::file_size(src)));
  // A second store maps the same file: not rewritten.
  const auto before = fs::last_write_time(files[0]);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  WeightStore ws2 = WeightStore::open_dir(d.path() + "/m");
  ws2.use_converted_cache(wc, DType::F32);
  check_values(ws2, ts);
  CHECK(cache_files(wc) == files);
  CHECK(fs::last_write_time(files[0]) == before);
}

TEST_CASE("weight cache: a changed checkpoint gets a new entry (the old one removed), a damaged entry is remade", "[runtime][cache]") {
  dit_test::TempDir d;
  const std::string dir = d.path() + "/m", src = dir + "/diffusion_pytorch_model.safetensors", wc = d.path() + "/wc";
  fs::create_directories(dir);
  write_raw(src, sample(1));
  {
    WeightStore ws = WeightStore::open_dir(dir);
    ws.use_converted_cache(wc, DType::F32);
  }
  const auto first = cache_files(wc);
  REQUIRE(first.size() == 1);
  // New contents, same size; a different modification time.
  const auto ts2 = sample(2);
  write_raw(src, ts2);
  struct timespec times[2] = {{0, UTIME_OMIT}, {1700000000, 123}};
  REQUIRE(::utimensat(AT_FDCWD, src.c_str(), times, 0) == 0);
  {
    WeightStore ws = WeightStore::open_dir(dir);
    ws.use_converted_cache(wc, DType::F32);
    check_values(ws, ts2);
  }
  // The old entry, whose checkpoint changed, was removed by the process that made the new one.
  const auto second = cache_files(wc);
  REQUIRE(second.size() == 1);
  CHECK(second[0] != first[0]);
  const std::string current = second[0];
  CHECK(SafeTensorsFile::open(current)->metadata().at("dit_host") == host_name());
  // Truncate the current entry (a full disk, a killed copy): it is made again.
  fs::resize_file(current, 100);
  WeightStore ws = WeightStore::open_dir(dir);
  ws.use_converted_cache(wc, DType::F32);
  check_values(ws, ts2);
  CHECK(fs::file_size(current) > 100);
}

TEST_CASE("weight cache: several processes at once make one file and all read it", "[runtime][cache]") {
  dit_test::TempDir d;
  const std::string dir = d.path() + "/m", wc = d.path() + "/wc";
  fs::create_directories(dir);
  const auto ts = sample(3, 3 << 20);  // 3M bf16 values: conversion takes a moment
  write_raw(dir + "/diffusion_pytorch_model.safetensors", ts);
  std::vector<pid_t> kids;
  for (int k = 0; k < 4; ++k) {
    const pid_t p = ::fork();
    REQUIRE(p >= 0);
    if (p == 0) {
      // libgomp cannot start a team in a child forked after the parent ran one (the
      // earlier tests of this binary did): its pool threads are not in the child, and
      // the child would wait for them for ever. One thread starts none.
      omp_set_num_threads(1);
      int rc = 0;
      try {
        WeightStore ws = WeightStore::open_dir(dir);
        ws.use_converted_cache(wc, DType::F32);
        const Tensor b = ws.get("b.weight");
        for (size_t i = 0; i < ts[1].half.size(); ++i)
          if (b.f32()[i] != bf16_to_f32(ts[1].half[i])) rc = 3;
      } catch (...) {
        rc = 2;
      }
      ::_exit(rc);
    }
    kids.push_back(p);
  }
  for (pid_t p : kids) {
    int st = 0;
    REQUIRE(::waitpid(p, &st, 0) == p);
    CHECK(WIFEXITED(st));
    CHECK(WEXITSTATUS(st) == 0);
  }
  CHECK(cache_files(wc).size() == 1);
  for (const auto& e : fs::directory_iterator(wc))  // no temporary left behind
    CHECK(e.path().string().find(".dit-tmp.") == std::string::npos);
}

TEST_CASE("weight cache: nothing to convert, nothing made - failures as the option says", "[runtime][cache]") {
  dit_test::TempDir d;
  const std::string dir = d.path() + "/m";
  fs::create_directories(dir);
  const auto ts = sample(4);
  write_raw(dir + "/diffusion_pytorch_model.safetensors", ts);
  {
    const std::string bdir = d.path() + "/b";  // all BF16: bf16 compute reads it in place
    fs::create_directories(bdir);
    write_raw(bdir + "/diffusion_pytorch_model.safetensors", {ts[1]});
    WeightStore ws = WeightStore::open_dir(bdir);
    use_weight_cache(ws, DType::BF16, {d.path() + "/wc", false});
    CHECK(ws.get("b.weight").dtype() == DType::BF16);
    CHECK(ws.in_place("b.weight", DType::BF16));
    CHECK_FALSE(fs::exists(d.path() + "/wc"));
  }
  {
    const std::string plain = d.path() + "/plain";
    std::ofstream(plain) << "x";
    WeightStore ws = WeightStore::open_dir(dir);
    REQUIRE_THROWS_WITH(use_weight_cache(ws, DType::F32, {plain + "/wc", false}), Catch::Contains("weight cache"));
    use_weight_cache(ws, DType::F32, {plain + "/wc", true});  // optional: warns, the store stays as it was
    CHECK(ws.get("b.weight").dtype() == DType::BF16);          // (the model converts in memory)
  }
  {
    const std::string f32dir = d.path() + "/f32";
    fs::create_directories(f32dir);
    write_raw(f32dir + "/diffusion_pytorch_model.safetensors", {ts[2]});
    WeightStore ws = WeightStore::open_dir(f32dir);
    ws.use_converted_cache(d.path() + "/wc2", DType::F32);
    CHECK_FALSE(fs::exists(d.path() + "/wc2"));  // nothing to convert: no cache, no directory
  }
}

namespace {

// float32 -> bfloat16, round to nearest even, written out here apart from runtime/dtype.h
// (finite inputs only).
uint16_t rne_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t lsb = (u >> 16) & 1u;
  return uint16_t((u + 0x7fffu + lsb) >> 16);
}

}  // namespace

TEST_CASE("weight cache: bf16 compute reads F32 and F16 weights as bf16 from one shared file", "[runtime][cache]") {
  dit_test::TempDir d;
  const std::string dir = d.path() + "/m", wc = d.path() + "/wc";
  fs::create_directories(dir);
  auto ts = sample(5);
  Raw w{"d.weight", "F32", {64, 128}, {}, {}};
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int i = 0; i < 64 * 128; ++i) w.f32.push_back(nd(rng));
  // Exact ties between two bf16 values (low half 0x8000): even neighbour, either direction.
  for (uint32_t bits : {0x3f808000u, 0x3f818000u, 0xbf808000u, 0x40490fdbu}) {
    float f;
    std::memcpy(&f, &bits, 4);
    w.f32.push_back(f);
    w.f32.erase(w.f32.begin());
  }
  ts.push_back(w);
  write_raw(dir + "/diffusion_pytorch_model.safetensors", ts);

  WeightStore plain = WeightStore::open_dir(dir);  // no cache: a private converted copy
  CHECK_FALSE(plain.in_place("d.weight", DType::BF16));
  CHECK(plain.in_place("d.weight", DType::F32));
  const Tensor copy = plain.get_as("d.weight", DType::BF16, {64, 128});

  WeightStore ws = WeightStore::open_dir(dir);
  ws.use_converted_cache(wc, DType::BF16);
  const auto files = cache_files(wc);
  REQUIRE(files.size() == 1);
  CHECK(files[0].find(".bf16.safetensors") != std::string::npos);
  auto cached = SafeTensorsFile::open(files[0]);
  CHECK(cached->names() == std::vector<std::string>{"a.weight", "c.bias", "d.weight"});  // F16 and F32; not BF16
  CHECK(ws.in_place("d.weight", DType::BF16));
  CHECK(ws.in_place("a.weight", DType::BF16));

  const Tensor got = ws.get_as("d.weight", DType::BF16, {64, 128});
  REQUIRE(got.dtype() == DType::BF16);
  for (size_t i = 0; i < w.f32.size(); ++i)
    if (got.bf16()[i] != rne_bf16(w.f32[i]) || copy.bf16()[i] != got.bf16()[i])
      FAIL("d.weight[" << i << "]: " << got.bf16()[i] << " / " << copy.bf16()[i] << " != " << rne_bf16(w.f32[i]));
  // A view into the store's mapping of the cache file (16 KB: whole pages to give back), where
  // the uncached read is a private copy (nothing of a mapping).
  CHECK(ws.drop(got) >= 4096);
  CHECK(plain.drop(copy) == 0);
  const Tensor a = ws.get_as("a.weight", DType::BF16, {3, 5});
  for (size_t i = 0; i < ts[0].half.size(); ++i) CHECK(a.bf16()[i] == rne_bf16(f16_to_f32(ts[0].half[i])));
  // What is not asked for in bf16 stays as it was: f32 reads, the BF16 tensor in place.
  CHECK(ws.get("d.weight").dtype() == DType::F32);
  CHECK(ws.get("d.weight").f32()[3] == w.f32[3]);
  CHECK(ws.get("b.weight").dtype() == DType::BF16);
  CHECK(ws.get_as("b.weight", DType::BF16, {1000}).data() == ws.get("b.weight").data());
  REQUIRE_THROWS_WITH(ws.get_as("d.weight", DType::BF16, {128, 64}), Catch::Contains("wrong shape"));

  // The float32 cache of the same checkpoint is another file beside it.
  WeightStore ws32 = WeightStore::open_dir(dir);
  ws32.use_converted_cache(wc, DType::F32);
  check_values(ws32, ts);
  CHECK(cache_files(wc).size() == 2);
  // A second bf16 store maps the same file: not rewritten.
  const auto before = fs::last_write_time(files[0]);
  WeightStore again = WeightStore::open_dir(dir);
  use_weight_cache(again, DType::BF16, {wc, false});
  CHECK(again.get_as("d.weight", DType::BF16, {64, 128}).bf16()[5] == rne_bf16(w.f32[5]));
  CHECK(fs::last_write_time(files[0]) == before);
}

TEST_CASE("weight cache: a conversion removes this host's copies of deleted or changed checkpoints, not other hosts'",
          "[runtime][cache]") {
  dit_test::TempDir d;
  const std::string dir = d.path() + "/m", src = dir + "/diffusion_pytorch_model.safetensors", wc = d.path() + "/wc";
  fs::create_directories(dir);
  fs::create_directories(wc);
  auto copy_of = [&](const std::string& host, const std::string& source) {
    return nlohmann::json{{"dit_cache_version", "1"}, {"dit_source", source}, {"dit_source_size", "8"},
                          {"dit_source_mtime_ns", "1"}, {"dit_host", host}};
  };
  const std::string gone = d.path() + "/gone.safetensors";
  write_raw(wc + "/mine-gone-0123456789abcdef.f32.safetensors", sample(3, 4), copy_of(host_name(), gone));
  write_raw(wc + "/mine-changed-0123456789abcdef.f32.safetensors", sample(3, 4), copy_of(host_name(), src));
  write_raw(wc + "/theirs-0123456789abcdef.f32.safetensors", sample(3, 4), copy_of("elsewhere", gone));
  nlohmann::json no_host = copy_of(host_name(), gone);
  no_host.erase("dit_host");  // an earlier build's
  write_raw(wc + "/old-0123456789abcdef.f32.safetensors", sample(3, 4), no_host);
  nlohmann::json bad_size = copy_of(host_name(), gone);
  bad_size["dit_source_size"] = "lots";
  write_raw(wc + "/odd-0123456789abcdef.f32.safetensors", sample(3, 4), bad_size);
  dit_test::write_bytes(wc + "/damaged.safetensors", "not a safetensors file");
  write_raw(src, sample(1));  // exists now, with another size and time than the copy above says
  WeightStore ws = WeightStore::open_dir(dir);
  ws.use_converted_cache(wc, DType::F32);
  check_values(ws, sample(1));
  std::vector<std::string> names;
  for (const std::string& f : cache_files(wc)) names.push_back(fs::path(f).filename().string());
  CHECK(names.size() == 5);  // the new copy, the other host's, the earlier build's, the odd and the damaged file
  for (const char* removed : {"mine-gone-0123456789abcdef.f32.safetensors", "mine-changed-0123456789abcdef.f32.safetensors"})
    CHECK(std::find(names.begin(), names.end(), removed) == names.end());
  for (const char* kept : {"theirs-0123456789abcdef.f32.safetensors", "old-0123456789abcdef.f32.safetensors",
                           "odd-0123456789abcdef.f32.safetensors", "damaged.safetensors"})
    CHECK(std::find(names.begin(), names.end(), kept) != names.end());
}
