// prefault: make a buffer's pages resident now, the work shared by the OpenMP threads.
//
//   for (Tensor& b : buffers) prefault(b.data(), b.nbytes());   // before a pass that fills them
//
// A fresh anonymous mapping (Tensor::empty of 4 MB and more) is made resident page by page by
// whichever thread first writes it, and the kernel zeroes each page then. A buffer that a
// pass fills from the start (the VAE decoder's, whose activations grow with the resolution)
// gets its new pages at the end, which the last thread of every static loop writes: one
// thread zeroes them while the others wait for it. Here each thread faults a contiguous share
// of 2 MB pieces (MADV_POPULATE_WRITE, or a write of each page's first byte as it is where
// the kernel is older than 5.14). The content is kept; pages already resident cost a walk.
// Where memory is given back to a hypervisor when freed (virtio-balloon free page reporting:
// the development VM), a fresh page costs about 0.5 GB/s on one thread (docs/memory.md).
#pragma once

#include <cstddef>

namespace dit {

// p: memory this process may write (a Tensor's, a std::vector's); a partial page at either end
// is left alone.
void prefault(void* p, size_t bytes);

}  // namespace dit
