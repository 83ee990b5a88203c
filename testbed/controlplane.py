"""A real, throw-away control plane for integration tests.

etcd, kube-apiserver and Kueue's manager run as local processes on free
loopback ports. The binaries come from ``hack/cluster/build.sh`` (built from
the pinned Go wrapper modules in ``hack/cluster/``); the PKI is generated per
run (see ``pki.py``). Nothing here talks to anything but 127.0.0.1.

Entry point: :func:`start_control_plane` (used by the session fixture in
``conftest.py``). Every process logs to ``<work_dir>/logs/<name>.log``.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import functools
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from gpuctl.core.credits import kueue_resources_config
from testbed import versions as versions_mod
from testbed.pki import CertificateAuthority, KeyPair, service_account_keypair
from testbed.versions import ClusterVersions

REPO_ROOT = Path(__file__).resolve().parents[1]
CLUSTER_DIR = REPO_ROOT / "hack" / "cluster"
BUILD_SH = CLUSTER_DIR / "build.sh"
OUR_CRDS_DIR = REPO_ROOT / "deploy" / "crds"
BINARIES = ("etcd", "kube-apiserver", "kubectl", "kueue")

KUEUE_NAMESPACE = "kueue-system"
KUEUE_CONFIGMAP = "kueue-manager-config"
KUEUE_CONFIGMAP_KEY = "controller_manager_config.yaml"
FRONT_PROXY_CLIENT = "gpuctl-it-front-proxy"
VISIBILITY_SERVICE = "kueue-visibility-server"
KUEUE_WEBHOOK_SERVICE = "kueue-webhook-service"
KUEUE_WEBHOOK_SECRET = "kueue-webhook-server-cert"
KUEUE_MUTATING_CONFIG = "kueue-mutating-webhook-configuration"
KUEUE_VALIDATING_CONFIG = "kueue-validating-webhook-configuration"
# Integrations enabled in Kueue (and whose webhooks we register). The
# Workload/ClusterQueue/... webhooks of the kueue.x-k8s.io group are always on.
KUEUE_FRAMEWORKS = ("batch/job", "pod")
KUEUE_FRAMEWORK_RESOURCES = {"batch/job": ("batch", "jobs"), "pod": ("", "pods")}

START_TIMEOUT = float(os.environ.get("GPUCTL_IT_START_TIMEOUT", "120"))
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [{"level": "Metadata", "resources": [{"group": "kueue.x-k8s.io"}]}, {"level": "None"}],
}
"""What the API server audits: the requests to Kueue's group, so a test can tell which versions a client asked for."""


class ControlPlaneUnavailable(Exception):
    """The control plane cannot be provided here (tests should skip)."""


class ControlPlaneError(Exception):
    """Building or starting the control plane failed (tests must fail)."""


# --------------------------------------------------------------------------
# binaries and module-cache lookups


def go_available() -> bool:
    return shutil.which("go") is not None


def chosen_versions() -> ClusterVersions:
    """The control plane the environment chooses (``GPUCTL_CLUSTER``, or ``GPUCTL_K8S``/``GPUCTL_KUEUE``)."""
    try:
        return versions_mod.chosen()
    except LookupError as exc:
        raise ControlPlaneError(str(exc)) from exc


def bin_dir() -> Path:
    """The chosen combination's bin dir (build.sh reads the same environment)."""
    out = subprocess.run(
        ["bash", str(BUILD_SH), "--print-dir"], check=True, capture_output=True, text=True
    ).stdout.strip()
    return Path(out.splitlines()[-1])


def missing_binaries(directory: Path) -> list[str]:
    return [b for b in BINARIES if not os.access(directory / b, os.X_OK)]


