"""SIGHUP applies what can change live (issue 20): limits (here sync_seconds), cors_origins and the
connection settings take effect without a restart; a changed listen address is named in a warning
(it needs a restart) and the daemon keeps serving where it listens."""
import json
import signal
import time
import unittest

from httpkit import DATA, Daemon, metrics, request

GAUSSIAN = {"b": {"matrices": {"g": {"generator": "gaussian", "rows": 4096, "cols": 512, "seed": 5}}}}


def config(sync_seconds, origins, listen="127.0.0.1:8080"):
    # request_timeout_s: the synchronous request (Prefer: wait=600) is owed its answer however loaded
    # the machine (the default 60 s deadline answered it 504 at load 40)
    return {"server": {"listen": listen, "cors_origins": origins},
            "limits": {"sync_seconds": sync_seconds, "request_timeout_s": 600}, "models": GAUSSIAN}


class Reload(unittest.TestCase):
    def reload(self, daemon, conf):
        before = metrics(daemon.base)["embedscope_config_reloads_total"]
        with open(daemon.config_path, "w") as f:
            json.dump(dict(conf, data_dir=DATA), f)
        daemon.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 60
        while metrics(daemon.base)["embedscope_config_reloads_total"] == before:
            self.assertLess(time.monotonic(), deadline, daemon.log()[-2000:])
            time.sleep(0.05)

    def test_limits_and_cors_origins_apply_and_listen_is_named(self):
        d = Daemon(config(600, ["http://a.example"]), blas_threads=None)  # its reload rewrites the whole file
        try:
            d.wait_ready()
            origin = lambda o: request("/v1/models", base=d.base, headers={"Origin": o}).header(
                "Access-Control-Allow-Origin")
            self.assertEqual((origin("http://a.example"), origin("http://b.example")), ("http://a.example", None))
            slow = "/v1/models/b/matrices/g/spectrum?rows=%d:"
            r = request(slow % 1, base=d.base, headers={"Prefer": "wait=600"})
            self.assertEqual(r.status, 200)  # synchronous within its window

            self.reload(d, config(0.001, ["http://b.example"], listen="127.0.0.1:9999"))
            self.assertEqual((origin("http://a.example"), origin("http://b.example")), (None, "http://b.example"))
            self.assertEqual(request("/v1", base=d.base).json()["limits"]["sync_seconds"], 0.001)
            r = request(slow % 2, base=d.base, headers={"Prefer": "return=minimal"})
            self.assertEqual(r.status, 202, r.body[:300])  # past the new window: a job
            self.assertRegex(r.header("Location"), r"^/v1/jobs/")
            log = d.log()
            self.assertRegex(log, r"warn .*reload: server\.listen changed .*restart")
            self.assertRegex(log, r"reload: applied .*limits\.sync_seconds")
            self.assertRegex(log, r"reload: applied .*server\.cors_origins")
        finally:
            d.close()


if __name__ == "__main__":
    unittest.main()
