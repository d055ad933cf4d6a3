// Tensor-parallel shards of a PyTorch [out, in] linear weight (runtime/tensor_parallel.h):
//  - rows [begin, end) (output features, column-parallel): a view into the checkpoint's
//    memory map, no copy — a rank touches only its rows' pages;
//  - columns [begin, end) (input features, row-parallel): copied once into contiguous memory
//    (reading a strided view in place would touch most pages of every row), or a strided view
//    where the Linear reads the shard in its packed form (LinearWeight::packed: packed once
//    from the view, then only the entry is read).
#pragma once

#include "runtime/linear.h"
#include "runtime/token_split.h"

namespace dit {

// Rows `rows` of weight [out, in] and of bias [out] (bias may be undefined), for `compute`.
LinearWeight shard_rows(const Tensor& weight, const Tensor& bias, DType compute, TokenRange rows);
// Columns `cols` of weight [out, in]; the bias whole (a row-parallel layer adds it once).
LinearWeight shard_cols(const Tensor& weight, const Tensor& bias, DType compute, TokenRange cols);
// The same columns as a strided view of `weight` (LinearWeight::cols), no copy: weight must be
// stored in the compute type.
LinearWeight shard_cols_view(const Tensor& weight, const Tensor& bias, DType compute, TokenRange cols);

}  // namespace dit
