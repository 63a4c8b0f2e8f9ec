# embedscope daemon image: the build stage compiles, the runtime stage carries
# the binary, the default config and the shipped weights.
#
#   make image          (= make build-web/assets.S, then podman build --format docker ...)
#   make build-web/assets.S && docker build --build-arg ES_COMMIT=$(git rev-parse --short=12 HEAD) \
#       --build-arg BASE_IMAGE=debian:bookworm-slim@sha256:DIGEST -t embedscope .
#
# The base is pinned by digest: scripts/container.sh builds debian:bookworm-slim
# locally (debootstrap) and passes it as BASE_IMAGE=NAME@sha256:DIGEST, and the
# image records it (labels org.opencontainers.image.base.name and .base.digest);
# with a registry, pass the digest of the debian:bookworm-slim you vetted. The
# default below (a tag) only serves a plain `docker build .`.
# The dashboard bundle (build-web/: npm libraries pinned in web/package-lock.json,
# bundled by web/build.mjs) is built by the Makefile before the image and copied
# in, so the image build needs no Node.js and no npm registry.
# (podman's default OCI format drops HEALTHCHECK: build with --format docker;
# `make image` does.) Runs as the numeric user 10001 (so Kubernetes'
# runAsNonRoot can verify it), listens on $EMBEDSCOPE_LISTEN (default
# 0.0.0.0:8080; the HEALTHCHECK follows it), and writes only to the volumes
# /var/lib/embedscope (user data) and /var/cache/embedscope (persistent cache):
# the root filesystem may be read-only. Any other user id in group 0 works too
# (OpenShift's arbitrary UIDs, `--user 12345:0`): the two directories belong to
# group 0 and are group-writable. Labelled with org.opencontainers.image.*
# (version and revision from ES_VERSION and ES_COMMIT, which make image passes).
#
# Slim (docs/operations.md, "The container image"): the runtime packages are the
# ones the binary links (found by the build stage from ldd, so the list cannot
# drift from the Makefile's), installed without recommends; apt's lists, its
# package caches (*.bin) and the .deb files go in the same layer; no curl: the
# HEALTHCHECK is the daemon's own `embedscope --probe /healthz`.
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE} AS build
# The build packages are the Makefile's own list (make deps: RUN_DEB_PKGS). This stage is
# thrown away: its apt caches do not reach the image.
WORKDIR /src
COPY Makefile ./
COPY scripts/install-deps.sh scripts/
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends make \
    && make deps
COPY openapi.yaml ./
COPY include include
COPY src src
COPY config config
COPY build-web build-web
ARG ES_COMMIT=unknown
# -o: the bundle is taken as built (its sources and npm are not in the image); HAVE_NODE=yes
# makes the Makefile use it, not the stand-in page it builds where node is missing.
RUN make BUILD=/out CONFIG_DIR=/usr/share/embedscope/config ES_COMMIT="$ES_COMMIT" HAVE_NODE=yes \
        -o build-web/assets.S /out/embedscope
# The Debian packages of the shared libraries the binary links (libc6 is in the base): the
# runtime stage installs exactly these.
RUN ldd /out/embedscope | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | xargs -n1 readlink -f \
        | sed 's#^/usr/lib/#*/lib/#' | xargs -I{} dpkg -S {} | cut -d: -f1 | sort -u | grep -vx 'libc6' \
        >/out/runtime-packages \
    && test -s /out/runtime-packages && cat /out/runtime-packages

FROM ${BASE_IMAGE}
ARG BASE_IMAGE
ARG ES_COMMIT=unknown
ARG ES_VERSION=unknown
LABEL org.opencontainers.image.title="embedscope" \
      org.opencontainers.image.description="Exact SVD-based analyses of transformer embedding matrices over HTTP, with a dashboard" \
      org.opencontainers.image.licenses="MIT" \
      org.opencontainers.image.version="$ES_VERSION" \
      org.opencontainers.image.revision="$ES_COMMIT" \
      org.opencontainers.image.base.name="$BASE_IMAGE"
COPY --from=build /out/runtime-packages /tmp/runtime-packages
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive xargs -a /tmp/runtime-packages \
        apt-get install -y -qq --no-install-recommends \
    && apt-get clean \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/cache/apt/archives/*.deb /var/cache/debconf/*-old \
        /var/log/apt /var/log/dpkg.log /var/log/alternatives.log /tmp/runtime-packages \
    && groupadd --system --gid 10001 embedscope \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin \
        embedscope \
    && mkdir -p /var/lib/embedscope /var/cache/embedscope \
    && chown 10001:0 /var/lib/embedscope /var/cache/embedscope \
    && chmod 0775 /var/lib/embedscope /var/cache/embedscope
COPY --from=build /out/embedscope /usr/bin/embedscope
COPY config /usr/share/embedscope/config
COPY data /usr/share/embedscope/data
# The container's default configuration: the embedded default with the persistent
# decomposition cache on its volume (server.cache_dir), checked here so a bad edit
# fails the build (the converted copies the check leaves in the cache are removed:
# the volume starts empty).
RUN sed '0,/"server": {/s##"server": {\n    "cache_dir": "/var/cache/embedscope",#' \
        /usr/share/embedscope/config/embedscope.json >/usr/share/embedscope/config/container.json \
    && grep -q '"cache_dir": "/var/cache/embedscope"' /usr/share/embedscope/config/container.json \
    && OPENBLAS_NUM_THREADS=1 embedscope --config /usr/share/embedscope/config/container.json --check-config \
    && find /var/cache/embedscope -mindepth 1 -delete
VOLUME ["/var/lib/embedscope", "/var/cache/embedscope"]
USER 10001:10001
ENV OPENBLAS_NUM_THREADS=1 EMBEDSCOPE_LISTEN=0.0.0.0:8080
EXPOSE 8080
# The daemon probes itself (no curl in the image): GET /healthz at $EMBEDSCOPE_LISTEN (a wildcard
# address is probed on the loopback), exit 0 on a 2xx answer within 2 s. Shell form: the address is
# read at check time.
HEALTHCHECK --interval=30s --timeout=3s --start-period=10s --retries=3 \
    CMD embedscope --probe /healthz --listen "$EMBEDSCOPE_LISTEN"
# exec: the daemon is PID 1 and gets SIGTERM directly; arguments after the image name are appended
# (a later --config replaces container.json).
ENTRYPOINT ["/bin/sh", "-c", "exec /usr/bin/embedscope --config /usr/share/embedscope/config/container.json --listen \"$EMBEDSCOPE_LISTEN\" \"$@\"", "embedscope"]
