// Atomic writes replace regular files only: an existing FIFO, device, directory or
// symbolic link at the destination is refused with one line naming the path, and nothing
// is created or changed.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>

#include "io_test_util.h"
#include "runtime/atomic_file.h"

namespace {

bool is_fifo(const std::string& p) {
  struct stat st;
  return ::lstat(p.c_str(), &st) == 0 && S_ISFIFO(st.st_mode);
}

int lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n + 1;
}

}  // namespace

TEST_CASE("an atomic write onto a FIFO is refused and the FIFO stays", "[io][atomic]") {
  dit_test::TempDir dir;
  const std::string fifo = dir.file("out.png");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const std::string err = dit_test::error_of([&] { dit::write_file_atomic(fifo, "x", 1); });
  CHECK(err == fifo + ": is a FIFO, not a regular file; refusing to replace it");
  CHECK(lines(err) == 1);
  CHECK(is_fifo(fifo));
  CHECK(dir.count() == 1);  // no temporary file either
}

TEST_CASE("an atomic write onto a directory or a symbolic link is refused", "[io][atomic]") {
  dit_test::TempDir dir;
  const std::string sub = dir.file("sub");
  std::filesystem::create_directory(sub);
  CHECK(dit_test::error_of([&] { dit::write_file_atomic(sub, "x", 1); }) ==
        sub + ": is a directory, not a regular file; refusing to replace it");
  CHECK(std::filesystem::is_directory(sub));

  const std::string target = dir.file("target.png"), link = dir.file("link.png");
  dit_test::write_bytes(target, "old");
  REQUIRE(::symlink(target.c_str(), link.c_str()) == 0);
  CHECK(dit_test::error_of([&] { dit::write_file_atomic(link, "new", 3); }) ==
        link + ": is a symbolic link, not a regular file; refusing to replace it");
  CHECK(std::filesystem::is_symlink(link));
  CHECK(dit_test::read_bytes(target) == "old");
  CHECK(dir.count() == 3);
}

TEST_CASE("an existing regular file is replaced", "[io][atomic]") {
  dit_test::TempDir dir;
  const std::string p = dir.file("a.npy");
  dit_test::write_bytes(p, "old contents");
  dit::write_file_atomic(p, "new", 3);
  CHECK(dit_test::read_bytes(p) == "new");
  CHECK(dir.count() == 1);
}

TEST_CASE("check_replaceable: devices are refused without touching them", "[io][atomic]") {
  // /dev/null is only examined (lstat), never written: as root, replacing it is the bug.
  CHECK(dit_test::error_of([] { dit::check_replaceable("/dev/null"); }) ==
        "/dev/null: is a character device, not a regular file; refusing to replace it");
  struct stat st;
  REQUIRE(::stat("/dev/null", &st) == 0);
  CHECK(S_ISCHR(st.st_mode));
  CHECK(dit_test::error_of([] { dit::check_replaceable("/nonexistent-dir/x.png"); }) == "<no error>");
  dit_test::TempDir dir;
  CHECK(dit_test::error_of([&] { dit::check_replaceable(dir.file("new.png")); }) == "<no error>");
}
