// Shared by the libFuzzer harnesses: what counts as a finding.
//
// A harness feeds one input to the code under test. dit::Error is the expected answer to
// bad input (one line naming the file/key) and is swallowed; anything else — a crash, a
// sanitizer report, undefined behaviour, an exception of another type escaping (its
// message would not name the file), an allocation past libFuzzer's -malloc_limit_mb —
// is a finding: libFuzzer stops and writes the input to crash-<sha1>.
#pragma once

#include <cstdio>
#include <exception>

#include "runtime/error.h"

namespace dit_fuzz {

// Runs f(); returns true when it completed, false when it refused the input with dit::Error.
template <class F>
bool accepts(F&& f) {
  try {
    f();
    return true;
  } catch (const dit::Error&) {
    return false;
  }
}

}  // namespace dit_fuzz
