// `kiln bench allreduce`: all_reduce(sum) bandwidth against message size, for
// the mpi process group on CPU memory and, in a CUDA build with a GPU, the
// nccl group on device memory. Run it under the launcher:
//
//   mpirun -np 4 build/bin/kiln bench allreduce [--backend mpi|nccl|auto]
//
// Per size: the mean time of --reps all-reduces after two warm-up ones (the
// slowest rank's, after a barrier), the algorithm bandwidth algbw = bytes /
// time, and the bus bandwidth busbw = algbw * 2 (n - 1) / n (what each link
// carries in a ring all-reduce, comparable across rank counts; as
// nccl-tests). Rank 0 prints. Started without mpirun the world is one
// process: the mpi numbers are then meaningless and are skipped, while NCCL
// still runs a one-rank communicator (the path check on a one-GPU machine).
#include <chrono>
#include <cstdio>
#include <memory>

#include "core/memory/device_memory.h"
#include "dist/process_group.h"
#include "kiln.h"
#include "tools/bench.h"

namespace kiln::tools {
namespace {

struct AllreduceOptions {
  std::string backend = "auto";
  int64_t min_bytes = 4 << 10;
  int64_t max_bytes = 64 << 20;
  int reps = 0;  // 0: by size
  std::string dtype = "float32";
};

// Times all_reduce over `data` (room for max_bytes) on `group`; `world` (a CPU
// group over the same ranks) takes the slowest rank's time.
void run_sizes(dist::ProcessGroup& group, dist::ProcessGroup& world, void* data, DType dtype,
               const AllreduceOptions& o) {
  const int n = group.size();
  if (world.rank() == 0) {
    std::printf("%s: %d rank(s), %s sum, device %s\n", group.backend().c_str(), n, dtype_name(dtype),
                group.device().str().c_str());
    std::printf("%12s %8s %12s %12s %12s\n", "bytes", "reps", "time (us)", "algbw GB/s", "busbw GB/s");
  }
  const int64_t esize = static_cast<int64_t>(element_size(dtype));
  Tensor t_max = empty_tensor({1}, DType::Float64, kCPU);
  for (int64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 4) {
    const int64_t count = bytes / esize;
    const int reps = o.reps > 0 ? o.reps : bytes <= (1 << 20) ? 50 : bytes <= (16 << 20) ? 10 : 4;
    for (int i = 0; i < 2; ++i) group.all_reduce_raw(data, count, dtype, dist::ReduceOp::Sum)->wait();
    world.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) group.all_reduce_raw(data, count, dtype, dist::ReduceOp::Sum)->wait();
    t_max.data_ptr<double>()[0] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
    world.all_reduce(t_max, dist::ReduceOp::Max);
    const double secs = t_max.data_ptr<double>()[0];
    const double algbw = static_cast<double>(count * esize) / secs * 1e-9;
    const double busbw = algbw * 2.0 * (n - 1) / n;
    if (world.rank() == 0)
      std::printf("%12lld %8d %12.1f %12.3f %12.3f\n", static_cast<long long>(count * esize), reps, secs * 1e6, algbw,
                  busbw);
  }
}

int run_allreduce(const AllreduceOptions& o) {
  KILN_CHECK(o.min_bytes > 0 && o.min_bytes <= o.max_bytes, "bench allreduce: need 0 < --min-bytes <= --max-bytes");
  KILN_CHECK(o.backend == "auto" || o.backend == "mpi" || o.backend == "nccl",
             "bench allreduce: --backend must be auto, mpi or nccl, got '", o.backend, "'");
  KILN_CHECK(o.dtype == "float32" || o.dtype == "float64", "bench allreduce: --dtype must be float32 or float64");
  const DType dtype = o.dtype == "float32" ? DType::Float32 : DType::Float64;
  dist::ProcessGroupPtr world = dist::default_process_group();
  if (!world) world = dist::init_process_group();  // mpi under mpirun, else single
  if (world->rank() == 0)
    std::printf("bench allreduce: world size %d (%s); algbw = bytes / time, busbw = algbw * 2 (n - 1) / n\n",
                world->size(), world->backend().c_str());

  if (o.backend != "nccl") {
    if (world->backend() == "mpi") {
      Tensor buf = zeros({o.max_bytes / static_cast<int64_t>(element_size(dtype))}, dtype);
      run_sizes(*world, *world, buf.raw_data(), dtype, o);
    } else {
      KILN_CHECK(o.backend != "mpi", "bench allreduce: --backend mpi needs an MPI launch (mpirun -np N kiln ...)");
      std::printf("mpi: skipped (one process: run under mpirun -np N)\n");
    }
  }
  if (o.backend != "mpi") {
    dist::ProcessGroupPtr nccl;
    try {
      nccl = dist::new_nccl_group(world, -1, world->timeout_seconds());
    } catch (const Error& e) {
      if (o.backend == "nccl") throw;
      if (world->rank() == 0) std::printf("nccl: skipped (%s)\n", e.what());
      return 0;
    }
    const size_t bytes = (static_cast<size_t>(o.max_bytes) + 511) / 512 * 512;
    std::unique_ptr<memory::DeviceMemory> mem = memory::make_cuda_device_memory(nccl->device().index);
    void* data = mem->reserve(bytes);
    KILN_CHECK(data != nullptr, "bench allreduce: cannot allocate ", bytes, " bytes on ", nccl->device().str());
    run_sizes(*nccl, *world, data, dtype, o);
    nccl->shutdown();
    mem->release(data, bytes);
  }
  return 0;
}

const BenchRegistrar allreduce_reg("allreduce", [](CLI::App& bench) {
  auto* cmd = bench.add_subcommand("allreduce", "all_reduce bandwidth against message size (run under mpirun)");
  auto o = std::make_shared<AllreduceOptions>();
  cmd->add_option("--backend", o->backend, "auto (mpi, then nccl when built), mpi or nccl");
  cmd->add_option("--min-bytes", o->min_bytes, "smallest message (e.g. 4KB)")->transform(CLI::AsSizeValue(false));
  cmd->add_option("--max-bytes", o->max_bytes, "largest message (e.g. 64MB); sizes grow by 4x")
      ->transform(CLI::AsSizeValue(false));
  cmd->add_option("--reps", o->reps, "timed all-reduces per size (default: by size)");
  cmd->add_option("--dtype", o->dtype, "float32 or float64");
  return [o] { return run_allreduce(*o); };
});

}  // namespace
}  // namespace kiln::tools
