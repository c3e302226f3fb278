"""Retry-storm figure (#12 item 4): an 8-file OnChange start against a hub whose
API answers 503 to everything, with the agent's default retry settings.

Prints the model-info API calls the hub received, the other requests, the
wall time, the exit code and the reason. `--code DIR` runs the agent found
in DIR (e.g. an export of main: `git archive main llmkube_stager | tar -x -C
DIR`) instead of this checkout, so that before/after are measured by the
same harness on the same machine.

Not a test: it sleeps through real backoff (minutes before the fix).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.harness.hub import HubFault, fake_hub  # noqa: E402

FILES = [f"model-{i:05d}-of-00008.safetensors" for i in range(1, 9)]
REPO = "org/storm"


def run_cli(code: Path, env: dict[str, str], home: Path) -> tuple[int, float]:
    child = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "PYTHONPATH": str(code),
        **env,
    }
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "llmkube_stager", "stage"],
        env=child,
        cwd=code,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    return proc.returncode, time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--code", type=Path, default=ROOT)
    parser.add_argument("--status", type=int, default=503)
    args = parser.parse_args()
    rng = random.Random(1)
    files = {rel: rng.randbytes(4096) for rel in FILES}
    with tempfile.TemporaryDirectory() as tmp, fake_hub() as hub:
        base = Path(tmp)
        (base / "home").mkdir()
        cache = base / "models" / "k"
        term = base / "term"
        hub.add_repo(REPO, files)
        env = {
            "MODEL_SOURCE": f"hf://{REPO}@main",
            "MODEL_FILES": "\n".join(FILES),
            "CACHE_DIR": str(cache),
            "HF_ENDPOINT": hub.url,
            "LLMKUBE_CA_DIR": str(base / "no-certs"),
            "LLMKUBE_HOST_MODEL": str(base / "no-host-model" / "m.gguf"),
            "LLMKUBE_TERMINATION_LOG": str(term),
        }
        rc, _ = run_cli(args.code, env, base / "home")
        assert rc == 0, f"cold start failed: rc={rc}"
        hub.clear_log()
        hub.set_fault("api", HubFault(args.status))
        on_change = {**env, "LLMKUBE_REFRESH_POLICY": "OnChange"}
        rc, wall_s = run_cli(args.code, on_change, base / "home")
        doc = json.loads(term.read_bytes()) if term.exists() else {}
        print(
            json.dumps(
                {
                    "code": str(args.code),
                    "api_status": args.status,
                    "api_calls": len(hub.requests("api")),
                    "other_hub_requests": len(hub.requests()) - len(hub.requests("api")),
                    "wall_s": round(wall_s, 1),
                    "exit_code": rc,
                    "reason": doc.get("reason"),
                    "outcome": doc.get("outcome"),
                }
            )
        )


if __name__ == "__main__":
    main()
