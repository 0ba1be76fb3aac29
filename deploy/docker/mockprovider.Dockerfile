# llmgw-mockprovider, the fault-injecting fake provider (docs/mockprovider.md),
# for in-cluster smoke tests only. Build from the repository root:
#
#   docker build -f deploy/docker/mockprovider.Dockerfile -t llmgw/mockprovider:0.1.0 .
FROM debian:bookworm AS build
COPY deploy/deps.sh /src/deploy/deps.sh
RUN bash /src/deploy/deps.sh --build-only
COPY . /src
RUN cmake -S /src -B /build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLLMGW_SANITIZE=OFF \
 && cmake --build /build -j"$(nproc)" --target llmgw-mockprovider \
 && install -D -m 0755 -s /build/tests/mockprovider/llmgw-mockprovider /out/llmgw-mockprovider

FROM debian:bookworm-slim
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libevent-2.1-7 libevent-openssl-2.1-7 libjansson4 libssl3 \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 65532 llmgw \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin llmgw
COPY --from=build /out/llmgw-mockprovider /usr/local/bin/llmgw-mockprovider
USER 65532:65532
EXPOSE 9090
ENTRYPOINT ["/usr/local/bin/llmgw-mockprovider"]
CMD ["--listen", "0.0.0.0:9090"]
