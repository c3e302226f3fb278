"""Registry credentials (#43 item 2): a docker config.json, and the
Authorization each request carries.

The config.json is the file an imagePullSecret of type
kubernetes.io/dockerconfigjson projects (`.dockerconfigjson`), read as a
bounded regular file (credfile.py). An entry gives a user and password
(`auth`, base64 of `user:password`, or `username`/`password`) or an
`identitytoken`, an OAuth2 refresh token that is traded at the token
realm, never sent to the registry itself.

`RegistryAuth.headers_for` is what the wire layer asks per hop: the header
goes to the registry's own origin only, so a blob redirected to a storage
host (S3, a CDN) never carries the registry's Authorization.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
from dataclasses import dataclass, field

from llmkube_stager.errors import ConfigError
from llmkube_stager.sources.credfile import read_credential_file
from llmkube_stager.sources.oci.ref import DOCKER_HUB, OciRef
from llmkube_stager.sources.wire.status import Origin

CONFIG_VARIABLE = "LLMKUBE_OCI_DOCKER_CONFIG"
_HUB_KEYS = ("https://index.docker.io/v1/", "index.docker.io", "docker.io", "registry-1.docker.io")


@dataclass(frozen=True)
class Credentials:
    username: str = ""
    password: str = field(default="", repr=False)
    identity_token: str = field(default="", repr=False)


def config_path(setting: str) -> str:
    """The config.json a setting names (the file, or its directory)."""
    if not setting:
        return ""
    return os.path.join(setting, "config.json") if os.path.isdir(setting) else setting


def load_credentials(setting: str, ref: OciRef) -> Credentials | None:
    """The entry of the docker config for this registry, or None."""
    path = config_path(setting)
    if not path:
        return None
    raw = read_credential_file(path, CONFIG_VARIABLE)
    try:
        doc = json.loads(raw)
        auths = doc.get("auths") or {}
        if not isinstance(auths, dict):
            raise ValueError
    except (ValueError, AttributeError, RecursionError):
        raise ConfigError(
            f"{CONFIG_VARIABLE} names {path}, which is not a docker config.json (a JSON object "
            "with an 'auths' object)"
        ) from None
    entry = _entry_for(auths, ref)
    return None if entry is None else _credentials(entry, path)


def _entry_for(auths: dict[str, object], ref: OciRef) -> dict[str, object] | None:
    keys = _HUB_KEYS if ref.registry == DOCKER_HUB else (ref.registry,)
    by_host = {_host_of(key): value for key, value in auths.items()}
    for key in keys:
        value = by_host.get(_host_of(key))
        if isinstance(value, dict):
            return value
    return None


def _host_of(key: str) -> str:
    """A config key as docker matches it: scheme and path dropped."""
    key = re.sub(r"^[a-z]+://", "", key.strip().lower())
    return key.split("/", 1)[0]


def _credentials(entry: dict[str, object], path: str) -> Credentials:
    user, password = str(entry.get("username") or ""), str(entry.get("password") or "")
    encoded = str(entry.get("auth") or "")
    if encoded:
        try:
            user, sep, password = base64.b64decode(encoded, validate=True).decode().partition(":")
            if not sep:
                raise ValueError
        except (binascii.Error, ValueError, UnicodeDecodeError):
            raise ConfigError(
                f"the 'auth' of a registry entry in {path} is not base64 of user:password"
            ) from None
    return Credentials(user, password, str(entry.get("identitytoken") or ""))


@dataclass
class RegistryAuth:
    """The Authorization of one registry origin; renewed in place when a
    token expires (registry.py), and sent nowhere else."""

    origin: Origin
    header: str = field(default="", repr=False)

    def headers_for(self, url: str, first_url: str) -> dict[str, str]:
        if self.header and Origin.of(url) == self.origin:
            return {"Authorization": self.header}
        return {}


def basic_header(creds: Credentials) -> str:
    raw = f"{creds.username}:{creds.password}".encode()
    return "Basic " + base64.b64encode(raw).decode()


_PARAM_RE = re.compile(r'([A-Za-z]+)\s*=\s*(?:"([^"]*)"|([^\s,]+))')


def parse_challenge(value: str) -> tuple[str, dict[str, str]]:
    """`Bearer realm="...",service="...",scope="..."` -> ("bearer", params)."""
    scheme, _, rest = value.strip().partition(" ")
    params = {
        m.group(1).lower(): m.group(2) if m.group(2) is not None else m.group(3)
        for m in _PARAM_RE.finditer(rest)
    }
    return scheme.lower(), params
