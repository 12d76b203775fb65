#include "tuner/supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/common/error.h"
#include "tuner/budget.h"
#include "tuner/families.h"
#include "tuner/interrupt.h"
#include "tuner/text.h"

namespace detfuse::tuner {

// ------------------------------------------------------------ JSON forms

namespace {
double num_or_nan(const Json& j) { return j.is_null() ? std::numeric_limits<double>::quiet_NaN() : j.get<double>(); }
}  // namespace

Json to_json(const DeviceInfo& d) {
  return {{"ordinal", d.ordinal},
          {"name", d.name},
          {"uuid", d.uuid},
          {"cc_major", d.cc_major},
          {"cc_minor", d.cc_minor},
          {"sm_count", d.sm_count},
          {"total_memory_bytes", d.total_memory_bytes},
          {"l2_bytes", d.l2_bytes},
          {"max_smem_per_block_optin", d.max_smem_per_block_optin},
          {"max_sm_clock_mhz", d.max_sm_clock_mhz},
          {"memory_clock_mhz", d.memory_clock_mhz},
          {"driver_version", d.driver_version},
          {"runtime_version", d.runtime_version},
          {"driver_release", d.driver_release},
          {"current_sm_clock_mhz", d.current_sm_clock_mhz ? Json(*d.current_sm_clock_mhz) : Json(nullptr)}};
}

DeviceInfo device_info_from_json(const Json& j) {
  DeviceInfo d;
  d.ordinal = j.at("ordinal").get<int>();
  d.name = j.at("name").get<std::string>();
  d.uuid = j.at("uuid").get<std::string>();
  d.cc_major = j.at("cc_major").get<int>();
  d.cc_minor = j.at("cc_minor").get<int>();
  d.sm_count = j.at("sm_count").get<int>();
  d.total_memory_bytes = j.at("total_memory_bytes").get<uint64_t>();
  d.l2_bytes = j.at("l2_bytes").get<int>();
  d.max_smem_per_block_optin = j.at("max_smem_per_block_optin").get<int>();
  d.max_sm_clock_mhz = j.at("max_sm_clock_mhz").get<int>();
  d.memory_clock_mhz = j.at("memory_clock_mhz").get<int>();
  d.driver_version = j.at("driver_version").get<int>();
  d.runtime_version = j.at("runtime_version").get<int>();
  d.driver_release = j.at("driver_release").get<std::string>();
  if (!j.at("current_sm_clock_mhz").is_null()) d.current_sm_clock_mhz = j.at("current_sm_clock_mhz").get<int>();
  return d;
}

Json to_json(const VariantOutcome& o) {
  Json j = {{"status", o.status},
            {"reason", o.reason},
            {"interrupted", o.interrupted},
            {"context_lost", o.context_lost},
            {"cut", o.cut}};
  if (o.correctness) {
    Json errors = Json::object();
    for (const auto& [k, v] : o.correctness->errors) errors[k] = json_number(v);
    j["correctness"] = {{"checked_what", o.correctness->checked_what},
                        {"errors", errors},
                        {"tolerance", o.correctness->tolerance},
                        {"pass", o.correctness->pass}};
  }
  if (o.determinism) {
    Json digests = Json::array();
    for (const auto& d : o.determinism->digests) digests.push_back({d.repeat, d.output, d.digest});
    j["determinism"] = {{"repeats", o.determinism->repeats},
                        {"digests", digests},
                        {"distinct", o.determinism->distinct},
                        {"level", o.determinism->level}};
    const db::LevelChecks& c = o.determinism->checks;
    j["determinism"]["checks"] = {{"run_to_run", c.run_to_run}, {"sm_count", c.sm_count}, {"config", c.config},
                                  {"portable", c.portable},     {"notes", c.notes}};
    if (!o.determinism->spread.empty()) {
      Json spread = Json::object();
      for (const auto& [k, v] : o.determinism->spread)
        spread[k] = Json::array({json_number(v.max_abs_diff), json_number(v.diff_norm), json_number(v.norm)});
      j["determinism"]["spread"] = spread;
    }
  }
  if (o.timing) {
    const db::Timing& t = *o.timing;
    j["timing"] = {{"samples_ms", t.samples_ms},       {"median_ms", t.median_ms},
                   {"min_ms", t.min_ms},               {"max_ms", t.max_ms},
                   {"warmup", t.warmup},               {"clock_min_mhz", t.clock_min_mhz},
                   {"clock_max_mhz", t.clock_max_mhz}, {"peak_extra_bytes", t.peak_extra_bytes},
                   {"flops", t.flops},                 {"tflops", t.tflops},
                   {"clock_events", t.clock_events ? Json(*t.clock_events) : Json(nullptr)}};
  }
  return j;
}

VariantOutcome variant_outcome_from_json(const Json& j) {
  VariantOutcome o;
  o.status = j.at("status").get<std::string>();
  o.reason = j.at("reason").get<std::string>();
  o.interrupted = j.at("interrupted").get<bool>();
  o.context_lost = j.at("context_lost").get<bool>();
  o.cut = j.at("cut").get<std::string>();
  if (j.contains("correctness")) {
    const Json& c = j["correctness"];
    db::Correctness x;
    x.checked_what = c.at("checked_what").get<std::string>();
    for (const auto& [k, v] : c.at("errors").items()) x.errors[k] = num_or_nan(v);
    x.tolerance = c.at("tolerance").get<double>();
    x.pass = c.at("pass").get<bool>();
    o.correctness = x;
  }
  if (j.contains("determinism")) {
    const Json& d = j["determinism"];
    db::Determinism x;
    x.repeats = d.at("repeats").get<int>();
    for (const auto& r : d.at("digests")) x.digests.push_back({r.at(0).get<int>(), r.at(1).get<std::string>(), r.at(2).get<std::string>()});
    x.distinct = d.at("distinct").get<std::map<std::string, int>>();
    x.level = d.at("level").get<std::string>();
    if (d.contains("checks")) {
      const Json& c = d["checks"];
      x.checks.run_to_run = c.at("run_to_run").get<std::string>();
      x.checks.sm_count = c.at("sm_count").get<std::string>();
      x.checks.config = c.at("config").get<std::string>();
      x.checks.portable = c.at("portable").get<std::string>();
      x.checks.notes = c.at("notes").get<std::string>();
    }
    if (d.contains("spread"))
      for (const auto& [k, v] : d["spread"].items())
        x.spread[k] = db::Spread{num_or_nan(v.at(0)), num_or_nan(v.at(1)), num_or_nan(v.at(2))};
    o.determinism = x;
  }
  if (j.contains("timing")) {
    const Json& t = j["timing"];
    db::Timing x;
    x.samples_ms = t.at("samples_ms").get<std::vector<double>>();
    x.median_ms = t.at("median_ms").get<double>();
    x.min_ms = t.at("min_ms").get<double>();
    x.max_ms = t.at("max_ms").get<double>();
    x.warmup = t.at("warmup").get<int>();
    x.clock_min_mhz = t.at("clock_min_mhz").get<int>();
    x.clock_max_mhz = t.at("clock_max_mhz").get<int>();
    x.peak_extra_bytes = t.at("peak_extra_bytes").get<int64_t>();
    x.flops = t.at("flops").get<double>();
    x.tflops = t.at("tflops").get<double>();
    if (t.contains("clock_events") && !t["clock_events"].is_null()) x.clock_events = t["clock_events"].get<int64_t>();
    o.timing = x;
  }
  return o;
}

// ------------------------------------------------------------ framing

namespace {

// A frame: 4 bytes of length (little-endian) then that many bytes of JSON text.
bool write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= size_t(w);
  }
  return true;
}

