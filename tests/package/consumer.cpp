#include <halfway/halfway.hpp>

#include <cstdio>

int main() {
  halfway::Env env;
  const uint32_t h = halfway::from_f32(halfway::parse_format("fp16"), 0.1f, env);
  std::printf("%04X %02X\n", h, env.flags);
  return h == 0x2E66 && env.flags == halfway::flag::inexact ? 0 : 1;
}
