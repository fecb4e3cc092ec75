"""deploy/ and the Dockerfile, checked without a cluster or a Docker engine: every YAML
parses; the Kubernetes manifests validate against the Kubernetes schemas (kubernetes-validate,
schemas shipped in the wheel, strict: unknown fields fail) and the custom resources against
tests/schemas/crds.json; the manifests, the compose file, the dashboard and the image agree
with each other; and (integration) every metric the dashboard and the autoscaler read is one
that the real tritonserver exports. `make test` also runs hadolint and checkov on them."""

from __future__ import annotations

import copy
import glob
import json
import os
import re
import urllib.request

import jsonschema
import kubernetes_validate
import pytest
import yaml

from readability_triton.repository import releases

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEPLOY = os.path.join(ROOT, "deploy")
K8S = os.path.join(DEPLOY, "k8s")
KSERVE = os.path.join(DEPLOY, "kserve")
CRDS = json.load(open(os.path.join(ROOT, "tests", "schemas", "crds.json"), encoding="utf-8"))
#: The oldest Kubernetes release the manifests are written for, and the newest schemas shipped.
K8S_VERSIONS = ("1.30.0", kubernetes_validate.latest_version())
#: Metrics Triton exports only where it sees a GPU (docs: metrics.md, "GPU Metrics"); the
#: CPU-only test server cannot show them, so they are checked against this list.
GPU_METRICS = {
    "nv_gpu_utilization",
    "nv_gpu_memory_total_bytes",
    "nv_gpu_memory_used_bytes",
    "nv_gpu_power_usage",
    "nv_gpu_power_limit",
    "nv_energy_consumption",
}


class _Loader(yaml.SafeLoader):
    """YAML as compose reads it: `!reset` (compose 2.24+) clears an inherited value."""


_Loader.add_constructor("!reset", lambda loader, node: None)


def load_all(path: str) -> list:
    with open(path, encoding="utf-8") as handle:
        return [doc for doc in yaml.load_all(handle, Loader=_Loader) if doc is not None]


def load(path: str):
    (doc,) = load_all(path)
    return doc


def resources() -> dict[str, dict]:
    """Every Kubernetes object of deploy/k8s (through its kustomization) and deploy/kserve, by kind."""
    kustomization = load(os.path.join(K8S, "kustomization.yaml"))
    paths = [os.path.join(K8S, name) for name in kustomization["resources"]]
    paths += sorted(glob.glob(os.path.join(KSERVE, "*.yaml")))
    out: dict[str, dict] = {}
    for path in paths:
        for doc in load_all(path):
            key = doc["kind"] if doc["kind"] not in out else f"{doc['kind']}/{doc['metadata']['name']}"
            assert key not in out, f"two {key} objects"
            out[key] = doc
    return out


BUILTIN = (
    "ServiceAccount",
    "PersistentVolumeClaim",
    "Deployment",
    "Service",
    "NetworkPolicy",
    "HorizontalPodAutoscaler",
    "Ingress",
    "Ingress/readability-triton-grpc",
)
CUSTOM = ("ServiceMonitor", "ServingRuntime", "InferenceService")


def dockerfile() -> str:
    with open(os.path.join(ROOT, "Dockerfile"), encoding="utf-8") as handle:
        return handle.read()


def dockerfile_cmd() -> list[str]:
    text = dockerfile().replace("\\\n", " ")
    (cmd,) = re.findall(r"^CMD (\[.*\])\s*$", text, flags=re.M)
    return json.loads(cmd)


def dockerfile_env(name: str) -> str:
    (value,) = re.findall(rf"\b{name}=(\S+)", dockerfile().split("\nENV ", 1)[1])
    return value


def dockerfile_arg(name: str) -> str:
    (value,) = re.findall(rf"^ARG {name}=(\S+)$", dockerfile(), flags=re.M)
    return value


# ------------------------------------------------------------------------ parsing


def test_every_yaml_and_json_file_parses():
    files = sorted(glob.glob(os.path.join(DEPLOY, "**", "*.y*ml"), recursive=True))
    assert len(files) >= 14, files
    for path in files:
        assert load_all(path), f"{path}: empty"
    for path in glob.glob(os.path.join(DEPLOY, "**", "*.json"), recursive=True):
        json.load(open(path, encoding="utf-8"))


