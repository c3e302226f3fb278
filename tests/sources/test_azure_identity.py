"""Azure Blob with token credentials (#33 item 2): azure-identity's real
ClientSecretCredential and WorkloadIdentityCredential against the suite's
fake Entra ID (tests/harness/entra.py, AZURE_AUTHORITY_HOST), the bearer
tokens checked by Azurite's `--oauth basic` over TLS, through the front.
Nothing leaves loopback: the credentials are built explicitly (no
DefaultAzureCredential chain, no instance metadata probe)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.azurite import Azurite, S3Fault, cleared
from tests.harness.canary import canary, leaks
from tests.harness.entra import CLIENT_ID, TENANT, FakeEntra, FakeImds, certificate_file
from tests.harness.sample import KIB, payload
from tests.harness.tlsca import LocalCA

pytestmark = [pytest.mark.floors, pytest.mark.usefixtures("azure_loopback_only")]
SECRET = canary("azsecret", 40)
ASSERTION = "eyJhbGciOiJub25lIn0." + canary("fedtoken", 40) + ".c2ln"


@pytest.fixture
def ca(azure_ca: LocalCA) -> LocalCA:
    """The session's test CA: Azurite's and the fake Entra ID's certificates."""
    return azure_ca


@pytest.fixture
def az(azurite_tls: Azurite) -> Iterator[Azurite]:
    """The session's Azurite over TLS (tests/conftest.py), its front cleared;
    the conftest's `container` is made there."""
    yield from cleared(azurite_tls)


@pytest.fixture
def entra(ca: LocalCA) -> Iterator[FakeEntra]:
    with FakeEntra(ca.server_context(), secret=SECRET, assertion=ASSERTION) as fake:
        yield fake


def identity_env(az: Azurite, entra: FakeEntra, ca: LocalCA, **extra: str) -> dict[str, str]:
    return {
        "AZURE_STORAGE_CONNECTION_STRING": az.connection_string(key=False),
        "AZURE_CLIENT_ID": CLIENT_ID,
        "AZURE_TENANT_ID": TENANT,
        "AZURE_AUTHORITY_HOST": entra.authority,
        "LLMKUBE_CA_DIR": str(ca.ca_dir),
        **extra,
    }


def bearers(az: Azurite, container: str) -> list[str]:
    return [
        r.headers.get("authorization", "")
        for r in az.requests()
        if container in r.path and r.method == "GET"
    ]


def test_a_service_principal_gets_a_token_azurite_accepts(pod, az, entra, ca, container) -> None:
    data = payload(96 * KIB, 11)
    az.service().get_blob_client(container, "m/model.gguf").upload_blob(data)
    env = pod.env | {
        "MODEL_SOURCE": Azurite.source(container, "m"),
        "CACHE_DIR": str(pod.cache_dir),
        **identity_env(az, entra, ca, AZURE_CLIENT_SECRET=SECRET),
    }

    run = pod.run(env=env).ok(files=1, fetched=1)

    assert (pod.cache_dir / "model.gguf").read_bytes() == data
    (issued,) = entra.issued
    assert issued.grant == "secret"
    assert set(bearers(az, container)) == {f"Bearer {issued.token}"}
    assert leaks(SECRET, run.outputs) == []
    assert leaks(issued.token.split(".")[1], run.outputs) == []


def test_a_wrong_client_secret_is_unauthorized(pod, az, entra, ca, container) -> None:
    az.service().get_blob_client(container, "model.gguf").upload_blob(b"abc")
    wrong = canary("wrongsecret", 40)
    env = pod.single_env(
        Azurite.source(container, "model.gguf"),
        **identity_env(az, entra, ca, AZURE_CLIENT_SECRET=wrong),
    )

    run = pod.run(env=env).failed("ModelSourceUnauthorized", exit_code=4)

    assert "service principal" in run.term["remedy"]
    assert entra.state.refused >= 1 and entra.issued == []
    assert bearers(az, container) == []
    assert leaks(wrong, run.outputs) == []


