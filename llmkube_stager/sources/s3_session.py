"""botocore for the S3 control path, fed only what config.py collected.

boto3's default credential chain is what pods use (issue #12): static keys,
IRSA (`AWS_ROLE_ARN` + `AWS_WEB_IDENTITY_TOKEN_FILE`), a profile of the shared
credentials/config files (`AWS_PROFILE`), container credentials (EKS Pod
Identity, ECS) and instance metadata, in botocore's order. botocore reads
`os.environ` by default; here every provider and the configuration store get
`Config.aws_env` instead (the project's rule: config.py is the only reader of
the environment), which also keeps in-process tests hermetic.

`AWS_ENDPOINT_URL` is the *S3* endpoint in this contract (the operator sets
it for S3 alone), so it is never handed to botocore as its global endpoint:
STS goes to `AWS_ENDPOINT_URL_STS`, or to AWS's regional STS.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from typing import Any

# The profile name under which the IRSA variables are handed to botocore's
# web identity provider (a synthetic profile: it never reads os.environ).
_ENV_WEB_IDENTITY = "llmkube-environment"


def botocore_env(aws_env: Mapping[str, str]) -> dict[str, str]:
    """The variables botocore may read, with "~/.aws" resolved against the
    HOME that config.py saw (botocore would expand "~" from os.environ)."""
    env = {k: v for k, v in aws_env.items() if k != "HOME"}
    home = aws_env.get("HOME", "")
    for name, default in (
        ("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials"),
        ("AWS_CONFIG_FILE", ".aws/config"),
    ):
        if name not in env:
            # No HOME: a path that cannot exist, never the process's "~".
            env[name] = posixpath.join(home, default) if home else f"/nonexistent/{default}"
    return env


def make_session(env: Mapping[str, str], sts_endpoint: str | None) -> Any:
    """A botocore session whose configuration and credentials come from `env`."""
    import botocore.session
    from botocore import configprovider as cp

    class _Session(botocore.session.Session):  # type: ignore[misc]
        def create_client(self, service_name: str, *args: Any, **kwargs: Any) -> Any:
            # Credential providers create their STS clients through here.
            return super().create_client(
                service_name, *args, **_client_kwargs(service_name, sts_endpoint, kwargs)
            )

    session = _Session()
    chain = cp.ConfigChainFactory(session=session, environ=dict(env))
    mapping = _config_chains(chain, cp.BOTOCORE_DEFAUT_SESSION_VARIABLES)
    mapping["s3"] = cp.SectionConfigProvider(
        "s3", session, _config_chains(chain, cp.DEFAULT_S3_CONFIG_VARS)
    )
    session.register_component("config_store", cp.ConfigValueStore(mapping=mapping))
    # Built on first use: the caller reads the profile first (a missing one
    # is a configuration error, which the resolver would only hit midway).
    session.lazy_register_component(
        "credential_provider", lambda: _credential_resolver(session, env)
    )
    return session


def _config_chains(chain: Any, variables: Mapping[str, Any]) -> dict[str, Any]:
    return {
        name: chain.create_config_chain(
            instance_name=name,
            env_var_names=spec[1],
            config_property_names=spec[0],
            default=spec[2],
            conversion_func=spec[3],
        )
        for name, spec in variables.items()
    }


def _client_kwargs(
    service_name: str, sts_endpoint: str | None, kwargs: dict[str, Any]
) -> dict[str, Any]:
    """Never the endpoints botocore would look up in os.environ or the
    config file (`AWS_ENDPOINT_URL` is ours, for S3): an explicit one, or
    AWS's own."""
    from botocore.config import Config as BotoConfig

    merged = dict(kwargs)
    if service_name == "sts" and sts_endpoint and not merged.get("endpoint_url"):
        merged["endpoint_url"] = sts_endpoint
    ignore = BotoConfig(ignore_configured_endpoint_urls=True)
    given = merged.get("config")
    merged["config"] = ignore if given is None else given.merge(ignore)
    return merged


def _credential_resolver(session: Any, env: Mapping[str, str]) -> Any:
    """botocore's default chain (credentials.create_credential_resolver),
    every provider reading `env`."""
    from botocore import credentials as bc

    profile = session.get_config_variable("profile") or "default"
    cache: dict[str, Any] = {}
    env_keys = bc.EnvProvider(environ=env)
    container = bc.ContainerProvider(environ=env)
    metadata = _instance_metadata(session, env)
    builder = bc.ProfileProviderBuilder(session, cache=cache)
    assume_role = bc.AssumeRoleProvider(
        load_config=lambda: session.full_config,
        client_creator=session.create_client,
        cache=cache,
        profile_name=profile,
        credential_sourcer=bc.CanonicalNameCredentialSourcer([env_keys, container, metadata]),
        profile_provider_builder=builder,
    )
    web_identity = bc.AssumeRoleWithWebIdentityProvider(
        load_config=lambda: {"profiles": {_ENV_WEB_IDENTITY: _web_identity_settings(env)}},
        client_creator=session.create_client,
        profile_name=_ENV_WEB_IDENTITY,
        cache=cache,
        disable_env_vars=True,
    )
    profile_providers = builder.providers(profile_name=profile, disable_env_vars=True)
    providers = [env_keys, assume_role, web_identity, *profile_providers, container, metadata]
    return bc.CredentialResolver(providers=providers)


def _web_identity_settings(env: Mapping[str, str]) -> dict[str, str]:
    names = {
        "role_arn": "AWS_ROLE_ARN",
        "web_identity_token_file": "AWS_WEB_IDENTITY_TOKEN_FILE",
        "role_session_name": "AWS_ROLE_SESSION_NAME",
    }
    return {key: env[name] for key, name in names.items() if env.get(name)}


def _instance_metadata(session: Any, env: Mapping[str, str]) -> Any:
    from botocore import credentials as bc
    from botocore.utils import InstanceMetadataFetcher, resolve_imds_endpoint_mode

    config = {
        "ec2_metadata_service_endpoint": session.get_config_variable(
            "ec2_metadata_service_endpoint"
        ),
        "ec2_metadata_service_endpoint_mode": resolve_imds_endpoint_mode(session),
        "ec2_metadata_v1_disabled": session.get_config_variable("ec2_metadata_v1_disabled"),
    }
    fetcher = InstanceMetadataFetcher(
        timeout=session.get_config_variable("metadata_service_timeout"),
        num_attempts=session.get_config_variable("metadata_service_num_attempts"),
        user_agent=session.user_agent(),
        config=config,
        env=dict(env),
    )
    return bc.InstanceMetadataProvider(iam_role_fetcher=fetcher)
