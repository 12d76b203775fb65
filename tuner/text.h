// Small pure text helpers of the tuner and the command: durations ("10m",
// "90s", "1h30m"), FLCE shapes ("N,D,V"), byte sizes, and the progress line
// with its ETA. No CUDA, no database: tested on the CPU.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace detfuse::tuner {

// "90s", "10m", "1h", "1h30m", "2.5m", "500ms" or a bare number of seconds.
// Returns seconds (>= 0). Throws detfuse::Error (invalid_argument) naming the
// text on anything else.
double parse_duration(const std::string& text);

// A tolerance as the check texts spell it: "1e-05", "2e-02" (printf "%.0e").
std::string format_tolerance(double v);

// Human duration: "850 ms", "4.2 s", "42 s", "1m10s", "1h05m".
std::string format_duration(double seconds);

// Mean time per finished item times the items left; "?" before the first one.
// done <= total; elapsed_s is the time spent on the `done` items.
double estimate_remaining_seconds(int done, int total, double elapsed_s);
std::string format_eta(int done, int total, double elapsed_s);

// "[3/18] flce.bf16.mma.owning.bn128... 4.2 s, ETA 1m10s" (index is 1-based).
std::string progress_line(int index, int total, const std::string& what, double item_seconds,
                          int done, double elapsed_s);

struct Shape3 {
  int64_t N = 0, D = 0, V = 0;
};
// "N,D,V" with three positive integers (spaces allowed around them).
// Throws invalid_argument naming `option` (e.g. "--shape").
Shape3 parse_shape(const std::string& text, const std::string& option = "--shape");

// `count` positive comma-separated integers (spaces allowed around them), e.g.
// attention's "B,H,Hkv,Sq,Sk,d". Throws invalid_argument naming `option` and
// saying `expected` (e.g. "B,H,Hkv,Sq,Sk,d for --kernel attention, e.g. 4,32,8,4096,4096,128").
std::vector<int64_t> parse_dims(const std::string& text, size_t count, const std::string& option,
                                const std::string& expected);

// "512 B", "3.0 KiB", "1.25 GiB".
std::string format_bytes(double bytes);

// Replaces newlines by spaces and trims: error messages are printed on one line.
std::string one_line(const std::string& text);

}  // namespace detfuse::tuner