def test_workload_identity_reads_the_federated_token_file(
    pod, az, entra, ca, container, tmp_path: Path
) -> None:
    data = payload(48 * KIB, 12)
    az.service().get_blob_client(container, "model.gguf").upload_blob(data)
    token_file = tmp_path / "azure-identity-token"
    token_file.write_text(ASSERTION)
    env = pod.single_env(
        Azurite.source(container, "model.gguf"),
        **identity_env(az, entra, ca, AZURE_FEDERATED_TOKEN_FILE=str(token_file)),
    )

    run = pod.run(env=env).ok(files=1, fetched=1)

    assert pod.dest().read_bytes() == data
    assert [i.grant for i in entra.issued] == ["assertion"]
    assert leaks(ASSERTION.split(".")[1], run.outputs) == []


def test_a_certificate_service_principal_gets_a_token_azurite_accepts(
    pod, az, entra, ca, container, tmp_path: Path
) -> None:
    """AZURE_CLIENT_CERTIFICATE_PATH (KServe's DefaultAzureCredential takes
    it, #41 item 3): azure-identity's CertificateCredential signs the
    client assertion with the file's key (encrypted with
    AZURE_CLIENT_CERTIFICATE_PASSWORD); the fake Entra ID verifies it
    with the certificate's public key. Failed before: anonymous requests,
    no token asked for, ModelSourceUnauthorized naming missing credentials."""
    data = payload(64 * KIB, 13)
    az.service().get_blob_client(container, "model.gguf").upload_blob(data)
    password = canary("certpass", 24)
    cert = tmp_path / "sp.pem"
    entra.state.certificate_key = certificate_file(cert, password=password)
    env = pod.single_env(
        Azurite.source(container, "model.gguf"),
        **identity_env(
            az,
            entra,
            ca,
            AZURE_CLIENT_CERTIFICATE_PATH=str(cert),
            AZURE_CLIENT_CERTIFICATE_PASSWORD=password,
        ),
    )

    run = pod.run(env=env).ok(files=1, fetched=1)

    assert pod.dest().read_bytes() == data
    (issued,) = entra.issued
    assert issued.grant == "certificate"
    assert set(bearers(az, container)) == {f"Bearer {issued.token}"}
    key_line = cert.read_text().splitlines()[3]  # 64 characters of the encrypted key
    for secret in (password, key_line, issued.token.split(".")[1]):
        assert leaks(secret, run.outputs) == [], "a secret leaked"


def test_a_certificate_path_that_is_a_directory_is_invalid_configuration_naming_it(
    pod, az, entra, ca, container, tmp_path: Path
) -> None:
    """A credential file like every other (#41 items 3, 4): a bounded
    regular file, checked before any request. Failed before: anonymous."""
    az.service().get_blob_client(container, "model.gguf").upload_blob(b"abc")
    env = pod.single_env(
        Azurite.source(container, "model.gguf"),
        **identity_env(az, entra, ca, AZURE_CLIENT_CERTIFICATE_PATH=str(tmp_path)),
    )

    run = pod.run(env=env).failed("InvalidConfiguration", exit_code=2)

    assert "AZURE_CLIENT_CERTIFICATE_PATH" in run.term["message"]
    assert entra.issued == [] and az.requests() == []


def test_a_certificate_whose_password_does_not_open_it_is_invalid_configuration(
    pod, az, entra, ca, container, tmp_path: Path
) -> None:
    """The key does not load: InvalidConfiguration naming the variables,
    no token asked for, neither password shown (#41 item 3)."""
    az.service().get_blob_client(container, "model.gguf").upload_blob(b"abc")
    cert = tmp_path / "sp.pem"
    entra.state.certificate_key = certificate_file(cert, password=canary("rightpass", 24))
    wrong = canary("wrongpass", 24)
    env = pod.single_env(
        Azurite.source(container, "model.gguf"),
        **identity_env(
            az,
            entra,
            ca,
            AZURE_CLIENT_CERTIFICATE_PATH=str(cert),
            AZURE_CLIENT_CERTIFICATE_PASSWORD=wrong,
        ),
    )

    run = pod.run(env=env).failed("InvalidConfiguration", exit_code=2)

    assert "AZURE_CLIENT_CERTIFICATE_PASSWORD" in run.term["message"]
    assert entra.issued == [] and entra.state.refused == 0
    assert leaks(wrong, run.outputs) == []


