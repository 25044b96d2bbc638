'use strict';
// Stopping: SIGTERM/SIGINT set `stopped`, cut any backoff sleep short and
// cancel the call in flight, so the worker exits 0 within moments.

class Stop {
  constructor() {
    this.stopped = false;
    this.liveCall = null;
    this.wakers = new Set();
  }

  // The gRPC call to cancel on stop (null when none is in flight).
  setLiveCall(call) {
    this.liveCall = call;
    if (call && this.stopped) call.cancel();
  }

  stop() {
    if (this.stopped) return;
    this.stopped = true;
    if (this.liveCall) {
      if (typeof this.liveCall.end === 'function') this.liveCall.end(); // half-close the stream
      this.liveCall.cancel();
    }
    for (const wake of this.wakers) wake();
  }

  // Resolves after `seconds`, or at once when stopped.
  sleep(seconds) {
    if (this.stopped) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.wakers.delete(done);
        resolve();
      };
      const timer = setTimeout(done, seconds * 1000);
      this.wakers.add(done);
    });
  }

  installSignalHandlers(log) {
    for (const signal of ['SIGTERM', 'SIGINT']) {
      process.on(signal, () => {
        log(`got ${signal}, stopping`);
        this.stop();
      });
    }
  }
}

module.exports = { Stop };
