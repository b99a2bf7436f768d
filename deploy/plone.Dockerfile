# syntax=docker/dockerfile:1
# Plone 6.2 (Zope WSGI via runwsgi) with plone_connector; ZODB in PostgreSQL (JSONB storage or RelStorage).
# Build from the repository root:  docker build -f deploy/plone.Dockerfile -t catalog-plone .
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    UV_COMPILE_BYTECODE=1 \
    UV_LINK_MODE=copy
# RelStorage's PostgreSQL driver, psycopg2, comes as source only: it needs a compiler and libpq.
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential libpq-dev \
    && rm -rf /var/lib/apt/lists/*
RUN pip install uv==0.13.9 && python -m venv /opt/venv
WORKDIR /src
# requirements.txt pins the whole project (tests and tools too); as constraints it fixes the
# version of every distribution the Plone side needs without installing the rest, and of what
# builds need (Cython, setuptools, hatchling).
COPY requirements.txt ./
COPY pyproject.toml README.md hatch_build.py ./
COPY schemas ./schemas
COPY service ./service
COPY plone_connector ./plone_connector
# The wheel build compiles the storage's JSON state transcoder with Cython (hatch_build.py).
RUN uv pip install --python /opt/venv/bin/python --constraint requirements.txt --build-constraints requirements.txt \
    ".[plone]" "RelStorage[postgresql]" \
    && /opt/venv/bin/python -c "import Products.CMFPlone, relstorage, plone_connector" \
    && /opt/venv/bin/python -c "from plone_connector.storage import jsonstate, transcoder; assert transcoder.active() == 'compiled' and jsonstate._fast is not None"

FROM ${PYTHON_IMAGE} AS runtime
RUN apt-get update \
    && apt-get install -y --no-install-recommends libpq5 \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 plone \
    && useradd --system --uid 10001 --gid plone --home-dir /app --shell /usr/sbin/nologin plone \
    && install -d -o plone -g plone /app /app/var
COPY --from=build /opt/venv /opt/venv
COPY deploy/plone/etc /app/etc
COPY deploy/plone/scripts /app/scripts
COPY --chmod=0755 deploy/plone/entrypoint.sh /app/entrypoint.sh
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PLONE_INSTANCE=/app \
    PLONE_STORAGE=jsonb \
    PLONE_LISTEN=0.0.0.0:8080
WORKDIR /app
USER 10001:10001
# Blob cache and Chameleon's template cache; the object data itself lives in PostgreSQL.
VOLUME ["/app/var"]
EXPOSE 8080
HEALTHCHECK --interval=15s --timeout=5s --start-period=120s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8080/ok', timeout=4).status != 200)"]
ENTRYPOINT ["/app/entrypoint.sh"]
CMD ["start"]