bool write_frame(int fd, const Json& j) {
  const std::string text = json_text(j);
  const uint32_t len = uint32_t(text.size());
  const char h[4] = {char(len & 0xff), char((len >> 8) & 0xff), char((len >> 16) & 0xff), char((len >> 24) & 0xff)};
  return write_all(fd, h, 4) && write_all(fd, text.data(), text.size());
}

// Takes one complete frame out of buf, if there is one.
std::optional<Json> take_frame(std::string& buf) {
  if (buf.size() < 4) return std::nullopt;
  uint32_t len = 0;
  for (int i = 0; i < 4; ++i) len |= uint32_t(static_cast<unsigned char>(buf[size_t(i)])) << (8 * i);
  if (buf.size() < 4 + size_t(len)) return std::nullopt;
  Json j = Json::parse(buf.begin() + 4, buf.begin() + 4 + len);
  buf.erase(0, 4 + size_t(len));
  return j;
}

// Blocking read of one frame (the worker's side); nullopt at EOF.
std::optional<Json> read_frame_blocking(int fd, std::string& buf) {
  for (;;) {
    if (auto j = take_frame(buf)) return j;
    char tmp[65536];
    ssize_t r = ::read(fd, tmp, sizeof tmp);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return std::nullopt;
    buf.append(tmp, size_t(r));
  }
}

