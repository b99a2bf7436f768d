"""A stock Plone site (ZCatalog, plone.restapi) holding the service's load test corpus, served over HTTP.

Used by ``search_run.py`` for the comparison with plone.restapi's ``@search``. A Zope instance in a
folder of its own (``etc/zope.conf``, ``etc/site.zcml``, ``etc/zope.ini``, ``var/Data.fs``, a
FileStorage), made by ``_plone_build.py`` under ``zconsole run`` and served by ``runwsgi`` (waitress,
Zope's own WSGI set-up), as the project's Plone image serves it.

Making a site of 100,000 objects takes many minutes, so it is kept: under ``.plonedata/`` (ignored
by git), in a folder named by the object count and the corpus version, made in a temporary folder
and renamed into place only once complete. The version changes with ``CORPUS_VERSION`` and with
the source of the corpus generator and of the build script, so a changed corpus is made anew.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".plonedata"
BUILD_SCRIPT = Path(__file__).with_name("_plone_build.py")
SITE_ID = "plone"
# Bump when the mapping of corpus entries to Plone content changes in a way the sources do not show.
CORPUS_VERSION = 1
COMPLETE = "complete"  # the marker file of a finished build

ZOPE_CONF = """\
%define INSTANCE {instance}
instancehome $INSTANCE
clienthome $INSTANCE/var
debug-mode off
security-policy-implementation C
verbose-security off
default-zpublisher-encoding utf-8

<zodb_db main>
    mount-point /
    cache-size {cache_size}
    <filestorage>
        path $INSTANCE/var/Data.fs
        blob-dir $INSTANCE/var/blobs
    </filestorage>
</zodb_db>
"""

# Plone's own configuration only: plone.autoinclude loads the add-ons of the environment (the
# connector's ZCML among them), none is installed in the site.
SITE_ZCML = """\
<configure xmlns="http://namespaces.zope.org/zope" xmlns:five="http://namespaces.zope.org/five">
  <include package="Zope2.App" />
  <include package="Products.CMFPlone" file="meta.zcml" />
  <five:loadProducts file="meta.zcml" />
  <include package="Products.CMFPlone" />
  <five:loadProducts />
  <five:loadProductsOverrides />
</configure>
"""

# Waitress with Zope's default four threads; no request log (it would cost the site CPU).
ZOPE_INI = """\
[app:zope]
use = egg:Zope#main
zope_conf = %(here)s/zope.conf

[server:main]
use = egg:waitress#main
listen = %(http_address)s
threads = {threads}

[pipeline:main]
pipeline =
    egg:Zope#httpexceptions
    zope
"""


def corpus_version() -> str:
    """CORPUS_VERSION and a digest of what decides the site's content."""
    from catalog_service.demo import objects, plone_metadata

    digest = hashlib.sha256()
    for source in (inspect.getsource(objects), inspect.getsource(plone_metadata), BUILD_SCRIPT.read_text()):
        digest.update(source.encode())
    return f"v{CORPUS_VERSION}-{digest.hexdigest()[:10]}"


def site_folder(objects: int, cache: Path = CACHE) -> Path:
    return cache / f"plone-{objects}-{corpus_version()}"


def write_instance(folder: Path, cache_size: int, threads: int) -> Path:
    """The instance's configuration files; returns the path of its zope.conf."""
    etc = folder / "etc"
    etc.mkdir(parents=True, exist_ok=True)
    (folder / "var").mkdir(exist_ok=True)
    (etc / "zope.conf").write_text(ZOPE_CONF.format(instance=folder, cache_size=cache_size))
    (etc / "site.zcml").write_text(SITE_ZCML)
    (etc / "zope.ini").write_text(ZOPE_INI.format(threads=threads))
    return etc / "zope.conf"


def bin_path(name: str) -> str:
    return str(Path(sys.executable).parent / name)


def ensure_site(objects: int, cache: Path = CACHE, log=sys.stderr) -> Path:
    """The folder of a complete site of ``objects`` objects: the kept one, or one made now."""
    folder = site_folder(objects, cache)
    if (folder / COMPLETE).exists():
        print(f"plone: the site of {objects:,} objects kept in {folder.relative_to(cache.parent)}", file=log)
        return folder
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    conf = write_instance(partial, cache_size=30_000, threads=1)
    print(f"plone: making a site of {objects:,} objects (kept for later runs)", file=log, flush=True)
    began = time.monotonic()
    with (partial / "build.log").open("w") as out:
        built = subprocess.run([bin_path("zconsole"), "run", str(conf), str(BUILD_SCRIPT), str(objects)],
                               stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    if built.returncode != 0:
        tail = (partial / "build.log").read_text(errors="replace")[-3000:]
        raise RuntimeError(f"the Plone site was not made (exit {built.returncode}):\n{tail}")
    (partial / COMPLETE).write_text(f"{objects} objects in {time.monotonic() - began:.0f} s\n")
    shutil.rmtree(folder, ignore_errors=True)
    partial.rename(folder)
    # The configuration names the folder it was written in: written again for the final one.
    write_instance(folder, cache_size=30_000, threads=1)
    print(f"plone: made in {time.monotonic() - began:.0f} s", file=log)
    return folder


@dataclass
class PloneServer:
    url: str  # the site's address: http://127.0.0.1:PORT/plone
    process: subprocess.Popen


@contextmanager
def serve(folder: Path, port: int, cache_size: int = 30_000, threads: int = 4, log_path: Path | None = None):
    """Zope serving the site on 127.0.0.1:``port`` until the block ends."""
    conf = write_instance(folder, cache_size, threads)
    log = open(log_path or folder / "serve.log", "w")  # noqa: SIM115 - closed below
    process = subprocess.Popen([bin_path("runwsgi"), str(conf.with_name("zope.ini")),
                                f"http_address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT,
                               cwd=folder, env={**os.environ, "PYTHONPATH": str(ROOT)})
    server = PloneServer(url=f"http://127.0.0.1:{port}/{SITE_ID}", process=process)
    try:
        wait_ready(server, log.name)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def wait_ready(server: PloneServer, log_name: str, seconds: float = 300) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError("Zope exited: " + Path(log_name).read_text(errors="replace")[-3000:])
        try:
            if httpx.get(server.url + "/@search?b_size=1", headers={"Accept": "application/json"},
                         timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"Zope did not answer {server.url}/@search in {seconds:.0f} s")
