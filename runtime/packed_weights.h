// Linear weights in the layout the matmul prefers, made once per machine and mapped by every
// process. oneDNN's matmul reads a PyTorch [out, in] weight in place by copying the blocks it
// needs into its own blocked ("packed") layout at every call; given the weights in that layout
// it skips the copy: 1.04-1.12x on DiT-XL's linears on the 2-core VM (docs/benchmarks.md,
// "Packed weights"). The packed form depends on the CPU's kernels and the weight's shape, not
// on the rows multiplied, and gives the same bits.
//
//   PackedWeightDir dir("/root/.cache/dit-gen/weights/packed", /*optional=*/true);
//   Tensor p = dir.get(key, pd.weights_desc(),                        // undefined: use w as it is
//                      [&](void* dst) { pack_weight(user_md, w.data(), pd.weights_desc(), dst); });
//
// File: <dir>/<hash of key and layout>.packed: a 4096-byte JSON header (this format's version,
// the key, the layout's description, the payload's size), then the payload. The key names the
// plain weight's content (WeightStore::packed_source: the checkpoint's path, size and
// modification time, the tensor, the compute type and the shard), so a changed checkpoint gets
// new entries. The header also records the host and the checkpoint file (`source`): a process
// that adds to the directory first removes this host's entries whose file is gone or changed,
// and those of other format versions (remove_stale_entries). One process packs an entry under
// the directory's lock (<dir>/.lock), through AtomicFile; the others wait and map it.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "runtime/engine.h"
#include "runtime/packed_source.h"
#include "runtime/tensor.h"

namespace dit {

class PackedWeightDir {
 public:
  // optional: a failure to create or read an entry (a read-only or full disk) prints one
  // warning, and get() returns an undefined Tensor from then on (the caller reads the weights
  // in place); otherwise it throws dit::Error naming the file.
  PackedWeightDir(std::string dir, bool optional);
  const std::string& dir() const { return dir_; }

  // The weight named `key` in layout `packed`, mapped read-only from its entry: a Tensor of the
  // compute type's elements spanning packed.get_size() bytes, which keeps the mapping alive.
  // When the entry is missing or not this key's and layout's, it is made with fill(dst), which
  // writes the payload (e.g. pack_weight from the plain weight, or from a weight that exists
  // only in parts: LinearWeight::row_blocks); then `release_plain` (when given) gives the plain
  // weight's pages back.
  // `source` (optional): the checkpoint file the weight comes from, recorded in the entry.
  // An entry already mapped by this object (another Linear of the same weight: the tasks of
  // another row count, parallel/shared_rows.h) is given again, not mapped a second time.
  Tensor get(const std::string& key, const dnnl::memory::desc& packed, const std::function<void(void*)>& fill,
             const std::function<size_t()>& release_plain = {}, const FileIdentity& source = {}) const;

  // Entries made by this object (packed here rather than mapped from an earlier run).
  int made() const { return made_; }

 private:
  Tensor get_or_throw(const std::string& key, const dnnl::memory::desc& packed, const std::function<void(void*)>& fill,
                      const std::function<size_t()>& release_plain, const FileIdentity& source) const;
  std::string dir_;
  mutable std::mutex mu_;
  mutable std::map<std::string, std::weak_ptr<Tensor>> mapped_;  // by key and layout, while read
  bool optional_ = false;
  mutable int made_ = 0;
  mutable size_t made_bytes_ = 0;
  mutable bool failed_ = false, told_ = false;
};

// Removes the entries in `dir` that no process of this host can read again: made here (the
// host they record) from a checkpoint file that is now gone or changed, or by another format
// version of this file (all of version 1, which recorded no host). Other hosts' entries (a
// shared directory), files not named *.packed and files whose header is not an entry's are
// left. Prints one line to stderr when it removed 256 MB or more; returns how many. Never throws.
// PackedWeightDir::get calls it, under the directory's lock, before the first entry it makes.
size_t remove_stale_entries(const std::string& dir) noexcept;

// Writes `plain` (laid out as `user`) into `dst` in layout `packed` (a oneDNN reorder on the
// process's stream; packed.get_size() bytes at dst): what an entry holds, and what
// LinearSpec::pack_weights copies privately.
void pack_weight(const dnnl::memory::desc& user, const void* plain, const dnnl::memory::desc& packed, void* dst);

// Whether a layout packs its elements in inner blocks (oneDNN's blocked formats, e.g. the
// pairs of rows bf16 kernels multiply), not just strides (a plain layout, transposed or not).
bool has_inner_blocks(const dnnl::memory::desc& md);

// A memory layout in words (data type, dims, padded dims, strides, inner blocks, extra
// flags): what an entry is checked against.
std::string describe_layout(const dnnl::memory::desc& md);

}  // namespace dit