# -- managed identity (#41 item 3) -----------------------------------------------------------

IDENTITY_HEADER = canary("idheader", 32)


@pytest.fixture
def imds() -> Iterator[FakeImds]:
    with FakeImds(identity_header=IDENTITY_HEADER) as fake:
        yield fake


def managed_env(az: Azurite, imds: FakeImds, ca: LocalCA, **extra: str) -> dict[str, str]:
    return {
        "AZURE_STORAGE_CONNECTION_STRING": az.connection_string(key=False),
        "AZURE_POD_IDENTITY_AUTHORITY_HOST": imds.url,
        "LLMKUBE_CA_DIR": str(ca.ca_dir),
        **extra,
    }


def test_a_user_assigned_managed_identity_gets_its_token_from_imds(
    pod, az, imds, ca, container
) -> None:
    """AZURE_CLIENT_ID and no secret, certificate or token file: KServe's
    DefaultAzureCredential asks IMDS for that identity's token; so does the
    agent, on the suite's fake IMDS (AZURE_POD_IDENTITY_AUTHORITY_HOST).
    Failed before: anonymous, ModelSourceUnauthorized, no IMDS request."""
    data = payload(64 * KIB, 14)
    az.service().get_blob_client(container, "model.gguf").upload_blob(data)
    env = pod.single_env(
        Azurite.source(container, "model.gguf"),
        **managed_env(az, imds, ca, AZURE_CLIENT_ID=CLIENT_ID),
    )

    run = pod.run(env=env).ok(files=1, fetched=1)

    assert pod.dest().read_bytes() == data
    (asked,) = imds.requests
    assert asked.path == "/metadata/identity/oauth2/token"
    assert asked.headers.get("metadata") == "true"
    assert asked.query == {
        "api-version": "2018-02-01",
        "resource": "https://storage.azure.com",
        "client_id": CLIENT_ID,
    }
    (token,) = imds.issued
    assert set(bearers(az, container)) == {f"Bearer {token}"}
    assert leaks(token.split(".")[1], run.outputs) == []


def test_app_services_identity_endpoint_is_asked_with_its_header(
    pod, az, imds, ca, container
) -> None:
    """IDENTITY_ENDPOINT + IDENTITY_HEADER (App Service, as azure-identity
    tells it): the header is a secret, never shown. Failed before: anonymous."""
    data = payload(16 * KIB, 15)
    az.service().get_blob_client(container, "model.gguf").upload_blob(data)
    env = pod.single_env(
        Azurite.source(container, "model.gguf"),
        **managed_env(
            az,
            imds,
            ca,
            AZURE_CLIENT_ID=CLIENT_ID,
            IDENTITY_ENDPOINT=f"{imds.url}/msi/token",
            IDENTITY_HEADER=IDENTITY_HEADER,
        ),
    )

    run = pod.run(env=env).ok(files=1, fetched=1)

    assert pod.dest().read_bytes() == data
    (asked,) = imds.requests
    assert asked.path == "/msi/token" and asked.query["api-version"] == "2019-08-01"
    assert asked.headers.get("x-identity-header") == IDENTITY_HEADER
    assert leaks(IDENTITY_HEADER, run.outputs) == []


def test_the_metadata_service_is_asked_directly_never_through_a_proxy(
    pod, az, imds, ca, container
) -> None:
    """IMDS is link-local (App Service's endpoint the pod's own): asked
    directly whatever the proxy variables say, as botocore asks container
    credentials. Here IMDS is `localhost`, which NO_PROXY leaves to the
    proxy, a closed port: a proxied request would fail."""
    data = payload(8 * KIB, 17)
    az.service().get_blob_client(container, "model.gguf").upload_blob(data)
    port = imds.url.rsplit(":", 1)[1]
    env = pod.single_env(
        Azurite.source(container, "model.gguf"),
        **managed_env(
            az,
            imds,
            ca,
            AZURE_CLIENT_ID=CLIENT_ID,
            AZURE_POD_IDENTITY_AUTHORITY_HOST=f"http://localhost:{port}",
            HTTP_PROXY="http://127.0.0.1:9",
            HTTPS_PROXY="http://127.0.0.1:9",
            NO_PROXY="127.0.0.1",
        ),
    )

    pod.run(env=env).ok(files=1, fetched=1)

    assert pod.dest().read_bytes() == data
    assert len(imds.requests) == 1


