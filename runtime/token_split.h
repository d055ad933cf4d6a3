// How a sequence of tokens is split across the ranks of a sequence-parallel group:
// contiguous ranges, sizes differing by at most one (the first tokens % parts ranges get
// the extra token), possibly empty when there are fewer tokens than ranks. Never padded,
// never truncated.
#pragma once

#include <cstdint>
#include <vector>

namespace dit {

struct TokenRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

TokenRange split_tokens(int64_t tokens, int parts, int index);
std::vector<TokenRange> split_all(int64_t tokens, int parts);

}  // namespace dit
