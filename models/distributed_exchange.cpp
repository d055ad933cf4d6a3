#include "models/distributed_exchange.h"

#include <cmath>
#include <cstring>
#include <sstream>
#include <vector>

#include "parallel/mesh.h"
#include "parallel/parallel_attention.h"
#include "parallel/sequence_split.h"
#include "runtime/error.h"
#include "runtime/profile.h"

namespace dit {

namespace {

// A non-owning shared_ptr to a group the mesh owns (the exchange keeps the mesh alive).
std::shared_ptr<ProcessGroup> ref(ProcessGroup& g) { return std::shared_ptr<ProcessGroup>(std::shared_ptr<ProcessGroup>(), &g); }

class DistributedExchange final : public StepExchange {
 public:
  explicit DistributedExchange(std::shared_ptr<DeviceMesh> mesh) : mesh_(std::move(mesh)) {}

  TokenRange token_range(int64_t tokens) const override {
    const SeqRange r = split_tokens(tokens, sp_size(), mesh_->coord().sp_rank);
    return {r.begin, r.end};
  }

  std::unique_ptr<SelfAttention> make_attention() override {
    if (sp_size() == 1) return make_local_self_attention();
    return make_sequence_parallel_attention(ref(mesh_->ulysses()), ref(mesh_->ring()));
  }

  void prepare(int64_t batch, int64_t tokens, int64_t row, int64_t latent_elems) override {
    batch_ = batch;
    tokens_ = tokens;
    row_ = row;
    latent_elems_ = latent_elems;
    ranges_ = split_all(tokens, sp_size());
    counts_.clear();
    for (const SeqRange& r : ranges_) counts_.push_back(size_t(batch * r.size() * row));
    staging_.assign(size_t(batch * tokens * row), 0.0f);
    checks_.assign(2 * size_t(mesh_->replica().size()), 0.0f);
  }

  void gather_tokens(const float* local, float* full) override {
    const SeqRange mine = ranges_[size_t(mesh_->coord().sp_rank)];
    if (sp_size() == 1) {
      std::memcpy(full, local, size_t(batch_ * mine.size() * row_) * 4);
      return;
    }
    // Blocks arrive packed in sp-rank order: [rank][batch][tokens_rank][row] -> [batch][tokens][row].
    {
      profile::Scope pc(profile::Cat::Communication);
      profile::add_bytes(uint64_t(counts_[size_t(mesh_->coord().sp_rank)]) * 4 * uint64_t(sp_size() - 1));
      mesh_->sp().all_gather_v(local, staging_.data(), counts_);
    }
    const float* src = staging_.data();
    for (const SeqRange& r : ranges_)
      for (int64_t b = 0; b < batch_; ++b) {
        const size_t n = size_t(r.size() * row_);
        std::memcpy(full + (b * tokens_ + r.begin) * row_, src, n * 4);
        src += n;
      }
  }

  int cfg_branch() const override { return mesh_->degrees().cfg == 2 ? mesh_->coord().cfg : -1; }

  void exchange_cfg(const float* mine, float* both) override {
    profile::Scope pc(profile::Cat::Communication);
    profile::add_bytes(uint64_t(latent_elems_) * 4 * uint64_t(mesh_->cfg().size() - 1));
    mesh_->cfg().all_gather(mine, both, size_t(latent_elems_));  // cfg rank 0 = cond, 1 = uncond
  }

  bool is_output_rank() const override { return mesh_->coord().replica_rank == 0; }

  void check_agreement(const float* x, int64_t n) override {
    if (mesh_->replica().size() == 1) return;
    double sum = 0, sq = 0;
    for (int64_t i = 0; i < n; ++i) {
      sum += x[i];
      sq += double(x[i]) * x[i];
    }
    const float mine[2] = {float(sum), float(sq)};
    mesh_->replica().all_gather(mine, checks_.data(), 2);
    for (size_t r = 0; r < checks_.size() / 2; ++r)
      DIT_CHECK(checks_[2 * r] == mine[0] && checks_[2 * r + 1] == mine[1],
                "ranks disagree on the final latents (rank " << mesh_->replica().global_rank(int(r))
                                                               << " differs from rank " << mesh_->world().rank()
                                                               << "): this is a bug, please report it");
  }

  std::string describe(int64_t tokens, int heads) const override {
    const MeshDegrees& d = mesh_->degrees();
    const MeshCoord& c = mesh_->coord();
    const SeqRange r = split_tokens(tokens, sp_size(), c.sp_rank);
    std::ostringstream os;
    os << "rank " << mesh_->world().rank() << ": ";
    if (d.cfg == 2) os << (c.cfg == 0 ? "cond" : "uncond") << " branch, ";
    os << "tokens [" << r.begin << ", " << r.end << ") of " << tokens;
    const SeqRange h = split_tokens(heads, d.ulysses, c.ulysses);  // as the Ulysses all-to-all splits them
    os << ", attention heads ";
    if (d.ulysses > 1)
      os << "[" << h.begin << ", " << h.end << ") of " << heads << " (ulysses " << c.ulysses << ")";
    else
      os << "all " << heads;
    if (d.ring > 1) os << ", ring position " << c.ring << " of " << d.ring;
    return os.str();
  }

 private:
  int sp_size() const { return mesh_->degrees().sp(); }

  std::shared_ptr<DeviceMesh> mesh_;
  int64_t batch_ = 0, tokens_ = 0, row_ = 0, latent_elems_ = 0;
  std::vector<SeqRange> ranges_;
  std::vector<size_t> counts_;
  std::vector<float> staging_, checks_;
};

}  // namespace

std::shared_ptr<StepExchange> make_distributed_exchange(std::shared_ptr<DeviceMesh> mesh) {
  return std::make_shared<DistributedExchange>(std::move(mesh));
}

}  // namespace dit
