"""What the kept PCA scores on disk save after a restart (docs/operations.md, cache_dir): the centred X V for
64 components of a 50257 x 768 float64 matrix, computed (one OpenBLAS thread, as a compute thread's pass)
against reading the 24.5 MB file back and checking its sha256, as src/linalg/persist.c does. Three rounds
interleaved; wall and CPU seconds of this process, the load average at the end.
Usage: OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/kept_scores.py"""
import numpy as np, time, hashlib, os, resource
rng = np.random.default_rng(1)
X = rng.standard_normal((50257, 768))
V = np.linalg.qr(rng.standard_normal((768, 64)))[0]
mean = X.mean(axis=0)
def cpu(): r = resource.getrusage(resource.RUSAGE_SELF); return r.ru_utime + r.ru_stime
S = (X - mean) @ V
path = "/tmp/embedscope-kept-scores-%d.bin" % os.getpid()
with open(path, "wb") as f: f.write(S.tobytes()); f.write(hashlib.sha256(S.tobytes()).digest())
for rnd in range(3):
    w, c = time.perf_counter(), cpu()
    S2 = (X - mean) @ V
    print("compute X V_64 (centred, in memory): wall %.3f s cpu %.3f s" % (time.perf_counter() - w, cpu() - c))
    w, c = time.perf_counter(), cpu()
    b = open(path, "rb").read(); ok = hashlib.sha256(b[:-32]).digest() == b[-32:]; S3 = np.frombuffer(b[:-32]).copy()
    print("read + sha256 %d MB (page cache): wall %.3f s cpu %.3f s ok=%s" % (len(b) >> 20, time.perf_counter() - w, cpu() - c, ok))
print("load", open("/proc/loadavg").read().split()[0])
os.unlink(path)
