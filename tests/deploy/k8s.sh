#!/usr/bin/env bash
# deploy/k8s under `podman kube play` (make k8s-test; a short run in make test).
#
#   tests/deploy/k8s.sh [--short]
#
# First validates the manifests (tests/deploy/validate-k8s.mjs: both variants,
# the default and overlays/replicated, rendered with kubectl kustomize when
# installed, else its own renderer; every object against the Kubernetes API
# schemas, kubernetes-models from npm, pinned in tests/deploy/package-lock.json;
# then the static checks: ReadWriteOnce-only claims in the default, ReadWriteMany
# in the replicated overlay, PodDisruptionBudget, topology spread, hashed
# ConfigMaps, versioned image, resources against the configured budgets, the
# nginx front, the Dockerfile's labels and group-0 directories). Then builds the
# image (scripts/container.sh image), prints its size (<= 170 MB, no apt caches, no
# curl, the base's digest recorded), checks its labels and that it runs as an
# arbitrary user in group 0 (--user 12345:0, read-only root), renders the
# default variant for podman (image tag of this build; the daemon's Deployment,
# ConfigMap and claims; port published on a free 127.0.0.1 port), plays it and
# checks what podman does not do itself (../shared/REFERENCE.md §7): the liveness
# check through `podman healthcheck run` (podman turns the probes, exec
# `embedscope --probe`, into a healthcheck that nothing schedules without
# systemd), readiness (/readyz, not converted by podman: polled here), runAsNonRoot (not enforced: the user must
# be numeric and non-zero), the read-only root filesystem, no capabilities,
# writable data and cache volumes; then one analysis through the published port
# and the build identity; `podman kube down`, and the volumes podman leaves
# behind (ConfigMap, claims) removed. The full run also plays the replicated
# overlay's two replicas (no published port) and checks both answer from the
# shared volumes' pods, then starts both again on an emptied decomposition
# cache: the warm entries are computed once between them (single flight).
#
# --short (make test): the podman part is SKIPPED, with the reason, when podman
# is missing or no base image is cached (the first debootstrap is for
# `make k8s-test` or `make image`); no two-replica run.
# Last line: "k8s: N passed, N failed, N skipped". Exit 1 if anything failed.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
short=0; [ "${1:-}" = --short ] && short=1
CONTAINER="$root/scripts/container.sh"
work=$(mktemp -d /tmp/embedscope-k8s.XXXXXX)
# Names of this run (several worktrees may run it at once on one machine): the
# Deployment, ConfigMap and claims get the suffix, and so their containers
# (NAME-pod-N-embedscope) and volumes.
run=${work##*.}; run=${run,,}
TAG=localhost/embedscope:k8s-test-$run
NAME=embedscope-$run
CTR=$NAME-pod-0-embedscope
passed=0; failed=0; skipped=0
pass() { passed=$((passed + 1)); echo "ok: $*"; }
fail() { failed=$((failed + 1)); echo "FAIL: $*"; }
finish() { echo "k8s: $passed passed, $failed failed, $skipped skipped"; [ "$failed" -eq 0 ]; exit; }
pm() { "$CONTAINER" podman "$@"; }

if [ ! -d "$here/node_modules/kubernetes-models" ]; then
    (cd "$here" && npm ci --silent --no-audit --no-fund >/dev/null 2>&1)
fi
if [ -d "$here/node_modules/kubernetes-models" ]; then
    if node "$here/validate-k8s.mjs" >"$work/schema.log" 2>&1; then
        pass "deploy/k8s: $(grep -c "^ok:" "$work/schema.log") checks passed (schemas of both variants, storage, PDB, spread, image, resources, nginx front)"
    else
        fail "deploy/k8s schema validation:"; grep -v '^ok:' "$work/schema.log"
    fi
else
    fail "cannot install kubernetes-models (npm ci in tests/deploy)"
fi

if [ "$short" = 1 ] && ! "$CONTAINER" base-cached; then
    echo "SKIPPED: podman kube play (no podman or no cached base image; make k8s-test builds it once)"
    skipped=1
    rm -rf "$work"
    finish
fi

played=()
cleanup() {
    local f
    "$here/nginx.sh" stop "$work/nginx" >/dev/null 2>&1
    for f in "${played[@]}"; do pm kube down "$f" >/dev/null 2>&1; done
    # kube down leaves the ConfigMap's volume and the claims' volumes behind (all named *-$run).
    pm rm -f -v "$NAME-uid" >/dev/null 2>&1
    pm volume ls --format '{{.Name}}' 2>/dev/null | grep -- "-$run\$" | while read -r v; do pm volume rm -f "$v"; done >/dev/null 2>&1
    pm rmi "$TAG" >/dev/null 2>&1
    rm -rf "$work"
}
trap cleanup EXIT

if "$CONTAINER" image "$TAG"; then pass "image $TAG built (docker format)"; else fail "image build"; finish; fi
health=$(pm image inspect "$TAG" --format '{{json .Config.Healthcheck}}')
grep -q 'embedscope --probe /healthz --listen .*EMBEDSCOPE_LISTEN' <<<"$health" \
    && pass "the image keeps its HEALTHCHECK (embedscope --probe, follows \$EMBEDSCOPE_LISTEN)" \
    || fail "image HEALTHCHECK missing or not following the listen address: $health"
# Slim (issue 32): the size, and none of apt's caches, no .deb, no curl.
size=$(pm image inspect "$TAG" --format '{{.Size}}')
echo "image size: $((size / 1000000)) MB ($size bytes; target <= 170 MB)"
[ "$size" -le 170000000 ] && pass "image size $((size / 1000000)) MB <= 170 MB" || fail "image size $((size / 1000000)) MB > 170 MB"
# (stderr apart: podman warns there that no systemd schedules the image's HEALTHCHECK)
leftovers=$(pm run --rm --entrypoint /bin/sh "$TAG" -c \
    'ls /var/cache/apt/*.bin /var/cache/apt/archives/*.deb /var/lib/apt/lists/*_Packages* 2>/dev/null; command -v curl; echo end' \
    2>/dev/null)
[ "$leftovers" = end ] && pass "no apt caches (*.bin), no .deb, no package lists, no curl in the image" \
    || fail "left in the image: $leftovers"
digest=$(pm image inspect "$TAG" --format '{{index .Config.Labels "org.opencontainers.image.base.digest"}}')
[[ $digest == sha256:* ]] && pass "the base image's digest is recorded (label org.opencontainers.image.base.digest $digest)" \
    || fail "no base digest label: '$digest'"
user=$(pm image inspect "$TAG" --format '{{.Config.User}}')
[[ $user =~ ^[1-9][0-9]*(:[0-9]+)?$ ]] && pass "image USER is numeric and not root ($user)" || fail "image USER '$user'"

labels=$(pm image inspect "$TAG" --format '{{json .Config.Labels}}')
python3 - "$labels" "$(sed -n 's/^#define ES_VERSION "\(.*\)"$/\1/p' "$root/include/embedscope/version.h")" <<'EOF2' \
    && pass "image labels org.opencontainers.image.* (version, revision)" || fail "image labels: $labels"
import json, sys
labels, version = json.loads(sys.argv[1]) or {}, sys.argv[2]
assert labels.get("org.opencontainers.image.version") == version, labels
assert labels.get("org.opencontainers.image.revision") not in (None, "", "unknown"), labels
assert labels.get("org.opencontainers.image.title") == "embedscope", labels
EOF2
# An arbitrary user id in group 0 (OpenShift): the daemon starts, read-only root, and writes its
# cache volume (group 0, group-writable in the image).
if pm run -d --name "$NAME-uid" --user 12345:0 --read-only "$TAG" >/dev/null 2>&1; then
    code=
    for _ in $(seq 300); do
        pm exec "$NAME-uid" embedscope --probe /readyz --listen 127.0.0.1:8080 >/dev/null 2>&1 && { code=200; break; }
        [ "$(pm inspect "$NAME-uid" --format '{{.State.Running}}')" = true ] || break
        sleep 0.2
    done
    written=$(pm exec "$NAME-uid" sh -c 'ls /var/cache/embedscope | wc -l' 2>/dev/null)
    [ "$code" = 200 ] && [ "$(pm exec "$NAME-uid" id -u)" = 12345 ] && [ "${written:-0}" -ge 1 ] \
        && pass "--user 12345:0: ready, writing its cache volume ($written files)" \
        || { fail "--user 12345:0: /readyz $code, cache files '$written'"; pm logs "$NAME-uid" 2>&1 | tail -5; }
else
    fail "--user 12345:0: the container did not start"; pm logs "$NAME-uid" 2>&1 | tail -5
fi
pm rm -f -v "$NAME-uid" >/dev/null 2>&1

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# [UPLOAD_TOKEN=T] render VARIANT HOSTPORT OUT [claims]: a variant of deploy/k8s rendered (validate-k8s.mjs
# --render: kubectl kustomize, or its own renderer) as one podman file: the daemon's
# Deployment, its ConfigMap and claims (without "claims" the PersistentVolumeClaims are
# left out: their volumes exist already, and kube play refuses to create them again).
# Podman plays no Service or PodDisruptionBudget, and the nginx front's image is not
# here (no registry): tests/http/test_proxy.py runs that config with Debian's nginx,
# and so does the chaos run below, on the host. With UPLOAD_TOKEN the ConfigMap
# turns uploads on, with that token, in /var/lib/embedscope/uploads.
render() {
    node "$here/validate-k8s.mjs" --render "$1" >"$work/$1.rendered.yaml" || return 1
    python3 - "$work/$1.rendered.yaml" "$TAG" "$run" "$2" "$3" "${4:-}" "${UPLOAD_TOKEN:-}" <<'EOF2'
import json, sys, yaml
rendered, tag, run, host_port, out, claims, token = sys.argv[1:4] + [int(sys.argv[4])] + sys.argv[5:8]
docs = [d for d in yaml.safe_load_all(open(rendered)) if d]
keep = {"Deployment", "ConfigMap"} | ({"PersistentVolumeClaim"} if claims else set())
docs = [d for d in docs if d["kind"] in keep and not d["metadata"]["name"].startswith("embedscope-proxy")]
for d in docs:
    d["metadata"]["name"] += "-" + run
    if d["kind"] == "ConfigMap" and token:  # uploads on, on the shared data volume, with the token
        config = json.loads(d["data"]["embedscope.json"])
        config["uploads"].update(enabled=True, token=token, dir="/var/lib/embedscope/uploads")
        d["data"]["embedscope.json"] = json.dumps(config)
    if d["kind"] == "Deployment":
        for v in d["spec"]["template"]["spec"]["volumes"]:
            if "configMap" in v:
                v["configMap"]["name"] += "-" + run
            if "persistentVolumeClaim" in v:
                v["persistentVolumeClaim"]["claimName"] += "-" + run
        for c in d["spec"]["template"]["spec"]["containers"]:
            c["image"] = tag
            if host_port:
                c["ports"][0].update(hostPort=host_port, hostIP="127.0.0.1")
            else:  # podman would publish containerPort on every host address
                del c["ports"]
yaml.safe_dump_all(docs, open(out, "w"), sort_keys=False)
EOF2
}
render default "$port" "$work/one.yaml" claims || { fail "cannot render deploy/k8s"; finish; }
played+=("$work/one.yaml")
if pm kube play "$work/one.yaml" >"$work/play.log" 2>&1; then pass "podman kube play (one replica, port $port)"
else fail "podman kube play:"; grep -v systemd "$work/play.log" | tail -20; finish; fi

base=http://127.0.0.1:$port
ready=
for _ in $(seq 600); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "$base/readyz")" = 200 ] && { ready=1; break; }
    sleep 0.2
