#include "commands.hpp"
#include "halfway/names.hpp"

namespace halfway::cli {
int cmd_round(int, char**) { throw InputError("'round' is being written"); }
}  // namespace halfway::cli
