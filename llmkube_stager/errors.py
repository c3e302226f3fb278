"""Reasons, remedies and the one error hierarchy (CONTRACT §5).

Every failure the agent can report is a `StagerError` carrying a `Reason` (the
CamelCase token a controller turns into a condition reason) and a remedy
constant. Third-party exceptions are translated into these at the source
adapters; the boundary (boundary.py) is the only place that turns them into
a termination message and an exit code.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from typing import Self, TypeVar

# The kind-specific remedies live with their scheme's row (#32 item 1);
# named here too, where every other remedy is.
from llmkube_stager.schemes import (
    REMEDY_LOCK_UNSUPPORTED_LOCAL as REMEDY_LOCK_UNSUPPORTED_LOCAL,
)
from llmkube_stager.schemes import (
    REMEDY_LOCK_UNSUPPORTED_PREFETCH as REMEDY_LOCK_UNSUPPORTED_PREFETCH,
)
from llmkube_stager.schemes import (
    REMEDY_LOCK_UNSUPPORTED_S3 as REMEDY_LOCK_UNSUPPORTED_S3,
)
from llmkube_stager.schemes import REMEDY_RATE_LIMITED_HF as REMEDY_RATE_LIMITED_HF
from llmkube_stager.schemes import REMEDY_RATE_LIMITED_HTTP as REMEDY_RATE_LIMITED_HTTP
from llmkube_stager.schemes import REMEDY_RATE_LIMITED_S3 as REMEDY_RATE_LIMITED_S3
from llmkube_stager.schemes import SCHEMES
from llmkube_stager.schemes import SourceKind as SourceKind


class Reason(StrEnum):
    SUCCEEDED = "ModelTransferSucceeded"
    SOURCE_UNREACHABLE = "ModelSourceUnreachable"
    SOURCE_UNAVAILABLE = "ModelSourceUnavailable"
    SOURCE_UNAUTHORIZED = "ModelSourceUnauthorized"
    SOURCE_NOT_FOUND = "ModelSourceNotFound"
    SOURCE_REJECTED = "ModelSourceRejected"
    SOURCE_UNTRUSTED = "ModelSourceUntrusted"
    SOURCE_RATE_LIMITED = "ModelSourceRateLimited"
    SOURCE_CHANGED = "ModelSourceChanged"
    OUT_OF_SPACE = "ModelTransferOutOfSpace"
    SIZE_MISMATCH = "ModelTransferSizeMismatch"
    CHECKSUM_MISMATCH = "ModelTransferChecksumMismatch"
    # #34: a trust anchor is set and the model is not what its publisher signed.
    SIGNATURE_INVALID = "ModelSignatureInvalid"
    CACHE_TRUNCATED = "ModelCacheTruncated"
    CACHE_LOCK_UNSUPPORTED = "ModelCacheLockUnsupported"
    CACHE_LOCK_TIMEOUT = "ModelCacheLockTimeout"
    CACHE_UNWRITABLE = "ModelCacheUnwritable"
    # #21 item 7: storage faults are the volume's, not bugs.
    CACHE_FAILING = "ModelCacheFailing"
    CACHE_DISCONNECTED = "ModelCacheDisconnected"
    CACHE_EMPTY = "ModelCacheEmpty"
    CACHE_INCOMPLETE = "ModelCacheIncomplete"
    INVALID_FILE_SET = "InvalidFileSet"
    SOURCE_NOT_ALLOWED = "SourceNotAllowed"
    INVALID_CONFIGURATION = "InvalidConfiguration"
    CANCELLED = "ModelTransferCancelled"
    INTERNAL = "ModelStagerInternalError"


# Restarting the pod can help by itself (CONTRACT §5 "retryable"); each
# decision and its reason is in docs/operations.md ("Reasons").
RETRYABLE: frozenset[Reason] = frozenset(
    {
        Reason.SOURCE_UNREACHABLE,
        # A server error that outlasted the in-process retries: still the
        # origin's transient state, not a request that cannot succeed.
        Reason.SOURCE_UNAVAILABLE,
        Reason.SOURCE_RATE_LIMITED,
        Reason.SOURCE_CHANGED,
        Reason.CANCELLED,
        # The other writer finishes or dies (its flock goes with it).
        Reason.CACHE_LOCK_TIMEOUT,
        # The copy is wrong and the origin could not repair it *now*.
        Reason.CACHE_TRUNCATED,
        # A dead mount (its FUSE daemon died, a stale NFS handle): the next
        # pod mounts the volume afresh (#21 item 7).
        Reason.CACHE_DISCONNECTED,
    }
)

# Exit codes (CONTRACT §5): what a Job's podFailurePolicy keys on.
EXIT_OK = 0
EXIT_RETRYABLE = 1  # restarting may fix it: count it against backoffLimit
EXIT_USAGE = 2  # configuration or file list, found before any I/O
EXIT_INTERNAL = 3  # a bug
EXIT_PERMANENT = 4  # a reason retrying as is cannot fix: fail the Job now

_USAGE_REASONS = frozenset({Reason.INVALID_CONFIGURATION, Reason.INVALID_FILE_SET})


def exit_code_for(reason: Reason) -> int:
    """The process exit code of an outcome with this reason."""
    if reason is Reason.SUCCEEDED:
        return EXIT_OK
    if reason is Reason.INTERNAL:
        return EXIT_INTERNAL
    if reason in _USAGE_REASONS:
        return EXIT_USAGE
    return EXIT_RETRYABLE if reason in RETRYABLE else EXIT_PERMANENT


# Remedy constants. The first five are byte-identical to the operator's
# transfer-diagnosis signatures (spec/behavior.md §11.2) so that the
# controller's remedy lookup keeps matching (§11.3, scenario 40/55).
REMEDY_UNTRUSTED = (
    "the endpoint's CA is not trusted by the downloader; publish it via the operator's "
    "--ca-cert-configmap (the ConfigMap must exist in the workload's namespace, not the "
    "operator's)"
)
REMEDY_UNAUTHORIZED = "check spec.sourceSecretRef and the credentials it names"
REMEDY_NOT_FOUND = "check spec.source: the bucket, key or file name does not exist at the endpoint"
REMEDY_OUT_OF_SPACE = (
    "raise spec.resources.ephemeralStorage (which also sizes the emptyDir) or give the model "
    "cache a larger volume"
)
# No free inode, bytes maybe to spare (#21 item 7): the bytes remedy misleads.
REMEDY_OUT_OF_INODES = (
    "the cache volume has no free inodes (files) left, whatever its free bytes; remove "
    "unneeded files from the volume, or give the model cache a volume made with more inodes "
    "(ext4: mkfs -N or a smaller -i bytes-per-inode)"
)
REMEDY_UNREACHABLE = (
    "check the endpoint address, cluster DNS, and any NetworkPolicy or egress restriction"
)
REMEDY_UNAVAILABLE = (
    "the origin answered with a server error after every retry; check the origin's health, "
    "or raise LLMKUBE_RETRIES"
)
REMEDY_REJECTED = "the origin refused the request; check spec.source and the endpoint's logs"
# Cause-specific remedies of #22 (docs/operations.md, runbook).
REMEDY_ENCODED = (
    "the origin or a proxy in between sent the file with a Content-Encoding (compressed) although "
    "the agent asked for identity; encoded bytes are never published as the model: turn off "
    "compression for these files at the origin, CDN or proxy named, or exclude the host from the "
    "proxy with NO_PROXY; a file stored compressed (a .tar.gz served with gzip) is saved as "
    "served when pinned by MODEL_SHA256 or MODEL_FILE_SHA256; then retry"
)
REMEDY_STORED_ENCODING = (
    "the object is stored compressed (uploaded with gsutil cp -z, or given a Content-Encoding "
    "such as gzip) and KServe's Google and Azure clients would leave it decompressed, which the "
    "agent does not do; store the model's own bytes: upload it again without -z, or remove the "
    "object's Content-Encoding (gsutil setmeta -h Content-Encoding:, or the blob's properties); "
    "stage mode saves the stored bytes as they are; then retry"
)
REMEDY_GATED = (
    "the Hugging Face repository is gated: its terms must be accepted on the repository's page "
    "(and access granted, where the owner reviews requests) by the account HF_TOKEN belongs to; "
    "set HF_TOKEN in spec.sourceSecretRef to a token of that account"
)
REMEDY_REDIRECT_SCHEME = (
    "the origin redirected to a URL the agent does not fetch (only http and https redirects are "
    "followed); point spec.source at the final http(s) location or fix the origin's redirect"
)
REMEDY_CHANGED = (
    "the origin's content changed during the transfer; pin a revision or retry once the "
    "upstream is stable"
)
REMEDY_SIZE_MISMATCH = (
    "the origin delivered a different number of bytes than it announced; check the origin or "
    "any proxy in between, then retry"
)
REMEDY_CHECKSUM = (
    "the bytes do not match the pinned sha256; correct spec.sha256/spec.fileSha256 or the "
    "source, then delete the .sha256-rejected marker to retry"
)
# `verify` found a cached file whose bytes are not its pin's (#46 item 6):
# verify writes no marker, and `stage` fetches the file again.
REMEDY_VERIFY_CHECKSUM = (
    "a cached file's bytes do not match its pinned sha256 (spec.sha256/spec.fileSha256): run "
    "llmkube-stager stage (the prefetch Job) with the same settings to fetch it again, or "
    "correct the pin if the file is the right one"
)
# The origin's own digest (HF LFS sha256), not a user pin: no marker was
# written, and a retry may well get good bytes (#12 item 5).
REMEDY_ORIGIN_CHECKSUM = (
    "the bytes received do not match the sha256 the origin lists for the file; nothing was "
    "published and no marker written, so a restart fetches it again (a bad CDN edge or proxy "
    "copy is usually transient); if it persists, check any mirror or proxy in between"
)
REMEDY_TRUNCATED = (
    "a cached file is shorter or longer than its own size record and the origin could not "
    "repair it now; restore origin access or delete the file so it is staged again"
)
REMEDY_LOCK_TIMEOUT = (
    "another writer held the cache lock for longer than LLMKUBE_LOCK_TIMEOUT; check for a stuck "
    "stager pod on this claim"
)
REMEDY_UNWRITABLE = (
    "the cache must be written but is read-only or not permitted for this uid; check the "
    "volume's access mode, fsGroup and the model-cache-prep container"
)
# #21 item 7: EIO (an XFS shutdown, a failing disk or network block device):
# nothing the failed transfer wrote was published; the volume must be repaired.
REMEDY_CACHE_FAILING = (
    "the cache volume failed an I/O (EIO): its disk or filesystem is failing or was shut down "
    "(see the node's kernel log); nothing from the failed transfer was published; repair or "
    "replace the volume, then restart"
)
# #29 item 7: EROFS from a filesystem mounted read-write that turned itself
# read-only (ext4 `errors=remount-ro` after an I/O error or corruption).
REMEDY_CACHE_TURNED_READ_ONLY = (
    "the cache volume's filesystem turned itself read-only after an error (ext4 errors=remount-ro; "
    "see the node's kernel log): its disk or filesystem is failing; nothing from the failed "
    "transfer was published; repair (fsck) or replace the volume, then restart"
)
# ENOTCONN, ESTALE: the mount is dead (a FUSE daemon that died, a stale NFS
# handle); a new pod mounts the volume afresh, partials kept for resume.
REMEDY_CACHE_DISCONNECTED = (
    "the cache volume's mount is gone (a FUSE daemon such as s3fs, rclone or a CSI driver died, "
    "or a stale NFS handle); check the storage driver's pod and logs; a new pod mounts it "
    "afresh and resumes"
)
# A symlink (or a file where a directory belongs) inside the model directory
# would make the agent write outside it (#11): refused before any write.
REMEDY_LEADS_OUTSIDE = (
    "a path in the cache leads outside it or is not what the model needs there (a symlink, "
    "or a directory, FIFO or device where a model file or directory belongs); nothing was "
    "written: remove it, then restart"
)
# #46 item 2: a cache directory holds one source's model; the user's words
# (the variables), since a Job or a person set them, not the operator.
REMEDY_OTHER_SOURCE = (
    "give each MODEL_SOURCE its own CACHE_DIR (the operator uses /models/<the first 16 hex "
    "digits of the sha256 of the source>), or empty this directory to stage the new source "
    "into it; files pinned by MODEL_SHA256 or MODEL_FILE_SHA256 may be kept across sources"
)
# A Hugging Face source: the hub's digests prove each file, online only.
REMEDY_OTHER_HF_SOURCE = (
    REMEDY_OTHER_SOURCE + "; or stage once with LLMKUBE_REFRESH_POLICY=OnChange, which keeps "
    "each file the hub's digests prove the same and fetches the rest"
)
# An archive of a KServe storage URI with a member that would land outside
# DEST_DIR, a special file, or too many bytes or members (#24 item 2).
REMEDY_ARCHIVE_UNSAFE = (
    "rebuild the archive with plain files and directories under relative names (no '..', no "
    "absolute names, no links pointing out, no devices or FIFOs), within "
    "LLMKUBE_ARCHIVE_MAX_BYTES and LLMKUBE_ARCHIVE_MAX_FILES, headers under 64 KiB, no sparse "
    "files, xz at -8 or lower"
)
# Something in the cache is there but this uid cannot read it (#11): not
# absent, and never overwritten.
REMEDY_UNREADABLE = (
    "a cache file or directory is not readable by this uid; check the volume's fsGroup and the "
    "model-cache-prep container (file modes of the model directory)"
)
REMEDY_EMPTY = (
    "the model directory is missing or empty: the reader volume may not be the writer's volume, "
    "or the model was never staged; run the prefetch Job or check the claim binding"
)
REMEDY_INCOMPLETE = (
    "some model files are missing or short: re-run the stager (prefetch Job) for this model"
)
REMEDY_INVALID_FILE_SET = (
    "check spec.files/spec.mmproj: paths must be relative, unique, without '..' or empty parts"
)
REMEDY_NOT_ALLOWED = (
    "the model's local/hostPath source is not within the operator's --allowed-host-path-roots"
)
# #22 item 6: a forward proxy answered 407. Its credentials are not the
# source's (spec.sourceSecretRef): they ride in the proxy URL.
REMEDY_PROXY_UNAUTHORIZED = (
    "the forward proxy refused the agent (HTTP 407 Proxy Authentication Required); check the "
    "user and password in HTTPS_PROXY / HTTP_PROXY, or list the host in NO_PROXY if it must "
    "not go through the proxy"
)
REMEDY_MIRROR_SEED = (
    "the mirror (LLMKUBE_MIRROR) does not hold this model version and LLMKUBE_MIRROR_ONLY=true "
    "forbids the origin: seed it with a prefetch Job that can reach the origin "
    "(LLMKUBE_MIRROR_PUBLISH=true), or unset LLMKUBE_MIRROR_ONLY"
)
REMEDY_MIRROR = (
    "the mirror (LLMKUBE_MIRROR) failed: check LLMKUBE_MIRROR_ENDPOINT, the mirror's keys "
    "(LLMKUBE_MIRROR_ACCESS_KEY_ID, LLMKUBE_MIRROR_SECRET_ACCESS_KEY; a seeder needs write "
    "access under the prefix) and the store's health"
)
REMEDY_CONFIG = "fix the named environment variable or flag; see llmkube-stager stage --help"
REMEDY_CANCELLED = "the pod was asked to stop during a transfer; partial files are kept for resume"
REMEDY_INTERNAL = "this is a bug in llmkube-stager; the pod log holds the traceback"

# #34 item 2: a signed model refused; nothing of it was published. One
# remedy per cause, each naming what differed (the detail names the file).
REMEDY_SIGNATURE_UNSIGNED = (
    "the model has no signature bundle where LLMKUBE_SIGNATURE points (default model.sig beside "
    "the model): sign the model with model-signing and publish model.sig beside it, or point "
    "LLMKUBE_SIGNATURE at its bundle; nothing of the model was published"
)
REMEDY_SIGNATURE_WRONG_KEY = (
    "the signature bundle does not verify against LLMKUBE_SIGNING_KEY / LLMKUBE_SIGNING_CERTS "
    "(signed by another key, a broken or truncated bundle, or an unsupported format): check "
    "that the anchor is the publisher's and the bundle is theirs; nothing of the model was "
    "published"
)
REMEDY_SIGNATURE_FILES = (
    "the files to stage are not the files the publisher signed (a file added, removed, renamed "
    "or changed, or a bundle of another model): stage the signed revision, fix MODEL_FILES, or "
    "have the publisher sign this one; nothing of the model was published"
)
REMEDY_SIGNATURE_RECORD = (
    "the cache holds this model verified against another trust anchor or bundle, or never "
    "verified: re-stage it (a prefetch Job with LLMKUBE_REFRESH_POLICY=OnChange) with the "
    "anchor this pod trusts"
)
# #40 item 7: a statement the key signed, but not the one pinned.
REMEDY_SIGNATURE_PIN = (
    "the signature verifies, but signs another statement than LLMKUBE_SIGNED_DIGEST pins (an "
    "older version or another model signed by the same key): serve the signed revision the pin "
    "names, or set LLMKUBE_SIGNED_DIGEST to the sha256 of the new statement (`inspect` shows it "
    "once staged); nothing of the model was published"
)
# #40 item 8: a bundle over the size bound (no statement is that large).
REMEDY_SIGNATURE_BUNDLE_SIZE = (
    "the signature bundle is larger than any model-signing bundle of a model (64 MiB, a "
    "statement of about 500,000 files): point LLMKUBE_SIGNATURE at the model's own bundle (the "
    "file `model_signing sign` wrote), not another file; nothing of the model was published"
)
# #40 item 2: a file beside a signed set that the bundle does not sign.
REMEDY_SIGNATURE_STRAY = (
    "the model's directory in the cache holds a file the signature does not sign (left by a run "
    "without a key, by a file the source no longer lists, or by another writer): an inference "
    "server loads the directory, so it is refused, not moved; remove the file named (or re-stage "
    "the model into an empty directory) and start again"
)

REMEDIES: dict[Reason, str] = {
    Reason.SUCCEEDED: "",
    Reason.SOURCE_UNREACHABLE: REMEDY_UNREACHABLE,
    Reason.SOURCE_UNAVAILABLE: REMEDY_UNAVAILABLE,
    Reason.SOURCE_UNAUTHORIZED: REMEDY_UNAUTHORIZED,
    Reason.SOURCE_NOT_FOUND: REMEDY_NOT_FOUND,
    Reason.SOURCE_REJECTED: REMEDY_REJECTED,
    Reason.SOURCE_UNTRUSTED: REMEDY_UNTRUSTED,
    Reason.SOURCE_RATE_LIMITED: REMEDY_RATE_LIMITED_HTTP,  # the kind unknown
    Reason.SOURCE_CHANGED: REMEDY_CHANGED,
    Reason.OUT_OF_SPACE: REMEDY_OUT_OF_SPACE,
    Reason.SIZE_MISMATCH: REMEDY_SIZE_MISMATCH,
    Reason.CHECKSUM_MISMATCH: REMEDY_CHECKSUM,
    Reason.SIGNATURE_INVALID: REMEDY_SIGNATURE_FILES,
    Reason.CACHE_TRUNCATED: REMEDY_TRUNCATED,
    Reason.CACHE_LOCK_UNSUPPORTED: REMEDY_LOCK_UNSUPPORTED_PREFETCH,
    Reason.CACHE_LOCK_TIMEOUT: REMEDY_LOCK_TIMEOUT,
    Reason.CACHE_UNWRITABLE: REMEDY_UNWRITABLE,
    Reason.CACHE_FAILING: REMEDY_CACHE_FAILING,
    Reason.CACHE_DISCONNECTED: REMEDY_CACHE_DISCONNECTED,
    Reason.CACHE_EMPTY: REMEDY_EMPTY,
    Reason.CACHE_INCOMPLETE: REMEDY_INCOMPLETE,
    Reason.INVALID_FILE_SET: REMEDY_INVALID_FILE_SET,
    Reason.SOURCE_NOT_ALLOWED: REMEDY_NOT_ALLOWED,
    Reason.INVALID_CONFIGURATION: REMEDY_CONFIG,
    Reason.CANCELLED: REMEDY_CANCELLED,
    Reason.INTERNAL: REMEDY_INTERNAL,
}

# The reasons with a remedy per cause (#34: which one the line carries says
# what differed; commands/diagnose.py reads it back from a log line).
REMEDIES_BY_CAUSE: dict[Reason, tuple[str, ...]] = {
    Reason.SIGNATURE_INVALID: (
        REMEDY_SIGNATURE_UNSIGNED,
        REMEDY_SIGNATURE_WRONG_KEY,
        REMEDY_SIGNATURE_FILES,
        REMEDY_SIGNATURE_RECORD,
        REMEDY_SIGNATURE_STRAY,
        REMEDY_SIGNATURE_PIN,
        REMEDY_SIGNATURE_BUNDLE_SIZE,
    ),
}

# The reasons whose remedy depends on the source kind (a local copy is never
# rate limited: it gets the plain origin's text).
REMEDIES_BY_KIND: dict[Reason, dict[SourceKind, str]] = {
    Reason.CACHE_LOCK_UNSUPPORTED: {s.kind: s.lock_remedy for s in SCHEMES},
    Reason.SOURCE_RATE_LIMITED: {s.kind: s.rate_limited_remedy for s in SCHEMES},
}


def remedy_for(reason: Reason, kind: SourceKind | None = None) -> str:
    """The remedy constant for a reason, per source kind where they differ."""
    by_kind = REMEDIES_BY_KIND.get(reason)
    if by_kind is not None and kind is not None:
        return by_kind[kind]
    return REMEDIES[reason]


@contextmanager
def from_source(kind: SourceKind) -> Iterator[None]:
    """Failures raised while a source of this kind is in use carry its kind,
    so their remedy is the kind's (a rate limit, a lock), unless they say
    another already."""
    try:
        yield
    except StagerError as err:
        if err.source_kind is not None:
            raise
        # #32 item 5: a new error; the one raised is never changed.
        raise err.amended(source_kind=kind) from err.__cause__


class Network(StrEnum):
    """How the network failed, decided by exception type where it was caught."""

    DNS = "dns"
    REFUSED = "refused"
    CONNECT_TIMEOUT = "connect_timeout"
    READ_TIMEOUT = "read_timeout"  # connected, then no byte for the stall timeout
    RESET = "reset"
    TLS_UNTRUSTED = "tls_untrusted"


@dataclass(frozen=True)
class Wire:
    """What the origin or the network said, as facts: the source adapters fill
    it where they translate a failure, `operator_phrase` turns it into the
    words today's controller looks for (spec §11.2)."""

    http_status: int | None = None
    s3_code: str = ""  # S3's <Code>, e.g. NoSuchKey, NoSuchBucket, SignatureDoesNotMatch
    network: Network | None = None
    host: str = ""
    port: int | None = None
    tls_problem: str = ""  # OpenSSL's verify message, e.g. "self-signed certificate"


