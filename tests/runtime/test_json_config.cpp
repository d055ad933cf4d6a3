#include <catch2/catch.hpp>

#include <cmath>

#include "runtime/json_config.h"
#include "tests/runtime/io_test_util.h"

using namespace dit;
using Catch::Matchers::Contains;
using dit_test::error_of;

TEST_CASE("Config accepts Python's Infinity, -Infinity and NaN", "[io][json]") {
  Config c = Config::parse(R"({"a": Infinity, "b": -Infinity, "c": NaN, "l": [1, NaN, -Infinity],
                              "s": "Infinity and NaN", "e": "quote \" Infinity \\", "n": {"x": -Infinity}})",
                           "cfg.json");
  CHECK(c.get_double("a") == INFINITY);
  CHECK(c.get_double("b") == -INFINITY);
  CHECK(std::isnan(c.get_double("c")));
  CHECK(c.get_string("s") == "Infinity and NaN");
  CHECK(c.get_string("e") == "quote \" Infinity \\");
  CHECK(c.child("n").get_double("x") == -INFINITY);
  CHECK(std::isnan(c.json()["l"][1].get<double>()));
  CHECK(c.json()["l"][2].get<double>() == -INFINITY);
  CHECK_THAT(error_of([&] { c.get_int("a"); }), Contains("cfg.json") && Contains("'a'") && Contains("integer"));
  // Not a literal when glued to other identifier characters.
  CHECK_THAT(error_of([] { Config::parse(R"({"a": Infinityx})", "x.json"); }), Contains("x.json: invalid JSON"));
  CHECK_THAT(error_of([] { Config::parse(R"({"a": "\u0001dit:+inf"})", "y.json"); }), Contains("y.json"));
}

TEST_CASE("Config typed getters and defaults", "[io][json]") {
  Config c = Config::parse(R"({"i": 12, "f": 0.5, "fi": 4.0, "big": 18446744073709551615, "t": true,
                              "s": "x", "nul": null, "il": [1, 2, 3], "sl": ["a", "b"], "bad": [1, "2"],
                              "o": {"k": 1, "deep": {"z": "q"}}})",
                           "m/config.json");
  CHECK(c.get_int("i") == 12);
  CHECK(c.get_int("fi") == 4);
  CHECK(c.get_double("i") == 12.0);
  CHECK(c.get_double("f") == 0.5);
  CHECK(c.get_bool("t"));
  CHECK(c.get_string("s") == "x");
  CHECK(c.get_int_list("il") == std::vector<int64_t>{1, 2, 3});
  CHECK(c.get_string_list("sl") == std::vector<std::string>{"a", "b"});
  CHECK(c.has("nul"));
  CHECK(c.is_null("nul"));
  CHECK_FALSE(c.is_null("i"));
  CHECK_FALSE(c.is_null("missing"));
  CHECK_FALSE(c.has("missing"));
  CHECK(c.get_int("missing", 7) == 7);
  CHECK(c.get_int("nul", 7) == 7);
  CHECK(c.get_double("nul", 1.5) == 1.5);
  CHECK(c.get_bool("missing", true));
  CHECK(c.get_string("nul", "d") == "d");
  CHECK(c.get_int("i", 7) == 12);
  CHECK(c.child("o").child("deep").get_string("z") == "q");
  CHECK(c.source() == "m/config.json");

  CHECK_THAT(error_of([&] { c.get_int("missing"); }), Contains("m/config.json") && Contains("'missing'") && Contains("missing"));
  CHECK_THAT(error_of([&] { c.get_int("s"); }),
             Contains("m/config.json: key 's'") && Contains("expected integer") && Contains("found string"));
  CHECK_THAT(error_of([&] { c.get_int("f"); }), Contains("expected integer") && Contains("0.5"));
  CHECK_THAT(error_of([&] { c.get_int("big"); }), Contains("'big'") && Contains("expected integer"));
  CHECK_THAT(error_of([&] { c.get_bool("i"); }), Contains("expected boolean"));
  CHECK_THAT(error_of([&] { c.get_string("i", "d"); }), Contains("expected string"));
  CHECK_THAT(error_of([&] { c.get_double("s"); }), Contains("expected number"));
  CHECK_THAT(error_of([&] { c.get_int_list("bad"); }), Contains("'bad[1]'") && Contains("expected integer"));
  CHECK_THAT(error_of([&] { c.get_string_list("il"); }), Contains("'il[0]'") && Contains("expected string"));
  CHECK_THAT(error_of([&] { c.child("i"); }), Contains("expected object"));
  CHECK_THAT(error_of([&] { c.child("o").get_int("nope"); }), Contains("m/config.json: key 'o.nope'"));
  CHECK_THAT(error_of([&] { c.child("o").child("deep").get_int("z"); }), Contains("key 'o.deep.z'"));
}

TEST_CASE("Config load errors name the file", "[io][json]") {
  dit_test::TempDir dir;
  CHECK_THAT(error_of([&] { Config::load(dir.file("none.json")); }), Contains(dir.file("none.json")) && Contains("cannot open"));
  dit_test::write_bytes(dir.file("bad.json"), "{\"a\": 1,}");
  CHECK_THAT(error_of([&] { Config::load(dir.file("bad.json")); }), Contains(dir.file("bad.json")) && Contains("invalid JSON"));
  dit_test::write_bytes(dir.file("arr.json"), "[1, 2]");
  CHECK_THAT(error_of([&] { Config::load(dir.file("arr.json")); }), Contains("top level") && Contains("array"));
  CHECK_THAT(error_of([] { Config::parse("", "empty.json"); }), Contains("empty.json: invalid JSON"));
  const std::string deep = "{\"a\": " + std::string(100000, '[') + std::string(100000, ']') + "}";
  CHECK_THAT(error_of([&] { Config::parse(deep, "deep.json"); }), Contains("deep.json") && Contains("nested too deeply"));
  // Brackets inside strings do not count.
  CHECK(Config::parse("{\"a\": \"" + std::string(1000, '[') + "\"}", "s.json").get_string("a").size() == 1000);
  dit_test::write_bytes(dir.file("ok.json"), R"({"lambda_min_clipped": -Infinity, "steps": 1000})");
  Config c = Config::load(dir.file("ok.json"));
  CHECK(c.get_double("lambda_min_clipped") == -INFINITY);
  CHECK(c.get_int("steps") == 1000);
}

TEST_CASE("Config reads the golden scheduler config", "[io][json]") {
  Config c = Config::load(std::string(DIT_TEST_DATA) + "/dit-tiny/scheduler/scheduler_config.json");
  CHECK(c.has("num_train_timesteps"));
  CHECK(c.get_int("num_train_timesteps") > 0);
}