done
[ -n "$ready" ] && pass "readiness: /readyz 200 through the published port" \
    || { fail "/readyz not 200 after 120 s; log:"; pm logs "$CTR" 2>&1 | tail -20; }
out=$(pm healthcheck run "$CTR" 2>&1); rc=$?
[ $rc -eq 0 ] && pass "liveness: podman healthcheck run $CTR (the probe's embedscope --probe in the container)" \
    || fail "podman healthcheck run: $rc $out"
out=$(pm exec "$CTR" embedscope --probe /readyz --listen 127.0.0.1:8080 2>&1); rc=$?
[ $rc -eq 0 ] && pass "readiness probe inside the container (embedscope --probe /readyz): exit 0" \
    || fail "in-container readiness probe: exit $rc $out"

uid=$(pm exec "$CTR" id -u); puser=$(pm inspect "$CTR" --format '{{.Config.User}}')
[ "$uid" = 10001 ] && [[ $puser =~ ^10001(:10001)?$ ]] && pass "runAsNonRoot: runs as uid $uid (user $puser)" \
    || fail "runAsNonRoot: uid '$uid', user '$puser'"
ro=$(pm inspect "$CTR" --format '{{.HostConfig.ReadonlyRootfs}}')
if [ "$ro" = true ] && ! pm exec "$CTR" touch /usr/share/embedscope/x 2>/dev/null; then
    pass "readOnlyRootFilesystem"; else fail "root filesystem writable (ReadonlyRootfs=$ro)"; fi