def test_our_setting_asks_for_the_system_assigned_identity(pod, az, imds, ca, container) -> None:
    """LLMKUBE_AZURE_MANAGED_IDENTITY=true without AZURE_CLIENT_ID: the
    system-assigned identity (no client_id in the query)."""
    data = payload(8 * KIB, 16)
    az.service().get_blob_client(container, "model.gguf").upload_blob(data)
    env = pod.single_env(
        Azurite.source(container, "model.gguf"),
        **managed_env(az, imds, ca, LLMKUBE_AZURE_MANAGED_IDENTITY="true"),
    )

    pod.run(env=env).ok(files=1, fetched=1)

    (asked,) = imds.requests
    assert "client_id" not in asked.query


def test_an_identity_imds_does_not_know_is_unauthorized_naming_it(
    pod, az, imds, ca, container
) -> None:
    az.service().get_blob_client(container, "model.gguf").upload_blob(b"abc")
    env = pod.single_env(
        Azurite.source(container, "model.gguf"),
        **managed_env(az, imds, ca, AZURE_CLIENT_ID="11111111-2222-3333-4444-555555555555"),
    )

    run = pod.run(env=env).failed("ModelSourceUnauthorized", exit_code=4)

    assert "managed identity" in run.term["message"]
    assert "AZURE_CLIENT_ID" in run.term["remedy"]
    assert bearers(az, container) == []


def test_with_nothing_set_no_metadata_service_is_asked(pod, az, imds, ca, container) -> None:
    """No AZURE_CLIENT_ID, no setting: anonymous, as before, and IMDS
    (here the fake, at AZURE_POD_IDENTITY_AUTHORITY_HOST) is never asked.
    An access key beside AZURE_CLIENT_ID alone stays the key."""
    az.service().get_blob_client(container, "model.gguf").upload_blob(b"abc")
    env = pod.single_env(Azurite.source(container, "model.gguf"), **managed_env(az, imds, ca))

    run = pod.run(env=env).failed("ModelSourceUnauthorized", exit_code=4)

    assert "managed identity" in run.stderr  # the log names what was not asked
    assert imds.requests == []
    # The refusal names how to ask for each credential, and what stays
    # unsupported (#41 item 3). Failed before: a remedy about a key or SAS.
    remedy = run.term["remedy"]
    for words in (
        "AZURE_CLIENT_CERTIFICATE_PATH",
        "LLMKUBE_AZURE_MANAGED_IDENTITY",
        "not supported",
        "Azure Arc",
        "AZURE_USERNAME",
    ):
        assert words in remedy, remedy


def _slow_model(az: Azurite, container: str, count: int) -> dict[str, bytes]:
    files = {f"part-{i}.bin": payload(256 * KIB, 20 + i) for i in range(count)}
    for rel, data in files.items():
        az.service().get_blob_client(container, f"m/{rel}").upload_blob(data)
    # Each file takes about half a second: the transfer outlives a token.
    az.set_fault("*", S3Fault(rate_bytes_per_s=512 * KIB, methods=("GET",)))
    return files


def test_a_token_is_renewed_before_it_expires_during_a_transfer(
    pod, az, entra, ca, container
) -> None:
    """Tokens that expire 301 s after they are issued are asked for again
    300 s ahead, i.e. after at most 1 s: a transfer of 2 s (four files of
    half a second, in turn) sends later requests with later tokens, none
    refused."""
    entra.state.lifetime_s = 301
    files = _slow_model(az, container, 4)
    env = pod.env | {
        "MODEL_SOURCE": Azurite.source(container, "m"),
        "CACHE_DIR": str(pod.cache_dir),
        "LLMKUBE_FILES_IN_FLIGHT": "1",
        **identity_env(az, entra, ca, AZURE_CLIENT_SECRET=SECRET),
    }

    pod.run(env=env).ok(files=len(files), fetched=len(files))

    for rel, data in files.items():
        assert (pod.cache_dir / rel).read_bytes() == data
    assert len(entra.issued) >= 2
    assert len(set(bearers(az, container))) >= 2
    assert all(r.status < 400 for r in az.requests())


