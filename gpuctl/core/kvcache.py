"""The KV cache injection webhook: a Pod labelled ``kvcache.gpustack.ai/inject: "true"`` gets the client configuration
its inference engine needs to use the KV cache pool behind a ``KVCachePoolBinding``.

It sits outside the five gates: it reads no accelerator key and never touches ``resources``. The mutating rule
(``admit_kvcache_pod``, CREATE, ``failurePolicy: Fail``) refuses rather than guesses, because every case it refuses would
otherwise start a container that silently caches nothing. The validating rule (``validate_kvcache_update``, UPDATE,
``failurePolicy: Ignore``) freezes the trigger label and the two annotations the mutating rule writes.

Before it appends connector arguments the webhook reads the container's launch (``parse_launch``): it removes the
transparent launcher prefixes it knows and accepts only the declared engine's entry point.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final, Literal

from gpuctl.core.admission import (
    JSON,
    Admission,
    aggregate,
    allow,
    deep_copy,
    deny,
    fail_closed,
    fail_open,
    forbidden,
    invalid,
    not_supported,
    required,
)

API_GROUP: Final = "kvcache.gpustack.ai"
API_VERSION: Final = "v1alpha1"

PREFIX: Final = "kvcache.gpustack.ai/"
LABEL_INJECT: Final = PREFIX + "inject"
ANNOTATION_BINDING: Final = PREFIX + "binding"
ANNOTATION_ENGINE: Final = PREFIX + "engine"
ANNOTATION_MANUFACTURER: Final = PREFIX + "manufacturer"
ANNOTATION_ROLE: Final = PREFIX + "role"
ANNOTATION_CONTAINER: Final = PREFIX + "container"
ANNOTATION_FORWARDED: Final = PREFIX + "launch-args-forwarded"
ANNOTATION_DOMAIN: Final = PREFIX + "domain"
ANNOTATION_CLIENT_CONFIG: Final = PREFIX + "client-config"
ANNOTATION_INJECTED: Final = PREFIX + "injected"

READ_ANNOTATIONS: Final = (
    ANNOTATION_BINDING,
    ANNOTATION_ENGINE,
    ANNOTATION_MANUFACTURER,
    ANNOTATION_ROLE,
    ANNOTATION_CONTAINER,
    ANNOTATION_FORWARDED,
)
WRITTEN_ANNOTATIONS: Final = (ANNOTATION_CLIENT_CONFIG, ANNOTATION_INJECTED)

CONDITION_LEDGER: Final = "QuotaLedgerAvailable"
REASON_MULTI_TENANCY_DISABLED: Final = "MultiTenancyDisabled"
DEFAULT_DOMAIN: Final = "default"

VOLUME_NAME: Final = "gpustack-kvcache"
MOUNT_PATH: Final = "/etc/gpustack/kvcache"
CONFIG_FILE: Final = "mooncake.json"
CONFIG_PATH: Final = f"{MOUNT_PATH}/{CONFIG_FILE}"

METADATA_SERVER: Final = "P2PHANDSHAKE"
LOCAL_BUFFER_SIZE: Final = 128 * 1024 * 1024
GLOBAL_SEGMENT_SIZE: Final = 0
METRIC_ENV: Final = ("MC_TE_METRIC", "MC_STORE_CLIENT_METRIC_BANDWIDTH")

FLAG_KV_TRANSFER_CONFIG: Final = "--kv-transfer-config"
FLAG_KV_CACHE_DTYPE: Final = "--kv-cache-dtype"
FLAG_HICACHE_BACKEND: Final = "--hicache-storage-backend"
FLAG_HICACHE_EXTRA_CONFIG: Final = "--hicache-storage-backend-extra-config"
FLAG_HIERARCHICAL_CACHE: Final = "--enable-hierarchical-cache"
ENV_CONFIG_PATH: Final = "MOONCAKE_CONFIG_PATH"
ENV_SGLANG_CONFIG_PATH: Final = "SGLANG_HICACHE_MOONCAKE_CONFIG_PATH"

FORWARDING_DECLARATION: Final = f'{ANNOTATION_FORWARDED}: "true"'

# Transport spellings: the API's enum (backend ``spec.transport.protocol``) and the store's (``protocol`` / the
# ``MOONCAKE_PROTOCOL`` variable). ``Auto`` resolves to the store's ``tcp``.
TRANSPORT_FROM_API: Final[Mapping[str, str]] = {
    "Auto": "tcp",
    "TCP": "tcp",
    "RDMA": "rdma",
    "EFA": "efa",
    "CANN": "ascend",
}
TRANSPORT_TO_API: Final[Mapping[str, str]] = {"tcp": "TCP", "rdma": "RDMA", "efa": "EFA", "ascend": "CANN"}


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def annotation_path(key: str) -> str:
    return f"metadata.annotations[{key}]"


def label_path(key: str) -> str:
    return f"metadata.labels[{key}]"


# ----------------------------------------------------------------------------------------------- records


@dataclass(frozen=True, slots=True)
class KVCachePoolBinding:
    """The parts of a ``KVCachePoolBinding`` (namespaced) the webhook reads."""

    namespace: str
    name: str
    pool: str
    """``spec.poolRef.name``; empty when absent."""
    domain: str
    """``spec.domain.name``, the reuse domain and the store's tenant id; ``default`` when absent or empty."""
    dtype: str
    """``spec.domain.dtype``, handed to the engine verbatim; empty when absent."""
    deleting: bool
    """``metadata.deletionTimestamp`` is set."""


@dataclass(frozen=True, slots=True)
class Condition:
    status: str
    """``True``, ``False`` or ``Unknown`` (any other value reads as ``Unknown``)."""
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class KVCachePool:
    """The parts of a ``KVCachePool`` (cluster-scoped) the webhook reads."""

    name: str
    backends: tuple[str, ...]
    """``spec.backends``: the KVCacheBackend names (the API allows exactly one)."""
    client_endpoint: str
    """``status.clientEndpoint``; empty while the pool has published none."""
    transports: tuple[str, ...]
    """``status.transports``: the effective transport of each member group, in the store's spelling, deduplicated."""
    ledger: Condition | None
    """The ``QuotaLedgerAvailable`` condition, or None when the pool has not reported it."""


@dataclass(frozen=True, slots=True)
class KVCacheBackend:
    """A ``KVCacheBackend`` (cluster-scoped): the webhook only needs to know that it exists."""

    name: str


def parse_kvcache_pool_binding(obj: Mapping[str, Any]) -> KVCachePoolBinding:
    metadata = _mapping(obj.get("metadata"))
    spec = _mapping(obj.get("spec"))
    domain = _mapping(spec.get("domain"))
    return KVCachePoolBinding(
        namespace=_text(metadata.get("namespace")),
        name=_text(metadata.get("name")),
        pool=_text(_mapping(spec.get("poolRef")).get("name")),
        domain=_text(domain.get("name")) or DEFAULT_DOMAIN,
        dtype=_text(domain.get("dtype")),
        deleting=bool(metadata.get("deletionTimestamp")),
    )


def parse_transport(value: Any) -> str:
    """A transport in the store's spelling: API values are translated, anything else kept verbatim ('' if no string)."""
    text = _text(value)
    return TRANSPORT_FROM_API.get(text, text)


