// A writer SIGKILLed mid-write leaves its temporary file (no handler can run); its name
// says who wrote it, and remove_stale_temp_files() removes it once that writer is gone —
// and nothing else: not a live writer's file, not another machine's, not other files.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <set>

#include "io_test_util.h"
#include "runtime/atomic_file.h"
#include "runtime/process_identity.h"

namespace {

std::set<std::string> names(const std::string& dir) {
  std::set<std::string> s;
  for (const auto& e : std::filesystem::directory_iterator(dir)) s.insert(e.path().filename().string());
  return s;
}

}  // namespace

TEST_CASE("temporary files of SIGKILLed writers are recognised and removed", "[io][atomic]") {
  dit_test::TempDir dir;
  const pid_t pid = dit_test::start_partial_writer(dir.file("img.png"));  // then SIGKILLed half-way
  dit_test::kill_writer(pid, SIGKILL);
  const auto left = names(dir.path());
  REQUIRE(left.size() == 1);
  const std::string stale = *left.begin();
  CHECK(stale.rfind("img.png.dit-tmp." + dit::process_table_tag() + "." + std::to_string(pid) + ".", 0) == 0);

  // Neighbours that must survive: a live writer's file (ours, still open), another
  // machine's (other table tag), and names that only look similar.
  dit::AtomicFile live(dir.file("live.png"));
  live.write("y", 1);
  const std::string foreign = "b.png.dit-tmp.00000000." + std::to_string(pid) + ".0badf00d";
  for (const std::string& n : {foreign, std::string("c.png.tmp.123.0badf00d"), std::string("d.dit-tmp.x"),
                               std::string("results.jsonl")})
    dit_test::write_bytes(dir.file(n), "keep");

  CHECK(dit::remove_stale_temp_files(dir.path()) == 1);
  const auto after = names(dir.path());
  CHECK(after.count(stale) == 0);
  CHECK(after.count(foreign) == 1);
  CHECK(after.count("c.png.tmp.123.0badf00d") == 1);
  CHECK(after.count("d.dit-tmp.x") == 1);
  CHECK(after.count("results.jsonl") == 1);
  CHECK(std::filesystem::exists(live.temp_path()));
  CHECK(dit::remove_stale_temp_files(dir.path()) == 0);
  CHECK(dit::remove_stale_temp_files(dir.file("no-such-dir")) == 0);
}
