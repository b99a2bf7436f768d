"""The service image's build stage, replayed without Docker: the build context that .dockerignore
leaves, the Dockerfile's own COPY and RUN lines (paths moved into a temporary folder), and then the
image's command run from the resulting venv. Shows that requirements-service.txt holds everything
the service imports, and that the project installs from the context the image gets."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.deploy.compose import ROOT, load_compose
from tests.deploy.dockerfile import dockerignore_patterns, is_ignored, parse, stages
from tests.deploy.test_processes import free_port, local, needs_cli, process_env, wait_for
from tests.pg import create_database, drop_database

pytestmark = [pytest.mark.slow, needs_cli]

DOCKERFILE = ROOT / "deploy" / "service.Dockerfile"


def build_context(target: Path) -> None:
    """The files `docker build .` would send: the checkout's tracked files minus .dockerignore."""
    patterns = dockerignore_patterns(ROOT)
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in tracked.decode().split("\0"):
        if name and not is_ignored(name, patterns) and (ROOT / name).is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, target / name)


def replay_build_stage(context: Path, root: Path) -> Path:
    """Run the build stage's COPY and RUN lines with / moved to ``root``; return the venv."""
    build = stages(parse(DOCKERFILE))[0]
    workdir = root
    root.mkdir()
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("VIRTUAL_ENV", None)
    for instruction in build:
        args = instruction.args.replace("/opt/venv", str(root / "opt" / "venv"))
        if instruction.keyword == "WORKDIR":
            workdir = root / args.lstrip("/")
            workdir.mkdir(parents=True, exist_ok=True)
        elif instruction.keyword == "ENV":
            env.update(dict(re.findall(r"(\w+)=(\S+)", args)))
        elif instruction.keyword == "COPY":
            *sources, dest = args.split()
            for source in sources:
                target = workdir / dest if not dest.endswith("/") else workdir / dest / Path(source).name
                if (context / source).is_dir():
                    shutil.copytree(context / source, target)
                else:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(context / source, target)
        elif instruction.keyword == "RUN":
            # The image installs uv with pip; the venv running this test has the same pinned uv.
            command = re.sub(r"pip install uv==\S+ && ", "", args)
            result = subprocess.run(["sh", "-c", command], cwd=workdir, env=env, capture_output=True, text=True,
                                    timeout=600)
            assert result.returncode == 0, f"RUN {command}\n{result.stdout}{result.stderr}"
    return root / "opt" / "venv"


def test_service_image_build_stage_yields_a_working_service(tmp_path):
    context = tmp_path / "context"
    context.mkdir()
    build_context(context)
    assert not (context / "tests").exists() and (context / "requirements-service.txt").exists()
    venv = replay_build_stage(context, tmp_path / "root")

    # Only the service's pins are installed: no Zope, no Plone, no test tools.
    listed = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "list", "--format=freeze"],
                            capture_output=True, text=True).stdout.lower()
    for absent in ("zope", "products.cmfplone", "pytest", "relstorage"):
        assert f"\n{absent}==" not in f"\n{listed}", absent

    # The image's command, from the image's venv, against a real database.
    services = load_compose({})["services"]
    dsn, admin = create_database("image")
    try:
        port = free_port()
        env = process_env(services["catalog"], dsn)
        env["PATH"] = f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}"
        migrate = [str(venv / "bin" / "catalog-service"), *services["migrate"]["command"][1:]]
        result = subprocess.run(migrate, env=env, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr
        image_cmd = next(i for i in reversed(parse(DOCKERFILE)) if i.keyword == "CMD").exec_form()
        argv = local(image_cmd, port)
        argv[0] = str(venv / "bin" / image_cmd[0])
        log_path = tmp_path / "serve.log"
        with log_path.open("w") as log:
            server = subprocess.Popen(argv, env=env, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT,
                                      start_new_session=True)
            try:
                assert wait_for(f"http://127.0.0.1:{port}/readyz", 200, server, log=log_path) == 200
            finally:
                server.terminate()
                server.wait(timeout=30)
    finally:
        drop_database(admin, dsn)
