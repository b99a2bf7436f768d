"""docker-compose.yml: valid by the Compose Specification's schema, and consistent with itself,
with the images it builds and with the settings the service really reads."""

from __future__ import annotations

import copy
import json
import os
import re
from importlib import resources
from pathlib import Path
from urllib.parse import urlsplit

import jsonschema
import pytest

from catalog_service.settings import Settings
from tests.deploy.compose import (
    ROOT,
    InterpolationError,
    env_of,
    interpolate,
    load_compose,
    raw_compose,
    read_env_file,
)

PGBOUNCER_ENV = ROOT / "deploy" / "pgbouncer.env"
SERVICE_PORT = 8080
# One-shot jobs: they run to completion, so they have no healthcheck and no restart.
JOBS = {"migrate"}
CATALOG_SERVICES = {"catalog", "migrate"}


def compose_schema() -> dict:
    # The Compose Specification's own schema (Apache-2.0), as vendored and kept current by
    # check-jsonschema (see its builtin_schemas/vendor/licenses).
    vendor = resources.files("check_jsonschema.builtin_schemas.vendor")
    return json.loads(vendor.joinpath("compose-spec.json").read_text())


def validator() -> jsonschema.protocols.Validator:
    schema = compose_schema()
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def variants() -> dict[str, dict]:
    return {
        "defaults": load_compose({}),
        "pgbouncer": load_compose(read_env_file(PGBOUNCER_ENV, {})),
    }


@pytest.fixture(scope="module", params=["defaults", "pgbouncer"])
def compose(request) -> dict:
    return variants()[request.param]


# --- interpolation, as Compose does it -------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "env", "expected"),
    [
        ("$$HOME", {"HOME": "x"}, "$HOME"),
        ("${A:-d}", {"A": ""}, "d"),
        ("${A-d}", {"A": ""}, ""),
        ("${A:-${B:-${C-deep}}}", {}, "deep"),
        ("${A:+set}", {"A": "1"}, "set"),
        ("${A:+set}", {"A": ""}, ""),
        ("[\"${A:-x}\"]", {}, '["x"]'),
        ("pre-$A-post", {"A": "v"}, "pre-v-post"),
    ],
)
def test_interpolation_follows_compose_rules(text, env, expected):
    assert interpolate(text, env) == expected


def test_interpolation_required_variable_raises():
    with pytest.raises(InterpolationError, match="NEED"):
        interpolate("${NEED:?set it}", {})


# --- the Compose Specification schema ----------------------------------------------------------


def test_raw_file_is_valid_compose():
    errors = sorted(validator().iter_errors(raw_compose()), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors)


def test_interpolated_file_is_valid_compose(compose):
    errors = list(validator().iter_errors(compose))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors)


@pytest.mark.parametrize(
    "mutate",
    [
        lambda c: c["services"]["catalog"].__setitem__("helthcheck", {}),
        lambda c: c["services"]["catalog"]["depends_on"]["migrate"].__setitem__("condition", "done"),
        lambda c: c["services"]["catalog"]["deploy"].__setitem__("replicas", [2]),
    ],
    ids=["unknown-key", "bad-condition", "bad-replicas"],
)
def test_schema_rejects_broken_files(mutate):
    # The schema check must be able to fail: a misspelt key or a bad value is caught.
    broken = copy.deepcopy(load_compose({}))
    mutate(broken)
    assert list(validator().iter_errors(broken))


# --- consistency ------------------------------------------------------------------------------


def dockerfile_has_healthcheck(service: dict) -> bool:
    build = service.get("build")
    if not build:
        return False
    dockerfile = ROOT / (build.get("context", ".") if isinstance(build, dict) else build)
    dockerfile = dockerfile / build.get("dockerfile", "Dockerfile")
    return re.search(r"^HEALTHCHECK\s+(?!NONE)", dockerfile.read_text(), re.M) is not None


def test_every_long_running_service_has_a_healthcheck(compose):
    for name, service in compose["services"].items():
        if name in JOBS:
            assert service.get("restart") == "no", name
            continue
        check = service.get("healthcheck", {})
        assert check.get("test") and not check.get("disable"), f"{name} has no healthcheck"
        assert check["test"][0] in ("CMD", "CMD-SHELL"), name


