#include <catch2/catch.hpp>

#include <stb/stb_image.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>

#include "runtime/png.h"
#include "tests/runtime/io_test_util.h"

using namespace dit;
using Catch::Matchers::Contains;
using dit_test::error_of;

TEST_CASE("crc32 matches the standard check value", "[io][png]") {
  const char* s = "123456789";
  CHECK(crc32(reinterpret_cast<const uint8_t*>(s), 9) == 0xCBF43926u);
  // Incremental use gives the same result.
  CHECK(crc32(reinterpret_cast<const uint8_t*>(s) + 4, 5, crc32(reinterpret_cast<const uint8_t*>(s), 4)) == 0xCBF43926u);
}

TEST_CASE("PNG round trip is pixel exact and keeps the parameters text", "[io][png]") {
  dit_test::TempDir dir;
  const int w = 13, h = 7;
  std::vector<uint8_t> rgb(size_t(w) * h * 3);
  for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = uint8_t((i * 37 + 11) % 256);
  const std::string params = "prompt: ein Bild – größer ✓ 日本語, seed: 42\nsteps: 50";
  const std::string path = dir.file("out.png");
  write_png(path, rgb.data(), w, h, params);
  CHECK(dir.count() == 1);

  int rw = 0, rh = 0, rc = 0;
  unsigned char* px = stbi_load(path.c_str(), &rw, &rh, &rc, 3);
  REQUIRE(px != nullptr);
  CHECK(rw == w);
  CHECK(rh == h);
  CHECK(rc == 3);
  CHECK(std::memcmp(px, rgb.data(), rgb.size()) == 0);
  stbi_image_free(px);

  CHECK(read_png_text(path, "parameters") == params);
  // The iTXt chunk directly follows IHDR.
  std::string bytes = dit_test::read_bytes(path);
  CHECK(bytes.compare(33 + 4, 4, "iTXt") == 0);
  CHECK_THAT(error_of([&] { read_png_text(path, "Comment"); }), Contains(path) && Contains("'Comment'"));

  // A flipped byte in the text chunk is detected by the CRC check.
  bytes[33 + 8 + 3] ^= 1;
  dit_test::write_bytes(dir.file("bad.png"), bytes);
  CHECK_THAT(error_of([&] { read_png_text(dir.file("bad.png"), "parameters"); }), Contains("CRC mismatch"));
  dit_test::write_bytes(dir.file("short.png"), bytes.substr(0, 40));
  CHECK_THAT(error_of([&] { read_png_text(dir.file("short.png"), "parameters"); }), Contains("truncated"));
  dit_test::write_bytes(dir.file("text.png"), "hello");
  CHECK_THAT(error_of([&] { read_png_text(dir.file("text.png"), "parameters"); }), Contains("not a PNG"));
}

TEST_CASE("write_png to an unwritable path throws and leaves no file", "[io][png]") {
  dit_test::TempDir dir;
  const uint8_t px[3] = {1, 2, 3};
  const std::string missing = dir.file("no/such/dir/x.png");
  CHECK_THAT(error_of([&] { write_png(missing, px, 1, 1, "p"); }), Contains(missing));
  dit_test::write_bytes(dir.file("file"), "x");  // a regular file used as a directory: fails even for root
  CHECK_THAT(error_of([&] { write_png(dir.file("file/x.png"), px, 1, 1, "p"); }), Contains("file/x.png"));
  CHECK(dir.count() == 1);
  std::remove(dir.file("file").c_str());
  ::chmod(dir.path().c_str(), 0500);
  const std::string ro = dir.file("x.png");
  std::string msg = error_of([&] { write_png(ro, px, 1, 1, "p"); });
  ::chmod(dir.path().c_str(), 0700);
  if (::geteuid() != 0) CHECK_THAT(msg, Contains(ro));  // root ignores directory permissions
  if (::geteuid() != 0) CHECK(dir.count() == 0);
  CHECK_THAT(error_of([&] { write_png(dir.file("y.png"), px, 0, 1, "p"); }), Contains("bad image size"));
}

TEST_CASE("image_to_rgb8 rounds like numpy and clamps", "[io][png]") {
  // 3 channels x 1 x 4 pixels
  const float chw[12] = {0.0f, 1.0f, 0.5f, 1.5f,                               // R: 0, 255, 127.5 -> 128, clamp
                         -0.2f, 2.5f / 255.0f, 3.5f / 255.0f, NAN,              // G: clamp, 2.5 -> 2, 3.5 -> 4, NaN
                         0.25f, 100.4f / 255.0f, 100.6f / 255.0f, 254.5f / 255.0f};  // B
  std::vector<uint8_t> rgb = image_to_rgb8(chw, 1, 4);
  REQUIRE(rgb.size() == 12);
  const uint8_t want[12] = {0, 0, 64, 255, 2, 100, 128, 4, 101, 255, 0, 254};
  for (int i = 0; i < 12; ++i) {
    INFO("byte " << i);
    CHECK(int(rgb[i]) == int(want[i]));
  }
}
