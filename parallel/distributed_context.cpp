#include "parallel/distributed_context.h"

#include <cstring>
#include <sstream>
#include <vector>

#include "parallel/mesh.h"
#include "parallel/parallel_attention.h"
#include "runtime/error.h"
#include "runtime/profile.h"

namespace dit {

namespace {

class MeshSequenceSplit final : public SequenceSplit {
 public:
  explicit MeshSequenceSplit(DeviceMesh& mesh) : mesh_(mesh) {}

  TokenRange range(int64_t tokens) const override { return split_tokens(tokens, parts(), me()); }

  void prepare(int64_t batch, int64_t tokens, int64_t row) override {
    batch_ = batch;
    tokens_ = tokens;
    row_ = row;
    ranges_ = split_all(tokens, parts());
    counts_.clear();
    for (const TokenRange& r : ranges_) counts_.push_back(size_t(batch * r.size() * row));
    staging_.assign(size_t(batch * tokens * row), 0.0f);
  }

  void gather(const float* local, float* full) override {
    if (parts() == 1) {
      std::memcpy(full, local, size_t(batch_ * tokens_ * row_) * 4);
      return;
    }
    // Blocks arrive packed in sp-rank order: [rank][batch][tokens_rank][row] -> [batch][tokens][row].
    {
      profile::Scope pc(profile::Cat::Communication);
      profile::add_bytes(uint64_t(counts_[size_t(me())]) * 4 * uint64_t(parts() - 1));
      mesh_.sp().all_gather_v(local, staging_.data(), counts_);
    }
    const float* src = staging_.data();
    for (const TokenRange& r : ranges_)
      for (int64_t b = 0; b < batch_; ++b) {
        const size_t n = size_t(r.size() * row_);
        std::memcpy(full + (b * tokens_ + r.begin) * row_, src, n * 4);
        src += n;
      }
  }

 private:
  int parts() const { return mesh_.degrees().sp(); }
  int me() const { return mesh_.rank_in(Group::Sp); }

  DeviceMesh& mesh_;
  int64_t batch_ = 0, tokens_ = 0, row_ = 0;
  std::vector<TokenRange> ranges_;
  std::vector<size_t> counts_;
  std::vector<float> staging_;
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
  explicit MeshLayerContext(DeviceMesh& mesh) : mesh_(mesh) {}
  std::unique_ptr<SelfAttention> self_attention() override {
    if (mesh_.degrees().sp() == 1) return make_local_self_attention();
    return make_sequence_parallel_attention(mesh_.group_ref(Group::Ulysses), mesh_.group_ref(Group::Ring));
  }
  std::unique_ptr<CrossAttention> cross_attention() override { return make_local_cross_attention(); }

 private:
  DeviceMesh& mesh_;
};

class DistributedContext final : public ParallelContext {
 public:
  explicit DistributedContext(std::shared_ptr<DeviceMesh> mesh)
      : mesh_(std::move(mesh)), seq_(*mesh_), cfg_(*mesh_), layers_(*mesh_) {}

  SequenceSplit& sequence() override { return seq_; }
  CfgSplit& cfg() override { return cfg_; }
  LayerContext& layers() override { return layers_; }
  bool is_output_rank() const override { return mesh_->rank_in(Group::Replica) == 0; }

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

  std::string describe(int64_t tokens, int heads, const char* const halves[2]) const override {
    const MeshDegrees& d = mesh_->degrees();
    const int sp = d.sp();
    const TokenRange r = split_tokens(tokens, sp, mesh_->rank_in(Group::Sp));
    std::ostringstream os;
    os << "rank " << mesh_->layout().rank << ": ";
    if (d[Axis::Cfg] == 2) os << halves[mesh_->coord(Axis::Cfg)] << " branch, ";
    os << "tokens [" << r.begin << ", " << r.end << ") of " << tokens;
    const int U = d[Axis::Ulysses], u = mesh_->coord(Axis::Ulysses);
    const TokenRange h = split_tokens(heads, U, u);  // as the Ulysses all-to-all splits them
    os << ", attention heads ";
    if (U > 1)
      os << "[" << h.begin << ", " << h.end << ") of " << heads << " (ulysses " << u << ")";
    else
      os << "all " << heads;
    if (d[Axis::Ring] > 1) os << ", ring position " << mesh_->coord(Axis::Ring) << " of " << d[Axis::Ring];
    return os.str();
  }

 private:
  std::shared_ptr<DeviceMesh> mesh_;
  MeshSequenceSplit seq_;
  MeshCfgSplit cfg_;
  MeshLayerContext layers_;
  std::vector<float> checks_;
};

}  // namespace

std::shared_ptr<ParallelContext> make_distributed_context(std::shared_ptr<DeviceMesh> mesh) {
  return std::make_shared<DistributedContext>(std::move(mesh));
}

}  // namespace dit