def test_the_kustomization_lists_every_manifest():
    listed = set(load(os.path.join(K8S, "kustomization.yaml"))["resources"])
    present = {os.path.basename(p) for p in glob.glob(os.path.join(K8S, "*.yaml"))} - {"kustomization.yaml"}
    assert listed == present
    assert sorted(resources()) == sorted(BUILTIN + CUSTOM)


# ------------------------------------------------------------------------ schemas


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("kind", BUILTIN)
def test_builtin_objects_validate_against_the_kubernetes_schemas(kind, version):
    kubernetes_validate.validate(resources()[kind], version, strict=True)


def test_the_validators_catch_a_misspelt_field():
    """Negative controls: the same objects with one field misspelt fail, so the two tests
    above and below can fail."""
    deployment = copy.deepcopy(resources()["Deployment"])
    deployment["spec"]["template"]["spec"]["containers"][0]["imagePullPolicey"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, K8S_VERSIONS[0], strict=True)
    monitor = copy.deepcopy(resources()["ServiceMonitor"])
    monitor["spec"]["endpoints"][0]["intervall"] = "15s"
    with pytest.raises(jsonschema.ValidationError):
        _validate_custom(monitor)


def _validate_custom(doc: dict) -> None:
    schema = {**CRDS[doc["kind"]], "definitions": CRDS["definitions"]}
    jsonschema.validate(doc, schema)
    # ObjectMeta, and the containers of a ServingRuntime, with the built-in schemas.
    kubernetes_validate.validate(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": doc["metadata"]}, K8S_VERSIONS[0], strict=True
    )
    containers = doc["spec"].get("containers")
    if containers:
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "check"}, "spec": {"containers": containers}}
        kubernetes_validate.validate(pod, K8S_VERSIONS[0], strict=True)


@pytest.mark.parametrize("kind", CUSTOM)
def test_custom_resources_validate(kind):
    _validate_custom(resources()[kind])


def test_the_kustomization_validates():
    jsonschema.validate(
        load(os.path.join(K8S, "kustomization.yaml")), {**CRDS["Kustomization"], "definitions": CRDS["definitions"]}
    )


# ---------------------------------------------------------- the pieces agree