def parse_condition(conditions: Any, kind: str) -> Condition | None:
    for entry in _list(conditions):
        entry = _mapping(entry)
        if entry.get("type") == kind:
            status = _text(entry.get("status"))
            return Condition(
                status=status if status in ("True", "False") else "Unknown",
                reason=_text(entry.get("reason")),
                message=_text(entry.get("message")),
            )
    return None


def parse_kvcache_pool(obj: Mapping[str, Any]) -> KVCachePool:
    metadata = _mapping(obj.get("metadata"))
    spec = _mapping(obj.get("spec"))
    status = _mapping(obj.get("status"))
    transports = (parse_transport(t) for t in _list(status.get("transports")))
    return KVCachePool(
        name=_text(metadata.get("name")),
        backends=tuple(b for b in (_text(x) for x in _list(spec.get("backends"))) if b),
        client_endpoint=_text(status.get("clientEndpoint")),
        transports=tuple(dict.fromkeys(t for t in transports if t)),
        ledger=parse_condition(status.get("conditions"), CONDITION_LEDGER),
    )


def parse_kvcache_backend(obj: Mapping[str, Any]) -> KVCacheBackend:
    return KVCacheBackend(name=_text(_mapping(obj.get("metadata")).get("name")))


@dataclass(frozen=True, slots=True)
class KVCacheContext:
    """What the mutating rule looks up: Bindings by (namespace, name), pools and backends by name, and settings."""

    bindings: Mapping[tuple[str, str], KVCachePoolBinding] = field(default_factory=dict)
    pools: Mapping[str, KVCachePool] = field(default_factory=dict)
    backends: Mapping[str, KVCacheBackend] = field(default_factory=dict)
    request_namespace: str = ""
    """The AdmissionReview's ``request.namespace``, used when the Pod's ``metadata.namespace`` is empty."""
    kv_cache_dtype_owned: bool = True
    """The Setting ``model-deployment-kv-cache-dtype-owned``: render the Binding's dtype and refuse the engine's own."""

    @classmethod
    def of(
        cls,
        bindings: Iterable[KVCachePoolBinding] = (),
        pools: Iterable[KVCachePool] = (),
        backends: Iterable[KVCacheBackend] = (),
        *,
        request_namespace: str = "",
        kv_cache_dtype_owned: bool = True,
    ) -> KVCacheContext:
        return cls(
            bindings={(b.namespace, b.name): b for b in bindings},
            pools={p.name: p for p in pools},
            backends={b.name: b for b in backends},
            request_namespace=request_namespace,
            kv_cache_dtype_owned=kv_cache_dtype_owned,
        )


# ----------------------------------------------------------------------------------------------- engines


class Engine(StrEnum):
    """What is configured, spelled as the injection record writes it."""

    VLLM = "vllm"
    VLLM_ASCEND = "vllm-ascend"
    SGLANG = "sglang"

    @property
    def family(self) -> Family:
        return Family.SGLANG if self is Engine.SGLANG else Family.VLLM

    @property
    def display_name(self) -> str:
        return {Engine.VLLM: "vLLM", Engine.VLLM_ASCEND: "vLLM-Ascend", Engine.SGLANG: "SGLang"}[self]

    @property
    def required_transport(self) -> str | None:
        """The one transport the engine accepts, when it declares one (store spelling)."""
        return "ascend" if self is Engine.VLLM_ASCEND else None


class Family(StrEnum):
    """The program family a launch is judged against: the vLLM family shares the ``vllm`` entry point."""

    VLLM = "vLLM"
    SGLANG = "SGLang"

    @property
    def entry_point(self) -> str:
        return "vllm" if self is Family.VLLM else "python3 -m sglang.launch_server"


ENGINE_SPELLINGS: Final[Mapping[str, Family]] = {
    "vLLM": Family.VLLM,
    "vllm": Family.VLLM,
    "SGLang": Family.SGLANG,
    "sglang": Family.SGLANG,
}
SUPPORTED_ENGINES: Final = ("vLLM", "SGLang")
SUPPORTED_ROLES: Final = ("Prefill", "Decode")
ROLE_SPELLINGS: Final[Mapping[str, str]] = {
    "Prefill": "Prefill",
    "Decode": "Decode",
    "prefill": "Prefill",
    "decode": "Decode",
}
KV_ROLES: Final[Mapping[str | None, str]] = {"Prefill": "kv_producer", "Decode": "kv_consumer", None: "kv_both"}
CONNECTORS: Final[Mapping[Engine, str]] = {
    Engine.VLLM: "MooncakeStoreConnector",
    Engine.VLLM_ASCEND: "AscendStoreConnector",
}


def _family_of(engine: str) -> Family | None:
    family = ENGINE_SPELLINGS.get(engine)
    if family is None and engine == Engine.VLLM_ASCEND.value:
        family = Family.VLLM
    return family


# ----------------------------------------------------------------------------------------------- the launch check


class LaunchRefusal(StrEnum):
    NO_COMMAND = "no-command"
    ARGS_WITHOUT_COMMAND = "args-without-command"
    LAUNCHER_WITHOUT_PROGRAM = "launcher-without-program"
    SHELL_COMMAND = "shell-command"
    HIDDEN_COMMAND_LINE = "hidden-command-line"
    SCRIPT = "script"
    WRAPPER = "wrapper"
    UNRECOGNISED_PROGRAM = "unrecognised-program"
    OTHER_ENGINE = "other-engine"
    UNSUPPORTED_ENGINE = "unsupported-engine"


@dataclass(frozen=True, slots=True)
class LaunchVerdict:
    """Whether arguments appended to a container's launch reach the declared engine."""

    accepted: bool
    program: str
    """The executable left after the launcher prefixes (``vllm``, ``python3 -m sglang.launch_server``, ``run.sh``…);
    empty when there is none to read (an image ENTRYPOINT, a command line hidden in one argument)."""
    reason: str
    refusal: LaunchRefusal | None = None
    args_forwarded: bool = False
    """The author's forwarding declaration is what admitted the launch."""
    append_to: Literal["command", "args"] = "command"
    """Where injected arguments go: ``args`` when the container declares any, else ``command``."""
    field: Literal["command", "args"] = "command"
    """The container field a refusal is about."""


class _Kind(StrEnum):
    ENGINE = "engine"
    NO_PROGRAM = "no-program"
    SHELL = "shell"
    HIDDEN = "hidden"
    SCRIPT = "script"
    WRAPPER = "wrapper"
    UNRECOGNISED = "unrecognised"


@dataclass(frozen=True, slots=True)
class _Found:
    """What a command line resolves to once the launcher prefixes are removed."""

    kind: _Kind
    program: str
    family: Family | None = None
    entry: bool = False
    launcher: str = ""
    """For NO_PROGRAM and HIDDEN: the launcher (or interpreter) that names nothing, or splits a string itself."""


@dataclass(frozen=True, slots=True)
class _LauncherSpec:
    """A transparent launcher's options: short flags, short options taking a value, and their long spellings."""

    flags: str = ""
    valued: str = ""
    long_flags: frozenset[str] = frozenset()
    long_valued: frozenset[str] = frozenset()
    split_short: str = ""
    """A short option whose value is a whole command line the launcher splits itself (``env -S``)."""
    split_long: str = ""
    dash_is_option: bool = False
    assignments: bool = False
    """``NAME=value`` operands before the program (``env``)."""


