// Environment settings: every WEFT_* variable is read through these, so a bad value is a
// weft::Error that names the variable, what was expected and what was found.
//
//   int workers = GetEnvInt("WEFT_CPU_WORKERS", DefaultCpuWorkers());
#pragma once

#include <string>

namespace weft {

// The value of `name`, or `fallback` when it is unset or empty.
std::string GetEnvString(const char* name, const std::string& fallback);
// Throws weft::Error when set to something that is not an integer in [min_value, max_value].
int GetEnvInt(const char* name, int fallback, int min_value = 0, int max_value = 1 << 20);
// Accepts 1/0, true/false, on/off, yes/no.
bool GetEnvBool(const char* name, bool fallback);

// Cores this process may run on (at least 1).
int NumCores();

}  // namespace weft
