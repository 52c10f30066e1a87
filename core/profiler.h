// The profiler (Note [Profiler]): spans of ops, backward nodes and named
// phases per thread, written as a Chrome trace and summarised as a table.
//
// SKELETON: the op hooks OpScope calls (Note [Op observers], core/op_scope.h).
// The public API (kiln::profiler::Profiler, RecordScope, the trace writer and
// the key_averages table) is added beside it.
#pragma once

#include <atomic>
#include <cstdint>

#include "kiln/core/op_scope.h"

namespace kiln::profiler::detail {

// Called by OpScope while the profiler is on (detail::g_profiler_active): an
// op starts on this thread (record has its name, inputs and depth; no outputs
// yet). Returns a token handed back to op_end.
uint64_t op_begin(const OpRecord& record);
// The op ended (record now has its outputs; none if it threw).
void op_end(const OpRecord& record, uint64_t token);

}  // namespace kiln::profiler::detail