Json error_reply(const std::exception& e) {
  const auto* de = dynamic_cast<const Error*>(&e);
  const bool invalid = de && de->kind() == Error::Kind::invalid_argument;
  std::string what = e.what();
  if (dynamic_cast<const std::bad_alloc*>(&e)) what = "out of host memory (std::bad_alloc)";
  return {{"ok", false}, {"error", what}, {"kind", invalid ? "invalid_argument" : "runtime"}};
}

[[noreturn]] void worker_main(int in_fd, int out_fd, pid_t parent, const Registry& reg, const WorkerFactory& factory) {
  // Die with the parent (a kill -9 of `detfuse tune` must not leave a worker
  // holding the GPU); the parent may already be gone.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(0);
  signal(SIGPIPE, SIG_IGN);
  clear_interrupt();
  install_sigint_handler();
  int code = 0;
  try {
    WorkerSetup setup;
    try {
      setup = factory();
    } catch (const std::exception& e) {
      write_frame(out_fd, error_reply(e));
      _exit(3);
    }
    if (!write_frame(out_fd, {{"ok", true}, {"device", to_json(setup.device)}, {"sms", setup.sms}})) _exit(0);
    std::string buf;
    std::optional<Problem> prepared;  // the problem the measurer holds (variants are looked up in its family)
    for (;;) {
      std::optional<Json> req = read_frame_blocking(in_fd, buf);
      if (!req) break;  // the parent closed the pipe: done
      const std::string op = req->at("op").get<std::string>();
      Json reply = {{"ok", true}};
      bool exit_after = false;
      try {
        if (op == "prepare") {
          prepared.reset();
          Problem p = problem_from_json(req->at("problem"));
          setup.measurer->prepare(p, Mode(req->at("mode").get<int>()), req->at("seed").get<int64_t>());
          prepared = p;
        } else if (op == "measure") {
          const std::string name = req->at("variant").get<std::string>();
          if (!prepared) throw Error("worker: measure before prepare");
          const std::optional<Variant> v = prepared->find_variant(reg, name);
          if (!v) throw Error("worker: no " + std::string(prepared->label()) + " variant named '" + name + "' in its registry");
          clear_interrupt();
          MeasureControl ctl;
          ctl.repeats = req->at("repeats").get<int>();
          ctl.time_cap_s = req->at("time_cap_s").get<double>();
          ctl.levels = req->value("levels", false);
          ctl.stop = interrupt_requested;
          ctl.note = [&](const std::string& s) { write_frame(out_fd, {{"note", s}}); };
          VariantOutcome out = setup.measurer->measure(*v, ctl);
          reply["outcome"] = to_json(out);
          // An unusable context cannot measure anything else: a new worker will.
          exit_after = out.context_lost;
        } else if (op == "release") {
          setup.measurer->release();
          prepared.reset();
        } else {
          throw Error("worker: unknown request '" + op + "'");
        }
      } catch (const std::exception& e) {
        reply = error_reply(e);
      }
      if (!write_frame(out_fd, reply)) break;
      if (exit_after) {
        code = 4;
        break;
      }
    }
  } catch (...) {
    code = 5;
  }
  _exit(code);
}

std::string signal_text(int sig) {
  const char* d = strsignal(sig);
  return "signal " + std::to_string(sig) + " (" + (d ? d : "?") + ")";
}

}  // namespace

// ------------------------------------------------------------ the parent

SupervisedMeasurer::SupervisedMeasurer(const Registry& reg, WorkerFactory factory, SupervisorOptions o)
    : reg_(reg), factory_(std::move(factory)), opts_(o) {}

SupervisedMeasurer::~SupervisedMeasurer() {
  if (pid_ > 0) {
    ::close(to_worker_);  // EOF: the worker leaves its loop and exits
    to_worker_ = -1;
    // Give it a moment to exit on its own (freeing the GPU cleanly), then kill.
    const double t0 = monotonic_seconds();
    int st = 0;
    while (monotonic_seconds() - t0 < 5) {
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        break;
      }
      usleep(10000);
    }
    if (pid_ > 0) reap(true);
  }
  if (from_worker_ >= 0) ::close(from_worker_);
}

