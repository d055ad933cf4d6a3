// Where a LinearWeight's packed form may be kept (runtime/packed_weights.h), without oneDNN's
// headers: WeightStore hands these out, Linear reads them.
#pragma once

#include <memory>
#include <string>

namespace dit {

class PackedWeightDir;

// A directory and the key of the weight's content (both empty: nowhere; the Linear reads the
// weight in place).
struct PackedSource {
  std::shared_ptr<const PackedWeightDir> dir;
  std::string key;
  explicit operator bool() const { return dir != nullptr && !key.empty(); }
};

}  // namespace dit
