#include "tools/cli/batch_items.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "runtime/error.h"
#include "runtime/printable.h"

namespace dit::cli {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string trim(const std::string& s) {
  const char* ws = " \t\r\n\v\f";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

std::string index_name(int index, const std::string& prompt) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%05d-", index);
  return buf + slugify(prompt) + ".png";
}

// Nesting depth of a JSON text (brackets outside strings), to refuse absurd lines before parsing.
int json_depth(const std::string& s) {
  int depth = 0, max_depth = 0;
  bool in_str = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (in_str) {
      if (c == '\\') ++i;
      else if (c == '"') in_str = false;
    } else if (c == '"') {
      in_str = true;
    } else if (c == '[' || c == '{') {
      max_depth = std::max(max_depth, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return max_depth;
}

const char* type_of(const json& v) { return v.type_name(); }

int get_int(const json& v, const char* key) {
  DIT_CHECK(v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>()),
            "\"" << key << "\" must be an integer, got " << type_of(v) << " " << v.dump());
  const double d = v.get<double>();
  DIT_CHECK(d >= -2147483648.0 && d <= 2147483647.0, "\"" << key << "\" is out of range: " << v.dump());
  return int(d);
}

// A size or length given explicitly: >= 1 (0 would mean "the command line's").
int get_positive(const json& v, const char* key) {
  const int n = get_int(v, key);
  DIT_CHECK(n >= 1, "\"" << key << "\" must be >= 1, got " << n);
  return n;
}

std::string get_string(const json& v, const char* key) {
  DIT_CHECK(v.is_string(), "\"" << key << "\" must be a string, got " << type_of(v) << " " << v.dump());
  return v.get<std::string>();
}

// One key of a JSON Lines item: its name and how its value is applied to the item.
struct ItemKey {
  const char* name;
  void (*apply)(const json& v, BatchItem& it, bool& has_seed);
};

// The keys, in the order the error for an unknown one lists them.
const ItemKey kItemKeys[] = {
    {"prompt",
     [](const json& v, BatchItem& it, bool&) {
       if (v.is_number_unsigned() || v.is_number_integer())
         it.req.prompt = std::to_string(v.get<int64_t>());  // a bare class id
       else
         it.req.prompt = get_string(v, "prompt");
     }},
    {"negative_prompt", [](const json& v, BatchItem& it, bool&) { it.req.negative_prompt = get_string(v, "negative_prompt"); }},
    {"seed",
     [](const json& v, BatchItem& it, bool& has_seed) {
       DIT_CHECK(v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0),
                 "\"seed\" must be a non-negative integer, got " << v.dump());
       it.req.seed = v.get<uint64_t>();
       has_seed = true;
     }},
    {"steps", [](const json& v, BatchItem& it, bool&) { it.req.steps = get_int(v, "steps"); }},
    {"guidance_scale",
     [](const json& v, BatchItem& it, bool&) {
       DIT_CHECK(v.is_number(), "\"guidance_scale\" must be a number, got " << type_of(v) << " " << v.dump());
       it.req.guidance_scale = v.get<double>();
     }},
    {"sampler", [](const json& v, BatchItem& it, bool&) { it.req.sampler = get_string(v, "sampler"); }},
    {"width", [](const json& v, BatchItem& it, bool&) { it.req.width = get_positive(v, "width"); }},
    {"height", [](const json& v, BatchItem& it, bool&) { it.req.height = get_positive(v, "height"); }},
    {"max_sequence_length",
     [](const json& v, BatchItem& it, bool&) { it.req.max_sequence_length = get_positive(v, "max_sequence_length"); }},
    {"resolution_binning",
     [](const json& v, BatchItem& it, bool&) {
       DIT_CHECK(v.is_boolean(), "\"resolution_binning\" must be true or false, got " << v.dump());
       it.req.resolution_binning = v.get<bool>();
     }},
    {"output",
     [](const json& v, BatchItem& it, bool&) {
       const std::string out = get_string(v, "output");
       check_item_output(out);
       it.output = out;
     }},
};

const ItemKey& item_key(const std::string& key) {
  for (const ItemKey& k : kItemKeys)
    if (key == k.name) return k;
  std::string names;
  for (const ItemKey& k : kItemKeys) names += std::string(names.empty() ? "" : ", ") + k.name;
  DIT_FAIL("unknown key \"" << printable(key) << "\" (expected " << names << ")");
}

// Applies one JSON object's keys to the item (which holds the command-line defaults).
void apply_json(const std::string& line, BatchItem& it, bool& has_seed) {
  DIT_CHECK(json_depth(line) <= 16, "nested too deeply");
  json j;
  try {
    j = json::parse(line);
  } catch (const json::exception& e) {
    DIT_FAIL("malformed JSON: " << e.what());
  }
  DIT_CHECK(j.is_object(), "expected a JSON object, got " << type_of(j));
  std::string first_error;  // every key is applied (so a failed item still has its prompt and seed)
  for (const auto& [key, v] : j.items()) {
    if (v.is_null()) continue;  // null: as if left out
    try {
      item_key(key).apply(v, it, has_seed);
    } catch (const Error& e) {
      if (first_error.empty()) first_error = e.what();
    } catch (const json::exception& e) {
      if (first_error.empty()) first_error = "\"" + key + "\": " + e.what();
    }
  }
  if (!first_error.empty()) throw Error(first_error);
}

}  // namespace

