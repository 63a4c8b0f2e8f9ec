"""systemd's readiness protocol (the unit is Type=notify, issue 32): a fake NOTIFY_SOCKET (an AF_UNIX
datagram socket, as systemd's) receives READY=1 only once /readyz answers 200, RELOADING=1 then READY=1
around a SIGHUP reload, and STOPPING=1 at shutdown; --probe, the daemon's own health check (the image's
HEALTHCHECK and the Kubernetes exec probes), exits 0 only on a 2xx answer."""
import os
import select
import signal
import socket
import tempfile
import time
import unittest

from httpkit import Daemon, request, run_binary

# 4096 x 768 seeded Gaussian: each decomposition takes about a second, so the daemon listens (and answers
# /readyz 503) for seconds before it is ready.
GAUSSIAN = {"b": {"matrices": {"g": {"generator": "gaussian", "rows": 4096, "cols": 768, "seed": 1}}}}
WARM = [{"matrix": "b/g", "center": c} for c in ("none", "columns", "rows")]
GENEROUS = 300


class FakeSystemd:
    """A datagram socket where the daemon sends its sd_notify messages."""

    def __init__(self):
        self.dir = tempfile.TemporaryDirectory(prefix="embedscope-notify-")
        self.path = os.path.join(self.dir.name, "notify")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)

    def receive(self, timeout=GENEROUS):
        """The next message as a dict of its KEY=VALUE lines; AssertionError after timeout seconds."""
        ready, _, _ = select.select([self.sock], [], [], timeout)
        if not ready:
            raise AssertionError("no sd_notify message within %d s" % timeout)
        text = self.sock.recv(4096).decode()
        return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)

    def receive_until(self, key, timeout=GENEROUS):
        """Messages up to and including the first that carries key: (that one, the ones before it)."""
        before = []
        while True:
            m = self.receive(timeout)
            if key in m:
                return m, before
            before.append(m)

    def close(self):
        self.sock.close()
        self.dir.cleanup()


class Notify(unittest.TestCase):
    def test_ready_once_readyz_is_200_reloading_around_sighup_and_stopping(self):
        systemd = FakeSystemd()
        d = Daemon({"models": GAUSSIAN, "warm": WARM}, env={"NOTIFY_SOCKET": systemd.path})
        try:
            early = request("/readyz", base=d.base).status  # listening, still warming
            ready, before = systemd.receive_until("READY")
            # the moment READY=1 arrives /readyz answers 200 (readiness never goes back)
            self.assertEqual(request("/readyz", base=d.base).status, 200)
            self.assertEqual(early, 503, "the daemon was ready at once: the test could not see READY=1 wait")
            self.assertEqual(ready["READY"], "1")
            self.assertIn("ready", ready.get("STATUS", ""))
            self.assertTrue(any(m.get("STATUS", "").startswith("warming 3 ") for m in before), before)
            self.assertFalse(any("READY" in m for m in before))

            d.proc.send_signal(signal.SIGHUP)
            reloading, _ = systemd.receive_until("RELOADING")
            self.assertEqual(reloading["RELOADING"], "1")
            # systemd asks for the CLOCK_MONOTONIC time of the reload (sd_notify(3)), in microseconds
            now_us = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
            self.assertTrue(0 < now_us - int(reloading["MONOTONIC_USEC"]) < GENEROUS * 10**6, reloading)
            again, between = systemd.receive_until("READY")
            self.assertEqual(again["READY"], "1")
            self.assertFalse(any("RELOADING" in m for m in between))
            self.assertIn("reloaded", d.log())

            d.proc.send_signal(signal.SIGTERM)
            stopping, _ = systemd.receive_until("STOPPING")
            self.assertEqual(stopping["STOPPING"], "1")
        finally:
            d.close()
            systemd.close()


class Probe(unittest.TestCase):
    def test_probe_exit_status_follows_the_answer(self):
        d = Daemon({"models": GAUSSIAN, "warm": WARM[:2]})
        try:
            listen = "127.0.0.1:%d" % d.port
            wildcard = "0.0.0.0:%d" % d.port  # a daemon listening on every address is probed on the loopback
            self.assertEqual(run_binary("--probe", "/healthz", "--listen", wildcard)[0], 0)
            rc, out, err = run_binary("--probe", "/readyz", "--listen", listen)
            self.assertEqual((rc, out), (1, ""))  # still warming: 503
            self.assertIn("/readyz: status 503", err)
            d.wait_ready(timeout=GENEROUS)
            self.assertEqual(run_binary("--probe", "/readyz", "--listen", listen), (0, "", ""))
            rc, _, err = run_binary("--probe", "/v1/models/nope", "--listen", listen)
            self.assertEqual(rc, 1)
            self.assertIn("status 404", err)
        finally:
            d.close()
        rc, _, err = run_binary("--probe", "/healthz", "--listen", listen)  # nobody listens there now
        self.assertEqual(rc, 1)
        self.assertIn("Connection refused", err)
        rc, _, err = run_binary("--probe", "healthz")
        self.assertEqual(rc, 2)
        self.assertIn("expected a path", err)


if __name__ == "__main__":
    unittest.main()
