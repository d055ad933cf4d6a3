#include "parallel/rendezvous.h"

#include <dirent.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <thread>

#define HIREDIS_NESTED_INCLUDE 1
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/rendezvous/redis_store.h>

#include "runtime/error.h"

namespace dit {

namespace {

// Gloo's FileStore keeps check() protected; this makes it usable without blocking.
class CheckableFileStore : public gloo::rendezvous::FileStore {
 public:
  using FileStore::FileStore;
  bool has(const std::vector<std::string>& keys) { return check(keys); }
};

class CheckableRedisStore : public gloo::rendezvous::RedisStore {
 public:
  using RedisStore::RedisStore;
  // Deletes every key that starts with `prefix` (SCAN + DEL).
  void delete_prefix(const std::string& prefix) {
    std::string cursor = "0";
    do {
      auto* reply = static_cast<redisReply*>(redisCommand(
          redis_, "SCAN %s MATCH %b* COUNT 1000", cursor.c_str(), prefix.data(), prefix.size()));
      if (!reply) return;
      if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2) {
        freeReplyObject(reply);
        return;
      }
      cursor.assign(reply->element[0]->str, reply->element[0]->len);
      redisReply* keys = reply->element[1];
      for (size_t i = 0; i < keys->elements; i++) {
        auto* del = static_cast<redisReply*>(
            redisCommand(redis_, "DEL %b", keys->element[i]->str, keys->element[i]->len));
        if (del) freeReplyObject(del);
      }
      freeReplyObject(reply);
    } while (cursor != "0");
  }
};

std::string strip_gloo_location(std::string msg) {
  // "[/build/gloo/.../file_store.cc:123] Wait timeout..." -> "Wait timeout..."
  while (!msg.empty() && msg[0] == '[') {
    auto end = msg.find("] ");
    if (end == std::string::npos) break;
    msg = msg.substr(end + 2);
  }
  return msg;
}

std::atomic<bool> g_peer_failure_seen{false};

// Which process table a pid belongs to: host name, boot id and pid namespace. Two
// containers (or machines) with the same host name differ in the other two, so a rank is
// only ever checked by pid from where that pid means the same process.
std::string this_host() {
  char buf[256] = {0};
  std::string id = gethostname(buf, sizeof(buf) - 1) == 0 ? buf : "?";
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string b;
  std::getline(boot, b);
  char ns[128] = {0};
  const ssize_t n = readlink("/proc/self/ns/pid", ns, sizeof(ns) - 1);
  id += "|" + b + "|" + (n > 0 ? std::string(ns, size_t(n)) : "?");
  for (char& c : id)
    if (c == ' ') c = '_';  // the stored value is "<id> <pid>"
  return id;
}

}  // namespace

struct RendezvousStore::Backend {
  std::shared_ptr<gloo::rendezvous::Store> inner;
  std::string prefix;  // prepended to every key
  CheckableFileStore* file = nullptr;
  CheckableRedisStore* redis = nullptr;
  MemoryStore* memory = nullptr;

  bool has(const std::string& key) {
    std::vector<std::string> k{prefix + key};
    if (file) return file->has(k);
    if (redis) return redis->check(k);
    return memory->has(k);
  }
};

RendezvousSpec parse_rendezvous(const std::string& spec) {
  RendezvousSpec s;
  if (spec.rfind("file:", 0) == 0) {
    s.kind = RendezvousSpec::Kind::File;
    s.dir = spec.substr(5);
    DIT_CHECK(!s.dir.empty(), "rendezvous '" << spec << "': file: needs a directory, e.g. file:/tmp/dit-rdzv");
    return s;
  }
  if (spec.rfind("redis://", 0) == 0) {
    s.kind = RendezvousSpec::Kind::Redis;
    std::string rest = spec.substr(8);
    auto slash = rest.find('/');
    if (slash != std::string::npos) {
      s.run = rest.substr(slash + 1);
      rest = rest.substr(0, slash);
      if (s.run.empty()) s.run = "default";
    }
    auto colon = rest.rfind(':');
    if (colon == std::string::npos) {
      s.host = rest;
    } else {
      s.host = rest.substr(0, colon);
      std::string port = rest.substr(colon + 1);
      char* end = nullptr;
      long p = std::strtol(port.c_str(), &end, 10);
      DIT_CHECK(!port.empty() && *end == 0 && p > 0 && p < 65536,
                "rendezvous '" << spec << "': bad port '" << port << "'");
      s.port = int(p);
    }
    DIT_CHECK(!s.host.empty(), "rendezvous '" << spec << "': missing host in redis://HOST:PORT");
    return s;
  }
  DIT_FAIL("rendezvous '" << spec << "': expected file:DIR or redis://HOST:PORT[/RUN]");
}

