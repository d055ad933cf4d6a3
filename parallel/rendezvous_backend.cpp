#include "parallel/rendezvous_backend.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#define HIREDIS_NESTED_INCLUDE 1
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/redis_store.h>

#include "parallel/gloo_message.h"
#include "parallel/rendezvous.h"
#include "runtime/error.h"
#include "runtime/process_identity.h"

namespace dit {
namespace detail {

namespace {

// Gloo's FileStore keeps check() protected; this makes it usable without blocking.
class CheckableFileStore : public gloo::rendezvous::FileStore {
 public:
  using FileStore::FileStore;
  bool has(const std::vector<std::string>& keys) { return check(keys); }
};

class FileBackend : public RendezvousBackend {
 public:
  FileBackend(std::string dir, std::string spec) : dir_(std::move(dir)), spec_(std::move(spec)) {}

  void set(const std::string& key, const std::vector<char>& value) override { fs().set(key, value); }
  std::vector<char> get(const std::string& key) override { return fs().get(key); }
  bool has(const std::string& key) override { return fs().has({key}); }

  int64_t newest_generation() override {
    auto g = generations();
    return g.empty() ? 0 : g.back();
  }
  bool create_generation(int64_t g) override {
    if (::mkdir(gen_dir(g).c_str(), 0700) == 0) return true;
    DIT_CHECK(errno == EEXIST, "rendezvous '" << spec_ << "': cannot create " << gen_dir(g) << ": "
                                              << std::strerror(errno));
    return false;
  }
  void select_generation(int64_t g) override {
    selected_ = g;
    fs_.reset();
  }
  std::vector<int64_t> generations() override {
    std::vector<int64_t> v;
    DIR* d = ::opendir(dir_.c_str());
    DIT_CHECK(d, "rendezvous '" << spec_ << "': cannot read " << dir_ << ": " << std::strerror(errno));
    while (const dirent* e = ::readdir(d)) {
      if (std::strncmp(e->d_name, "gen-", 4) != 0) continue;
      char* end = nullptr;
      const long long g = std::strtoll(e->d_name + 4, &end, 10);
      if (end != e->d_name + 4 && *end == 0 && g > 0) v.push_back(g);
    }
    ::closedir(d);
    std::sort(v.begin(), v.end());
    return v;
  }
  void remove_generation(int64_t g, const std::string& keep) override {
    std::error_code ec;
    if (keep.empty()) {
      std::filesystem::remove_all(gen_dir(g), ec);
      return;
    }
    for (auto it = std::filesystem::directory_iterator(gen_dir(g), ec); !ec && it != std::filesystem::directory_iterator();
         it.increment(ec))
      if (it->path().filename() != keep) std::filesystem::remove_all(it->path(), ec);
  }