capeff=$(pm exec "$CTR" grep CapEff /proc/1/status | awk '{print $2}')
[ "$capeff" = 0000000000000000 ] && pass "capabilities dropped (CapEff 0)" || fail "CapEff $capeff"
if pm exec "$CTR" sh -c 'touch /var/lib/embedscope/.w /var/cache/embedscope/.w /tmp/.w'; then
    pass "data, cache and tmp volumes writable by uid 10001"; else fail "a volume is not writable by uid 10001"; fi

body=$(curl -fsS "$base/v1/models/gpt2-small/matrices/wpe/spectrum?rows=1:" 2>&1)
n=$(python3 -c 'import json, sys; print(len(json.load(sys.stdin)["singular_values"]))' <<<"$body" 2>/dev/null)
[ "$n" = 768 ] && pass "an analysis through the published port (768 singular values of W_pos)" \
    || fail "analysis through the published port: ${body:0:300}"
curl -fsS "$base/" | grep -qi '<html' && pass "the dashboard is served at / (bundle compiled in)" \
    || fail "no dashboard at /"
commit=$(curl -fsS "$base/v1" | python3 -c 'import json, sys; print(json.load(sys.stdin)["commit"])')
want=$(git -C "$root" describe --always --dirty --abbrev=12 --exclude='*' 2>/dev/null || echo unknown)
[ "$commit" = "$want" ] && pass "/v1 reports the build's commit ($commit)" || fail "/v1 commit '$commit', want '$want'"

