// DIR/results.jsonl: one JSON object per finished batch item, appended and flushed to disk
// at once, so a killed batch still has the record of everything it finished:
//
//   {"index":3,"prompt":"goldfish","seed":45,"class_id":1,"label":"goldfish, Carassius auratus",
//    "output":"out/00003-goldfish.png","status":"done","seconds":1.52}
//   {"index":0,"prompt":"a red fox","negative_prompt":"","seed":42,"output":"out/00000-a-red-fox.png",...}
//   status: "done", "skipped" (resumed: the output was already there) or "failed" (+ "error").
//   class_id/label for class-conditional models, negative_prompt for text-to-image ones.
//   Written with nlohmann (runtime/json_line.h): always valid JSON, invalid UTF-8 replaced.
//
// Several processes append to the same file (one per data-parallel replica): each line is
// one write() on an O_APPEND descriptor, which Linux keeps whole and unmixed for regular
// files on a local file system (not guaranteed on NFS). Lines come in completion order;
// "index" says which item.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace dit::cli {

struct ItemRecord {
  int index = 0;
  std::string prompt;
  std::optional<std::string> negative_prompt;  // text-to-image models
  unsigned long long seed = 0;
  int class_id = -1;  // -1: unknown (the item failed before its class was resolved)
  std::string label;
  std::string output;
  std::string status;  // done | skipped | failed
  double seconds = 0;
  std::string error;
};

// The record as one JSON line (no newline), and back (throws dit::Error if malformed).
std::string record_json(const ItemRecord& r);
ItemRecord record_from_json(const std::string& line);

// (index, output) of the items an existing results file already records as done or skipped
// (resume does not record them again). Malformed lines (a torn last line) are ignored.
std::set<std::pair<int, std::string>> recorded_items(const std::string& path);

class ResultsLog {
 public:
  // Opens (creates) `path` for appending; a last line torn by a kill gets its newline first,
  // so the next record starts on a line of its own. Throws dit::Error naming the file.
  explicit ResultsLog(const std::string& path);
  ~ResultsLog();
  ResultsLog(const ResultsLog&) = delete;
  ResultsLog& operator=(const ResultsLog&) = delete;
  // Appends the record's line with one write() and fsyncs it; throws dit::Error on failure.
  void append(const ItemRecord& r);
  // Several records with one write() and one fsync (resume's skipped items).
  void append(const std::vector<ItemRecord>& rs);
  const std::string& path() const { return path_; }

 private:
  void write_all(const std::string& text);  // one write() + fsync
  std::string path_;
  int fd_ = -1;
};

}  // namespace dit::cli
