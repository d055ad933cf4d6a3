// The file: rendezvous' markers: a marker created by one process is read whole or not at
// all by another. A reader that saw a marker existing but empty ("world" read as "")
// took a generation its peer had just made for a foreign one and opened the next, so
// the two ranks of a run waited in different generations until the timeout.
#include <catch2/catch.hpp>

#include <atomic>
#include <filesystem>
#include <string>
#include <thread>

#include "parallel/rendezvous.h"
#include "parallel/rendezvous_backend.h"

TEST_CASE("file: rendezvous markers are never read half-written", "[parallel][rendezvous]") {
  const std::string dir = dit::make_private_rendezvous_dir();
  auto writer = dit::detail::make_file_backend(dir, "file:" + dir);
  auto reader = dit::detail::make_file_backend(dir, "file:" + dir);
  REQUIRE(writer->create_generation(1));
  constexpr int kMarkers = 3000;
  const std::string value(64, 'v');
  std::atomic<int> partial{0};
  std::thread read_all([&] {
    for (int i = 0; i < kMarkers; i++) {
      const std::string name = "m" + std::to_string(i);
      for (;;) {  // spin until the marker appears, then it must be whole
        auto v = reader->read_marker(1, name);
        if (!v) continue;
        if (*v != value) partial++;
        break;
      }
    }
  });
  int created = 0;
  for (int i = 0; i < kMarkers; i++) created += writer->create_marker(1, "m" + std::to_string(i), value);
  read_all.join();
  CHECK(created == kMarkers);
  CHECK(partial == 0);
  // First wins: a second create of the same marker fails and leaves the first value.
  CHECK_FALSE(writer->create_marker(1, "m0", "other"));
  CHECK(reader->read_marker(1, "m0") == value);
  // No private (temporary) files are left behind.
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir + "/gen-1")) files += e.is_regular_file();
  CHECK(files == size_t(kMarkers));
  dit::remove_rendezvous_dir(dir);
}
