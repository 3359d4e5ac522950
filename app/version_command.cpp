#include "app/version_command.hpp"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/build_info.hpp"
#include "kernel/isa.hpp"

namespace ipcfloor {
namespace {

std::vector<std::string> supported_isa_names() {
  std::vector<std::string> names;
  for (const KernelIsa isa : supported_kernel_isas()) names.emplace_back(to_string(isa));
  return names;
}

}  // namespace

nlohmann::json build_context() {
  return nlohmann::json{
      {"version", kVersion},
      {"git_commit", kGitCommit},
      {"build_type", kBuildType},
      {"compiler", kCompiler},
      {"march_native", kNativeBuild},
      {"kernel_isa", std::string(to_string(active_kernel_isa()))},
      {"kernel_isas_supported", supported_isa_names()},
  };
}

void print_version() {
  fmt::print("ipcfloor {}\n", kVersion);
  fmt::print("commit    {}\n", kGitCommit);
  fmt::print("build     {}{}\n", kBuildType, kNativeBuild ? ", -march=native" : "");
  fmt::print("compiler  {}\n", kCompiler);
  fmt::print("kernel    {} path ({}; this CPU supports {})\n", to_string(active_kernel_isa()),
             std::getenv("IPCFLOOR_ISA") != nullptr && *std::getenv("IPCFLOOR_ISA") != '\0' ? "IPCFLOOR_ISA" : "CPUID",
             fmt::join(supported_isa_names(), ", "));
}

}  // namespace ipcfloor