def test_a_token_refused_mid_transfer_is_replaced(pod, az, entra, ca, container) -> None:
    """The service refuses a token before the client expected (its JWT
    expires after 2 s while expires_in says an hour): the 401 makes a new
    credential ask for a new token at once, and the transfer goes on."""
    entra.state.jwt_lifetime_s = 2
    files = _slow_model(az, container, 8)
    env = pod.env | {
        "MODEL_SOURCE": Azurite.source(container, "m"),
        "CACHE_DIR": str(pod.cache_dir),
        "LLMKUBE_FILES_IN_FLIGHT": "1",
        "LLMKUBE_RETRIES": "0",
        **identity_env(az, entra, ca, AZURE_CLIENT_SECRET=SECRET),
    }

    run = pod.run(env=env).ok(files=len(files), fetched=len(files))

    for rel, data in files.items():
        assert (pod.cache_dir / rel).read_bytes() == data
    assert any(r.status in (401, 403) for r in az.requests())
    assert len(entra.issued) >= 2
    assert "fresh token or SAS" in run.stderr


def test_the_token_and_the_blobs_go_through_the_proxy_decided(
    pod, az, entra, ca, container, proxy
) -> None:
    """HTTPS_PROXY as for every client (#22 items 2, 3): the token request
    (azure-identity's requests session, told the agent's decision, never
    the environment's) and the blob requests both tunnel through it; with
    the authority in NO_PROXY, the token request goes direct."""
    data = payload(64 * KIB, 50)
    az.service().get_blob_client(container, "model.gguf").upload_blob(data)
    env = pod.single_env(
        Azurite.source(container, "model.gguf"),
        **identity_env(az, entra, ca, AZURE_CLIENT_SECRET=SECRET),
        HTTPS_PROXY=proxy.url,
        NO_PROXY="",
    )

    pod.run(env=env).ok(files=1, fetched=1)

    targets = {r.target for r in proxy.requests() if r.method == "CONNECT"}
    entra_port = entra.authority.rsplit(":", 1)[1]
    front_port = az.endpoint.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1]
    assert targets == {f"127.0.0.1:{entra_port}", f"127.0.0.1:{front_port}"}

    # The authority by a name NO_PROXY excludes: only its request goes direct.
    before = len(proxy.requests())
    env["AZURE_AUTHORITY_HOST"] = entra.authority.replace("127.0.0.1", "localhost")
    env["NO_PROXY"] = "localhost"
    env["MODEL_PATH"] = str(pod.models / "k9" / "model.gguf")
    env["CACHE_DIR"] = str(pod.models / "k9")
    pod.run(env=env).ok(files=1, fetched=1)
    targets = {r.target for r in proxy.requests()[before:] if r.method == "CONNECT"}
    assert targets == {f"127.0.0.1:{front_port}"}
    assert len(entra.issued) == 2


def _closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("way", ["closed_port", "proxy_down"])
def test_an_unreachable_token_endpoint_is_unreachable_not_unauthorized(
    pod, az, entra, ca, container, way: str
) -> None:
    """A service principal whose authority cannot be reached (a closed
    port, or the proxy it must go through down: MSAL wraps the connection
    error into an auth error without an HTTP answer) is the origin
    unreachable, retryable, as a workload identity's is."""
    az.service().get_blob_client(container, "model.gguf").upload_blob(b"abc")
    if way == "proxy_down":
        authority = entra.authority.replace("127.0.0.1", "localhost")
        proxied = {"AZURE_AUTHORITY_HOST": authority, "NO_PROXY": "127.0.0.1"}
        proxied["HTTPS_PROXY"] = f"http://127.0.0.1:{_closed_port()}"
        env = pod.single_env(
            Azurite.source(container, "model.gguf"),
            **identity_env(az, entra, ca, AZURE_CLIENT_SECRET=SECRET, **proxied),
        )
        pod.run(env=env).failed("ModelSourceUnreachable", exit_code=1, retryable=True)
        assert entra.issued == [] and bearers(az, container) == []
        return
    env = pod.single_env(
        Azurite.source(container, "model.gguf"),
        **identity_env(
            az,
            entra,
            ca,
            AZURE_CLIENT_SECRET=SECRET,
            AZURE_AUTHORITY_HOST=f"https://127.0.0.1:{_closed_port()}",
        ),
    )

    run = pod.run(env=env).failed("ModelSourceUnreachable", exit_code=1, retryable=True)

    assert entra.issued == [] and bearers(az, container) == []
    assert leaks(SECRET, run.outputs) == []


