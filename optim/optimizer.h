// Optimizer: the base of SGD, AdamW and LAMB (PyTorch torch.optim semantics).
//
// Parameters come in groups; each group carries its own learning rate, weight
// decay and optimizer-specific options (momentum, betas, ...). A group given
// to a constructor may leave any of them unset; the optimizer fills them from
// its options struct, so after construction every group has lr, weight_decay
// and every option the optimizer knows.
//
// Invariants (checked at construction, kiln::Error otherwise):
//   - at least one parameter in all; no parameter appears twice;
//   - every parameter is a defined, contiguous, leaf tensor of dtype float32
//     or float64, on any device (kiln modules always hold such parameters);
//   - hyperparameters are valid (lr >= 0, weight_decay >= 0, ... per optimizer).
//
// step() updates, under NoGradGuard, every parameter whose grad() is defined
// (a gradient must match its parameter's shape, dtype and device) and skips the
// others, as PyTorch does. Each updated parameter's version is bumped.
//
// Note [Fused and generic updates]
// AdamW and LAMB update a group's parameters through the multi-tensor ops
// (ops/multi_tensor.h, Note [Multi-tensor ops]), one call per (device, dtype)
// bucket; clip_grad_norm and all_finite likewise make one call per list. On
// the CPU that is a fused loop over the raw data, run with kiln::parallel_for
// (Note [Deterministic chunking]): results do not depend on the thread count.
// On CUDA it is a few multi-tensor kernel launches (cuda/optim_kernels.cu),
// the CPU loops' statements with the same roundings. SGD keeps its own fused
// CPU loop (optim/sgd.cpp). The generic path (set_force_generic_update, or any
// other device) is the same formula written with kiln tensor ops (mul_, add_,
// sqrt, div, ... under NoGradGuard), statement by statement in the fused
// loop's order, with every scalar rounded to the parameter's dtype as the
// fused loop rounds it. The generic path rounds every op, while the fused
// loops (compiled with -march=native) may contract a * b + c into one FMA;
// LAMB's and the clipping norms are float64 sums taken in another order; a
// device kernel contracts and reduces in its own ways. So the paths agree to
// about an ulp of the parameter's scale per step, not bit for bit
// (tests/test_optim_generic.cpp measures it). The generic path reads nothing
// back to the host (no synchronisation per parameter). State buffers live on
// their parameter's device.
//
// Gradient accumulation: the training loop calls backward() several times and
// step() once; backward adds into existing gradients, so just do not call
// zero_grad() between the micro-batches (scale the loss by 1/accumulation
// steps for a mean).
//
// Per-parameter state (a step count and buffers such as exp_avg) is created
// lazily on a parameter's first update, as in PyTorch.
//
// The optimizer holds the parameter tensors themselves: build it after
// Module::to(), which replaces a module's parameter tensors.
//
// state_dict(): a snapshot (CPU copies, whatever the parameters' device) as
// named tensors, so it can be written with write_safetensors:
//   "param_groups.<g>.params"        int64 [n_g]: flat indices of the group's parameters
//   "param_groups.<g>.lr"            float64 0-dim; likewise ".weight_decay", ".<option>"
//   "state.<i>.step"                 int64 0-dim, for parameter i (flat index over groups)
//   "state.<i>.<buffer>"             same shape and dtype as parameter i
// A parameter without state (never updated) has no "state.<i>.*" entries.
// load_state_dict() checks everything first (missing, unexpected, mis-shaped
// or mis-typed entries are one kiln::Error listing them all) and then copies
// hyperparameters and state in, bit for bit, onto each parameter's device, so
// training resumes identically.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::optim {

// The largest step or interval a loaded state may hold: 2^53, where int64
// counts stop being exact as doubles (state dicts pass scalars through double,
// and the bias corrections compute powers of the step). A larger value in a
// checkpoint is refused at load, not carried into an overflow later.
inline constexpr int64_t kMaxStateCount = int64_t{1} << 53;

struct ParamGroup {
  std::vector<Tensor> params;
  std::optional<double> lr;            // unset: the optimizer's default
  std::optional<double> weight_decay;  // unset: the optimizer's default
  // Optimizer-specific overrides by name (SGD: "momentum", "dampening",
  // "nesterov"; AdamW and LAMB: "beta1", "beta2", "eps"). Unknown names are an error.
  std::map<std::string, double> options;

