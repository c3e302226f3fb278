"""The commands LLMKube's operator generates, in the shapes it emits (#30).

L0 is transcribed from upstream `internal/controller/model_storage.go` at
907ac8d8 (buildModelInitCommand, remoteRevalidateScript,
buildMultiFileInitCommand, addCACertVolume, cachePrepInitContainer,
invalidFileSetInitContainer, disallowedLocalSourceStorageConfig) and
`model_prefetch.go` (the `prefetch-done` container). L1/L2 (resume, HF
token, progress, digest gates) are written from docs/spec/behavior.md §3, §5,
§6 and §7, whose shell source was not published: the helpers' names and the
lines the spec quotes, bodies of our own. Used by the recogniser's unit tests
and by the image tests, which run them with `sh -c` in the image and with
curl on the host.
"""

from __future__ import annotations

from dataclasses import dataclass

CA_PRELUDE = (
    "export LLMKUBE_CA_BUNDLE=/tmp/llmkube-ca-bundle.crt && "
    'cat /etc/ssl/certs/ca-certificates.crt /custom-certs/* > "$LLMKUBE_CA_BUNDLE" 2>/dev/null || '
    'cat /custom-certs/* > "$LLMKUBE_CA_BUNDLE" && '
    'export CURL_CA_BUNDLE="$LLMKUBE_CA_BUNDLE" && '
)

PREP_FSGROUP = "chown 0:{gid} /models && chmod g+rwX /models"
PREP_NO_FSGROUP = "chown 100:100 /models && chmod 770 /models"
PREFETCH_DONE = "echo prefetch complete"
INVALID_FILE_SET = (
    'echo "ERROR: InvalidFileSet - model spec.files/spec.mmproj configuration is invalid. '
    'Check file paths, directory escapes, and glob patterns."; exit 1'
)
SOURCE_NOT_ALLOWED = (
    "echo \"ERROR: SourceNotAllowed - the model's local/hostPath source is not within the "
    "operator's --allowed-host-path-roots (GHSA-jw3m-8q7m-f35r).\"; exit 1"
)
LOCAL_UNCACHED = "echo 'ERROR: Local model source requires model cache to be configured.'; exit 1"

_S3_SINGLE_URL = '"${AWS_ENDPOINT_URL}/${S3_BUCKET}/${S3_KEY}"'
_S3_CURL = (
    'curl --aws-sigv4 "aws:amz:${AWS_REGION}:s3" -u "${AWS_ACCESS_KEY_ID}:${AWS_SECRET_ACCESS_KEY}"'
)

REMOTE_REVALIDATE = (
    "echo 'Revalidating model against upstream (RefreshPolicy=OnChange)...'; "
    "remote_size=$(curl -fsSL -I \"$MODEL_SOURCE\" -o /dev/null -w '%header{content-length}' "
    "2>/dev/null || echo 0); "
    'if [ -f "$MODEL_PATH" ] && [ "$(stat -c %s "$MODEL_PATH" 2>/dev/null || echo 0)" = '
    '"$remote_size" ] && [ "$remote_size" != "0" ]; then '
    "echo 'Model revalidated (unchanged, skipped download)'; "
    "else "
    'if curl -fsSL -o "$MODEL_PATH.tmp" "$MODEL_SOURCE" && mv "$MODEL_PATH.tmp" "$MODEL_PATH"; '
    "then echo 'Model revalidated (downloaded)'; "
    "elif [ -f \"$MODEL_PATH\" ]; then echo 'Revalidation unreachable; kept cached copy'; exit 0; "
    "else echo 'ERROR: model missing and revalidation failed'; exit 1; fi; "
    "fi"
)


