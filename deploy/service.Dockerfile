# syntax=docker/dockerfile:1
# The catalog service: FastAPI on uvicorn, talking to PostgreSQL with asyncpg.
# Build from the repository root:  docker build -f deploy/service.Dockerfile -t catalog-service .
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    UV_COMPILE_BYTECODE=1 \
    UV_LINK_MODE=copy
# Same uv as the Makefile, so the image resolves nothing the lock file did not.
RUN pip install uv==0.13.9 && python -m venv /opt/venv
WORKDIR /src
# Dependencies first: this layer is rebuilt only when the pins change.
COPY requirements-service.txt ./
RUN uv pip sync --python /opt/venv/bin/python requirements-service.txt
COPY pyproject.toml README.md hatch_build.py ./
COPY schemas ./schemas
COPY service ./service
COPY plone_connector ./plone_connector
# The service never opens the ZODB storage: its transcoder is not compiled here (no compiler in
# this image; hatch_build.py).
ENV PLONE_CONNECTOR_PURE_PYTHON=1
RUN uv pip install --python /opt/venv/bin/python --no-deps . \
    && /opt/venv/bin/catalog-service --help > /dev/null

FROM ${PYTHON_IMAGE} AS runtime
# A fixed uid, so volume permissions are the same on every host.
RUN groupadd --system --gid 10001 catalog \
    && useradd --system --uid 10001 --gid catalog --home-dir /app --shell /usr/sbin/nologin catalog \
    && install -d -o catalog -g catalog /app
COPY --from=build /opt/venv /opt/venv
# Any `serve` in the container listens on every interface (`docker run -p 8080:8080 ... serve --demo`).
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    CATALOG_HOST=0.0.0.0
WORKDIR /app
USER 10001:10001
EXPOSE 8080
# The slim image has no curl; Python is there anyway. /healthz: the process answers.
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2).status != 200)"]
CMD ["catalog-service", "serve", "--host", "0.0.0.0", "--port", "8080", "--workers", "2"]
