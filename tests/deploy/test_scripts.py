"""The shell scripts and the load balancer configuration the stack mounts."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.deploy.compose import ROOT

SCRIPTS = sorted((ROOT / "deploy").rglob("*.sh"))
HAPROXY_CFG = ROOT / "deploy" / "haproxy" / "haproxy.cfg"


def test_scripts_are_found():
    assert {path.name for path in SCRIPTS} >= {"entrypoint.sh", "primary-init.sh", "replica-entrypoint.sh"}


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_script_is_posix_sh_executable_and_shellcheck_clean(script):
    # The official postgres image and the slim Python image both have /bin/sh; no bash needed.
    assert script.read_text().startswith("#!/bin/sh\n")
    assert os.access(script, os.X_OK), f"{script.name} is not executable"
    shellcheck = Path(sys.executable).with_name("shellcheck")
    result = subprocess.run(
        [str(shellcheck), "--shell=sh", "--severity=style", str(script)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_shellcheck_does_find_problems(tmp_path):
    bad = tmp_path / "bad.sh"
    bad.write_text('#!/bin/sh\nrm -rf $DIR/*\n[[ -n "$x" ]] && echo ok\n')
    shellcheck = Path(sys.executable).with_name("shellcheck")
    result = subprocess.run([str(shellcheck), "--shell=sh", str(bad)], capture_output=True, text=True)
    assert result.returncode != 0 and "SC2086" in result.stdout


@pytest.mark.skipif(shutil.which("haproxy") is None, reason="haproxy is not installed (apt-get install haproxy)")
def test_haproxy_accepts_its_configuration():
    result = subprocess.run(["haproxy", "-c", "-f", str(HAPROXY_CFG)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Configuration file is valid" in result.stdout + result.stderr
