#include "tools/cli/batch_results.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "runtime/error.h"
#include "runtime/json_line.h"

namespace dit::cli {

std::string record_json(const ItemRecord& r) {
  ordered_json j = {{"index", r.index}, {"prompt", r.prompt}};
  if (r.negative_prompt) j["negative_prompt"] = *r.negative_prompt;
  j["seed"] = r.seed;
  if (r.class_id >= 0) {
    j["class_id"] = r.class_id;
    j["label"] = r.label;
  }
  j["output"] = r.output;
  j["status"] = r.status;
  j["seconds"] = std::round(r.seconds * 1000.0) / 1000.0;
  if (!r.error.empty()) j["error"] = r.error;
  return json_line(j);
}

ItemRecord record_from_json(const std::string& line) {
  try {
    const nlohmann::json j = nlohmann::json::parse(line);
    ItemRecord r;
    r.index = j.at("index").get<int>();
    r.prompt = j.at("prompt").get<std::string>();
    if (j.contains("negative_prompt")) r.negative_prompt = j.at("negative_prompt").get<std::string>();
    r.seed = j.at("seed").get<unsigned long long>();
    r.class_id = j.value("class_id", -1);
    r.label = j.value("label", std::string());
    r.output = j.at("output").get<std::string>();
    r.status = j.at("status").get<std::string>();
    r.seconds = j.at("seconds").get<double>();
    r.error = j.value("error", std::string());
    return r;
  } catch (const nlohmann::json::exception& e) {
    DIT_FAIL("malformed item record: " << e.what());
  }
}

std::set<std::pair<int, std::string>> recorded_items(const std::string& path) {
  std::set<std::pair<int, std::string>> out;
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return out;  // opening a FIFO would block
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);) {
    try {
      const ItemRecord r = record_from_json(line);
      if (r.status == "done" || r.status == "skipped") out.insert({r.index, r.output});
    } catch (const Error&) {
      // a torn or foreign line
    }
  }
  return out;
}

ResultsLog::ResultsLog(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  DIT_CHECK(fd_ >= 0, path << ": cannot open for appending: " << std::strerror(errno));
  struct stat st;
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {  // a FIFO would block the batch's writes
    ::close(fd_);
    DIT_FAIL(path << ": not a regular file; refusing to append the batch's results to it");
  }
  const off_t size = ::lseek(fd_, 0, SEEK_END);
  char last = '\n';
  if (size > 0 && ::pread(fd_, &last, 1, size - 1) == 1 && last != '\n') write_all("\n");
}

void ResultsLog::write_all(const std::string& text) {
  ssize_t n;
  do {
    n = ::write(fd_, text.data(), text.size());
  } while (n < 0 && errno == EINTR);
  DIT_CHECK(n == ssize_t(text.size()), path_ << ": write failed: " << (n < 0 ? std::strerror(errno) : "short write"));
  DIT_CHECK(::fsync(fd_) == 0, path_ << ": fsync failed: " << std::strerror(errno));
}

void ResultsLog::append(const std::vector<ItemRecord>& rs) {
  std::string text;
  for (const ItemRecord& r : rs) text += record_json(r) + "\n";
  if (!text.empty()) write_all(text);
}

ResultsLog::~ResultsLog() {
  if (fd_ >= 0) ::close(fd_);
}

void ResultsLog::append(const ItemRecord& r) { write_all(record_json(r) + "\n"); }

}  // namespace dit::cli