@pytest.mark.parametrize(
    "bad",
    [
        {"AZURE_TENANT_ID": "not/a tenant"},
        {"AZURE_AUTHORITY_HOST": "http://127.0.0.1:9"},
    ],
    ids=["tenant", "http_authority"],
)
def test_a_bad_tenant_or_plain_http_authority_is_invalid_configuration_before_the_cache(
    pod, az, entra, ca, container, bad: dict[str, str]
) -> None:
    """What azure-identity refuses with ValueError (a tenant id of other
    characters than letters, digits, '-' and '.'; an authority not https)
    is the pod's configuration, said before anything is written."""
    az.service().get_blob_client(container, "model.gguf").upload_blob(b"abc")
    env = pod.single_env(
        Azurite.source(container, "model.gguf"),
        **identity_env(az, entra, ca, AZURE_CLIENT_SECRET=SECRET, **bad),
    )

    run = pod.run(env=env, audit=True).failed("InvalidConfiguration", exit_code=2)

    (name,) = bad
    assert name in run.term["message"]
    assert [w for w in run.writes if str(pod.models) in str(w)] == []
    assert not pod.cache_dir.exists()
    assert entra.issued == [] and entra.state.refused == 0
    assert leaks(SECRET, run.outputs) == []


def test_a_missing_federated_token_file_is_invalid_configuration_naming_it(
    pod, az, entra, ca, container, tmp_path: Path
) -> None:
    az.service().get_blob_client(container, "model.gguf").upload_blob(b"abc")
    env = pod.single_env(
        Azurite.source(container, "model.gguf"),
        **identity_env(az, entra, ca, AZURE_FEDERATED_TOKEN_FILE=str(tmp_path / "no-such-token")),
    )

    run = pod.run(env=env, audit=True).failed("InvalidConfiguration", exit_code=2)

    assert "AZURE_FEDERATED_TOKEN_FILE" in run.term["message"]
    assert [w for w in run.writes if str(pod.models) in str(w)] == []
    assert entra.issued == [] and entra.state.refused == 0
    assert az.requests() == []


def test_a_federated_token_file_that_is_a_directory_is_not_read_out(
    pod, az, entra, ca, container, tmp_path: Path
) -> None:
    az.service().get_blob_client(container, "model.gguf").upload_blob(b"abc")
    env = pod.single_env(
        Azurite.source(container, "model.gguf"),
        **identity_env(az, entra, ca, AZURE_FEDERATED_TOKEN_FILE=str(tmp_path)),
    )

    run = pod.run(env=env).failed("InvalidConfiguration", exit_code=2)

    assert "AZURE_FEDERATED_TOKEN_FILE" in run.term["message"]


def test_identity_library_log_lines_stay_out_of_a_json_log(pod, az, entra, ca, container) -> None:
    """azure-identity and msal log a refused credential themselves (WARNING
    on the `azure.identity` logger): in LLMKUBE_LOG_FORMAT=json every stderr
    line is the agent's JSON, and no piece of the wrong secret shows."""
    import json

    az.service().get_blob_client(container, "model.gguf").upload_blob(b"abc")
    wrong = canary("wrongsecret", 40)
    env = pod.single_env(
        Azurite.source(container, "model.gguf"),
        **identity_env(az, entra, ca, AZURE_CLIENT_SECRET=wrong),
        LLMKUBE_LOG_FORMAT="json",
    )

    run = pod.run(env=env).failed("ModelSourceUnauthorized", exit_code=4, log_line=False)

    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert lines
    for line in lines:
        assert isinstance(json.loads(line), dict), line
    assert leaks(wrong, run.outputs) == []
    assert entra.state.refused >= 1
