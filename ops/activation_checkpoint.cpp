// checkpoint(): Note [Activation checkpointing] in ops/activation_checkpoint.h.
#include "ops/activation_checkpoint.h"

#include "autograd/autograd_meta.h"
#include "autograd/grad_mode.h"
#include "core/random.h"
#include "ops/autocast.h"
#include "ops/internal.h"

namespace kiln {
namespace {

// Turns grad mode on for its scope (the engine runs backward under no-grad).
class EnableGradGuard {
 public:
  EnableGradGuard() : prev_(grad_enabled()) { set_grad_enabled(true); }
  ~EnableGradGuard() { set_grad_enabled(prev_); }
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool prev_;
};

// Sets the default generator to `replay` for its scope; puts back the state
// it found (the outer step's) afterwards, exception or not.
class ReplayRng {
 public:
  explicit ReplayRng(PhiloxState replay) : prev_(default_generator().state()) { default_generator().set_state(replay); }
  ~ReplayRng() { default_generator().set_state(prev_); }
  ReplayRng(const ReplayRng&) = delete;
  ReplayRng& operator=(const ReplayRng&) = delete;

 private:
  PhiloxState prev_;
};

struct ForwardState {
  PhiloxState rng;
  bool autocast = false;
  DType autocast_dtype = DType::BFloat16;
};

class CheckpointNode final : public Node {
 public:
  CheckpointNode(CheckpointFn fn, const TensorList& inputs, ForwardState st, std::vector<int> output_index)
      : fn_(std::move(fn)), state_(st), output_index_(std::move(output_index)) {
    for (const Tensor& in : inputs) {
      saved_.emplace_back(in, "checkpoint");
      needs_grad_.push_back(in.defined() && in.requires_grad());
    }
  }
  std::string name() const override { return "checkpoint"; }
  void release_saved() override {
    fn_ = nullptr;
    for (SavedTensor& s : saved_) s.release();
  }

  TensorList apply(TensorList&& grads) override {
    if (!fn_)
      fail("checkpoint: trying to run backward through the graph a second time (saved tensors were freed; "
           "pass retain_graph=true to the first backward)");
    TensorList in;
    for (size_t i = 0; i < saved_.size(); ++i) {
      Tensor t = saved_[i].get();
      if (t.defined()) {
        t = t.detach();
        if (needs_grad_[i]) t.set_requires_grad(true);
      }
      in.push_back(t);
    }
    TensorList out;
    {
      ReplayRng rng(state_.rng);
      EnableGradGuard grad;
      BackwardScope forward_again(false);
      AutocastGuard autocast(state_.autocast_dtype, state_.autocast);
      out = fn_(in);
    }
    TensorList roots, root_grads;
    for (size_t k = 0; k < output_index_.size(); ++k) {
      const auto j = static_cast<size_t>(output_index_[k]);
      KILN_CHECK(j < out.size() && out[j].defined() && out[j].sizes() == outputs[k].sizes &&
                     out[j].dtype() == outputs[k].dtype,
                 "checkpoint: the recomputation in backward gave a different output ", j,
                 " than the forward (fn must compute the same shapes and dtypes from the same inputs)");
      if (k < grads.size() && grads[k].defined() && out[j].requires_grad()) {
        roots.push_back(out[j]);
        root_grads.push_back(grads[k]);
      }
    }
    out.clear();  // the graph lives on through roots alone, and goes with them
    if (!roots.empty()) run_backward(roots, root_grads, /*retain_graph=*/false);
    TensorList result;
    for (size_t i = 0; i < in.size(); ++i) result.push_back(needs_grad_[i] ? in[i].grad() : Tensor());
    return result;
  }

 private:
  CheckpointFn fn_;
  std::vector<SavedTensor> saved_;
  std::vector<bool> needs_grad_;
  ForwardState state_;
  std::vector<int> output_index_;  // node output k is fn's output output_index_[k]
};

bool aliases_an_input(const Tensor& t, const TensorList& inputs) {
  for (const Tensor& in : inputs)
    if (in.defined() && in.impl_ptr() == t.impl_ptr()) return true;
  return false;
}

}  // namespace

TensorList checkpoint(CheckpointFn fn, const TensorList& inputs, const TensorList& params) {
  KILN_CHECK(fn != nullptr, "checkpoint: fn is empty");
  if (!grad_enabled()) return fn(inputs);
  if (!any_requires_grad(inputs) && !any_requires_grad(params)) return fn(inputs);  // nothing to checkpoint
  ForwardState st{default_generator().state(), autocast::is_active(), autocast::low_precision_dtype()};
  TensorList out;
  {
    NoGradGuard no_grad;
    out = fn(inputs);
  }
  std::vector<int> index;
  for (size_t j = 0; j < out.size(); ++j)
    if (out[j].defined() && out[j].is_floating_point()) index.push_back(static_cast<int>(j));
  if (index.empty()) return out;  // nothing differentiable came out
  auto node = std::make_shared<CheckpointNode>(std::move(fn), inputs, st, index);
  for (const Tensor& in : inputs) node->next_edges.push_back(in.defined() ? gradient_edge(in) : Edge{});
  for (size_t k = 0; k < index.size(); ++k) {
    Tensor& o = out[static_cast<size_t>(index[k])];
    // An output that is an input (or carries history) gets a fresh alias, so
    // the caller's tensor keeps its own autograd record.
    if (autograd_meta_if(o) != nullptr || aliases_an_input(o, inputs)) o = o.detach();
    node->outputs.push_back({o.sizes(), o.dtype(), o.device()});
    AutogradMeta& m = autograd_meta(o);
    m.grad_fn = node;
    m.output_nr = static_cast<uint32_t>(k);
    m.requires_grad = true;
  }
  return out;
}

}  // namespace kiln