LAUNCHERS: Final[Mapping[str, _LauncherSpec]] = {
    "tini": _LauncherSpec(flags="svwglh", valued="pe"),
    "tini-static": _LauncherSpec(flags="svwglh", valued="pe"),
    "dumb-init": _LauncherSpec(
        flags="cv",
        valued="r",
        long_flags=frozenset({"--single-child", "--verbose"}),
        long_valued=frozenset({"--rewrite"}),
    ),
    "env": _LauncherSpec(
        flags="i0v",
        valued="uC",
        long_flags=frozenset(
            {"--ignore-environment", "--null", "--debug", "--ignore-signal", "--default-signal", "--block-signal"}
        ),
        long_valued=frozenset({"--unset", "--chdir"}),
        split_short="S",
        split_long="--split-string",
        dash_is_option=True,
        assignments=True,
    ),
    "exec": _LauncherSpec(),
}
SHELLS: Final = frozenset({"sh", "bash", "dash", "ash", "zsh", "ksh", "mksh"})
MULTI_CALL: Final = frozenset({"busybox"})
WRAPPERS: Final = frozenset({"entrypoint", "run"})
_PYTHON = re.compile(r"python(3(\.\d+)?)?")
SGLANG_MODULE: Final = "sglang.launch_server"


def _basename(token: str) -> str:
    return token.rstrip("/").rsplit("/", 1)[-1]


def _skip_short_cluster(spec: _LauncherSpec, token: str) -> int | _Kind:
    """How many argv entries a ``-xyz`` cluster occupies (1 or 2), or the kind it reveals (hidden, unrecognised)."""
    for pos, char in enumerate(token[1:], 1):
        if spec.split_short and char == spec.split_short:
            return _Kind.HIDDEN
        if char in spec.valued:
            return 1 if pos < len(token) - 1 else 2
        if char not in spec.flags:
            return _Kind.UNRECOGNISED
    return 1


def _skip_long_option(spec: _LauncherSpec, token: str) -> int | _Kind:
    name, eq, _ = token.partition("=")
    if spec.split_long and name == spec.split_long:
        return _Kind.HIDDEN
    if name in spec.long_valued:
        return 1 if eq else 2
    if name in spec.long_flags:
        return 1
    return _Kind.UNRECOGNISED


def _skip_launcher(name: str, spec: _LauncherSpec, argv: Sequence[str], i: int) -> int | _Found:
    """The index of the program a transparent launcher runs, or what stops the walk."""
    while i < len(argv):
        token = argv[i]
        if token == "--":
            i += 1
            break
        if token == "-" and spec.dash_is_option:
            i += 1
            continue
        if token.startswith("--"):
            step = _skip_long_option(spec, token)
        elif token.startswith("-") and len(token) > 1:
            step = _skip_short_cluster(spec, token)
        else:
            break
        if step is _Kind.HIDDEN:
            option = spec.split_long if token.startswith("--") else f"-{spec.split_short}"
            return _Found(_Kind.HIDDEN, "", launcher=f"{name} {option}")
        if isinstance(step, _Kind):
            return _Found(_Kind.UNRECOGNISED, name)
        i += step
    while spec.assignments and i < len(argv) and "=" in argv[i]:
        i += 1
    return i


def _classify_script(script: str, program: str) -> _Found:
    name = _basename(script)
    if name.endswith(".sh"):
        return _Found(_Kind.SCRIPT, program)
    if name in WRAPPERS:
        return _Found(_Kind.WRAPPER, program)
    return _Found(_Kind.UNRECOGNISED, program)


def _shell(argv: Sequence[str], i: int) -> _Found:
    """``sh [options] [-c string | script]``: a ``-c`` (or ``-s``) launch, a script, or a shell naming nothing."""
    shell = _basename(argv[i])
    j = i + 1
    while j < len(argv):
        token = argv[j]
        if token in ("--", "-"):
            j += 1
            break
        if token.startswith("--"):
            j += 2 if token in ("--rcfile", "--init-file") else 1
            continue
        if token[:1] in ("-", "+") and len(token) > 1:
            if token[0] == "-" and ("c" in token or "s" in token):
                return _Found(_Kind.SHELL, f"{shell} {token}")
            j += 2 if "o" in token or "O" in token else 1
            continue
        break
    if j >= len(argv):
        return _Found(_Kind.NO_PROGRAM, shell, launcher=shell)
    return _classify_script(argv[j], f"{shell} {argv[j]}")


def _module(python: str, module: str) -> _Found:
    program = f"{python} -m {module}"
    if module == SGLANG_MODULE:
        return _Found(_Kind.ENGINE, program, Family.SGLANG, entry=True)
    if module == "sglang" or module.startswith("sglang."):
        return _Found(_Kind.ENGINE, program, Family.SGLANG)
    if module == "vllm" or module.startswith("vllm."):
        return _Found(_Kind.ENGINE, program, Family.VLLM)
    return _Found(_Kind.UNRECOGNISED, program)


def _python(argv: Sequence[str], i: int) -> _Found:
    """``python [options] (-m module | -c code | script | -)``."""
    python = _basename(argv[i])
    j = i + 1
    while j < len(argv):
        token = argv[j]
        if token == "--":
            j += 1
            break
        if token == "-":
            return _Found(_Kind.UNRECOGNISED, f"{python} -")
        if token.startswith("--"):
            j += 2 if token == "--check-hash-based-pycs" else 1
            continue
        if not token.startswith("-"):
            break
        step = 1
        for pos, char in enumerate(token[1:], 1):
            rest = token[pos + 1 :]
            if char in "mc":
                value = rest or (argv[j + 1] if j + 1 < len(argv) else "")
                if not value:
                    return _Found(_Kind.NO_PROGRAM, python, launcher=f"{python} -{char}")
                if char == "c":
                    return _Found(_Kind.HIDDEN, "", launcher=f"{python} -c")
                return _module(python, value)
            if char in "WX":
                step = 1 if rest else 2
                break
        j += step
    if j >= len(argv):
        return _Found(_Kind.NO_PROGRAM, python, launcher=python)
    return _classify_script(argv[j], f"{python} {argv[j]}")


def _program(token: str) -> _Found:
    """An executable: the engine programs by their base name, anything else as written."""
    name = _basename(token)
    if name == "vllm":
        return _Found(_Kind.ENGINE, name, Family.VLLM, entry=True)
    if name == "sglang":
        return _Found(_Kind.ENGINE, name, Family.SGLANG)
    return _classify_script(token, token)


def _resolve_program(argv: Sequence[str]) -> _Found:
    """Walk a full command line past the transparent launchers to the program it runs."""
    i = 0
    launcher = ""
    while i < len(argv):
        token = argv[i]
        if any(c.isspace() for c in token):
            return _Found(_Kind.HIDDEN, "", launcher=f"argument {json.dumps(token)}")
        name = _basename(token)
        spec = LAUNCHERS.get(name)
        if spec is not None:
            step = _skip_launcher(name, spec, argv, i + 1)
            if isinstance(step, _Found):
                return step
            launcher, i = name, step
        elif name in MULTI_CALL:
            launcher, i = name, i + 1
        elif name in SHELLS:
            return _shell(argv, i)
        elif _PYTHON.fullmatch(name):
            return _python(argv, i)
        else:
            return _program(token)
    return _Found(_Kind.NO_PROGRAM, launcher, launcher=launcher)


