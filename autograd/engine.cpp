// The backward engine: counts, for every node reachable from the roots, how
// many gradients it waits for; runs a node once all have arrived, latest
// created first (a deterministic order); sums gradients that meet at a slot.
#include <optional>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "autograd/autograd_meta.h"
#include "autograd/grad_mode.h"
#include "core/backend.h"
#include "core/profiler.h"

namespace kiln {
namespace {

struct LaterFirst {
  bool operator()(const std::shared_ptr<Node>& a, const std::shared_ptr<Node>& b) const {
    return a->sequence_nr < b->sequence_nr;
  }
};

Tensor add_grads(const Tensor& a, const Tensor& b) {
  KILN_CHECK(a.sizes() == b.sizes(), "internal: gradients of shapes ", shape_str(a.sizes()), " and ",
             shape_str(b.sizes()), " meet at one input");
  Tensor bb = b;
  if (b.dtype() != a.dtype()) {
    bb = empty_tensor(b.sizes(), a.dtype(), b.device());
    backend(b.device()).copy(bb, b);
  }
  Tensor out = empty_tensor(a.sizes(), a.dtype(), a.device());
  backend(a.device()).binary(BinaryOp::Add, out, a, bb);
  return out;
}

}  // namespace

void run_backward(const TensorList& roots, const TensorList& grads, bool retain_graph) {
  KILN_CHECK(roots.size() == grads.size(), "backward: ", roots.size(), " outputs but ", grads.size(), " gradients");
  std::unordered_map<Node*, TensorList> buffers;
  auto deliver = [&](const Edge& e, const Tensor& g) {
    TensorList& buf = buffers[e.fn.get()];
    if (buf.size() < e.fn->outputs.size()) buf.resize(e.fn->outputs.size());
    Tensor& slot = buf[e.input_nr];
    slot = slot.defined() ? add_grads(slot, g) : g;
  };

  std::vector<std::shared_ptr<Node>> starts;
  for (size_t i = 0; i < roots.size(); ++i) {
    Edge e = gradient_edge(roots[i]);
    KILN_CHECK(e.valid(), "backward: output ", i, " does not require grad and has no grad_fn");
    KILN_CHECK(grads[i].sizes() == roots[i].sizes(), "backward: gradient of shape ", shape_str(grads[i].sizes()),
               " for an output of shape ", shape_str(roots[i].sizes()));
    deliver(e, grads[i]);
    starts.push_back(e.fn);
  }

  // Dependency counts over the reachable graph.
  std::unordered_map<Node*, int> deps;
  std::unordered_set<Node*> seen;
  std::vector<Node*> stack;
  for (auto& s : starts)
    if (seen.insert(s.get()).second) stack.push_back(s.get());
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next_edges) {
      if (!e.valid()) continue;
      ++deps[e.fn.get()];
      if (seen.insert(e.fn.get()).second) stack.push_back(e.fn.get());
    }
  }

  std::priority_queue<std::shared_ptr<Node>, std::vector<std::shared_ptr<Node>>, LaterFirst> ready;
  std::unordered_set<Node*> queued;
  for (auto& s : starts)
    if (deps[s.get()] == 0 && queued.insert(s.get()).second) ready.push(s);

  NoGradGuard no_grad;  // backward formulas record nothing (no double backward)
  BackwardScope in_backward;  // and run without autocast (ops/autocast.h)
  while (!ready.empty()) {
    std::shared_ptr<Node> node = ready.top();
    ready.pop();
    TensorList in = std::move(buffers[node.get()]);
    buffers.erase(node.get());
    in.resize(node->outputs.size());
    for (auto& [slot, hooks] : node->pre_hooks) {
      if (slot >= in.size() || !in[slot].defined()) continue;
      for (auto& [id, hook] : hooks) {
        Tensor r = hook(in[slot]);
        if (r.defined()) in[slot] = r;
      }
    }
    // Note [Profiler]: one span per node, its gradients' shapes as arguments;
    // the ops of the backward formula nest under it.
    std::optional<profiler::RecordScope> span;
    if (profiler::is_active()) [[unlikely]]
      span.emplace((node->name() + "_backward").c_str(), profiler::Category::Backward, in);
    TensorList out = node->apply(std::move(in));
    span.reset();
    if (!retain_graph) node->release_saved();
    for (size_t i = 0; i < node->next_edges.size() && i < out.size(); ++i) {
      const Edge& e = node->next_edges[i];
      if (!e.valid()) continue;
      if (out[i].defined()) deliver(e, out[i]);
      if (--deps[e.fn.get()] == 0) ready.push(e.fn);
    }
    // Edges whose node produced fewer outputs (AccumulateGrad) still count down.
    for (size_t i = out.size(); i < node->next_edges.size(); ++i) {
      const Edge& e = node->next_edges[i];
      if (e.valid() && --deps[e.fn.get()] == 0) ready.push(e.fn);
    }
  }
}

}  // namespace kiln
