"""#41 item 2: AZURE_STORAGE_ACCESS_KEY is a SAS exactly when
azure-storage-blob takes it for one (`_is_credential_sastoken`: a query
whose every field is a SAS field), else an account key. Pure: the
library's own classifier is the reference, no request."""

from __future__ import annotations

import base64
import hashlib

import pytest

from llmkube_stager.sources.azure.sas import is_sas


def _sdk_is_sas(text: str) -> bool:
    from azure.storage.blob._shared_access_signature import _is_credential_sastoken

    return bool(_is_credential_sastoken(text))


def test_keys_of_every_ending_are_keys_as_the_sdk_reads_them() -> None:
    """Every value of an account key's last two bytes (every ending of
    its base64 before `==`, `sig==` among them, 1 in 16,384 keys): the
    agent agrees with azure-storage-blob on each, and each is a key.
    Failed before: the 4 endings `...sig==` were taken for a SAS."""
    head = bytearray(hashlib.sha512(b"#41 item 2").digest())
    taken_for_sas = []
    for last_two in range(1 << 16):
        head[62], head[63] = last_two >> 8, last_two & 0xFF
        key = base64.b64encode(bytes(head)).decode()
        if is_sas(key) or _sdk_is_sas(key):
            taken_for_sas.append(key[-6:])
    assert taken_for_sas == []


@pytest.mark.parametrize(
    "text",
    [
        "sv=2021-08-06&sr=c&sp=rl&se=2099-01-01&sig=abc%3D",
        "?sv=2021-08-06&sr=c&sp=rl&se=2099-01-01&sig=abc%3D",
        "sig=abc",
        "se=2099-01-01&sp=r&spr=https&sv=2022-11-02&sr=b&skoid=x&sktid=y&sig=z",
        # A field that is no SAS field: the SDK takes the string for a key.
        "sv=2021-08-06&sig=abc&comp=list",
        "sig",
        "",
        "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==",
        "sig==",
        "abcsig==",
        "c2lnPT0=",
    ],
)
def test_sas_or_key_as_the_sdk_tells_them(text: str) -> None:
    assert is_sas(text) == _sdk_is_sas(text)


def test_every_sas_field_of_the_installed_sdk_is_known() -> None:
    from azure.storage.blob._shared.shared_access_signature import QueryStringConstants

    from llmkube_stager.sources.azure.sas import SAS_FIELDS

    assert set(QueryStringConstants.to_list()) <= SAS_FIELDS