void SupervisedMeasurer::spawn() {
  int down[2], up[2];
  if (pipe(down) != 0 || pipe(up) != 0) throw Error(std::string("cannot create the worker's pipes: ") + std::strerror(errno));
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    ::close(down[0]);
    ::close(down[1]);
    ::close(up[0]);
    ::close(up[1]);
    throw Error(std::string("cannot start the measuring worker (fork): ") + std::strerror(errno));
  }
  if (pid == 0) {
    ::close(down[1]);
    ::close(up[0]);
    worker_main(down[0], up[1], parent, reg_, factory_);
  }
  ::close(down[0]);
  ::close(up[1]);
  fcntl(down[1], F_SETFD, FD_CLOEXEC);
  fcntl(up[0], F_SETFD, FD_CLOEXEC);
  pid_ = pid;
  to_worker_ = down[1];
  from_worker_ = up[0];
  inbuf_.clear();
  worker_prepared_ = false;
  ++started_;
}

std::string SupervisedMeasurer::reap(bool kill_first) {
  if (pid_ <= 0) return "no worker";
  if (kill_first) kill(pid_, SIGKILL);
  int st = 0;
  pid_t r;
  do r = waitpid(pid_, &st, 0);
  while (r < 0 && errno == EINTR);
  pid_ = -1;
  if (to_worker_ >= 0) ::close(to_worker_);
  if (from_worker_ >= 0) ::close(from_worker_);
  to_worker_ = from_worker_ = -1;
  worker_prepared_ = false;
  if (r < 0) return "the worker is gone";
  if (WIFSIGNALED(st)) return "the worker died of " + signal_text(WTERMSIG(st));
  if (WIFEXITED(st)) return "the worker exited with status " + std::to_string(WEXITSTATUS(st));
  return "the worker ended";
}

void SupervisedMeasurer::send(const Json& j) {
  // A dead worker shows up as EPIPE here (SIGPIPE ignored for the call) or as
  // EOF on the reply; wait_reply reports it either way.
  struct sigaction ign {}, old {};
  ign.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &ign, &old);
  write_frame(to_worker_, j);
  sigaction(SIGPIPE, &old, nullptr);
}

