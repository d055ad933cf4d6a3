#include "models/common/image_tokens.h"

#include "runtime/error.h"

namespace dit {

ImageTokens image_tokens(const ModelShape& shape, int64_t patch, ParallelContext& ctx, TensorParallel& tp,
                         int64_t hidden) {
  ImageTokens it;
  it.grid_h = shape.latent_h / patch;
  it.grid_w = shape.latent_w / patch;
  it.tokens = ctx.sequence().range(it.all());
  it.out = ctx.sequence().output_range(it.all());
  tp.prepare(shape.batch, it.tokens, hidden);
  it.res = tp.residual();
  DIT_CHECK(it.res.begin <= it.out.begin && it.out.end <= it.res.end, "output rows outside the residual rows");
  return it;
}

}  // namespace dit
