// Crash-safe file writes: data goes to a temporary file in the same directory, which is
// fsynced and renamed over the destination on commit(). A reader never sees a half-written
// file, and a failed or abandoned write leaves the destination untouched.
//
//   AtomicFile f("out.png");
//   f.write(bytes.data(), bytes.size());
//   f.commit();                        // fsync + rename; without it the temp file is removed
//
//   write_file_atomic("out.npy", buf.data(), buf.size());
#pragma once

#include <cstddef>
#include <string>

namespace dit {

class AtomicFile {
 public:
  // Creates `<path>.tmp.<pid>.<random>` next to `path`; throws dit::Error naming the path.
  explicit AtomicFile(const std::string& path);
  ~AtomicFile();  // removes the temporary file unless commit() succeeded
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t n);
  // fsyncs, closes and renames the temporary file to `path` (then fsyncs the directory).
  void commit();

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return tmp_; }

 private:
  void close_fd();
  std::string path_;
  std::string tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

// Writes `n` bytes to `path` atomically (AtomicFile + commit).
void write_file_atomic(const std::string& path, const void* data, size_t n);

// Installs SIGINT/SIGTERM/SIGHUP handlers that remove the temporary file of the write in
// progress (the most recently opened AtomicFile not yet committed or destroyed) and then
// let the signal end the process as before. Call once from main(); without it a process
// stopped mid-write leaves its `.tmp.<pid>.<random>` file behind (never the destination).
void remove_partial_files_on_signal();

}  // namespace dit
