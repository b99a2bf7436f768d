"""The wheel built from the checkout's tracked files (what the Plone image installs) carries the
compiled transcoder, and a process that installs it runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from plone_connector.storage import transcoder
from tests.deploy.test_service_image_build import build_context

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
UV = Path(sys.executable).parent / "uv"


def _build_wheel(context: Path, out: Path, **env) -> Path:
    """Build as the Plone image does: in an isolated environment (hatchling, and what the hook
    asks for) pinned by the lock file."""
    result = subprocess.run(
        [str(UV), "build", "--wheel", "--python", sys.executable, "--build-constraint", "requirements.txt",
         "--out-dir", str(out)],
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
    for module in ("jsonstate_tree", "jsonstate_pickle", "jsonstate", "jsonstate_fast"):
        assert any(name.startswith(f"plone_connector/storage/{module}.") and name.endswith(".so") for name in names), module
    for module in ("jsonstate_tree", "jsonstate_pickle", "jsonstate"):
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
        "print(transcoder.active(), encoded.state, encoded.exact, jsonstate._fast is not None, encoded.text)\n"
    )
    env = {key: value for key, value in os.environ.items() if key != transcoder_variable()}
    out = subprocess.run([sys.executable, "-c", code, str(target)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == 'compiled {\'a\': 1} None True {"a":1}'


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


def _run_hook(context: Path, version: str, **env) -> tuple[dict, str]:
    """Run the build hook's initialize in its own process (as hatchling does: Cython keeps
    per-process caches keyed by relative paths); return the build data and stderr."""
    code = (
        "import json, sys\n"
        "sys.path.insert(0, '.')\n"
        "from hatch_build import CustomBuildHook\n"
        "hook = CustomBuildHook('.', {}, None, None, 'dist', 'wheel')\n"
        "data = {'artifacts': []}\n"
        "hook.initialize(sys.argv[1], data)\n"
        "print(json.dumps(data))\n"
    )
    environment = {k: v for k, v in os.environ.items() if k != transcoder_variable()}
    result = subprocess.run([sys.executable, "-c", code, version], cwd=context, env={**environment, **env},
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout.splitlines()[-1]), result.stderr


def test_without_a_compiler_the_build_warns_and_falls_back_to_the_sources(tmp_path):
    context = tmp_path / "context"
    context.mkdir()
    build_context(context)
    build_data, stderr = _run_hook(context, "standard", CC="false")  # the C compiler fails
    assert "WARNING: the JSON state transcoder was not compiled" in stderr
    assert build_data == {"artifacts": []}  # a pure wheel: no platform tag, nothing compiled
    assert not list((context / "plone_connector" / "storage").glob("*.so"))


def test_an_editable_install_with_the_variable_removes_an_earlier_build(tmp_path):
    context = tmp_path / "context"
    context.mkdir()
    build_context(context)
    build_data, _ = _run_hook(context, "editable")  # compiles in place
    storage = context / "plone_connector" / "storage"
    modules = len(transcoder.MODULES) + len(transcoder.FAST_MODULES)
    assert len(list(storage.glob("*.so"))) == modules and (storage / "compiled_sources.json").exists()
    assert build_data["pure_python"] is False and len(build_data["artifacts"]) == modules + 1
    _run_hook(context, "editable", PLONE_CONNECTOR_PURE_PYTHON="1")
    assert not list(storage.glob("*.so")) and not (storage / "compiled_sources.json").exists()