files=$(pm exec "$CTR" sh -c 'ls /var/cache/embedscope | grep -c "\.svd$"')
[ "${files:-0}" -ge 1 ] && pass "decompositions persisted on the cache volume ($files files, server.cache_dir)" \
    || fail "no decomposition written to /var/cache/embedscope"
# Uploads are off in the ConfigMap (user matrices would live on one replica only).
code=$(curl -s -o /dev/null -w '%{http_code}' -X PUT -H 'Content-Type: application/json' \
    -d '{"generator": "sinusoidal", "n_positions": 8, "d_model": 4}' "$base/v1/models/mine/matrices/pe")
[ "$code" = 403 ] && pass "uploads refused in the cluster configuration (403)" || fail "PUT answered $code, not 403"
# SIGHUP to PID 1 reloads the mounted configuration; the daemon keeps serving.
pm exec "$CTR" sh -c 'kill -HUP 1'
reloaded=
for _ in $(seq 100); do
    pm logs "$CTR" 2>&1 | grep -q 'reloaded /etc/embedscope/embedscope.json' && { reloaded=1; break; }
    sleep 0.1
done
[ -n "$reloaded" ] && [ "$(curl -s -o /dev/null -w '%{http_code}' "$base/readyz")" = 200 ] \
    && pass "SIGHUP (kill -HUP 1 in the pod): configuration reloaded, still ready" \
    || { fail "SIGHUP reload:"; pm logs "$CTR" 2>&1 | tail -5; }