class StagerError(Exception):
    """A failure with a contract reason. `detail` is already free of secrets."""

    reason: Reason = Reason.INTERNAL

    def __init__(
        self,
        detail: str,
        *,
        file: str | None = None,
        source_kind: SourceKind | None = None,
        reason: Reason | None = None,
        remedy: str | None = None,
        wire: Wire | None = None,
    ) -> None:
        super().__init__(detail)
        if reason is not None:
            self.reason = reason
        self.detail = detail
        self.file = file
        self.source_kind = source_kind
        # A cause-specific remedy where the reason's own would mislead (a
        # symlink leading outside is not "read-only").
        self._remedy = remedy
        self.wire = wire

    @property
    def remedy(self) -> str:
        return self._remedy or remedy_for(self.reason, self.source_kind)

    @property
    def retryable(self) -> bool:
        return self.reason in RETRYABLE

    def amended(
        self,
        *,
        detail: str | None = None,
        reason: Reason | None = None,
        source_kind: SourceKind | None = None,
        file: str | None = None,
        retry_after_s: float | None = None,
        remedy: str | None = None,
    ) -> Self:
        """This error as a layer above means it (None: as it is): a new one
        of the same type carrying everything else, its cause and traceback,
        so that an error already raised is never changed in place (#32 item
        5: a layer that kept a raised error, hf/source.py's `_again`, saw
        another's edits). Built without calling the type's `__init__`,
        whose arguments differ per type (kserve's ArchiveRefused)."""
        kind = type(self)
        new = kind.__new__(kind, *self.args)
        new.__dict__.update(self.__dict__)
        changes = {
            "detail": detail,
            "reason": reason,
            "source_kind": source_kind,
            "file": file,
            "retry_after_s": retry_after_s,  # a SourceError's (#29 item 8: the hub's 429)
            "_remedy": remedy,  # a failure of another place than the source (the mirror)
        }
        new.__dict__.update({k: v for k, v in changes.items() if v is not None})
        if detail is not None:
            new.args = (detail,)  # str(error) says what the error says
        new.__cause__ = self.__cause__
        return new.with_traceback(self.__traceback__)

    @property
    def exit_code(self) -> int:
        """The reason's exit code, except that an error whose own verdict on
        retrying differs from its reason's (a checksum mismatch against the
        origin's digest, #12 item 5) exits the way that verdict says."""
        code = exit_code_for(self.reason)
        if code in (EXIT_RETRYABLE, EXIT_PERMANENT):
            return EXIT_RETRYABLE if self.retryable else EXIT_PERMANENT
        return code


