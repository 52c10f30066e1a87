#include "core/random.h"

namespace kiln {

void Generator::manual_seed(uint64_t seed) {
  std::lock_guard<std::mutex> g(mutex_);
  seed_ = seed;
  offset_ = 0;
}

PhiloxState Generator::next() {
  std::lock_guard<std::mutex> g(mutex_);
  return PhiloxState{seed_, offset_++};
}

PhiloxState Generator::state() const {
  std::lock_guard<std::mutex> g(mutex_);
  return PhiloxState{seed_, offset_};
}

void Generator::set_state(PhiloxState st) {
  std::lock_guard<std::mutex> g(mutex_);
  seed_ = st.seed;
  offset_ = st.offset;
}

Generator& default_generator() {
  static Generator gen(0);
  return gen;
}

}  // namespace kiln
