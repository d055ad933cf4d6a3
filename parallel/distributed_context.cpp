#include "parallel/distributed_context.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <sstream>
#include <vector>

#include "parallel/launcher.h"
#include "parallel/lent_cores.h"
#include "parallel/mesh.h"
#include "parallel/parallel_attention.h"
#include "parallel/row_split.h"
#include "parallel/shared_feed_forward.h"
#include "parallel/shared_projection.h"
#include "parallel/tensor_parallel.h"
#include "runtime/engine.h"
#include "runtime/error.h"
#include "runtime/profile.h"

namespace dit {

namespace {

// Tokens split over the sequence-parallel ranks (attention), each share split again over the
// tensor-parallel ranks (outputs); the outputs are gathered over the model-parallel group,
// whose rank order (ring, ulysses, tp) is the token order.
class MeshSequenceSplit final : public SequenceSplit {
 public:
  explicit MeshSequenceSplit(DeviceMesh& mesh) : mesh_(mesh) {}

  TokenRange range(int64_t tokens) const override { return split_tokens(tokens, sp(), mesh_.rank_in(Group::Sp)); }
  TokenRange output_range(int64_t tokens) const override { return output_of(tokens, mesh_.rank_in(Group::Mp)); }

  void prepare(int64_t batch, int64_t tokens, int64_t row) override {
    batch_ = batch;
    tokens_ = tokens;
    row_ = row;
    counts_.clear();
    for (int r = 0; r < parts(); ++r) counts_.push_back(size_t(output_of(tokens, r).size() * row));
  }

  void gather(const float* local, float* full) override {
    if (parts() == 1) {
      std::memcpy(full, local, size_t(batch_ * tokens_ * row_) * 4);
      return;
    }
    // [batch][tokens of this rank][row] from every rank -> [batch][tokens][row]; the mp-rank
    // order is the token order.
    profile::Scope pc(profile::Cat::Communication);
    profile::add_bytes(uint64_t(batch_) * counts_[size_t(me())] * 4 * uint64_t(parts() - 1));
    mesh_.mp().all_gather_v(local, full, counts_, size_t(batch_));
  }

 private:
  int sp() const { return mesh_.degrees().sp(); }
  int tp() const { return mesh_.degrees()[Axis::Tp]; }
  int parts() const { return sp() * tp(); }
  int me() const { return mesh_.rank_in(Group::Mp); }
  // Output tokens of model-parallel rank r = sp_rank · tp + tp_rank.
  TokenRange output_of(int64_t tokens, int r) const {
    const TokenRange s = split_tokens(tokens, sp(), r / tp());
    const TokenRange t = split_tokens(s.size(), tp(), r % tp());
    return {s.begin + t.begin, s.begin + t.end};
  }

  DeviceMesh& mesh_;
  int64_t batch_ = 0, tokens_ = 0, row_ = 0;
  std::vector<size_t> counts_;  // per mp rank: its output tokens × row
};

class MeshCfgSplit final : public CfgSplit {
 public:
  explicit MeshCfgSplit(DeviceMesh& mesh) : mesh_(mesh) {}
  int branch() const override { return mesh_.degrees()[Axis::Cfg] == 2 ? mesh_.coord(Axis::Cfg) : -1; }
  void prepare(int64_t elems) override { elems_ = elems; }
  void exchange(const float* mine, float* both) override {
    profile::Scope pc(profile::Cat::Communication);
    profile::add_bytes(uint64_t(elems_) * 4 * uint64_t(mesh_.cfg().size() - 1));
    mesh_.cfg().all_gather(mine, both, size_t(elems_));  // cfg rank 0's half first
  }

