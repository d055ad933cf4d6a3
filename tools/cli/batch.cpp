#include "tools/cli/batch.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>

#include "runtime/atomic_file.h"
#include "runtime/error.h"
#include "runtime/npy.h"
#include "runtime/progress.h"
#include "tools/cli/batch_items.h"
#include "tools/cli/batch_progress.h"
#include "tools/cli/batch_relay.h"
#include "tools/cli/batch_results.h"
#include "tools/cli/batch_resume.h"

namespace dit::cli {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

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

enum ItemState : uint8_t { kGenerate = 0, kSkip = 1, kFailed = 2 };

// One batch run on one rank, in the order of its steps (run()).
class BatchRun {
 public:
  BatchRun(const GenOptions& o, Session& s)
      : o_(o), s_(s), pipe_(*s.pipe), rank_(s.env.rank), dir_(o.output_dir),
        results_path_((dir_ / "results.jsonl").string()),
        replicas_(s.mesh ? s.mesh->degrees()[Axis::Dp] : 1), replica_(s.mesh ? s.mesh->coord(Axis::Dp) : 0),
        out_rank_(pipe_.parallel().is_output_rank()) {}

  int run() {
    load_items();
    open_output();
    decide_resume();
    share_out();
    record_settled();
    for (auto group = next_group(); group; group = next_group()) generate(*group);
    return finish();
  }

 private:
  // Every rank parses the same text (rank 0 reads it: standard input is rank 0's) and checks
  // every item with the pipeline's own validator.
  void load_items() {
    std::string text;
    if (rank_ == 0) text = read_batch_text(o_.batch);
    if (s_.world) broadcast_string(*s_.world, text);
    items_ = parse_batch(text, o_, o_.output_dir);
    validate_items(items_, pipe_);
    if (rank_ == 0)
      for (const BatchItem& it : items_)
        if (it.error.empty() && it.resolved.prompt.truncated)
          std::fprintf(stderr, "dit-gen: item %d: the prompt is longer than %d tokens: it was cut (max_sequence_length)\n",
                       it.index, it.resolved.max_sequence_length);
  }

  // The output directory, results.jsonl, and no temporary files of a killed run's writers.
  void open_output() {
    if (out_rank_) {
      std::error_code ec;
      fs::create_directories(dir_, ec);
      DIT_CHECK(!ec, "--output-dir: cannot create '" << dir_.string() << "': " << ec.message());
      log_ = std::make_unique<ResultsLog>(results_path_);
    }
    if (rank_ != 0) return;
    for (const auto& e : fs::recursive_directory_iterator(dir_, fs::directory_options::skip_permission_denied))
      if (e.is_directory()) remove_stale_temp_files(e.path().string());
    remove_stale_temp_files(dir_.string());
  }

  // Rank 0 decides what is left to do (resume: an output with this item's parameters is
  // there) and tells everyone.
  void decide_resume() {
    state_.assign(items_.size(), kGenerate);
    if (rank_ == 0)
      for (size_t i = 0; i < items_.size(); ++i)
        state_[i] = !items_[i].error.empty()                                                      ? kFailed
                    : !o_.overwrite && output_is_done(items_[i].path, pipe_.parameters(items_[i].resolved)) ? kSkip
                                                                                                     : kGenerate;
    if (s_.world && !state_.empty()) s_.world->broadcast_bytes(state_.data(), state_.size(), 0);
  }

  // The items left go round-robin to the replicas; this replica's, same-shape ones together
  // (groups in the order of their first item), up to --micro-batch each. The groups then run
  // shape by shape (shapes in the order of their first item, file order within one): a change
  // of size sets up the transformer's buffers and the VAE decoder again.
  void share_out() {
    std::vector<int> expected(size_t(replicas_), 0);
    int j = 0;
    for (size_t i = 0; i < items_.size(); ++i) {
      if (state_[i] != kGenerate) continue;
      ++to_generate_;
      expected[size_t(j % replicas_)]++;
      if (j++ % replicas_ != replica_) continue;
      const std::string key = batch_key(items_[i].resolved);
      auto open = std::find_if(queue_.begin(), queue_.end(), [&](const std::vector<int>& g) {
        return int(g.size()) < o_.micro_batch && batch_key(items_[size_t(g.front())].resolved) == key;
      });
      if (open != queue_.end())
        open->push_back(int(i));
      else
        queue_.push_back({int(i)});
    }
    order_by_shape();
    relay_.emplace(s_.world ? s_.world->store() : nullptr, s_.env.world, replica_, expected,
                   replicas_ > 1 && o_.progress == "json");
    const ModelInfo& info = pipe_.info();
    const int m = info.size_multiple;
    const int W = o_.width ? o_.width : info.default_width, H = o_.height ? o_.height : info.default_height;
    print_layout(s_, o_.degrees(), int64_t(std::max(1, H / m)) * std::max(1, W / m));
  }

  void order_by_shape() {
    std::vector<std::string> shapes;  // in the order of their first group
    auto rank_of = [&](const std::vector<int>& g) {
      const std::string k = shape_key(items_[size_t(g.front())].resolved);
      const auto it = std::find(shapes.begin(), shapes.end(), k);
      if (it != shapes.end()) return size_t(it - shapes.begin());
      shapes.push_back(k);
      return shapes.size() - 1;
    };
    std::vector<std::pair<size_t, std::vector<int>>> ranked;
    for (std::vector<int>& g : queue_) ranked.emplace_back(rank_of(g), std::move(g));
    std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    queue_.clear();
    for (auto& r : ranked) queue_.push_back(std::move(r.second));
  }