class ConfigError(StagerError):
    reason = Reason.INVALID_CONFIGURATION


class InvalidFileSet(StagerError):
    reason = Reason.INVALID_FILE_SET


class SourceError(StagerError):
    """The origin failed or refused. `transient` errors are retried with backoff."""

    reason = Reason.SOURCE_UNREACHABLE

    def __init__(
        self,
        detail: str,
        *,
        reason: Reason | None = None,
        transient: bool = False,
        retry_after_s: float | None = None,
        file: str | None = None,
        answered: bool = False,
        wire: Wire | None = None,
        remedy: str | None = None,
    ) -> None:
        super().__init__(detail, file=file, reason=reason, wire=wire, remedy=remedy)
        self.transient = transient
        self.retry_after_s = retry_after_s
        # True when the origin answered (an HTTP status), so the log never
        # calls an answering origin "unreachable" (scenario 51).
        self.answered = answered


_T = TypeVar("_T")


def known(value: _T | None, what: str) -> _T:
    """`value`, which the caller's own logic has already made sure is set
    (a branch, an invariant of its class): an internal error where it is
    not, never a None carried on. Where an `assert` narrowed the type,
    `python -O` stripped the check."""
    if value is None:
        raise StagerError(f"internal error: {what} is not set")
    return value


def token_refused(detail: str, remedy: str, *, transient: bool) -> SourceError:
    """A token endpoint's error answer: `transient` (throttled, in trouble)
    is SourceUnavailable and retried; else the credentials were refused,
    SourceUnauthorized with the remedy of the credentials' kind."""
    if transient:
        return SourceError(detail, reason=Reason.SOURCE_UNAVAILABLE, transient=True, answered=True)
    return SourceError(detail, reason=Reason.SOURCE_UNAUTHORIZED, answered=True, remedy=remedy)


