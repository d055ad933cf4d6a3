// libFuzzer harness: the JSON config reader. The input is a config file's text; it is
// parsed with Config::parse and every key of it (and of nested objects, two levels deep)
// is read with every typed getter, with and without a default, so each type mismatch
// path runs. Only dit::Error may come out.
//
//   build-fuzz/bin/fuzz_json_config -dict=tests/data/fuzz/json_config/dict corpus/json_config tests/data/fuzz/json_config/seeds
//
// The harness body, shared by the libFuzzer binary (fuzz_<target>.cpp) and the normal
// suite, which runs every seed and regression input through it (test_fuzz_inputs.cpp).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "runtime/json_config.h"

namespace dit_fuzz {
namespace detail {

inline void read_every_key(const dit::Config& c, int depth) {
  if (!c.json().is_object()) return;
  for (auto it = c.json().begin(); it != c.json().end(); ++it) {
    const std::string& k = it.key();
    (void)c.has(k);
    (void)c.is_null(k);
    dit_fuzz::accepts([&] { (void)c.get_int(k); });
    dit_fuzz::accepts([&] { (void)c.get_int(k, 7); });
    dit_fuzz::accepts([&] { (void)c.get_double(k); });
    dit_fuzz::accepts([&] { (void)c.get_double(k, 0.5); });
    dit_fuzz::accepts([&] { (void)c.get_bool(k); });
    dit_fuzz::accepts([&] { (void)c.get_bool(k, true); });
    dit_fuzz::accepts([&] { (void)c.get_string(k); });
    dit_fuzz::accepts([&] { (void)c.get_string(k, "x"); });
    dit_fuzz::accepts([&] { (void)c.get_int_list(k); });
    dit_fuzz::accepts([&] { (void)c.get_string_list(k); });
    dit_fuzz::accepts([&] {
      const dit::Config sub = c.child(k);
      if (depth < 2) read_every_key(sub, depth + 1);
    });
  }
  // Keys that are not there: the defaults, and the "missing key" errors.
  dit_fuzz::accepts([&] { (void)c.get_int("\u0001missing"); });
  (void)c.get_string("\u0001missing", "d");
}

}  // namespace detail

inline int json_config(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  dit_fuzz::accepts([&] { detail::read_every_key(dit::Config::parse(text, "fuzz/config.json"), 0); });
  return 0;
}

}  // namespace dit_fuzz
