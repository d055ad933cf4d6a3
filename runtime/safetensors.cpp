// SafeTensorsFile: memory-mapped, validated safetensors reader (docs/checkpoints.md).
#include "runtime/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <tuple>

#include <nlohmann/json.hpp>

#include "runtime/error.h"
#include "runtime/printable.h"

namespace dit {
namespace {

constexpr uint64_t kMaxHeader = 100000000;  // same limit as the reference implementation

// Bits per element of every dtype the format defines; 0 for unknown names.
int dtype_bits(const std::string& d) {
  static const std::map<std::string, int> bits = {
      {"BOOL", 8},        {"U8", 8},          {"I8", 8},           {"I16", 16},         {"U16", 16},
      {"F16", 16},        {"BF16", 16},       {"I32", 32},         {"U32", 32},         {"F32", 32},
      {"F64", 64},        {"I64", 64},        {"U64", 64},         {"C64", 64},         {"F8_E4M3", 8},
      {"F8_E5M2", 8},     {"F8_E8M0", 8},     {"F8_E4M3FNUZ", 8},  {"F8_E5M2FNUZ", 8},  {"F4", 4},
      {"F6_E2M3", 6},     {"F6_E3M2", 6}};
  auto it = bits.find(d);
  return it == bits.end() ? 0 : it->second;
}

[[noreturn]] void fail_tensor(const std::string& path, const std::string& name, const std::string& what) {
  throw Error(path + ": tensor '" + printable(name) + "': " + what);
}

// A value for an error message; containers are only named (they may be huge or deep).
std::string short_dump(const nlohmann::json& j) {
  if (j.is_structured()) return j.type_name();
  std::string s = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

// Nesting depth of [ and { outside strings. Checked before parsing so that a hostile header
// cannot exhaust the stack in recursive JSON code (a valid header has depth 3).
int json_depth(const char* s, size_t n) {
  int depth = 0, max_depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < n; ++i) {
    char c = s[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      max_depth = std::max(max_depth, ++depth);
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return max_depth;
}

// A shape dimension: a non-negative integer that fits int64.
int64_t parse_dim(const std::string& path, const std::string& name, const nlohmann::json& d) {
  if (d.is_number_unsigned() && d.get<uint64_t>() <= uint64_t(std::numeric_limits<int64_t>::max()))
    return int64_t(d.get<uint64_t>());
  if (d.is_number_integer() && !d.is_number_unsigned())
    fail_tensor(path, name, "negative dimension in shape (expected >= 0, found " + short_dump(d) + ")");
  fail_tensor(path, name, "bad shape dimension (expected a non-negative integer, found " + short_dump(d) + ")");
}

uint64_t parse_offset(const std::string& path, const std::string& name, const nlohmann::json& o) {
  if (!o.is_number_unsigned())
    fail_tensor(path, name, "bad data_offsets entry (expected a non-negative integer, found " + short_dump(o) + ")");
  return o.get<uint64_t>();
}

// Byte size of numel(shape) elements of `bits` bits; throws on overflow or partial bytes.
uint64_t byte_size(const std::string& path, const std::string& name, const Shape& shape, int bits) {
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(n, uint64_t(d), &n) || n > uint64_t(std::numeric_limits<int64_t>::max()))
      fail_tensor(path, name, "shape " + shape_str(shape) + " has too many elements (overflows int64)");
  }
  uint64_t total_bits = 0;
  if (__builtin_mul_overflow(n, uint64_t(bits), &total_bits))
    fail_tensor(path, name, "shape " + shape_str(shape) + " is too large (byte size overflows)");
  if (total_bits % 8 != 0)
    fail_tensor(path, name, "shape " + shape_str(shape) + " does not fill whole bytes");
  return total_bits / 8;
}

SafeTensorInfo parse_entry(const std::string& path, const std::string& name, const nlohmann::json& e,
                           uint64_t data_size) {
  if (!e.is_object()) fail_tensor(path, name, "entry is not an object (found " + short_dump(e) + ")");
  SafeTensorInfo info;
  auto dt = e.find("dtype");
  if (dt == e.end() || !dt->is_string()) fail_tensor(path, name, "missing or non-string \"dtype\"");
  info.dtype = dt->get<std::string>();
  int bits = dtype_bits(info.dtype);
  if (bits == 0) fail_tensor(path, name, "unknown dtype '" + printable(info.dtype) + "'");

  auto sh = e.find("shape");
  if (sh == e.end() || !sh->is_array()) fail_tensor(path, name, "missing or non-array \"shape\"");
  for (const auto& d : *sh) info.shape.push_back(parse_dim(path, name, d));

  auto off = e.find("data_offsets");
  if (off == e.end() || !off->is_array() || off->size() != 2)
    fail_tensor(path, name, "\"data_offsets\" must be [begin, end]");
  info.begin = parse_offset(path, name, (*off)[0]);
  info.end = parse_offset(path, name, (*off)[1]);
  if (info.begin > info.end)
    fail_tensor(path, name, "data_offsets begin > end (found [" + std::to_string(info.begin) + ", " +
                                std::to_string(info.end) + "])");
  if (info.end > data_size)
    fail_tensor(path, name, "data_offsets end past the data buffer (expected <= " + std::to_string(data_size) +
                                ", found " + std::to_string(info.end) + ")");
  uint64_t want = byte_size(path, name, info.shape, bits);
  if (want != info.end - info.begin)
    fail_tensor(path, name, "byte span does not match " + info.dtype + " " + shape_str(info.shape) + " (expected " +
                                std::to_string(want) + " bytes, found " + std::to_string(info.end - info.begin) + ")");
  return info;
}

std::map<std::string, std::string> parse_metadata(const std::string& path, const nlohmann::json& m) {
  if (!m.is_object()) throw Error(path + ": __metadata__ must be an object (found " + short_dump(m) + ")");
  std::map<std::string, std::string> out;
  for (auto it = m.begin(); it != m.end(); ++it) {
    if (!it->is_string())
      throw Error(path + ": __metadata__ key '" + printable(it.key()) + "': expected a string value, found " +
                  short_dump(*it));
    out[it.key()] = it->get<std::string>();
  }
  return out;
}

}  // namespace

std::shared_ptr<SafeTensorsFile> SafeTensorsFile::open(const std::string& path) {
  std::shared_ptr<SafeTensorsFile> f(new SafeTensorsFile(path));
  f->map_file();
  f->parse_header();
  f->check_coverage();
  return f;
}

SafeTensorsFile::~SafeTensorsFile() {
  if (map_) ::munmap(const_cast<uint8_t*>(map_), map_size_);
}

void SafeTensorsFile::map_file() {
  int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(path_ + ": cannot open: " + std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(path_ + ": not a regular file");
  }
  size_t size = size_t(st.st_size);
  if (size < 8) {
    ::close(fd);
    throw Error(path_ + ": file too small for a safetensors header (expected >= 8 bytes, found " +
                std::to_string(size) + ")");
  }
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  int map_errno = errno;
  ::close(fd);
  if (p == MAP_FAILED) throw Error(path_ + ": mmap failed: " + std::strerror(map_errno));
  map_ = static_cast<const uint8_t*>(p);
  map_size_ = size;
}

void SafeTensorsFile::parse_header() {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | map_[i];  // little-endian
  if (n > kMaxHeader)
    throw Error(path_ + ": header length too large (expected <= " + std::to_string(kMaxHeader) + ", found " +
                std::to_string(n) + ")");
  if (8 + n > map_size_)
    throw Error(path_ + ": header length past end of file (expected <= " + std::to_string(map_size_ - 8) +
                ", found " + std::to_string(n) + ")");
  const char* text = reinterpret_cast<const char*>(map_ + 8);
  if (n == 0 || text[0] != '{')
    throw Error(path_ + ": header is not a JSON object (expected '{' at byte 8)");
  data_ = map_ + 8 + n;
  data_size_ = map_size_ - 8 - n;

  const int depth = json_depth(text, n);
  if (depth > 8)
    throw Error(path_ + ": header JSON nested too deeply (expected <= 8 levels, found " + std::to_string(depth) + ")");
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text, text + n);
  } catch (const nlohmann::json::exception& e) {
    throw Error(path_ + ": header is not valid JSON: " + printable(e.what(), 300));
  }
  if (!header.is_object()) throw Error(path_ + ": header is not a JSON object");
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") metadata_ = parse_metadata(path_, *it);
    else tensors_[it.key()] = parse_entry(path_, it.key(), *it, data_size_);
  }
}

