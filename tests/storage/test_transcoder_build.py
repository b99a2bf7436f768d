"""The wheel built from the checkout's tracked files (what the Plone image installs) carries the
compiled transcoder, and a process that installs it runs it."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.deploy.test_service_image_build import build_context

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
UV = Path(sys.executable).parent / "uv"


def _build_wheel(context: Path, out: Path, **env) -> Path:
    result = subprocess.run(
        [str(UV), "build", "--wheel", "--no-build-isolation", "--python", sys.executable, "--out-dir", str(out)],
        cwd=context, env={**os.environ, **env}, capture_output=True, text=True, timeout=900,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (wheel,) = out.glob("*.whl")
    return wheel


def test_the_wheel_carries_the_compiled_transcoder_and_runs_it(tmp_path):
    context = tmp_path / "context"
    context.mkdir()
    build_context(context)
    assert not list((context / "plone_connector" / "storage").glob("*.so"))  # built from sources
    wheel = _build_wheel(context, tmp_path / "dist")
    assert not wheel.name.endswith("-none-any.whl"), wheel.name  # a platform wheel
    names = zipfile.ZipFile(wheel).namelist()
    for module in ("jsonstate_tree", "jsonstate_pickle", "jsonstate"):
        assert any(name.startswith(f"plone_connector/storage/{module}.") and name.endswith(".so") for name in names), module
        assert f"plone_connector/storage/{module}.py" in names  # the reference ships too
    assert "plone_connector/storage/compiled_sources.json" in names

    target = tmp_path / "installed"
    zipfile.ZipFile(wheel).extractall(target)
    code = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "from plone_connector.storage import jsonstate, transcoder\n"
        "assert jsonstate.__file__.startswith(sys.argv[1]), jsonstate.__file__\n"
        "record = b'\\x80\\x03c__main__\\nX\\n.\\x80\\x03}X\\x01\\x00\\x00\\x00aK\\x01s.'\n"
        "encoded = jsonstate.encode_record(record)\n"
        "print(transcoder.active(), encoded.state, encoded.exact)\n"
    )
    env = {key: value for key, value in os.environ.items() if key != transcoder_variable()}
    out = subprocess.run([sys.executable, "-c", code, str(target)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "compiled {'a': 1} None"


def test_the_variable_builds_a_pure_wheel(tmp_path):
    context = tmp_path / "context"
    context.mkdir()
    build_context(context)
    wheel = _build_wheel(context, tmp_path / "dist", PLONE_CONNECTOR_PURE_PYTHON="1")
    assert wheel.name.endswith("-py3-none-any.whl"), wheel.name
    names = zipfile.ZipFile(wheel).namelist()
    assert not [name for name in names if name.endswith(".so")]
    assert "plone_connector/storage/jsonstate.py" in names


def transcoder_variable() -> str:
    from plone_connector.storage.transcoder import PURE_VARIABLE

    return PURE_VARIABLE
