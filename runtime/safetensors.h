// safetensors checkpoints: reading (memory-mapped, fully validated), sharded model
// directories (WeightStore) and writing. Format: docs/checkpoints.md.
//
//   auto f = SafeTensorsFile::open("transformer/diffusion_pytorch_model.safetensors");
//   Tensor w = f->get("pos_embed.proj.weight");        // zero-copy view for F32/BF16
//
//   WeightStore ws = WeightStore::open_dir(model_dir + "/transformer");
//   Tensor w = ws.get("pos_embed.proj.weight", {1152, 4, 2, 2});   // checks the shape
//
//   write_safetensors("out.safetensors", {{"noise", x}}, {{"format", "pt"}});
//
// Reading never trusts the file: the header length, the JSON, every dtype, shape and offset
// and the coverage of the data buffer are checked before any tensor byte is touched. Errors
// are one line: "<path>: tensor '<name>': <what> (expected X, found Y)".
//
// IMPORTANT: tensors returned by get() for F32/BF16 are views into a read-only mapping
// (PROT_READ). Treat them as const: writing through them crashes. clone() them to modify.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/packed_source.h"
#include "runtime/tensor.h"

namespace dit {

struct SafeTensorInfo {
  std::string dtype;   // as in the file: "F32", "BF16", "F16", "I64", ...
  Shape shape;
  uint64_t begin = 0;  // byte span [begin, end) relative to the data buffer
  uint64_t end = 0;
};

class SafeTensorsFile : public std::enable_shared_from_this<SafeTensorsFile> {
 public:
  // Maps and validates the file; throws dit::Error naming the path and the problem.
  static std::shared_ptr<SafeTensorsFile> open(const std::string& path);
  ~SafeTensorsFile();
  SafeTensorsFile(const SafeTensorsFile&) = delete;
  SafeTensorsFile& operator=(const SafeTensorsFile&) = delete;

  const std::string& path() const { return path_; }
  std::vector<std::string> names() const;  // sorted
  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  const SafeTensorInfo& info(const std::string& name) const;  // throws if missing
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // F32/BF16: a view into the mapping that keeps this file alive (copied instead when the
  // data is not aligned to the element size). F16: converted to a new F32 tensor. Other
  // dtypes (allowed in the file) throw here, naming the dtype and the tensor.
  Tensor get(const std::string& name) const;
  // The tensor's bytes in the read-only mapping, in the file's dtype (info(name).dtype).
  const void* data_of(const std::string& name) const;
  // I64, I32 or U8 tensors (e.g. token ids, masks and images of golden files) as int64 values in
  // row-major order; other dtypes throw, naming the tensor and the dtype.
  std::vector<int64_t> get_int64(const std::string& name) const;

  // Gives the mapping's resident pages back (madvise MADV_DONTNEED): the process's RSS
  // drops by the tensors it touched, the page cache keeps them, and a later read simply
  // faults them in again. Views from get() stay valid. Returns the bytes advised.
  size_t drop_pages() const;
  // The same for the whole pages inside [p, p + bytes) when they lie in this file's mapping
  // (a tensor copied or converted at load, whose mapped pages are no longer needed); returns
  // the bytes advised (0 for memory that is not this file's).
  size_t drop_range(const void* p, size_t bytes) const;

 private:
  explicit SafeTensorsFile(std::string path) : path_(std::move(path)) {}
  void map_file();
  void parse_header();
  void check_coverage() const;

  std::string path_;
  const uint8_t* map_ = nullptr;
  size_t map_size_ = 0;
  const uint8_t* data_ = nullptr;  // start of the byte buffer (map_ + 8 + header length)
  uint64_t data_size_ = 0;
  std::map<std::string, SafeTensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// The weights of one model component directory (e.g. <model>/transformer), in one file or
// sharded with an index, as diffusers saves them.
class WeightStore {
 public:
  WeightStore() = default;
  // Opens <dir>/<stem>.safetensors, else <dir>/<stem>.safetensors.index.json and its shards.
  static WeightStore open_dir(const std::string& dir, const std::string& stem = "diffusion_pytorch_model");

