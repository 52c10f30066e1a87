// kiln's emulated CUDA (Note [Emulated CUDA device] in cuda/emu/emu.h): a
// stand-in for cub::DeviceSegmentedSort::StableSortPairs, the call
// cuda/sort_scan.cu makes, as a host stable sort per segment with CUB's
// contract (the two-call temporary-storage protocol, stream order, key order
// and strictness of device_radix_sort.cuh, whose helpers it uses):
//
//  - Segment i is [d_begin_offsets[i], d_end_offsets[i]) of the num_items
//    pairs; one with end <= begin is empty. Each is sorted ascending and
//    stably by the whole key into the same positions of the outputs; pairs in
//    no segment are left as they were in the outputs.
//  - The offsets, like the keys and values, are read when the queued sort
//    runs (they are device data, typically written by an earlier kernel).
//  - A segment reaching outside [0, num_items) would read and write out of
//    bounds on a device; here the queued work prints it and aborts (a
//    stand-in has no way to raise the emulator's sticky fault).
// Not here: SortPairs / SortKeys (unstable), the Descending variants,
// DoubleBuffer overloads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "cub/device/device_radix_sort.cuh"

namespace cub {

struct DeviceSegmentedSort {
  template <typename KeyT, typename ValueT, typename BeginOffsetIteratorT, typename EndOffsetIteratorT>
  static cudaError_t StableSortPairs(void* d_temp_storage, size_t& temp_storage_bytes, const KeyT* d_keys_in,
                                     KeyT* d_keys_out, const ValueT* d_values_in, ValueT* d_values_out,
                                     int64_t num_items, int64_t num_segments, BeginOffsetIteratorT d_begin_offsets,
                                     EndOffsetIteratorT d_end_offsets, cudaStream_t stream = 0) {
    if (num_items < 0 || num_segments < 0) return cudaErrorInvalidValue;
    const size_t required =
        emu_detail::temp_bytes(num_items, sizeof(KeyT) + sizeof(ValueT)) + static_cast<size_t>(num_segments) * 8;
    return emu_detail::two_phase(d_temp_storage, temp_storage_bytes, required, [&] {
      if (num_items == 0 || num_segments == 0) return;
      kiln::emu::enqueue(stream, "cub::DeviceSegmentedSort::StableSortPairs", [=] {
        constexpr int kBits = static_cast<int>(sizeof(KeyT) * 8);
        for (int64_t s = 0; s < num_segments; ++s) {
          const auto first = static_cast<int64_t>(d_begin_offsets[s]);
          const auto last = static_cast<int64_t>(d_end_offsets[s]);
          if (last <= first) continue;
          if (first < 0 || last > num_items) {
            std::fprintf(stderr,
                         "emulated CUDA: cub::DeviceSegmentedSort::StableSortPairs: segment %lld [%lld, %lld) "
                         "outside the %lld items\n",
                         static_cast<long long>(s), static_cast<long long>(first), static_cast<long long>(last),
                         static_cast<long long>(num_items));
            std::abort();
          }
          emu_detail::sort_range(d_keys_in, d_keys_out, d_values_in, d_values_out, first, last, 0, kBits);
        }
      });
    });
  }
};

}  // namespace cub
