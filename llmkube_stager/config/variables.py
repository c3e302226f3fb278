"""The variable table: every environment variable of the contract, its
flag and its default, written once (#23 item 4). A new variable is a row
here, a field of `Config` (settings.py), a rule (rules.py or paths.py)
and its line in the assembly (load.py)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Var:
    """One environment variable of the contract, its flag, and its default
    as it would be written in the environment ("": none)."""

    env: str
    help: str
    secret: bool = False
    default: str = ""

    @property
    def flag(self) -> str:
        return "--" + self.env.lower().replace("_", "-")


VARS: tuple[Var, ...] = (
    Var(
        "MODEL_SOURCE",
        "model source URL (http(s)://, hf://, s3://, Azure Blob https://, oci://, file://, /path, pvc://)",
    ),
    Var("CACHE_DIR", "the model's directory in the cache"),
    Var("MODEL_PATH", "single-file: the destination file"),
    Var("MODEL_FILES", "multi-file: newline-separated repo-relative paths, primary first"),
    Var("S3_BUCKET", "S3 bucket (derived from MODEL_SOURCE when absent)"),
    Var("S3_KEY", "S3 key of a single-file model"),
    Var("S3_PREFIX", "S3 prefix of a multi-file model"),
    Var("MODEL_SHA256", "single-file sha256 pin (64 hex)"),
    Var("MODEL_FILE_SHA256", "multi-file pins, lines '<digest> <rel>'"),
    Var("LLMKUBE_REFRESH_POLICY", "IfNotPresent or OnChange", default="IfNotPresent"),
    Var("LLMKUBE_PREFETCH_STAGER", "true in prefetch Jobs (may stage on FUSE)", default="false"),
    Var("HF_TOKEN", "Hugging Face token", secret=True),
    Var("HF_ENDPOINT", "Hugging Face mirror endpoint"),
    Var("AWS_ACCESS_KEY_ID", "S3 access key id", secret=True),
    Var("AWS_SECRET_ACCESS_KEY", "S3 secret key", secret=True),
    Var("AWS_SESSION_TOKEN", "S3 session token", secret=True),
    Var("AWS_REGION", "S3 region"),
    Var("AWS_ENDPOINT_URL", "S3 endpoint URL"),
    # The rest of the AWS credential chain and endpoint settings (docs/sources.md);
    # handed to botocore as an explicit mapping, never through os.environ.
    Var("AWS_ENDPOINT_URL_S3", "S3 endpoint URL (wins over AWS_ENDPOINT_URL)"),
    Var("AWS_ENDPOINT_URL_STS", "STS endpoint for web identity and role credentials"),
    Var("AWS_DEFAULT_REGION", "S3 region when AWS_REGION is not set"),
    Var("AWS_S3_ADDRESSING_STYLE", "auto (default), virtual or path"),
    Var("AWS_PROFILE", "profile of the shared credentials/config files"),
    Var("AWS_SHARED_CREDENTIALS_FILE", "shared credentials file (default ~/.aws/credentials)"),
    Var("AWS_CONFIG_FILE", "shared config file (default ~/.aws/config)"),
    Var("AWS_ROLE_ARN", "role to assume with the web identity token (IRSA)"),
    Var("AWS_WEB_IDENTITY_TOKEN_FILE", "web identity token file (IRSA)"),
    Var("AWS_ROLE_SESSION_NAME", "session name of the assumed role"),
    Var("AWS_CONTAINER_CREDENTIALS_FULL_URI", "container credentials endpoint (EKS Pod Identity)"),
    Var("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "container credentials path (ECS)"),
    Var("AWS_CONTAINER_AUTHORIZATION_TOKEN", "container credentials token", secret=True),
    Var("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", "file holding the container credentials token"),
    Var("AWS_EC2_METADATA_DISABLED", "true: never ask the instance metadata service"),
    Var("AWS_EC2_METADATA_SERVICE_ENDPOINT", "instance metadata service endpoint"),
    Var(
        "LLMKUBE_CA_DIR",
        "extra CA certificates, added to the system roots",
        default="/custom-certs",
    ),
    Var(
        "LLMKUBE_HOST_MODEL",
        "host-path model file for local sources",
        default="/host-model/model.gguf",
    ),
    Var(
        "LLMKUBE_ALLOWED_HOST_ROOTS",
        "colon-separated roots a local source must lie in (unset: no restriction)",
    ),
    Var(
        "LLMKUBE_REMEDY_WORDS",
        "variables (remedies name these variables) or operator (an LLMKube Model's fields, "
        "as the operator's diagnosis matches them; the image's sh sets it for operator commands)",
        default="variables",
    ),
    Var("LLMKUBE_TERMINATION_LOG", "termination message path", default="/dev/termination-log"),
    Var("PROGRESS_INTERVAL", "seconds between progress lines", default="10"),
    Var("LLMKUBE_LOG_FORMAT", "text or json", default="text"),
    Var(
        "LLMKUBE_LOG_LEVEL",
        "debug (also each HTTP request, as curl -v shows it), info, warning or error",
        default="info",
    ),
    Var("LLMKUBE_CONNECT_TIMEOUT", "seconds to establish a connection", default="10"),
    Var(
        "LLMKUBE_STALL_TIMEOUT",
        "seconds without a received byte before an attempt is retried",
        default="60",
    ),
    Var(
        "LLMKUBE_RETRIES",
        "attempts per request after the first, for transient failures",
        default="5",
    ),
    Var(
        "LLMKUBE_MAX_RETRY_WAIT",
        "longest single wait between attempts, Retry-After included",
        default="60",
    ),
    Var("LLMKUBE_LOCK_TIMEOUT", "seconds a writer waits for the cache lock", default="3600"),
    Var(
        "LLMKUBE_CONNECTIONS",
        "parallel ranged connections per large file (1 disables)",
        default="8",
    ),
    Var(
        "LLMKUBE_FILES_IN_FLIGHT",
        "files of a multi-file model transferred at once (1: in turn)",
        default="8",
    ),
    Var(
        "LLMKUBE_SHARDS",
        "prefetch Jobs: split the model's files into this many shares",
        default="1",
    ),
    Var("JOB_COMPLETION_INDEX", "the share this pod stages (set by an Indexed Job)"),
    Var(
        "LLMKUBE_JOB_ID",
        "the prefetch Job this pod belongs to (its batch.kubernetes.io/controller-uid "
        "label, through the downward API): a sharded Job's commit claim is its own",
    ),
    Var(
        "LLMKUBE_DIRECT_IO",
        "auto (the page cache while the model fits memory, then O_DIRECT on "
        "ext4/xfs/btrfs), on (O_DIRECT there always) or off (always the page cache)",
        default="auto",
    ),
    # The in-cluster mirror (#42, docs/mirror.md).
    Var(
        "LLMKUBE_MIRROR",
        "a mirror read before the origin: s3://bucket/prefix or an http(s):// base",
    ),
    Var("LLMKUBE_MIRROR_ENDPOINT", "the S3 mirror's endpoint URL (default: AWS_ENDPOINT_URL)"),
    Var("LLMKUBE_MIRROR_ACCESS_KEY_ID", "the S3 mirror's access key id", secret=True),
    Var("LLMKUBE_MIRROR_SECRET_ACCESS_KEY", "the S3 mirror's secret key", secret=True),
    Var("LLMKUBE_MIRROR_REGION", "the S3 mirror's region (default: AWS_REGION)"),
    Var("LLMKUBE_MIRROR_ONLY", "true: never ask the origin, only the mirror", default="false"),
    Var(
        "LLMKUBE_MIRROR_PUBLISH",
        "true: upload what this pod staged and verified to the S3 mirror (the seeder)",
        default="false",
    ),
    # KServe mode (#24 item 2): bounds of an unpacked archive (kserve/archive.py).
    Var(
        "LLMKUBE_ARCHIVE_MAX_BYTES",
        "bytes an archive may unpack to (KServe mode)",
        default=str(1 << 40),  # 1 TiB
    ),
    Var("LLMKUBE_ARCHIVE_MAX_FILES", "members an archive may hold (KServe mode)", default="100000"),
    # Azure Blob (#33 item 2): what KServe's initializer and azure-identity
    # read (sources/azure/credentials.py), handed over as a mapping.
    Var("AZURE_STORAGE_ACCESS_KEY", "Azure storage account key (or a SAS)", secret=True),
    Var(
        "AZURE_STORAGE_CONNECTION_STRING",
        "Azure connection string (BlobEndpoint, AccountKey or SharedAccessSignature)",
        secret=True,
    ),
    Var("AZURE_CLIENT_ID", "Azure service principal or workload identity client id"),
    Var("AZURE_CLIENT_SECRET", "Azure service principal secret", secret=True),
    Var("AZURE_TENANT_ID", "Azure tenant of the service principal or workload identity"),
    Var("AZURE_FEDERATED_TOKEN_FILE", "AKS workload identity token file"),
    # #41 item 3: a certificate service principal (EnvironmentCredential's).
    Var(
        "AZURE_CLIENT_CERTIFICATE_PATH",
        "Azure service principal certificate: a PEM or PKCS12 file with its private key",
    ),
    Var(
        "AZURE_CLIENT_CERTIFICATE_PASSWORD",
        "password of AZURE_CLIENT_CERTIFICATE_PATH's private key",
        secret=True,
    ),
    # #41 item 3: managed identity (sources/azure/managed.py).
    Var(
        "AZURE_POD_IDENTITY_AUTHORITY_HOST",
        "the Azure instance metadata service's address (default http://169.254.169.254)",
    ),
    Var("IDENTITY_ENDPOINT", "App Service's managed identity endpoint (set by App Service)"),
    Var(
        "IDENTITY_HEADER", "App Service's managed identity header (set by App Service)", secret=True
    ),
    Var(
        "LLMKUBE_AZURE_MANAGED_IDENTITY",
        "true: an Azure managed identity (system-assigned, or AZURE_CLIENT_ID's); false: never",
    ),
    Var("AZURE_AUTHORITY_HOST", "Microsoft Entra authority (default login.microsoftonline.com)"),
    Var("AZ_CLIENT_ID", "KServe's legacy name of AZURE_CLIENT_ID"),
    Var("AZ_CLIENT_SECRET", "KServe's legacy name of AZURE_CLIENT_SECRET", secret=True),
    Var("AZ_TENANT_ID", "KServe's legacy name of AZURE_TENANT_ID"),
    # #34 item 1: a signed model's trust anchor and its bundle (config/anchor.py).
    Var(
        "LLMKUBE_SIGNING_KEY", "PEM public key (text or absolute path) the model must be signed by"
    ),
    Var("LLMKUBE_SIGNING_CERTS", "PEM certificate chain (text or absolute path) to trust instead"),
    Var(
        "LLMKUBE_SIGNATURE",
        "the model-signing bundle: a name beside the model at the source, a path or an http(s) URL",
        default="model.sig",
    ),
    # #40 item 7: the one signed statement to accept (rollback, replay).
    Var(
        "LLMKUBE_SIGNED_DIGEST",
        "sha256 of the signed statement (the bundle's DSSE payload) to accept, no other",
    ),
    # oci:// (#43): the docker config.json an imagePullSecret projects (its
    # path is no secret, its contents are), the first set of these three.
    Var(
        "LLMKUBE_OCI_DOCKER_CONFIG",
        "oci://: a docker config.json, or the directory holding one, with registry credentials",
    ),
    Var("KSERVE_OCI_DOCKER_CONFIG", "KServe's name of LLMKUBE_OCI_DOCKER_CONFIG"),
    Var(
        "DOCKER_CONFIG",
        "oci://: docker's directory of config.json (used when the two above are unset)",
    ),
    Var(
        "LLMKUBE_OCI_PLATFORM",
        "oci://: the os/arch[/variant] an image index is resolved to",
        default="linux/amd64",
    ),
    # Credentials in a proxy URL are secrets (proxy.py); the lowercase
    # spellings are read too and win, as in curl.
    Var("HTTPS_PROXY", "http:// proxy for https origins (also https_proxy)", secret=True),
    Var("HTTP_PROXY", "http:// proxy for http origins (also http_proxy)", secret=True),
    Var("NO_PROXY", "hosts, domains, IPs or CIDRs that go direct (also no_proxy)"),
    # gs:// sources (#33 item 1), as KServe's GCS credentials set them:
    # the key file's path (its contents are secret, never its path).
    Var(
        "GOOGLE_APPLICATION_CREDENTIALS",
        "gs://: a service-account key file (unset: GKE Workload Identity, else anonymous)",
    ),
    Var("STORAGE_EMULATOR_HOST", "gs://: an emulator, sent no credentials (http(s)://host:port)"),
    Var(
        "API_ENDPOINT_OVERRIDE",
        "gs://: a custom JSON API endpoint sent the credentials (https://host[:port])",
    ),
    # google-auth's names for the metadata server (GKE Workload Identity).
    Var(
        "GCE_METADATA_HOST",
        "gs://: the metadata server's host[:port] for tokens",
        default="metadata.google.internal",
    ),
    Var(
        "GCE_METADATA_IP",
        "gs://: the metadata server's address[:port], asked first",
        default="169.254.169.254",
    ),
)

SECRET_VARS: tuple[str, ...] = tuple(v.env for v in VARS if v.secret)
# Written once, in VARS: the reader, `--help` and the defaults of Config and
# Timeouts (settings.py) all take them from here (#23 item 4).
DEFAULTS: Mapping[str, str] = {v.env: v.default for v in VARS if v.default}

# botocore settings honoured without a flag of their own (docs/sources.md).
AWS_PASSTHROUGH_VARS: tuple[str, ...] = (
    "AWS_STS_REGIONAL_ENDPOINTS",
    "AWS_USE_FIPS_ENDPOINT",
    "AWS_USE_DUALSTACK_ENDPOINT",
    "AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE",
    "AWS_EC2_METADATA_V1_DISABLED",
    "AWS_METADATA_SERVICE_TIMEOUT",
    "AWS_METADATA_SERVICE_NUM_ATTEMPTS",
)
# Every variable the S3 source hands to botocore, HOME for its "~/.aws" defaults.
AWS_ENV_VARS: tuple[str, ...] = (
    *(v.env for v in VARS if v.env.startswith("AWS_")),
    *AWS_PASSTHROUGH_VARS,
    "HOME",
)
# Every variable the Azure source reads (#33 item 2).
AZURE_ENV_VARS: tuple[str, ...] = tuple(
    v.env
    for v in VARS
    if v.env.startswith(("AZURE_", "AZ_"))
    or v.env in ("IDENTITY_ENDPOINT", "IDENTITY_HEADER", "LLMKUBE_AZURE_MANAGED_IDENTITY")
)

# The prefixes of the agent's own variables: one of them set that the agent
# does not read is most likely a misspelling, which was ignored or answered
# with "MODEL_SOURCE is required" (#46 item 4).
_OWN_PREFIXES = ("LLMKUBE_", "MODEL_", "CACHE_")
# Set beside the agent's by the operator's pod spec or its scripts, never
# read by the agent (spec §2.1 MODEL_DIGEST_FIELD, §2.3 LLMKUBE_CA_BUNDLE).
_SET_BY_OTHERS = frozenset({"MODEL_DIGEST_FIELD", "LLMKUBE_CA_BUNDLE"})


def unknown_variables(names: Iterable[str]) -> list[str]:
    """A warning for each set variable of the agent's prefixes that it
    does not read, with the closest name it does (names only: a value may
    be a secret)."""
    known = {v.env for v in VARS}
    unknown = sorted(
        n for n in names if n.startswith(_OWN_PREFIXES) and n not in known | _SET_BY_OTHERS
    )
    if not unknown:
        return []
    import difflib  # only when there is one: a warm start does not pay for it

    warnings = []
    for name in unknown:
        close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.75)
        hint = f"did you mean {close[0]}?" if close else "it is ignored"
        warnings.append(f"{name} is not a variable of llmkube-stager; {hint}")
    return warnings
