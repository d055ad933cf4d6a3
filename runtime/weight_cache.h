// Converted-weight cache: the tensors of a checkpoint file that are not in the compute type,
// converted once and kept in a safetensors file under a cache directory. Every process of
// that compute type maps that file read-only, so the ranks of a machine share one copy
// through the page cache (instead of converting a private copy each), and a later run maps it
// instead of converting again. Two kinds:
//   - float32 compute: the F16 / BF16 tensors as F32 (every tensor is read in f32 then);
//   - bfloat16 compute: the F32 / F16 tensors as BF16, rounded to nearest even as
//     Tensor::to does; only the weights a model asks for in bf16 (its linears:
//     WeightStore::get_as) are read from it, the rest (norms, biases, tables) stay f32.
//
//   auto cached = converted_cache_for(*file, "/root/.cache/dit-gen/weights", DType::F32);  // null: nothing to convert
//   Tensor w = cached && cached->has(name) ? cached->get(name) : file->get(name);
//
// File: <dir>/<source stem>-<key>.<f32|bf16>.safetensors, key = a hash of the source's
// canonical path, size, modification time (ns), this format's version and the type (bf16
// only: f32 keys are those of the first version), which are also kept in the file's metadata
// and compared when it is opened: a changed checkpoint gets a new entry. The metadata also
// names the host that made it; before converting, a process removes this host's entries whose
// checkpoint file is gone or changed (other hosts' entries in a shared directory are theirs to
// judge; entries of earlier builds, which named no host, are left). One process converts, under an
// exclusive lock on <dir>/.lock, the others wait for it and map the result; the file is
// written through AtomicFile (temporary + fsync + rename), so a crash leaves no half entry.
// Conversion runs on all of the process's threads, tensor by tensor in 16 MB pieces.
// use_weight_cache also keeps the linear weights' packed forms in <dir>/packed
// (runtime/packed_weights.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "runtime/dtype.h"
#include "runtime/file_identity.h"

namespace dit {

class SafeTensorsFile;
class WeightStore;

// Where converted weights go: `dir` empty = off. `optional`: the default location, whose
// failure (read-only or full disk) prints one warning line and converts in memory instead;
// a directory the user named must work (dit::Error otherwise).
struct WeightCacheOption {
  std::string dir;
  bool optional = false;
};

// store.use_converted_cache(cache.dir, compute) when the cache is on; a failure of an
// optional cache is reported on stderr and leaves the store as it was.
void use_weight_cache(WeightStore& store, DType compute, const WeightCacheOption& cache);

// The `to` copy of `src`'s tensors of other types (float32: its F16 and BF16 tensors;
// bfloat16: its F32 and F16 ones), created under `dir` if missing or stale; null when `src`
// has no such tensor. Throws dit::Error naming the cache file when it cannot be created or read.
std::shared_ptr<SafeTensorsFile> converted_cache_for(const SafeTensorsFile& src, const std::string& dir, DType to);
// converted_cache_for(src, dir, DType::F32).
std::shared_ptr<SafeTensorsFile> f32_cache_for(const SafeTensorsFile& src, const std::string& dir);

// The option for a --weight-cache flag's value: "" = the default directory, optional (a
// failure warns); "off" = none; anything else = that directory, required.
WeightCacheOption weight_cache_option(const std::string& flag_value);

// The caches' file-name hash (FNV-1a, 64 bits) and its 16 hex digits.
uint64_t fnv1a(const std::string& s);
std::string hex16(uint64_t v);

// The default directory: $DIT_WEIGHT_CACHE, else $XDG_CACHE_HOME/dit-gen/weights, else
// $HOME/.cache/dit-gen/weights; empty when none of them is set.
std::string default_weight_cache_dir();

}  // namespace dit
