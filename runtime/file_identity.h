// What keys a cache entry to the file it was made from: the file's canonical path, size and
// modification time (ns). A changed checkpoint gets new entries, and an entry whose file is
// gone or changed can never be read again (runtime/weight_cache.h, runtime/packed_weights.h
// remove such entries of this host):
//
//   FileIdentity id = file_identity("model/transformer/diffusion_pytorch_model.safetensors");
//   ... later, possibly in another process ...
//   if (!is_current(id)) remove(entry);
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace dit {

struct FileIdentity {
  std::string path;  // canonical (as given when it cannot be resolved)
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  std::string str() const;  // "path|size|mtime_ns"
};

// Throws dit::Error naming the path when it cannot be stat'ed.
FileIdentity file_identity(const std::string& path);

// Whether the file at id.path still exists with id's size and modification time; false when
// it is gone, changed or cannot be stat'ed. Never throws.
bool is_current(const FileIdentity& id) noexcept;

// Removes the regular files directly in `dir` whose name ends in `suffix` and for which
// stale(path) is true: how the weight caches drop entries no run can read again. When that
// frees 256 MB or more it says so in one line on stderr ("weight cache: removed N <what> ...";
// smaller removals, such as a test suite's throwaway checkpoints, stay silent). Returns how
// many files and bytes went. Never throws: a file that cannot be judged (stale throws) or
// removed stays, and a missing directory removes nothing.
struct RemovedFiles {
  size_t files = 0;
  uint64_t bytes = 0;
};
RemovedFiles remove_files_if(const std::string& dir, const std::string& suffix, const char* what,
                             const std::function<bool(const std::string&)>& stale) noexcept;

}  // namespace dit
