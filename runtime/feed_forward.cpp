#include "runtime/feed_forward.h"

#include "runtime/error.h"

namespace dit {

namespace {

class LocalFeedForward final : public FeedForward {
 public:
  explicit LocalFeedForward(FeedForwardParts p) : p_(std::move(p)) {
    if (p_.shape.rows > 0)
      DIT_CHECK(p_.fc2 && p_.hidden.defined() && p_.hidden.dtype() == p_.shape.hidden,
                "feed-forward: rows without fc2 or a hidden buffer of the hidden type");
  }
  void run(const float* h, float* x, const float* gate) override { run_any(h, nullptr, x, gate); }
  void run(const uint16_t* h, float* x, const float* gate) override { run_any(nullptr, h, x, gate); }

 private:
  void run_any(const float* h32, const uint16_t* h16, float* x, const float* gate) {
    if (p_.shape.rows == 0) return;
    DIT_CHECK((h32 != nullptr) == (p_.shape.input == DType::F32) && (h32 || h16),
              "feed-forward: h given in the wrong type");
    if (p_.shape.hidden == DType::BF16) {
      uint16_t* m = p_.hidden.bf16();
      if (h16) p_.fc1.run(h16, m); else p_.fc1.run(h32, m);  // GELU-tanh(h·W1ᵀ + b1), rounded   [B, T, M]
      p_.fc2->run(m, x, gate);                                // x += gate ⊙ (Σ m·W2ᵀ + b2)
    } else {
      DIT_CHECK(h32, "feed-forward: bf16 rows for an f32 hidden layer");
      float* m = p_.hidden.f32();
      p_.fc1.run(h32, m);
      p_.fc2->run(m, x, gate);
    }
  }
  FeedForwardParts p_;
};

}  // namespace

std::unique_ptr<FeedForward> make_local_feed_forward(FeedForwardParts parts) {
  return std::make_unique<LocalFeedForward>(std::move(parts));
}

}  // namespace dit
