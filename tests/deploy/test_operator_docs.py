"""What an operator copies from the docs works: every `docker run` of the service image publishes
the port the image listens on, on an address reachable from outside the container; `make clean`
never deletes the data of a running PostgreSQL."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess

import pytest

from tests.deploy.compose import ROOT, load_compose
from tests.deploy.dockerfile import parse, stages

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SERVICE_IMAGE = ROOT / "deploy" / "service.Dockerfile"


def runtime_env() -> dict[str, str]:
    """The ENV of the service image's runtime stage."""
    env = {}
    for instruction in stages(parse(SERVICE_IMAGE))[-1]:
        if instruction.keyword == "ENV":
            for pair in shlex.split(instruction.args.replace("\\\n", " ")):
                name, _, value = pair.partition("=")
                env[name] = value
    return env


def docker_runs() -> list[tuple[str, list[str]]]:
    found = []
    for doc in DOCS:
        for line in doc.read_text().splitlines():
            if re.search(r"\bdocker run\b", line) and "catalog-service" in line and " serve" in line:
                command = line.strip().strip("`")
                found.append((f"{doc.name}: {command}", shlex.split(command[command.index("docker run"):])))
    return found


def test_docker_runs_are_found():
    assert any("--demo" in args for _, args in docker_runs()), "docs/deploy.md shows the demo container"


@pytest.mark.parametrize("where, args", docker_runs(), ids=[w for w, _ in docker_runs()])
def test_docker_run_publishes_the_port_the_service_listens_on_everywhere(where, args):
    exposed = next(i.args for i in stages(parse(SERVICE_IMAGE))[-1] if i.keyword == "EXPOSE").split()
    published = [args[i + 1] for i, a in enumerate(args) if a in ("-p", "--publish")]
    assert published, f"{where}: no -p, the service is not reachable from the host"
    assert any(p.rsplit(":", 1)[-1] in exposed for p in published), (where, published, exposed)
    serve = args[args.index("serve"):]
    host = serve[serve.index("--host") + 1] if "--host" in serve else runtime_env().get("CATALOG_HOST")
    assert host == "0.0.0.0", f"{where}: listens on {host or '127.0.0.1'} inside the container"
    if "--port" in serve:
        assert serve[serve.index("--port") + 1] in exposed


def test_image_environment_parses_as_the_service_reads_it(monkeypatch):
    from catalog_service.settings import Settings

    for name, value in runtime_env().items():
        if name.startswith("CATALOG_"):
            monkeypatch.setenv(name, value)
    assert Settings().host == "0.0.0.0"


def test_compose_service_listens_on_every_interface():
    catalog = load_compose({})["services"]["catalog"]
    command = catalog["command"]
    assert command[command.index("--host") + 1] == "0.0.0.0"


@pytest.fixture
def project(tmp_path):
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    (tmp_path / ".pgdata" / "service").mkdir(parents=True)
    (tmp_path / ".pgdata" / "service" / "PG_VERSION").write_text("18\n")
    return tmp_path


def test_make_clean_refuses_while_postgresql_runs_on_the_data(project):
    # A live process's id in postmaster.pid: this test's own.
    (project / ".pgdata" / "service" / "postmaster.pid").write_text(f"{os.getpid()}\n{project}\n")
    result = subprocess.run(["make", "clean"], cwd=project, capture_output=True, text=True)
    assert result.returncode != 0
    assert f"PostgreSQL (pid {os.getpid()}) is running on .pgdata/service; stop it first: make stop" in result.stderr
    assert (project / ".pgdata" / "service" / "PG_VERSION").exists()


def test_make_clean_deletes_the_data_of_a_stopped_server(project):
    with open("/proc/sys/kernel/pid_max") as f:
        unused = int(f.read()) + 1  # no process has an id past pid_max
    (project / ".pgdata" / "service" / "postmaster.pid").write_text(f"{unused}\n{project}\n")
    result = subprocess.run(["make", "clean"], cwd=project, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert not (project / ".pgdata").exists()
