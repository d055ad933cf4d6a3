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
  int pipefd[2];
  REQUIRE(::pipe(pipefd) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {  // child: open the file, write half, signal readiness, wait to be killed
    dit::remove_partial_files_on_signal();
    dit::AtomicFile f(dest);
    f.write("partial", 7);
    (void)::write(pipefd[1], "x", 1);
    ::pause();
    ::_exit(0);
  }
  char c;
  REQUIRE(::read(pipefd[0], &c, 1) == 1);
  CHECK(dir.count() == 1);  // the temporary file exists while the write is in progress
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGTERM);
  CHECK(dir.count() == 0);
  CHECK_FALSE(std::filesystem::exists(dest));
  ::close(pipefd[0]);
  ::close(pipefd[1]);
}