SupervisedMeasurer::Reply SupervisedMeasurer::wait_reply(double limit_s, const std::function<bool()>& stop,
                                                         const std::function<void(const std::string&)>& note) {
  Reply rep;
  const double t0 = monotonic_seconds();
  double last_hook = t0, stop_at = -1;
  for (;;) {
    try {
      while (auto j = take_frame(inbuf_)) {
        if (j->contains("note")) {
          if (note) note(j->at("note").get<std::string>());
          continue;
        }
        rep.msg = std::move(j);
        return rep;
      }
    } catch (const std::exception& e) {
      rep.gone = reap(true) + " after sending an unreadable reply (" + e.what() + ")";
      return rep;
    }
    pollfd pfd{from_worker_, POLLIN, 0};
    const int r = poll(&pfd, 1, int(opts_.poll_s * 1000));
    if (r < 0 && errno != EINTR) {
      rep.gone = reap(true) + std::string(" (poll failed: ") + std::strerror(errno) + ")";
      return rep;
    }
    if (r > 0) {
      char tmp[65536];
      ssize_t n = ::read(from_worker_, tmp, sizeof tmp);
      if (n > 0) {
        inbuf_.append(tmp, size_t(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      rep.gone = reap(false);  // EOF: the worker ended
      return rep;
    }
    const double now = monotonic_seconds();
    if (wait_hook_ && now - last_hook >= 1.0) {
      last_hook = now;
      wait_hook_();
    }
    if (stop && stop_at < 0 && stop()) {
      rep.stopped = true;
      stop_at = now;
      kill(pid_, SIGINT);  // the worker's handler sets its stop flag (the terminal may have sent one too)
    }
    if (stop_at >= 0 && now - stop_at > opts_.stop_grace_s) {
      rep.gone = reap(true) + ": it did not stop within " + format_duration(opts_.stop_grace_s) + " of the request";
      return rep;
    }
    if (limit_s > 0 && now - t0 > limit_s) {
      rep.timed_out = true;
      rep.gone = reap(true);
      return rep;
    }
  }
}

DeviceInfo SupervisedMeasurer::start() {
  if (pid_ > 0) return device_;
  spawn();
  Reply r = wait_reply(opts_.start_timeout_s, nullptr, nullptr);
  if (!r.msg)
    throw Error("the measuring worker did not start: " +
                (r.timed_out ? "no answer within " + format_duration(opts_.start_timeout_s) + " (CUDA initialisation hung?)" : r.gone));
  if (!r.msg->at("ok").get<bool>()) {
    const std::string what = r.msg->at("error").get<std::string>();
    reap(true);
    throw Error(what, r.msg->at("kind") == "invalid_argument" ? Error::Kind::invalid_argument : Error::Kind::runtime);
  }
  device_ = device_info_from_json(r.msg->at("device"));
  sms_ = r.msg->value("sms", 0);
  return device_;
}

void SupervisedMeasurer::prepare_in_worker() {
  start();
  send({{"op", "prepare"}, {"problem", problem_->p.to_json()}, {"mode", int(problem_->mode)}, {"seed", problem_->seed}});
  Reply r = wait_reply(0, nullptr, nullptr);
  if (!r.msg) throw Error("the measuring worker ended while preparing the problem: " + r.gone);
  if (!r.msg->at("ok").get<bool>()) {
    const std::string what = r.msg->at("error").get<std::string>();
    throw Error(what, r.msg->at("kind") == "invalid_argument" ? Error::Kind::invalid_argument : Error::Kind::runtime);
  }
  worker_prepared_ = true;
}

void SupervisedMeasurer::prepare(const Problem& p, Mode mode, int64_t seed) {
  problem_ = Prepared{p, mode, seed};
  worker_prepared_ = false;
  prepare_in_worker();
}

void SupervisedMeasurer::release() {
  problem_.reset();
  if (pid_ > 0 && worker_prepared_) {
    send({{"op", "release"}});
    Reply r = wait_reply(60, nullptr, nullptr);
    (void)r;  // a worker that cannot release is restarted by the next request
  }
  worker_prepared_ = false;
}

VariantOutcome SupervisedMeasurer::measure(const Variant& v, const MeasureControl& ctl) {
  VariantOutcome out;
  if (!problem_) {
    out.status = db::kResultError;
    out.reason = "measure() before prepare()";
    return out;
  }
  // A worker that died while idle (killed from outside) is replaced before the
  // request, so its death is not blamed on this variant.
  if (pid_ > 0) {
    int st = 0;
    if (waitpid(pid_, &st, WNOHANG) == pid_) {
      pid_ = -1;
      ::close(to_worker_);
      ::close(from_worker_);
      to_worker_ = from_worker_ = -1;
      worker_prepared_ = false;
    }
  }
  if (pid_ <= 0 || !worker_prepared_) {
    // A new worker (the last one crashed): it prepares the problem again.
    try {
      prepare_in_worker();
    } catch (const std::exception& e) {
      out.status = db::kResultError;
      out.reason = std::string("preparing the problem in a new measuring worker failed: ") + e.what();
      return out;
    }
  }
  send({{"op", "measure"},
        {"variant", v.name()},
        {"repeats", ctl.repeats},
        {"time_cap_s", ctl.time_cap_s},
        {"levels", ctl.levels}});
  Reply r = wait_reply(ctl.kill_after_s, ctl.stop, ctl.note);
  if (r.msg) {
    if (!r.msg->at("ok").get<bool>()) {
      out.status = db::kResultError;
      out.reason = r.msg->at("error").get<std::string>();
      return out;
    }
    out = variant_outcome_from_json(r.msg->at("outcome"));
    if (out.context_lost) {
      // The worker exits after such a reply; the next variant gets a new one.
      const std::string how = reap(false);
      out.context_lost = false;
      out.reason += "; the worker's CUDA context was lost (" + how + "), a new worker measures the next variant";
    }
    return out;
  }
  if (r.stopped) {
    out.interrupted = true;
    return out;
  }
  out.status = db::kResultCrashed;
  if (r.timed_out)
    out.reason = "timeout: no answer within " + format_duration(ctl.kill_after_s) +
                 " (--kill-after); the worker was killed and a new one measures the next variant";
  else
    out.reason = r.gone + " while measuring this variant; a new worker measures the next variant";
  return out;
}

}  // namespace detfuse::tuner
