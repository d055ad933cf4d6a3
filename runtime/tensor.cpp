#include "runtime/tensor.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "runtime/error.h"

namespace dit {

namespace {
// Large tensors come straight from the kernel (anonymous mappings are zero): no pass over
// them here, and each page is faulted in by whichever thread first writes it (a decoder's
// 134 MB of buffers took 0.18 s to zero on one thread in Tensor::empty). Pages never
// written are never made resident. Small ones: aligned_alloc and memset.
constexpr size_t kMapFrom = size_t(4) << 20;

// The mapping starts on a 2 MB boundary and asks for transparent huge pages (honoured where
// /sys/kernel/mm/transparent_hugepage/enabled is `always` or `madvise`, a no-op elsewhere):
// the first write to each aligned 2 MB then costs one fault instead of 512, and makes those
// 2 MB resident. On the development VM this took a 256x256 VAE decode from 3.25 to 2.66 s
// (f32) and 1.96 to 1.67 s (bf16), medians; docs/memory.md. The tail past the last 2 MB
// boundary keeps 4 KB pages.
constexpr size_t kHugePage = size_t(2) << 20;

std::shared_ptr<void> map_zeroed(size_t bytes) {
  const size_t reserve = bytes + kHugePage;
  void* raw = ::mmap(nullptr, reserve, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t start = (begin + kHugePage - 1) & ~uintptr_t(kHugePage - 1);
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t end = (start + bytes + page - 1) & ~uintptr_t(page - 1);
  if (start > begin) ::munmap(raw, start - begin);
  if (begin + reserve > end) ::munmap(reinterpret_cast<void*>(end), begin + reserve - end);
  void* p = reinterpret_cast<void*>(start);
  const size_t len = end - start;
  ::madvise(p, len, MADV_HUGEPAGE);  // a hint: EINVAL where the kernel has no THP
  return std::shared_ptr<void>(p, [len](void* q) { ::munmap(q, len); });
}

std::shared_ptr<void> allocate_zeroed(size_t bytes) {
  if (bytes >= kMapFrom) return map_zeroed(bytes);
  void* p = std::aligned_alloc(64, bytes);
  if (!p) return nullptr;
  std::memset(p, 0, bytes);
  return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
}
}  // namespace

DType parse_dtype(const std::string& s) {
  if (s == "f32" || s == "float32" || s == "fp32") return DType::F32;
  if (s == "bf16" || s == "bfloat16") return DType::BF16;
  DIT_FAIL("unknown dtype '" << s << "' (expected f32 or bf16)");
}

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << "]";
  return os.str();
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

Tensor Tensor::empty(const Shape& shape, DType dtype) {
  for (int64_t d : shape) DIT_CHECK(d >= 0, "tensor shape " << shape_str(shape) << " has a negative dimension");
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  size_t bytes = t.nbytes();
  size_t alloc = ((bytes + 63) / 64) * 64;
  if (alloc == 0) alloc = 64;
  t.owner_ = allocate_zeroed(alloc);
  if (!t.owner_) DIT_FAIL("out of memory allocating " << bytes << " bytes for a tensor of shape " << shape_str(shape));
  t.data_ = t.owner_.get();
  return t;
}

Tensor Tensor::view(void* data, const Shape& shape, DType dtype, std::shared_ptr<void> owner) {
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.data_ = data;
  t.owner_ = std::move(owner);
  return t;
}

Tensor Tensor::to(DType dtype) const {
  Tensor out = empty(shape_, dtype);
  const int64_t n = numel();
  if (dtype == dtype_) {
    std::memcpy(out.data_, data_, nbytes());
  } else if (dtype == DType::BF16) {
    const float* s = f32();
    uint16_t* d = out.bf16();
    for (int64_t i = 0; i < n; ++i) d[i] = f32_to_bf16(s[i]);
  } else {
    const uint16_t* s = bf16();
    float* d = out.f32();
    for (int64_t i = 0; i < n; ++i) d[i] = bf16_to_f32(s[i]);
  }
  return out;
}

float* Tensor::f32() {
  DIT_CHECK(dtype_ == DType::F32, "tensor " << shape_str(shape_) << " is " << dtype_name(dtype_) << ", not f32");
  return static_cast<float*>(data_);
}
const float* Tensor::f32() const { return const_cast<Tensor*>(this)->f32(); }
uint16_t* Tensor::bf16() {
  DIT_CHECK(dtype_ == DType::BF16, "tensor " << shape_str(shape_) << " is " << dtype_name(dtype_) << ", not bf16");
  return static_cast<uint16_t*>(data_);
}
const uint16_t* Tensor::bf16() const { return const_cast<Tensor*>(this)->bf16(); }

Tensor Tensor::reshape(const Shape& shape) const {
  DIT_CHECK(shape_numel(shape) == numel(),
            "cannot reshape " << shape_str(shape_) << " to " << shape_str(shape));
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::slice0(int64_t begin, int64_t end) const {
  DIT_CHECK(ndim() >= 1 && begin >= 0 && begin <= end && end <= shape_[0],
            "slice [" << begin << ", " << end << ") out of range for " << shape_str(shape_));
  Tensor t = *this;
  t.shape_[0] = end - begin;
  int64_t row = numel() / (shape_[0] ? shape_[0] : 1);
  t.data_ = static_cast<char*>(data_) + size_t(begin * row) * dtype_size(dtype_);
  return t;
}

Tensor concat_rows(const std::vector<Tensor>& parts) {
  DIT_CHECK(!parts.empty(), "concat_rows: nothing to concatenate");
  int64_t rows = 0;
  const int64_t cols = parts[0].dim(1);
  for (const Tensor& p : parts) {
    DIT_CHECK(p.ndim() == 2 && p.dim(1) == cols && p.dtype() == parts[0].dtype(),
              "concat_rows: mismatched parts " << shape_str(p.shape()));
    rows += p.dim(0);
  }
  Tensor out = Tensor::empty({rows, cols}, parts[0].dtype());
  char* dst = static_cast<char*>(out.data());
  for (const Tensor& p : parts) {
    std::memcpy(dst, p.data(), p.nbytes());
    dst += p.nbytes();
  }
  return out;
}

}  // namespace dit
