// write_safetensors / write_sharded_safetensors (docs/checkpoints.md).
#include <algorithm>
#include <cstdio>
#include <set>

#include <nlohmann/json.hpp>

#include "runtime/atomic_file.h"
#include "runtime/error.h"
#include "runtime/printable.h"
#include "runtime/safetensors.h"

namespace dit {
namespace {

// Tensors ordered as the reference writer does: larger element size first, then by name.
std::vector<const std::pair<std::string, Tensor>*> layout_order(const std::string& path, const NamedTensors& tensors) {
  std::vector<const std::pair<std::string, Tensor>*> order;
  std::set<std::string> seen;
  for (const auto& nt : tensors) {
    DIT_CHECK(!nt.first.empty() && nt.first != "__metadata__", path << ": invalid tensor name '" << printable(nt.first) << "'");
    DIT_CHECK(seen.insert(nt.first).second, path << ": tensor '" << printable(nt.first) << "': given twice");
    DIT_CHECK(nt.second.defined(), path << ": tensor '" << printable(nt.first) << "': undefined tensor");
    order.push_back(&nt);
  }
  std::sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
    size_t sa = dtype_size(a->second.dtype()), sb = dtype_size(b->second.dtype());
    return sa != sb ? sa > sb : a->first < b->first;
  });
  return order;
}

}  // namespace

const char* safetensors_dtype(DType t) { return t == DType::F32 ? "F32" : "BF16"; }

std::string safetensors_prefix(std::string header_json) {
  header_json.append((8 - header_json.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char(uint8_t(uint64_t(header_json.size()) >> (8 * i)));
  return out + header_json;
}

void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata) {
  auto order = layout_order(path, tensors);
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto* nt : order) {
    const Tensor& t = nt->second;
    header[nt->first] = {{"dtype", safetensors_dtype(t.dtype())}, {"shape", t.shape()}, {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
  }
  std::string prefix;
  try {
    prefix = safetensors_prefix(header.dump());
  } catch (const nlohmann::json::exception& e) {  // e.g. a name that is not valid UTF-8
    DIT_FAIL(path << ": cannot write header: " << e.what());
  }
  AtomicFile f(path);
  f.write(prefix.data(), prefix.size());
  for (const auto* nt : order) f.write(nt->second.data(), nt->second.nbytes());
  f.commit();
}

void write_sharded_safetensors(const std::string& dir, const std::string& stem, const NamedTensors& tensors,
                               int shards, const std::map<std::string, std::string>& metadata) {
  if (shards <= 1 || tensors.size() <= 1) {
    write_safetensors(dir + "/" + stem + ".safetensors", tensors, metadata);
    return;
  }
  NamedTensors sorted = tensors;
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  const size_t k = std::min(size_t(shards), sorted.size());
  uint64_t total = 0;
  for (const auto& nt : sorted) total += nt.second.nbytes();

  // Greedy split in name order: shard i closes once it reaches its share of the bytes,
  // keeping at least one tensor for each remaining shard.
  std::vector<NamedTensors> parts(k);
  uint64_t done = 0;
  size_t part = 0;
  for (size_t i = 0; i < sorted.size(); ++i) {
    parts[part].push_back(sorted[i]);
    done += sorted[i].second.nbytes();
    size_t left_tensors = sorted.size() - i - 1, left_parts = k - part - 1;
    bool full = done * k >= total * (part + 1);
    if (left_parts > 0 && (left_tensors == left_parts || (full && left_tensors > 0))) ++part;
  }

  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t i = 0; i < k; ++i) {
    char name[64];
    std::snprintf(name, sizeof name, "-%05zu-of-%05zu.safetensors", i + 1, k);
    const std::string file = stem + name;
    write_safetensors(dir + "/" + file, parts[i], metadata);
    for (const auto& nt : parts[i]) weight_map[nt.first] = file;
  }
  nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  std::string text = index.dump(2) + "\n";
  write_file_atomic(dir + "/" + stem + ".safetensors.index.json", text.data(), text.size());
}

}  // namespace dit
