// Image resizing as torch.nn.functional.interpolate(mode="bilinear", align_corners=False,
// antialias=False) computes it on the CPU (float32 source indices, clamped at 0; the last
// row/column repeats), and centre cropping. Used to bring a binned generation back to the
// requested size (diffusers' PixArtImageProcessor.resize_and_crop_tensor).
//
//   resize_bilinear(x, 3, 208, 304, y, 102, 150);   // planes of [h, w] -> [oh, ow]
#pragma once

#include <cstdint>

namespace dit {

// x: `planes` planes of [h, w]; y: `planes` planes of [oh, ow].
void resize_bilinear(const float* x, int64_t planes, int64_t h, int64_t w, float* y, int64_t oh, int64_t ow);

// diffusers' resize_and_crop_tensor: scale by max(oh/h, ow/w) to (int(h·r), int(w·r)) with
// resize_bilinear, then crop [oh, ow] from ((rh-oh)/2, (rw-ow)/2). x: planes × [h, w]; y: planes × [oh, ow].
void resize_and_center_crop(const float* x, int64_t planes, int64_t h, int64_t w, float* y, int64_t oh, int64_t ow);

}  // namespace dit
