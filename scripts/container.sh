#!/usr/bin/env bash
# Rootful podman for embedscope's container targets, on a Debian 12 machine
# without a Docker engine or a registry (only the Debian mirror): the recipe of
# ../shared/tools/container-test.sh, kept here so a clean clone has it.
#
#   scripts/container.sh image [TAG]     build the dashboard bundle (make), then the
#                                        Dockerfile (docker format, so HEALTHCHECK
#                                        survives) as TAG (default
#                                        localhost/embedscope:latest and
#                                        :VERSION, the daemon's ES_VERSION), with the
#                                        git commit as ES_COMMIT
#   scripts/container.sh base            build (once) and import the base image only
#   scripts/container.sh base-cached     exit 0 when the base image or its rootfs
#                                        tarball is already here (no debootstrap needed)
#   scripts/container.sh podman ARGS...  podman with this state and configuration
#
# All podman state lives under $ES_PODMAN_STATE (default /var/tmp/embedscope-podman).
# The base image debian:bookworm-slim is built once with debootstrap (minbase) and
# cached as a tarball at $ROOTFS_TAR (default /tmp/debian-bookworm-slim.rootfs.tar,
# the one container-test.sh uses too). Installs podman, runc, catatonit, debootstrap and curl
# when missing. Heavy steps run under nice. Needs root.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
STATE=${ES_PODMAN_STATE:-/var/tmp/embedscope-podman}
ROOTFS_TAR=${ROOTFS_TAR:-/tmp/debian-bookworm-slim.rootfs.tar}
SUITE=bookworm
BASE_TAG=debian:bookworm-slim

log() { echo "[container] $*" >&2; }

