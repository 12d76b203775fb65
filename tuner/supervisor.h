// Supervised measurement: the tuner's Measurer (any family) run in a worker process.
//
// A variant can take its process down with it: an illegal address or a trap
// leaves the CUDA context unusable for the rest of the process (a sticky
// error), abort() ends it, an endless kernel never returns. So `detfuse tune`
// measures in a worker that this class forks and talks to over two pipes; the
// parent (the orchestration and the SQLite store) never touches CUDA.
//
//   parent (Tuner, store, no CUDA)  --prepare/measure/release-->  worker (CUDA, the GPU measurer)
//                                   <--note / reply (JSON)-------
//
// What happens to a variant:
//   - it throws and the context survives: an `error` row (as in-process);
//   - it loses the CUDA context: the worker replies `crashed` with the CUDA
//     error (cudaErrorIllegalAddress ...) and exits; the next variant gets a
//     new worker, which prepares the problem again;
//   - the worker dies (abort, segfault, killed): `crashed` with the signal or
//     exit status;
//   - no answer within MeasureControl::kill_after_s: the worker is killed
//     (SIGKILL; the driver then frees its context) and the row is `crashed`
//     with a reason starting "timeout:";
//   - Ctrl-C: the worker gets SIGINT too (same process group; the parent sends
//     it when its stop() turns true) and abandons the variant as in-process;
//     if it does not answer within stop_grace_s it is killed.
//
// Why fork (and not exec of the detfuse binary with a hidden worker command):
// the worker gets the parent's registry as it is (test builds register fake
// and deliberately faulting variants; test binaries are not `detfuse`), and no
// binary path or command-line protocol has to be kept in step. The price is
// that nothing in the parent may initialise CUDA before forking: the worker
// queries the device itself and reports it (start()). The child only ever
// leaves through _exit(), so it never runs the parent's destructors (the SQLite
// connection) or flushes its stdio buffers; PR_SET_PDEATHSIG kills it if the
// parent dies.
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "kernels/common/device_info.h"
#include "kernels/registry.h"
#include "tuner/json.h"
#include "tuner/tuner.h"

namespace detfuse::tuner {

// What the worker builds after the fork: the device it measures on and the
// measurer. May throw detfuse::Error (e.g. "no CUDA device: ..."): start()
// rethrows it in the parent with the same kind.
struct WorkerSetup {
  DeviceInfo device;
  std::unique_ptr<Measurer> measurer;
  int sms = 0;  // SMs the measurer launches on (a --sms slice, tuner/sm_slice.h); 0: not said
};
using WorkerFactory = std::function<WorkerSetup()>;

struct SupervisorOptions {
  double stop_grace_s = 10;  // after a stop request, how long the worker may take to answer
  double poll_s = 0.1;       // how often the parent looks at stop() and the clock while waiting
  double start_timeout_s = 300;  // a worker that has not reported its device by then is killed
};

class SupervisedMeasurer : public Measurer {
 public:
  SupervisedMeasurer(const Registry& reg, WorkerFactory factory, SupervisorOptions o = {});
  ~SupervisedMeasurer() override;
  SupervisedMeasurer(const SupervisedMeasurer&) = delete;
  SupervisedMeasurer& operator=(const SupervisedMeasurer&) = delete;

  // Starts the worker if none runs; returns the device it measures on. Throws
  // the worker's setup error (kind kept) or an Error when it died starting.
  DeviceInfo start();
  // The worker's WorkerSetup::sms (after start()).
  int sms() const { return sms_; }

  void prepare(const Problem& p, Mode mode, int64_t seed) override;
  VariantOutcome measure(const Variant& v, const MeasureControl& ctl) override;
  void release() override;
  void set_wait_hook(std::function<void()> hook) override { wait_hook_ = std::move(hook); }

  int workers_started() const { return started_; }
  pid_t worker_pid() const { return pid_; }

 private:
  struct Reply {
    std::optional<Json> msg;  // empty: the worker is gone (died, killed)
    std::string gone;         // why, when msg is empty
    bool timed_out = false;
    bool stopped = false;     // a stop was requested while waiting
  };
  void spawn();
  void send(const Json& j);
  Reply wait_reply(double limit_s, const std::function<bool()>& stop, const std::function<void(const std::string&)>& note);
  std::string reap(bool kill_first);  // ends the worker; what became of it
  void prepare_in_worker();           // throws on failure

  const Registry& reg_;
  WorkerFactory factory_;
  SupervisorOptions opts_;
  std::function<void()> wait_hook_;
  pid_t pid_ = -1;
  int to_worker_ = -1, from_worker_ = -1;
  std::string inbuf_;
  DeviceInfo device_;
  int sms_ = 0;
  int started_ = 0;
  struct Prepared {
    Problem p;
    Mode mode;
    int64_t seed;
  };
  std::optional<Prepared> problem_;  // what the tuner prepared
  bool worker_prepared_ = false;     // whether the live worker holds it
};

// JSON forms of what crosses the pipe (also used by tests).
// (A problem's: Problem::to_json and problem_from_json, tuner/families.h.)
Json to_json(const DeviceInfo& d);
DeviceInfo device_info_from_json(const Json& j);
Json to_json(const VariantOutcome& o);
VariantOutcome variant_outcome_from_json(const Json& j);

}  // namespace detfuse::tuner
