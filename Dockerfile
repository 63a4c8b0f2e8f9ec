# embedscope daemon image: the build stage compiles, the runtime stage carries
# the binary, the default config and the shipped weights.
#
#   make image          (= make build-web/assets.S, then podman build --format docker ...)
#   make build-web/assets.S && docker build --build-arg ES_COMMIT=$(git rev-parse --short=12 HEAD) -t embedscope .
#
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
FROM debian:bookworm-slim AS build
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        gcc make pkg-config libc6-dev libmicrohttpd-dev libjansson-dev libopenblas-dev liblapacke-dev \
        check zlib1g-dev libssl-dev && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Makefile openapi.yaml ./
COPY include include
COPY src src
COPY config config
COPY build-web build-web
ARG ES_COMMIT=unknown
# -o: the bundle is taken as built (its sources and npm are not in the image); HAVE_NODE=yes
# makes the Makefile use it, not the stand-in page it builds where node is missing.
RUN make BUILD=/out CONFIG_DIR=/usr/share/embedscope/config ES_COMMIT="$ES_COMMIT" HAVE_NODE=yes \
        -o build-web/assets.S /out/embedscope

FROM debian:bookworm-slim
ARG ES_COMMIT=unknown
ARG ES_VERSION=unknown
LABEL org.opencontainers.image.title="embedscope" \
      org.opencontainers.image.description="Exact SVD-based analyses of transformer embedding matrices over HTTP, with a dashboard" \
      org.opencontainers.image.licenses="MIT" \
      org.opencontainers.image.version="$ES_VERSION" \
      org.opencontainers.image.revision="$ES_COMMIT"
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        libmicrohttpd12 libjansson4 libopenblas0-pthread liblapacke libssl3 zlib1g curl \
    && rm -rf /var/lib/apt/lists/* \
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
# Shell form: the port comes from $EMBEDSCOPE_LISTEN at check time ("HOST:PORT" or "[V6]:PORT").
HEALTHCHECK --interval=30s --timeout=3s --start-period=10s --retries=3 \
    CMD curl -fsS --max-time 2 -o /dev/null "http://localhost:${EMBEDSCOPE_LISTEN##*:}/healthz" || exit 1
# exec: the daemon is PID 1 and gets SIGTERM directly; arguments after the image name are appended
# (a later --config replaces container.json).
ENTRYPOINT ["/bin/sh", "-c", "exec /usr/bin/embedscope --config /usr/share/embedscope/config/container.json --listen \"$EMBEDSCOPE_LISTEN\" \"$@\"", "embedscope"]
