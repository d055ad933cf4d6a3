// WeightStore: one model component's weights, single-file or sharded (docs/checkpoints.md).
#include <sys/stat.h>

#include <set>

#include "runtime/error.h"
#include "runtime/json_config.h"
#include "runtime/printable.h"
#include "runtime/safetensors.h"
#include "runtime/weight_cache.h"

namespace dit {
namespace {

bool is_file(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool is_dir(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

void check_shard_name(const std::string& index, const std::string& tensor, const std::string& file) {
  if (file.empty() || file.find('/') != std::string::npos || file.find('\\') != std::string::npos ||
      file.find("..") != std::string::npos)
    throw Error(index + ": tensor '" + printable(tensor) +
                "': shard file name must be a plain file name in the same directory (found '" + printable(file) + "')");
}

[[noreturn]] void fail_not_found(const std::string& dir, const std::string& stem) {
  if (!is_dir(dir)) throw Error(dir + ": model component directory does not exist");
  for (const std::string& bin : std::vector<std::string>{stem + ".bin", stem + ".bin.index.json", "pytorch_model.bin"}) {
    if (is_file(dir + "/" + bin))
      throw Error(dir + "/" + bin + ": pickle .bin checkpoints are not supported; convert them to safetensors");
  }
  throw Error(dir + ": no weights found (looked for " + stem + ".safetensors and " + stem +
              ".safetensors.index.json)");
}

}  // namespace

WeightStore WeightStore::open_dir(const std::string& dir, const std::string& stem) {
  const std::string single = dir + "/" + stem + ".safetensors";
  const std::string index = single + ".index.json";
  if (is_file(single)) {
    WeightStore ws;
    ws.dir_ = dir;
    ws.describe_ = single;
    ws.files_.push_back(SafeTensorsFile::open(single));
    for (const auto& n : ws.files_[0]->names()) ws.where_[n] = 0;
    return ws;
  }
  if (is_file(index)) return open_index(dir, index);
  fail_not_found(dir, stem);
}

WeightStore WeightStore::open_index(const std::string& dir, const std::string& index_path) {
  Config idx = Config::load(index_path);
  Config map = idx.child("weight_map");
  WeightStore ws;
  ws.dir_ = dir;
  std::map<std::string, size_t> shard_of_file;
  for (auto it = map.json().begin(); it != map.json().end(); ++it) {
    const std::string& tensor = it.key();
    if (!it->is_string())
      throw Error(index_path + ": weight_map['" + printable(tensor) + "']: expected a file name string");
    const std::string file = it->get<std::string>();
    check_shard_name(index_path, tensor, file);
    auto f = shard_of_file.find(file);
    if (f == shard_of_file.end()) {
      const std::string shard = dir + "/" + file;
      if (!is_file(shard))
        throw Error(index_path + ": tensor '" + printable(tensor) + "': shard file " + printable(shard) + " does not exist");
      f = shard_of_file.emplace(file, ws.files_.size()).first;
      ws.files_.push_back(SafeTensorsFile::open(shard));
    }
    if (!ws.files_[f->second]->has(tensor))
      throw Error(index_path + ": tensor '" + printable(tensor) + "': listed in weight_map but missing from shard " +
                  ws.files_[f->second]->path());
    ws.where_[tensor] = f->second;
  }
  ws.describe_ = index_path + " (" + std::to_string(ws.files_.size()) + " shards)";
  return ws;
}

std::vector<std::string> WeightStore::names() const {
  std::vector<std::string> out;
  for (const auto& kv : where_) out.push_back(kv.first);
  return out;
}

Tensor WeightStore::get(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) throw Error("missing tensor '" + printable(name) + "' in " + (describe_.empty() ? dir_ : describe_));
  if (const SafeTensorsFile* c = cached(name, DType::F32)) return c->get(name);
  return files_[it->second]->get(name);
}

const SafeTensorsFile* WeightStore::cached(const std::string& name, DType dtype) const {
  auto it = where_.find(name);
  if (it == where_.end() || converted_.empty() || converted_dtype_ != dtype) return nullptr;
  const SafeTensorsFile* c = converted_[it->second].get();
  return c && c->has(name) ? c : nullptr;
}

bool WeightStore::in_place(const std::string& name, DType dtype) const {
  if (cached(name, dtype)) return true;
  return file_of(name).info(name).dtype == safetensors_dtype(dtype);
}

Tensor WeightStore::get_as(const std::string& name, DType dtype, const Shape& expected) const {
  check_shape(name, expected);
  if (const SafeTensorsFile* c = cached(name, dtype)) return c->get(name);
  Tensor t = get(name);
  if (t.dtype() == dtype) return t;
  Tensor converted = t.to(dtype);
  drop(t);  // the mapped source pages just read are not needed again
  return converted;
}

void WeightStore::use_converted_cache(const std::string& dir, DType compute) {
  std::vector<std::shared_ptr<SafeTensorsFile>> conv;
  for (const auto& f : files_) conv.push_back(converted_cache_for(*f, dir, compute));
  converted_ = std::move(conv);
  converted_dtype_ = compute;
}

PackedSource WeightStore::packed_source(const std::string& name, DType dtype) const {
  if (!packed_) return {};
  FileIdentity id = file_identity(file_of(name).path());
  std::string key = id.str() + "|" + name + "|" + dtype_name(dtype);
  return {packed_, std::move(key), {}, std::move(id)};
}

const SafeTensorsFile& WeightStore::file_of(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) throw Error("missing tensor '" + printable(name) + "' in " + (describe_.empty() ? dir_ : describe_));
  return *files_[it->second];
}

size_t WeightStore::drop(const Tensor& t) const { return releaser(t)(); }

std::function<size_t()> WeightStore::releaser(const Tensor& t) const {
  std::vector<std::shared_ptr<SafeTensorsFile>> files = files_;
  for (const auto& f : converted_)
    if (f) files.push_back(f);
  const void* p = t.data();
  const size_t bytes = t.nbytes();
  return [files = std::move(files), p, bytes] {
    size_t n = 0;
    for (const auto& f : files) n += f->drop_range(p, bytes);
    return n;
  };
}

size_t WeightStore::drop_pages() const {
  size_t n = 0;
  for (const auto& f : files_) n += f->drop_pages();
  for (const auto& f : converted_)
    if (f) n += f->drop_pages();
  return n;
}

void WeightStore::check_shape(const std::string& name, const Shape& expected) const {
  const SafeTensorsFile& f = file_of(name);
  const Shape& found = f.info(name).shape;
  if (found != expected)
    throw Error(f.path() + ": tensor '" + printable(name) + "': wrong shape (expected " + shape_str(expected) +
                ", found " + shape_str(found) + ")");
}

Tensor WeightStore::get(const std::string& name, const Shape& expected) const {
  check_shape(name, expected);
  return get(name);
}

}  // namespace dit
