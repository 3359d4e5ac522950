#include "app/version_command.hpp"

#include <cstdio>

#include <fmt/format.h>

#include "common/build_info.hpp"

namespace ipcfloor {

nlohmann::json build_context() {
  return nlohmann::json{
      {"version", kVersion},
      {"git_commit", kGitCommit},
      {"build_type", kBuildType},
      {"compiler", kCompiler},
      {"march_native", kNativeBuild},
  };
}

void print_version() {
  fmt::print("ipcfloor {}\n", kVersion);
  fmt::print("commit    {}\n", kGitCommit);
  fmt::print("build     {}{}\n", kBuildType, kNativeBuild ? ", -march=native" : "");
  fmt::print("compiler  {}\n", kCompiler);
}

}  // namespace ipcfloor
