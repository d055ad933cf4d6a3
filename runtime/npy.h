// NumPy .npy files (format version 1.0), for latents and debugging dumps.
//
//   write_npy("latents.npy", latents);     // float32, C order; numpy.load() reads it
//   Tensor t = read_npy("latents.npy");    // strict: only what write_npy produces ('<f4', C order)
#pragma once

#include <string>

#include "runtime/tensor.h"

namespace dit {

// Writes `t` as float32 (bf16 tensors are converted), atomically. Throws dit::Error naming the path.
void write_npy(const std::string& path, const Tensor& t);

// Reads a little-endian float32, C-order .npy (versions 1.0-3.0), validating the header and size.
Tensor read_npy(const std::string& path);

}  // namespace dit
