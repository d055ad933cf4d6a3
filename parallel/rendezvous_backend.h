// The storage under a RendezvousStore (internal to parallel/): a file: directory, a redis
// run name, or an in-process store for ranks that are threads. Besides Gloo's key-value
// interface for one generation (see rendezvous.h for the protocol), a backend keeps the
// numbered generations of a run and small named markers in each ("claim.3", "left.3",
// "world", "closed", "hb.3").
//
//   file:DIR                  DIR/gen-<g>/ holds generation g: Gloo's FileStore files
//                             (named by a hash of the key) and the markers (plain files,
//                             created with O_EXCL, replaced with rename).
//   redis://H:P/RUN           dit/RUN/generation is the newest generation number;
//                             dit/RUN/g<g>/<key> the keys, dit/RUN/g<g>/@<marker> the
//                             markers (SET NX, SET, GET, DEL).
//
// Not thread-safe: RendezvousStore serialises every call.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dit {

class MemoryStore;

namespace detail {

class RendezvousBackend {
 public:
  virtual ~RendezvousBackend() = default;

  // Gloo's key-value interface, in the selected generation. get() expects the key present.
  virtual void set(const std::string& key, const std::vector<char>& value) = 0;
  virtual std::vector<char> get(const std::string& key) = 0;
  virtual bool has(const std::string& key) = 0;

  // The socket of the store's connection (redis), or -1.
  virtual int connection_fd() const { return -1; }

  // False for the in-process store: one run, no generations (generation 1 always).
  virtual bool has_generations() const { return true; }
  virtual int64_t newest_generation() = 0;  // 0: none yet
  // Creates generation g (= newest + 1); false when it exists already or g is not next.
  virtual bool create_generation(int64_t g) = 0;
  virtual void select_generation(int64_t g) = 0;
  virtual std::vector<int64_t> generations() = 0;  // existing ones, ascending
  // Deletes generation g's keys and markers, except the marker `keep` (if not empty).
  virtual void remove_generation(int64_t g, const std::string& keep = "") = 0;

  // Markers of generation g. create_marker: false when it exists (atomic, first wins).
  virtual bool create_marker(int64_t g, const std::string& name, const std::string& value) = 0;
  virtual void put_marker(int64_t g, const std::string& name, const std::string& value) = 0;
  virtual std::optional<std::string> read_marker(int64_t g, const std::string& name) = 0;
  virtual void remove_marker(int64_t g, const std::string& name) = 0;
};

// How long a rendezvous wait sleeps before polling again, after waiting `waited` so far: an
// eighth of that (from 0.25 ms up to 50 ms), so a key that appears is seen within about 12%
// of the time already spent waiting for it. Ranks starting together meet within a
// millisecond or two; a rank that is still loading costs a poll every 50 ms.
inline std::chrono::microseconds poll_interval(std::chrono::steady_clock::duration waited) {
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(waited) / 8;
  return std::clamp(us, std::chrono::microseconds(250), std::chrono::microseconds(50000));
}

// Throw dit::Error naming `spec` when the store cannot be opened.
std::unique_ptr<RendezvousBackend> make_file_backend(const std::string& dir, const std::string& spec);
std::unique_ptr<RendezvousBackend> make_redis_backend(const std::string& host, int port, const std::string& run,
                                                      const std::string& spec);
std::unique_ptr<RendezvousBackend> make_memory_backend(std::shared_ptr<MemoryStore> store);

}  // namespace detail
}  // namespace dit