  // The value of an option; kiln::Error naming it when absent.
  double option(const std::string& name) const;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter with a gradient.
  void step();
  // Drops every gradient (set_to_none, the cheap default) or fills it with zeros.
  void zero_grad(bool set_to_none = true);

  const std::string& name() const { return name_; }  // "SGD", "AdamW", "LAMB"
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  size_t num_groups() const { return groups_.size(); }
  double lr(size_t group) const;
  void set_lr(size_t group, double lr);  // lr >= 0
  void set_lr(double lr);                // every group
  // Number of updates parameter `index` (flat over the groups) has had.
  int64_t param_step(size_t index) const;

  std::map<std::string, Tensor> state_dict() const;
  void load_state_dict(const std::map<std::string, Tensor>& state);

  // Sharded state (Note [Sharded optimizer state] in dist/ddp.h): owned[i]
  // (flat index over the groups) says whether this optimizer updates
  // parameter i and keeps its state. The others are skipped by step(), their
  // state is dropped, state_dict() leaves it out (the hyperparameters stay
  // whole), and load_state_dict() accepts and ignores it, so the "state.<i>.*"
  // entries of all ranks' state_dicts together are the unsharded state. An
  // empty vector owns everything (the default); else one entry per parameter.
  void set_owned(std::vector<bool> owned);
  bool owns(size_t index) const { return owned_.empty() || owned_[index]; }
  // Bytes of the per-parameter state buffers this optimizer holds.
  int64_t state_bytes() const;

 protected:
  struct ParamState {
    int64_t step = 0;             // updates so far; 0: buffers not yet created
    std::vector<Tensor> buffers;  // in the order of buffer_names(group)
  };

  // `defaults` holds every option the optimizer knows with its default value.
  Optimizer(std::string name, std::vector<ParamGroup> groups, double default_lr, double default_weight_decay,
            std::map<std::string, double> defaults);
  // Call at the end of the derived constructor (validate() is virtual).
  void validate_all_groups() const;

  // Names of the per-parameter buffers for a group's options.
  virtual std::vector<std::string> buffer_names(const ParamGroup& group) const = 0;
  // Throws kiln::Error for invalid hyperparameters of a resolved group.
  virtual void validate(const ParamGroup& group) const = 0;
  // Updates one parameter from its gradient (both contiguous, same shape,
  // dtype and device). state.step is already incremented; on the first update
  // (state.step == 1) the buffers are undefined and the update creates them,
  // on the parameter's device. Chooses the fused (SGD) or multi-tensor (AdamW,
  // LAMB) path or the generic one with detail::use_fused_update() /
  // use_multi_tensor_update() in optim/update_loop.h (Note [Fused and generic
  // updates]).
  virtual void update(const ParamGroup& group, const Tensor& param, const Tensor& grad, ParamState& state) = 0;

  // One parameter of a step: its gradient (contiguous) and state (step already incremented).
  struct UpdateItem {
    Tensor param;
    Tensor grad;
    ParamState* state;
  };
  // Updates a group's parameters that have gradients, in order. The default
  // calls update() for each; AdamW and LAMB override it to send each (device,
  // dtype) bucket of parameters to one multi-tensor op (ops/multi_tensor.h).
  virtual void update_group(const ParamGroup& group, const std::vector<UpdateItem>& items);

 private:
  size_t flat_index(size_t group, size_t i) const { return offsets_[group] + i; }
  void check_group_index(size_t group, const char* what) const;

  std::string name_;
  std::vector<ParamGroup> groups_;
  std::vector<size_t> offsets_;    // offsets_[g]: flat index of group g's first parameter
  std::vector<ParamState> state_;  // by flat index
  std::vector<bool> owned_;        // set_owned(); empty: all
};

// For tests only: true makes every optimizer update, clip_grad_norm /
// grad_norm and all_finite take the generic (tensor-op) path for CPU and CUDA
// tensors too, so tests can compare it with the fused CPU loops and the
// multi-tensor ops (Note [Fused and generic updates]). Process-wide;
// default false. Not for production use.
void set_force_generic_update(bool on);
bool force_generic_update();

}  // namespace kiln::optim
