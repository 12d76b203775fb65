// The GPU check for tests whose process must not initialise CUDA (it forks
// measuring workers that do): the device count is asked in a child process.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "kernels/common/device_info.h"

namespace detfuse::testing {

inline int cuda_device_count_in_child(std::string* why) {
  int fds[2];
  if (pipe(fds) != 0) return 0;
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    std::string w;
    const int n = cuda_device_count(&w);
    char buf[512] = {};
    std::snprintf(buf, sizeof buf, "%d %s", n, w.c_str());
    (void)!write(fds[1], buf, std::strlen(buf));
    _exit(0);
  }
  close(fds[1]);
  char buf[512] = {};
  ssize_t got = read(fds[0], buf, sizeof buf - 1);
  close(fds[0]);
  waitpid(pid, nullptr, 0);
  if (got <= 0) {
    if (why) *why = "the device check in a child process failed";
    return 0;
  }
  const std::string s(buf, size_t(got));
  const size_t sp = s.find(' ');
  if (why) *why = sp == std::string::npos ? "" : s.substr(sp + 1);
  return std::atoi(s.c_str());
}

}  // namespace detfuse::testing

// As DETFUSE_REQUIRE_GPU(), without initialising CUDA in this process.
#define DETFUSE_REQUIRE_GPU_NO_INIT()                                                       \
  do {                                                                                      \
    std::string detfuse_why_;                                                               \
    if (::detfuse::testing::cuda_device_count_in_child(&detfuse_why_) == 0)                 \
      GTEST_SKIP() << "no CUDA device available (" << detfuse_why_ << ")";                  \
  } while (0)