def single_file(kind: str, cached: bool, policy: str = "IfNotPresent") -> str:
    """buildModelInitCommand(isLocal, isS3, useCache, refreshPolicy) at L0."""
    if cached:
        head = 'mkdir -p "$CACHE_DIR" && rm -f "$MODEL_PATH.tmp" && '
        if kind == "local":
            return head + (
                "if [ ! -f \"$MODEL_PATH\" ]; then echo 'Copying model from local source...'; "
                'cp /host-model/model.gguf "$MODEL_PATH.tmp" && mv "$MODEL_PATH.tmp" "$MODEL_PATH" '
                "&& echo 'Model copied successfully'; "
                "else echo 'Model already cached, skipping copy'; fi"
            )
        if kind == "s3":
            return head + (
                "if [ ! -f \"$MODEL_PATH\" ]; then echo 'Downloading model from S3...'; "
                f'{_S3_CURL} -f -L -o "$MODEL_PATH.tmp" {_S3_SINGLE_URL} '
                '&& mv "$MODEL_PATH.tmp" "$MODEL_PATH" '
                "&& echo 'Model downloaded successfully'; "
                "else echo 'Model already cached, skipping download'; fi"
            )
        if policy == "OnChange":
            return head + REMOTE_REVALIDATE
        return head + (
            "if [ ! -f \"$MODEL_PATH\" ]; then echo 'Downloading model...'; "
            'curl -f -L -o "$MODEL_PATH.tmp" "$MODEL_SOURCE" && mv "$MODEL_PATH.tmp" "$MODEL_PATH" '
            "&& echo 'Model downloaded successfully'; "
            "else echo 'Model already cached, skipping download'; fi"
        )
    if kind == "local":
        return LOCAL_UNCACHED
    if kind == "s3":
        return (
            "if [ ! -f \"$MODEL_PATH\" ]; then echo 'Downloading model from S3...'; "
            f'{_S3_CURL} -f -L -o "$MODEL_PATH.tmp" {_S3_SINGLE_URL} '
            '&& mv "$MODEL_PATH.tmp" "$MODEL_PATH" '
            "&& echo 'Model downloaded successfully'; "
            "else echo 'Model already exists, skipping download'; fi"
        )
    if policy == "OnChange":
        return REMOTE_REVALIDATE
    return (
        "if [ ! -f \"$MODEL_PATH\" ]; then echo 'Downloading model...'; "
        'curl -f -L -o "$MODEL_PATH.tmp" "$MODEL_SOURCE" && mv "$MODEL_PATH.tmp" "$MODEL_PATH" '
        "&& echo 'Model downloaded successfully'; "
        "else echo 'Model already exists, skipping download'; fi"
    )


_NORMALIZE = (
    'normalize_hf_source() { case "$1" in hf://*) src="${1#hf://}"; rev="${src#*@}"; '
    'if [ "$rev" != "$src" ]; then echo "https://huggingface.co/${src%%@*}/resolve/$rev/"; '
    'else echo "https://huggingface.co/$src/resolve/main/"; fi ;; *) echo "$1" ;; esac; } && '
)
_LOOP_HEAD = (
    'SOURCE="$(normalize_hf_source "$MODEL_SOURCE")" && '
    "printf '%s\\n' \"$MODEL_FILES\" | while IFS= read -r rel; do "
    '[ -n "$rel" ] || continue; '
    'dest="$CACHE_DIR/$rel"; '
    'mkdir -p "$(dirname "$dest")"; '
)
_S3_URL = 'key="${S3_PREFIX:+${S3_PREFIX}/}$rel"; url="${AWS_ENDPOINT_URL}/${S3_BUCKET}/${key}"; '


