"""The table of bench/device.sh from its runs (JSON lines with size, threads, label): per size and thread
count, embedscope's values / exact first PCA / top-k against numpy's values / svd and scikit-learn's
randomized PCA with the same threads; seconds of the first call on the whole matrix, the ratio, the warm
ratio when both ran warm, and max |s_j - s_j(peer)| / s_0 over the reported values. Usage: device_table.py RUNS"""
import json
import sys

runs = [json.loads(line) for line in open(sys.argv[1])]
PAIRS = (("embedscope_values", "numpy_values", "σ only"), ("embedscope_exact", "numpy_svd", "exact first PCA"),
         ("embedscope_topk", "sklearn_randomized", "top-30"))


def find(size, threads, label):
    return next((r for r in runs if (r["size"], r["threads"], r["label"]) == (size, threads, label)), None)


def agreement(a, b):
    n = min(len(a["s"]), len(b["s"]))
    return max(abs(x - y) for x, y in zip(a["s"][:n], b["s"][:n])) / b["s"][0] if n else float("nan")


print("| size | threads | measure | embedscope s | BLAS core | peer | peer s | ratio | warm ratio | σ agreement |")
print("|---|---|---|---|---|---|---|---|---|---|")
for size in dict.fromkeys(r["size"] for r in runs):
    for threads in dict.fromkeys(r["threads"] for r in runs if r["size"] == size):
        labels = [r["label"] for r in runs if (r["size"], r["threads"]) == (size, threads)]
        for mine_label in labels:
            tool = mine_label.split(" ")[0]
            pair = next((p for p in PAIRS if p[0] == tool), None)
            if not pair:
                continue
            mine, peer = find(size, threads, mine_label), find(size, threads, pair[1])
            what = pair[2] + (" " + mine_label[len(tool) + 1:] if mine_label != tool else "")
            ps = peer["seconds"] if peer else None
            warm = (mine.get("warm_seconds"), peer.get("warm_seconds") if peer else None)
            print("| %s | %d | %s | %.2f | %s | %s | %s | %s | %s | %s |" % (
                size, threads, what, mine["seconds"], mine.get("blas_core", "?"), pair[1],
                "%.2f" % ps if ps else "-", "%.2f×" % (mine["seconds"] / ps) if ps else "-",
                "%.2f×" % (warm[0] / warm[1]) if all(warm) else "-",
                "%.1e" % agreement(mine, peer) if peer else "-"))
