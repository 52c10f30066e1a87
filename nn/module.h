// Module: a tree of named parameters, buffers and submodules (as torch.nn).
//
// Invariants: names are unique within a module and contain no '.'; the full
// name of a tensor is the dot-joined path ("encoder.layer.0.output.dense.weight").
// Parameters and buffers are registered by pointer to the member Tensor that
// holds them, so to(), load_state_dict() and tying replace the member itself;
// a Module therefore cannot be copied or moved once registered.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/autograd/node.h"  // TensorList
#include "kiln/ops/ops.h"

namespace kiln::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  NamedTensors named_parameters() const;  // recursive, registration order
  NamedTensors named_buffers() const;
  std::vector<Tensor> parameters() const;
  // Parameters and buffers by full name (what a checkpoint holds).
  NamedTensors state_dict() const;
  // Copies values in. Missing, unexpected and mis-shaped keys are one
  // kiln::Error listing them all; with strict = false, missing and unexpected
  // keys are returned instead of thrown (shape mismatches always throw).
  struct LoadResult {
    std::vector<std::string> missing, unexpected;
  };
  LoadResult load_state_dict(const std::map<std::string, Tensor>& state, bool strict = true);

  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // Gradient checkpointing (Note [Gradient checkpointing in the models]):
  // sets the flag on this module and every submodule, as train() does; a
  // layer loop asks its layer through checkpoint_layer() below.
  void set_gradient_checkpointing(bool on = true);
  bool gradient_checkpointing() const { return checkpointing_; }
  void zero_grad();
  // Moves (and/or casts floating tensors of) every parameter and buffer.
  void to(Device device);
  void to(DType dtype);
  int64_t num_parameters() const;

  // Visits (full name, member tensor) for parameters then buffers.
  void for_each_tensor(const std::function<void(const std::string&, Tensor&, bool is_param)>& fn,
                       const std::string& prefix = "");

  // Every submodule below this one by full name ("bert.encoder.layer.0"), in
  // registration order, depth first (as torch's named_modules without the root).
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_modules() const;
  // Adds a submodule after construction (torch's add_module), e.g. an
  // adapter's matrices (nn/lora.h); remove_module takes one out again.
  void add_module(const std::string& name, std::shared_ptr<Module> m) { add_child(name, std::move(m)); }
  void remove_module(const std::string& name);

 protected:
  Tensor& register_parameter(const std::string& name, Tensor& member, Tensor value);
  Tensor& register_buffer(const std::string& name, Tensor& member, Tensor value);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    add_child(name, m);
    return m;
  }

 private:
  void add_child(const std::string& name, std::shared_ptr<Module> m);
  void check_name(const std::string& name) const;

  bool training_ = true;
  bool checkpointing_ = false;
  std::vector<std::pair<std::string, Tensor*>> params_, buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

// Note [Module call]: a module's computation is its `forward(...) const`
// (whatever arguments it takes), and `m(args...)` is the same call. Modules
// get that operator() by deriving from Callable<Self> beside Module:
//
//   class Block : public nn::Module, public nn::Callable<Block> {
//    public:
//     Tensor forward(const Tensor& x) const;  // (B, T, C) -> (B, T, C)
//   };
//   Tensor y = (*block)(x);  // = block->forward(x)
//
// Every module kiln ships (nn/layers.h, nn/containers.h, nn/models/) does.
template <typename Derived>
class Callable {
 public:
  template <typename... Args>
  decltype(auto) operator()(Args&&... args) const {
    return static_cast<const Derived&>(*this).forward(std::forward<Args>(args)...);
  }
};

// Note [Gradient checkpointing in the models]: every family's encoder or
// decoder loop runs each layer through checkpoint_layer(). When the layer is
// training, has gradient checkpointing on (Module::set_gradient_checkpointing,
// what `--gradient-checkpointing` sets on the trainer's model) and grad mode
// is on, the call is checkpoint(fn, inputs) (ops/activation_checkpoint.h,
// Note [Activation checkpointing]): the layer keeps only its inputs, and
// backward recomputes its activations. The layer's parameters go along as
// checkpoint()'s `params`, so a layer whose inputs need no gradient (frozen
// embeddings) still checkpoints and still gets its parameters' gradients.
// Otherwise (eval, no-grad, generation with a KV cache, which callers pass
// with enabled = false since the recomputation would append to the cache
// twice) it is fn(inputs). fn is kept for the backward: capture the layer
// by value (its shared_ptr), never a loop variable by reference.
Tensor checkpoint_layer(const Module& layer, std::function<Tensor(const TensorList&)> fn, const TensorList& inputs,
                        bool enabled = true);

}  // namespace kiln::nn
