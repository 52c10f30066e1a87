// The public API through <kiln/kiln.h> alone, built against the installed
// package with -Wall -Wextra -Wpedantic -Werror and linked to kiln::kiln only
// (tests/package/CMakeLists.txt). It trains a small MLP (nn::Sequential,
// AdamW with a warmup schedule, gradient clipping) to classify the quadrants
// of the plane, checks that doing so loaded no CUDA, cuDNN, NCCL or MPI
// library, then that the CUDA backend is found (or said to be missing) as
// the package was built. Exits non-zero on any failure.
#include <kiln/kiln.h>
#include <link.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#ifndef KILN_EXPECT_CUDA
#error "KILN_EXPECT_CUDA (0 or 1) comes from CMake: does the package have the cuda component?"
#endif

namespace {

int failures = 0;

void check(bool ok, const std::string& what) {
  std::printf("umbrella: %s: %s\n", ok ? "ok" : "FAIL", what.c_str());
  if (!ok) ++failures;
}

// The shared libraries this process has loaded whose file name starts with one of `prefixes`.
std::vector<std::string> loaded(const std::vector<std::string>& prefixes) {
  struct Query {
    const std::vector<std::string>* prefixes;
    std::vector<std::string> found;
  } q{&prefixes, {}};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* query = static_cast<Query*>(data);
        const char* path = info->dlpi_name != nullptr ? info->dlpi_name : "";
        const char* slash = std::strrchr(path, '/');
        const std::string name = slash != nullptr ? slash + 1 : path;
        for (const std::string& p : *query->prefixes)
          if (name.rfind(p, 0) == 0) query->found.push_back(path);
        return 0;
      },
      &q);
  return q.found;
}

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : ", ") + s;
  return out.empty() ? "none" : out;
}

}  // namespace

int main() {
  using namespace kiln;
  manual_seed(0);

  // Quadrant classes: 1 where x0 * x1 > 0.
  const Tensor x = randn({512, 2});
  const Tensor y = gt(x.select(1, 0) * x.select(1, 1), 0.0).to(DType::Int64);

  nn::Sequential mlp;
  mlp.push_back(std::make_shared<nn::Linear>(2, 32));
  mlp.push_back(std::make_shared<nn::GELU>());
  mlp.push_back(std::make_shared<nn::Linear>(32, 2));
  optim::AdamWOptions options;
  options.lr = 3e-2;
  options.weight_decay = 0.0;
  optim::AdamW opt(mlp.parameters(), options);
  optim::Scheduler schedule(opt, optim::linear_schedule_with_warmup(20, 300));
  double first_loss = 0, last_loss = 0;
  for (int step = 0; step < 300; ++step) {
    const Tensor loss = cross_entropy(mlp(x), y);
    opt.zero_grad();
    loss.backward();
    optim::clip_grad_norm(mlp.parameters(), 1.0);
    opt.step();
    schedule.step();
    (step == 0 ? first_loss : last_loss) = loss.item<double>();
  }
  NoGradGuard no_grad;
  const double accuracy = mean(eq(argmax(mlp(x), 1), y).to(DType::Float64)).item<double>();
  std::printf("umbrella: loss %.4f -> %.4f, accuracy %.3f, %lld parameters\n", first_loss, last_loss, accuracy,
              static_cast<long long>(mlp.num_parameters()));
  check(last_loss < 0.5 * first_loss && accuracy > 0.9, "the MLP learns the quadrants");

  const dist::ProcessGroupPtr group = dist::init_process_group();
  check(group->backend() == "single" && group->size() == 1, "a one-process group without MPI");
  dist::destroy_process_group();

  const std::vector<std::string> heavy =
      loaded({"libcuda.", "libcudart", "libcublas", "libcudnn", "libnccl", "libmpi", "libopen-rte", "libopen-pal",
              "libkiln_cuda", "libkiln_dist"});
  check(heavy.empty(), "a CPU program loads no CUDA or MPI library (loaded: " + joined(heavy) + ")");

  // Asking for CUDA finds the backend beside libkiln.so when the package has it.
  const bool has_cuda = cuda_built();
  check(has_cuda == (KILN_EXPECT_CUDA != 0),
        std::string("cuda_built() is ") + (has_cuda ? "true" : "false") + " (" + cuda_unavailable_reason() + ")");
  if (has_cuda) {
    check(!loaded({"libkiln_cuda"}).empty(), "libkiln_cuda.so was loaded on the first CUDA request");
    std::printf("umbrella: %d CUDA devices\n", cuda::device_count());
  } else {
    check(cuda_unavailable_reason().find("built without CUDA") != std::string::npos,
          "without the CUDA backend: " + cuda_unavailable_reason());
    try {
      (void)zeros({2}, TensorOptions(DType::Float32, Device::parse("cuda")));
      check(false, "a CUDA tensor without the CUDA backend throws");
    } catch (const Error& e) {
      check(std::string(e.what()).find("built without CUDA") != std::string::npos, std::string("it says: ") + e.what());
    }
  }
  return failures == 0 ? 0 : 1;
}