  bool has(const std::string& name) const { return where_.count(name) != 0; }
  std::vector<std::string> names() const;  // sorted
  Tensor get(const std::string& name) const;  // "missing tensor 'X' in <dir>"
  Tensor get(const std::string& name, const Shape& expected) const;  // also checks the shape
  // The file (or index + shard count) the weights came from, for messages.
  std::string describe() const { return describe_; }
  // The file holding `name` (throws like get() when missing).
  const SafeTensorsFile& file_of(const std::string& name) const;
  // `name` as `dtype`, shape-checked: the stored tensor when it is of that type (a view into
  // the mapping); else the converted-weight cache's copy when one of that type is on (a view
  // into the cache's mapping, shared by every process); else a private converted copy, after
  // which the source's mapped pages are given back. For weights used in the compute type.
  Tensor get_as(const std::string& name, DType dtype, const Shape& expected) const;
  // Whether get_as(name, dtype) is a view (no private copy): what QkvProjection::Auto asks.
  bool in_place(const std::string& name, DType dtype) const;
  // From now on, serve the checkpoint's tensors of other types than `compute` from the
  // converted-weight cache in `dir` (runtime/weight_cache.h: created on first use, mapped
  // read-only and shared by every process). float32: get() returns every F16 / BF16 tensor
  // as F32 from it; bfloat16: get_as(name, BF16) reads F32 / F16 weights from it, get() is
  // unchanged. Throws dit::Error naming the cache file on failure.
  void use_converted_cache(const std::string& dir, DType compute);
  // From now on, packed_source() names entries in `dir` (runtime/packed_weights.h): the
  // linear weights in the matmul's layout, made once per machine and mapped by every process.
  void use_packed_weights(std::shared_ptr<const PackedWeightDir> dir) { packed_ = std::move(dir); }
  // Where linear weight `name`, read as `dtype`, may be kept packed: use_packed_weights' directory
  // and a key naming its content (its file's path, size and modification time, the tensor, the
  // type; a shard appends its range). Empty when use_packed_weights was not called.
  PackedSource packed_source(const std::string& name, DType dtype) const;
  // drop(t) for later: a function that gives back t's mapped pages when called (it keeps the
  // store's files alive, not the store); returns the bytes advised.
  std::function<size_t()> releaser(const Tensor& t) const;
  // SafeTensorsFile::drop_pages() on every file: returns the bytes advised.
  size_t drop_pages() const;
  // Gives back the mapped pages of `t` (a tensor of this store) after it was copied; no-op
  // for memory outside the store's mappings.
  size_t drop(const Tensor& t) const;

 private:
  static WeightStore open_index(const std::string& dir, const std::string& index_path);
  std::string dir_;
  std::string describe_;
  std::vector<std::shared_ptr<SafeTensorsFile>> files_;
  const SafeTensorsFile* cached(const std::string& name, DType dtype) const;  // the cache holding it, or null
  void check_shape(const std::string& name, const Shape& expected) const;     // "wrong shape" naming the file
  std::vector<std::shared_ptr<SafeTensorsFile>> converted_;  // files_[i]'s converted copy, or null
  DType converted_dtype_ = DType::F32;                       // the type of converted_
  std::map<std::string, size_t> where_;  // tensor name -> index in files_
  std::shared_ptr<const PackedWeightDir> packed_;
};

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// The safetensors dtype string of a compute type: "F32" or "BF16".
const char* safetensors_dtype(DType t);

// A safetensors file's first bytes for its header JSON text: the length (8 bytes, little
// endian) and the text padded with spaces to a multiple of 8, so the data that follows is aligned.
std::string safetensors_prefix(std::string header_json);

// Writes F32/BF16 tensors (per each tensor's dtype) to a safetensors file, atomically.
// The header is padded with spaces to a multiple of 8; tensors are laid out by descending
// element size, then by name (name order when all share one dtype), so data stays aligned.
void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// shards <= 1 (or a single tensor): <dir>/<stem>.safetensors. Otherwise <dir>/<stem>-00001-of-0000K.safetensors ...
// (tensors split in name order into K = min(shards, count) parts of similar size) plus
// <dir>/<stem>.safetensors.index.json, like diffusers. `metadata` goes into every shard.
void write_sharded_safetensors(const std::string& dir, const std::string& stem, const NamedTensors& tensors,
                               int shards, const std::map<std::string, std::string>& metadata = {});

}  // namespace dit
