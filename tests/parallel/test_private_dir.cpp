// The launcher's private rendezvous directory (/tmp/dit-rdzv-*): a SIGKILLed launcher
// cannot remove it, so the next one removes it — only when its recorded owner ran on
// this host/boot/pid namespace and is gone.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <filesystem>

#include "parallel/rendezvous.h"
#include "process_util.h"
#include "runtime/process_identity.h"

using namespace dit_test;
using namespace std::chrono_literals;

namespace {

struct TmpBase {
  std::string path;
  TmpBase() {
    char t[] = "/tmp/dit-test-tmpbase-XXXXXX";
    path = mkdtemp(t);
  }
  ~TmpBase() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::vector<std::string> rdzv_dirs() const {
    std::vector<std::string> v;
    for (const auto& e : std::filesystem::directory_iterator(path))
      if (e.path().filename().string().rfind("dit-rdzv-", 0) == 0) v.push_back(e.path().string());
    return v;
  }
};

bool exists(const std::string& p) { return access(p.c_str(), F_OK) == 0; }

}  // namespace

TEST_CASE("a SIGKILLed launcher's rendezvous directory is removed by the next launch", "[parallel][rendezvous]") {
  TmpBase base;
  // A real launcher with 2 ranks that hang after connecting; SIGKILL the launcher itself
  // (its workers die with it: PR_SET_DEATHSIG).
  ReadyDir ready;
  Proc p = spawn_self({{"DIT_PT_MODE", "launch"},
                       {"DIT_PT_WORLD", "2"},
                       {"DIT_PT_SCENARIO", "hang"},
                       {"TMPDIR", base.path},
                       {"DIT_PT_READY_DIR", ready.path}});
  std::vector<std::string> dirs;
  for (int i = 0; i < 200 && dirs.empty(); i++) {
    std::this_thread::sleep_for(20ms);
    dirs = base.rdzv_dirs();
  }
  REQUIRE(dirs.size() == 1);
  REQUIRE(wait_ready(ready.path, 2));
  REQUIRE(kill(p.pid, SIGKILL) == 0);
  Result r = wait_proc(p, 10s);
  CHECK(r.code == 128 + SIGKILL);
  const std::string stale = dirs[0];
  REQUIRE(exists(stale));  // nobody could remove it

  // Neighbours to keep: one without an owner record, one whose owner is alive (us), one
  // recorded on another machine.
  const std::string no_owner = base.path + "/dit-rdzv-noowner", live = base.path + "/dit-rdzv-live",
                    foreign = base.path + "/dit-rdzv-foreign";
  for (const auto& d : {no_owner, live, foreign}) REQUIRE(mkdir(d.c_str(), 0700) == 0);
  std::ofstream(live + "/owner") << dit::process_table_id() << " " << getpid() << "\n";
  std::ofstream(foreign + "/owner") << "otherhost|x|pid:[1] " << p.pid << "\n";

  setenv("TMPDIR", base.path.c_str(), 1);
  const std::string fresh = dit::make_private_rendezvous_dir();
  unsetenv("TMPDIR");
  CHECK_FALSE(exists(stale));
  CHECK(exists(fresh));
  CHECK(exists(no_owner));
  CHECK(exists(live));
  CHECK(exists(foreign));
  CHECK(dit::remove_stale_rendezvous_dirs(base.path) == 0);  // its own (live) one stays too
  dit::remove_rendezvous_dir(fresh);
  CHECK_FALSE(exists(fresh));
}
