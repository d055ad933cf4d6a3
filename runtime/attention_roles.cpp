#include "runtime/attention_roles.h"

#include "runtime/attention.h"
#include "runtime/error.h"

namespace dit {

void SelfAttention::forward(const uint16_t*, float*) {
  DIT_CHECK(false, name() << " attention: forward with bf16 q, k, v, but it takes " << dtype_name(qkv_dtype()));
}

void SelfAttention::forward(const uint16_t*, uint16_t*) {
  DIT_CHECK(false, name() << " attention: forward into bf16 output, but it writes " << dtype_name(out_dtype()));
}

void CrossAttention::forward(const uint16_t*, const uint16_t*, const uint16_t*, const float*, uint16_t*) {
  DIT_CHECK(false, "cross-attention: forward in bf16, but it takes " << dtype_name(io_dtype()));
}

namespace {

class LocalSelfAttention : public SelfAttention {
 public:
  void prepare(const SelfAttentionShape& s) override {
    DIT_CHECK(s.batch > 0 && s.local_tokens > 0 && s.heads > 0 && s.head_dim > 0,
              "LocalSelfAttention: bad shape batch " << s.batch << " tokens " << s.local_tokens << " heads " << s.heads
                                                     << " head_dim " << s.head_dim);
    const int64_t H = s.heads, d = s.head_dim, T = s.local_tokens;
    AttentionSpec a;
    a.batch = s.batch;
    a.heads = H;
    a.q_len = a.kv_len = T;
    a.head_dim = d;
    a.compute = s.compute;
    a.q = a.k = a.v = AttnLayout::bthd(T, d, H, 3 * H * d);
    a.out = AttnLayout::bthd(T, d, H, H * d);
    hd_ = H * d;
    attn_ = Attention(a);
    prepared_ = true;
  }
  void forward(const float* qkv, float* out) override {
    DIT_CHECK(prepared_, "LocalSelfAttention::forward before prepare()");
    attn_.run(qkv, qkv + hd_, qkv + 2 * hd_, out, nullptr);
  }
  DType qkv_dtype() const override { return prepared_ ? attn_.spec().compute : DType::F32; }
  void forward(const uint16_t* qkv, float* out) override {
    DIT_CHECK(prepared_, "LocalSelfAttention::forward before prepare()");
    DIT_CHECK(qkv_dtype() == DType::BF16, "local attention: bf16 q, k, v need bf16 compute");
    attn_.run(qkv, qkv + hd_, qkv + 2 * hd_, out, nullptr);
  }
  DType out_dtype() const override { return qkv_dtype(); }
  void forward(const uint16_t* qkv, uint16_t* out) override {
    DIT_CHECK(prepared_, "LocalSelfAttention::forward before prepare()");
    DIT_CHECK(out_dtype() == DType::BF16, "local attention: bf16 output needs bf16 compute");
    attn_.run(qkv, qkv + hd_, qkv + 2 * hd_, out, nullptr);
  }
  const char* name() const override { return "local"; }

 private:
  Attention attn_;
  int64_t hd_ = 0;
  bool prepared_ = false;
};

class LocalCrossAttention : public CrossAttention {
 public:
  void prepare(const CrossAttentionShape& s) override {
    DIT_CHECK(s.batch > 0 && s.q_tokens >= 0 && s.kv_tokens > 0 && s.heads > 0 && s.head_dim > 0,
              "cross-attention: bad shape batch " << s.batch << " queries " << s.q_tokens << " keys " << s.kv_tokens
                                                  << " heads " << s.heads << " head_dim " << s.head_dim);
    s_ = s;
    kv_used_ = 0;
    use_keys(s.kv_tokens);
  }
  void use_keys(int64_t kv_used) override {
    DIT_CHECK(s_.kv_tokens > 0, "cross-attention: use_keys before prepare()");
    DIT_CHECK(kv_used >= 1 && kv_used <= s_.kv_tokens,
              "cross-attention: " << kv_used << " keys used of " << s_.kv_tokens << " prepared");
    if (kv_used == kv_used_ || s_.q_tokens == 0) return;  // (a rank holding no image tokens computes nothing)
    const int64_t H = s_.heads, d = s_.head_dim;
    AttentionSpec a;
    a.batch = s_.batch;
    a.heads = H;
    a.q_len = s_.q_tokens;
    a.kv_len = kv_used;
    a.head_dim = d;
    a.compute = s_.compute;
    a.q = a.out = AttnLayout::bthd(s_.q_tokens, d, H, H * d);
    a.k = a.v = AttnLayout::bthd(s_.kv_tokens, d, H, H * d);  // the first kv_used of each item's rows
    attn_ = Attention(a);
    kv_used_ = kv_used;
  }
  void forward(const float* q, const float* k, const float* v, const float* key_bias, float* out) override {
    if (s_.q_tokens == 0) return;
    const AttnBias bias = bias_of(key_bias);
    attn_.run(q, k, v, out, nullptr, &bias);
  }
  DType io_dtype() const override { return s_.compute; }
  void forward(const uint16_t* q, const uint16_t* k, const uint16_t* v, const float* key_bias,
               uint16_t* out) override {
    DIT_CHECK(io_dtype() == DType::BF16, "cross-attention: bf16 q, k, v need bf16 compute");
    if (s_.q_tokens == 0) return;
    const AttnBias bias = bias_of(key_bias);
    attn_.run(q, k, v, out, nullptr, &bias);
  }

 private:
  AttnBias bias_of(const float* key_bias) const {
    AttnBias bias;
    bias.key = key_bias;
    bias.key_stride = s_.kv_tokens;  // rows of kv_tokens, of which the first kv_used_ are read
    return bias;
  }
  CrossAttentionShape s_;
  int64_t kv_used_ = 0;
  Attention attn_;
};

}  // namespace

std::unique_ptr<SelfAttention> make_local_self_attention() { return std::make_unique<LocalSelfAttention>(); }

std::unique_ptr<CrossAttention> make_local_cross_attention() { return std::make_unique<LocalCrossAttention>(); }

}  // namespace dit