// The tensors must tile the data buffer exactly: no overlaps, no holes, no trailing bytes.
void SafeTensorsFile::check_coverage() const {
  std::vector<std::tuple<uint64_t, uint64_t, const std::string*>> spans;
  for (const auto& kv : tensors_) spans.emplace_back(kv.second.begin, kv.second.end, &kv.first);
  std::sort(spans.begin(), spans.end());
  uint64_t expected = 0;
  const std::string* prev = nullptr;
  for (const auto& s : spans) {
    uint64_t begin = std::get<0>(s);
    const std::string& name = *std::get<2>(s);
    if (begin < expected)
      fail_tensor(path_, name, "data overlaps tensor '" + printable(*prev) + "' (expected begin >= " + std::to_string(expected) +
                                   ", found " + std::to_string(begin) + ")");
    if (begin > expected)
      fail_tensor(path_, name, "hole in the data buffer before this tensor (expected begin " +
                                   std::to_string(expected) + ", found " + std::to_string(begin) + ")");
    expected = std::get<1>(s);
    prev = &name;
  }
  if (expected != data_size_)
    throw Error(path_ + ": data buffer not fully covered by tensors (expected " + std::to_string(expected) +
                " bytes, found " + std::to_string(data_size_) + ")");
}

std::vector<std::string> SafeTensorsFile::names() const {
  std::vector<std::string> out;
  for (const auto& kv : tensors_) out.push_back(kv.first);
  return out;
}