def _declare(what: str) -> str:
    return f"or declare {FORWARDING_DECLARATION} only if {what} forwards appended arguments to the engine"


def _launch_reason(found: _Found, family: Family) -> tuple[LaunchRefusal, str]:
    """Why a resolved launch is refused, with the fix."""
    direct = f"launch the engine directly ({family.entry_point} in command, its arguments in args)"
    if found.kind is _Kind.NO_PROGRAM:
        return LaunchRefusal.LAUNCHER_WITHOUT_PROGRAM, (
            f"{json.dumps(found.launcher)} names no program after it, so the appended connector flag would become "
            f"what it runs; put {family.entry_point} and its arguments after it"
        )
    if found.kind is _Kind.SHELL:
        return LaunchRefusal.SHELL_COMMAND, (
            f"{json.dumps(found.program)} runs a shell that reads its commands from a string (or stdin): appended "
            "arguments become the shell's positional parameters and never reach the engine, even with "
            f"{ANNOTATION_FORWARDED} declared; "
            f"{direct}, or drop the {LABEL_INJECT} label and configure the connector in that command yourself"
        )
    if found.kind is _Kind.HIDDEN:
        return LaunchRefusal.HIDDEN_COMMAND_LINE, (
            f"{found.launcher} hides the command line in one argument, so admission cannot see what runs or where "
            f"appended arguments go; {direct}, {_declare('that command line')}"
        )
    if found.kind is _Kind.SCRIPT:
        return LaunchRefusal.SCRIPT, (
            f"{json.dumps(found.program)} runs a script, and whether appended arguments reach the engine depends on "
            f'whether it forwards "$@"; {direct}, {_declare("the script")}'
        )
    if found.kind is _Kind.WRAPPER:
        return LaunchRefusal.WRAPPER, (
            f"{json.dumps(found.program)} is a wrapper admission cannot open; {direct}, {_declare('the wrapper')}"
        )
    if found.kind is _Kind.ENGINE and found.family is not family:
        other = found.family.value if found.family else "another engine"
        return LaunchRefusal.OTHER_ENGINE, (
            f"{json.dumps(found.program)} is {other}'s program, but {ANNOTATION_ENGINE} declares {family.value}; "
            f"launch {family.entry_point}, or declare the engine that runs"
        )
    return LaunchRefusal.UNRECOGNISED_PROGRAM, (
        f"{json.dumps(found.program)} is not the {family.value} entry point ({family.entry_point}); "
        f"{direct}, {_declare(json.dumps(found.program))}"
    )


def _refused(refusal: LaunchRefusal, reason: str, program: str, field: Literal["command", "args"]) -> LaunchVerdict:
    return LaunchVerdict(False, program, reason, refusal, field=field)


NOT_FORWARDABLE: Final = frozenset(
    {LaunchRefusal.LAUNCHER_WITHOUT_PROGRAM, LaunchRefusal.SHELL_COMMAND, LaunchRefusal.OTHER_ENGINE}
)


def _judge_found(
    found: _Found, family: Family, forwarded: bool, append_to: Literal["command", "args"]
) -> LaunchVerdict:
    if found.kind is _Kind.ENGINE and found.family is family and found.entry:
        return LaunchVerdict(
            True, found.program, f"{found.program} is the {family.value} entry point", append_to=append_to
        )
    refusal, reason = _launch_reason(found, family)
    if forwarded and refusal not in NOT_FORWARDABLE:
        return LaunchVerdict(
            True,
            found.program,
            f"{ANNOTATION_FORWARDED} declares that {found.program or found.launcher} forwards appended arguments",
            args_forwarded=True,
            append_to=append_to,
        )
    return _refused(refusal, reason, found.program, "command")


def _judge_args_only(args: list[str], family: Family, forwarded: bool) -> LaunchVerdict:
    if not forwarded:
        return _refused(
            LaunchRefusal.ARGS_WITHOUT_COMMAND,
            "the container declares args but no command, so the image ENTRYPOINT receiving them cannot be inspected; "
            f"put {family.entry_point} in command, or declare {FORWARDING_DECLARATION} only if the image ENTRYPOINT "
            "forwards appended arguments to the engine",
            "",
            "command",
        )
    found = _resolve_program(args)
    if found.kind is _Kind.SHELL:
        refusal, reason = _launch_reason(found, family)
        return _refused(refusal, reason, found.program, "args")
    return LaunchVerdict(
        True,
        "",
        f"{ANNOTATION_FORWARDED} declares that the image ENTRYPOINT forwards appended arguments",
        args_forwarded=True,
        append_to="args",
    )


def parse_launch(command: list[str] | None, args: list[str] | None, engine: str, forwarded: bool) -> LaunchVerdict:
    """Judge a container's launch for the declared engine (``vLLM``/``vllm``/``vllm-ascend`` or ``SGLang``/``sglang``).

    Kubernetes semantics: ``command`` replaces the image ENTRYPOINT and ``args`` its CMD, so with only ``args`` the
    program receiving them is the image's unknown ENTRYPOINT.
    """
    family = _family_of(engine)
    command, args = list(command or []), list(args or [])
    if family is None:
        reason = f"engine {json.dumps(engine)} is not supported; declare vLLM or SGLang"
        return _refused(LaunchRefusal.UNSUPPORTED_ENGINE, reason, "", "command")
    if not command and not args:
        return _refused(
            LaunchRefusal.NO_COMMAND,
            "the container declares neither command nor args, so an appended argument would replace the image's CMD "
            f"instead of adding to it; put {family.entry_point} in command and the image's launch arguments in args",
            "",
            "command",
        )
    if not command:
        return _judge_args_only(args, family, forwarded)
    return _judge_found(_resolve_program([*command, *args]), family, forwarded, "args" if args else "command")


# ----------------------------------------------------------------------------------------------- the annotations


@dataclass(frozen=True, slots=True)
class Refused:
    """A step that refuses the Pod, with the whole message (field errors in Kubernetes' wording)."""

    message: str


@dataclass(frozen=True, slots=True)
class InjectionRequest:
    """What a Pod asks for through its ``kvcache.gpustack.ai/`` annotations."""

    binding: str
    engine: Engine
    role: str | None
    """``Prefill`` or ``Decode``; None for a plain server, and always None on SGLang, which ignores the role."""
    container: str | None
    forwarded: bool


def _unexpected_key_error(key: str) -> str | None:
    path = annotation_path(key)
    if key in READ_ANNOTATIONS:
        return None
    if key == ANNOTATION_DOMAIN:
        return forbidden(
            path,
            "the reuse domain comes from the KVCachePoolBinding, which registers it and carries its ceiling; remove "
            "the annotation and name a Binding that declares the domain you want",
        )
    if key in WRITTEN_ANNOTATIONS:
        return forbidden(path, "is written by the webhook to record what it decided; remove it")
    if key == LABEL_INJECT:
        return forbidden(path, f"{LABEL_INJECT} is a label, not an annotation; move it to metadata.labels")
    readable = ", ".join(k.removeprefix(PREFIX) for k in READ_ANNOTATIONS)
    return forbidden(path, f"is not a {PREFIX} annotation this webhook reads ({readable}); fix the key")


