"""The engines: spellings and families, and an owned flag recognised in every spelling the engine's parser reads as
it."""

from __future__ import annotations

import pytest

from gpuctl.core.kvcache.engines import KV_CACHE_DTYPE, Engine, Family, family_of, names_flag

# ----------------------------------------------------------------------------------------------- engines


@pytest.mark.parametrize(
    ("spelling", "family"),
    [
        ("vLLM", Family.VLLM),
        ("vllm", Family.VLLM),
        ("vllm-ascend", Family.VLLM),
        ("SGLang", Family.SGLANG),
        ("sglang", Family.SGLANG),
        ("VLLM", None),
        ("TGI", None),
        ("", None),
    ],
)
def test_engine_spellings_belong_to_a_family(spelling: str, family: Family | None) -> None:
    assert family_of(spelling) is family


def test_each_engine_names_its_family_and_transport() -> None:
    assert [(e.family, e.display_name, e.required_transport) for e in Engine] == [
        (Family.VLLM, "vLLM", None),
        (Family.VLLM, "vLLM-Ascend", "ascend"),
        (Family.SGLANG, "SGLang", None),
    ]
    assert (Family.VLLM.entry_point, Family.SGLANG.entry_point) == ("vllm", "python3 -m sglang.launch_server")


# ----------------------------------------------------------------------------------------------- flag spellings


@pytest.mark.parametrize(
    ("token", "family", "reads_as_dtype"),
    [
        ("--kv-cache-dtype", Family.VLLM, True),
        ("--kv_cache_dtype=fp8", Family.VLLM, True),
        ("--kv_cache_dtype=fp8", Family.SGLANG, False),  # SGLang's parser does not fold underscores
        ("--kv-cache-dt", Family.SGLANG, True),
        ("--kv-cache-", Family.VLLM, False),  # ambiguous between several --kv-cache-* flags
        ("--kv-cache-dtype-x", Family.VLLM, False),
        ("-kv-cache-dtype", Family.VLLM, False),
        ("fp8", Family.VLLM, False),
    ],
)
def test_flag_spellings(token: str, family: Family, reads_as_dtype: bool) -> None:
    assert names_flag(token, KV_CACHE_DTYPE, family) is reads_as_dtype