def build_binaries(log_path: Path) -> Path:
    """Run build.sh (idempotent); returns the bin dir. Raises ControlPlaneError."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "wb") as log:
        proc = subprocess.run(["bash", str(BUILD_SH)], stdout=subprocess.PIPE, stderr=log)
    if proc.returncode != 0:
        raise ControlPlaneError(
            f"hack/cluster/build.sh failed (exit {proc.returncode}); log: {log_path}\n{tail(log_path)}"
        )
    return Path(proc.stdout.decode().strip().splitlines()[-1])


@functools.cache
def kueue_crd_dir(version: str) -> Path:
    """Kueue ``version``'s CRD bases in the Go module cache (downloaded if needed)."""
    candidates = []
    if os.environ.get("GOMODCACHE"):
        candidates.append(Path(os.environ["GOMODCACHE"]))
    if go_available():
        out = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True)
        if out.returncode == 0 and out.stdout.strip():
            candidates.append(Path(out.stdout.strip()))
    candidates.append(Path(os.environ.get("GOPATH", Path.home() / "go")) / "pkg" / "mod")
    rel = Path("sigs.k8s.io") / f"kueue@{version}" / "config" / "components" / "crd"
    for root in candidates:
        if (root / rel / "bases").is_dir():
            return root / rel
    if not go_available():
        raise ControlPlaneUnavailable(f"Kueue {version} CRDs not in the Go module cache and 'go' not found")
    out = subprocess.run(
        ["go", "mod", "download", "-json", f"sigs.k8s.io/kueue@{version}"],
        cwd=CLUSTER_DIR / "kueue" / version,
        capture_output=True,
        text=True,
        env={**os.environ, "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local", "GOWORK": "off"},
    )
    if out.returncode != 0:
        raise ControlPlaneError(f"go mod download sigs.k8s.io/kueue@{version} failed:\n{out.stderr}")
    return Path(json.loads(out.stdout)["Dir"]) / "config" / "components" / "crd"


# --------------------------------------------------------------------------
# small helpers


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def host_address() -> str:
    """A non-loopback IPv4 address of this machine: the aggregator dials Kueue's visibility server through an
    EndpointSlice, and EndpointSlices refuse loopback addresses."""
    with contextlib.suppress(OSError):
        for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET):
            address = str(info[4][0])
            if not address.startswith("127."):
                return address
    out = subprocess.run(["ip", "-4", "-o", "addr", "show", "scope", "global"], capture_output=True, text=True)
    found = re.search(r"inet (\d+\.\d+\.\d+\.\d+)/", out.stdout)
    if found is None:
        raise RuntimeError("no non-loopback IPv4 address: Kueue's visibility API cannot be aggregated")
    return found.group(1)


def tail(path: Path, lines: int = 60) -> str:
    try:
        data = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(data[-lines:])


