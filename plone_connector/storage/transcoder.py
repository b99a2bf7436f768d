"""Which JSON state transcoder runs: the compiled one or the pure Python reference.

The transcoder is three modules (``jsonstate_tree``, ``jsonstate_pickle``, ``jsonstate``).
Installs compile each with Cython from its own source (hatch_build.py), and Python then imports
the extension module instead of the ``.py``. The ``.py`` files stay the reference: this module
can execute them as they are, either beside the compiled ones (the differential tests and the
transcoder benchmark compare the two) or in their place, when ``PLONE_CONNECTOR_PURE_PYTHON``
is set in the environment of the process that opens the storage (a suspected compiler fault
can then be ruled out without a rebuild).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

# hatch_build.py reads this file on its own (no package around it): imports stay in the standard
# library here, and the storage is imported only inside functions.
PACKAGE = "plone_connector.storage"
# In import order: each imports the ones before it.
MODULES = ("jsonstate_tree", "jsonstate_pickle", "jsonstate")
# Compiled-only modules (a .pyx, no .py): fast paths that the reference modules use when present.
FAST_MODULES = ("jsonstate_fast",)
PURE_VARIABLE = "PLONE_CONNECTOR_PURE_PYTHON"

_HERE = Path(__file__).resolve().parent


def is_compiled(module: ModuleType) -> bool:
    """Is this module an extension module (not executed from a .py file)?"""
    return not str(getattr(module, "__file__", "")).endswith(".py")


def pure_requested() -> bool:
    return os.environ.get(PURE_VARIABLE, "").strip().lower() in ("1", "true", "yes")


def load_pure(*, install: bool = False) -> dict[str, ModuleType]:
    """Execute the transcoder's .py sources as modules; return them by short name.

    While they execute, they are the modules of their own names, so each imports the pure
    version of the others. With ``install`` they stay so (every later import gets them);
    otherwise the modules previously registered under those names are put back.
    """
    names = [f"{PACKAGE}.{module}" for module in MODULES]
    previous = {name: sys.modules[name] for name in names if name in sys.modules}
    loaded: dict[str, ModuleType] = {}
    try:
        for module, name in zip(MODULES, names, strict=True):
            spec = importlib.util.spec_from_file_location(name, _HERE / f"{module}.py")
            pure = importlib.util.module_from_spec(spec)
            sys.modules[name] = pure
            spec.loader.exec_module(pure)
            loaded[module] = pure
    finally:
        if not install or len(loaded) != len(MODULES):
            for name in names:
                sys.modules.pop(name, None)
            sys.modules.update(previous)
    if install:
        package = sys.modules.get(PACKAGE)
        if package is not None:
            for module in MODULES:
                setattr(package, module, loaded[module])
    return loaded


def active() -> str:
    """"compiled" or "pure": the transcoder the storage uses in this process."""
    from plone_connector.storage import jsonstate

    return "compiled" if is_compiled(jsonstate) else "pure"