# SIGTERM reaches the daemon (PID 1 through the entrypoint's exec): a clean exit 0.
pm stop -t 45 "$CTR" >/dev/null 2>&1
rc=$(pm inspect "$CTR" --format '{{.State.ExitCode}}')
[ "$rc" = 0 ] && pass "SIGTERM (podman stop): the daemon drained and exited 0" \
    || { fail "after SIGTERM the container exited $rc:"; pm logs "$CTR" 2>&1 | tail -5; }

# ready_replicas N: wait until replica 0..N-1 of the played file answer /readyz 200 (pass/fail each).
ready_replicas() {
    local i c ok
    for i in $(seq 0 $(($1 - 1))); do
        c=$NAME-pod-$i-embedscope ok=
        for _ in $(seq 600); do
            [ "$(pm inspect "$c" --format '{{.State.Running}}' 2>/dev/null)" = true ] || break
            pm exec "$c" embedscope --probe /readyz --listen 127.0.0.1:8080 >/dev/null 2>&1 && { ok=1; break; }
            sleep 0.2
        done
        [ -n "$ok" ] && pass "replica $i ready" || fail "replica $i not ready"
    done
}
# pod_ip I: replica I's address on podman's bridge (the image has no curl: the host asks it).
pod_ip() {
    pm inspect "$(pm pod inspect "$NAME-pod-$1" --format '{{.InfraContainerID}}')" \
        --format '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}'
}
# counter I NAME: embedscope_svd_NAME_total of replica I.
counter() {
    curl -s "http://$(pod_ip "$1"):8080/metrics" | awk "/^embedscope_svd_$2_total /{print \$2}"
}

# chaos: the shared-uploads workload of tests/http/test_shared_uploads.py, bounded (60 writes
# and reads, two kill -9 of a random replica's daemon), on the two replicas with uploads on
# (the token in their ConfigMap), behind Debian's nginx on the host with deploy/nginx.conf
# (tests/deploy/nginx.sh; the proxy Deployment's image cannot be pulled here), whose upstream
# servers are the pods' addresses on podman's bridge; tests/deploy/podman_chaos.py.
chaos() {
    local token ips="" ctrs="" i ip nginx rc
    pm kube down "$work/two.yaml" >/dev/null 2>&1
    token=$(python3 -c 'import secrets; print(secrets.token_hex(16))')
    UPLOAD_TOKEN=$token render replicated 0 "$work/chaos.yaml" || { fail "cannot render the chaos variant"; return; }
    played+=("$work/chaos.yaml")
    if pm kube play "$work/chaos.yaml" >"$work/play4.log" 2>&1; then pass "podman kube play (two replicas, uploads on, token)"
    else fail "kube play two replicas with uploads:"; grep -v systemd "$work/play4.log" | tail -20; return; fi
    ready_replicas 2
    for i in 0 1; do
        ip=$(pod_ip "$i")
        [ -n "$ip" ] || { fail "no address for pod $i"; return; }
        ips+="${ips:+,}$ip:8080"; ctrs+="${ctrs:+,}$NAME-pod-$i-embedscope"
    done
    nginx=$("$here/nginx.sh" start "$work/nginx" "$ips") || { fail "nginx in front of $ips did not start"; return; }
    pass "nginx (deploy/nginx.conf, on the host) at $nginx in front of the replicas $ips"
    code=$(curl -s -o /dev/null -w '%{http_code}' -X PUT -H 'Content-Type: application/json' \
        -d '{"generator": "sinusoidal", "n_positions": 8, "d_model": 4}' "$nginx/v1/models/anon/matrices/pe")
    [ "$code" = 401 ] && pass "PUT through nginx without the token: 401" || fail "PUT through nginx without the token: $code"
    CHAOS_NGINX=$nginx CHAOS_REPLICAS=$(sed 's#\([^,]*\)#http://\1#g' <<<"$ips") CHAOS_CONTAINERS=$ctrs \
        CHAOS_UPLOADS="$(pm volume inspect "embedscope-data-$run" --format '{{.Mountpoint}}')/uploads" \
        CHAOS_TOKEN=$token CHAOS_PODMAN="$CONTAINER podman" CHAOS_NGINX_DIR="$work/nginx" \
        timeout 240 python3 "$here/podman_chaos.py" >"$work/chaos.log" 2>&1; rc=$?
    sed 's/^/    /' "$work/chaos.log"
    [ $rc = 0 ] && pass "chaos through nginx: $(grep -o '[0-9]* ops in .*kills' "$work/chaos.log")" \
        || fail "chaos through nginx (exit $rc)"
    "$here/nginx.sh" stop "$work/nginx"
}