 private:
  DeviceMesh& mesh_;
  int64_t elems_ = 0;
};

class MeshLayerContext final : public LayerContext {
 public:
  MeshLayerContext(DeviceMesh& mesh, const DistributedOptions& opt) : mesh_(mesh), opt_(opt) {}
  std::unique_ptr<SelfAttention> self_attention() override {
    if (mesh_.degrees().sp() == 1) return make_local_self_attention();
    return make_sequence_parallel_attention(mesh_.group_ref(Group::Ulysses), mesh_.group_ref(Group::Ring),
                                            opt_.ulysses_chunks, mesh_.group_ref(Group::Sp));
  }
  std::unique_ptr<CrossAttention> cross_attention() override { return make_local_cross_attention(); }
  std::unique_ptr<TensorParallel> tensor_parallel(TpScope scope, int64_t max_ranks) override {
    // Over one rank it is the serial implementation: the same code path, bit for bit.
    ProcessGroup& g = scope == TpScope::Transformer ? mesh_.tp() : mesh_.mp();
    if (g.size() == 1 || g.size() > max_ranks) return make_serial_tensor_parallel();
    return make_distributed_tensor_parallel(g, opt_.sp_min_tokens, scope == TpScope::Transformer);
  }
  std::unique_ptr<FeedForward> feed_forward(FeedForwardParts parts) override {
    return make_shared_feed_forward(sharing(), std::move(parts));
  }
  std::unique_ptr<Projection> projection(ProjectionParts parts) override {
    if (!shares_projection(mesh_.degrees())) return std::move(parts.local);
    return make_shared_projection(sharing(), std::move(parts));
  }

 private:
  DeviceMesh& mesh_;
  DistributedOptions opt_;
  std::shared_ptr<RowSharing>& sharing() {
    if (!rows_) rows_ = std::make_shared<RowSharing>(mesh_.group_ref(Group::Replica), opt_.share_rows);
    return rows_;
  }
  std::shared_ptr<RowSharing> rows_;  // the replica's windows for the projections and feed-forwards
};

class DistributedContext final : public ParallelContext {
 public:
  DistributedContext(std::shared_ptr<DeviceMesh> mesh, const DistributedOptions& opt)
      : mesh_(std::move(mesh)), opt_(opt), seq_(*mesh_), cfg_(*mesh_), layers_(*mesh_, opt) {
    // Collective over the replica (every rank builds its context at the same point): where
    // its ranks run, for the decode after the loop.
    if (mesh_->replica().size() > 1) cores_ = gather_local_cores(mesh_->replica(), num_threads());
  }

  SequenceSplit& sequence() override { return seq_; }
  CfgSplit& cfg() override { return cfg_; }
  LayerContext& layers() override { return layers_; }
  bool is_output_rank() const override { return mesh_->rank_in(Group::Replica) == 0; }

  // Off: the output rank decodes with its machine's cores. Machines: each machine's first
  // rank decodes a band with its machine's cores (a sub-group of those ranks splits the rows;
  // one machine: as Off). Ranks: every rank decodes a band on its own cores. The others wait
  // in the barrier (blocked in a receive, not spinning) for as long as the decode takes.
  void run_output(const std::function<void(RowSplit*)>& fn) override {
    ProcessGroup& replica = mesh_->replica();
    if (replica.size() == 1) return fn(nullptr);
    if (opt_.vae_parallel == VaeParallel::Ranks) {
      if (!rows_) rows_ = make_row_split(mesh_->group_ref(Group::Replica));
      return fn(rows_.get());
    }
    const std::vector<int>& leaders = cores_.leaders;
    const bool by_machine = opt_.vae_parallel == VaeParallel::Machines && leaders.size() > 1;
    const bool decodes = by_machine ? std::find(leaders.begin(), leaders.end(), replica.rank()) != leaders.end()
                                    : is_output_rank();
    if (decodes) {
      if (by_machine && !rows_) {
        std::vector<int> global;
        for (int r : leaders) global.push_back(replica.global_rank(r));
        rows_ = make_row_split(replica.split("vae-machines-" + std::to_string(replica.global_rank(0)), global));
      }
      LentCores lent(cores_);
      fn(rows_.get());  // null unless split by machine
    }
    replica.barrier_for_work();  // a large image's decode may take longer than --timeout
  }

  int decode_parts() const override {
    switch (opt_.vae_parallel) {
      case VaeParallel::Ranks: return mesh_->replica().size();
      case VaeParallel::Machines: return int(cores_.leaders.size());
      case VaeParallel::Off: break;
    }
    return 1;
  }

  void check_agreement(const float* x, int64_t n) override {
    ProcessGroup& replica = mesh_->replica();
    if (replica.size() == 1) return;
    double sum = 0, sq = 0;
    for (int64_t i = 0; i < n; ++i) {
      sum += x[i];
      sq += double(x[i]) * x[i];
    }
    const float mine[2] = {float(sum), float(sq)};
    checks_.assign(2 * size_t(replica.size()), 0.0f);
    replica.all_gather(mine, checks_.data(), 2);
    for (size_t r = 0; r < checks_.size() / 2; ++r)
      DIT_CHECK(checks_[2 * r] == mine[0] && checks_[2 * r + 1] == mine[1],
                "ranks disagree on the final latents (rank " << replica.global_rank(int(r)) << " differs from rank "
                                                               << mesh_->world().rank()
                                                               << "): this is a bug, please report it");
  }

