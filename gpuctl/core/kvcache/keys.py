"""The Pod label and annotation keys of the KV cache injection, and the field paths refusals name them by."""

from __future__ import annotations

from typing import Final

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

FORWARDING_DECLARATION: Final = f'{ANNOTATION_FORWARDED}: "true"'


def annotation_path(key: str) -> str:
    return f"metadata.annotations[{key}]"


def label_path(key: str) -> str:
    return f"metadata.labels[{key}]"
