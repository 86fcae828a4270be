// input_file.cpp — bounded reading of a flag's file (see input_file.hpp).
#include "serve/input_file.hpp"

#include <fmt/format.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "activekv/size.hpp"

namespace activekv::serve {

Result<std::string> read_input_file(const std::string& path, std::uint64_t bytes_max, std::string_view flag) {
  const std::string setting(flag);
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return make_error(ErrorCode::not_found, setting, fmt::format("cannot open {}: {}", path, std::strerror(errno)));
  }
  if (S_ISDIR(st.st_mode)) return make_error(ErrorCode::invalid_argument, setting, fmt::format("{} is a directory, not a file", path));
  if (!S_ISREG(st.st_mode)) {
    return make_error(ErrorCode::invalid_argument, setting,
                      fmt::format("{} is not a regular file (a device, a FIFO or a socket); give a file", path));
  }
  if (static_cast<std::uint64_t>(st.st_size) > bytes_max) {
    return make_error(ErrorCode::refused, setting,
                      fmt::format("{} is {}, more than the {} an input file may be", path,
                                  format_bytes(static_cast<std::uint64_t>(st.st_size)), format_bytes(bytes_max)));
  }
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!file) return make_error(ErrorCode::not_found, setting, fmt::format("cannot open {}: {}", path, std::strerror(errno)));
  std::string text;
  text.reserve(static_cast<std::size_t>(st.st_size));
  char buffer[65536];
  for (;;) {
    const std::size_t n = std::fread(buffer, 1, sizeof buffer, file.get());
    if (n == 0) break;
    if (text.size() + n > bytes_max) {  // the file grew while being read
      return make_error(ErrorCode::refused, setting,
                        fmt::format("{} is more than the {} an input file may be", path, format_bytes(bytes_max)));
    }
    text.append(buffer, n);
  }
  if (std::ferror(file.get())) {
    return make_error(ErrorCode::io, setting, fmt::format("cannot read {}: {}", path, std::strerror(errno)));
  }
  return text;
}

}  // namespace activekv::serve
