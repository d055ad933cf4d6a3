// Where a LinearWeight's packed form may be kept (runtime/packed_weights.h), without oneDNN's
// headers: WeightStore hands these out, Linear reads them.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "runtime/file_identity.h"

namespace dit {

class PackedWeightDir;

// A directory and the key of the weight's content (both empty: nowhere; the Linear reads the
// weight in place).
struct PackedSource {
  PackedSource() = default;
  PackedSource(std::shared_ptr<const PackedWeightDir> d, std::string k, std::function<size_t()> release = {},
               FileIdentity from = {})
      : dir(std::move(d)), key(std::move(k)), release_plain(std::move(release)), source(std::move(from)) {}

  std::shared_ptr<const PackedWeightDir> dir;
  std::string key;
  // Optional: gives back the plain weight's mapped pages once an entry was made from them
  // (a first run reads every plain weight once to pack it, and needs it no more); returns
  // the bytes given back (WeightStore::releaser).
  std::function<size_t()> release_plain;
  // Optional: the checkpoint file the weight comes from (its identity is also in the key). An
  // entry records it, and is removed once that file is gone or changed (runtime/packed_weights.h).
  FileIdentity source;
  explicit operator bool() const { return dir != nullptr && !key.empty(); }
};

}  // namespace dit
