// Runs every stored input of a fuzz target (its seeds and the regressions: inputs that
// once found a bug) through the harness body, in the normal test suite: each must be
// accepted or refused with dit::Error, nothing else.
#pragma once

#include <catch2/catch.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace dit_fuzz {

// Every file under tests/data/fuzz/<target>/{seeds,regressions}.
inline std::vector<std::string> stored_inputs(const std::string& target) {
  std::vector<std::string> files;
  for (const char* sub : {"seeds", "regressions"}) {
    const std::filesystem::path dir = std::filesystem::path(DIT_TEST_DATA) / "fuzz" / target / sub;
    if (!std::filesystem::is_directory(dir)) continue;
    for (const auto& e : std::filesystem::directory_iterator(dir))
      if (e.is_regular_file()) files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

template <class Harness>
void run_stored_inputs(const std::string& target, Harness harness) {
  const auto files = stored_inputs(target);
  REQUIRE(!files.empty());
  for (const std::string& f : files) {
    INFO(f);
    std::ifstream in(f, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CHECK_NOTHROW(harness(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
  }
}

}  // namespace dit_fuzz
