// Batch files for `dit-gen --batch FILE`: JSON Lines or plain text -> one BatchItem per
// line, with per-line errors kept as failed items (the batch goes on without them).
//
//   JSON Lines: {"prompt": "goldfish", "seed": 3, "steps": 25, "guidance_scale": 4,
//                "sampler": "ddim", "width": 256, "height": 256, "output": "fish.png",
//                "negative_prompt": "", "max_sequence_length": 120, "resolution_binning": false}
//               any key left out (or null) takes the command line's
//   plain text: one prompt per line; '#' comments and blank lines are skipped
//
// Items are numbered 0, 1, ... in file order (skipped lines do not count); an item without
// a seed gets --seed + index. Outputs default to "{index:05d}-{slug}.png" in --output-dir.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "models/dit_gen.h"
#include "tools/cli/options.h"

namespace dit::cli {

struct BatchItem {
  int index = 0;
  int line = 0;          // 1-based line of the batch file
  Request req;
  std::string output;    // relative to the output directory ("00003-goldfish.png")
  std::string path;      // output_dir / output
  ResolvedRequest resolved;  // filled by validate_items
  std::string error;     // non-empty: the item failed before generation (bad line, bad path, ...)
};

// Parses the batch text. JSON Lines when the first line that is not blank or a '#' comment
// starts with '{', else plain text. Never throws for a bad line: the item gets an error.
std::vector<BatchItem> parse_batch(const std::string& text, const GenOptions& defaults, const std::string& output_dir);

// "Great white shark, white-shark!" -> "great-white-shark-white-shark" (ASCII letters and
// digits, lower case, other runs -> '-', at most 48 characters); "item" if nothing is left.
std::string slugify(const std::string& prompt);

// Throws dit::Error unless `rel` is a relative file path that stays inside the output
// directory ("a/b.png" yes; "/tmp/x.png", "../x.png", "a/../../x.png", "" no).
void check_item_output(const std::string& rel);

// At write time: `dir` (an existing directory an output goes into) must resolve to a place
// inside `output_dir`, so that a symbolic link inside the directory cannot lead out of it.
void check_inside_output_dir(const std::filesystem::path& output_dir, const std::filesystem::path& dir);

// Checks every item that has no error yet against the loaded model with Pipeline::resolve
// (the pipeline's own validator: size, steps, sampler, prompt, guidance with --cfg-parallel)
// and keeps the resolved request. Deterministic: every rank gets the same answer.
void validate_items(std::vector<BatchItem>& items, const Pipeline& pipe);

}  // namespace dit::cli