  std::string describe(const LayoutInfo& li) const override {
    const MeshDegrees& d = mesh_->degrees();
    const TokenRange r = split_tokens(li.tokens, d.sp(), mesh_->rank_in(Group::Sp));
    std::ostringstream os;
    os << "rank " << mesh_->layout().rank << ": ";
    if (d[Axis::Cfg] == 2) os << li.halves[mesh_->coord(Axis::Cfg)] << " branch, ";
    os << "tokens [" << r.begin << ", " << r.end << ") of " << li.tokens;
    // Heads: tensor parallelism shards them first, Ulysses splits a shard's heads over its ranks
    // (with a ring on one machine, over the whole sequence-parallel group where the heads go
    // round: parallel/parallel_attention.h; unless its windows do not fit, which it then says).
    const int T = d[Axis::Tp], t = mesh_->coord(Axis::Tp), U = d[Axis::Ulysses], u = mesh_->coord(Axis::Ulysses);
    const TokenRange shard = split_tokens(li.heads, T, t);
    const bool whole = d[Axis::Ring] > 1 && mesh_->sp().uses_shared_memory() && shard.size() >= d.sp();
    const int n = whole ? d.sp() : U, k = whole ? mesh_->rank_in(Group::Sp) : u;
    const TokenRange part = split_tokens(shard.size(), n, k);
    const TokenRange h{shard.begin + part.begin, shard.begin + part.end};
    os << ", attention heads ";
    if (h.size() == li.heads)
      os << "all " << li.heads;
    else
      os << "[" << h.begin << ", " << h.end << ") of " << li.heads;
    if (whole)
      os << " (ulysses " << k << " of the whole sequence-parallel group, on one machine)";
    else if (U > 1)
      os << " (ulysses " << u << ")";
    if (d[Axis::Ring] > 1) os << ", ring position " << mesh_->coord(Axis::Ring) << " of " << d[Axis::Ring];
    if (T > 1) {
      const TokenRange f = split_tokens(li.ffn, T, t);
      os << ", tensor parallel " << t << " of " << T << ": FFN columns [" << f.begin << ", " << f.end << ") of "
         << li.ffn;
      if (li.vocab > 0) {
        const TokenRange v = split_tokens(li.vocab, d.sp() * T, mesh_->rank_in(Group::Mp));
        os << ", text-encoder vocabulary [" << v.begin << ", " << v.end << ")";
      }
    }
    // The Q, K, V projection's and the feed-forward's rows (parallel/shared_rows.h): shared where
    // every rank holds the whole weights and the replica is on one machine (unless its windows do
    // not fit, which it says).
    if (share_rows_wanted(opt_.share_rows, omp_get_max_threads()) && T == 1 && mesh_->replica().size() > 1 &&
        mesh_->replica().windows_allowed())
      os << (shares_projection(d) ? ", Q, K, V and feed-forward" : ", feed-forward") << " rows shared with the replica's "
         << mesh_->replica().size() << " ranks";
    return os.str();
  }

 private:
  std::shared_ptr<DeviceMesh> mesh_;
  DistributedOptions opt_;
  MeshSequenceSplit seq_;
  MeshCfgSplit cfg_;
  MeshLayerContext layers_;
  std::vector<float> checks_;
  LocalCores cores_;               // the replica's cores on this machine, and its machines
  std::unique_ptr<RowSplit> rows_;  // --vae-parallel machines|ranks: the decode's rows (first decode)
};

}  // namespace

VaeParallel parse_vae_parallel(const std::string& v) {
  if (v == "off") return VaeParallel::Off;
  if (v == "machines") return VaeParallel::Machines;
  if (v == "ranks") return VaeParallel::Ranks;
  DIT_FAIL("--vae-parallel: '" << v << "' is not one of machines, ranks, off");
}

int ulysses_chunks_for(const LaunchEnv& env, int requested) {
  if (requested > 0) return requested;
  return env.local_known && env.local_world < env.world ? kDefaultUlyssesChunks : 1;
}

std::shared_ptr<ParallelContext> make_distributed_context(std::shared_ptr<DeviceMesh> mesh,
                                                          const DistributedOptions& opt) {
  return std::make_shared<DistributedContext>(std::move(mesh), opt);
}

}  // namespace dit