RendezvousStore::RendezvousStore(std::unique_ptr<Backend> backend, int world_size,
                                 std::chrono::milliseconds timeout, std::string description)
    : backend_(std::move(backend)),
      world_size_(world_size),
      timeout_(timeout),
      description_(std::move(description)) {}

RendezvousStore::~RendezvousStore() = default;

std::shared_ptr<RendezvousStore> RendezvousStore::open(const std::string& spec_str, int world_size,
                                                       std::chrono::milliseconds timeout) {
  RendezvousSpec spec = parse_rendezvous(spec_str);
  auto b = std::make_unique<Backend>();
  try {
    if (spec.kind == RendezvousSpec::Kind::File) {
      struct stat st;
      DIT_CHECK(stat(spec.dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode),
                "rendezvous '" << spec_str << "': " << spec.dir << " is not a directory");
      auto fs = std::make_shared<CheckableFileStore>(spec.dir);
      b->file = fs.get();
      b->inner = fs;
    } else {
      auto rs = std::make_shared<CheckableRedisStore>(spec.host, spec.port);
      b->redis = rs.get();
      b->inner = rs;
      b->prefix = "dit/" + spec.run + "/";
    }
  } catch (const dit::Error&) {
    throw;
  } catch (const std::exception& e) {
    DIT_FAIL("rendezvous '" << spec_str << "': cannot open the store: " << strip_gloo_location(e.what()));
  }
  return std::shared_ptr<RendezvousStore>(
      new RendezvousStore(std::move(b), world_size, timeout, spec_str));
}

std::shared_ptr<RendezvousStore> RendezvousStore::wrap(std::shared_ptr<MemoryStore> inner,
                                                       int world_size, std::chrono::milliseconds timeout,
                                                       std::string description) {
  auto b = std::make_unique<Backend>();
  DIT_CHECK(inner, "RendezvousStore::wrap: no store");
  b->memory = inner.get();
  b->inner = std::move(inner);
  return std::shared_ptr<RendezvousStore>(
      new RendezvousStore(std::move(b), world_size, timeout, std::move(description)));
}

void RendezvousStore::set(const std::string& key, const std::vector<char>& data) {
  std::lock_guard<std::mutex> lock(mu_);
  try {
    backend_->inner->set(backend_->prefix + key, data);
  } catch (const std::exception& e) {
    DIT_FAIL("rendezvous '" << description_ << "': cannot set key '" << key
                            << "': " << strip_gloo_location(e.what()));
  }
}

bool RendezvousStore::check(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lock(mu_);
  try {
    for (const auto& k : keys)
      if (!backend_->has(k)) return false;
    return true;
  } catch (const std::exception& e) {
    DIT_FAIL("rendezvous '" << description_ << "': " << strip_gloo_location(e.what()));
  }
}

void RendezvousStore::wait(const std::vector<std::string>& keys,
                           const std::chrono::milliseconds& timeout_in) {
  auto timeout = timeout_in.count() > 0 ? std::min(timeout_in, timeout_) : timeout_;
  if (timeout_in == gloo::rendezvous::Store::kDefaultTimeout) timeout = timeout_;
  auto start = std::chrono::steady_clock::now();
  auto sleep = std::chrono::milliseconds(2);
  while (!check(keys)) {
    if (auto ab = find_abort()) {
      note_peer_failure();
      DIT_FAIL("rank " << ab->rank << " failed: " << ab->message);
    }
    auto elapsed = std::chrono::steady_clock::now() - start;
    if (elapsed > timeout) {
      std::string missing;
      for (const auto& k : keys)
        if (!check({k})) missing += (missing.empty() ? "'" : ", '") + k + "'";
      DIT_FAIL("rendezvous '" << description_ << "': timed out after "
                              << std::chrono::duration_cast<std::chrono::seconds>(timeout).count()
                              << " s waiting for key(s) " << missing
                              << " (a rank did not start or did not reach this point)");
    }
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, std::chrono::milliseconds(50));
  }
}