packages() {
    local need=() p
    for p in podman runc debootstrap curl; do command -v "$p" >/dev/null || need+=("$p"); done
    # a pod's infra (pause) container runs catatonit, which Debian's podman only recommends
    [ -x /usr/libexec/podman/catatonit ] || need+=(catatonit)
    [ ${#need[@]} -eq 0 ] || "$root/scripts/install-deps.sh" "${need[@]}"
}

# Podman's configuration: everything under $STATE; runc (crun refuses the hybrid
# cgroups here); nofile/nproc limits these machines allow (no CAP_SYS_RESOURCE).
configure() {
    mkdir -p "$STATE"/{root,run,tmp,libpod-tmp,networks}
    local nofile nproc pidmax
    nofile=$(ulimit -Hn); [ "$nofile" = unlimited ] && nofile=1048576
    nproc=$(ulimit -Hu); [ "$nproc" = unlimited ] && nproc=4194304
    pidmax=$(cat /proc/sys/kernel/pid_max); [ "$nproc" -gt "$pidmax" ] && nproc=$pidmax
    cat >"$STATE/storage.conf" <<EOF
[storage]
driver = "overlay"
graphroot = "$STATE/root"
runroot = "$STATE/run"
EOF
    cat >"$STATE/containers.conf" <<EOF
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "$STATE/events.log"
tmp_dir = "$STATE/libpod-tmp"
static_dir = "$STATE/root/libpod"
volume_path = "$STATE/root/volumes"
image_copy_tmp_dir = "$STATE/tmp"
[network]
network_config_dir = "$STATE/networks"
EOF
    export CONTAINERS_CONF="$STATE/containers.conf" CONTAINERS_STORAGE_CONF="$STATE/storage.conf" TMPDIR="$STATE/tmp"
}

mirror() {  # the first Debian archive URI the host's apt uses
    local m=""
    if [ -f /etc/apt/sources.list.d/debian.sources ]; then
        m=$(awk '/^URIs:/{for(i=2;i<=NF;i++) if ($i !~ /security/) {print $i; exit}}' /etc/apt/sources.list.d/debian.sources)
    fi
    if [ -z "$m" ] && [ -f /etc/apt/sources.list ]; then
        m=$(awk '$1=="deb" && $0 !~ /security/ {for(i=2;i<=NF;i++) if ($i ~ /^(https?|file):/) {print $i; exit}}' /etc/apt/sources.list)
    fi
    echo "${m:-http://deb.debian.org/debian}"
}

# debian:bookworm-slim from the Debian mirror, like the official slim image
# (host's apt sources and proxy settings, no docs, man pages, locales or caches).
rootfs() {
    local rfs
    rfs=$(mktemp -d /tmp/rootfs.XXXXXX)
    log "debootstrap --variant=minbase $SUITE (once; cached at $ROOTFS_TAR)"
    nice debootstrap --variant=minbase "$SUITE" "$rfs" "$(mirror)" >"$STATE/debootstrap.log" 2>&1 \
        || { tail -20 "$STATE/debootstrap.log"; rm -rf "$rfs"; exit 1; }
    rm -f "$rfs/etc/apt/sources.list"
    if [ -f /etc/apt/sources.list.d/debian.sources ]; then
        cp /etc/apt/sources.list.d/debian.sources "$rfs/etc/apt/sources.list.d/"
    else
        grep -E '^deb ' /etc/apt/sources.list >"$rfs/etc/apt/sources.list" || true
    fi
    apt-config dump | grep -E '^Acquire::(Check-Valid-Until|Check-Date|https?::Proxy) ' \
        >"$rfs/etc/apt/apt.conf.d/99host-mirror" || true
    cat >"$rfs/etc/dpkg/dpkg.cfg.d/docker" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/locale/*
EOF
    find "$rfs/usr/share/doc" -mindepth 2 ! -name copyright ! -type d -delete 2>/dev/null || true
    rm -rf "$rfs"/usr/share/{man,info,groff,lintian,linda}/* "$rfs"/usr/share/locale/* \
        "$rfs"/var/cache/apt/archives/*.deb "$rfs"/var/lib/apt/lists/* "$rfs"/var/log/*.log
    tar --numeric-owner -C "$rfs" -cf "$ROOTFS_TAR.tmp" . && mv "$ROOTFS_TAR.tmp" "$ROOTFS_TAR"
    rm -rf "$rfs"
}

base_image() {
    podman image exists "docker.io/library/$BASE_TAG" && return 0
    [ -s "$ROOTFS_TAR" ] || rootfs
    podman import -q --change 'CMD ["bash"]' \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        "$ROOTFS_TAR" "docker.io/library/$BASE_TAG" >/dev/null
    podman tag "docker.io/library/$BASE_TAG" "localhost/$BASE_TAG"
}

commit() {
    git -C "$root" describe --always --dirty --abbrev=12 --exclude='*' 2>/dev/null || echo unknown
}

version() {
    sed -n 's/^#define ES_VERSION "\(.*\)"$/\1/p' "$root/include/embedscope/version.h"
}

# The base image's digest (sha256 of its manifest): what the image build is pinned to,
# recorded in $STATE/base.digest and in the image's label org.opencontainers.image.base.digest.
base_digest() {
    podman image inspect --format '{{.Digest}}' "docker.io/library/$BASE_TAG"
}

image() {  # image [TAG]: also tagged with the version (deploy/k8s names that tag) when none is given
    local tag=${1:-localhost/embedscope:latest} t0=$SECONDS extra=() digest size
    [ -n "${1:-}" ] || extra=(-t "localhost/embedscope:$(version)")
    # The dashboard bundle the Dockerfile copies (npm runs here, not in the image build).
    make -C "$root" --no-print-directory build-web/assets.S >/dev/null || { log "cannot build the dashboard bundle"; exit 1; }
    base_image
    digest=$(base_digest)
    [[ $digest == sha256:* ]] || { log "no digest for the base image: '$digest'"; exit 1; }
    echo "$digest" >"$STATE/base.digest"
    log "podman build --format docker -t $tag, FROM docker.io/library/debian@$digest (log: $STATE/build.log)"
    nice podman build --format docker --build-arg ES_COMMIT="$(commit)" --build-arg ES_VERSION="$(version)" \
        --build-arg BASE_IMAGE=docker.io/library/debian@$digest \
        --label org.opencontainers.image.base.digest="$digest" \
        -t "$tag" "${extra[@]}" "$root" >"$STATE/build.log" 2>&1 \
        || { tail -40 "$STATE/build.log"; exit 1; }
    size=$(podman image inspect --format '{{.Size}}' "$tag")
    log "image $tag built in $((SECONDS - t0)) s: $((size / 1000000)) MB ($size bytes)"
}

case ${1:-} in
    base-cached)
        command -v podman >/dev/null || exit 1
        configure
        [ -s "$ROOTFS_TAR" ] || podman image exists "docker.io/library/$BASE_TAG" ;;
    base) packages; configure; base_image ;;
    image) packages; configure; image "${2:-}" ;;
    podman) shift; configure; exec podman "$@" ;;
    *) echo "usage: $0 image [TAG] | base | base-cached | podman ARGS..." >&2; exit 2 ;;
esac
