"""The inference engines the injection configures: their spellings, entry points and roles, the flags and variables
they read, and how their argument parsers read a flag (so that an owned flag is recognised in every spelling)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from gpuctl.core.compat import StrEnum


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


SGLANG_MODULE: Final = "sglang.launch_server"
"""The module SGLang's entry point runs (``python3 -m sglang.launch_server``)."""

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


def family_of(engine: str) -> Family | None:
    """The family an engine spelling belongs to (the annotation's spellings and the record's ``vllm-ascend``)."""
    family = ENGINE_SPELLINGS.get(engine)
    if family is None and engine == Engine.VLLM_ASCEND.value:
        family = Family.VLLM
    return family


# ----------------------------------------------------------------------------------------------- what the engines read

FLAG_KV_TRANSFER_CONFIG: Final = "--kv-transfer-config"
FLAG_KV_CACHE_DTYPE: Final = "--kv-cache-dtype"
FLAG_HICACHE_BACKEND: Final = "--hicache-storage-backend"
FLAG_HICACHE_EXTRA_CONFIG: Final = "--hicache-storage-backend-extra-config"
FLAG_HIERARCHICAL_CACHE: Final = "--enable-hierarchical-cache"
ENV_CONFIG_PATH: Final = "MOONCAKE_CONFIG_PATH"
ENV_SGLANG_CONFIG_PATH: Final = "SGLANG_HICACHE_MOONCAKE_CONFIG_PATH"

VOLUME_NAME: Final = "gpustack-kvcache"
MOUNT_PATH: Final = "/etc/gpustack/kvcache"
CONFIG_FILE: Final = "mooncake.json"
CONFIG_PATH: Final = f"{MOUNT_PATH}/{CONFIG_FILE}"
"""Where the vLLM family reads its client configuration (``MOONCAKE_CONFIG_PATH``)."""


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
