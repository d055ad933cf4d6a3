#include "runtime/json_config.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

#include "runtime/error.h"
#include "runtime/printable.h"

namespace dit {
namespace {

// Python's non-standard literals are replaced, outside strings, by these marker strings
// before parsing and turned back into doubles afterwards. A real JSON string can only
// contain U+0001 through the escape "\u0001" (raw control characters are invalid JSON),
// and parse() refuses text containing "\u0001dit:", so markers cannot collide.
const char* const kMarkPosInf = "\x01" "dit:+inf";
const char* const kMarkNegInf = "\x01" "dit:-inf";
const char* const kMarkNaN = "\x01" "dit:nan";

bool is_ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

bool literal_at(const std::string& s, size_t i, const std::string& lit) {
  if (s.compare(i, lit.size(), lit) != 0) return false;
  size_t end = i + lit.size();
  return end == s.size() || !is_ident_char(s[end]);
}

std::string marker_json(const char* mark) {
  // "\u0001dit:+inf" as a JSON string literal.
  return std::string("\"\\u0001") + (mark + 1) + "\"";
}

// Deeper nesting is refused before parsing: JSON values are copied and destroyed recursively.
constexpr int kMaxDepth = 256;

// Copies `text`, replacing Infinity, -Infinity and NaN outside strings by marker strings.
// Sets *max_depth to the deepest nesting of [ and { seen.
std::string replace_nonfinite_literals(const std::string& text, int* max_depth) {
  std::string out;
  out.reserve(text.size() + 16);
  bool in_string = false;
  int depth = 0;
  *max_depth = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (!in_string && (c == '{' || c == '[')) *max_depth = std::max(*max_depth, ++depth);
    if (!in_string && (c == '}' || c == ']')) --depth;
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < text.size()) out += text[++i];  // skip the escaped char
      else if (c == '"') in_string = false;
      continue;
    }
    bool boundary = i == 0 || !is_ident_char(text[i - 1]);
    if (c == '"') {
      in_string = true;
      out += c;
    } else if (boundary && literal_at(text, i, "Infinity")) {
      out += marker_json(kMarkPosInf);
      i += 7;
    } else if (boundary && literal_at(text, i, "-Infinity")) {
      out += marker_json(kMarkNegInf);
      i += 8;
    } else if (boundary && literal_at(text, i, "NaN")) {
      out += marker_json(kMarkNaN);
      i += 2;
    } else {
      out += c;
    }
  }
  return out;
}

// Turns marker strings back into ±inf / NaN numbers, in place.
void restore_nonfinite(nlohmann::json& j) {
  if (j.is_string()) {
    const std::string& s = j.get_ref<const std::string&>();
    if (s == kMarkPosInf) j = std::numeric_limits<double>::infinity();
    else if (s == kMarkNegInf) j = -std::numeric_limits<double>::infinity();
    else if (s == kMarkNaN) j = std::numeric_limits<double>::quiet_NaN();
  } else if (j.is_structured()) {
    for (auto& v : j) restore_nonfinite(v);
  }
}

std::string describe_value(const nlohmann::json& j) {
  if (j.is_structured() || j.is_null()) return j.type_name();  // containers may be large: type only
  std::string d = j.dump();
  if (d.size() > 40) d = d.substr(0, 37) + "...";
  return std::string(j.type_name()) + " " + d;
}

}  // namespace

Config::Config(nlohmann::json j, std::string source, std::string prefix)
    : json_(std::move(j)), source_(std::move(source)), prefix_(std::move(prefix)) {}

Config Config::load(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) DIT_FAIL(path << ": cannot open config file: " << std::strerror(errno));
  // Opening a FIFO would block until a writer comes; a device could be read forever.
  DIT_CHECK(S_ISREG(st.st_mode), path << ": not a regular file (a config file must be one)");
  std::ifstream in(path, std::ios::binary);
  if (!in) DIT_FAIL(path << ": cannot open config file: " << std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) DIT_FAIL(path << ": error reading config file");
  return parse(ss.str(), path);
}

Config Config::parse(const std::string& text, const std::string& source) {
  DIT_CHECK(text.find("\\u0001dit:") == std::string::npos,
            source << ": unsupported string content \"\\u0001dit:\" in JSON");
  int depth = 0;
  std::string prepared = replace_nonfinite_literals(text, &depth);
  DIT_CHECK(depth <= kMaxDepth, source << ": JSON nested too deeply (expected <= " << kMaxDepth << " levels, found "
                                       << depth << ")");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(prepared);
  } catch (const nlohmann::json::exception& e) {
    DIT_FAIL(source << ": invalid JSON: " << printable(e.what(), 300));
  }
  restore_nonfinite(j);
  DIT_CHECK(j.is_object(), source << ": expected a JSON object at top level, found " << j.type_name());
  return Config(std::move(j), source, "");
}

