#include "models/dit/class_labels.h"

#include <algorithm>
#include <cctype>
#include <vector>

#include "runtime/error.h"
#include "runtime/printable.h"

namespace dit {

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n"), e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

std::vector<std::string> synonyms(const std::string& label) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= label.size()) {
    size_t comma = label.find(',', start);
    if (comma == std::string::npos) comma = label.size();
    std::string s = trim(label.substr(start, comma - start));
    if (!s.empty()) out.push_back(lower(s));
    start = comma + 1;
  }
  return out;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

bool parse_id(const std::string& s, long& out) {
  if (s.empty() || s.size() > 9) return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  out = std::stol(s);
  return true;
}

// An example label for messages: the first non-empty synonym of any label, else a class id.
std::string example_label(const ModelIndex& index) {
  for (const auto& [cid, label] : index.id2label) {
    const std::vector<std::string> s = synonyms(label);
    if (!s.empty()) return s[0];
  }
  return "0";
}

}  // namespace

ClassChoice resolve_class(const ModelIndex& index, const std::string& prompt, int num_classes) {
  const std::string p = lower(trim(prompt));
  DIT_CHECK(!p.empty(), "--prompt is empty: give a class label (e.g. \"" << example_label(index)
                                                                          << "\") or a class id 0.." << num_classes - 1);
  DIT_CHECK(p.size() <= kMaxClassPrompt, "--prompt: unknown class (the prompt is "
                                             << p.size() << " bytes; class labels are at most " << kMaxClassPrompt
                                             << "): give a class label (e.g. \"" << example_label(index)
                                             << "\") or a class id 0.." << num_classes - 1);
  long id = 0;
  if (parse_id(p, id)) {
    DIT_CHECK(id < num_classes, "--prompt: class id " << id << " is out of range (the model has classes 0.."
                                                      << num_classes - 1 << ")");
    auto it = index.id2label.find(int(id));
    return {int(id), it == index.id2label.end() ? "" : it->second};
  }
  for (const auto& [cid, label] : index.id2label) {
    if (cid >= num_classes) continue;
    for (const std::string& s : synonyms(label))
      if (s == p) return {cid, label};
  }
  // Not found: list the closest synonyms.
  std::vector<std::pair<size_t, std::string>> scored;
  for (const auto& [cid, label] : index.id2label)
    for (const std::string& s : synonyms(label)) {
      size_t d = edit_distance(p, s.substr(0, kMaxClassPrompt));
      if (s.find(p) != std::string::npos || p.find(s) != std::string::npos) d = d / 4;  // substring: close
      scored.push_back({d, s + " (" + std::to_string(cid) + ")"});
    }
  std::sort(scored.begin(), scored.end());
  std::string close;
  for (size_t i = 0; i < scored.size() && i < 5; ++i) close += (i ? ", " : "") + scored[i].second;
  DIT_FAIL("--prompt: unknown class '" << printable(prompt) << "'"
                                       << (index.id2label.empty() ? std::string(" (the model has no id2label; give a class id)")
                                                                  : "; closest labels: " + printable(close, 400)));
}

}  // namespace dit