def multi_file(s3: bool, cached: bool, policy: str = "IfNotPresent") -> str:
    """buildMultiFileInitCommand(useCache, isS3, refreshPolicy) at L0."""
    prefix = (
        'mkdir -p "$CACHE_DIR" && find "$CACHE_DIR" -name \'*.tmp\' -delete && '
        if cached
        else "mkdir -p /models && find /models -name '*.tmp' -delete && "
    )
    body = _NORMALIZE + _LOOP_HEAD
    if s3:
        body += _S3_URL
        head = f"{_S3_CURL} -fsSL -I"
        get = f"{_S3_CURL} -f -L"
    else:
        body += 'url="${SOURCE%/}/$rel"; '
        head = "curl -fsSL -I"
        get = "curl -fsSL" if policy == "OnChange" else "curl -f -L"
    if policy == "OnChange":
        body += (
            f"remote_size=$({head} \"$url\" -o /dev/null -w '%header{{content-length}}' "
            "2>/dev/null || echo 0); "
            'if [ -f "$dest" ] && '
            '[ "$(stat -c %s "$dest" 2>/dev/null || echo 0)" = "$remote_size" ] '
            '&& [ "$remote_size" != "0" ]; then '
            'echo "Model artifact $rel revalidated (unchanged, skipped download)"; '
            "else "
            f'if {get} -o "$dest.tmp" "$url" && mv "$dest.tmp" "$dest"; then '
            'echo "Model artifact $rel revalidated (downloaded)"; '
            'elif [ -f "$dest" ]; then echo "Revalidation unreachable for $rel; kept cached copy"; '
            'else echo "ERROR: model artifact $rel missing and revalidation failed"; exit 1; fi; '
            "fi; "
            "done"
        )
    else:
        body += (
            'if [ ! -f "$dest" ]; then '
            'echo "Downloading model artifact $rel..."; '
            f'{get} -o "$dest.tmp" "$url" && mv "$dest.tmp" "$dest" '
            '|| { echo "ERROR: failed to download $rel"; exit 1; }; '
            'else echo "Model artifact $rel already cached, skipping download"; fi; '
            "done"
        )
    return prefix + body


def with_ca(command: str) -> str:
    """addCACertVolume's prelude."""
    return CA_PRELUDE + command


# -- L1/L2, written from the spec (§3.2, §5.2-5.4, §7) ----------------------------------

HF_CURL = (
    'hf_curl() { if [ -n "${HF_TOKEN:-}" ]; then curl -H "Authorization: Bearer ${HF_TOKEN}" "$@"; '
    'else curl "$@"; fi; }; '
)
PROGRESS = (
    'download_with_progress() { dest=$1; total=$2; shift 2; "$@" & pid=$!; '
    'while kill -0 "$pid" 2>/dev/null; do sleep 1; done; wait "$pid"; }; '
)


def resumable_single(hf_auth: bool, pinned: bool = False) -> str:
    """L1 single-file IfNotPresent: HEAD probe, validator-keyed partial,
    keep-one sweep, `curl -C -` under download_with_progress (§5.2)."""
    get = "hf_curl" if hf_auth else "curl"
    precheck = "llmkube_precheck_sha256 || exit 1; " if pinned else ""
    publish = (
        'llmkube_publish_sha256 "$MODEL_PARTIAL" "$MODEL_PATH"'
        if pinned
        else 'mv "$MODEL_PARTIAL" "$MODEL_PATH"'
    )
    helpers = (
        'llmkube_precheck_sha256() { [ -n "$MODEL_SHA256" ] || '
        "{ echo 'ERROR: spec.sha256 is empty; refusing to transfer unchecked'; return 1; }; }; "
        "llmkube_publish_sha256() { got=$(sha256sum \"$1\" | cut -d' ' -f1); "
        'if [ "$got" = "$MODEL_SHA256" ]; then mv "$1" "$2"; '
        'else rm -f "$1"; '
        "echo 'ERROR: spec.sha256 mismatch, download discarded'; return 1; fi; }; "
        if pinned
        else ""
    )
    return (
        (HF_CURL if hf_auth else "") + PROGRESS + helpers + precheck + 'mkdir -p "$CACHE_DIR" && '
        "if [ ! -f \"$MODEL_PATH\" ]; then echo 'Downloading model...'; "
        f'remote_head=$({get} -fsSL -I "$MODEL_SOURCE" -o /dev/null '
        "-w 'CL%header{content-length}ET%header{etag}\\n%header{accept-ranges}' "
        "2>/dev/null || echo ''); "
        "remote_validator=$(printf '%s\\n' \"$remote_head\" | head -n 1); "
        "accept_ranges=$(printf '%s\\n' \"$remote_head\" | sed -n 2p | tr -d '\\r'); "
        "remote_size=${remote_validator#CL}; remote_size=${remote_size%%ET*}; "
        "key=$(printf '%s' \"$remote_validator\" | sha256sum | cut -c1-12); "
        'MODEL_PARTIAL="$MODEL_PATH.$key.tmp"; '
        'find "$(dirname "$MODEL_PATH")" -maxdepth 1 -name \'*.tmp\' '
        '! -name "$(basename "$MODEL_PARTIAL")" -delete; '
        '[ "$accept_ranges" = bytes ] || rm -f "$MODEL_PARTIAL"; '
        'download_with_progress "$MODEL_PARTIAL" "$remote_size" '
        f'{get} -f -L -C - -o "$MODEL_PARTIAL" "$MODEL_SOURCE" --no-progress-meter && '
        f"{publish} && echo 'Model downloaded successfully'; "
        "else echo 'Model already cached, skipping download'; fi"
    )


