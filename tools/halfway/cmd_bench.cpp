#include "commands.hpp"
#include "halfway/names.hpp"

namespace halfway::cli {
int cmd_bench(int, char**) { throw InputError("'bench' is being written"); }
}  // namespace halfway::cli
