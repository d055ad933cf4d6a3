// Tensor: a shape, an element type and 64-byte aligned storage, or a view into storage
// owned by someone else (a memory-mapped checkpoint, a larger buffer). Row-major, dense.
//
//   Tensor x = Tensor::empty({2, 256, 1152});          // owns aligned memory
//   float* p = x.f32();
//   Tensor row = x.slice0(1, 2);                        // view of batch element 1, no copy
//   Tensor w = Tensor::view(ptr, {1152, 1152}, DType::BF16, keepalive);
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/dtype.h"

namespace dit {

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& s);  // "[2, 256, 1152]"
int64_t shape_numel(const Shape& s);

class Tensor {
 public:
  Tensor() = default;

  // New zero-filled storage, 64-byte aligned.
  static Tensor empty(const Shape& shape, DType dtype = DType::F32);
  // A view of memory owned by `owner` (kept alive as long as the view lives).
  static Tensor view(void* data, const Shape& shape, DType dtype, std::shared_ptr<void> owner);
  // A deep copy converted to `dtype` (f32 <-> bf16).
  Tensor to(DType dtype) const;
  Tensor clone() const { return to(dtype_); }

  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_.at(i < 0 ? shape_.size() + i : i); }
  int ndim() const { return int(shape_.size()); }
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  bool defined() const { return data_ != nullptr || (owner_ && numel() == 0); }

  void* data() { return data_; }
  const void* data() const { return data_; }
  float* f32();  // throws dit::Error if the dtype is not f32
  const float* f32() const;
  uint16_t* bf16();  // throws dit::Error if the dtype is not bf16
  const uint16_t* bf16() const;
  // f32() for T = float, bf16() for T = uint16_t: code written once over the element type
  // (with for_element_type below).
  template <class T>
  T* as();
  template <class T>
  const T* as() const {
    return const_cast<Tensor*>(this)->as<T>();
  }

  // Same storage, another shape with the same element count.
  Tensor reshape(const Shape& shape) const;
  // Rows [begin, end) along dimension 0, no copy.
  Tensor slice0(int64_t begin, int64_t end) const;

 private:
  Shape shape_;
  DType dtype_ = DType::F32;
  void* data_ = nullptr;
  std::shared_ptr<void> owner_;
};

// Rows of several [n_i, k] tensors of one dtype stacked into one [sum n_i, k] tensor (a copy).
Tensor concat_rows(const std::vector<Tensor>& parts);

template <class T>
T* Tensor::as() {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, uint16_t>, "Tensor::as<float> or Tensor::as<uint16_t>");
  if constexpr (std::is_same_v<T, float>)
    return f32();
  else
    return bf16();
}

// f(float{}) for F32, f(uint16_t{}) for BF16: one generic lambda over the element type
// (auto tag; using T = decltype(tag)) instead of a branch per type.
template <class F>
decltype(auto) for_element_type(DType t, F&& f) {
  if (t == DType::BF16) return f(uint16_t{});
  return f(float{});
}

}  // namespace dit