def annotation_key_errors(annotations: Mapping[str, Any]) -> list[str]:
    """Unknown, refused and webhook-written ``kvcache.gpustack.ai/`` keys, and values that are not strings."""
    keys = sorted(k for k in annotations if isinstance(k, str) and k.startswith(PREFIX))
    errors = [e for key in keys if (e := _unexpected_key_error(key)) is not None]
    for key in READ_ANNOTATIONS:
        value = annotations.get(key)
        if value is not None and not isinstance(value, str):
            errors.append(invalid(annotation_path(key), value, "must be a string"))
    return errors


def _binding_name(value: str) -> str | Refused:
    path = annotation_path(ANNOTATION_BINDING)
    if not value:
        return Refused(required(path, "set it to the name of a KVCachePoolBinding in this Pod's namespace"))
    if "/" in value:
        return Refused(
            invalid(
                path,
                value,
                "a Binding is resolved in the Pod's own namespace and has no cross-namespace form; use the plain name "
                "of a KVCachePoolBinding in this Pod's namespace",
            )
        )
    return value


def _engine(engine: str, manufacturer: str | None) -> Engine | Refused:
    path = annotation_path(ANNOTATION_ENGINE)
    if not engine:
        return Refused(required(path, 'set "vLLM" or "SGLang"; the engine is declared, never guessed from the image'))
    family = ENGINE_SPELLINGS.get(engine)
    if family is None:
        message = not_supported(path, engine, SUPPORTED_ENGINES)
        if "ascend" in engine.lower():
            message += f'; for vLLM-Ascend set engine "vLLM" and {ANNOTATION_MANUFACTURER}: "ascend"'
        return Refused(message)
    if manufacturer is None:
        return Engine.VLLM if family is Family.VLLM else Engine.SGLANG
    mpath = annotation_path(ANNOTATION_MANUFACTURER)
    if manufacturer != "ascend":
        return Refused(not_supported(mpath, manufacturer, ["ascend"]))
    if family is not Family.VLLM:
        return Refused(
            forbidden(
                mpath,
                'selects the vLLM-Ascend runtime and applies only with engine "vLLM"; remove it, or set engine "vLLM"',
            )
        )
    return Engine.VLLM_ASCEND


def _role(value: str | None) -> str | Refused | None:
    """The vLLM role: ``Prefill``, ``Decode``, or None for a plain server."""
    if value is None:
        return None
    role = ROLE_SPELLINGS.get(value)
    if role is not None:
        return role
    path = annotation_path(ANNOTATION_ROLE)
    if value in ("Server", "server"):
        return Refused(
            invalid(
                path,
                value,
                'a plain server carries no role; remove the annotation ("Prefill" and "Decode" name the halves of a '
                "prefill/decode split)",
            )
        )
    return Refused(not_supported(path, value, SUPPORTED_ROLES) + "; omit the annotation for a plain server")


def _forwarded(value: str | None) -> bool | Refused:
    if value is None or value == "false":
        return False
    if value == "true":
        return True
    return Refused(not_supported(annotation_path(ANNOTATION_FORWARDED), value, ["true", "false"]))


def read_request(annotations: Mapping[str, Any]) -> InjectionRequest | Refused:
    """The injection the annotations ask for, or every field error in them."""
    errors = annotation_key_errors(annotations)
    if errors:
        return Refused(aggregate(errors))
    text: dict[str, str | None] = {k: annotations.get(k) for k in READ_ANNOTATIONS}
    binding = _binding_name(text[ANNOTATION_BINDING] or "")
    engine = _engine(text[ANNOTATION_ENGINE] or "", text[ANNOTATION_MANUFACTURER])
    role = None if engine is Engine.SGLANG else _role(text[ANNOTATION_ROLE])
    forwarded = _forwarded(text[ANNOTATION_FORWARDED])
    refusals = [r.message for r in (binding, engine, role, forwarded) if isinstance(r, Refused)]
    if refusals:
        return Refused(aggregate(refusals))
    assert isinstance(binding, str) and isinstance(engine, Engine) and isinstance(forwarded, bool)
    assert not isinstance(role, Refused)
    return InjectionRequest(binding, engine, role, text[ANNOTATION_CONTAINER], forwarded)


# ----------------------------------------------------------------------------------------------- the container


def _names(entries: Iterable[Any]) -> list[str]:
    return [name for e in entries if (name := _text(_mapping(e).get("name")))]


def select_container(spec: Mapping[str, Any], name: str | None) -> tuple[int, JSON] | Refused:
    """The app container the injection configures (its index and object)."""
    containers = _list(spec.get("containers"))
    if not containers:
        return Refused(required("spec.containers", "a Pod must have at least one container"))
    names = ", ".join(_names(containers))
    path = annotation_path(ANNOTATION_CONTAINER)
    if name is None:
        if len(containers) == 1 and isinstance(containers[0], dict):
            return 0, containers[0]
        return Refused(
            required(
                path,
                f"the Pod has {len(containers)} containers ({names}) and none is named; the first is never chosen, so "
                "set it to the engine's container",
            )
        )
    for index, c in enumerate(containers):
        if isinstance(c, dict) and c.get("name") == name:
            return index, c
    if name in _names(_list(spec.get("initContainers"))):
        return Refused(
            forbidden(
                path,
                f"names init container {json.dumps(name)}, which finishes before the workload starts, so configuring "
                f"it caches nothing; name an app container: {names}",
            )
        )
    return Refused(invalid(path, name, f"the Pod has no container of that name; name one of: {names}"))


def _string_list_error(path: str, value: Any) -> str | None:
    if value is None or (isinstance(value, list) and all(isinstance(v, str) for v in value)):
        return None
    return invalid(path, value, "must be a list of strings")


def _object_list_error(path: str, value: Any) -> str | None:
    if value is None or (isinstance(value, list) and all(isinstance(v, dict) for v in value)):
        return None
    return invalid(path, value, "must be a list of objects")


def container_shape_errors(path: str, container: Mapping[str, Any], spec: Mapping[str, Any]) -> list[str]:
    """The fields the injection extends must have shapes it can extend."""
    checks = [
        _string_list_error(f"{path}.command", container.get("command")),
        _string_list_error(f"{path}.args", container.get("args")),
        _object_list_error(f"{path}.env", container.get("env")),
        _object_list_error(f"{path}.volumeMounts", container.get("volumeMounts")),
        _object_list_error("spec.volumes", spec.get("volumes")),
    ]
    return [e for e in checks if e is not None]


def launch_error(path: str, verdict: LaunchVerdict) -> str | None:
    if verdict.accepted:
        return None
    where = f"{path}.{verdict.field}"
    if verdict.refusal in (LaunchRefusal.NO_COMMAND, LaunchRefusal.ARGS_WITHOUT_COMMAND):
        return required(where, verdict.reason)
    return forbidden(where, verdict.reason)


