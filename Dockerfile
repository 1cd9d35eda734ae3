# handoff-trace: verify signed handoff captures (the service arrives with the store).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1

WORKDIR /srv/handoff-trace
COPY pyproject.toml README.md ./
COPY app ./app
COPY templates ./templates
COPY static ./static
COPY alembic ./alembic
RUN pip install --no-cache-dir . \
    && useradd --system --uid 10001 --home-dir /srv/handoff-trace handoff

USER handoff
ENTRYPOINT ["handoff-trace"]
CMD ["--help"]