def locked_multi() -> str:
    """L3/L4 multi-file http IfNotPresent: FUSE detection, the directory
    lock (an `exec` descriptor and flock), the 10-minute debris sweep, size
    records written through `llmkube_atomic_write` (spec §5.1, §6.2, §9, §10;
    the lock's name and the helpers' bodies are ours)."""
    return (
        'llmkube_atomic_write() { tmp=$(mktemp "$1.llmkube-tmp.XXXXXX") || return 1; '
        'printf \'%s\' "$2" > "$tmp" && mv "$tmp" "$1" || { rm -f "$tmp"; return 1; }; }; '
        'llmkube_fuse_reader() { [ "$fs_type" = 65735546 ] && '
        '[ "${LLMKUBE_PREFETCH_STAGER:-false}" != true ]; }; '
        'mkdir -p "$CACHE_DIR" || exit 1; '
        'fs_type=$(stat -f -c %t "$CACHE_DIR" 2>/dev/null) || '
        '{ echo "ERROR: ModelCacheLockUnsupported: cannot determine cache filesystem"; exit 1; }; '
        "if ! llmkube_fuse_reader; then "
        'exec 9>"$CACHE_DIR/.llmkube.lock" && flock 9; '
        "find \"$CACHE_DIR\" -name '*.llmkube-tmp.??????' -mmin +10 -delete; fi; "
        + _NORMALIZE
        + _LOOP_HEAD
        + 'url="${SOURCE%/}/$rel"; '
        'if [ -f "$dest" ] && [ "$(cat "$dest.llmkube-size" 2>/dev/null)" = '
        '"$(stat -c %s "$dest")" ]; then '
        'echo "Model artifact $rel already cached, skipping download"; '
        'elif llmkube_fuse_reader; then echo "ERROR: ModelCacheLockUnsupported: FUSE cache cannot '
        'guarantee cross-node file locking for staging $rel; set spec.modelCache.prefetch: true"; '
        "exit 1; "
        'else echo "Downloading model artifact $rel..."; '
        'curl -f -L -o "$dest.tmp" "$url" && mv "$dest.tmp" "$dest" && '
        'llmkube_atomic_write "$dest.llmkube-size" "$(stat -c %s "$dest")" '
        '|| { echo "ERROR: failed to download $rel"; exit 1; }; fi; '
        "done"
    )


def pinned_multi() -> str:
    """L2 multi-file http IfNotPresent with spec.fileSha256: the precheck
    fails closed, a pinned file is published only through its digest
    (spec §6.2, §6.4, §7; the helpers' names are the spec's, bodies ours)."""
    return (
        "llmkube_file_digest() { printf '%s\\n' \"$MODEL_FILE_SHA256\" | "
        'while read -r d r; do [ "$r" = "$1" ] && echo "$d"; done; }; '
        'llmkube_precheck_file_sha256() { [ -n "$MODEL_FILE_SHA256" ] || '
        "{ echo 'ERROR: spec.fileSha256 is empty; refusing to transfer unchecked'; return 1; }; }; "
        'llmkube_publish_file() { want=$(llmkube_file_digest "$rel"); '
        'if [ -z "$want" ]; then mv "$1" "$2"; return; fi; '
        "got=$(sha256sum \"$1\" | cut -d' ' -f1); "
        'if [ "$got" = "$want" ]; then mv "$1" "$2"; else rm -f "$1"; '
        'echo "ERROR: spec.fileSha256 mismatch for $rel; '
        'delete $2.$want.sha256-rejected to retry"; '
        "return 1; fi; }; "
        "llmkube_precheck_file_sha256 || exit 1; "
        'mkdir -p "$CACHE_DIR" && find "$CACHE_DIR" -name \'*.tmp\' -delete && '
        + _NORMALIZE
        + _LOOP_HEAD
        + 'url="${SOURCE%/}/$rel"; '
        'if [ ! -f "$dest" ]; then echo "Downloading model artifact $rel..."; '
        'curl -f -L -o "$dest.tmp" "$url" && llmkube_publish_file "$dest.tmp" "$dest" '
        '|| { echo "ERROR: failed to download $rel"; exit 1; }; '
        'else echo "Model artifact $rel already cached, skipping download"; fi; '
        "done"
    )


