# embedscope daemon image: build stage compiles, runtime stage carries the binary,
# the default config and the shipped weights. Listens on 0.0.0.0:8080.
FROM debian:bookworm-slim AS build
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        gcc make pkg-config libc6-dev libmicrohttpd-dev libjansson-dev libopenblas-dev liblapacke-dev \
        check zlib1g-dev libssl-dev nodejs npm && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Makefile openapi.yaml ./
COPY include include
COPY src src
COPY config config
# The dashboard's assets are bundled from npm (web/package-lock.json) and compiled into the binary.
COPY web/package.json web/package-lock.json web/build.mjs web/
COPY web/src web/src
RUN make BUILD=/out CONFIG_DIR=/usr/share/embedscope/config /out/embedscope

FROM debian:bookworm-slim
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        libmicrohttpd12 libjansson4 libopenblas0-pthread liblapacke libssl3 zlib1g curl \
    && rm -rf /var/lib/apt/lists/* && useradd --system --no-create-home embedscope
COPY --from=build /out/embedscope /usr/bin/embedscope
COPY config /usr/share/embedscope/config
COPY data /usr/share/embedscope/data
USER embedscope
ENV OPENBLAS_NUM_THREADS=1
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=3s CMD curl -fsS http://127.0.0.1:8080/healthz || exit 1
ENTRYPOINT ["/usr/bin/embedscope", "--listen", "0.0.0.0:8080"]