def test_manifests_agree_with_each_other_and_with_the_image():
    r = resources()
    pod = r["Deployment"]["spec"]["template"]["spec"]
    (init,), (main,) = pod["initContainers"], pod["containers"]
    image, tag = main["image"].rsplit(":", 1)
    version, profile = tag.split("-")
    assert releases.release(version).version == version
    assert init["image"] == main["image"]
    # The init container assembles the artifact set for the image's release and profile.
    command = init["command"]
    assert command[:2] == ["readability-triton", "assemble"]
    assert command[command.index("--profile") + 1] == profile
    assert command[command.index("--triton-version") + 1] == version
    assert {m["mountPath"] for m in init["volumeMounts"]} >= {"/artifacts", "/models"}
    # The server runs as the image's CMD does, as the image's user.
    assert main["args"] == dockerfile_cmd()
    assert pod["securityContext"]["runAsUser"] == int(dockerfile_arg("UID"))
    assert pod["securityContext"]["runAsNonRoot"] is True
    for container in (init, main):
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert main["resources"]["limits"]["nvidia.com/gpu"] == 1
    # Probes: serve's liveness and readiness on its health port (the image's), the startup
    # probe long enough to load models; the admin key from a Secret, never from the image.
    assert main["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert main["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "health"}
    startup = main["startupProbe"]
    assert startup["httpGet"]["path"] == "/readyz"
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 300
    assert pod["terminationGracePeriodSeconds"] >= 30 + 10  # serve's drain, then the exit
    (key,) = [e for e in main["env"] if e["name"] == "READABILITY_TRITON_ADMIN_KEY_FILE"]
    (mount,) = [m for m in main["volumeMounts"] if key["value"].startswith(m["mountPath"] + "/")]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["secret"]["secretName"] == "readability-admin-key"
    assert "READABILITY_TRITON_ADMIN_KEY" not in dockerfile().split("\nENV ", 1)[1]  # never baked into the image
    assert {m["mountPath"] for m in main["volumeMounts"]} >= {"/models", "/dev/shm", "/tmp"}
    # Service, ServiceMonitor, NetworkPolicy: the container's named ports (the health port
    # for Prometheus: the front door's metrics; the kubelet's probes need no Service).
    ports = {p["name"]: p["containerPort"] for p in main["ports"]}
    assert ports == {"http": 8000, "grpc": 8001, "metrics": 8002, "health": 8003}
    assert ports["health"] == int(dockerfile_env("READABILITY_TRITON_HEALTH_PORT"))
    service = r["Service"]
    assert {p["name"]: p["targetPort"] for p in service["spec"]["ports"]} == {n: n for n in ports}
    assert service["spec"]["selector"].items() <= pod_labels(r).items()
    monitor = r["ServiceMonitor"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert [(e["port"], e["path"]) for e in monitor["spec"]["endpoints"]] == [
        ("metrics", "/metrics"),
        ("health", "/metrics"),
    ]
    allowed = {p["port"] for rule in r["NetworkPolicy"]["spec"]["ingress"] for p in rule["ports"]}
    assert allowed == set(ports.values())
    # The HPA scales this Deployment on the metric the adapter rule serves.
    hpa = r["HorizontalPodAutoscaler"]
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": r["Deployment"]["metadata"]["name"],
    }
    (metric,) = hpa["spec"]["metrics"]
    served = [rule["name"]["as"] for rule in adapter_rules()]
    assert metric["type"] == "Pods" and metric["pods"]["metric"]["name"] in served
    # kustomize sets the same image; KServe runs the same image on the same release.
    (entry,) = load(os.path.join(K8S, "kustomization.yaml"))["images"]
    assert (entry["name"], entry["newTag"]) == (image, tag)
    runtime = r["ServingRuntime"]
    assert runtime["spec"]["containers"][0]["image"] == main["image"]
    assert runtime["spec"]["containers"][0]["args"][:2] == ["readability-triton", "serve"]
    # The ingress keeps the front door's body limit, and the front door names clients by the
    # header the ingress sets.
    for ingress in load_all(os.path.join(K8S, "ingress.yaml")):
        assert ingress["metadata"]["annotations"]["nginx.ingress.kubernetes.io/proxy-body-size"] == "16m"
    env = {e["name"]: e.get("value") for e in main["env"]}
    assert env["READABILITY_TRITON_CLIENT_HEADER"] == "X-Real-IP"
    model = r["InferenceService"]["spec"]["predictor"]["model"]
    assert model["runtime"] == runtime["metadata"]["name"]
    assert model["runtimeVersion"] == tag
    assert model["modelFormat"]["name"] in {f["name"] for f in runtime["spec"]["supportedModelFormats"]}
    namespaces = {doc["metadata"]["namespace"] for doc in r.values()}
    assert namespaces == {load(os.path.join(K8S, "kustomization.yaml"))["namespace"]}


def pod_labels(r: dict) -> dict:
    return r["Deployment"]["spec"]["template"]["metadata"]["labels"]


def adapter_rules() -> list[dict]:
    return load(os.path.join(K8S, "prometheus-adapter", "values.yaml"))["rules"]["custom"]


def test_compose_wires_server_prometheus_and_grafana():
    compose = load(os.path.join(DEPLOY, "compose.yaml"))
    services = compose["services"]
    assert sorted(services) == ["grafana", "prometheus", "triton"]
    triton = services["triton"]
    assert os.path.isfile(os.path.join(DEPLOY, triton["build"]["context"], "Dockerfile"))
    assert set(triton["build"]["args"]) == {"TRITON_VERSION", "PROFILE", "ARTIFACTS"}
    assert triton["shm_size"] == "1gb" and triton["stop_grace_period"] == "60s"
    assert triton["ports"] == ["8000:8000", "8001:8001"]  # serve's front door, and nothing else
    assert "READABILITY_TRITON_ADMIN_KEY" in triton["environment"]
    # Every bind mount's host side exists (relative to deploy/).
    for name, service in services.items():
        for volume in service.get("volumes", []):
            host = volume.split(":")[0]
            assert os.path.exists(os.path.join(DEPLOY, host)), f"{name}: {host}"
    prometheus = load(os.path.join(DEPLOY, "prometheus", "prometheus.yml"))
    jobs = {job["job_name"]: job["static_configs"][0]["targets"] for job in prometheus["scrape_configs"]}
    assert jobs == {"triton": ["triton:8002"], "front-door": ["triton:8003"]}
    (source,) = load(os.path.join(DEPLOY, "grafana", "provisioning", "datasources", "prometheus.yaml"))["datasources"]
    assert source["url"] == "http://prometheus:9090" and "9090:9090" in services["prometheus"]["ports"]
    (provider,) = load(os.path.join(DEPLOY, "grafana", "provisioning", "dashboards", "readability.yaml"))["providers"]
    mounts = dict(v.split(":")[:2] for v in services["grafana"]["volumes"])
    assert mounts["./grafana/dashboards"] == provider["options"]["path"]
    for panel in dashboard()["panels"]:
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == source["uid"]
    cpu = load(os.path.join(DEPLOY, "compose.cpu.yaml"))["services"]["triton"]
    assert cpu["build"]["args"]["PROFILE"] == "cpu" and cpu["deploy"] is None  # `!reset`: no GPU reservation


