"""The warm start of a signed model (docs/performance.md "the kept bundle
checked on every warm start"): a local model of 2,000 files of 1 KiB,
signed by model-signing's API with a P-256 key, staged once; then
`python -m llmkube_stager stage` warm, alternating two trees of the agent
(BEFORE and AFTER, each a checkout's root; AFTER defaults to this one),
and the same without a key, PAIRS pairs each. Prints median and best per
tree, in ms, of the whole process (interpreter start included), and of the
warm start's `cryptography` imports (`python -X importtime`, the top-level
imports' cumulative time), which a whole-process figure on a shared node
is too noisy to show.

    python bench/signedwarm.py [--before /path/to/other/checkout] [--pairs 25]

Standalone (not a `make bench` case): it needs model-signing, which the
shipped image holds only with the signing extra.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILES = 2000


def _model(root: str) -> tuple[str, list[str]]:
    rels = [f"d{i % 7}/part-{i:05d}.json" for i in range(FILES)]
    src = os.path.join(root, "src")
    for i, rel in enumerate(rels):
        path = os.path.join(src, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(i.to_bytes(4, "big") * 256)
    return src, rels


def _sign(root: str, src: str) -> str:
    import model_signing
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    key_path = os.path.join(root, "key.pem")
    with open(key_path, "wb") as handle:
        handle.write(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
    bundle = os.path.join(root, "model.sig")
    config = model_signing.signing.Config().use_elliptic_key_signer(private_key=key_path)
    config.sign(src, bundle)
    os.replace(bundle, os.path.join(src, "model.sig"))
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return public.decode()


def _crypto_ms(stderr: str) -> float:
    total_us = 0
    for line in stderr.splitlines():
        parts = line.split("|")
        if line.startswith("import time:") and len(parts) == 3:
            name = parts[2][1:]  # one space, then the name; nested ones are indented
            if name.startswith("cryptography") and not name.startswith(" "):
                total_us += int(parts[1])
    return total_us / 1000


def _run(tree: str, env: dict[str, str], flags: tuple[str, ...] = ()) -> float:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, *flags, "-m", "llmkube_stager", "stage"],
        env={**env, "PYTHONPATH": tree},
        # Not a checkout's root: `-m` puts the working directory first on
        # sys.path, which would shadow PYTHONPATH's tree.
        cwd=env["HOME"],
        capture_output=True,
        check=False,
    )
    elapsed = (time.perf_counter() - started) * 1000
    if done.returncode != 0:
        raise SystemExit(done.stderr.decode()[-2000:])
    if flags:
        return _crypto_ms(done.stderr.decode())
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", default="")
    parser.add_argument("--after", default=HERE)
    parser.add_argument("--pairs", type=int, default=25)
    args = parser.parse_args()
    trees = {"after": args.after, **({"before": args.before} if args.before else {})}
    with tempfile.TemporaryDirectory(prefix="signedwarm-") as root:
        src, rels = _model(root)
        key = _sign(root, src)
        base = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": root,
            "MODEL_SOURCE": src,
            "MODEL_FILES": "\n".join(rels),
            "LLMKUBE_TERMINATION_LOG": os.path.join(root, "term"),
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        for name, tree in trees.items():
            cache = os.path.join(root, f"cache-{name}")
            for keyed in (False, True):
                env = {**base, "CACHE_DIR": cache + ("-key" if keyed else "")}
                env.update({"LLMKUBE_SIGNING_KEY": key} if keyed else {})
                _run(tree, env)  # cold
        times: dict[str, list[float]] = {}
        for _ in range(args.pairs):
            for name, tree in trees.items():
                for keyed in (False, True):
                    env = {**base, "CACHE_DIR": os.path.join(root, f"cache-{name}")}
                    if keyed:
                        env.update(CACHE_DIR=env["CACHE_DIR"] + "-key", LLMKUBE_SIGNING_KEY=key)
                    label = f"{name} {'key' if keyed else 'no key'}"
                    times.setdefault(label, []).append(_run(tree, env))
                    if keyed:
                        imports = _run(tree, env, ("-X", "importtime"))
                        times.setdefault(f"{name} imports", []).append(imports)
        for label, values in sorted(times.items()):
            print(
                f"{label:16} median {statistics.median(values):6.0f} ms  best {min(values):6.0f} ms"
            )


if __name__ == "__main__":
    main()