const SafeTensorInfo& SafeTensorsFile::info(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) fail_tensor(path_, name, "not found");
  return it->second;
}

const void* SafeTensorsFile::data_of(const std::string& name) const { return data_ + info(name).begin; }

Tensor SafeTensorsFile::get(const std::string& name) const {
  const SafeTensorInfo& ti = info(name);
  const uint8_t* src = data_ + ti.begin;
  if (ti.dtype == "F16") {
    Tensor t = Tensor::empty(ti.shape, DType::F32);
    float* dst = t.f32();
    for (int64_t i = 0, n = t.numel(); i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, src + 2 * i, 2);
      dst[i] = f16_to_f32(h);
    }
    return t;
  }
  if (ti.dtype != "F32" && ti.dtype != "BF16")
    fail_tensor(path_, name, "unsupported dtype (expected F32, BF16 or F16, found " + ti.dtype + ")");
  DType dt = ti.dtype == "F32" ? DType::F32 : DType::BF16;
  if (reinterpret_cast<uintptr_t>(src) % dtype_size(dt) != 0) {  // misaligned: copy
    Tensor t = Tensor::empty(ti.shape, dt);
    std::memcpy(t.data(), src, t.nbytes());
    return t;
  }
  // Read-only mapping: the view must not be written to (see safetensors.h).
  auto self = std::const_pointer_cast<SafeTensorsFile>(shared_from_this());
  return Tensor::view(const_cast<uint8_t*>(src), ti.shape, dt, std::move(self));
}

std::vector<int64_t> SafeTensorsFile::get_int64(const std::string& name) const {
  const SafeTensorInfo& ti = info(name);
  if (ti.dtype != "I64" && ti.dtype != "I32" && ti.dtype != "U8")
    fail_tensor(path_, name, "not an integer tensor (expected I64, I32 or U8, found " + ti.dtype + ")");
  const uint8_t* src = data_ + ti.begin;
  const size_t esz = ti.dtype == "I64" ? 8 : ti.dtype == "I32" ? 4 : 1, n = size_t((ti.end - ti.begin) / esz);
  std::vector<int64_t> out(n);
  for (size_t i = 0; i < n; ++i) {
    if (esz == 8) {
      std::memcpy(&out[i], src + 8 * i, 8);
    } else if (esz == 1) {
      out[i] = src[i];
    } else {
      int32_t v;
      std::memcpy(&v, src + 4 * i, 4);
      out[i] = v;
    }
  }
  return out;
}

size_t SafeTensorsFile::drop_pages() const {
  if (!map_ || map_size_ == 0) return 0;
  if (::madvise(const_cast<uint8_t*>(map_), map_size_, MADV_DONTNEED) != 0)
    throw Error(path_ + ": madvise(MADV_DONTNEED) failed: " + std::strerror(errno));
  return map_size_;
}

size_t SafeTensorsFile::drop_range(const void* p, size_t bytes) const {
  const uint8_t* b = static_cast<const uint8_t*>(p);
  if (!map_ || b < map_ || b + bytes > map_ + map_size_) return 0;  // not ours (e.g. a converted copy)
  const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t lo = (uintptr_t(b) + page - 1) / page * page, hi = (uintptr_t(b) + bytes) / page * page;
  if (hi <= lo) return 0;  // only whole pages inside the range: neighbours may still be in use
  if (::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED) != 0)
    throw Error(path_ + ": madvise(MADV_DONTNEED) failed: " + std::strerror(errno));
  return hi - lo;
}

}  // namespace dit
