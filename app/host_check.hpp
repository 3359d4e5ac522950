#pragma once
// One finding of `ipcfloor doctor` (app/doctor.hpp) and the checks it draws on elsewhere
// (app/doctor_unit.hpp): what was found and how to fix it.

#include <cstdint>
#include <string>

namespace ipcfloor {

enum class CheckLevel : std::uint8_t { ok, warn, fail };

struct HostCheck {
  std::string name;     // short, stable: "huge_pages", "memlock", "isolation", ...
  CheckLevel level;
  std::string finding;  // what was found, with the numbers
  std::string fix;      // the command or setting that fixes it (empty when ok)
};

}  // namespace ipcfloor
