"""Build hook: compile the JSON state transcoder of the ZODB storage with Cython.

The three transcoder modules (plone_connector/storage/jsonstate*.py) are plain Python and
stay the reference. Built wheels and editable installs also get a compiled extension module
for each, from the same source plus the typing declarations in the ``.pxd`` file beside it;
Python imports an extension module in preference to the ``.py`` of the same name. The tests
compare the two on generated graphs and on a Plone site's records (tests/storage/
test_transcoder_compiled.py). ``jsonstate_fast.pyx`` has no Python twin: it is the compiled fast
path for plain records, which the reference modules do without (tests/storage/
test_transcoder_fast.py compares it with them).

``PLONE_CONNECTOR_PURE_PYTHON=1`` skips the compilation (a platform without a C compiler, or
an image that never opens the storage); everything then runs on the pure modules. Without a
working C compiler the build says so on stderr and falls back to the pure modules too (the test
suite then fails its "compiled and current" test; the Plone image checks after installing). An
error of Cython itself (sources and .pxd that do not agree) fails the build.

``compiled_sources.json`` beside the modules records the SHA-256 of each source the extensions
were built from, so a test can tell a stale build from a current one.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
from pathlib import Path

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

PACKAGE = Path("plone_connector", "storage")
MANIFEST = PACKAGE / "compiled_sources.json"


def _load_transcoder():
    # The module list and the variable are the storage's own (transcoder.py), read from its file:
    # importing the package would import ZODB and psycopg, which a build environment lacks.
    path = Path(__file__).resolve().parent / PACKAGE / "transcoder.py"
    spec = importlib.util.spec_from_file_location("_transcoder_for_build", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_transcoder = _load_transcoder()
MODULES = _transcoder.MODULES
FAST_MODULES = _transcoder.FAST_MODULES
SKIP_VARIABLE = _transcoder.PURE_VARIABLE
skip_requested = _transcoder.pure_requested


def source_digests(root: Path) -> dict[str, str]:
    """SHA-256 of each transcoder source (.py and .pxd), by file name."""
    digests = {}
    for module in MODULES + FAST_MODULES:
        for suffix in (".py", ".pxd", ".pyx"):
            path = root / PACKAGE / f"{module}{suffix}"
            if path.exists():
                digests[path.name] = hashlib.sha256(path.read_bytes()).hexdigest()
    return digests


def compile_transcoder(root: Path) -> list[Path]:
    """Compile the modules in place (next to their sources); return the files written."""
    from Cython.Build import cythonize
    from setuptools import Distribution, Extension

    extensions = [
        Extension(
            ".".join((*PACKAGE.parts, module)),
            [str(PACKAGE / f"{module}.py")],
            # The extensions run Python-level code only; -O2 is what CPython builds with.
            extra_compile_args=["-O2"],
        )
        for module in MODULES
    ] + [
        # Compiled-only accelerators (no .py): without them the reference path runs.
        Extension(".".join((*PACKAGE.parts, module)), [str(PACKAGE / f"{module}.pyx")], extra_compile_args=["-O2"])
        for module in FAST_MODULES
    ]
    previous = Path.cwd()
    os.chdir(root)
    try:
        extensions = cythonize(
            extensions,
            build_dir="build/cython",
            quiet=True,
            compiler_directives={
                "language_level": 3,
                # Annotations in the sources document, they do not type: `float` would become a
                # C double and `dict` would refuse subclasses. Types come from the .pxd files.
                "annotation_typing": False,
                "binding": True,
                "embedsignature": True,
            },
        )
        distribution = Distribution({"ext_modules": extensions, "script_name": "hatch_build.py"})
        command = distribution.get_command_obj("build_ext")
        command.inplace = True
        command.build_temp = "build/temp"
        command.ensure_finalized()
        command.run()
        built = [Path(command.get_ext_fullpath(ext.name)) for ext in extensions]
        MANIFEST.write_text(json.dumps(source_digests(Path(".")), indent=2, sort_keys=True) + "\n")
    finally:
        os.chdir(previous)
    return [root / path for path in built] + [root / MANIFEST]


def remove_builds(root: Path) -> None:
    """Remove in-place extension modules, which Python would import instead of the sources."""
    for module in MODULES + FAST_MODULES:
        for path in (root / PACKAGE).glob(f"{module}.*.so"):
            path.unlink()
    (root / MANIFEST).unlink(missing_ok=True)


class CustomBuildHook(BuildHookInterface):
    def dependencies(self) -> list[str]:
        # What the compilation needs, only when it runs (the service image skips it).
        return [] if skip_requested() else ["Cython>=3.1", "setuptools>=70"]

    def initialize(self, version: str, build_data: dict) -> None:
        if self.target_name != "wheel":
            return
        root = Path(self.root).resolve()
        if skip_requested():
            if version == "editable":
                remove_builds(root)  # an earlier build would still be imported
            return
        from setuptools.errors import CCompilerError, ExecError, PlatformError

        try:
            built = compile_transcoder(root)
        except (CCompilerError, ExecError, PlatformError) as error:
            remove_builds(root)
            sys.stderr.write(
                f"WARNING: the JSON state transcoder was not compiled ({type(error).__name__}: {error});"
                " the storage will run its pure Python modules. Install a C compiler and rebuild,"
                f" or set {SKIP_VARIABLE}=1 to say that this is intended.\n"
            )
            return
        build_data["pure_python"] = False
        build_data["infer_tag"] = True
        # The built files are ignored by git; artifacts are shipped all the same.
        build_data["artifacts"].extend(str(path.relative_to(root)) for path in built)
