// Emulated CUDA (Note [Emulated CUDA device] in cuda/emu/emu.h): the one
// entry point through which a stand-in library (cuBLASLt, CUB) queues work
// on a stream. The work runs in stream order, deferred until something waits
// on the stream, exactly as a kernel launched there would.
#pragma once

#include <functional>

struct CUstream_st;
typedef struct CUstream_st* cudaStream_t;

namespace kiln::emu {

// Queues `work` on `stream` (0: the legacy default stream); `what` names it
// in error messages and in the coverage record.
void enqueue(cudaStream_t stream, const char* what, std::function<void()> work);

}  // namespace kiln::emu