def rejected(detail: str) -> SourceError:
    """The origin answered, but with what the agent refuses to use (not its
    protocol's form, a listing without end, a URL a request cannot carry):
    SourceRejected, the same request asked again would get the same."""
    return SourceError(detail, reason=Reason.SOURCE_REJECTED, answered=True)


class ProxyUnauthorized(SourceError):
    """A forward proxy answered 407, on CONNECT or to a plain request, on
    any path (#22 item 6). Wrong proxy credentials do not fix themselves:
    never retried, exit 4. Built by `proxy_unauthorized`; constructed like
    any SourceError (callers copy errors by their type)."""

    reason = Reason.SOURCE_UNAUTHORIZED

    @property
    def remedy(self) -> str:
        return REMEDY_PROXY_UNAUTHORIZED


def proxy_unauthorized(where: str, *, credentials_sent: bool | None) -> ProxyUnauthorized:
    """`where` says what was asked and via which proxy (`host:port` only);
    the credentials are named, never shown. `credentials_sent` None: not
    known where the answer was read."""
    if credentials_sent is None:
        why = "check the proxy credentials (the user:password of HTTPS_PROXY / HTTP_PROXY)"
    elif credentials_sent:
        why = "it refused the proxy credentials (the user:password of HTTPS_PROXY / HTTP_PROXY)"
    else:
        why = (
            "it wants credentials and no proxy credentials were sent (none in "
            "HTTPS_PROXY / HTTP_PROXY)"
        )
    return ProxyUnauthorized(
        f"{where}: the proxy answered 407 Proxy Authentication Required: {why}",
        answered=True,
        wire=Wire(http_status=407),
    )


