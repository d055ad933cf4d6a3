#include "runtime/weight_cache.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/atomic_file.h"
#include "runtime/dtype.h"
#include "runtime/environment.h"
#include "runtime/error.h"
#include "runtime/file_lock.h"
#include "runtime/packed_weights.h"
#include "runtime/parallel_for.h"
#include "runtime/printable.h"
#include "runtime/process_identity.h"
#include "runtime/safetensors.h"

namespace dit {

namespace {

namespace fs = std::filesystem;

constexpr const char* kVersion = "1";
constexpr int64_t kPiece = int64_t(4) << 20;  // elements converted and written at a time (16 MB of f32)

struct Source {
  FileIdentity id;                 // the checkpoint file
  DType to = DType::F32;           // the cache's element type
  std::vector<std::string> names;  // the tensors it converts
  uint64_t bytes = 0;              // their size converted
};

// Bytes per element of a tensor stored as F32, F16 or BF16 (the types a cache converts).
uint64_t stored_size(const SafeTensorInfo& ti) { return ti.dtype == "F32" ? 4 : 2; }
// Its elements (the reader checked the byte span against the shape).
uint64_t elements(const SafeTensorInfo& ti) { return uint64_t(shape_numel(ti.shape)); }

// Whether a tensor stored as `dtype` is converted into a cache of `to`: F16 / BF16 into f32;
// F32 and F16 into bf16 (a BF16 tensor is bf16 already).
bool converts(const std::string& dtype, DType to) {
  return to == DType::F32 ? (dtype == "F16" || dtype == "BF16") : (dtype == "F32" || dtype == "F16");
}

Source describe(const SafeTensorsFile& src, DType to) {
  Source s;
  s.to = to;
  s.id = file_identity(src.path());
  for (const std::string& n : src.names()) {
    if (!converts(src.info(n).dtype, to)) continue;
    s.names.push_back(n);
    s.bytes += elements(src.info(n)) * dtype_size(to);
  }
  return s;
}

// What names the source in a cache file's metadata (and is compared when it is opened).
std::map<std::string, std::string> identity_of(const Source& s) {
  return {{"dit_cache_version", kVersion},
          {"dit_source", s.id.path},
          {"dit_source_size", std::to_string(s.id.size)},
          {"dit_source_mtime_ns", std::to_string(s.id.mtime_ns)}};
}

// The metadata written: the identity, and the host that made the file (remove_stale_copies).
std::map<std::string, std::string> metadata_of(const Source& s) {
  std::map<std::string, std::string> m = identity_of(s);
  m["dit_host"] = host_name();
  return m;
}

// Whether cache file `f` is a copy of this host's (its dit_host) from a checkpoint file that
// is gone or changed, which no process here can read again. Files of other hosts (a shared
// directory) and of earlier builds (no dit_host) are left.
bool stale_copy(const SafeTensorsFile& f) {
  const std::map<std::string, std::string>& m = f.metadata();
  auto at = [&m](const char* k) {
    auto it = m.find(k);
    return it == m.end() ? std::string() : it->second;
  };
  if (at("dit_host") != host_name() || at("dit_cache_version") != kVersion) return false;
  try {
    return !is_current({at("dit_source"), std::stoull(at("dit_source_size")), std::stoll(at("dit_source_mtime_ns"))});
  } catch (const std::logic_error&) {  // sizes that are not numbers: not one of ours
    return false;
  }
}

// Removes this host's cache files in `dir` whose checkpoint file is gone or changed; never
// throws. Called under the directory's lock before a conversion.
void remove_stale_copies(const std::string& dir) noexcept {
  // (a file that does not read as safetensors throws: not ours to judge, it stays)
  remove_files_if(dir, ".safetensors", "converted copies of changed or deleted checkpoints",
                  [](const std::string& p) { return stale_copy(*SafeTensorsFile::open(p)); });
}

// The cache file if it exists and is the converted copy of exactly this source; null otherwise.
std::shared_ptr<SafeTensorsFile> open_valid(const std::string& path, const SafeTensorsFile& src, const Source& s) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return nullptr;
  std::shared_ptr<SafeTensorsFile> f;
  try {
    f = SafeTensorsFile::open(path);
  } catch (const Error&) {
    return nullptr;  // damaged (e.g. truncated by a full disk): rebuilt by the caller
  }
  for (const auto& [k, v] : identity_of(s)) {
    auto it = f->metadata().find(k);
    if (it == f->metadata().end() || it->second != v) return nullptr;
  }
  if (f->names().size() != s.names.size()) return nullptr;
  for (const std::string& n : s.names)
    if (!f->has(n) || f->info(n).dtype != safetensors_dtype(s.to) || f->info(n).shape != src.info(n).shape) return nullptr;
  return f;
}

// Element i of a source tensor, read with memcpy: a checkpoint's data need not be aligned.
template <class T>
T load(const char* p, int64_t i) {
  T v;
  std::memcpy(&v, p + i * int64_t(sizeof(T)), sizeof(T));
  return v;
}

// Converts n values stored as `from` (F16, BF16 or F32) to `to`, on all threads: f32 values
// round to the nearest bf16 as Tensor::to does (F16 goes through its exact f32 value).
void convert(const char* src, const std::string& from, void* dst, DType to, int64_t n) {
  const int64_t block = 1 << 16;
  parallel_for((n + block - 1) / block, n > block, [&](int64_t b) {
    const int64_t lo = b * block, hi = std::min(n, lo + block);
    if (to == DType::F32) {
      float* d = static_cast<float*>(dst);
      if (from == "BF16")
        for (int64_t i = lo; i < hi; ++i) d[i] = bf16_to_f32(load<uint16_t>(src, i));
      else
        for (int64_t i = lo; i < hi; ++i) d[i] = f16_to_f32(load<uint16_t>(src, i));
    } else {
      uint16_t* d = static_cast<uint16_t*>(dst);
      if (from == "F32")
        for (int64_t i = lo; i < hi; ++i) d[i] = f32_to_bf16(load<float>(src, i));
      else
        for (int64_t i = lo; i < hi; ++i) d[i] = f32_to_bf16(f16_to_f32(load<uint16_t>(src, i)));
    }
  });
}

void build(const std::string& path, const SafeTensorsFile& src, const Source& s) {
  const uint64_t out_size = dtype_size(s.to);
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = metadata_of(s);
  uint64_t offset = 0;
  for (const std::string& n : s.names) {  // sorted by name, all of one element type: aligned
    const SafeTensorInfo& ti = src.info(n);
    const uint64_t bytes = elements(ti) * out_size;
    header[n] = {{"dtype", safetensors_dtype(s.to)}, {"shape", ti.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string prefix;
  try {
    prefix = safetensors_prefix(header.dump());
  } catch (const nlohmann::json::exception& e) {  // a path or name that is not valid UTF-8
    DIT_FAIL("cannot write the header: " << e.what());
  }
  AtomicFile f(path);
  f.write(prefix.data(), prefix.size());
  std::vector<char> piece;
  for (const std::string& n : s.names) {
    const SafeTensorInfo& ti = src.info(n);
    const int64_t count = int64_t(elements(ti));
    const uint64_t in_size = stored_size(ti);
    const char* data = static_cast<const char*>(src.data_of(n));
    for (int64_t at = 0; at < count; at += kPiece) {
      const int64_t k = std::min(kPiece, count - at);
      piece.resize(size_t(k) * out_size);
      convert(data + uint64_t(at) * in_size, ti.dtype, piece.data(), s.to, k);
      f.write(piece.data(), piece.size());
    }
  }
  f.commit();
}

}  // namespace

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string hex16(uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
  return b;
}

std::shared_ptr<SafeTensorsFile> converted_cache_for(const SafeTensorsFile& src, const std::string& dir, DType to) {
  const Source s = describe(src, to);
  if (s.names.empty()) return nullptr;
  std::string stem = fs::path(src.path()).filename().string();
  if (const size_t dot = stem.rfind(".safetensors"); dot != std::string::npos) stem.resize(dot);
  // The f32 key is the one of the first version of this cache (no dtype in it), so entries made then stay valid.
  const std::string key = hex16(fnv1a(s.id.str() + "|" +
                                      kVersion + (to == DType::F32 ? "" : "|bf16")));
  const std::string path = dir + "/" + stem + "-" + key + "." + dtype_name(to) + ".safetensors";
  if (auto f = open_valid(path, src, s)) return f;
  std::error_code ec;
  fs::create_directories(dir, ec);
  DIT_CHECK(!ec, "weight cache " << dir << ": cannot create the directory: " << ec.message());
  FileLock lock(dir + "/.lock");  // one lock per cache directory: conversions into it take turns
  if (auto f = open_valid(path, src, s)) return f;  // another process made it while we waited
  remove_stale_temp_files(dir);  // what writers killed mid-conversion left (runtime/atomic_file.h)
  remove_stale_copies(dir);
  // One line, from the one process that converts: a first run can take a while on a large checkpoint.
  std::fprintf(stderr, "weight cache: converting %s to %s once (%.0f MB) into %s; later runs map it\n",
               printable(src.path()).c_str(), dtype_name(to), double(s.bytes) / 1e6, printable(dir).c_str());
  try {
    build(path, src, s);
  } catch (const Error& e) {
    DIT_FAIL("weight cache " << path << ": cannot write the " << dtype_name(to) << " copy of " << src.path() << ": "
                             << e.what());
  }
  auto f = open_valid(path, src, s);
  DIT_CHECK(f, "weight cache " << path << ": the file just written does not read back as the copy of " << src.path());
  return f;
}

std::shared_ptr<SafeTensorsFile> f32_cache_for(const SafeTensorsFile& src, const std::string& dir) {
  return converted_cache_for(src, dir, DType::F32);
}

void use_weight_cache(WeightStore& store, DType compute, const WeightCacheOption& cache) {
  if (cache.dir.empty()) return;
  store.use_packed_weights(std::make_shared<PackedWeightDir>(cache.dir + "/packed", cache.optional));
  try {
    store.use_converted_cache(cache.dir, compute);
  } catch (const Error& e) {
    if (!cache.optional) throw;
    std::fprintf(stderr, "warning: %s; converting in memory instead (--weight-cache off silences this)\n",
                 printable(e.what()).c_str());
  }
}

WeightCacheOption weight_cache_option(const std::string& flag_value) {
  if (flag_value.empty()) return {default_weight_cache_dir(), true};  // the default: a failure warns, never stops a run
  if (flag_value == "off") return {};
  return {flag_value, false};
}

std::string default_weight_cache_dir() { return cache_dir("DIT_WEIGHT_CACHE", "weights"); }  // "": no cache

}  // namespace dit
