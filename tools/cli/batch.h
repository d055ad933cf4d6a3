// dit-gen's batch mode: `dit-gen --batch FILE --output-dir DIR` — many prompts per model load.
//
//  - Items come from tools/cli/batch_items.h (JSON Lines or plain text); bad items are
//    recorded as failed and the batch goes on; the exit code is 1 if any item failed.
//  - Resume: rank 0 skips items whose PNG is already there with matching parameters
//    (tools/cli/batch_resume.h) unless --overwrite, and tells every rank.
//  - --dp D: the items left to generate go round-robin to the D replicas (item j of that
//    list to replica j % D); each replica (cfg × ring × ulysses ranks) runs its share,
//    same-shape items together (wherever they stand) as micro-batches of up to --micro-batch N.
//    Images do not depend on D or N (Pipeline::generate_batch is bit-identical to generate).
//  - Each replica's output rank writes its PNGs and appends DIR/results.jsonl
//    (tools/cli/batch_results.h); it also posts each record to the rendezvous store, from
//    which rank 0 draws the overall progress (tools/cli/batch_progress.h) and the summary.
#pragma once

#include "tools/cli/session.h"

namespace dit::cli {

int run_batch(const GenOptions& o, Session& s);

}  // namespace dit::cli
