// The converted-weight cache (runtime/weight_cache.h): F16/BF16 tensors served as float32
// from a file made once, reused while the source is unchanged, remade when it changes or
// is damaged, made once when several processes ask at the same time.
#include <catch2/catch.hpp>

#include <fcntl.h>
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
void write_raw(const std::string& path, const std::vector<Raw>& ts) {
  nlohmann::json h = nlohmann::json::object();
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
  ws.use_f32_cache(wc);
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
  ws2.use_f32_cache(wc);
  check_values(ws2, ts);
  CHECK(cache_files(wc) == files);
  CHECK(fs::last_write_time(files[0]) == before);
}

TEST_CASE("weight cache: a changed checkpoint gets a new entry, a damaged entry is remade", "[runtime][cache]") {
  dit_test::TempDir d;
  const std::string dir = d.path() + "/m", src = dir + "/diffusion_pytorch_model.safetensors", wc = d.path() + "/wc";
  fs::create_directories(dir);
  write_raw(src, sample(1));
  {
    WeightStore ws = WeightStore::open_dir(dir);
    ws.use_f32_cache(wc);
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
    ws.use_f32_cache(wc);
    check_values(ws, ts2);
  }
  const auto second = cache_files(wc);
  CHECK(second.size() == 2);
  // Truncate the current entry (a full disk, a killed copy): it is made again.
  std::string current;
  for (const auto& f : second)
    if (f != first[0]) current = f;
  REQUIRE(!current.empty());
  fs::resize_file(current, 100);
  WeightStore ws = WeightStore::open_dir(dir);
  ws.use_f32_cache(wc);
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
      int rc = 0;
      try {
        WeightStore ws = WeightStore::open_dir(dir);
        ws.use_f32_cache(wc);
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

TEST_CASE("weight cache: off for bf16 compute and for all-F32 files; failures as the option says", "[runtime][cache]") {
  dit_test::TempDir d;
  const std::string dir = d.path() + "/m";
  fs::create_directories(dir);
  const auto ts = sample(4);
  write_raw(dir + "/diffusion_pytorch_model.safetensors", ts);
  {
    WeightStore ws = WeightStore::open_dir(dir);
    use_weight_cache(ws, DType::BF16, {d.path() + "/wc", false});  // bf16 compute uses the BF16 tensors in place
    CHECK(ws.get("b.weight").dtype() == DType::BF16);
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
    ws.use_f32_cache(d.path() + "/wc2");
    CHECK_FALSE(fs::exists(d.path() + "/wc2"));  // nothing to convert: no cache, no directory
  }
}
