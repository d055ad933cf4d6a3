// Config: typed, error-checked access to a JSON config file (diffusers config.json,
// scheduler_config.json, model_index.json, safetensors index files).
//
// Python's json.dumps writes the non-standard literals Infinity, -Infinity and NaN (e.g.
// "lambda_min_clipped": -Infinity); they are accepted here and read as doubles.
//
//   Config c = Config::load(dir + "/config.json");
//   int64_t layers = c.get_int("num_layers");
//   double lmin = c.get_double("lambda_min_clipped", -INFINITY);
//   Config sub = c.child("weight_map");
//
// Every error is one line naming the file and the key, e.g.
//   "m/config.json: key 'num_layers': expected integer, found string".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace dit {

class Config {
 public:
  Config() = default;
  // Reads and parses `path`; the top level must be a JSON object.
  static Config load(const std::string& path);
  // Parses `text`; `source` names it in error messages (usually the file path).
  static Config parse(const std::string& text, const std::string& source);

  bool has(const std::string& key) const;
  // True when the key is present and its value is null.
  bool is_null(const std::string& key) const;

  // Getters with a default return it when the key is missing or null; the others throw.
  // Integers; a float with an integral value (e.g. 4.0) is accepted too.
  int64_t get_int(const std::string& key) const;
  int64_t get_int(const std::string& key, int64_t dflt) const;
  // An integer in [lo, hi] (dflt when missing or null; dflt is not checked): out-of-range
  // values (2^32 + 4 must not wrap to 4) are "key 'k' = v is out of range (expected lo..hi)".
  int get_int_in(const std::string& key, int dflt, int lo, int hi) const;
  // Any number, including Infinity/-Infinity/NaN.
  double get_double(const std::string& key) const;
  double get_double(const std::string& key, double dflt) const;
  // A finite number in [lo, hi] (dflt when missing or null).
  double get_double_in(const std::string& key, double dflt, double lo, double hi) const;
  bool get_bool(const std::string& key) const;
  bool get_bool(const std::string& key, bool dflt) const;
  std::string get_string(const std::string& key) const;
  std::string get_string(const std::string& key, const std::string& dflt) const;
  std::vector<int64_t> get_int_list(const std::string& key) const;
  std::vector<std::string> get_string_list(const std::string& key) const;
  // A nested object; errors in it name "parent.key".
  Config child(const std::string& key) const;

  const nlohmann::json& json() const { return json_; }
  const std::string& source() const { return source_; }

 private:
  Config(nlohmann::json j, std::string source, std::string prefix);
  const nlohmann::json& at(const std::string& key) const;  // throws if missing
  const nlohmann::json* find(const std::string& key) const;  // null if missing or null
  [[noreturn]] void type_error(const std::string& key, const char* expected, const nlohmann::json& found) const;
  std::string where(const std::string& key) const;

  nlohmann::json json_ = nlohmann::json::object();
  std::string source_;
  std::string prefix_;  // "a.b." for a child, used in messages
};

}  // namespace dit