class TransferError(StagerError):
    """The bytes could not be made into a complete, right file."""

    reason = Reason.SIZE_MISMATCH


class OriginChecksumMismatch(TransferError):
    """The bytes do not match the digest the origin itself lists (HF LFS),
    with no user pin involved: a bad copy on the way, not a wrong pin.
    Same reason as a pin mismatch; its own remedy, and retryable."""

    reason = Reason.CHECKSUM_MISMATCH

    @property
    def remedy(self) -> str:
        return REMEDY_ORIGIN_CHECKSUM

    @property
    def retryable(self) -> bool:
        return True


class SignatureError(StagerError):
    """#34: the model is not what the trust anchor's publisher signed (or
    the cache's record of that is not this pod's): never retried, exit 4."""

    reason = Reason.SIGNATURE_INVALID


class CacheError(StagerError):
    """The cache itself is in a state that stops staging or serving."""

    reason = Reason.CACHE_UNWRITABLE


class Cancelled(StagerError):
    reason = Reason.CANCELLED


def operator_phrase(err: StagerError) -> str:
    """The words the operator's substring matcher looks for (spec §11.2), in
    the wording curl and S3 used, built from the facts the error carries:
    never from its text. Empty when the failure has no such words (curl's
    other failures were never classified either, §11.1 item 8)."""
    wire = err.wire
    if wire is None:
        return ""
    parts = [wire.s3_code] if wire.s3_code else []
    if wire.http_status is not None and wire.http_status >= 400:
        # curl -f (22): the whole line the old downloader printed.
        parts.append(f"The requested URL returned error: {wire.http_status}")
    if wire.network is not None:
        host = wire.host or "the origin"
        at = f"{host} port {wire.port}" if wire.port is not None else host
        problem = wire.tls_problem or "certificate verify failed"
        parts.append(_NETWORK_PHRASES[wire.network].format(host=host, at=at, problem=problem))
    return "; ".join(p for p in parts if p)


# curl's (6), (7), (28), (56) and (60) texts; a stall is a timeout on an
# established connection, which the matcher knows as "connection timed out".
_NETWORK_PHRASES: dict[Network, str] = {
    Network.DNS: "Could not resolve host: {host}",
    Network.REFUSED: "Failed to connect to {at}: Connection refused",
    Network.CONNECT_TIMEOUT: "Failed to connect to {at}: Connection timed out",
    Network.READ_TIMEOUT: "Operation timed out: Connection timed out receiving from {at}",
    Network.RESET: "Recv failure: Connection reset by peer",
    Network.TLS_UNTRUSTED: "SSL certificate problem: {problem}",
}
