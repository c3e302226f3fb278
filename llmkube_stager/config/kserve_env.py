"""KServe's environment (#24 item 3): what KServe's credential builder and
webhook give a storage initializer, and its storage spec, mapped onto the
agent's own variables before any is read (reader.py)."""

from __future__ import annotations

import posixpath
from collections.abc import Mapping

# What KServe's credential builder and webhook give a storage initializer
# (#24 item 3: kserve_storage.py, s3_secret.go), mapped onto the agent's own
# variables; a variable of the agent that is set always wins.
KSERVE_VARS: tuple[str, ...] = (
    "S3_ENDPOINT",
    "S3_USE_HTTPS",
    "S3_VERIFY_SSL",
    "S3_USER_VIRTUAL_BUCKET",
    "awsAnonymousCredential",
    "AWS_CA_BUNDLE",
    "CA_BUNDLE_CONFIGMAP_NAME",
    "CA_BUNDLE_VOLUME_MOUNT_POINT",
    "STORAGE_CONFIG",
    "STORAGE_OVERRIDE_CONFIG",
)
# KServe's storage spec (the `storage-config` Secret: one JSON object per
# key, STORAGE_OVERRIDE_CONFIG on top): its s3 fields and the variables they
# set, which win over the environment as in KServe's _update_with_storage_spec.
STORAGE_SPEC_VARS = ("STORAGE_CONFIG", "STORAGE_OVERRIDE_CONFIG")
_STORAGE_SPEC_S3 = (
    ("endpoint_url", "AWS_ENDPOINT_URL"),
    ("access_key_id", "AWS_ACCESS_KEY_ID"),
    ("secret_access_key", "AWS_SECRET_ACCESS_KEY"),
    ("region", "AWS_DEFAULT_REGION"),
    ("ca_bundle", "AWS_CA_BUNDLE"),
    ("verify_ssl", "S3_VERIFY_SSL"),
    ("anonymous", "awsAnonymousCredential"),
)


def storage_spec_docs(environ: Mapping[str, str]) -> tuple[dict[str, object], str | None]:
    """The merged storage spec, and the name of a variable that is not a
    JSON object (never its value: it holds keys)."""
    if not any(environ.get(name, "").strip() for name in STORAGE_SPEC_VARS):
        return {}, None
    import json

    merged: dict[str, object] = {}
    for name in STORAGE_SPEC_VARS:
        text = environ.get(name, "").strip()
        if not text:
            continue
        try:
            doc = json.loads(text)
        except (ValueError, RecursionError):
            return {}, name
        if not isinstance(doc, dict):
            return {}, name
        merged.update(doc)
    return merged, None


def storage_spec(environ: Mapping[str, str]) -> dict[str, str]:
    if not any(environ.get(name, "").strip() for name in STORAGE_SPEC_VARS):
        return {}
    spec, _ = storage_spec_docs(environ)
    if spec.get("type") != "s3":
        return {}
    found: dict[str, str] = {}
    for key, name in _STORAGE_SPEC_S3:
        value = spec.get(key)
        if isinstance(value, bool):
            found[name] = "true" if value else "false"
        elif isinstance(value, str | int):
            found[name] = str(value)
    return found


# awsAnonymousCredential=true: what would sign a request is not handed on
# (KServe: botocore UNSIGNED whatever else the Secret holds).
SIGNING_VARS = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_ROLE_ARN",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN",
    "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
)
KSERVE_CA_MOUNT_DEFAULT = "/etc/ssl/custom-certs"


def with_kserve(environ: Mapping[str, str]) -> Mapping[str, str]:
    """The environment with KServe's variables mapped onto the agent's."""
    if not any(name in environ for name in KSERVE_VARS):
        return environ
    environ = {**environ, **storage_spec(environ)}
    merged = dict(environ)

    def given(name: str) -> str:
        return environ.get(name, "").strip()

    endpoint = given("S3_ENDPOINT")
    if endpoint and not given("AWS_ENDPOINT_URL"):
        if "://" not in endpoint:  # KServe's form: host[:port], the scheme by S3_USE_HTTPS
            https = given("S3_USE_HTTPS").lower() not in ("0", "false")
            endpoint = ("https://" if https else "http://") + endpoint
        merged["AWS_ENDPOINT_URL"] = endpoint
    if given("S3_USER_VIRTUAL_BUCKET").lower() == "true" and not given("AWS_S3_ADDRESSING_STYLE"):
        merged["AWS_S3_ADDRESSING_STYLE"] = "virtual"
    if not given("LLMKUBE_CA_DIR"):
        # Added to the system roots like LLMKUBE_CA_DIR (sources/tls.py).
        if given("AWS_CA_BUNDLE"):
            merged["LLMKUBE_CA_DIR"] = posixpath.dirname(given("AWS_CA_BUNDLE")) or "/"
        elif given("CA_BUNDLE_CONFIGMAP_NAME"):
            merged["LLMKUBE_CA_DIR"] = (
                given("CA_BUNDLE_VOLUME_MOUNT_POINT") or KSERVE_CA_MOUNT_DEFAULT
            )
    if given("awsAnonymousCredential").lower() == "true":
        for name in SIGNING_VARS:
            merged.pop(name, None)
        # Nothing else in the chain may find a key (files under HOME, IMDS).
        merged.update(
            AWS_SHARED_CREDENTIALS_FILE="/dev/null",
            AWS_CONFIG_FILE="/dev/null",
            AWS_EC2_METADATA_DISABLED="true",
        )
    return merged
