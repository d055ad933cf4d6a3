#include <catch2/catch.hpp>

#include <cstring>

#include "runtime/npy.h"
#include "runtime/randn.h"
#include "tests/runtime/io_test_util.h"

using namespace dit;
using Catch::Matchers::Contains;
using dit_test::error_of;

TEST_CASE("npy round trip with a NumPy 1.0 header", "[io][npy]") {
  dit_test::TempDir dir;
  Tensor t = torch_randn(42, Shape{1, 4, 32, 32});
  const std::string path = dir.file("x.npy");
  write_npy(path, t);
  std::string bytes = dit_test::read_bytes(path);
  REQUIRE(bytes.size() == 128 + t.nbytes());
  CHECK(bytes.substr(0, 8) == std::string("\x93NUMPY\x01\x00", 8));
  const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 4, 32, 32), }";
  CHECK(bytes.substr(10, 118) == dict + std::string(118 - 1 - dict.size(), ' ') + "\n");
  CHECK(bytes[127] == '\n');
  Tensor r = read_npy(path);
  REQUIRE(r.shape() == t.shape());
  CHECK(std::memcmp(r.data(), t.data(), t.nbytes()) == 0);

  // 1-D and 0-D shapes use Python tuple syntax; bf16 is written as f32.
  Tensor v = torch_randn(1, Shape{17}).to(DType::BF16);
  write_npy(dir.file("v.npy"), v);
  CHECK(dit_test::read_bytes(dir.file("v.npy")).find("'shape': (17,), }") != std::string::npos);
  Tensor v2 = read_npy(dir.file("v.npy"));
  CHECK(v2.shape() == Shape{17});
  CHECK(v2.f32()[3] == bf16_to_f32(v.bf16()[3]));
  Tensor s = Tensor::empty({});
  write_npy(dir.file("s.npy"), s);
  CHECK(dit_test::read_bytes(dir.file("s.npy")).find("'shape': (), }") != std::string::npos);
  CHECK(read_npy(dir.file("s.npy")).shape().empty());
}

TEST_CASE("read_npy rejects malformed files", "[io][npy]") {
  dit_test::TempDir dir;
  auto npy = [](const std::string& dict, size_t data_bytes) {
    std::string h = std::string("\x93NUMPY\x01\x00", 8);
    h += char(dict.size() & 0xff);
    h += char(dict.size() >> 8);
    return h + dict + std::string(data_bytes, '\0');
  };
  struct Case {
    std::string bytes;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {"", "not a .npy file"},
      {"\x93NUMPY", "not a .npy file"},
      {npy("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", 16), "'<f8'"},
      {npy("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", 8), "Fortran"},
      {npy("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", 8), "expected 12 bytes, found 8"},
      {npy("{'descr': '<f4', 'fortran_order': False, 'shape': (-3,), }", 8), "non-negative"},
      {npy("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", 8), "too large"},
      {npy("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", 8), "too large"},
      {npy("{'descr': '<f4', 'fortran_order': False, }", 8), "no shape"},
      {npy("{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2,), }", 8), "True or False"},
      {npy("{'descr: '<f4'", 0), "bad .npy header"},
      {npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2,)", 8).substr(0, 20), "past end of file"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string path = dir.file("bad" + std::to_string(i) + ".npy");
    dit_test::write_bytes(path, cases[i].bytes);
    std::string msg = error_of([&] { read_npy(path); });
    INFO("case " << i << ": " << msg);
    CHECK_THAT(msg, Contains(path) && Contains(cases[i].expect));
  }
  CHECK_THAT(error_of([&] { write_npy(dir.file("none/x.npy"), Tensor::empty({2})); }), Contains("none/x.npy"));
}