  // Written whole under a private name, then linked into place: link() fails if the
  // marker exists, and a reader never sees it empty (an O_EXCL create followed by a write
  // let a rank read "world" as "" and leave the generation its peer had just made).
  bool create_marker(int64_t g, const std::string& name, const std::string& value) override {
    const std::string p = gen_dir(g) + "/" + name, tmp = private_name(g, name);
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
      DIT_CHECK(errno == ENOENT, "rendezvous '" << spec_ << "': cannot create " << tmp << ": " << std::strerror(errno));
      return false;  // the generation was removed meanwhile
    }
    const bool ok = ::write(fd, value.data(), value.size()) == ssize_t(value.size());
    ::close(fd);
    const int linked = ok ? ::link(tmp.c_str(), p.c_str()) : -1;
    const int link_errno = errno;
    ::unlink(tmp.c_str());
    DIT_CHECK(ok, "rendezvous '" << spec_ << "': cannot write " << tmp);
    if (linked == 0) return true;
    DIT_CHECK(link_errno == EEXIST || link_errno == ENOENT,
              "rendezvous '" << spec_ << "': cannot create " << p << ": " << std::strerror(link_errno)
                             << (link_errno == EPERM || link_errno == ENOTSUP || link_errno == EOPNOTSUPP
                                     ? " (file: rendezvous needs a file system with hard links; use another "
                                       "directory or redis://HOST:PORT)"
                                     : ""));
    return false;  // taken, or the generation was removed meanwhile
  }
  void put_marker(int64_t g, const std::string& name, const std::string& value) override {
    const std::string p = gen_dir(g) + "/" + name, tmp = private_name(g, name);
    {
      std::ofstream f(tmp, std::ios::trunc);
      f << value;
    }
    if (::rename(tmp.c_str(), p.c_str()) != 0) ::unlink(tmp.c_str());
  }
  std::optional<std::string> read_marker(int64_t g, const std::string& name) override {
    std::ifstream f(gen_dir(g) + "/" + name);
    if (!f) return std::nullopt;
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  void remove_marker(int64_t g, const std::string& name) override { ::unlink((gen_dir(g) + "/" + name).c_str()); }

 private:
  std::string gen_dir(int64_t g) const { return dir_ + "/gen-" + std::to_string(g); }
  // Unique to this process (its machine too: the directory may be shared) and call
  // (threads share a pid); never a marker or key name.
  std::string private_name(int64_t g, const std::string& name) {
    return gen_dir(g) + "/.tmp-" + name + "." + owner_ + "." + std::to_string(++tmp_count_);
  }
  CheckableFileStore& fs() {
    if (!fs_) fs_ = std::make_unique<CheckableFileStore>(gen_dir(selected_));
    return *fs_;
  }
  std::string dir_, spec_;
  const std::string owner_ = process_table_tag() + "-" + std::to_string(::getpid());
  int64_t selected_ = 0;
  std::atomic<uint64_t> tmp_count_{0};
  std::unique_ptr<CheckableFileStore> fs_;
};

class RedisBackend : public RendezvousBackend {
 public:
  RedisBackend(const std::string& host, int port, std::string run)
      : store_(host, port), base_("dit/" + run + "/") {}

  void set(const std::string& key, const std::vector<char>& value) override { store_.set(prefix_ + key, value); }
  std::vector<char> get(const std::string& key) override { return store_.get(prefix_ + key); }
  bool has(const std::string& key) override { return store_.check({prefix_ + key}); }

  int connection_fd() const override { return const_cast<Store&>(store_).context()->fd; }
  int64_t newest_generation() override {
    auto v = command_str({"GET", base_ + "generation"});
    return v ? std::strtoll(v->c_str(), nullptr, 10) : 0;
  }
  bool create_generation(int64_t g) override {
    // Compare-and-set: only the caller that moves the counter from g-1 to g creates g.
    static const char* kCas =
        "local c = tonumber(redis.call('GET', KEYS[1]) or '0') "
        "if c == tonumber(ARGV[1]) - 1 then redis.call('SET', KEYS[1], ARGV[1]) return 1 end return 0";
    auto* r = command({"EVAL", kCas, "1", base_ + "generation", std::to_string(g)});
    const bool created = r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    freeReplyObject(r);
    return created;
  }
  void select_generation(int64_t g) override { prefix_ = gen_prefix(g); }
  std::vector<int64_t> generations() override {
    std::vector<int64_t> v;
    scan(base_ + "g*", [&](const std::string& key) {
      const size_t slash = key.find('/', base_.size());
      const std::string num = key.substr(base_.size() + 1, slash == std::string::npos ? 0 : slash - base_.size() - 1);
      char* end = nullptr;
      const long long g = std::strtoll(num.c_str(), &end, 10);
      if (!num.empty() && *end == 0 && g > 0 && std::find(v.begin(), v.end(), g) == v.end()) v.push_back(g);
    });
    std::sort(v.begin(), v.end());
    return v;
  }
  void remove_generation(int64_t g, const std::string& keep) override {
    const std::string keep_key = keep.empty() ? "" : gen_prefix(g) + "@" + keep;
    std::vector<std::string> doomed;
    scan(gen_prefix(g) + "*", [&](const std::string& key) {
      if (key != keep_key) doomed.push_back(key);
    });
    for (const auto& k : doomed) freeReplyObject(command({"DEL", k}));
  }

  bool create_marker(int64_t g, const std::string& name, const std::string& value) override {
    auto* r = command({"SET", marker(g, name), value, "NX"});
    const bool created = r->type == REDIS_REPLY_STATUS;
    freeReplyObject(r);
    return created;
  }
  void put_marker(int64_t g, const std::string& name, const std::string& value) override {
    freeReplyObject(command({"SET", marker(g, name), value}));
  }
  std::optional<std::string> read_marker(int64_t g, const std::string& name) override {
    return command_str({"GET", marker(g, name)});
  }
  void remove_marker(int64_t g, const std::string& name) override { freeReplyObject(command({"DEL", marker(g, name)})); }

