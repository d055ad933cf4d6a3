#include "tools/cli/batch_results.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <nlohmann/json.hpp>

#include "runtime/error.h"
#include "runtime/progress.h"

namespace dit::cli {

std::string record_json(const ItemRecord& r) {
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.3f", r.seconds);
  std::string s = "{\"index\":" + std::to_string(r.index) + ",\"prompt\":" + json_quote(r.prompt) +
                  ",\"seed\":" + std::to_string(r.seed);
  if (r.class_id >= 0) s += ",\"class_id\":" + std::to_string(r.class_id) + ",\"label\":" + json_quote(r.label);
  s += ",\"output\":" + json_quote(r.output) + ",\"status\":" + json_quote(r.status) + ",\"seconds\":" + secs;
  if (!r.error.empty()) s += ",\"error\":" + json_quote(r.error);
  return s + "}";
}

ItemRecord record_from_json(const std::string& line) {
  try {
    const nlohmann::json j = nlohmann::json::parse(line);
    ItemRecord r;
    r.index = j.at("index").get<int>();
    r.prompt = j.at("prompt").get<std::string>();
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

ResultsLog::ResultsLog(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  DIT_CHECK(fd_ >= 0, path << ": cannot open for appending: " << std::strerror(errno));
}

ResultsLog::~ResultsLog() {
  if (fd_ >= 0) ::close(fd_);
}

void ResultsLog::append(const ItemRecord& r) {
  const std::string line = record_json(r) + "\n";
  ssize_t n;
  do {
    n = ::write(fd_, line.data(), line.size());
  } while (n < 0 && errno == EINTR);
  DIT_CHECK(n == ssize_t(line.size()), path_ << ": write failed: " << (n < 0 ? std::strerror(errno) : "short write"));
  DIT_CHECK(::fsync(fd_) == 0, path_ << ": fsync failed: " << std::strerror(errno));
}

}  // namespace dit::cli
