// Emulated CUDA (Note [Emulated CUDA device] in cuda/emu/emu.h): what the
// runtime (runtime.cpp) and the executor (executor.cpp) share.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "cuda/emu/emu.h"

namespace kiln::emu {

// Runs every block of a grid; the fault's description (naming the kernel and
// the block) or empty. launch_no seeds the shuffled schedule.
std::string run_grid(const LaunchConfig& cfg, const std::function<void()>& body, uint64_t launch_no);

}  // namespace kiln::emu