 private:
  // Gloo's RedisStore owns the connection; its context is protected, hence the subclass.
  struct Store : gloo::rendezvous::RedisStore {
    using RedisStore::RedisStore;
    redisContext* context() { return redis_; }
  };

  std::string gen_prefix(int64_t g) const { return base_ + "g" + std::to_string(g) + "/"; }
  std::string marker(int64_t g, const std::string& name) const { return gen_prefix(g) + "@" + name; }

  redisReply* command(const std::vector<std::string>& args) {
    std::vector<const char*> argv;
    std::vector<size_t> lens;
    for (const auto& a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    auto* r = static_cast<redisReply*>(redisCommandArgv(store_.context(), int(args.size()), argv.data(), lens.data()));
    DIT_CHECK(r, "redis: " << (store_.context()->errstr[0] ? store_.context()->errstr : "no reply") << " (" << args[0]
                           << ")");
    if (r->type == REDIS_REPLY_ERROR) {
      const std::string e(r->str, r->len);
      freeReplyObject(r);
      DIT_FAIL("redis: " << args[0] << ": " << e);
    }
    return r;
  }
  std::optional<std::string> command_str(const std::vector<std::string>& args) {
    auto* r = command(args);
    std::optional<std::string> v;
    if (r->type == REDIS_REPLY_STRING) v = std::string(r->str, r->len);
    freeReplyObject(r);
    return v;
  }
  template <class F>
  void scan(const std::string& pattern, F&& each) {
    std::string cursor = "0";
    do {
      auto* r = command({"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"});
      if (r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
        freeReplyObject(r);
        return;
      }
      cursor.assign(r->element[0]->str, r->element[0]->len);
      for (size_t i = 0; i < r->element[1]->elements; i++)
        each(std::string(r->element[1]->element[i]->str, r->element[1]->element[i]->len));
      freeReplyObject(r);
    } while (cursor != "0");
  }

  Store store_;
  std::string base_, prefix_;
};

class MemoryBackend : public RendezvousBackend {
 public:
  explicit MemoryBackend(std::shared_ptr<MemoryStore> s) : store_(std::move(s)) {}
  void set(const std::string& key, const std::vector<char>& value) override { store_->set(key, value); }
  std::vector<char> get(const std::string& key) override { return store_->get(key); }
  bool has(const std::string& key) override { return store_->has({key}); }
  bool has_generations() const override { return false; }
  int64_t newest_generation() override { return 1; }
  bool create_generation(int64_t) override { return false; }
  void select_generation(int64_t) override {}
  std::vector<int64_t> generations() override { return {1}; }
  void remove_generation(int64_t, const std::string&) override {}
  bool create_marker(int64_t, const std::string&, const std::string&) override { return true; }
  void put_marker(int64_t, const std::string&, const std::string&) override {}
  std::optional<std::string> read_marker(int64_t, const std::string&) override { return std::nullopt; }
  void remove_marker(int64_t, const std::string&) override {}

 private:
  std::shared_ptr<MemoryStore> store_;
};

}  // namespace

std::unique_ptr<RendezvousBackend> make_file_backend(const std::string& dir, const std::string& spec) {
  struct stat st;
  DIT_CHECK(::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode),
            "rendezvous '" << spec << "': " << dir << " is not a directory");
  return std::make_unique<FileBackend>(dir, spec);
}

std::unique_ptr<RendezvousBackend> make_redis_backend(const std::string& host, int port, const std::string& run,
                                                      const std::string& spec) {
  try {
    return std::make_unique<RedisBackend>(host, port, run);
  } catch (const dit::Error&) {
    throw;
  } catch (const std::exception& e) {
    DIT_FAIL("rendezvous '" << spec << "': cannot open the store: " << clean_gloo_message(e.what()));
  }
}

std::unique_ptr<RendezvousBackend> make_memory_backend(std::shared_ptr<MemoryStore> store) {
  return std::make_unique<MemoryBackend>(std::move(store));
}

}  // namespace detail
}  // namespace dit
