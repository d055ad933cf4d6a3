// Resuming a batch: an item whose PNG already exists is skipped when the parameters text
// embedded in it says it is the same image: the text Pipeline::parameters gives for the
// item's resolved request, compared up to its ", Version: " field (models/dit_gen.h,
// same_parameters). So whatever changes the image (prompt, negative prompt, steps, sampler,
// CFG scale, seed, size, model, dtype, ...) makes the item generate again; a new dit-gen
// version alone does not.
#pragma once

#include <string>

namespace dit::cli {

// True when `path` is a regular file holding a PNG whose "parameters" text describes the
// same image as `expected` (false for a missing, unreadable or corrupt file, or a PNG
// without parameters).
bool output_is_done(const std::string& path, const std::string& expected);

}  // namespace dit::cli
