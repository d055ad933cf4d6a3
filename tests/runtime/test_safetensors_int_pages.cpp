// SafeTensorsFile::get_int64 (I64/I32 tensors of golden files) and drop_pages (RSS given back).
#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "io_test_util.h"
#include "runtime/error.h"
#include "runtime/safetensors.h"

using namespace dit;

namespace {

// A safetensors file with raw typed tensors (write_safetensors writes F32/BF16 only).
void write_raw(const std::string& path, const std::vector<std::tuple<std::string, std::string, Shape, std::string>>& t) {
  nlohmann::json h = nlohmann::json::object();
  std::string data;
  for (const auto& [name, dtype, shape, bytes] : t) {
    h[name] = {{"dtype", dtype}, {"shape", shape}, {"data_offsets", {data.size(), data.size() + bytes.size()}}};
    data += bytes;
  }
  std::string header = h.dump();
  header.append((8 - header.size() % 8) % 8, ' ');
  std::ofstream f(path, std::ios::binary);
  const uint64_t n = header.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f << header << data;
}

template <class T>
std::string bytes_of(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

long rss_kb() {
  std::ifstream f("/proc/self/statm");
  long size = 0, resident = 0;
  f >> size >> resident;
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

}  // namespace

TEST_CASE("get_int64 reads I64, I32 and U8 tensors", "[io][safetensors]") {
  dit_test::TempDir dir;
  const std::string p = dir.file("ints.safetensors");
  const std::vector<int64_t> a = {1, -2, int64_t(1) << 40, 0, 7, 9};
  const std::vector<int32_t> b = {-5, 6, 2147483647};
  const std::vector<float> c = {1.5f};
  const std::vector<uint8_t> d = {0, 255, 128, 7};
  write_raw(p, {{"a", "I64", {2, 3}, bytes_of(a)},
                {"b", "I32", {3}, bytes_of(b)},
                {"c", "F32", {1}, bytes_of(c)},
                {"d", "U8", {2, 2}, bytes_of(d)}});
  auto f = SafeTensorsFile::open(p);
  CHECK(f->get_int64("a") == a);
  CHECK(f->get_int64("b") == std::vector<int64_t>{-5, 6, 2147483647});
  CHECK(f->get_int64("d") == std::vector<int64_t>{0, 255, 128, 7});
  try {
    f->get_int64("c");
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()) == p + ": tensor 'c': not an integer tensor (expected I64, I32 or U8, found F32)");
  }
  CHECK_THROWS_AS(f->get("a"), Error);  // get() stays float-only
}

TEST_CASE("get_int64 reads the golden token ids", "[io][safetensors]") {
  auto f = SafeTensorsFile::open(std::string(DIT_TEST_DATA) + "/golden/pixart-tiny/encode.L16.safetensors");
  const std::vector<int64_t> ids = f->get_int64("input_ids"), mask = f->get_int64("attention_mask");
  REQUIRE(ids.size() == 48);
  CHECK(ids[15] == 1);  // the truncated long prompt ends with </s>
  CHECK(ids[32] == 1);  // "" -> [1, 0, ...]
  CHECK(mask[32] == 1);
  CHECK(mask[33] == 0);
}

TEST_CASE("drop_pages gives the mapping's resident pages back and keeps views valid", "[io][safetensors][memory]") {
  dit_test::TempDir dir;
  const std::string p = dir.file("big.safetensors");
  const int64_t n = 16 << 20;  // 64 MB of f32
  {
    Tensor t = Tensor::empty({n});
    for (int64_t i = 0; i < n; ++i) t.f32()[i] = float(i % 1000);
    write_safetensors(p, {{"w", t}});
  }
  auto f = SafeTensorsFile::open(p);
  Tensor w = f->get("w");
  const long before = rss_kb();
  double sum = 0;
  for (int64_t i = 0; i < n; i += 1024) sum += w.f32()[i];  // touch every page
  const long touched = rss_kb();
  CHECK(touched - before > 48 * 1024);
  CHECK(f->drop_pages() >= size_t(n) * 4);
  const long dropped = rss_kb();
  INFO("RSS kB: before " << before << ", touched " << touched << ", dropped " << dropped);
  CHECK(touched - dropped > 48 * 1024);
  double again = 0;
  for (int64_t i = 0; i < n; i += 1024) again += w.f32()[i];  // faults back in from the page cache
  CHECK(again == sum);
}
