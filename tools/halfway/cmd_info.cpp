#include "commands.hpp"
#include "halfway/names.hpp"

namespace halfway::cli {
int cmd_info(int, char**) { throw InputError("'info' is being written"); }
}  // namespace halfway::cli