@dataclass(frozen=True, slots=True)
class OwnedFlag:
    """A flag the injection owns, and the shortest prefix the engine's parser still reads as it (an abbreviation)."""

    name: str
    shortest: str


KV_TRANSFER_CONFIG: Final = OwnedFlag(FLAG_KV_TRANSFER_CONFIG, "--kv-transfer")
KV_CACHE_DTYPE: Final = OwnedFlag(FLAG_KV_CACHE_DTYPE, "--kv-cache-d")
# Every shorter prefix of --hicache-storage-backend also abbreviates --hicache-storage-backend-extra-config: ambiguous.
HICACHE_BACKEND: Final = OwnedFlag(FLAG_HICACHE_BACKEND, FLAG_HICACHE_BACKEND)
HICACHE_EXTRA_CONFIG: Final = OwnedFlag(FLAG_HICACHE_EXTRA_CONFIG, FLAG_HICACHE_BACKEND + "-")
HIERARCHICAL_CACHE: Final = OwnedFlag(FLAG_HIERARCHICAL_CACHE, "--enable-hierarchical-c")


def flag_key(token: str, family: Family) -> str | None:
    """The option a token names as the engine's parser reads it: ``--x=v`` is ``--x``; on the vLLM family
    ``--x_y`` is ``--x-y`` and ``--x.key`` is ``--x``."""
    if not token.startswith("--") or token == "--":
        return None
    key = token.split("=", 1)[0]
    if family is Family.VLLM:
        key = key.split(".", 1)[0].replace("_", "-")
    return key


def names_flag(token: str, flag: OwnedFlag, family: Family) -> bool:
    """Whether the engine's parser reads ``token`` as ``flag``: the flag itself or a prefix no other flag shares."""
    key = flag_key(token, family)
    if key is None:
        return False
    return key == flag.name or (flag.name.startswith(key) and len(key) >= len(flag.shortest))


def _argv_positions(path: str, container: Mapping[str, Any]) -> list[tuple[str, str]]:
    return [
        (f"{path}.{part}[{i}]", token)
        for part in ("command", "args")
        for i, token in enumerate(_list(container.get(part)))
        if isinstance(token, str)
    ]


def _env_positions(path: str, container: Mapping[str, Any]) -> list[tuple[str, str]]:
    return [
        (f"{path}.env[{i}].name", _text(_mapping(e).get("name"))) for i, e in enumerate(_list(container.get("env")))
    ]


def _owned(engine: Engine) -> tuple[dict[OwnedFlag, str], dict[str, str]]:
    """The flags and variables refused on this engine, each with why (a predicate) and the fix."""
    configured = (
        f"is written by the KV cache injection for {engine.display_name}: the container already has a KV cache configured "
        f"and two sources for one setting cannot be diagnosed; remove yours, or drop the {LABEL_INJECT} label"
    )
    if engine.family is Family.VLLM:
        return {KV_TRANSFER_CONFIG: configured}, {ENV_CONFIG_PATH: configured}
    source = (
        "selects where SGLang reads its store configuration, leaving every injected MOONCAKE_* variable unread; "
        f"remove it, or drop the {LABEL_INJECT} label"
    )
    return {HICACHE_BACKEND: configured, HICACHE_EXTRA_CONFIG: source}, {ENV_SGLANG_CONFIG_PATH: source}


DTYPE_OWNED: Final = (
    "is set from the KVCachePoolBinding's spec.domain.dtype, so that every engine on one reuse domain writes one "
    "element type; remove yours and name a Binding that declares the dtype you want"
)


def _flag_error(where: str, token: str, flag: OwnedFlag, detail: str) -> str:
    if token == flag.name:
        return forbidden(where, f"{json.dumps(token)} {detail}")
    return forbidden(where, f"{json.dumps(token)} is read as {flag.name}, which {detail}")


def owned_key_errors(path: str, container: Mapping[str, Any], engine: Engine, dtype_owned: bool) -> list[str]:
    """Keys the injection writes or that would leave it unread: the engine's own, its config sources, the dtype."""
    flags, env = _owned(engine)
    if dtype_owned:
        flags[KV_CACHE_DTYPE] = DTYPE_OWNED
    errors = [
        _flag_error(where, token, flag, detail)
        for where, token in _argv_positions(path, container)
        for flag, detail in flags.items()
        if names_flag(token, flag, engine.family)
    ]
    errors += [
        forbidden(where, f"{name} {env[name]}") for where, name in _env_positions(path, container) if name in env
    ]
    return errors


def volume_errors(path: str, container: Mapping[str, Any], spec: Mapping[str, Any]) -> list[str]:
    """Collisions with the volume name and mount path the vLLM family's file vehicle owns."""
    owned = f"{json.dumps(VOLUME_NAME)} is owned by the KV cache injection; rename yours"
    errors = [
        forbidden(f"spec.volumes[{i}].name", owned)
        for i, v in enumerate(_list(spec.get("volumes")))
        if _mapping(v).get("name") == VOLUME_NAME
    ]
    for i, m in enumerate(_list(container.get("volumeMounts"))):
        mount = _mapping(m)
        if mount.get("name") == VOLUME_NAME:
            errors.append(forbidden(f"{path}.volumeMounts[{i}].name", owned))
        if _text(mount.get("mountPath")).rstrip("/") == MOUNT_PATH:
            errors.append(
                forbidden(
                    f"{path}.volumeMounts[{i}].mountPath",
                    f"{MOUNT_PATH} is where the KV cache injection mounts the client configuration; mount yours "
                    "elsewhere",
                )
            )
    return errors


def container_errors(
    path: str, container: Mapping[str, Any], spec: Mapping[str, Any], request: InjectionRequest, dtype_owned: bool
) -> tuple[LaunchVerdict | None, list[str]]:
    """The launch verdict and every refusal about the selected container."""
    shape = container_shape_errors(path, container, spec)
    if shape:
        return None, shape
    verdict = parse_launch(container.get("command"), container.get("args"), request.engine.value, request.forwarded)
    errors = [e for e in (launch_error(path, verdict),) if e is not None]
    errors += owned_key_errors(path, container, request.engine, dtype_owned)
    if request.engine.family is Family.VLLM:
        errors += volume_errors(path, container, spec)
    return verdict, errors


# ----------------------------------------------------------------------------------------------- the pool behind it


@dataclass(frozen=True, slots=True)
class Target:
    """What the injection writes from: the Binding, its pool, the transport, and the tenant (None: inject none)."""

    binding: KVCachePoolBinding
    pool: KVCachePool
    protocol: str
    tenant: str | None


def _refuse(binding_name: str, detail: str) -> Refused:
    return Refused(invalid(annotation_path(ANNOTATION_BINDING), binding_name, detail))


def find_binding(name: str, namespace: str, context: KVCacheContext) -> KVCachePoolBinding | Refused:
    binding = context.bindings.get((namespace, name))
    if binding is None:
        return _refuse(
            name,
            f"no KVCachePoolBinding {json.dumps(name)} exists in namespace {json.dumps(namespace)}; create the "
            "Binding, or fix the name",
        )
    if binding.deleting:
        return _refuse(
            name,
            f"KVCachePoolBinding {namespace}/{name} is being deleted: its reuse domain is being withdrawn from the "
            "ledger, so every write would fail with TENANT_NOT_REGISTERED; wait for the deletion to finish and create "
            "a new Binding, or name one that is not terminating",
        )
    return binding


