#include "models/common/random_weights.h"

#include "runtime/atomic_file.h"

namespace dit {

void write_json(const std::filesystem::path& path, const nlohmann::ordered_json& j) {
  const std::string text = j.dump(2) + "\n";
  write_file_atomic(path.string(), text.data(), text.size());
}

}  // namespace dit
