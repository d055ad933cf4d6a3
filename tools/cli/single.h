// dit-gen's single-image mode: one prompt -> one PNG (and optional .npy outputs).
#pragma once

#include "tools/cli/session.h"

namespace dit::cli {

int run_single(const GenOptions& o, Session& s);

}  // namespace dit::cli
