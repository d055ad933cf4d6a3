// A process stopped by a signal in the middle of an atomic write leaves neither the
// destination nor its temporary file behind (remove_partial_files_on_signal).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>

#include "io_test_util.h"
#include "runtime/atomic_file.h"

TEST_CASE("a write interrupted by SIGTERM leaves no partial file", "[io][atomic]") {
  dit_test::TempDir dir;
  const std::string dest = dir.file("out.png");
  // A child opens the file, writes half and waits to be killed.
  const pid_t pid = dit_test::start_partial_writer(dest, /*handler=*/true);
  CHECK(dir.count() == 1);  // the temporary file exists while the write is in progress
  const int status = dit_test::kill_writer(pid, SIGTERM);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGTERM);
  CHECK(dir.count() == 0);
  CHECK_FALSE(std::filesystem::exists(dest));
}