def dashboard() -> dict:
    return json.load(open(os.path.join(DEPLOY, "grafana", "dashboards", "readability.json"), encoding="utf-8"))


def test_the_dashboard_is_well_formed():
    board = dashboard()
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    titles = " ".join(p["title"].lower() for p in board["panels"])
    for topic in ("requests per second", "failed", "p99", "queue", "gpu utilisation"):
        assert topic in titles
    for panel in board["panels"]:
        assert panel["targets"] and all(t["expr"] for t in panel["targets"])
        assert {"x", "y", "w", "h"} <= set(panel["gridPos"])


def queried_metrics() -> set[str]:
    exprs = [t["expr"] for p in dashboard()["panels"] for t in p["targets"]]
    for rule in adapter_rules():
        exprs += [rule["seriesQuery"], rule["metricsQuery"]]
    return {name for expr in exprs for name in re.findall(r"\b(nv_[a-z_]+)\b", expr)}


@pytest.mark.integration
def test_every_queried_metric_is_one_triton_exports(tiny_artifacts, tmp_path):
    """The dashboard's and the autoscaler's queries name metrics (and the `quantile`
    label) that the real tritonserver exports, started as serve (the image's CMD) starts it."""
    from served import assemble_portable, score_texts, start_server

    assert dockerfile_cmd()[:2] == ["readability-triton", "serve"]
    repo = assemble_portable(tiny_artifacts, str(tmp_path / "repo"))
    server = start_server(repo, str(tmp_path / "server.log"), str(tmp_path / "backends"))
    assert "--metrics-config=summary_latencies=true" in server.command()
    try:
        score_texts(server, "grpc", ["A short text to count.", "Another one, a little longer than that."])
        with urllib.request.urlopen(server.metrics_url) as reply:
            exported = reply.read().decode()
    finally:
        server.stop()
    names = {m.group(1) for m in re.finditer(r"^(\w+?)(?:\{|\s)", exported, flags=re.M)}
    queried = queried_metrics()
    assert {"nv_inference_request_success", "nv_inference_queue_duration_us"} <= queried
    missing = {n for n in queried - GPU_METRICS if n not in names}
    assert not missing, f"queried but not exported by tritonserver: {sorted(missing)}"
    assert re.search(
        r'nv_inference_request_summary_us\{[^}]*model="readability"[^}]*quantile="0.99"', exported
    ) or re.search(r'nv_inference_request_summary_us\{[^}]*quantile="0.99"[^}]*model="readability"', exported)


# -------------------------------------------------------------------- the image


def test_the_dockerfile_defaults_to_the_tested_release_and_checks_its_stub():
    text = dockerfile()
    assert dockerfile_arg("TRITON_VERSION") == releases.TESTED
    assert dockerfile_arg("PROFILE") == "gpu"
    assert int(dockerfile_arg("UID")) >= 10000
    assert re.search(r"^USER \$\{UID\}$", text, flags=re.M)
    # The health check asks serve's readiness on the port serve listens on.
    probe = r'health --serve \\"127\.0\.0\.1:\$\{READABILITY_TRITON_HEALTH_PORT\}\\" --check ready'
    assert re.search(r"HEALTHCHECK .*\n.*" + probe, text)
    assert dockerfile_cmd()[:2] == ["readability-triton", "serve"]
    assert "releases check --triton-version" in text  # the build fails on a stub or numpy it cannot use
    for command in re.findall(r"release (\w+)(?:\)| >)", text):
        assert command in ("numpy", "requirements", "optional", "extras", "constraints"), command
