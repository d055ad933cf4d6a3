#include "tools/cli/batch.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>

#include "runtime/atomic_file.h"
#include "runtime/error.h"
#include "runtime/npy.h"
#include "runtime/progress.h"
#include "tools/cli/batch_items.h"
#include "tools/cli/batch_progress.h"
#include "tools/cli/batch_results.h"
#include "tools/cli/batch_resume.h"

namespace dit::cli {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

// A failure that ends the whole batch (another rank failed), never recorded as an item's.
struct BatchAbort : Error {
  using Error::Error;
};

std::string read_batch_text(const std::string& file) {
  std::string text;
  if (file == "-") {
    text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  } else {
    std::ifstream f(file, std::ios::binary);
    DIT_CHECK(f, "--batch: cannot read '" << file << "'");
    text.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    DIT_CHECK(!f.bad(), "--batch: error reading '" << file << "'");
  }
  DIT_CHECK(text.size() <= (size_t(256) << 20), "--batch: '" << file << "' is larger than 256 MiB");
  return text;
}

void broadcast_string(ProcessGroup& g, std::string& s) {
  uint64_t n = s.size();
  g.broadcast_bytes(&n, sizeof n, 0);
  s.resize(n);
  if (n) g.broadcast_bytes(s.data(), n, 0);
}

bool comm_broken(Session& s) { return s.mesh && s.mesh->any_failed(); }

// Stops a wait on the store when another rank has failed.
void check_peers(RendezvousStore& store, int world, Clock::time_point& next_dead_check) {
  if (auto ab = store.find_abort()) {
    note_peer_failure();
    throw BatchAbort("rank " + std::to_string(ab->rank) + " failed: " + ab->message);
  }
  if (Clock::now() >= next_dead_check) {
    next_dead_check = Clock::now() + std::chrono::seconds(2);
    std::vector<int> all(world);
    for (int r = 0; r < world; ++r) all[r] = r;
    const std::vector<int> dead = store.dead_local_ranks(all);
    if (!dead.empty()) {
      note_peer_failure();
      throw BatchAbort("rank " + std::to_string(dead[0]) + " is no longer running");
    }
  }
}

// Finished items of replicas 1..D-1 travel to rank 0 through the rendezvous store: the
// replica's output rank sets "dit-batch-item-<replica>-<k>" to its k-th record (JSON), and
// with --progress json "dit-batch-step-<replica>-<k>" to its k-th step.
std::string relay_key(int replica, int k) { return "dit-batch-item-" + std::to_string(replica) + "-" + std::to_string(k); }
std::string step_key(int replica, int k) { return "dit-batch-step-" + std::to_string(replica) + "-" + std::to_string(k); }

struct RelayedStep {
  std::vector<int> indices;  // the micro-batch
  int step = 0, total = 0;
  double seconds = 0, elapsed = 0;
};

std::vector<char> encode_step(const std::vector<int>& indices, const StepInfo& st) {
  const std::string j = nlohmann::json{{"indices", indices},
                                       {"step", st.step},
                                       {"total", st.total},
                                       {"seconds", st.step_seconds},
                                       {"elapsed", st.elapsed_seconds}}
                            .dump();
  return std::vector<char>(j.begin(), j.end());
}

RelayedStep decode_step(const std::vector<char>& v) {
  const auto j = nlohmann::json::parse(v.begin(), v.end());
  return {j.at("indices").get<std::vector<int>>(), j.at("step").get<int>(), j.at("total").get<int>(),
          j.at("seconds").get<double>(), j.at("elapsed").get<double>()};
}

}  // namespace