def find_pool(binding: KVCachePoolBinding, context: KVCacheContext) -> KVCachePool | Refused:
    """The Binding's pool, provided it and its backend exist."""
    where = f"KVCachePoolBinding {binding.namespace}/{binding.name}"
    if not binding.pool:
        return _refuse(binding.name, f"{where} names no pool (spec.poolRef.name); fix the Binding's poolRef")
    pool = context.pools.get(binding.pool)
    if pool is None:
        return _refuse(
            binding.name,
            f"{where} references KVCachePool {json.dumps(binding.pool)}, which does not exist; fix the Binding's "
            "spec.poolRef, or create the pool",
        )
    if not pool.backends:
        return _refuse(binding.name, f"KVCachePool {pool.name} names no KVCacheBackend (spec.backends); fix the pool")
    missing = [b for b in pool.backends if b not in context.backends]
    if missing:
        return _refuse(
            binding.name,
            f"KVCachePool {pool.name} references KVCacheBackend {json.dumps(missing[0])}, which does not exist; fix "
            "the pool's spec.backends, or create the backend",
        )
    return pool


def _condition_text(pool: KVCachePool, ledger: Condition) -> str:
    said = f"KVCachePool {pool.name} reports {CONDITION_LEDGER}={ledger.status}"
    if ledger.reason and ledger.message:
        return f"{said} ({ledger.reason}: {ledger.message})"
    return f"{said} ({ledger.reason or ledger.message})" if ledger.reason or ledger.message else said


def ledger_tenant(binding: KVCachePoolBinding, pool: KVCachePool) -> str | Refused | None:
    """The tenant id to inject (the Binding's domain), None for a declared single-tenant store."""
    ledger = pool.ledger
    if ledger is None:
        return _refuse(
            binding.name,
            f"KVCachePool {pool.name} has not reported {CONDITION_LEDGER} yet; wait for the pool to report it",
        )
    if ledger.status == "True":
        return binding.domain
    if ledger.status == "False" and ledger.reason == REASON_MULTI_TENANCY_DISABLED:
        return None
    said = _condition_text(pool, ledger)
    if ledger.status == "Unknown":
        return _refuse(binding.name, f"{said}; wait until the pool has observed its master's tenant ledger")
    return _refuse(binding.name, f"{said}; restore the master and its tenant ledger, then re-create the Pod")


def _listed(transports: Iterable[str]) -> str:
    return ", ".join(sorted(transports))


def pool_protocol(binding: KVCachePoolBinding, pool: KVCachePool, engine: Engine) -> str | Refused:
    """The transport the engine is configured with: the one it requires, or the pool's only one."""
    offered = pool.transports
    head = f"KVCachePool {pool.name}"
    if not offered:
        return _refuse(
            binding.name,
            f"{head} publishes no member-group transport (status.transports) yet; wait for the pool to report it",
        )
    needed = engine.required_transport
    if needed is not None:
        if needed in offered:
            return needed
        api = TRANSPORT_TO_API[needed]
        return _refuse(
            binding.name,
            f"{head} offers {_listed(offered)}, but {engine.display_name} accepts only {needed}; pair it with a pool offering "
            f"{api}: set spec.transport.protocol: {api} on the pool's backend, or transport.protocol: {api} on the "
            "member group serving those nodes",
        )
    if len(offered) > 1:
        return _refuse(
            binding.name,
            f"{head} offers {len(offered)} transports ({_listed(offered)}) and {engine.display_name} declares no required "
            "transport, so it would be configured with one and fail with NotSupportedTransport reading a block held "
            "by another group; make the member groups use one protocol, or name a Binding on another pool",
        )
    return offered[0]


def _dtype_refusal(binding: KVCachePoolBinding) -> Refused:
    return _refuse(
        binding.name,
        f"KVCachePoolBinding {binding.namespace}/{binding.name} declares no spec.domain.dtype, so the engine cannot be "
        f"given the domain's {FLAG_KV_CACHE_DTYPE}; name a Binding that declares one",
    )


def resolve_target(request: InjectionRequest, namespace: str, context: KVCacheContext) -> Target | Refused:
    """Binding → pool → backend → ledger → endpoint → dtype → transport, refusing at the first that fails."""
    binding = find_binding(request.binding, namespace, context)
    if isinstance(binding, Refused):
        return binding
    pool = find_pool(binding, context)
    if isinstance(pool, Refused):
        return pool
    tenant = ledger_tenant(binding, pool)
    if isinstance(tenant, Refused):
        return tenant
    if not pool.client_endpoint:
        return _refuse(
            binding.name,
            f"KVCachePool {pool.name} has published no client endpoint yet; wait for the pool to report "
            "status.clientEndpoint",
        )
    if context.kv_cache_dtype_owned and not binding.dtype:
        return _dtype_refusal(binding)
    protocol = pool_protocol(binding, pool, request.engine)
    if isinstance(protocol, Refused):
        return protocol
    return Target(binding, pool, protocol, tenant)


# ----------------------------------------------------------------------------------------------- what is written


def compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def client_config(target: Target) -> JSON:
    """The vLLM family's ``mooncake.json``: every key written, none left to a default."""
    config: JSON = {
        "master_server_address": target.pool.client_endpoint,
        "metadata_server": METADATA_SERVER,
        "protocol": target.protocol,
        "device_name": "",
        "global_segment_size": GLOBAL_SEGMENT_SIZE,
        "local_buffer_size": LOCAL_BUFFER_SIZE,
        "mode": "standalone-store",
    }
    if target.tenant is not None:
        config["tenant_id"] = target.tenant
    return config


def kv_transfer_config(engine: Engine, role: str | None) -> JSON:
    return {"kv_connector": CONNECTORS[engine], "kv_role": KV_ROLES[role]}


def _env(name: str, value: str) -> JSON:
    return {"name": name, "value": value}


