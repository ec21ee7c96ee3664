"""Static checks of the deployment files: the Kubernetes manifests in infra/k8s/ (core kinds
against the Kubernetes OpenAPI schemas shipped by kubernetes-validate, strict; the KEDA
ScaledObject by hand) and infra/docker-compose.yml. No cluster, no Docker engine needed."""

from __future__ import annotations

import copy
import functools
import os
import re
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlparse

import kubernetes_validate
import pytest
import yaml

from workers import keys
from workers.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "infra" / "k8s"
COMPOSE = ROOT / "infra" / "docker-compose.yml"
K8S_FILES = sorted(K8S.glob("*.yaml"))
# Schemas kubernetes-validate ships (its kubernetes-json-schema/v1.37.0-local-strict).
K8S_VERSION = "1.37"
CORE_KINDS = {"Deployment", "Service", "ConfigMap", "Secret", "CronJob", "Namespace"}
NAMESPACE = "prism"
WORKER, EXPORTER, CRONJOB = "prism-worker", "prism-exporter", "prism-nightly"
LONGEST_JOB_S = 3600  # PRISM_TASK_TIME_LIMIT_S's default


@functools.cache
def _load(path: Path) -> tuple[dict, ...]:
    return tuple(doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None)


def _manifests() -> list[dict]:
    return [doc for path in K8S_FILES for doc in _load(path)]


def _one(kind: str, name: str | None = None) -> dict:
    found = [d for d in _manifests() if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''} in infra/k8s/, found {len(found)}"
    return found[0]


def _container(workload: dict, name: str | None = None) -> dict:
    containers = _pod_spec(workload)["containers"]
    if name is None:
        assert len(containers) == 1, f"{workload['metadata']['name']}: expected one container"
        return containers[0]
    return next(c for c in containers if c["name"] == name)


def _pod_spec(workload: dict) -> dict:
    spec = workload["spec"]
    return (
        spec["jobTemplate"]["spec"]["template"]["spec"] if workload["kind"] == "CronJob" else spec["template"]["spec"]
    )


