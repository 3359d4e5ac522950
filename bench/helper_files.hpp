#pragma once
// Where ipcfloor finds the Python helpers it runs: the plotting script, the numba reference, the
// Python benchmark and the Python package. They live in one folder next to the executable,
// <dir of /proc/self/exe>/<bin-to-data>, which is <prefix>/share/ipcfloor in an installation and
// <build>/share/ipcfloor in a build tree (CMake mirrors the installed layout there with links to
// the sources). The relative step is fixed at configure time; no path of the build host is
// compiled in, so an installed prefix can be moved or copied whole.
//
// Setup path: reads /proc/self/exe, stats files, allocates. Any thread.

#include <string>
#include <string_view>

#include "common/error.hpp"

namespace ipcfloor {

// The helpers' folder, e.g. "/opt/ipcfloor/share/ipcfloor". io when /proc/self/exe cannot be read.
[[nodiscard]] Expected<std::string> helper_dir();

// The path of helper `relative` (e.g. "tools/plot_report.py") inside helper_dir(). When it is
// not there, the error (resource) names `what` it is, the path looked at, and how to get it back.
[[nodiscard]] Expected<std::string> helper_file(std::string_view relative, std::string_view what);

// An interpreter that can run the helpers: `python` must be an executable file. The error
// (resource) names it and the Debian packages the helpers need.
[[nodiscard]] Expected<void> check_python(const std::string& python);

}  // namespace ipcfloor
