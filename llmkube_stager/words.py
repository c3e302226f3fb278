"""A failure's words outside the operator (#46 item 6).

The remedy constants (errors.py, schemes.py) name what an LLMKube Model has
(`spec.source`, `spec.sourceSecretRef`, `spec.sha256`) and the operator's
flags (`--ca-cert-configmap`): the operator's transfer diagnosis matches
the first five byte for byte (spec/behavior.md §11.2, §11.3), so under the
operator they stay. A person, CI or a Job of one's own set environment
variables: there a remedy names those. Which words a run uses is
`LLMKUBE_REMEDY_WORDS` (config/load.py `remedy_words`): `operator` where
the image's `sh` runs an operator's command (operator/shell.py) or a
controller that reads the constants sets it; `variables` (the default)
everywhere else. KServe mode has its own words (kserve/words.py).

A remedy is replaced whole where it has a counterpart; an operator field
left in another remedy is named as the variable that carries it. The cause
(the detail) is left as it is. Pure: text in, text out.
"""

from __future__ import annotations

from llmkube_stager import errors as e
from llmkube_stager import schemes as s
from llmkube_stager.schemes import SourceKind

_PREFETCH = (
    "stage the model in a prefetch Job with LLMKUBE_PREFETCH_STAGER=true (a single writer), "
    "then start the serving pods, or use storage with cross-node flock support"
)
_REMEDIES: dict[str, str] = {
    e.REMEDY_UNTRUSTED: (
        "the endpoint's CA is not trusted: put its certificate (PEM) in the directory "
        "LLMKUBE_CA_DIR names (default /custom-certs; added to the system roots, never "
        "replacing them)"
    ),
    e.REMEDY_UNAUTHORIZED: (
        "check the credentials the source's variables hold: HF_TOKEN for Hugging Face, "
        "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (or AWS_PROFILE, AWS_ROLE_ARN with "
        "AWS_WEB_IDENTITY_TOKEN_FILE) for S3, USER:PASSWORD@host in MODEL_SOURCE for http(s)"
    ),
    e.REMEDY_NOT_FOUND: (
        "check MODEL_SOURCE (and MODEL_FILES, S3_BUCKET, S3_KEY, S3_PREFIX where set): the "
        "bucket, key or file name does not exist at the endpoint"
    ),
    e.REMEDY_OUT_OF_SPACE: (
        "give CACHE_DIR a volume with room for the whole model (the pod's ephemeral storage, "
        "which also sizes an emptyDir, or a larger claim), or free space on it"
    ),
    e.REMEDY_REJECTED: "the origin refused the request; check MODEL_SOURCE and the endpoint's logs",
    e.REMEDY_GATED: (
        "the Hugging Face repository is gated: its terms must be accepted on the repository's "
        "page (and access granted, where the owner reviews requests) by the account HF_TOKEN "
        "belongs to; set HF_TOKEN to a token of that account"
    ),
    e.REMEDY_REDIRECT_SCHEME: (
        "the origin redirected to a URL the agent does not fetch (only http and https redirects "
        "are followed); point MODEL_SOURCE at the final http(s) location or fix the origin's "
        "redirect"
    ),
    e.REMEDY_CHECKSUM: (
        "the bytes do not match the pinned sha256; correct MODEL_SHA256 / MODEL_FILE_SHA256 or "
        "MODEL_SOURCE, then delete the .sha256-rejected marker beside the file to retry"
    ),
    e.REMEDY_INVALID_FILE_SET: (
        "check MODEL_FILES: one repo-relative path per line (not comma-separated), unique, "
        "without '..' or empty parts"
    ),
    e.REMEDY_NOT_ALLOWED: (
        "the local source is outside LLMKUBE_ALLOWED_HOST_ROOTS: copy the model under one of "
        "those directories, or add its directory to that list"
    ),
    s.REMEDY_LOCK_UNSUPPORTED_PREFETCH: _PREFETCH,
}
# A 401/403 names what such a source can carry, by its kind.
_UNAUTHORIZED_BY_KIND: dict[SourceKind, str] = {
    "http": (
        "a plain http(s) source carries credentials only as HTTP basic authentication, from a "
        "user and password written in MODEL_SOURCE before the host (USER:PASSWORD@host, never "
        "logged); "
        "HF_TOKEN is sent only to Hugging Face or HF_ENDPOINT, and no other header is sent: "
        "check that user and password, or put the model where the pod may read it"
    ),
    "hf": (
        "set HF_TOKEN to a token with read access to the repository (and HF_ENDPOINT when a "
        "mirror is meant)"
    ),
    "s3": (
        "check the S3 credentials: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (with "
        "AWS_SESSION_TOKEN for temporary ones), AWS_PROFILE, or the web identity "
        "(AWS_ROLE_ARN, AWS_WEB_IDENTITY_TOKEN_FILE), and the bucket's policy"
    ),
}
# What is left in a detail, longest first.
_FIELDS: tuple[tuple[str, str], ...] = (
    ("spec.sha256/spec.fileSha256", "MODEL_SHA256 / MODEL_FILE_SHA256"),
    ("spec.resources.ephemeralStorage", "the pod's ephemeral storage"),
    ("spec.files/spec.mmproj", "MODEL_FILES"),
    ("spec.sourceSecretRef", "the source's credential variables"),
    ("spec.fileSha256", "MODEL_FILE_SHA256"),
    ("spec.sha256", "MODEL_SHA256"),
    ("spec.source", "MODEL_SOURCE"),
    ("spec.files", "MODEL_FILES"),
    ("the operator's --ca-cert-configmap", "LLMKUBE_CA_DIR"),
    ("the operator's --allowed-host-path-roots", "LLMKUBE_ALLOWED_HOST_ROOTS"),
)


def variables_remedy(remedy: str, kind: SourceKind | None) -> str:
    """The remedy as a user who set the variables reads it."""
    if remedy == e.REMEDY_UNAUTHORIZED and kind in _UNAUTHORIZED_BY_KIND:
        return _UNAUTHORIZED_BY_KIND[kind]
    return _REMEDIES.get(remedy) or variables_words(remedy)


def variables_words(text: str) -> str:
    return replace_fields(text, _FIELDS)


def replace_fields(text: str, fields: tuple[tuple[str, str], ...]) -> str:
    """Each field named in `text` as its words (the longest fields first)."""
    for field, words in fields:
        if field in text:
            text = text.replace(field, words)
    return text


def in_variables_words(err: e.StagerError) -> e.StagerError:
    """A new error whose remedy is in the variables' words (the one raised
    is never changed, errors.StagerError.amended). The cause keeps its
    words: the scripts' error texts (`spec.sha256 mismatch`, spec §11.4)
    are what alerts grep for, whoever runs the agent."""
    new = err.amended()
    new._remedy = variables_remedy(err.remedy, err.source_kind)
    return new
