#include "halfway/sim/context.hpp"

namespace halfway::sim {

Runtime& default_runtime() {
  thread_local Runtime rt;
  return rt;
}

Context& context() {
  thread_local Context c;
  return c;
}

ContextGuard::ContextGuard(const Policy* policy, Runtime* rt) : saved_(context()) {
  context().policy = policy;
  context().rt = rt;
}
ContextGuard::~ContextGuard() { context() = saved_; }

Scope::Scope(std::string name) : saved_(context().scope) { context().scope = std::move(name); }
Scope::~Scope() { context().scope = saved_; }

std::string scoped(const std::string& suffix) {
  const std::string& s = context().scope;
  return s.empty() ? suffix : s + "." + suffix;
}


}  // namespace halfway::sim
