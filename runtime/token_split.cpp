#include "runtime/token_split.h"

#include "runtime/error.h"

namespace dit {

TokenRange split_tokens(int64_t tokens, int parts, int index) {
  DIT_CHECK(tokens >= 0 && parts >= 1 && index >= 0 && index < parts,
            "split_tokens: bad split of " << tokens << " tokens into " << parts << " parts (index " << index << ")");
  const int64_t base = tokens / parts, extra = tokens % parts;
  const int64_t begin = index * base + (index < extra ? index : extra);
  return {begin, begin + base + (index < extra ? 1 : 0)};
}

std::vector<TokenRange> split_all(int64_t tokens, int parts) {
  std::vector<TokenRange> r;
  for (int i = 0; i < parts; ++i) r.push_back(split_tokens(tokens, parts, i));
  return r;
}

}  // namespace dit
