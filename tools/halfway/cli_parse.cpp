#include "cli_parse.hpp"

#include <cstdio>
#include <string>

#include "halfway/names.hpp"

namespace halfway::cli {

bool parse_or_help(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return true;
  } catch (const CLI::ParseError& e) {
    std::string msg = e.what();
    for (char& c : msg)
      if (c == '\n' || c == '\r') c = ' ';
    throw InputError(msg);
  }
  return false;
}

}  // namespace halfway::cli
