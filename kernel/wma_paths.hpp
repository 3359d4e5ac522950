#pragma once
// The weighted moving average, once per instruction set (kernel/isa.hpp). Internal to the
// kernel: each function lives in its own translation unit compiled for its target, and only the
// dispatcher in kernel.cpp calls them, after checking that the CPU can.
//
// Contract of every path: out[i] = NaN for i < n - 1; otherwise the sum over k = 1..n of
// k * x[i - n + k], summed in that order with one rounding per multiply and per add, then divided
// by n(n+1)/2. Requires 1 <= n <= len. Noexcept, no allocation.

#include <cstddef>

namespace ipcfloor::wma {

using Path = void (*)(const double* x, std::size_t len, std::size_t n, double* out) noexcept;

void scalar(const double* x, std::size_t len, std::size_t n, double* out) noexcept;
void avx2(const double* x, std::size_t len, std::size_t n, double* out) noexcept;
void avx512(const double* x, std::size_t len, std::size_t n, double* out) noexcept;

}  // namespace ipcfloor::wma
