# llmgw-controlplane. Build from the repository root (no engine runs in CI;
# deploy/docker/check-libs.sh checks the runtime package list against ldd):
#
#   docker build -f deploy/docker/controlplane.Dockerfile -t llmgw/controlplane:0.1.0 .
#
# Build stage: Debian bookworm and the README's dependency script. Runtime
# stage: bookworm-slim with only the shared libraries the binary links, user
# 65532, nothing written to the root filesystem (it may be read-only), no
# HEALTHCHECK (Kubernetes probes /healthz and /readyz on the admin port).
FROM debian:bookworm AS build
COPY deploy/deps.sh /src/deploy/deps.sh
RUN bash /src/deploy/deps.sh --build-only
COPY . /src
RUN cmake -S /src -B /build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLLMGW_SANITIZE=OFF \
 && cmake --build /build -j"$(nproc)" --target llmgw-controlplane \
 && install -D -m 0755 -s /build/controlplane/llmgw-controlplane /out/llmgw-controlplane

FROM debian:bookworm-slim
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      ca-certificates libcurl4 zlib1g libevent-2.1-7 libevent-openssl-2.1-7 libevent-pthreads-2.1-7 libgrpc29 \
      libjansson4 libpq5 libprotobuf-c1 libssl3 \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 65532 llmgw \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin llmgw
COPY --from=build /out/llmgw-controlplane /usr/local/bin/llmgw-controlplane
# A container's loopback is its own: listen on every address by default.
ENV LLMGW_ADMIN_LISTEN=0.0.0.0:8081 LLMGW_GRPC_LISTEN=0.0.0.0:8082
USER 65532:65532
EXPOSE 8081 8082
ENTRYPOINT ["/usr/local/bin/llmgw-controlplane"]
CMD ["serve"]
