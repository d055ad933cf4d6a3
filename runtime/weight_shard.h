// Tensor-parallel shards of a PyTorch [out, in] linear weight (runtime/tensor_parallel.h):
//  - rows [begin, end) (output features, column-parallel): a view into the checkpoint's
//    memory map, no copy — a rank touches only its rows' pages;
//  - columns [begin, end) (input features, row-parallel): copied once into contiguous memory
//    (a strided view would touch most pages of every row).
#pragma once

#include "runtime/linear.h"
#include "runtime/token_split.h"

namespace dit {

// Rows `rows` of weight [out, in] and of bias [out] (bias may be undefined), for `compute`.
LinearWeight shard_rows(const Tensor& weight, const Tensor& bias, DType compute, TokenRange rows);
// Columns `cols` of weight [out, in]; the bias whole (a row-parallel layer adds it once).
LinearWeight shard_cols(const Tensor& weight, const Tensor& bias, DType compute, TokenRange cols);

}  // namespace dit