if [ "$short" = 0 ]; then
    # The replicated overlay's two replicas (no published port): both serve, sharing the claims' volumes.
    render replicated 0 "$work/two.yaml"
    played+=("$work/two.yaml")
    pm kube down "$work/one.yaml" >/dev/null 2>&1
    if pm kube play "$work/two.yaml" >"$work/play2.log" 2>&1; then pass "podman kube play (two replicas)"
    else fail "kube play two replicas:"; grep -v systemd "$work/play2.log" | tail -20; fi
    ready_replicas 2
    for i in 0 1; do
        loads=$(counter $i disk_loads)
        pm exec "$NAME-pod-$i-embedscope" test -e /var/cache/embedscope/.w && [ "${loads:-0}" -ge 1 ] \
            && pass "replica $i shares the cache volume: warmed from it ($loads decompositions loaded from disk)" \
            || fail "replica $i: shared cache volume missing or not used (disk loads: '$loads')"
    done
    # A cold start of both on an empty decomposition cache: each warm entry is computed once between them
    # (single flight through the lock files on the shared volume), the other replica reads its file.
    pm kube down "$work/two.yaml" >/dev/null 2>&1
    cache=$(pm volume inspect "embedscope-cache-$run" --format '{{.Mountpoint}}')
    rm -f "$cache"/*.svd
    warm=$(python3 -c 'import json, sys; print(len(json.load(open(sys.argv[1]))["warm"]))' "$root/deploy/k8s/base/embedscope.json")
    if pm kube play "$work/two.yaml" >"$work/play3.log" 2>&1; then pass "podman kube play (two replicas, cold cache)"
    else fail "kube play two replicas, cold cache:"; grep -v systemd "$work/play3.log" | tail -20; fi
    ready_replicas 2
    computed=$(( $(counter 0 computations) + $(counter 1 computations) ))
    loaded=$(( $(counter 0 disk_loads) + $(counter 1 disk_loads) ))
    [ "$computed" = "$warm" ] && [ "$loaded" = "$warm" ] \
        && pass "cold start: $warm warm decompositions computed once between the replicas ($loaded read from the other's files)" \
        || fail "cold start: $computed computed, $loaded loaded from disk by the two replicas (warm list: $warm)"
    left=$(ls "$cache" | grep -c '\.lock$')
    [ "$left" = 0 ] && pass "no lock file left in the cache volume" || fail "$left lock files left in the cache volume"
    chaos
fi

if pm kube down "${played[-1]}" >/dev/null 2>&1; then pass "podman kube down"; else fail "podman kube down"; fi
played=()
left=$(pm ps -a --filter "name=^$NAME-pod-" --format '{{.Names}}')
[ -z "$left" ] && pass "no container left" || fail "containers left: $left"
finish
