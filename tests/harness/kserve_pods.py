"""The containers KServe's controllers build around a storage initializer
(#44), read in kserve/kserve at aaac4e294, so that tests run the agent with
exactly their arguments and environment:

- LLMInferenceService (pkg/controller/v1alpha2/llmisvc/workload_storage.go):
  `args: [uri, /mnt/models]` with the command unset; with LoRA adapters one
  container gets `[base, /mnt/models, adapter, /mnt/lora/<name>, ...]`
  (adapters sorted by name, workload_lora.go) and the emptyDir is mounted
  at the paths' common parent (`/mnt`); an hf:// URI adds KServe's three
  Hugging Face variables (utils.AddDefaultHuggingFaceEnvVars); the
  scheduler's `tokenizer` container adds STORAGE_ALLOW_PATTERNS
  (tokenizerOnlyDownload).
- The local model cache (pkg/controller/v1alpha1/localmodelnode/
  controller.go launchJob): `args: [uri, /mnt/models]`, the node's PVC at
  /mnt/models with `subPath: models/<storage key>`, the key the first 16
  hex digits of sha256(uri) (v1alpha1.GetStorageKey).

Paths are rooted under a test's tmp directory (`root`): `/mnt/models`
becomes `<root>/mnt/models`, as the volume would be mounted.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path

MODELS = "/mnt/models"  # constants.DefaultModelLocalMountPath, localmodelnode.MountPath
LORA_ROOT = "/mnt/lora"  # loraAdaptersMountRoot

# utils.AddDefaultHuggingFaceEnvVars: set on the LLMInferenceService's
# storage-initializer for an hf:// model (hf_transfer and Xet tuning of
# KServe's own image; the agent must accept them).
HF_DEFAULT_ENV = {
    "HF_HUB_ENABLE_HF_TRANSFER": "1",
    "HF_XET_HIGH_PERFORMANCE": "1",
    "HF_XET_NUM_CONCURRENT_RANGE_GETS": "8",
}
# tokenizerOnlyDownload, byte for byte: a JSON list in one variable.
TOKENIZER_ALLOW_PATTERNS = (
    '["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", '
    '"vocab.json", "merges.txt", "config.json", "generation_config.json"]'
)
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
    "config.json",
    "generation_config.json",
)


def under(root: Path, path: str) -> str:
    """`path` (absolute in the pod) as the test mounts it under `root`."""
    return str(root / path.lstrip("/"))


def llmisvc_args(root: Path, model_uri: str, adapters: Mapping[str, str] = {}) -> list[str]:
    """The storage-initializer's args: the model alone, or with its hf:// and
    s3:// LoRA adapters (name -> URI) as pairs, sorted by name."""
    args = [model_uri, under(root, MODELS)]
    for name in sorted(adapters):
        args += [adapters[name], under(root, f"{LORA_ROOT}/{name}")]
    return args


def llmisvc_env(model_uri: str, *, tokenizer: bool = False) -> dict[str, str]:
    """What the controller adds beside the credentials: KServe's Hugging
    Face variables for hf://, the allow patterns for the tokenizer."""
    env: dict[str, str] = {}
    if model_uri.startswith("hf://"):
        env.update(HF_DEFAULT_ENV)
    if tokenizer:
        env["STORAGE_ALLOW_PATTERNS"] = TOKENIZER_ALLOW_PATTERNS
    return env


def storage_key(uri: str) -> str:
    """v1alpha1.GetStorageKey: the local model cache's directory name."""
    return hashlib.sha256(uri.encode()).hexdigest()[:16]


def job_models_dir(pvc: Path, uri: str) -> Path:
    """What a download Job sees at /mnt/models: `<pvc>/models/<key>`."""
    return pvc / "models" / storage_key(uri)


def visible(dest: Path) -> dict[str, bytes]:
    """The files a model server's listing shows (no dot entries)."""
    return {
        str(p.relative_to(dest)): p.read_bytes()
        for p in dest.rglob("*")
        if p.is_file() and not any(x.startswith(".") for x in p.relative_to(dest).parts)
    }
