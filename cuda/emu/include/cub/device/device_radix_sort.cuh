// kiln's emulated CUDA (Note [Emulated CUDA device] in cuda/emu/emu.h): a
// stand-in for cub::DeviceRadixSort::SortPairs, the call cuda/index.cu and
// cuda/gather_scatter.cu make, as a host stable sort with CUB's contract:
//
//  - With d_temp_storage == nullptr the call only sets temp_storage_bytes (a
//    nonzero size that grows with num_items, so a size computed for another
//    problem is caught) and returns cudaSuccess.
//  - Otherwise temp_storage_bytes must be at least that size (else
//    cudaErrorInvalidValue) and the sort is queued on `stream`
//    (kiln::emu::enqueue): keys and values are read when it runs, in stream
//    order, not at the call. The temporary storage itself is not touched.
//  - The sort is ascending and stable, comparing only the bits
//    [begin_bit, end_bit) of each key in CUB's radix order: unsigned keys as
//    they are, signed ones with the sign bit flipped, floating ones by their
//    ordered bit pattern with -0.0 equal to +0.0. Keys are written out whole.
//    The input and output buffers may alias (the inputs are copied first).
//  - num_items < 0 or a bit range outside [0, 8 * sizeof(KeyT)] with
//    begin_bit <= end_bit: cudaErrorInvalidValue (stricter than CUB).
// Not here: SortKeys, the Descending variants, DoubleBuffer overloads,
// custom decomposers. The shared helpers below serve
// device_segmented_sort.cuh too.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "cuda/emu/queue.h"

namespace cub {
namespace emu_detail {

template <typename KeyT>
using RadixBits = std::conditional_t<sizeof(KeyT) == 1, uint8_t,
                                     std::conditional_t<sizeof(KeyT) == 2, uint16_t,
                                                        std::conditional_t<sizeof(KeyT) == 4, uint32_t, uint64_t>>>;

// The unsigned pattern whose order is CUB's radix order of `key`.
template <typename KeyT>
RadixBits<KeyT> radix_bits(KeyT key) {
  static_assert(std::is_arithmetic_v<KeyT> && !std::is_same_v<KeyT, bool> &&
                    (sizeof(KeyT) == 1 || sizeof(KeyT) == 2 || sizeof(KeyT) == 4 || sizeof(KeyT) == 8),
                "emulated CUB sorts integer and float/double keys only");
  using U = RadixBits<KeyT>;
  constexpr U sign = static_cast<U>(U{1} << (8 * sizeof(KeyT) - 1));
  if constexpr (std::is_floating_point_v<KeyT>) {
    if (key == KeyT(0)) key = KeyT(0);  // -0.0 sorts as +0.0
    U u;
    std::memcpy(&u, &key, sizeof u);
    return static_cast<U>((u & sign) ? ~u : (u | sign));
  } else {
    U u;
    std::memcpy(&u, &key, sizeof u);
    return std::is_signed_v<KeyT> ? static_cast<U>(u ^ sign) : u;
  }
}

// Bits [begin_bit, end_bit) of `u`, shifted down.
template <typename U>
U bit_range(U u, int begin_bit, int end_bit) {
  const int width = end_bit - begin_bit;
  if (width <= 0) return 0;
  const U shifted = static_cast<U>(u >> begin_bit);
  return width >= std::numeric_limits<U>::digits ? shifted : static_cast<U>(shifted & ((U{1} << width) - 1));
}

inline size_t temp_bytes(int64_t num_items, size_t item_bytes) {
  return 256 + static_cast<size_t>(num_items) * item_bytes;
}

// The first (size query) or second (check and queue) half of a call.
// `queue` is only called on the second half with a sufficient size.
template <typename Queue>
cudaError_t two_phase(void* d_temp_storage, size_t& temp_storage_bytes, size_t required, Queue&& queue) {
  if (d_temp_storage == nullptr) {
    temp_storage_bytes = required;
    return cudaSuccess;
  }
  if (temp_storage_bytes < required) return cudaErrorInvalidValue;
  queue();
  return cudaSuccess;
}

// Stable ascending sort of the pairs at [first, last) of keys_in/values_in,
// by bits [begin_bit, end_bit) of the radix pattern, written to the same
// positions of keys_out/values_out.
template <typename KeyT, typename ValueT>
void sort_range(const KeyT* keys_in, KeyT* keys_out, const ValueT* values_in, ValueT* values_out, int64_t first,
                int64_t last, int begin_bit, int end_bit) {
  if (last <= first) return;
  using U = RadixBits<KeyT>;
  struct Item {
    U radix;
    KeyT key;
    ValueT value;
  };
  std::vector<Item> items;
  items.reserve(static_cast<size_t>(last - first));
  for (int64_t i = first; i < last; ++i)
    items.push_back(Item{bit_range(radix_bits(keys_in[i]), begin_bit, end_bit), keys_in[i], values_in[i]});
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.radix < b.radix; });
  for (int64_t i = first; i < last; ++i) {
    keys_out[i] = items[static_cast<size_t>(i - first)].key;
    values_out[i] = items[static_cast<size_t>(i - first)].value;
  }
}

}  // namespace emu_detail

struct DeviceRadixSort {
  template <typename KeyT, typename ValueT, typename NumItemsT>
  static cudaError_t SortPairs(void* d_temp_storage, size_t& temp_storage_bytes, const KeyT* d_keys_in,
                               KeyT* d_keys_out, const ValueT* d_values_in, ValueT* d_values_out, NumItemsT num_items,
                               int begin_bit = 0, int end_bit = sizeof(KeyT) * 8, cudaStream_t stream = 0) {
    static_assert(std::is_integral_v<NumItemsT>, "num_items must be an integer");
    const auto n = static_cast<int64_t>(num_items);
    if (n < 0 || begin_bit < 0 || begin_bit > end_bit || end_bit > static_cast<int>(sizeof(KeyT) * 8))
      return cudaErrorInvalidValue;
    return emu_detail::two_phase(
        d_temp_storage, temp_storage_bytes, emu_detail::temp_bytes(n, sizeof(KeyT) + sizeof(ValueT)), [&] {
          if (n == 0) return;
          kiln::emu::enqueue(stream, "cub::DeviceRadixSort::SortPairs",
                             [=] { emu_detail::sort_range(d_keys_in, d_keys_out, d_values_in, d_values_out, 0, n,
                                                          begin_bit, end_bit); });
        });
  }
};

}  // namespace cub