std::string Config::where(const std::string& key) const {
  return source_ + ": key '" + printable(prefix_ + key) + "'";
}

void Config::type_error(const std::string& key, const char* expected, const nlohmann::json& found) const {
  DIT_FAIL(where(key) << ": expected " << expected << ", found " << describe_value(found));
}

bool Config::has(const std::string& key) const { return json_.contains(key); }

bool Config::is_null(const std::string& key) const {
  auto it = json_.find(key);
  return it != json_.end() && it->is_null();
}

const nlohmann::json& Config::at(const std::string& key) const {
  auto it = json_.find(key);
  if (it == json_.end()) DIT_FAIL(where(key) << ": missing");
  return *it;
}

const nlohmann::json* Config::find(const std::string& key) const {
  auto it = json_.find(key);
  if (it == json_.end() || it->is_null()) return nullptr;
  return &*it;
}

static bool json_to_int(const nlohmann::json& v, int64_t* out) {
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u > uint64_t(std::numeric_limits<int64_t>::max())) return false;
    *out = int64_t(u);
    return true;
  }
  if (v.is_number_integer()) {
    *out = v.get<int64_t>();
    return true;
  }
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (!(std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15)) return false;
    *out = int64_t(d);
    return true;
  }
  return false;
}

int64_t Config::get_int(const std::string& key) const {
  const nlohmann::json& v = at(key);
  int64_t r = 0;
  if (!json_to_int(v, &r)) type_error(key, "integer", v);
  return r;
}

int64_t Config::get_int(const std::string& key, int64_t dflt) const {
  return find(key) ? get_int(key) : dflt;
}

int Config::get_int_in(const std::string& key, int dflt, int lo, int hi) const {
  if (!find(key)) return dflt;
  const int64_t v = get_int(key);
  if (v < lo || v > hi)
    throw Error(where(key) + " = " + std::to_string(v) + " is out of range (expected " + std::to_string(lo) + ".." +
                std::to_string(hi) + ")");
  return int(v);
}

double Config::get_double_in(const std::string& key, double dflt, double lo, double hi) const {
  if (!find(key)) return dflt;
  const double v = get_double(key);
  if (!(v >= lo && v <= hi)) {  // NaN fails too
    std::ostringstream os;
    os << where(key) << " = " << v << " is out of range (expected a finite number in " << lo << ".." << hi << ")";
    throw Error(os.str());
  }
  return v;
}

double Config::get_double(const std::string& key) const {
  const nlohmann::json& v = at(key);
  if (!v.is_number()) type_error(key, "number", v);
  return v.get<double>();
}

double Config::get_double(const std::string& key, double dflt) const {
  return find(key) ? get_double(key) : dflt;
}

bool Config::get_bool(const std::string& key) const {
  const nlohmann::json& v = at(key);
  if (!v.is_boolean()) type_error(key, "boolean", v);
  return v.get<bool>();
}

bool Config::get_bool(const std::string& key, bool dflt) const {
  return find(key) ? get_bool(key) : dflt;
}

std::string Config::get_string(const std::string& key) const {
  const nlohmann::json& v = at(key);
  if (!v.is_string()) type_error(key, "string", v);
  return v.get<std::string>();
}

std::string Config::get_string(const std::string& key, const std::string& dflt) const {
  return find(key) ? get_string(key) : dflt;
}

std::vector<int64_t> Config::get_int_list(const std::string& key) const {
  const nlohmann::json& v = at(key);
  if (!v.is_array()) type_error(key, "list of integers", v);
  std::vector<int64_t> out;
  for (size_t i = 0; i < v.size(); ++i) {
    int64_t x = 0;
    if (!json_to_int(v[i], &x)) type_error(key + "[" + std::to_string(i) + "]", "integer", v[i]);
    out.push_back(x);
  }
  return out;
}

std::vector<std::string> Config::get_string_list(const std::string& key) const {
  const nlohmann::json& v = at(key);
  if (!v.is_array()) type_error(key, "list of strings", v);
  std::vector<std::string> out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string()) type_error(key + "[" + std::to_string(i) + "]", "string", v[i]);
    out.push_back(v[i].get<std::string>());
  }
  return out;
}

Config Config::child(const std::string& key) const {
  const nlohmann::json& v = at(key);
  if (!v.is_object()) type_error(key, "object", v);
  return Config(v, source_, prefix_ + key + ".");
}

}  // namespace dit
