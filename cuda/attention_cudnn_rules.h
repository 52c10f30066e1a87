// The decisions of cuda/attention_cudnn.cpp that need no GPU, as pure
// functions the CPU tests check (tests/test_cuda_sdpa.cpp): which cuDNN
// versions take which attention graphs (Note [cuDNN version rules]), the
// sequence-length buckets plans are built for (Note [cuDNN attention
// buckets]) and the layout of the small per-call argument buffer (Note
// [cuDNN call arguments]). Names no CUDA or cuDNN type; header-only, so it
// compiles in every build.
#pragma once

#include <array>
#include <cstdint>
#include <limits>

#include "core/dtype.h"

namespace kiln::cuda::sdpa {

// cudnnGetVersion()'s number for cuDNN 9 and later: major * 10000 + minor * 100
// + patch (9.15.0 -> 91500, 9.10.1 -> 91001); cudnn_version.h's CUDNN_VERSION
// is the same formula for the headers built against.
constexpr int64_t cudnn_version_number(int64_t major, int64_t minor, int64_t patch) {
  return major * 10000 + minor * 100 + patch;
}

// Note [cuDNN version rules]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// kiln builds the SDPA graphs with cuDNN's backend API, below the cuDNN
// frontend library, so the version workarounds that library applies before it
// lowers its SDPA nodes are kiln's to apply (against cudnnGetVersion() at run
// time, not the headers' version):
//  - cuDNN 9.10.0 and 9.10.1 have known bugs in float16/bfloat16 SDPA forward
//    (and, the frontend adds, backward): refused, the other kernels run.
//  - Backward with s_q = s_kv = 1 is refused (no engine takes it).
//  - cuDNN <= 9.15 computes wrong backward gradients when s_kv % 128 != 0
//    and the graph has no padding mask: the frontend then adds a padding mask
//    whose per-batch lengths are the full s_q and s_kv (masking nothing), and
//    so does kiln.
//  - cuDNN 9.0 to 9.9 with a padding mask in backward: the padding value is
//    applied a second time after the saved statistics are subtracted.
//  - Ragged (per-batch offset) tensors, which bucketing needs (Note [cuDNN
//    attention buckets]), run on Hopper and newer, or on any device from
//    cuDNN 9.18.1; their offsets are int32, or int64 (from cuDNN 9.5) when
//    the largest does not fit in int32.
// The 9.10 refusal is the frontend's for its float16/bfloat16 ("half" MMA)
// graphs; which dtypes kiln sends to cuDNN at all is sdpa::supported()'s
// question (float16 and bfloat16 only), not these rules'.
enum class Pass { Forward, Backward };

struct GraphRules {
  bool supported = true;
  // Add a padding mask with seq_len_q = s_q and seq_len_kv = s_kv for every
  // batch entry (it masks nothing; it changes which kernel cuDNN runs).
  bool add_padding_mask = false;
  // Backward: select the padding value again after `scores - stats`.
  bool repad_after_stats = false;
  const char* why = "";  // when not supported
};

// The rules for one graph: version as cudnnGetVersion() returns it; s_q, s_kv
// the graph's (maximum) lengths; has_padding_mask whether it already masks by
// per-batch sequence lengths.
inline GraphRules graph_rules(int64_t version, DType dtype, Pass pass, int64_t s_q, int64_t s_kv,
                              bool has_padding_mask) {
  GraphRules r;
  const bool half = dtype == DType::Float16 || dtype == DType::BFloat16;
  if (version < cudnn_version_number(9, 0, 0)) {
    r.supported = false;
    r.why = "kiln's attention graphs need cuDNN 9";
    return r;
  }
  if (half && (version == cudnn_version_number(9, 10, 0) || version == cudnn_version_number(9, 10, 1))) {
    r.supported = false;
    r.why = "cuDNN 9.10.0/9.10.1 have known bugs in float16/bfloat16 attention";
    return r;
  }
  if (pass == Pass::Forward) return r;
  if (s_q == 1 && s_kv == 1) {
    r.supported = false;
    r.why = "cuDNN has no attention backward for s_q = s_kv = 1";
    return r;
  }
  r.add_padding_mask = !has_padding_mask && s_kv % 128 != 0 && version <= cudnn_version_number(9, 15, 0);
  r.repad_after_stats = (has_padding_mask || r.add_padding_mask) && version >= cudnn_version_number(9, 0, 0) &&
                        version < cudnn_version_number(9, 10, 0);
  return r;
}

// Note [cuDNN causal masks]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// kiln's causal attention is aligned bottom-right (query t attends keys
// s <= t + S - T, ops/fused.h). The graphs build the mask as the cuDNN
// frontend lowers its diagonal band with right bound 0 for cuDNN 9.x (before
// 9.21's single diagonal-band operation): the row and column indices of the
// scores (GEN_INDEX), row' = row [+ seq_len_kv - seq_len_q], keep = row' >=
// column, then BINARY_SELECT(keep, score, lowest), after the bias and the
// padding mask. Which form a problem gets:
//  - T == 1: the one query attends every key; no mask at all (a decode step
//    of a KV cache is plain attention, with bias and dropout as ever);
//  - T == S: the top-left form (row >= column), which the frontend allows
//    with a bias, dropout and padding; in a bucket (Note [cuDNN attention
//    buckets]) padded rows and keys are masked by the padding mask anyway;
//  - S > T: the bottom-right form, its shift taken from the per-batch
//    lengths, so the graph always has a padding mask (lengths T and S: it
//    masks nothing beyond the bucket). The frontend refuses bottom-right with
//    a bias or dropout, and below cuDNN 9.6.0 for lengths not multiples of
//    64; kiln refuses it below 9.6.0 altogether (and with a bias or dropout);
//  - S < T: an error before this point (ops/fused.cpp).
// Refused problems run the other paths (the composite on the device).
enum class CausalMask { None, TopLeft, BottomRight };

struct CausalRules {
  bool supported = true;
  CausalMask mask = CausalMask::None;
  bool needs_padding = false;  // the bottom-right shift reads the per-batch lengths
  const char* why = "";
};

// T, S: the call's lengths (not a bucket's); has_bias: a key bias; dropout: p > 0.
inline CausalRules causal_rules(int64_t version, int64_t T, int64_t S, bool causal, bool has_bias, bool dropout) {
  CausalRules r;
  if (!causal || T == 1) return r;
  if (S < T) {
    r.supported = false;
    r.why = "causal attention needs S >= T";
    return r;
  }
  if (S == T) {
    r.mask = CausalMask::TopLeft;
    return r;
  }
  if (has_bias || dropout) {
    r.supported = false;
    r.why = "cuDNN's bottom-right causal mask (S > T) takes no bias or dropout";
    return r;
  }
  if (version < cudnn_version_number(9, 6, 0)) {
    r.supported = false;
    r.why = "kiln uses cuDNN's bottom-right causal mask (S > T) from cuDNN 9.6.0";
    return r;
  }
  r.mask = CausalMask::BottomRight;
  r.needs_padding = true;
  return r;
}

// Whether ragged offsets (and so one plan per length bucket) are available.
inline bool ragged_supported(int64_t version, int sm_major) {
  return sm_major >= 9 || version >= cudnn_version_number(9, 18, 1);
}
// Bytes of one ragged offset when the largest is max_offset (elements): 4, 8,
// or 0 when it needs int64 and this cuDNN has none.
inline int64_t ragged_offset_bytes(int64_t version, int64_t max_offset) {
  if (max_offset <= std::numeric_limits<int32_t>::max()) return 4;
  return version >= cudnn_version_number(9, 5, 0) ? 8 : 0;
}

// Note [cuDNN attention buckets]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A cuDNN plan is compiled for fixed dims and strides, and kiln's (B, T, C)
// operands have batch stride T * C, so a plan per exact T would mean a plan
// (seconds of kernel compilation, and cached memory) per length dynamic
// padding produces. Instead a plan is built for a bucket Tb >= T (and Sb >= S
// for keys of their own length S, bucketed alike) and serves every T in it:
//  - q, k, v, o and their gradients are ragged tensors: their batch starts
//    come from per-call offset arrays (b * batch stride), so Tb never shows in
//    their memory and nothing is copied or padded;
//  - a padding mask with per-batch lengths seq_len_q = T, seq_len_kv = S gives
//    every score of a query row >= T or a key column >= T the float lowest,
//    and the matmuls' M/N/K overrides stop at T: padded keys get no weight,
//    padded query rows are neither computed, written, nor (in backward) give
//    gradient;
//  - the few tensors kiln lays out by length (the (B, S) key bias and the
//    (B, NH, T) statistics) are copied to and from (.., Sb) and (.., Tb)
//    scratch when the bucket differs (a few KB; the padding columns are zero).
// Devices without ragged tensors (ragged_supported()) keep a plan per exact
// length, as does a bucket cuDNN declines (Note [Declined at first run]).
// Buckets: the next power of two, at least 64, up to 1024; above, the next
// multiple of 512 (at most 1.5x). Since the kernels are told to stop at T,
// a larger bucket costs mainly scratch sized by Tb (the dQ accumulator
// (B, NH, Tb, HS) float32 and its memset, the statistics) and the grid's
// idle blocks, so coarse buckets are cheap: T <= 512 (BERT) needs at most 4
// problems (a forward and a backward plan each) per (batch size, heads, head
// size, dtype, mask, dropout, layout). The batch size stays exact: it only
// changes on an epoch's last batch.
inline int64_t bucket_length(int64_t T) {
  if (T <= 64) return 64;
  if (T <= 1024) {
    int64_t b = 64;
    while (b < T) b *= 2;
    return b;
  }
  return (T + 511) / 512 * 512;
}

// Note [cuDNN call arguments]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// The small device tensors one call hands cuDNN -- the dropout seed and
// offset (int64 scalars), the per-batch sequence lengths of the queries and
// of the keys (B int32 each) and the ragged offsets of q, k, v and o (B + 1
// entries each) -- live in one allocation, each in its own slot starting at a multiple of 16 bytes: every
// tensor is declared 16-byte aligned (cuDNN checks the pointers at execute),
// and kiln's caching allocator hands out 512-byte-aligned blocks. (The seed
// and offset once shared one int64[2], leaving the offset 8-byte aligned.)
// Unused slots are -1.
struct ArgsLayout {
  int64_t seed = -1, offset = -1;               // int64 each
  int64_t seq_len_q = -1, seq_len_kv = -1;      // int32[B] each
  std::array<int64_t, 4> ragged{-1, -1, -1, -1};  // q, k, v, o: (B + 1) offsets of ragged_bytes each
  int64_t bytes = 0;                            // the allocation, a multiple of 16
};

inline constexpr int64_t kArgsAlignment = 16;

inline ArgsLayout args_layout(int64_t B, bool dropout, bool seq_lens, bool ragged, int64_t ragged_bytes) {
  ArgsLayout l;
  int64_t at = 0;
  auto slot = [&](int64_t size) {
    const int64_t start = at;
    at += (size + kArgsAlignment - 1) / kArgsAlignment * kArgsAlignment;
    return start;
  };
  if (dropout) {
    l.seed = slot(8);
    l.offset = slot(8);
  }
  if (seq_lens) {
    l.seq_len_q = slot(B * 4);
    l.seq_len_kv = slot(B * 4);
  }
  if (ragged)
    for (int64_t& r : l.ragged) r = slot((B + 1) * ragged_bytes);
  l.bytes = at;
  return l;
}

}  // namespace kiln::cuda::sdpa
