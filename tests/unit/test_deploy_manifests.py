"""The example deployment in ``deploy/`` against the real CLI and configuration model.

Docker and Kubernetes do not run here, so these files are checked, not run: every YAML
file parses; every ``llmbridge serve`` command in them (compose, Kubernetes, the
Dockerfile's ``CMD``) parses with the real click command, its environment variables are
ones the CLI or ``load_config`` reads, and the configuration it would load (the file it
mounts, with its flags and environment) validates with ``GatewayConfig`` and carries the
Redis, database, master key and worker settings the manifest gives it; every Secret,
ConfigMap, volume and kustomization reference points at something that exists.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import pytest
import yaml

from llmbridge.cli.serve import serve
from llmbridge.gateway.config import ENVIRONMENT, GatewayConfig, load_config

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
KUBERNETES = DEPLOY / "kubernetes"
COMPOSE = DEPLOY / "docker-compose.yml"
CONFIG = DEPLOY / "llmbridge.yaml"

_COMPOSE_VARIABLE = re.compile(r"\$\{(\w+)(?::?[?-][^}]*)?\}")


@dataclass
class Launch:
    """One way the manifests start ``llmbridge``: its command line, its environment
    (secret references resolved to the Secret's values, compose ``${VAR}`` to a
    placeholder) and the files mounted into its container, by container path."""

    where: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, Path | str] = field(default_factory=dict)


def _documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def _kubernetes() -> list[dict[str, Any]]:
    """The manifests kustomization.yaml applies (not kustomization.yaml itself)."""
    paths = sorted(KUBERNETES.glob("*.yaml"))
    return [doc for p in paths if p.name != "kustomization.yaml" for doc in _documents(p)]


def _by_kind(kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in _kubernetes() if d.get("kind") == kind}


def _secret_value(name: str, key: str) -> str:
    secret = _by_kind("Secret")[name]
    return str(secret["stringData"][key])


def _compose_value(value: object) -> str:
    return _COMPOSE_VARIABLE.sub(lambda m: f"placeholder-{m.group(1).lower()}", str(value))


def _compose_launches() -> Iterator[Launch]:
    compose = yaml.safe_load(COMPOSE.read_text())
    for name, service in compose["services"].items():
        command = service.get("command") or []
        if command[:1] != ["llmbridge"]:
            continue
        env = {k: _compose_value(v) for k, v in (service.get("environment") or {}).items()}
        files: dict[str, Path | str] = {}
        for volume in service.get("volumes") or []:
            source, target = volume.split(":")[:2]
            files[target] = (COMPOSE.parent / source).resolve()
        yield Launch(f"docker-compose.yml service {name}", list(command), env, files)


def _kubernetes_launches() -> Iterator[Launch]:
    config_maps = _by_kind("ConfigMap")
    for kind in ("Deployment", "StatefulSet"):
        for name, workload in _by_kind(kind).items():
            pod = workload["spec"]["template"]["spec"]
            volumes = {v["name"]: v for v in pod.get("volumes") or []}
            for container in pod["containers"]:
                argv = [*container.get("command", []), *container.get("args", [])]
                if argv[:1] != ["llmbridge"]:
                    continue
                env = {}
                for entry in container.get("env") or []:
                    if "value" in entry:
                        env[entry["name"]] = str(entry["value"])
                    else:
                        ref = entry["valueFrom"]["secretKeyRef"]
                        env[entry["name"]] = _secret_value(ref["name"], ref["key"])
                files: dict[str, Path | str] = {}
                for mount in container.get("volumeMounts") or []:
                    source = volumes[mount["name"]]["configMap"]
                    data = config_maps[source["name"]]["data"]
                    for item in source.get("items") or [{"key": k, "path": k} for k in data]:
                        files[f"{mount['mountPath']}/{item['path']}"] = data[item["key"]]
                yield Launch(f"{kind} {name}, container {container['name']}", argv, env, files)


def _dockerfile_launch() -> Launch:
    (line,) = [x for x in (DEPLOY / "Dockerfile").read_text().splitlines() if x.startswith("CMD")]
    compose = yaml.safe_load(COMPOSE.read_text())
    mounts = compose["x-llmbridge"]["volumes"]
    files: dict[str, Path | str] = {
        v.split(":")[1]: (DEPLOY / v.split(":")[0]).resolve() for v in mounts
    }
    return Launch("Dockerfile CMD", json.loads(line.removeprefix("CMD")), {}, files)


LAUNCHES = [*_compose_launches(), *_kubernetes_launches(), _dockerfile_launch()]


def test_every_file_in_deploy_parses() -> None:
    files = sorted([*DEPLOY.glob("*.y*ml"), *KUBERNETES.glob("*.yaml")])
    assert COMPOSE in files and CONFIG in files and len(files) >= 9
    for path in files:
        assert _documents(path), f"{path} is empty"
    for doc in _kubernetes():
        assert {"apiVersion", "kind", "metadata"} <= doc.keys(), doc
        assert doc["metadata"].get("name"), doc


def test_compose_and_kubernetes_both_start_llmbridge() -> None:
    wheres = [launch.where for launch in LAUNCHES]
    assert sum("docker-compose" in w for w in wheres) == 2, wheres  # two replicas
    assert any(w.startswith("Deployment llmbridge") for w in wheres), wheres
    assert _by_kind("Deployment")["llmbridge"]["spec"]["replicas"] >= 2


def _serve_envvars() -> set[str]:
    names: set[str] = set()
    for param in serve.params:
        envvar = getattr(param, "envvar", None)
        if isinstance(envvar, str):
            names.add(envvar)
        elif envvar:
            names.update(envvar)
    return names


@pytest.mark.parametrize("launch", LAUNCHES, ids=lambda launch: launch.where)
def test_each_command_and_its_environment_load_with_the_real_cli_and_config(
    launch: Launch, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert launch.argv[:2] == ["llmbridge", "serve"], launch.argv
    unknown = set(launch.env) - _serve_envvars() - set(ENVIRONMENT)
    assert not unknown, f"{launch.where}: variables neither the CLI nor the config reads"
    # The flags, through click itself: an unknown flag or a bad value raises here.
    for name in [n for n in os.environ if n.startswith("LLMBRIDGE_")]:
        monkeypatch.delenv(name)
    for name, value in launch.env.items():
        monkeypatch.setenv(name, value)
    try:
        context = serve.make_context("serve", launch.argv[2:])
    except click.UsageError as exc:
        pytest.fail(f"{launch.where}: {exc.format_message()}")
    params = dict(context.params)
    mounted = launch.files[params.pop("config_path")]
    if isinstance(mounted, str):  # a ConfigMap's text
        path = tmp_path / "llmbridge.yaml"
        path.write_text(mounted)
        mounted = path
    params.pop("access_log")
    # What `llmbridge serve` would run with (cli/serve.py passes the same overrides).
    config = load_config(mounted, params, environ=launch.env)
    assert isinstance(config, GatewayConfig)
    assert config.server.host == "0.0.0.0" and config.server.port == 11435
    if launch.env:  # compose and Kubernetes; the Dockerfile's CMD has none
        assert config.state.redis_url == launch.env["LLMBRIDGE_REDIS_URL"]
        assert config.database.url == launch.env["LLMBRIDGE_DB"]
        assert config.database.url.startswith("postgresql://")
        assert config.server.master_key == launch.env["LLMBRIDGE_MASTER_KEY"]
        assert config.server.workers == 2
        assert config.server.ledger is True


def test_the_configmap_holds_the_same_config_as_deploy_llmbridge_yaml() -> None:
    text = _by_kind("ConfigMap")["llmbridge-config"]["data"]["llmbridge.yaml"]
    assert yaml.safe_load(text) == yaml.safe_load(CONFIG.read_text())
    config = load_config(CONFIG, environ={})
    route = config.models[0]
    assert [d.name for d in route.deployments] == ["gpu1", "gpu2"]
    assert config.prices


def test_references_point_at_what_exists() -> None:
    kustomization = yaml.safe_load((KUBERNETES / "kustomization.yaml").read_text())
    for resource in kustomization["resources"]:
        assert (KUBERNETES / resource).is_file(), resource
    listed = {KUBERNETES / r for r in kustomization["resources"]}
    unlisted = set(KUBERNETES.glob("*.yaml")) - listed - {KUBERNETES / "kustomization.yaml"}
    assert not unlisted, f"manifests kustomization.yaml does not apply: {unlisted}"
    services = _by_kind("Service")
    workloads = {**_by_kind("Deployment"), **_by_kind("StatefulSet")}
    for name, service in services.items():
        selector = service["spec"]["selector"]
        matched = [
            w
            for w in workloads.values()
            if selector.items() <= w["spec"]["template"]["metadata"]["labels"].items()
        ]
        assert matched, f"Service {name} selects no pods"
        ports = {
            p["name"]
            for w in matched
            for c in w["spec"]["template"]["spec"]["containers"]
            for p in c.get("ports", [])
        }
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in ports, (name, port)
    for workload in workloads.values():
        for container in workload["spec"]["template"]["spec"]["containers"]:
            for entry in container.get("env") or []:
                if "valueFrom" in entry:
                    ref = entry["valueFrom"]["secretKeyRef"]
                    assert _secret_value(ref["name"], ref["key"])
    # The hosts the config and environment name are the services that exist.
    assert {"redis", "postgres", "llmbridge"} <= services.keys()
    compose = yaml.safe_load(COMPOSE.read_text())
    assert {"redis", "postgres", "lb"} <= compose["services"].keys()
    for launch in LAUNCHES:
        for target, source in launch.files.items():
            assert isinstance(source, str) or source.is_file(), (launch.where, target)
    nginx = (DEPLOY / "nginx.conf").read_text()
    haproxy = (DEPLOY / "haproxy.cfg").read_text()
    for name in [n for n in compose["services"] if n.startswith("llmbridge-")]:
        assert f"server {name}:11435" in nginx and f"{name}:11435" in haproxy


def test_the_balancers_forward_the_client_and_the_gateway_believes_only_them() -> None:
    """nginx and HAProxy pass the client's address and scheme, and the Host as the
    browser sent it (the console's Origin check compares the port too); the gateway
    believes forwarded headers from the balancers' network only."""
    nginx = (DEPLOY / "nginx.conf").read_text()
    for line in (
        "proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;",
        "proxy_set_header X-Forwarded-Proto $scheme;",
        "proxy_set_header Host $http_host;",
    ):
        assert line in nginx, line
    haproxy = (DEPLOY / "haproxy.cfg").read_text()
    assert "option forwardfor" in haproxy and "X-Forwarded-Proto https if { ssl_fc }" in haproxy
    server = load_config(CONFIG, environ={}).server
    assert server.trusted_proxies == ("172.16.0.0/12",)
    assert server.forwarded_options() == {
        "proxy_headers": True,
        "forwarded_allow_ips": ["172.16.0.0/12"],
    }
    assert GatewayConfig().server.forwarded_options() == {"proxy_headers": False}
    with pytest.raises(ValueError, match="not an IP address or network"):
        GatewayConfig.model_validate({"server": {"trusted_proxies": ["*"]}})
