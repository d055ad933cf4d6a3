// runtime/environment.h: empty variables count as unset; the cache directory's precedence.
#include <stdlib.h>

#include <catch2/catch.hpp>
#include <string>

#include "runtime/environment.h"
#include "tests/scoped_env.h"

using dit_test::ScopedEnv;

TEST_CASE("environment: an empty variable counts as unset", "[environment]") {
  {
    ScopedEnv e("DIT_TEST_ENV_VALUE", "x y");
    REQUIRE(dit::env_nonempty("DIT_TEST_ENV_VALUE") == std::string("x y"));
  }
  {
    ScopedEnv e("DIT_TEST_ENV_VALUE", "");
    CHECK(dit::env_nonempty("DIT_TEST_ENV_VALUE") == nullptr);
  }
  ScopedEnv e("DIT_TEST_ENV_VALUE", nullptr);
  CHECK(dit::env_nonempty("DIT_TEST_ENV_VALUE") == nullptr);
}

TEST_CASE("environment: the cache directory is the override's, else XDG_CACHE_HOME's, else HOME's .cache, "
          "else the fallback",
          "[environment]") {
  ScopedEnv home("HOME", "/home/someone");
  ScopedEnv over("DIT_TEST_ENV_CACHE", "/srv/cache");
  CHECK(dit::cache_dir("DIT_TEST_ENV_CACHE", "weights") == "/srv/cache");
  ScopedEnv no_over("DIT_TEST_ENV_CACHE", "");
  {
    ScopedEnv xdg("XDG_CACHE_HOME", "/var/cache/someone");
    CHECK(dit::cache_dir("DIT_TEST_ENV_CACHE", "weights") == "/var/cache/someone/dit-gen/weights");
  }
  {
    ScopedEnv xdg("XDG_CACHE_HOME", "");
    CHECK(dit::cache_dir("DIT_TEST_ENV_CACHE", "bench") == "/home/someone/.cache/dit-gen/bench");
  }
  ScopedEnv xdg("XDG_CACHE_HOME", nullptr);
  CHECK(dit::cache_dir("DIT_TEST_ENV_CACHE", "demo-model") == "/home/someone/.cache/dit-gen/demo-model");
  ScopedEnv no_home("HOME", "");
  CHECK(dit::cache_dir("DIT_TEST_ENV_CACHE", "weights").empty());
  CHECK(dit::cache_dir("DIT_TEST_ENV_CACHE", "bench", "/tmp/dit-gen-bench") == "/tmp/dit-gen-bench");
}
