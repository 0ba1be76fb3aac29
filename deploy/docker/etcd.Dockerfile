# etcd for the Helm chart's evaluation mode only (etcd.inChart): Debian
# bookworm's etcd-server (3.4), the version the test suite runs, as user
# 65532. In production point the chart at an etcd cluster you run.
#
#   docker build -f deploy/docker/etcd.Dockerfile -t llmgw/etcd:3.4 deploy/docker
FROM debian:bookworm-slim
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends etcd-server \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 65532 llmgw \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin llmgw
USER 65532:65532
EXPOSE 2379 2380
ENTRYPOINT ["/usr/bin/etcd"]
