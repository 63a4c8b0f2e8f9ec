"""The shared-uploads chaos workload (tests/http/test_shared_uploads.py) on two
replicas played by `podman kube play`, behind Debian's nginx with
deploy/nginx.conf on the host (tests/deploy/nginx.sh), run by
tests/deploy/k8s.sh (make k8s-test only).

The workload's writes carry the upload token and all go through nginx; one
or two times a random replica's daemon is killed (podman kill -s KILL, PID 1
of its container) and started again. Afterwards the checks of the plain
process test, with these addresses compared: nginx and each replica directly
(same /v1/models body and ETag, every acknowledged write present and
identical, numbers equal to a fresh computation), and the shared uploads
volume holds no file that no record names.

Environment (set by k8s.sh): CHAOS_NGINX (nginx's base URL), CHAOS_REPLICAS
(the replicas' base URLs, comma-separated), CHAOS_CONTAINERS (their
containers, same order), CHAOS_UPLOADS (the uploads directory on the host:
the data volume's mount point + the configured subdirectory), CHAOS_TOKEN,
CHAOS_PODMAN (the podman command, e.g. scripts/container.sh podman),
CHAOS_NGINX_DIR (the directory tests/deploy/nginx.sh started nginx from).

nginx's upstream servers follow the replicas as a Service's endpoints would
(nginx.sh reload): the killed replica is taken out at once, and put back when
ready again, at its new address (podman gives the restarted pod a new network
namespace; a request sent to the old address would wait for the connect
timeout, and nginx does not retry computing requests after a timeout)."""
import os
import random
import shlex
import subprocess
import sys
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "http"))
import test_shared_uploads  # noqa: E402
from test_shared_uploads import SEED, call  # noqa: E402

PODMAN = shlex.split(os.environ.get("CHAOS_PODMAN", "podman"))
NGINX_TIMEOUT = b"the embedscope daemon did not answer in time"  # deploy/nginx.conf's own 504
NGINX_SH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nginx.sh")


def podman(*args):
    return subprocess.run(PODMAN + list(args), capture_output=True, text=True).stdout.strip()


def pod_address(container):
    """The address of the pod of a container NAME-pod-I-embedscope, port 8080."""
    infra = podman("pod", "inspect", container.rsplit("-", 1)[0], "--format", "{{.InfraContainerID}}")
    ip = podman("inspect", infra, "--format", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}")
    return "http://%s:8080" % ip


class PodmanReplicas:
    """The replicas as the workload's cluster: killing one is SIGKILL to its container's PID 1 (the
    daemon), then `podman start`; its address (the pod's) stays."""

    def __init__(self, bases, containers):
        self.bases, self.containers = bases, containers
        self.n = len(bases)
        self.kills = 0
        self.reports = []  # the image's daemon is not a sanitizer build
        self.failed_restart = None

    def base(self, i):
        return self.bases[i]

    def ready(self, i, timeout=120):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.bases[i] + "/readyz", timeout=2) as r:
                    if r.status == 200:
                        return True
            except OSError:
                pass
            time.sleep(0.1)
        return False

    def kill_and_restart(self, i):
        subprocess.run(PODMAN + ["kill", "-s", "KILL", self.containers[i]], check=True, capture_output=True)
        self.route([b for j, b in enumerate(self.bases) if j != i])
        # the pod's restart policy may start it again first: wait for the exit, start it if it stays down
        for _ in range(100):
            state = subprocess.run(PODMAN + ["inspect", self.containers[i], "--format", "{{.State.Running}}"],
                                   capture_output=True, text=True).stdout.strip()
            if state != "true":
                break
            time.sleep(0.05)
        subprocess.run(PODMAN + ["start", self.containers[i]], capture_output=True)
        for _ in range(100):
            self.bases[i] = pod_address(self.containers[i])
            if not self.bases[i].startswith("http://:"):
                break
            time.sleep(0.1)
        if not self.ready(i, timeout=60):
            state = subprocess.run(PODMAN + ["ps", "-a", "--filter", "name=" + self.containers[i]],
                                   capture_output=True, text=True).stdout
            log = subprocess.run(PODMAN + ["logs", "--tail", "15", self.containers[i]],
                                 capture_output=True, text=True)
            print("replica %d not ready again after kill -9:\n%s%s%s" % (i, state, log.stdout, log.stderr))
            self.failed_restart = i
            return
        self.route(self.bases)
        self.kills += 1

    @staticmethod
    def route(bases):
        """nginx's upstream servers: these replicas."""
        subprocess.run([NGINX_SH, "reload", os.environ["CHAOS_NGINX_DIR"],
                        ",".join(b[len("http://"):] for b in bases)], check=True)

    def close(self):
        pass


class ReplicasBehindNginx(test_shared_uploads.SharedUploads):
    OPS = 60
    PAUSE = 0.6  # 20 requests a worker over about 6 s: long enough for both kills and a restart between
    AUTH = {"Authorization": "Bearer " + os.environ.get("CHAOS_TOKEN", "")}

    def setUp(self):
        self.nginx = os.environ["CHAOS_NGINX"]
        self.cluster = PodmanReplicas(os.environ["CHAOS_REPLICAS"].split(","),
                                      os.environ["CHAOS_CONTAINERS"].split(","))
        self.keep = os.environ["CHAOS_UPLOADS"]
        self.rng = random.Random(SEED)
        self.pool = [tuple(tuple(float(self.rng.randint(-9, 9)) for _ in range(test_shared_uploads.COLS))
                           for _ in range(test_shared_uploads.ROWS)) for _ in range(6)]
        self.history = test_shared_uploads.History()
        self.in_flight = None
        self.proxy_errors = 0

    def tearDown(self):
        print("  %d answers from nginx itself (502, or 504 after a connect timeout)" % self.proxy_errors)
        self.assertIsNone(self.cluster.failed_restart, "a replica did not come back after kill -9")

    def send(self, base, path, headers=None, **kw):
        """A 502 is nginx's (the daemon never answers it): the replica died with the request, whose
        write may or may not have happened, as when a plain daemon vanishes; so is a 504 with nginx's
        body (connect timeout to a killed pod's address in the moment before nginx reloads)."""
        status, r = super().send(base, path, headers, **kw)
        if status == 502 or (status == 504 and NGINX_TIMEOUT in r.body):
            self.proxy_errors += 1
            return None, None
        return status, r

    def write_base(self, slot):
        return self.nginx

    def read_bases(self):
        return [self.nginx] + [self.cluster.base(i) for i in range(self.cluster.n)]

    def chaos(self, stop):
        """Two kills at random moments while the workload runs (the second only if it still does),
        each of a random replica, started again before the next."""
        rng = random.Random(SEED * 7)
        for _ in range(2):
            if stop.wait(rng.uniform(0.5, 1.5)) or self.cluster.failed_restart is not None:
                break
            self.cluster.kill_and_restart(rng.randrange(self.cluster.n))


if __name__ == "__main__":
    unittest.main(defaultTest="ReplicasBehindNginx", verbosity=2)
