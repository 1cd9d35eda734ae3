# handoff-trace: the HTTP API (`handoff-trace serve`) as a non-root user.
#
# Configuration (environment):
#   DATABASE_URL              postgresql+psycopg://USER:PASSWORD@HOST:5432/DB in production;
#                             unset: the embedded SQLite file /srv/handoff-trace/var/handoff-trace.db
#                             (mount a volume on /srv/handoff-trace/var to keep it)
#   HANDOFF_TRACE_TRUST_FILE  the trust configuration (profile §4), mounted read-only; the service
#                             refuses to start without one
#   HANDOFF_TRACE_*           the other settings (see README "Configuration")
#
#   HANDOFF_TRACE_PORT        the port served and health-checked (default 8000)
#
#   docker build -t handoff-trace .
#   docker run -p 8000:8000 -v handoff-trace-data:/srv/handoff-trace/var \
#       -v "$PWD/trust.json:/etc/handoff-trace/trust.json:ro" handoff-trace
#   docker run --rm -e DATABASE_URL=... handoff-trace tokens create --role ingest --name ci
#
#   (RUN --mount needs BuildKit, Docker's default builder since 23.0.)

# The build stage makes the wheels of both distributions, the protocol library and the
# service; the final stage installs those same wheels (tests/test_wheel.py builds them from
# exactly what this stage copies and runs the installed commands from another directory).
FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY lib/handoff-context ./lib/handoff-context
COPY pyproject.toml README.md ./
COPY app ./app
COPY templates ./templates
COPY static ./static
COPY alembic ./alembic
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels ./lib/handoff-context .

FROM python:3.11-slim

# MALLOC_ARENA_MAX=2: glibc's per-thread malloc arenas (up to 8 a core) were where the
# server's RSS grew under sustained load; with two it levelled sooner and lower (BENCHMARKS.md).
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    MALLOC_ARENA_MAX=2 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HANDOFF_TRACE_TRUST_FILE=/etc/handoff-trace/trust.json \
    HANDOFF_TRACE_HOST=0.0.0.0 \
    HANDOFF_TRACE_PORT=8000

WORKDIR /srv/handoff-trace
# The wheels are bind-mounted for the install only, so no layer of the image keeps them;
# their dependencies come from the package index.
RUN --mount=type=bind,from=build,source=/wheels,target=/tmp/wheels \
    pip install --no-cache-dir /tmp/wheels/*.whl \
    && useradd --system --uid 10001 --home-dir /srv/handoff-trace handoff \
    && mkdir -p /srv/handoff-trace/var /etc/handoff-trace \
    && chown handoff /srv/handoff-trace/var

USER 10001
EXPOSE 8000
# The embedded SQLite store lives here: mount a volume on it to keep the data.
VOLUME ["/srv/handoff-trace/var"]
# The slim image has no curl: ask /healthz with the Python that runs the service, on the
# port it was configured to serve (HANDOFF_TRACE_PORT, as `serve` reads it).
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os,sys,urllib.request; port = os.environ.get('HANDOFF_TRACE_PORT') or '8000'; sys.exit(urllib.request.urlopen(f'http://127.0.0.1:{port}/api/v1/healthz', timeout=4).status != 200)"]
ENTRYPOINT ["handoff-trace"]
# serve reads HANDOFF_TRACE_HOST and HANDOFF_TRACE_PORT (set above; override with -e).
CMD ["serve"]