std::vector<char> RendezvousStore::get(const std::string& key) {
  wait({key}, timeout_);
  std::lock_guard<std::mutex> lock(mu_);
  try {
    return backend_->inner->get(backend_->prefix + key);
  } catch (const std::exception& e) {
    DIT_FAIL("rendezvous '" << description_ << "': cannot get key '" << key
                            << "': " << strip_gloo_location(e.what()));
  }
}

void RendezvousStore::post_abort(int rank, const std::string& message, bool secondary) noexcept {
  try {
    std::string key = "abort/" + std::to_string(rank);
    if (check({key})) return;
    secondary = secondary || g_peer_failure_seen.load();
    std::string msg = std::string(secondary ? "S" : "P") + (message.empty() ? std::string("(no message)") : message);
    set(key, std::vector<char>(msg.begin(), msg.end()));
  } catch (...) {
  }
}

bool RendezvousStore::has_abort(int rank) noexcept {
  try {
    return check({"abort/" + std::to_string(rank)});
  } catch (...) {
    return false;
  }
}

std::optional<RendezvousStore::AbortReport> RendezvousStore::find_abort() noexcept {
  std::optional<AbortReport> secondary;
  try {
    for (int r = 0; r < world_size_; r++) {
      std::string key = "abort/" + std::to_string(r);
      if (!check({key})) continue;
      std::vector<char> v;
      {
        std::lock_guard<std::mutex> lock(mu_);
        v = backend_->inner->get(backend_->prefix + key);
      }
      std::string msg(v.begin(), v.end());
      bool is_secondary = !msg.empty() && msg[0] == 'S';
      if (!msg.empty() && (msg[0] == 'S' || msg[0] == 'P')) msg.erase(0, 1);
      if (!is_secondary) return AbortReport{r, msg, false};
      if (!secondary) secondary = AbortReport{r, msg, true};
    }
  } catch (...) {
  }
  return secondary;
}

void RendezvousStore::register_process(int rank) noexcept {
  try {
    std::string key = "proc/" + std::to_string(rank);
    std::string v = this_host() + " " + std::to_string(getpid());
    if (!check({key})) set(key, std::vector<char>(v.begin(), v.end()));
  } catch (...) {
  }
}

std::vector<int> RendezvousStore::dead_local_ranks(const std::vector<int>& ranks) noexcept {
  std::vector<int> dead;
  try {
    std::string host = this_host();
    for (int r : ranks) {
      std::string key = "proc/" + std::to_string(r);
      if (!check({key})) continue;
      std::vector<char> v;
      {
        std::lock_guard<std::mutex> lock(mu_);
        v = backend_->inner->get(backend_->prefix + key);
      }
      std::string s(v.begin(), v.end());
      auto sp = s.rfind(' ');
      if (sp == std::string::npos || s.substr(0, sp) != host) continue;
      pid_t pid = pid_t(std::atol(s.c_str() + sp + 1));
      if (pid <= 0 || pid == getpid()) continue;
      bool gone = kill(pid, 0) != 0 && errno == ESRCH;
      if (!gone) {  // a zombie not yet reaped by the launcher is dead too
        std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
        std::string line;
        std::getline(stat, line);
        auto paren = line.rfind(')');
        if (paren != std::string::npos && paren + 2 < line.size()) {
          char state = line[paren + 2];
          gone = state == 'Z' || state == 'X';
        }
      }
      if (gone) dead.push_back(r);
    }
  } catch (...) {
  }
  return dead;
}

void RendezvousStore::cleanup() noexcept {
  try {
    std::lock_guard<std::mutex> lock(mu_);
    if (backend_->redis) backend_->redis->delete_prefix(backend_->prefix);
  } catch (...) {
  }
}

void note_peer_failure() noexcept { g_peer_failure_seen.store(true); }

void report_rank_failure(const std::string& spec, int rank, int world_size,
                         const std::string& message) noexcept {
  try {
    auto store = RendezvousStore::open(spec, world_size, std::chrono::seconds(5));
    store->post_abort(rank, message);
  } catch (...) {
  }
}

}  // namespace dit
