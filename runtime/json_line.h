// The one way dit-gen writes JSON (results.jsonl, --progress json events, dit-bench and tool
// output): nlohmann's serializer, one object per line, UTF-8, with invalid UTF-8 in strings
// (a binary prompt) replaced by U+FFFD so the line is always valid JSON.
//
//   std::fprintf(stderr, "%s\n", json_line({{"event", "step"}, {"step", 3}}).c_str());
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace dit {

using ordered_json = nlohmann::ordered_json;

inline std::string json_line(const ordered_json& j) {
  return j.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
}

}  // namespace dit