@dataclass(frozen=True)
class Shape:
    """One command the operator emits, and what the recogniser must read."""

    name: str
    script: str
    layout: str
    kind: str
    policy: str
    pinned: bool = False


def l0_shapes() -> list[Shape]:
    shapes = []
    for cached in (True, False):
        where = "cached" if cached else "emptyDir"
        for policy in ("IfNotPresent", "OnChange"):
            shapes.append(
                Shape(f"single http {policy} {where}", single_file("http", cached, policy),
                      "single", "http", policy)
            )  # fmt: skip
            # s3 single-file has no OnChange branch: IfNotPresent semantics.
            shapes.append(
                Shape(f"single s3 {policy} {where}", single_file("s3", cached, policy),
                      "single", "s3", "IfNotPresent")
            )  # fmt: skip
            shapes.append(
                Shape(f"multi http {policy} {where}", multi_file(False, cached, policy),
                      "multi", "http", policy)
            )  # fmt: skip
            shapes.append(
                Shape(f"multi s3 {policy} {where}", multi_file(True, cached, policy),
                      "multi", "s3", policy)
            )  # fmt: skip
    shapes.append(
        Shape("single local cached", single_file("local", True), "single", "local", "IfNotPresent")
    )
    return shapes


def l1_shapes() -> list[Shape]:
    return [
        Shape(
            "multi http locked, size records (L3/L4)",
            locked_multi(),
            "multi",
            "http",
            "IfNotPresent",
        ),
        Shape("multi http pinned (L2)", pinned_multi(), "multi", "http", "IfNotPresent", True),
        Shape("single http resumable", resumable_single(False), "single", "http", "IfNotPresent"),
        Shape(
            "single hf token resumable", resumable_single(True), "single", "http", "IfNotPresent"
        ),
        Shape(
            "single hf token resumable pinned",
            resumable_single(True, pinned=True),
            "single",
            "http",
            "IfNotPresent",
            pinned=True,
        ),
    ]


# pvc:// with spec.sha256: the verify-only init container (spec §3.5; its
# texts are the spec's, the shell around them ours).
PVC_VERIFY = (
    'if [ ! -e "$MODEL_PATH" ]; then '
    'echo "ERROR: $MODEL_PATH does not exist on the mounted volume"; exit 1; fi; '
    'if [ -d "$MODEL_PATH" ]; then '
    'echo "ERROR: $MODEL_PATH is a directory, not a file"; exit 1; fi; '
    'if [ ! -r "$MODEL_PATH" ]; then '
    'echo "ERROR: $MODEL_PATH is not readable by the init container"; exit 1; fi; '
    "got=$(sha256sum \"$MODEL_PATH\" | cut -d' ' -f1); "
    'if [ "$got" != "$MODEL_SHA256" ]; then '
    'echo "ERROR: SHA256 mismatch for the pre-staged model $MODEL_PATH"; exit 1; fi; '
    "echo 'Pre-staged model verified'"
)

NOT_DOWNLOADS = [
    PREP_FSGROUP.format(gid=102),
    PREP_NO_FSGROUP,
    PREFETCH_DONE,
    INVALID_FILE_SET,
    SOURCE_NOT_ALLOWED,
    LOCAL_UNCACHED,
]