def sglang_env(target: Target) -> list[JSON]:
    """SGLang's ``MOONCAKE_*`` variables; each overwrites a declaration of the same name in place."""
    env = [
        _env("MOONCAKE_MASTER", target.pool.client_endpoint),
        _env("MOONCAKE_TE_META_DATA_SERVER", METADATA_SERVER),
        _env("MOONCAKE_PROTOCOL", target.protocol),
        _env("MOONCAKE_DEVICE", ""),
        _env("MOONCAKE_GLOBAL_SEGMENT_SIZE", str(GLOBAL_SEGMENT_SIZE)),
        {"name": "MOONCAKE_LOCAL_HOSTNAME", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
    ]
    if target.tenant is not None:
        env.append(_env("MOONCAKE_TENANT_ID", target.tenant))
    return env


def _has_flag(argv: Iterable[str], flag: OwnedFlag, family: Family) -> bool:
    return any(isinstance(t, str) and names_flag(t, flag, family) for t in argv)


@dataclass(frozen=True, slots=True)
class Injection:
    """Everything written into the Pod."""

    args: tuple[str, ...]
    env: tuple[JSON, ...]
    """Written in place over a declaration of the same name (appended when there is none)."""
    env_defaults: tuple[JSON, ...]
    """Written only when the container does not set the name."""
    client_config: str | None
    """The vLLM family's file payload, projected from the ``client-config`` annotation; None on SGLang."""
    record: str


def plan_injection(
    request: InjectionRequest, target: Target, verdict: LaunchVerdict, argv: Sequence[str], dtype_owned: bool
) -> Injection:
    engine = request.engine
    dtype = [FLAG_KV_CACHE_DTYPE, target.binding.dtype] if dtype_owned else []
    if engine.family is Family.VLLM:
        args = [FLAG_KV_TRANSFER_CONFIG, compact(kv_transfer_config(engine, request.role)), *dtype]
        env = [_env(ENV_CONFIG_PATH, CONFIG_PATH)]
        config: str | None = compact(client_config(target))
    else:
        args = [FLAG_HICACHE_BACKEND, "mooncake", *dtype]
        if not _has_flag(argv, HIERARCHICAL_CACHE, Family.SGLANG):
            args.append(FLAG_HIERARCHICAL_CACHE)
        env = sglang_env(target)
        config = None
    record = {
        "binding": request.binding,
        "engine": engine.value,
        "vehicle": "file" if config is not None else "environment",
        "domain": target.binding.domain,
        "tenantInjected": target.tenant is not None,
        "launchProgram": verdict.program,
        "launchArgsForwarded": verdict.args_forwarded,
    }
    defaults = tuple(_env(name, "1") for name in METRIC_ENV)
    return Injection(tuple(args), tuple(env), defaults, config, compact(record))


def _write_env(entries: list[Any], injected: Iterable[JSON], defaults: Iterable[JSON]) -> None:
    """Overwrite each injected name in place (dropping later duplicates), append the rest, then unset defaults."""
    for var in injected:
        places = [i for i, e in enumerate(entries) if _mapping(e).get("name") == var["name"]]
        if not places:
            entries.append(dict(var))
            continue
        entries[places[0]] = dict(var)
        for i in reversed(places[1:]):
            del entries[i]
    present = {_mapping(e).get("name") for e in entries}
    entries.extend(dict(var) for var in defaults if var["name"] not in present)


def _write_file_vehicle(spec: JSON, container: JSON) -> None:
    spec.setdefault("volumes", []).append(
        {
            "name": VOLUME_NAME,
            "downwardAPI": {
                "items": [
                    {
                        "path": CONFIG_FILE,
                        "fieldRef": {"fieldPath": f"metadata.annotations['{ANNOTATION_CLIENT_CONFIG}']"},
                    }
                ]
            },
        }
    )
    container.setdefault("volumeMounts", []).append({"name": VOLUME_NAME, "mountPath": MOUNT_PATH, "readOnly": True})


def apply_injection(pod: JSON, index: int, injection: Injection, append_to: Literal["command", "args"]) -> JSON:
    """A copy of the Pod with the injection written into container ``index``."""
    mutated = deep_copy(pod)
    spec: JSON = mutated["spec"]
    container: JSON = spec["containers"][index]
    container.setdefault(append_to, []).extend(injection.args)
    if container.get("env") is None:
        container["env"] = []
    _write_env(container["env"], injection.env, injection.env_defaults)
    metadata: JSON = mutated.setdefault("metadata", {})
    annotations: JSON = metadata.setdefault("annotations", {})
    if injection.client_config is not None:
        if container.get("volumeMounts") is None:
            container.pop("volumeMounts", None)
        if spec.get("volumes") is None:
            spec.pop("volumes", None)
        _write_file_vehicle(spec, container)
        annotations[ANNOTATION_CLIENT_CONFIG] = injection.client_config
    annotations[ANNOTATION_INJECTED] = injection.record
    return mutated


# ----------------------------------------------------------------------------------------------- the webhooks


def pod_namespace(metadata: Mapping[str, Any], context: KVCacheContext) -> str:
    return _text(metadata.get("namespace")) or context.request_namespace or "default"


@fail_closed
def admit_kvcache_pod(pod: JSON, context: KVCacheContext) -> Admission:
    """The KV cache injection webhook (Pod CREATE, ``failurePolicy: Fail``)."""
    if not isinstance(pod, dict):
        return deny("the request object is not a Pod")
    metadata = _mapping(pod.get("metadata"))
    if _mapping(metadata.get("labels")).get(LABEL_INJECT) != "true":
        return allow(pod)
    request = read_request(_mapping(metadata.get("annotations")))
    if isinstance(request, Refused):
        return deny(request.message)
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return deny(required("spec", "a Pod must have a spec"))
    selected = select_container(spec, request.container)
    if isinstance(selected, Refused):
        return deny(selected.message)
    index, container = selected
    verdict, errors = container_errors(
        f"spec.containers[{index}]", container, spec, request, context.kv_cache_dtype_owned
    )
    if errors or verdict is None:
        return deny(aggregate(errors))
    target = resolve_target(request, pod_namespace(metadata, context), context)
    if isinstance(target, Refused):
        return deny(target.message)
    argv = [*_list(container.get("command")), *_list(container.get("args"))]
    injection = plan_injection(request, target, verdict, argv, context.kv_cache_dtype_owned)
    return allow(apply_injection(pod, index, injection, verdict.append_to))


FROZEN_WHY: Final[Mapping[str, str]] = {
    LABEL_INJECT: (
        "injection runs only at CREATE, so a changed label would misstate whether this Pod uses a cache; change it "
        "on the workload's Pod template and let the workload roll"
    ),
    ANNOTATION_INJECTED: "it records what the webhook decided at CREATE; restore the value the Pod was created with",
    ANNOTATION_CLIENT_CONFIG: (
        f"{CONFIG_PATH} is projected from it into the running container; restore the value the Pod was created with"
    ),
}


def _frozen_change(key: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> str | None:
    if key in old and key not in new:
        return "removed"
    if key in new and key not in old:
        return "added"
    if old.get(key) != new.get(key):
        return "changed"
    return None


def frozen_key_errors(old_metadata: Mapping[str, Any], new_metadata: Mapping[str, Any]) -> list[str]:
    errors = []
    places: tuple[tuple[str, str, Callable[[str], str]], ...] = (
        ("labels", LABEL_INJECT, label_path),
        ("annotations", ANNOTATION_INJECTED, annotation_path),
        ("annotations", ANNOTATION_CLIENT_CONFIG, annotation_path),
    )
    for section, key, path in places:
        change = _frozen_change(key, _mapping(old_metadata.get(section)), _mapping(new_metadata.get(section)))
        if change is not None:
            errors.append(forbidden(path(key), f"is frozen once the Pod exists ({change}): {FROZEN_WHY[key]}"))
    return errors


@fail_open
def validate_kvcache_update(old_pod: JSON, new_pod: JSON) -> Admission:
    """The freeze on the trigger label and the two written annotations (Pod UPDATE, ``failurePolicy: Ignore``).

    It holds on terminating Pods too: a Pod serves through its grace period while the kubelet keeps reprojecting the
    client configuration file.
    """
    if not isinstance(old_pod, dict) or not isinstance(new_pod, dict):
        return allow()
    errors = frozen_key_errors(_mapping(old_pod.get("metadata")), _mapping(new_pod.get("metadata")))
    return deny(aggregate(errors)) if errors else allow()