def test_depends_on_targets_exist_and_can_satisfy_their_condition(compose):
    services = compose["services"]
    for name, service in services.items():
        for target, dependency in (service.get("depends_on") or {}).items():
            assert target in services, f"{name} depends on unknown service {target}"
            assert target != name
            condition = dependency["condition"]
            if condition == "service_healthy":
                assert services[target].get("healthcheck") or dockerfile_has_healthcheck(services[target])
            elif condition == "service_completed_successfully":
                assert target in JOBS, f"{name} waits for {target} to finish, but it is no job"
            # A dependency on a profile-only service must be optional, or `up` without it fails.
            if services[target].get("profiles") and not services[name].get("profiles"):
                assert dependency.get("required") is False, f"{name} -> {target}"


def test_no_dependency_cycles(compose):
    graph = {name: set(service.get("depends_on") or {}) for name, service in compose["services"].items()}
    done: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, f"dependency cycle: {' -> '.join((*path, name))}"
        if name not in done:
            for target in graph[name]:
                visit(target, (*path, name))
            done.add(name)

    for name in graph:
        visit(name, ())


def test_service_replicas_wait_for_migrations_and_do_not_migrate_themselves(compose):
    catalog = compose["services"]["catalog"]
    assert catalog["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert compose["services"]["migrate"]["command"] == ["catalog-service", "migrate"]
    settings = settings_of(catalog)
    assert settings.migrate_on_start is False
    assert int(catalog["deploy"]["replicas"]) >= 2


def settings_of(service: dict) -> Settings:
    """The service's own Settings, built from exactly the environment compose gives the container."""
    env = env_of(service)
    saved = {key: os.environ.pop(key) for key in list(os.environ) if key.startswith("CATALOG_")}
    saved_url = os.environ.pop("DATABASE_URL", None)
    try:
        os.environ.update(env)
        return Settings(_env_file=None)
    finally:
        for key in env:
            os.environ.pop(key, None)
        os.environ.update(saved)
        if saved_url is not None:
            os.environ["DATABASE_URL"] = saved_url


def test_catalog_environment_names_only_real_settings(compose):
    fields = {f"CATALOG_{name.upper()}" for name in Settings.model_fields} | {"DATABASE_URL"}
    for name in CATALOG_SERVICES:
        env = env_of(compose["services"][name])
        unknown = {key for key in env if key not in fields}
        assert not unknown, f"{name} sets variables the service does not read: {unknown}"


def test_catalog_settings_parse_and_point_at_the_right_servers(compose):
    services = compose["services"]
    for name in CATALOG_SERVICES:
        settings = settings_of(services[name])
        primary = urlsplit(settings.database_url)
        assert primary.scheme in ("postgresql", "postgres")
        assert primary.hostname in services, primary.hostname
        assert primary.hostname in services[name]["depends_on"]
        assert settings.replica_urls, "queries should go to the read replica"
        for url in settings.replica_urls:
            host = urlsplit(url).hostname
            assert host in services and "replica" in host
            # Same database and role on the replica: it is a physical copy of the primary.
            assert urlsplit(url).path == primary.path
            assert urlsplit(url).username == primary.username
    # Migrations go straight to the primary, never through a pooler (docs/deploy.md, PgBouncer).
    assert urlsplit(settings_of(services["migrate"]).database_url).hostname == "postgres"


def test_pgbouncer_variant_disables_the_statement_cache():
    pooled = load_compose(read_env_file(PGBOUNCER_ENV, {}))
    settings = settings_of(pooled["services"]["catalog"])
    assert urlsplit(settings.database_url).hostname == "pgbouncer"
    assert settings.statement_cache_size == 0
    assert env_of(pooled["services"]["pgbouncer"])["POOL_MODE"] == "transaction"
    direct = settings_of(load_compose({})["services"]["catalog"])
    assert urlsplit(direct.database_url).hostname == "postgres"
    assert direct.statement_cache_size > 0


def test_ports_are_consistent(compose):
    services = compose["services"]
    published = []
    for name, service in services.items():
        for port in service.get("ports", []):
            host, _, container = str(port).rpartition(":")
            published.append(host)
            assert int(container) == SERVICE_PORT, name
    assert len(published) == len(set(published)), f"a host port is published twice: {published}"
    # Replicas of one service cannot all bind one host port.
    assert "ports" not in services["catalog"]
    command = services["catalog"]["command"]
    assert command[command.index("--port") + 1] == str(SERVICE_PORT)
    haproxy = (ROOT / "deploy" / "haproxy" / "haproxy.cfg").read_text()
    assert re.search(rf"^\s*server-template\s+\S+\s+\d+\s+catalog:{SERVICE_PORT}\s*$", haproxy, re.M)
    assert re.search(rf"^\s*bind\s+:{SERVICE_PORT}\s*$", haproxy, re.M)
    assert urlsplit(env_of(services["plone"])["CATALOG_SERVICE_URL"]).port == SERVICE_PORT
    for name in ("catalog", "plone"):
        probe = " ".join(services[name]["healthcheck"]["test"])
        assert f"127.0.0.1:{SERVICE_PORT}/" in probe, name


def test_load_balancer_routes_only_to_ready_replicas():
    haproxy = (ROOT / "deploy" / "haproxy" / "haproxy.cfg").read_text()
    assert re.search(r"^\s*http-check send meth GET uri /readyz\s*$", haproxy, re.M)
    assert re.search(r"^\s*monitor-uri /lb-healthz\s*$", haproxy, re.M)
    lb = load_compose({})["services"]["lb"]
    assert "/lb-healthz" in " ".join(lb["healthcheck"]["test"])
    template = re.search(r"server-template\s+\S+\s+(\d+)", haproxy)
    assert int(template.group(1)) >= int(load_compose({})["services"]["catalog"]["deploy"]["replicas"])


def test_mounted_files_and_named_volumes_exist(compose):
    declared = set(compose.get("volumes") or {})
    for name, service in compose["services"].items():
        for volume in service.get("volumes", []):
            source, target = volume.split(":")[:2]
            assert target.startswith("/"), name
            if source.startswith("./"):
                path = ROOT / source
                assert path.is_file(), f"{name} mounts missing {source}"
                if target.endswith(".sh"):
                    assert os.access(path, os.X_OK), f"{source} must be executable"
            else:
                assert source in declared, f"{name} uses undeclared volume {source}"


def test_no_hard_coded_secrets():
    # Every password, token or DSN with a password comes through interpolation, and the
    # defaults are visibly for development only.
    raw = raw_compose()
    blocks = [raw.get("x-catalog-env", {}), raw.get("x-replication-env", {})]
    blocks += [service.get("environment") or {} for service in raw["services"].values()]
    secretish = re.compile(r"PASSWORD|TOKEN|SECRET|_URL$|_URLS$|DSN", re.I)
    checked = 0
    for block in blocks:
        for key, value in block.items():
            if key == "<<" or not secretish.search(key) or key == "CATALOG_SERVICE_URL":
                continue
            checked += 1
            assert "${" in str(value), f"{key} is hard-coded"
            defaults = interpolate(str(value), {})
            if re.search(r"PASSWORD|TOKEN|SECRET", key) or "@" in defaults or "password=" in defaults:
                assert "dev-only" in defaults, f"{key}'s default does not say it is for development"
    assert checked >= 10
    for line in PGBOUNCER_ENV.read_text().splitlines():
        if "password" in line.lower() and not line.startswith("#"):
            assert "${POSTGRES_PASSWORD" in line


def test_secrets_can_be_set_from_the_environment():
    env = {"POSTGRES_PASSWORD": "s3cret", "CATALOG_ADMIN_TOKEN": "tok", "REPLICATION_PASSWORD": "r"}
    text = json.dumps(load_compose(env))
    assert "dev-only-postgres-password" not in text
    assert "dev-only-admin-token" not in text
    assert "dev-only-replication-password" not in text
    services = load_compose(env)["services"]
    assert env_of(services["plone"])["CATALOG_SERVICE_TOKEN"] == "tok"
    assert urlsplit(settings_of(services["catalog"]).replica_urls[0]).password == "s3cret"


def test_replica_and_primary_agree_on_replication(compose):
    services = compose["services"]
    primary, replica = env_of(services["postgres"]), env_of(services["postgres-replica"])
    assert replica["REPLICATION_SLOT"] in primary["REPLICATION_SLOTS"].split(",")
    assert replica["REPLICATION_USER"] == primary["REPLICATION_USER"]
    assert replica["REPLICATION_PASSWORD"] == primary["REPLICATION_PASSWORD"]
    assert replica["PRIMARY_HOST"] == "postgres"
    assert services["postgres"]["image"] == services["postgres-replica"]["image"]
    assert "hot_standby=on" in services["postgres-replica"]["command"]


def test_images_are_pinned_by_tag(compose):
    for name, service in compose["services"].items():
        image = service.get("image")
        assert image, name
        if "build" in service:
            continue
        repository, _, tag = image.rpartition(":")
        assert repository and tag and tag != "latest", f"{name}: {image}"


def test_env_file_lines_are_well_formed():
    values = read_env_file(PGBOUNCER_ENV, {})
    assert Path(PGBOUNCER_ENV).exists() and "CATALOG_DATABASE_URL" in values