int run_batch(const GenOptions& o, Session& s) {
  const int rank = s.env.rank;
  Pipeline& pipe = *s.pipe;
  const ModelInfo& info = pipe.info();
  const int D = s.mesh ? s.mesh->degrees()[Axis::Dp] : 1;
  const int replica = s.mesh ? s.mesh->coord(Axis::Dp) : 0;
  const bool out_rank = pipe.parallel().is_output_rank();
  const fs::path dir(o.output_dir);
  const std::string results_path = (dir / "results.jsonl").string();
  std::shared_ptr<RendezvousStore> store = s.world ? s.world->store() : nullptr;

  // Every rank parses the same text (rank 0 reads it: standard input is rank 0's).
  std::string text;
  if (rank == 0) text = read_batch_text(o.batch);
  if (s.world) broadcast_string(*s.world, text);
  std::vector<BatchItem> items = parse_batch(text, o, o.output_dir);
  validate_items(items, pipe);
  const int n = int(items.size());
  if (rank == 0)
    for (const BatchItem& it : items)
      if (it.error.empty() && it.resolved.prompt.truncated)
        std::fprintf(stderr, "dit-gen: item %d: the prompt is longer than %d tokens: it was cut (max_sequence_length)\n",
                     it.index, it.resolved.max_sequence_length);

  std::unique_ptr<ResultsLog> log;
  if (out_rank) {
    fs::create_directories(dir);
    log = std::make_unique<ResultsLog>(results_path);
  }
  // Temporary files of PNG writes a killed run left behind (its writer is gone).
  if (rank == 0) {
    for (const auto& e : fs::recursive_directory_iterator(dir, fs::directory_options::skip_permission_denied))
      if (e.is_directory()) remove_stale_temp_files(e.path().string());
    remove_stale_temp_files(dir.string());
  }
  // Rank 0 decides what is left to do (resume) and tells everyone.
  enum : uint8_t { kGenerate = 0, kSkip = 1, kFailed = 2 };
  std::vector<uint8_t> state(size_t(n), kGenerate);
  if (rank == 0)
    for (int i = 0; i < n; ++i)
      state[i] = !items[i].error.empty()                                         ? kFailed
                 : !o.overwrite && output_is_done(items[i].path, pipe.parameters(items[i].resolved)) ? kSkip
                                                                                             : kGenerate;
  if (s.world && n > 0) s.world->broadcast_bytes(state.data(), size_t(n), 0);

  std::vector<int> todo;
  for (int i = 0; i < n; ++i)
    if (state[i] == kGenerate) todo.push_back(i);
  std::vector<int> mine, expected(size_t(D), 0);
  for (size_t j = 0; j < todo.size(); ++j) {
    expected[j % D]++;
    if (int(j % D) == replica) mine.push_back(todo[j]);
  }
  {
    const int m = info.size_multiple;
    const int W = o.width ? o.width : info.default_width, H = o.height ? o.height : info.default_height;
    print_layout(s, o.degrees(), int64_t(std::max(1, H / m)) * std::max(1, W / m));
  }

  auto record_of = [&](const BatchItem& it) {
    ItemRecord r;
    r.index = it.index;
    r.prompt = it.req.prompt;
    if (info.text_to_image) r.negative_prompt = it.req.negative_prompt;
    r.seed = it.req.seed;
    if (it.error.empty() && it.resolved.prompt.class_conditional) {
      r.class_id = it.resolved.prompt.class_id;
      r.label = it.resolved.prompt.label;
    }
    r.output = it.path;
    return r;
  };

  std::optional<BatchProgress> progress;
  if (rank == 0) {
    progress.emplace(parse_progress_mode(o.progress), n, int(todo.size()), D);
    // Items already recorded as done or skipped are not recorded again (a batch resumed many
    // times must not grow its results without end); the rest go in with one write.
    const auto recorded = recorded_items(results_path);
    std::vector<ItemRecord> records;
    for (int i = 0; i < n; ++i) {
      if (state[i] == kGenerate) continue;
      ItemRecord r = record_of(items[i]);
      r.status = state[i] == kSkip ? "skipped" : "failed";
      r.error = items[i].error;
      if (r.status == "failed" || !recorded.count({r.index, r.output})) records.push_back(r);
      progress->item(r);
    }
    log->append(records);
  }

  // With --progress json the other replicas' output ranks relay their step events too.
  const bool relay_steps = D > 1 && o.progress == "json";
  int steps_posted = 0;
  // Rank 0: draws in the records the other replicas posted so far (a replica posts an
  // item's steps before its record, so they are drawn first).
  std::vector<int> received(size_t(D), 0), steps_received(size_t(D), 0);
  auto poll_relay = [&]() {
    for (int r = 1; r < D; ++r) {
      while (relay_steps && store->check({step_key(r, steps_received[r])})) {
        const RelayedStep st = decode_step(store->get(step_key(r, steps_received[r]++)));
        progress->step(st.indices, st.step, st.total, st.seconds, st.elapsed, r);
      }
      while (received[r] < expected[r] && store->check({relay_key(r, received[r])})) {
        const std::vector<char> v = store->get(relay_key(r, received[r]));
        progress->item(record_from_json(std::string(v.begin(), v.end())));
        received[r]++;
      }
    }
  };
  int posted = 0;
  auto finish_item = [&](const BatchItem& it, const Result* res, const std::string& error) {
    if (!out_rank) return;
    ItemRecord r = record_of(it);
    if (res) {
      r.seconds = res->seconds;
      try {
        const fs::path parent = fs::path(it.path).parent_path();
        fs::create_directories(parent);
        check_inside_output_dir(dir, parent);  // a symbolic link inside the directory may lead out
        save_png(*res, it.path);
        if (o.item_latents) write_npy(fs::path(it.path).replace_extension(".npy").string(), res->latents);
        r.status = "done";
      } catch (const std::exception& e) {
        r.status = "failed";
        r.error = e.what();
      }
    } else {
      r.status = "failed";
      r.error = error;
    }
    log->append(r);
    if (rank == 0)
      progress->item(r);
    else
      store->set(relay_key(replica, posted++), [&] {
        const std::string j = record_json(r);
        return std::vector<char>(j.begin(), j.end());
      }());
  };

  // This replica's items: same-shape ones together (groups in the order of their first
  // item), up to --micro-batch each.
  std::deque<std::vector<int>> queue;
  for (int i : mine) {
    const std::string key = batch_key(items[i].resolved);
    auto open = std::find_if(queue.begin(), queue.end(), [&](const std::vector<int>& g) {
      return int(g.size()) < o.micro_batch && batch_key(items[g.front()].resolved) == key;
    });
    if (open != queue.end())
      open->push_back(i);
    else
      queue.push_back({i});
  }
  Clock::time_point next_poll = Clock::now();
  while (!queue.empty()) {
    const std::vector<int> group = queue.front();
    queue.pop_front();
    std::vector<Request> reqs;
    for (int i : group) reqs.push_back(items[i].req);
    std::vector<Result> res;
    try {
      res = pipe.generate_batch(reqs, [&](const StepInfo& st) {
        if (!progress) {
          if (relay_steps && out_rank) store->set(step_key(replica, steps_posted++), encode_step(group, st));
          return;
        }
        progress->step(group, st.step, st.total, st.step_seconds, st.elapsed_seconds);
        if (D > 1 && Clock::now() >= next_poll) {
          next_poll = Clock::now() + std::chrono::milliseconds(500);
          poll_relay();
        }
      });
    } catch (const BatchAbort&) {
      throw;
    } catch (const Error& e) {
      // Raised identically on every rank of the replica before any collective (a check in
      // generate_batch), so the replica can go on; a broken connection cannot.
      if (comm_broken(s)) throw;
      if (group.size() > 1) {  // find the bad one: retry one by one
        for (auto it = group.rbegin(); it != group.rend(); ++it) queue.push_front({*it});
        continue;
      }
      finish_item(items[group[0]], nullptr, e.what());
      continue;
    }
    for (size_t j = 0; j < group.size(); ++j) finish_item(items[group[j]], &res[j], "");
  }

  // The end: rank 0 waits for every replica's records, prints the summary and tells the
  // others the outcome (through the store: replicas may finish far apart, beyond --timeout).
  int failed = 0;
  if (rank == 0) {
    Clock::time_point dead_check = Clock::now();
    for (;;) {
      if (D > 1) poll_relay();
      bool all = true;
      for (int r = 1; r < D; ++r) all = all && received[r] == expected[r];
      if (all) break;
      check_peers(*store, s.env.world, dead_check);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    failed = progress->finish(results_path);
    if (store) store->set("dit-batch-end", std::vector<char>{char(failed ? 1 : 0)});
  } else {
    Clock::time_point dead_check = Clock::now();
    while (!store->check({"dit-batch-end"})) {
      check_peers(*store, s.env.world, dead_check);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    failed = store->get("dit-batch-end").at(0);
  }
  return failed ? 1 : 0;
}

}  // namespace dit::cli