def _set_pdeathsig() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class Process:
    """A child process whose output goes to a log file."""

    detached = False
    """Keep running after the starting process exits (``make cluster``); test control planes die with their runner."""

    def __init__(self, name: str, argv: list[str], log_path: Path, env: dict[str, str] | None = None) -> None:
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self.env = env
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the child's lifetime
        try:
            self.popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
                preexec_fn=_set_pdeathsig if sys.platform.startswith("linux") and not self.detached else None,
            )
        finally:
            log.close()

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen else None

    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def check_running(self) -> None:
        if self.popen is not None and self.popen.poll() is not None:
            raise ControlPlaneError(
                f"{self.name} exited with code {self.popen.returncode}; log: {self.log_path}\n{tail(self.log_path)}"
            )

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, wait, then SIGKILL; always reaps the child."""
        p = self.popen
        if p is None or p.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            p.terminate()
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                p.kill()
            p.wait(timeout=10)


def wait_until(what: str, probe, timeout: float, watch: list[Process], interval: float = 0.1):
    """Poll ``probe()`` until it returns a truthy value; fail fast if a watched process dies."""
    deadline = time.monotonic() + timeout
    last_err: object = None
    while True:
        for p in watch:
            p.check_running()
        try:
            result = probe()
            if result:
                return result
        except Exception as exc:  # noqa: BLE001 - any failure means "not yet"
            last_err = exc
        if time.monotonic() > deadline:
            raise ControlPlaneError(f"timed out after {timeout:.0f}s waiting for {what} (last error: {last_err})")
        time.sleep(interval)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# --------------------------------------------------------------------------
# the control plane


@dataclass
class ControlPlane:
    work_dir: Path
    bin_dir: Path
    with_kueue: bool = True
    disabled_admission: tuple[str, ...] = ()
    """Admission plugins switched off beyond ``ServiceAccount`` (a benchmark's pool of Nodes that no node lifecycle
    controller would untaint: ``TaintNodesByCondition``)."""
    versions: ClusterVersions = field(default_factory=chosen_versions)
    """Which tested combination this is (its binaries are ``bin_dir``'s); it decides the version-specific settings."""

    ca: CertificateAuthority = field(init=False)
    api_port: int = field(init=False, default=0)
    kueue_webhook_port: int = field(init=False, default=0)
    kueue_health_port: int = field(init=False, default=0)
    kueue_metrics_port: int = field(init=False, default=0)
    visibility_port: int = field(init=False, default=0)
    host_address: str = field(init=False, default="")
    processes: list[Process] = field(init=False, default_factory=list)
    timings: dict[str, float] = field(init=False, default_factory=dict)

    # ---- public attributes -------------------------------------------------

    @property
    def logs_dir(self) -> Path:
        return self.work_dir / "logs"

    @property
    def pki_dir(self) -> Path:
        return self.work_dir / "pki"

    @property
    def kubeconfig(self) -> Path:
        return self.work_dir / "kubeconfig"

    @property
    def audit_log(self) -> Path:
        """The API server's audit log: every request to ``kueue.x-k8s.io`` (any version, served or not), at the
        Metadata level, one JSON object a line — who asked for which path."""
        return self.logs_dir / "audit.log"

    @property
    def api_url(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    @property
    def ca_file(self) -> Path:
        return self.pki_dir / "ca.crt"

    @property
    def ca_key_file(self) -> Path:
        return self.pki_dir / "ca.key"

    @property
    def ca_cert(self):
        """The run's CA certificate (cryptography x509.Certificate)."""
        return self.ca.cert

    @property
    def ca_key(self):
        """The run's CA private key (cryptography RSA key)."""
        return self.ca.key

    @property
    def ca_cert_pem(self) -> bytes:
        return self.ca.cert_pem

    @property
    def ca_bundle(self) -> str:
        """base64 CA bundle for webhook clientConfig.caBundle."""
        return _b64(self.ca.cert_pem)

    @property
    def kueue_webhook_url(self) -> str:
        return f"https://127.0.0.1:{self.kueue_webhook_port}"

    def serving_cert(self, hosts=("127.0.0.1", "localhost")) -> KeyPair:
        """Mint a serving certificate signed by the run's CA (e.g. for the operator's webhooks)."""
        return self.ca.serving_cert(list(hosts))

    def client_cert(self, user: str, groups=()) -> KeyPair:
        return self.ca.client_cert(user, groups)

    def write_kubeconfig(self, path: Path, user: str, groups=()) -> Path:
        """Write a kubeconfig for ``user`` (client certificate) to ``path``."""
        pair = self.ca.client_cert(user, groups)
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "gpuctl-it",
                    "cluster": {"server": self.api_url, "certificate-authority-data": self.ca_bundle},
                }
            ],
            "users": [
                {
                    "name": user,
                    "user": {
                        "client-certificate-data": _b64(pair.cert_pem),
                        "client-key-data": _b64(pair.key_pem),
                    },
                }
            ],
            "contexts": [{"name": "gpuctl-it", "context": {"cluster": "gpuctl-it", "user": user}}],
            "current-context": "gpuctl-it",
        }
        path.write_text(yaml.safe_dump(cfg))
        path.chmod(0o600)
        return path

    def log_files(self) -> list[Path]:
        return [p.log_path for p in self.processes]

    # ---- start / stop ------------------------------------------------------

    def start(self) -> None:
        t0 = time.monotonic()
        try:
            self._start(t0)
        except BaseException:
            self.stop()
            raise
        self.timings["total"] = time.monotonic() - t0

    def _mark(self, what: str, t0: float) -> None:
        self.timings[what] = time.monotonic() - t0

    def _start(self, t0: float) -> None:
        for d in (self.logs_dir, self.pki_dir):
            d.mkdir(parents=True, exist_ok=True)

        etcd_port, etcd_peer_port = free_port(), free_port()
        etcd = Process(
            "etcd",
            [
                str(self.bin_dir / "etcd"),
                "--name=gpuctl-it",
                f"--data-dir={self.work_dir / 'etcd-data'}",
                f"--listen-client-urls=http://127.0.0.1:{etcd_port}",
                f"--advertise-client-urls=http://127.0.0.1:{etcd_port}",
                f"--listen-peer-urls=http://127.0.0.1:{etcd_peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer_port}",
                f"--initial-cluster=gpuctl-it=http://127.0.0.1:{etcd_peer_port}",
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
            self.logs_dir / "etcd.log",
        )
        self.processes.append(etcd)
        etcd.start()

        # PKI while etcd starts.
        self.ca = CertificateAuthority()
        self.ca_file.write_bytes(self.ca.cert_pem)
        self.ca_key_file.write_bytes(self.ca.key_pem)
        self.ca_key_file.chmod(0o600)
        serving = self.ca.serving_cert(
            ["127.0.0.1", "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "10.0.0.1"],
            common_name="kube-apiserver",
        )
        (self.pki_dir / "apiserver.crt").write_bytes(serving.cert_pem)
        (self.pki_dir / "apiserver.key").write_bytes(serving.key_pem)
        sa_priv, sa_pub = service_account_keypair()
        (self.pki_dir / "sa.key").write_bytes(sa_priv)
        (self.pki_dir / "sa.pub").write_bytes(sa_pub)
        admin = self.ca.client_cert("gpuctl-it-admin", ["system:masters"])
        (self.pki_dir / "admin.crt").write_bytes(admin.cert_pem)
        (self.pki_dir / "admin.key").write_bytes(admin.key_pem)
        # The aggregation layer's client certificate (Kueue's visibility API is served through it).
        proxy = self.ca.client_cert(FRONT_PROXY_CLIENT)
        (self.pki_dir / "front-proxy-client.crt").write_bytes(proxy.cert_pem)
        (self.pki_dir / "front-proxy-client.key").write_bytes(proxy.key_pem)

        def etcd_healthy() -> bool:
            with urllib.request.urlopen(f"http://127.0.0.1:{etcd_port}/health", timeout=2) as r:
                return json.loads(r.read()).get("health") == "true"

        wait_until("etcd /health", etcd_healthy, timeout=START_TIMEOUT, watch=[etcd])
        self._mark("etcd_ready", t0)

        audit_policy = self.pki_dir / "audit-policy.yaml"
        audit_policy.write_text(yaml.safe_dump(AUDIT_POLICY))
        self.api_port = free_port()
        apiserver = Process(
            "kube-apiserver",
            [
                str(self.bin_dir / "kube-apiserver"),
                f"--etcd-servers=http://127.0.0.1:{etcd_port}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.api_port}",
                f"--tls-cert-file={self.pki_dir / 'apiserver.crt'}",
                f"--tls-private-key-file={self.pki_dir / 'apiserver.key'}",
                f"--client-ca-file={self.ca_file}",
                "--authorization-mode=RBAC",
                f"--service-account-issuer={self.api_url}",
                f"--service-account-key-file={self.pki_dir / 'sa.pub'}",
                f"--service-account-signing-key-file={self.pki_dir / 'sa.key'}",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--allow-privileged=true",
                # No kube-controller-manager runs, so nothing would create the
                # "default" ServiceAccount that this plugin requires for Pods.
                "--disable-admission-plugins=" + ",".join(("ServiceAccount", *self.disabled_admission)),
                f"--requestheader-client-ca-file={self.ca_file}",
                f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                f"--proxy-client-cert-file={self.pki_dir / 'front-proxy-client.crt'}",
                f"--proxy-client-key-file={self.pki_dir / 'front-proxy-client.key'}",
                "--enable-aggregator-routing=true",
                "--profiling=false",
                "--v=1",
                f"--audit-policy-file={audit_policy}",
                f"--audit-log-path={self.audit_log}",
                "--audit-log-format=json",
                "--audit-log-maxsize=200",
                *self._apiserver_version_flags(),
            ],
            self.logs_dir / "kube-apiserver.log",
        )
        self.processes.append(apiserver)
        apiserver.start()

        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        ctx.load_cert_chain(str(self.pki_dir / "admin.crt"), str(self.pki_dir / "admin.key"))

        def readyz() -> bool:
            try:
                with urllib.request.urlopen(f"{self.api_url}/readyz", context=ctx, timeout=2) as r:
                    return r.status == 200
            except urllib.error.HTTPError:
                return False

        wait_until("kube-apiserver /readyz", readyz, timeout=START_TIMEOUT, watch=[etcd, apiserver], interval=0.2)
        self._mark("apiserver_ready", t0)

        self.write_kubeconfig(self.kubeconfig, "gpuctl-it-admin", ["system:masters"])

        from kubernetes import client, config

        api = config.new_client_from_config(config_file=str(self.kubeconfig))
        try:
            self.kueue_webhook_port = free_port()
            crds = self._load_crds()
            ext = client.ApiextensionsV1Api(api)
            for crd in crds:
                ext.create_custom_resource_definition(crd)
            names = {c["metadata"]["name"] for c in crds}

            def established() -> bool:
                ok = set()
                for item in ext.list_custom_resource_definition().items:
                    for cond in (item.status and item.status.conditions) or []:
                        if cond.type == "Established" and cond.status == "True":
                            ok.add(item.metadata.name)
                return names <= ok

            wait_until("CRDs Established", established, timeout=START_TIMEOUT, watch=[etcd, apiserver], interval=0.2)
            self._mark("crds_established", t0)

            # The API server creates these itself (system-namespaces hook),
            # but /readyz does not wait for it.
            core = client.CoreV1Api(api)
            wait_until(
                "namespaces default and kube-system",
                lambda: {"default", "kube-system"} <= {n.metadata.name for n in core.list_namespace().items},
                timeout=START_TIMEOUT,
                watch=[etcd, apiserver],
                interval=0.2,
            )
            self.aggregate_cluster_roles(api)

            if self.with_kueue:
                self._start_kueue(api, watch=[etcd, apiserver])
                self._mark("kueue_ready", t0)
        finally:
            api.close()

    def _apiserver_version_flags(self) -> list[str]:
        flags: list[str] = []
        if self.versions.kubernetes_minor >= (1, 37):
            # From 1.37 the API server refuses to start when the endpoint it would reconcile into the `kubernetes`
            # Service is a loopback address; nothing here routes through that Service.
            flags.append("--endpoint-reconciler-type=none")
        if self.versions.workload_aware_scheduling:
            # The core Workload (`scheduling.k8s.io/v1beta1 workloads`): beta and off by default in 1.37.
            flags += ["--feature-gates=GenericWorkload=true", "--runtime-config=scheduling.k8s.io/v1beta1=true"]
        return flags

    @staticmethod
    def aggregate_cluster_roles(api) -> int:
        """Fill in aggregated ClusterRoles (view, edit, admin, ...) once.

        kube-controller-manager is not run, so its clusterrole-aggregation
        controller is emulated: each ClusterRole with an aggregationRule gets
        the union of the rules of the ClusterRoles its selectors match. Call
        again after creating ClusterRoles labelled to aggregate. Returns the
        number of roles updated.
        """
        from kubernetes import client

        rbac = client.RbacAuthorizationV1Api(api)
        roles = rbac.list_cluster_role().items
        updated = 0
        for role in roles:
            agg = role.aggregation_rule
            if not agg or not agg.cluster_role_selectors:
                continue
            rules: list = []
            seen: set[str] = set()
            for sel in agg.cluster_role_selectors:
                wanted = sel.match_labels or {}
                if sel.match_expressions:
                    continue  # bootstrap roles use matchLabels only
                for other in sorted(roles, key=lambda r: r.metadata.name):
                    if other.metadata.name == role.metadata.name:
                        continue
                    labels = other.metadata.labels or {}
                    if all(labels.get(k) == v for k, v in wanted.items()):
                        for rule in other.rules or []:
                            key = repr(api.sanitize_for_serialization(rule))
                            if key not in seen:
                                seen.add(key)
                                rules.append(api.sanitize_for_serialization(rule))
            current = [api.sanitize_for_serialization(r) for r in role.rules or []]
            if current != rules:
                rbac.patch_cluster_role(role.metadata.name, {"rules": rules})
                updated += 1
        return updated

    def _load_crds(self) -> list[dict]:
        crds: list[dict] = []
        for path in sorted(OUR_CRDS_DIR.glob("*.yaml")):
            crds.extend(
                d for d in yaml.safe_load_all(path.read_text()) if d and d["kind"] == "CustomResourceDefinition"
            )
        if not self.with_kueue:
            return crds
        crd_dir = kueue_crd_dir(self.versions.kueue)
        # The CRDs Kueue's kustomization patches with a conversion webhook.
        kustomization = (crd_dir / "kustomization.yaml").read_text()
        converted = set(re.findall(r"^- path: patches/webhook_in_(\w+)\.yaml", kustomization, re.MULTILINE))
        for path in sorted((crd_dir / "bases").glob("*.yaml")):
            for doc in yaml.safe_load_all(path.read_text()):
                if not doc:
                    continue
                if not self.versions.kueue_serves_v1beta1:
                    # As Kueue 0.20 ships them: v1beta1 no longer served; the conversion stanza stays.
                    doc["spec"]["versions"] = [v for v in doc["spec"]["versions"] if v["name"] != "v1beta1"]
                if doc["spec"]["names"]["plural"] in converted:
                    doc["spec"]["conversion"] = {
                        "strategy": "Webhook",
                        "webhook": {
                            "clientConfig": {"url": f"{self.kueue_webhook_url}/convert", "caBundle": self.ca_bundle},
                            "conversionReviewVersions": ["v1"],
                        },
                    }
                crds.append(doc)
        return crds

    def _kueue_webhook_configs(self, crd_dir: Path) -> list[dict]:
        """Kueue's webhook manifests, limited to the enabled integrations, registered by URL."""
        manifests = crd_dir.parent / "webhook" / "manifests.yaml"
        allowed = {("kueue.x-k8s.io", None)} | {KUEUE_FRAMEWORK_RESOURCES[f] for f in KUEUE_FRAMEWORKS}
        out = []
        for doc in yaml.safe_load_all(manifests.read_text()):
            if not doc:
                continue
            hooks = []
            for hook in doc.get("webhooks", []):
                keep = False
                for rule in hook.get("rules", []):
                    for group in rule.get("apiGroups", []):
                        for res in rule.get("resources", []):
                            if (group, None) in allowed or (group, res) in allowed:
                                keep = True
                if not keep:
                    continue
                path = hook["clientConfig"]["service"]["path"]
                hook["clientConfig"] = {"url": f"{self.kueue_webhook_url}{path}", "caBundle": self.ca_bundle}
                hooks.append(hook)
            name = KUEUE_MUTATING_CONFIG if doc["kind"] == "MutatingWebhookConfiguration" else KUEUE_VALIDATING_CONFIG
            out.append({**doc, "metadata": {"name": name}, "webhooks": hooks})
        return out

    def _start_kueue(self, api, watch: list[Process]) -> None:
        from kubernetes import client

        core = client.CoreV1Api(api)
        adm = client.AdmissionregistrationV1Api(api)
        crd_dir = kueue_crd_dir(self.versions.kueue)

        core.create_namespace({"metadata": {"name": KUEUE_NAMESPACE}})

        # Kueue's cert rotator (internal cert management) adopts a valid
        # pre-seeded Secret instead of minting its own CA, so its webhook
        # serves our certificate (SANs: the in-cluster service name the rotator
        # checks, plus 127.0.0.1 which the API server dials).
        svc_dns = f"{KUEUE_WEBHOOK_SERVICE}.{KUEUE_NAMESPACE}.svc"
        serving = self.ca.serving_cert([svc_dns, "127.0.0.1", "localhost"], common_name=svc_dns)
        cert_dir = self.work_dir / "kueue" / "certs"
        cert_dir.mkdir(parents=True, exist_ok=True)
        (cert_dir / "tls.crt").write_bytes(serving.cert_pem)
        (cert_dir / "tls.key").write_bytes(serving.key_pem)
        core.create_namespaced_secret(
            KUEUE_NAMESPACE,
            {
                "metadata": {"name": KUEUE_WEBHOOK_SECRET},
                "type": "Opaque",
                "data": {
                    "ca.crt": self.ca_bundle,
                    "ca.key": _b64(self.ca.key_pem),
                    "tls.crt": _b64(serving.cert_pem),
                    "tls.key": _b64(serving.key_pem),
                },
            },
        )
        for cfg in self._kueue_webhook_configs(crd_dir):
            if cfg["kind"] == "MutatingWebhookConfiguration":
                adm.create_mutating_webhook_configuration(cfg)
            else:
                adm.create_validating_webhook_configuration(cfg)

        self.kueue_health_port = free_port()
        self.kueue_metrics_port = free_port()
        self.visibility_port = free_port()
        self.host_address = host_address()
        kueue_cfg = {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2",
            "kind": "Configuration",
            "namespace": KUEUE_NAMESPACE,
            "health": {"healthProbeBindAddress": f"127.0.0.1:{self.kueue_health_port}"},
            "metrics": {"bindAddress": f"127.0.0.1:{self.kueue_metrics_port}"},
            "webhook": {"host": "127.0.0.1", "port": self.kueue_webhook_port, "certDir": str(cert_dir)},
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {
                "enable": True,
                "webhookServiceName": KUEUE_WEBHOOK_SERVICE,
                "webhookSecretName": KUEUE_WEBHOOK_SECRET,
            },
            "manageJobsWithoutQueueName": False,
            "integrations": {"frameworks": list(KUEUE_FRAMEWORKS)},
            # As the design deploys it: queue names are never copied onto Pod labels; TAS is on.
            "featureGates": self._kueue_feature_gates(),
            "visibilityServer": {"bindAddress": self.host_address, "bindPort": self.visibility_port},
            # As deployed: every accelerator key folds into credits.gpustack.ai/<manufacturer>.
            "resources": kueue_resources_config(),
        }
        # Kueue's manifests mount this ConfigMap as the manager's --config file; here the file is written from it.
        config_text = yaml.safe_dump(kueue_cfg, sort_keys=False)
        core.create_namespaced_config_map(
            KUEUE_NAMESPACE,
            {"metadata": {"name": KUEUE_CONFIGMAP}, "data": {KUEUE_CONFIGMAP_KEY: config_text}},
        )
        cfg_path = self.work_dir / "kueue" / "config.yaml"
        cfg_path.write_text(config_text)

        kueue = Process(
            "kueue",
            [
                str(self.bin_dir / "kueue"),
                f"--config={cfg_path}",
                # The visibility server reads its credentials from this flag, never from $KUBECONFIG.
                f"--kubeconfig={self.kubeconfig}",
                "--zap-encoder=console",
                "--zap-log-level=info",
            ],
            self.logs_dir / "kueue.log",
            env={**os.environ, "KUBECONFIG": str(self.kubeconfig)},
        )
        self.processes.append(kueue)
        kueue.start()
        watch = [*watch, kueue]

        def kueue_readyz() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.kueue_health_port}/readyz", timeout=2) as r:
                    return r.status == 200
            except urllib.error.HTTPError:
                return False

        # /readyz passes once the certificates are in place and the webhook
        # server listens (the short-lived bootstrap manager may answer first,
        # so also prove a real admission round trip below).
        wait_until("kueue /readyz", kueue_readyz, timeout=START_TIMEOUT, watch=watch, interval=0.2)

        objs = client.CustomObjectsApi(api)
        probe = {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": "gpuctl-it-webhook-probe"},
        }

        def webhook_round_trip() -> bool:
            objs.create_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "resourceflavors", probe, dry_run="All")
            return True

        wait_until("Kueue webhooks to answer", webhook_round_trip, timeout=START_TIMEOUT, watch=watch, interval=0.2)
        self._aggregate_visibility(api, watch)

    def _kueue_feature_gates(self) -> dict[str, bool]:
        gates = {"AssignQueueLabelsForPods": False, "TopologyAwareScheduling": True, "VisibilityOnDemand": True}
        if self.versions.kueue_minor >= (0, 19):
            # Pending reasons as tokens (beta, off by default in 0.19, on by default later): what users of 0.19 turn on
            # and what Kueue 0.20 writes. The floor keeps the message-only reasons.
            gates["UnadmittedWorkloadsObservability"] = True
        return gates

    def _aggregate_visibility(self, api, watch: list[Process]) -> None:
        """Serve Kueue's visibility API through the API server, as its manifests do in a cluster: a Service whose
        EndpointSlice names Kueue's visibility port on this machine, and the APIServices pointing at it."""
        from kubernetes import client

        client.CoreV1Api(api).create_namespaced_service(
            KUEUE_NAMESPACE,
            {
                "metadata": {"name": VISIBILITY_SERVICE},
                "spec": {"ports": [{"name": "https", "port": 443, "targetPort": self.visibility_port}]},
            },
        )
        client.DiscoveryV1Api(api).create_namespaced_endpoint_slice(
            KUEUE_NAMESPACE,
            {
                "metadata": {
                    "name": f"{VISIBILITY_SERVICE}-1",
                    "labels": {"kubernetes.io/service-name": VISIBILITY_SERVICE},
                },
                "addressType": "IPv4",
                "ports": [{"name": "https", "port": self.visibility_port, "protocol": "TCP"}],
                "endpoints": [{"addresses": [self.host_address], "conditions": {"ready": True}}],
            },
        )
        registration = client.ApiregistrationV1Api(api)
        for version in ("v1beta1", "v1beta2") if self.versions.kueue_serves_v1beta1 else ("v1beta2",):
            registration.create_api_service(
                {
                    "metadata": {"name": f"{version}.visibility.kueue.x-k8s.io"},
                    "spec": {
                        "group": "visibility.kueue.x-k8s.io",
                        "version": version,
                        "groupPriorityMinimum": 100,
                        "versionPriority": 100,
                        "insecureSkipTLSVerify": True,
                        "service": {"name": VISIBILITY_SERVICE, "namespace": KUEUE_NAMESPACE, "port": 443},
                    },
                }
            )

        def available() -> bool:
            status = registration.read_api_service("v1beta2.visibility.kueue.x-k8s.io").status
            return any(c.type == "Available" and c.status == "True" for c in (status.conditions or []))

        wait_until(
            "Kueue's visibility API to be available", available, timeout=START_TIMEOUT, watch=watch, interval=0.5
        )

    def stop(self) -> None:
        for p in reversed(self.processes):
            p.stop()


def start_control_plane(
    work_dir: Path, bin_directory: Path, with_kueue: bool = True, disabled_admission: tuple[str, ...] = ()
) -> ControlPlane:
    cp = ControlPlane(
        work_dir=work_dir,
        bin_dir=bin_directory,
        with_kueue=with_kueue,
        disabled_admission=disabled_admission,
        versions=chosen_versions(),
    )
    cp.start()
    return cp
