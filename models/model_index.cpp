#include "models/model_index.h"

#include <cctype>
#include <filesystem>

#include "runtime/error.h"
#include "runtime/json_config.h"

namespace dit {

namespace {

bool parse_id(const std::string& s, long& out) {
  if (s.empty() || s.size() > 9) return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  out = std::stol(s);
  return true;
}

}  // namespace

ModelIndex ModelIndex::load(const std::string& dir) {
  namespace fs = std::filesystem;
  DIT_CHECK(fs::is_directory(dir), "model directory '" << dir << "' does not exist (expected a diffusers pipeline "
                                                           "directory with model_index.json)");
  const std::string path = dir + "/model_index.json";
  DIT_CHECK(fs::exists(path), path << ": not found (expected a diffusers pipeline directory)");
  Config c = Config::load(path);
  ModelIndex m;
  m.dir = dir;
  m.pipeline_class = c.get_string("_class_name");
  for (const auto& [key, value] : c.json().items()) {
    if (value.is_array() && value.size() == 2 && value[1].is_string()) m.components[key] = value[1].get<std::string>();
  }
  for (const char* need : {"transformer", "vae", "scheduler"})
    DIT_CHECK(m.components.count(need), path << ": component '" << need << "' missing");
  if (c.has("id2label") && !c.is_null("id2label")) {
    const auto& j = c.json().at("id2label");
    DIT_CHECK(j.is_object(), path << ": id2label must be an object {\"id\": \"label\"}");
    for (const auto& [key, value] : j.items()) {
      long id = 0;
      DIT_CHECK(parse_id(key, id) && value.is_string(),
                path << ": id2label entry '" << key << "' must map a class id to a label string");
      m.id2label[int(id)] = value.get<std::string>();
    }
  }
  return m;
}

int peek_attention_heads(const std::string& dir) {
  return Config::load(dir + "/transformer/config.json").get_int_in("num_attention_heads", 16, 1, 1024);
}

}  // namespace dit