def _quantity(value: str | int) -> float:
    """A Kubernetes quantity as a number: '500m' -> 0.5, '2' -> 2, '1Gi' -> 2**30."""
    units = {"m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    match = re.fullmatch(r"([0-9.]+)(m|k|M|G|Ki|Mi|Gi|Ti)?", str(value))
    assert match, f"not a quantity: {value!r}"
    return float(match[1]) * units.get(match[2] or "", 1)


def _config() -> dict[str, str]:
    return _one("ConfigMap")["data"]


# -- every file ----------------------------------------------------------------------------


def test_the_manifests_are_there():
    assert K8S_FILES, "no infra/k8s/*.yaml"
    assert not list(K8S.glob("*.yml")), "name manifests *.yaml: the checks below read only those"
    kinds = sorted(d["kind"] for d in _manifests())
    assert kinds == sorted(
        ["Namespace", "ConfigMap", "Secret", "Deployment", "Deployment", "Service", "CronJob", "ScaledObject"]
    )
    # kubectl apply -f infra/k8s/ goes in name order: the namespace must come first.
    assert _load(K8S_FILES[0])[0]["kind"] == "Namespace"


@pytest.mark.parametrize("path", K8S_FILES, ids=lambda p: p.name)
def test_each_manifest_parses_and_core_kinds_validate_strictly(path):
    docs = _load(path)
    assert docs, f"{path.name} holds no YAML document"
    for doc in docs:
        assert isinstance(doc, dict) and {"apiVersion", "kind", "metadata"} <= doc.keys(), doc
        if doc["kind"] == "Namespace":
            assert doc["metadata"]["name"] == NAMESPACE
        else:
            assert doc["metadata"].get("namespace") == NAMESPACE, f"{doc['kind']} {doc['metadata']['name']}"
        if doc["kind"] in CORE_KINDS:
            # Raises kubernetes_validate.ValidationError on a wrong type, a missing required
            # field, or (strict) any field the schema does not know.
            assert kubernetes_validate.validate(doc, K8S_VERSION, strict=True) == K8S_VERSION
        else:
            assert doc["kind"] == "ScaledObject", f"{doc['kind']}: no check covers this kind"


def test_strict_validation_rejects_an_unknown_field():
    """The validator is not vacuous: a misspelled field in the worker fails it."""
    broken = copy.deepcopy(_one("Deployment", WORKER))
    _container(broken)["livenesProbe"] = _container(broken)["livenessProbe"]
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSION, strict=True)
    broken = copy.deepcopy(_one("Deployment", WORKER))
    broken["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = "3700"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSION, strict=True)


# -- settings --------------------------------------------------------------------------------


def test_configmap_holds_settings_the_fleet_reads(monkeypatch):
    data = _config()
    assert all(isinstance(v, str) for v in data.values())
    assert not [k for k in data if re.search("KEY|SECRET|PASSWORD|TOKEN", k)], "secrets go in the Secret"
    # Settings ignores unknown PRISM_* names: a misspelled key would be silently dropped.
    fields = set(Settings.model_fields)
    unknown = [k for k in data if k.startswith("PRISM_") and k.removeprefix("PRISM_").lower() not in fields]
    assert not unknown, f"not a Settings field: {unknown}"
    for name in [k for k in os.environ if k.startswith("PRISM_")]:
        monkeypatch.delenv(name)
    for name, value in data.items():
        monkeypatch.setenv(name, value)
    settings = Settings()
    assert not settings.embedded and settings.shared_redis == data["PRISM_BROKER_URL"]
    assert settings.results.startswith("s3://")
    assert settings.llm_limits and all(v.requests or v.tokens for v in settings.llm_limits.values())
    assert settings.task_time_limit_s == LONGEST_JOB_S
    assert settings.visibility_timeout_s > settings.task_time_limit_s
    assert settings.budget_usd is not None and settings.budget_usd > 0


def test_secret_is_a_template_with_placeholders_only():
    secret = _one("Secret")
    assert "data" not in secret, "base64 data would hide real values: use stringData placeholders"
    values = secret["stringData"]
    assert {"OPENAI_API_KEY", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} <= values.keys()
    assert all(v.startswith("CHANGE-ME") for v in values.values()), "real keys in the template"


# -- the workers and their autoscaler ----------------------------------------------------------


def test_worker_deployment():
    worker = _one("Deployment", WORKER)
    pod, container = _pod_spec(worker), _container(worker)
    assert "replicas" not in worker["spec"], "KEDA owns the scale; a replicas field resets it on every apply"
    assert container["image"] == "prism-fleet:latest"
    assert container.get("command", [])[:4] == ["celery", "-A", "workers.app", "worker"]
    refs = {(next(iter(r)), next(iter(r.values()))["name"]) for r in container["envFrom"]}
    assert refs == {
        ("configMapRef", _one("ConfigMap")["metadata"]["name"]),
        ("secretRef", _one("Secret")["metadata"]["name"]),
    }

    # A warm shutdown finishes the longest job before the kubelet's SIGKILL.
    grace = pod["terminationGracePeriodSeconds"]
    assert grace > LONGEST_JOB_S and grace > int(_config()["PRISM_TASK_TIME_LIMIT_S"])
    assert "preStop" not in container.get("lifecycle", {}), "SIGTERM is Celery's warm shutdown: no preStop needed"

    resources = container["resources"]
    for key in ("cpu", "memory"):
        request, limit = resources["requests"][key], resources["limits"][key]
        assert 0 < _quantity(request) <= _quantity(limit), f"{key}: request {request}, limit {limit}"

    probe = container["livenessProbe"]
    command = probe["exec"]["command"]
    assert command[:2] == ["sh", "-c"], "$HOSTNAME needs a shell to expand"
    assert "celery -A workers.app inspect ping -d celery@$HOSTNAME" in command[2]
    assert probe["timeoutSeconds"] >= 10 and probe["periodSeconds"] >= 30

    security = pod.get("securityContext", {}) | container.get("securityContext", {})
    assert security["runAsNonRoot"] is True
    # The image's USER is a name; runAsNonRoot can only be checked against a numeric uid.
    assert security["runAsUser"] > 0


def test_scaledobject_scales_the_worker_on_the_celery_list():
    scaled = _one("ScaledObject")
    assert scaled["apiVersion"] == "keda.sh/v1alpha1"
    spec = scaled["spec"]
    target = spec["scaleTargetRef"]
    assert target["name"] == WORKER == _one("Deployment", WORKER)["metadata"]["name"]
    assert target.get("kind", "Deployment") == "Deployment"
    if "envSourceContainerName" in target:
        assert _container(_one("Deployment", WORKER), target["envSourceContainerName"])
    assert spec["minReplicaCount"] in (0, 1)
    assert spec["maxReplicaCount"] == 20
    assert isinstance(spec["cooldownPeriod"], int) and spec["cooldownPeriod"] > 0

    triggers = [t for t in spec["triggers"] if t["type"] == "redis"]
    # Every priority list of the queue is watched: work at any priority scales the workers.
    assert [t["metadata"]["listName"] for t in triggers] == keys.queue_lists(), spec["triggers"]
    meta = triggers[0]["metadata"]
    assert all(isinstance(t["metadata"]["listLength"], str) and int(t["metadata"]["listLength"]) > 0 for t in triggers)
    # The address KEDA watches is the broker's: from the worker's environment (its ConfigMap).
    address = _config()[meta["addressFromEnv"]] if "addressFromEnv" in meta else meta["address"]
    broker = urlparse(_config()["PRISM_BROKER_URL"])
    assert address == f"{broker.hostname}:{broker.port or 6379}"
    assert meta.get("databaseIndex", "0") == (broker.path.strip("/") or "0")


# -- the exporter ------------------------------------------------------------------------------


def test_exporter_deployment_and_service():
    exporter, service = _one("Deployment", EXPORTER), _one("Service", EXPORTER)
    container = _container(exporter)
    assert container["command"] == ["prism", "exporter", "--port", "9808"]
    assert {"configMapRef": {"name": _one("ConfigMap")["metadata"]["name"]}} in container["envFrom"]
    port = next(p for p in container["ports"] if p["containerPort"] == 9808)

    labels = exporter["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items(), "the Service selects no exporter pod"
    assert exporter["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert (
        not service["spec"]["selector"].items()
        <= _one("Deployment", WORKER)["spec"]["template"]["metadata"]["labels"].items()
    )
    service_port = next(p for p in service["spec"]["ports"] if p["port"] == 9808)
    assert service_port["targetPort"] in (9808, port.get("name"))

    annotations = service["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == "9808"
    assert annotations.get("prometheus.io/path", "/metrics") == "/metrics"


# -- the nightly producer ----------------------------------------------------------------------


def test_nightly_cronjob(tmp_path):
    cron = _one("CronJob", CRONJOB)
    assert cron["spec"]["schedule"] == "0 2 * * *"
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    assert _pod_spec(cron)["restartPolicy"] == "OnFailure"
    container = _container(cron)
    assert container["image"] == "prism-fleet:latest"
    assert {next(iter(r)) for r in container["envFrom"]} == {"configMapRef", "secretRef"}
    command = container["command"]
    assert command[:2] == ["sh", "-c"] and len(command) == 3

    # Run the script with a stand-in `prism` that prints its arguments: $(date ...) must expand.
    fake = tmp_path / "prism"
    fake.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    fake.chmod(0o755)
    env = {"PATH": f"{tmp_path}:{os.environ['PATH']}", "TZ": "UTC"}
    before = datetime.now(UTC)
    out = subprocess.run(command, env=env, capture_output=True, text=True, timeout=30, check=True).stdout.split()
    days = {f"nightly-{d:%Y%m%d}" for d in (before, before + timedelta(minutes=1))}
    fetch, run, view = out[: out.index("run")], out[out.index("run") : out.index("view")], out[out.index("view") :]
    assert fetch == [
        "fetch",
        "--out",
        "s3://BUCKET/edgar/",
        "--since",
        "last",
        "--ingest",
        "--corpus",
        "s3://BUCKET/corpus",
    ]
    assert run[:5] == ["run", "--questions", "/etc/prism/questions/questions.jsonl", "--corpus", "s3://BUCKET/corpus"]
    assert run[5:7] == ["--new", "--run-id"] and run[7] in days
    assert view == ["view", run[7], "--out", f"/srv/viewer/{run[7]}"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts == {"questions": "/etc/prism/questions", "viewer": "/srv/viewer"}
    # a step that ends with some failures (exit 3) goes on; another failure stops the night
    fake.write_text('#!/bin/sh\necho "$1"\n[ "$1" = fetch ] && exit 3\n[ "$1" = run ] && exit 1\nexit 0\n')
    stopped = subprocess.run(command, env=env, capture_output=True, text=True, timeout=30)
    assert stopped.stdout.split() == ["fetch", "run"] and stopped.returncode != 0


# -- docker compose ----------------------------------------------------------------------------


def test_docker_compose_file():
    compose = yaml.safe_load(COMPOSE.read_text())
    services = compose["services"]
    assert {"redis", "s3", "worker", "producer", "exporter"} <= services.keys()

    exporter = services["exporter"]
    assert exporter["command"] == ["prism", "exporter", "--port", "9808"]
    assert "9808:9808" in exporter["ports"]
    # The same x-prism-env anchor as the worker and the producer.
    assert exporter["environment"] == services["worker"]["environment"] == services["producer"]["environment"]
    assert exporter["environment"]["PRISM_BROKER_URL"].startswith("redis://redis:")
    for name, service in services.items():
        assert "image" in service or "build" in service, name
        if "build" in service:
            context = (COMPOSE.parent / service["build"]["context"]).resolve()
            assert (context / service["build"].get("dockerfile", "Dockerfile")).is_file(), name
        for dependency in service.get("depends_on", []):
            assert dependency in services, f"{name} depends on unknown service {dependency}"

    # `docker compose config` needs no engine, only the compose plugin; where the plugin is
    # missing, the checks above are what there is.
    docker = shutil.which("docker")
    has_compose = (
        docker is not None
        and subprocess.run([docker, "compose", "version"], capture_output=True, timeout=60).returncode == 0
    )
    if has_compose:
        result = subprocess.run(
            [docker, "compose", "-f", str(COMPOSE), "config", "-q"], capture_output=True, text=True, timeout=120
        )
        assert result.returncode == 0, result.stderr