  // Rank 0 records the items settled before generating (skipped, failed): in one write, and
  // not again for items results.jsonl already has as done or skipped (a batch resumed many
  // times must not grow its results without end).
  void record_settled() {
    if (rank_ != 0) return;
    progress_.emplace(parse_progress_mode(o_.progress), int(items_.size()), to_generate_, replicas_);
    const auto recorded = recorded_items(results_path_);
    std::vector<ItemRecord> records;
    for (size_t i = 0; i < items_.size(); ++i) {
      if (state_[i] == kGenerate) continue;
      ItemRecord r = record_of(items_[i]);
      r.status = state_[i] == kSkip ? "skipped" : "failed";
      r.error = items_[i].error;
      if (r.status == "failed" || !recorded.count({r.index, r.output})) records.push_back(r);
      progress_->item(r);
    }
    log_->append(records);
  }

  std::optional<std::vector<int>> next_group() {
    if (queue_.empty()) return std::nullopt;
    std::vector<int> g = queue_.front();
    queue_.pop_front();
    return g;
  }

  // One micro-batch. A request error is raised identically on every rank of the replica
  // before any collective (a check in generate_batch), so the replica can go on: a group is
  // retried one by one to find the bad item. A broken connection cannot go on.
  void generate(const std::vector<int>& group) {
    std::vector<Request> reqs;
    for (int i : group) reqs.push_back(items_[size_t(i)].req);
    std::vector<Result> res;
    try {
      res = pipe_.generate_batch(reqs, [&](const StepInfo& st) { on_step(group, st); });
    } catch (const BatchAbort&) {
      throw;
    } catch (const Error& e) {
      if (s_.mesh && s_.mesh->any_failed()) throw;
      if (group.size() > 1) {
        for (auto it = group.rbegin(); it != group.rend(); ++it) queue_.push_front({*it});
        return;
      }
      finish_item(items_[size_t(group[0])], nullptr, e.what());
      return;
    }
    for (size_t j = 0; j < group.size(); ++j) finish_item(items_[size_t(group[j])], &res[j], "");
  }

  void on_step(const std::vector<int>& group, const StepInfo& st) {
    if (!progress_) {  // another replica's output rank relays its steps
      if (out_rank_) relay_->post_step(group, st);
      return;
    }
    progress_->step(group, st.step, st.total, st.step_seconds, st.elapsed_seconds);
    if (replicas_ > 1 && Clock::now() >= next_poll_) {
      next_poll_ = Clock::now() + std::chrono::milliseconds(500);
      relay_->poll(*progress_);
    }
  }

  // The replica's output rank writes the PNG (and latents), records the item and reports it.
  void finish_item(const BatchItem& it, const Result* res, const std::string& error) {
    if (!out_rank_) return;
    ItemRecord r = record_of(it);
    r.status = "failed";
    r.error = error;
    if (res) {
      r.seconds = res->seconds;
      try {
        const fs::path parent = fs::path(it.path).parent_path();
        fs::create_directories(parent);
        check_inside_output_dir(dir_, parent);  // a symbolic link inside the directory may lead out
        save_png(*res, it.path);
        if (o_.item_latents) write_npy(fs::path(it.path).replace_extension(".npy").string(), res->latents);
        r.status = "done";
      } catch (const std::exception& e) {
        r.error = e.what();
      }
    }
    log_->append(r);
    if (rank_ == 0)
      progress_->item(r);
    else
      relay_->post_item(r);
  }

  // Rank 0 waits for every replica's records, prints the summary and tells the others.
  int finish() {
    bool failed = false;
    if (rank_ == 0) {
      relay_->wait_all(*progress_);
      failed = progress_->finish(results_path_) > 0;
      relay_->post_end(failed);
    } else {
      failed = relay_->wait_end();
    }
    return failed ? 1 : 0;
  }

  ItemRecord record_of(const BatchItem& it) const {
    ItemRecord r;
    r.index = it.index;
    r.prompt = it.req.prompt;
    if (pipe_.info().text_to_image) r.negative_prompt = it.req.negative_prompt;
    r.seed = it.req.seed;
    if (it.error.empty() && it.resolved.prompt.class_conditional) {
      r.class_id = it.resolved.prompt.class_id;
      r.label = it.resolved.prompt.label;
    }
    r.output = it.path;
    return r;
  }

  const GenOptions& o_;
  Session& s_;
  Pipeline& pipe_;
  const int rank_;
  const fs::path dir_;
  const std::string results_path_;
  const int replicas_, replica_;
  const bool out_rank_;
  std::vector<BatchItem> items_;
  std::vector<uint8_t> state_;
  int to_generate_ = 0;
  std::deque<std::vector<int>> queue_;
  std::unique_ptr<ResultsLog> log_;
  std::optional<BatchProgress> progress_;  // rank 0
  std::optional<ProgressRelay> relay_;
  Clock::time_point next_poll_ = Clock::now();
};

}  // namespace

int run_batch(const GenOptions& o, Session& s) { return BatchRun(o, s).run(); }

}  // namespace dit::cli