std::string slugify(const std::string& prompt) {
  std::string s;
  for (unsigned char c : prompt) {
    if (std::isalnum(c) && c < 0x80) {
      s += char(std::tolower(c));
    } else if (!s.empty() && s.back() != '-') {
      s += '-';
    }
    if (s.size() >= 48) break;
  }
  while (!s.empty() && s.back() == '-') s.pop_back();
  return s.empty() ? "item" : s;
}

void check_item_output(const std::string& rel) {
  DIT_CHECK(!rel.empty(), "\"output\" is empty");
  DIT_CHECK(rel.find('\0') == std::string::npos, "\"output\" contains a NUL byte");
  const fs::path p(rel);
  DIT_CHECK(!p.is_absolute() && !p.has_root_name() && !p.has_root_directory(),
            "output '" << rel << "' is an absolute path; outputs must stay inside --output-dir");
  const fs::path n = p.lexically_normal();
  DIT_CHECK(!n.empty() && n.begin()->string() != "..",
            "output '" << rel << "' escapes --output-dir; outputs must stay inside it");
  DIT_CHECK(n.has_filename() && n.filename() != "." && n.filename() != "..",
            "output '" << rel << "' is not a file path");
  DIT_CHECK(n != "results.jsonl", "output 'results.jsonl' is the batch's results file");
  check_extension(rel, "\"output\"", kPngOutput);
}

void check_inside_output_dir(const fs::path& output_dir, const fs::path& dir) {
  const fs::path root = fs::canonical(output_dir), real = fs::canonical(dir);
  const auto mismatch = std::mismatch(root.begin(), root.end(), real.begin(), real.end());
  DIT_CHECK(mismatch.first == root.end(), "output directory '" << dir.string() << "' resolves to '" << real.string()
                                                               << "', outside --output-dir (a symbolic link?)");
}

std::vector<BatchItem> parse_batch(const std::string& text_in, const GenOptions& d, const std::string& output_dir) {
  std::string text = text_in;
  if (text.compare(0, 3, "\xEF\xBB\xBF") == 0) text.erase(0, 3);  // UTF-8 byte order mark
  std::vector<std::string> lines;
  {
    std::istringstream is(text);
    for (std::string l; std::getline(is, l);) lines.push_back(l);
  }
  bool jsonl = false;
  for (const std::string& l : lines) {
    const std::string t = trim(l);
    if (t.empty() || t[0] == '#') continue;
    jsonl = t[0] == '{';
    break;
  }

  std::vector<BatchItem> items;
  std::map<std::string, int> owner;  // normalized output -> index of the item that has it
  for (size_t ln = 0; ln < lines.size(); ++ln) {
    const std::string t = trim(lines[ln]);
    if (t.empty() || t[0] == '#') continue;
    BatchItem it;
    it.index = int(items.size());
    it.line = int(ln) + 1;
    Request& r = it.req;
    r = d.request();
    bool has_seed = false;
    try {
      if (jsonl)
        apply_json(t, it, has_seed);
      else
        r.prompt = t;
      DIT_CHECK(!trim(r.prompt).empty(), "no prompt");
    } catch (const Error& e) {
      it.error = "line " + std::to_string(it.line) + ": " + e.what();
    }
    if (!has_seed) r.seed = d.seed + uint64_t(it.index);
    if (it.output.empty()) it.output = index_name(it.index, r.prompt);
    const std::string key = fs::path(it.output).lexically_normal().string();
    if (it.error.empty()) {
      auto [pos, inserted] = owner.emplace(key, it.index);
      if (!inserted)
        it.error = "line " + std::to_string(it.line) + ": output '" + it.output + "' is also item " +
                   std::to_string(pos->second) + "'s output";
    }
    it.path = (fs::path(output_dir) / fs::path(it.output).lexically_normal()).string();
    items.push_back(std::move(it));
  }
  return items;
}

void validate_items(std::vector<BatchItem>& items, const Pipeline& pipe) {
  for (BatchItem& it : items) {
    if (!it.error.empty()) continue;
    try {
      it.resolved = pipe.resolve(it.req);
    } catch (const Error& e) {
      std::string msg = e.what();
      if (msg.rfind("--prompt: ", 0) == 0) msg = "prompt: " + msg.substr(10);  // not a flag here
      it.error = "line " + std::to_string(it.line) + ": " + msg;
    }
  }
}

}  // namespace dit::cli
