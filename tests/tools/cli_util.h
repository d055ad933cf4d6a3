// Runs the built command-line tools as a user would and captures what they print.
#pragma once

#include <stdlib.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace dit_test {

inline std::string data_path(const std::string& rel) { return std::string(DIT_TEST_DATA) + "/" + rel; }
inline std::string bin(const std::string& name) { return std::string(DIT_BIN_DIR) + "/" + name; }
// The dit-gen command line with `args`, without the progress bar.
inline std::string gen(const std::string& args) { return bin("dit-gen") + " --progress none " + args; }

struct RunResult {
  int code = -1;
  std::string out, err;
};

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
}

inline std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

class Scratch {
 public:
  Scratch() {
    char tmpl[] = "/tmp/dit-cli-test-XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~Scratch() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The tools' default converted-weight cache ($DIT_WEIGHT_CACHE, else ~/.cache/dit-gen/weights)
// points into a directory of this test process, removed when it exits: the suite never writes
// into the user's cache (it used to leave an entry there per run). A value set by whoever runs
// the tests is kept; a test that names --weight-cache or sets the variable itself still wins.
inline void isolate_weight_cache() {
  static const Scratch dir;
  static const bool set = ::setenv("DIT_WEIGHT_CACHE", dir.file("weight-cache").c_str(), /*overwrite=*/0) == 0;
  (void)set;
}

// Runs `cmd` through the shell with stdout/stderr captured; returns the exit code.
inline RunResult run(const std::string& cmd) {
  isolate_weight_cache();
  static int counter = 0;
  Scratch s;
  const std::string o = s.file("out" + std::to_string(counter)), e = s.file("err" + std::to_string(counter++));
  const int status = std::system((cmd + " > " + o + " 2> " + e + " < /dev/null").c_str());
  RunResult r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(o);
  r.err = slurp(e);
  return r;
}

inline int count_lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n + (!s.empty() && s.back() != '\n');
}

}  // namespace dit_test
