# syntax=docker/dockerfile:1
# insync-proxy container image: a Kafka wire-protocol sidecar (see docs/operations.md).
#
#   docker build -t insync-proxy:0.1.0 .
#   docker run --rm -e INSYNC_PROXY_BOOTSTRAP_SERVERS=kafka-1:9092 -p 9092:9092 -p 9101-9103:9101-9103 -p 9190:9190 insync-proxy:0.1.0
#
# Publish every broker's port, not only the bootstrap port: clients learn each broker as
# advertised_host:9100 + its node id (here brokers 1-3) and connect there next.
# Without Docker or a registry (podman, a base made from Debian's packages): ./scripts/build-image.
#
# Stage 1 builds the project's wheel plus wheels of its runtime dependencies (uvloop, prometheus-client);
# stage 2 installs only those wheels, offline, into a slim image that runs as a non-root user.
# The project's wheel is the compiled build (mypyc, setup.py: about a third less CPU per request);
# `--build-arg COMPILE=0` builds the interpreted one.

ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# A C compiler for mypyc; only in this stage. Debian's current gcc for the base image (no pin: the
# builder's toolchain is not part of the image). Python's headers come with the official python images;
# on a base made from Debian's packages (scripts/build-image) they are python3-dev's.
# libkrb5-dev: the headers the gssapi binding ([control_sasl] mechanism = "GSSAPI") builds against.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev libkrb5-dev \
    && if ! python -c 'import os, sys, sysconfig; sys.exit(not os.path.isfile(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'; then \
         apt-get install -y --no-install-recommends python3-dev; \
       fi \
    && rm -rf /var/lib/apt/lists/*
# The build tools, pinned: --no-build-isolation below builds with these (mypy for the compiled build: below).
RUN pip install setuptools==84.2.1 wheel==0.48.0
WORKDIR /src
# The runtime dependencies first, with the kerberos and aws extras (their own layer, rebuilt only when
# pyproject.toml changes; extras.txt pins the two extras for the runtime stage): wheels for
# the runtime stage, and installed here because mypyc type-checks the modules that import them.
COPY pyproject.toml ./
RUN python -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; print(*p["dependencies"], *p["optional-dependencies"]["kerberos"], *p["optional-dependencies"]["aws"], sep="\n")' \
        > /tmp/requirements.txt \
    && pip wheel --wheel-dir /wheels -r /tmp/requirements.txt \
    && pip install --no-index --find-links=/wheels -r /tmp/requirements.txt \
    && python -c 'from importlib.metadata import version; print(*(f"{n}=={version(n)}" for n in ("gssapi", "botocore")), sep="\n")' \
        > /wheels/extras.txt
# The compiled build or not: declared here, after the layers both builds share (a RUN after an ARG is
# cached per value), so the compiled and the interpreted build differ from this layer on only.
ARG COMPILE=1
RUN if [ "$COMPILE" = 1 ]; then pip install mypy==2.4.1; fi
# The source: the whole build context, which .dockerignore filters down to the package and its build files.
COPY . .
# One wheel directory: insync-proxy itself and every runtime dependency (uvloop ships manylinux wheels),
# and the wheels' checksums, which the runtime stage copies (below).
RUN INSYNC_PROXY_COMPILE=${COMPILE} pip wheel --no-build-isolation --no-deps --wheel-dir /wheels . \
    && sha256sum /wheels/*.whl > /wheels/SHA256SUMS

FROM ${PYTHON_IMAGE} AS runtime
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="insync-proxy" \
      org.opencontainers.image.description="Kafka sidecar proxy: min.insync.replicas in Metadata (KIP-637), acks=-2 (KIP-926), acks validation (KIP-1)" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# A fixed numeric uid/gid, so Kubernetes' runAsNonRoot can verify it without a passwd lookup.
RUN groupadd --system --gid 10001 insync \
    && useradd --system --uid 10001 --gid insync --no-create-home --home-dir /var/lib/insync-proxy \
       --shell /usr/sbin/nologin insync \
    && mkdir -p /etc/insync-proxy /var/lib/insync-proxy/audit \
    && chown -R 10001:10001 /var/lib/insync-proxy

# Install from the builder's wheels only (no index): the image holds exactly what was built, and the
# wheels never land in a layer of their own. Their checksums are copied first: a layer cache that keys a
# RUN --mount by its command alone (podman/buildah) would otherwise reinstall old wheels after a source
# change; a changed checksum file invalidates the install. The import check fails the build if uvloop
# is missing.
# MIT Kerberos's GSS-API library, which the gssapi wheel (the kerberos extra) links against.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends libgssapi-krb5-2 \
    && rm -rf /var/lib/apt/lists/*
COPY --from=builder /wheels/SHA256SUMS /usr/local/share/insync-proxy/wheels.sha256
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    sha256sum --check --quiet /usr/local/share/insync-proxy/wheels.sha256 \
    && pip install --no-index --find-links=/wheels /wheels/insync_proxy-*.whl -r /wheels/extras.txt \
    && python -c "import gssapi, botocore" \
    && python -c "import uvloop, prometheus_client, insync_proxy.proxy as p; print('insync-proxy', p.__version__)" \
    && python -m insync_proxy.proxy.observability.compiled

# Default configuration: binds 0.0.0.0, advertises 127.0.0.1 (sidecar), audit under /var/lib.
# Mount your own at /etc/insync-proxy/config.toml (Kubernetes: a ConfigMap), or override with
# INSYNC_PROXY_* environment variables (e.g. INSYNC_PROXY_BOOTSTRAP_SERVERS).
COPY --chown=10001:10001 deploy/docker/config.toml /etc/insync-proxy/config.toml

WORKDIR /var/lib/insync-proxy
VOLUME ["/var/lib/insync-proxy/audit"]

# 9092: client bootstrap listener (producers connect here: bootstrap.servers=localhost:9092).
# 9100-9199: one listener per upstream broker at broker_port_base (9100) + broker node id;
#            Metadata responses advertise advertised_host:9100+id, so these must be reachable too.
# 9190: admin HTTP: /metrics (Prometheus), /healthz (process alive), /readyz (upstream reachable).
#       9190 sits inside the per-broker range: node id 90 would collide, keep node ids below 90.
EXPOSE 9092 9100-9189 9190

USER 10001:10001

# /healthz answers while the process lives. Set INSYNC_PROXY_ADMIN_PORT if admin_port is not 9190
# (only the env var is visible here; note it also overrides admin_port of the TOML file).
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('INSYNC_PROXY_ADMIN_PORT', '9190'), timeout=4)"]

# SIGTERM: stop accepting, drain in-flight requests (drain_timeout_seconds, default 30), exit.
# Exec form: the proxy is PID 1 and receives the signal itself. Give `docker stop -t` more than the drain.
STOPSIGNAL SIGTERM
ENTRYPOINT ["insync-proxy"]
CMD ["run", "--config", "/etc/insync-proxy/config.toml"]
