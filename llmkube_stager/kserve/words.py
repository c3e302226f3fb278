"""A failure's words in KServe mode (#31 item 5).

The agent's remedies name what an LLMKube Model has (`spec.source`,
`spec.sourceSecretRef`, `spec.files`, the prefetch Job, the operator's
flags). Under KServe the user wrote an InferenceService: its `storageUri`,
the ClusterStorageContainer that runs this image, the service account whose
secret KServe's webhook turns into the container's variables, and
`/mnt/models`, an emptyDir. A remedy is replaced whole where it has a KServe
counterpart, and any LLMKube field left in the detail is named as KServe
users know it. Pure: text in, text out.
"""

from __future__ import annotations

from llmkube_stager import errors as e
from llmkube_stager.words import replace_fields

_SECRET = (
    "the secret of the InferenceService's service account (KServe's credential builder sets "
    "the container's AWS_* / S3_* / HF_TOKEN variables from it)"
)
_REMEDIES: dict[str, str] = {
    e.REMEDY_UNAUTHORIZED: f"check the credentials in {_SECRET}",
    e.REMEDY_NOT_FOUND: (
        "check the InferenceService's storageUri: the bucket, key or file name does not exist at "
        "the endpoint"
    ),
    e.REMEDY_OUT_OF_SPACE: (
        "/mnt/models is an emptyDir on the node's disk: give the pod more ephemeral storage (the "
        "ClusterStorageContainer's resources, the node's free disk) or store a smaller model; "
        "for KServe's local model cache it is the node group's PVC: give its storage more room "
        "or remove models no LocalModelCache names"
    ),
    e.REMEDY_REJECTED: (
        "the origin refused the request; check the storageUri and the endpoint's logs"
    ),
    e.REMEDY_GATED: (
        "the Hugging Face repository is gated: its terms must be accepted on the repository's page "
        f"by the account HF_TOKEN belongs to; set HF_TOKEN in {_SECRET}"
    ),
    e.REMEDY_REDIRECT_SCHEME: (
        "the origin redirected to a URL the agent does not fetch (only http and https redirects "
        "are followed); point the storageUri at the final http(s) location"
    ),
    e.REMEDY_UNTRUSTED: (
        "the endpoint's CA is not trusted: give it to the ClusterStorageContainer as KServe does "
        "(AWS_CA_BUNDLE, or KServe's CA bundle ConfigMap mounted into the container), or set "
        "LLMKUBE_CA_DIR there"
    ),
    e.REMEDY_CHECKSUM: (
        "the bytes do not match the pinned sha256; correct MODEL_SHA256 / MODEL_FILE_SHA256 in the "
        "ClusterStorageContainer or the storageUri's content, then delete the pod"
    ),
    e.REMEDY_INVALID_FILE_SET: (
        "check the objects under the storageUri: each key must be a relative path without '..', "
        "unique, and not a name the agent keeps its records under (docs/migration-kserve.md)"
    ),
    e.REMEDY_CONFIG: (
        "fix the InferenceService's storageUri or the named variable of the "
        "ClusterStorageContainer (docs/migration-kserve.md)"
    ),
    e.REMEDY_UNWRITABLE: (
        "/mnt/models must be writable by the storage initializer's uid: check the "
        "ClusterStorageContainer's securityContext"
    ),
    e.REMEDY_UNREADABLE: (
        "a file under /mnt/models is not readable by the storage initializer's uid: check the "
        "ClusterStorageContainer's securityContext"
    ),
    e.REMEDY_TRUNCATED: (
        "a staged file is shorter or longer than its own size record and the origin could not "
        "repair it now; restore access to the storageUri, or delete the pod for a fresh emptyDir"
    ),
    # #34 in KServe mode: the anchor is the ClusterStorageContainer's `env`.
    e.REMEDY_SIGNATURE_FILES: (
        "the objects under the storageUri are not the files the publisher signed (an object "
        "added, removed, renamed or changed, or a bundle of another model): point the storageUri "
        "at the signed revision or have the publisher sign this one; nothing was exposed in "
        "/mnt/models (docs/migration-kserve.md)"
    ),
    e.REMEDY_SIGNATURE_UNSIGNED: (
        "the storageUri has no signature bundle where LLMKUBE_SIGNATURE points (default model.sig "
        "beside the model): publish the model's model-signing bundle there, or set "
        "LLMKUBE_SIGNATURE in the ClusterStorageContainer's env; nothing was exposed in "
        "/mnt/models"
    ),
    e.REMEDY_SIGNATURE_WRONG_KEY: (
        "the signature bundle does not verify against LLMKUBE_SIGNING_KEY / "
        "LLMKUBE_SIGNING_CERTS of the ClusterStorageContainer's env (another key, a broken or "
        "truncated bundle, an unsupported format): check the anchor and the bundle; nothing was "
        "exposed in /mnt/models"
    ),
    e.REMEDY_SIGNATURE_RECORD: (
        "/mnt/models holds a model verified against another trust anchor or bundle: delete the "
        "pod for a fresh emptyDir staged with the ClusterStorageContainer's anchor"
    ),
}
# What is left in a detail or an unmapped remedy, longest first.
_FIELDS: tuple[tuple[str, str], ...] = (
    ("spec.sha256/spec.fileSha256", "MODEL_SHA256 / MODEL_FILE_SHA256"),
    ("spec.resources.ephemeralStorage", "the pod's ephemeral storage"),
    ("spec.files/spec.mmproj", "the objects under the storageUri"),
    ("spec.sourceSecretRef", "the service account's secret"),
    ("spec.fileSha256", "MODEL_FILE_SHA256"),
    ("spec.sha256", "MODEL_SHA256"),
    ("spec.source", "the storageUri"),
    ("spec.files", "the objects under the storageUri"),
    ("MODEL_FILES entry", "key"),
    ("llmkube-stager stage --help", "docs/migration-kserve.md"),
    ("the operator's --ca-cert-configmap", "KServe's CA bundle ConfigMap"),
)


def kserve_remedy(remedy: str) -> str:
    return _REMEDIES.get(remedy) or kserve_words(remedy)


def kserve_words(text: str) -> str:
    return replace_fields(text, _FIELDS)
