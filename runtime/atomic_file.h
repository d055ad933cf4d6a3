// Crash-safe file writes: data goes to a temporary file in the same directory, which is
// fsynced and renamed over the destination on commit(). A reader never sees a half-written
// file, and a failed or abandoned write leaves the destination untouched.
//
//   AtomicFile f("out.png");
//   f.write(bytes.data(), bytes.size());
//   f.commit();                        // fsync + rename; without it the temp file is removed
//
//   write_file_atomic("out.npy", buf.data(), buf.size());
//
// Only regular files are replaced. An existing destination that is anything else — a
// FIFO, a device (`-o /dev/null` as root would otherwise replace /dev/null), a directory,
// a socket, or a symbolic link (even to a regular file: renaming over the link would
// replace the link, and following it could write wherever someone pointed it) — is
// refused with one line naming the path, before anything is created.
//
// Temporary files are named `<path>.dit-tmp.<table>.<pid>.<random>` (<table>: 8 hex
// digits naming this host, boot and pid namespace, see runtime/process_identity.h), so a
// writer that was SIGKILLed can be recognised later: remove_stale_temp_files(dir) deletes
// the ones whose writer ran here and is gone.
#pragma once

#include <cstddef>
#include <string>

namespace dit {

class AtomicFile {
 public:
  // Creates `<path>.dit-tmp.<table>.<pid>.<random>` next to `path`; throws dit::Error
  // naming the path (also when `path` exists and is not a regular file).
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

// Throws dit::Error ("<path>: is a FIFO, not a regular file; refusing to replace it")
// when `path` exists and is not a regular file; returns quietly when it is one or does
// not exist (or cannot be examined: creating the file will then say why).
void check_replaceable(const std::string& path);

// Removes the temporary files in `dir` (not recursive) left by AtomicFile writers that ran
// on this host, boot and pid namespace and are no longer running (SIGKILLed mid-write).
// Files of live writers, of other machines (a shared directory) and anything not named
// like an AtomicFile temporary are kept. Returns how many were removed; never throws
// (an unreadable directory removes nothing).
size_t remove_stale_temp_files(const std::string& dir) noexcept;

// Writes `n` bytes to `path` atomically (AtomicFile + commit).
void write_file_atomic(const std::string& path, const void* data, size_t n);

// Installs SIGINT/SIGTERM/SIGHUP handlers that remove the temporary file of the write in
// progress (the most recently opened AtomicFile not yet committed or destroyed) and then
// let the signal end the process as before. Call once from main(); without it a process
// stopped mid-write leaves its `.dit-tmp.` file behind (never the destination).
void remove_partial_files_on_signal();

}  // namespace dit
