# llmgw-dataplane. Build from the repository root (no engine runs in CI;
# deploy/docker/check-libs.sh checks the runtime package list against ldd):
#
#   docker build -f deploy/docker/dataplane.Dockerfile -t llmgw/dataplane:0.1.0 .
#
# Build stage: Debian bookworm and the README's dependency script. Runtime
# stage: bookworm-slim with only the shared libraries the binary links, user
# 65532, no HEALTHCHECK (Kubernetes probes /readyz and /healthz). With a
# read-only root filesystem the process writes only where it is told: the
# snapshot cache (--snapshot-cache, a temporary file beside it, renamed) and
# the ledger spool (--ledger-spool), both under /var/lib/llmgw, a volume.
FROM debian:bookworm AS build
COPY deploy/deps.sh /src/deploy/deps.sh
RUN bash /src/deploy/deps.sh --build-only
COPY . /src
RUN cmake -S /src -B /build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLLMGW_SANITIZE=OFF \
 && cmake --build /build -j"$(nproc)" --target llmgw-dataplane \
 && install -D -m 0755 -s /build/dataplane/llmgw-dataplane /out/llmgw-dataplane

FROM debian:bookworm-slim
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      ca-certificates libcurl4 zlib1g libevent-2.1-7 libevent-openssl-2.1-7 libevent-pthreads-2.1-7 libgrpc29 \
      libjansson4 libprotobuf-c1 libssl3 \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 65532 llmgw \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin llmgw \
 && install -d -m 0700 -o 65532 -g 65532 /var/lib/llmgw
COPY --from=build /out/llmgw-dataplane /usr/local/bin/llmgw-dataplane
ENV LLMGW_LISTEN=0.0.0.0:8080
USER 65532:65532
VOLUME /var/lib/llmgw
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/llmgw-dataplane"]
