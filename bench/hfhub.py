"""A fake Hugging Face hub for the bench: the API answer of
`model_info(files_metadata=True)` (LFS sha256 and sizes, as the Hub lists
them) and `/resolve/` redirecting LFS files to a CDN (nginx, so that neither
tool is bound by a Python origin). Small files come from the hub itself.

tests/harness/hub.py is the full fake (faults, auth, a Python CDN) for the
tests; it keeps every file in memory and hashes it per API call, which a
2 GiB model cannot afford, so the bench serves known digests of files on
disk instead.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

COMMIT = "b" * 40


def _pointer(sha256: str, size: int) -> bytes:
    return (
        f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()
    )


def _git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\x00" % len(data) + data, usedforsecurity=False).hexdigest()


class _Repo:
    def __init__(
        self,
        repo: str,
        lfs: dict[str, tuple[str, str]],
        small: dict[str, bytes],
        cdn: str,
    ) -> None:
        self.repo = repo
        self.cdn = cdn
        self.small = small
        # name -> (size, sha256, blob id)
        self.lfs = {
            name: (os.path.getsize(path), sha, _git_blob_id(_pointer(sha, os.path.getsize(path))))
            for name, (path, sha) in lfs.items()
        }

    def siblings(self, blobs: bool) -> list[dict[str, Any]]:
        entries: list[dict[str, Any]] = []
        for name in sorted([*self.lfs, *self.small]):
            if not blobs:
                entries.append({"rfilename": name})
            elif name in self.lfs:
                size, sha, blob = self.lfs[name]
                pointer = len(_pointer(sha, size))
                lfs = {"sha256": sha, "size": size, "pointerSize": pointer}
                entries.append({"rfilename": name, "blobId": blob, "size": size, "lfs": lfs})
            else:
                data = self.small[name]
                entries.append({"rfilename": name, "blobId": _git_blob_id(data), "size": len(data)})
        return entries

    def tree(self) -> list[dict[str, Any]]:
        """`list_repo_tree(recursive=True)`: what snapshot_download lists."""
        entries: list[dict[str, Any]] = []
        for entry in self.siblings(blobs=True):
            item = {
                "type": "file",
                "path": entry["rfilename"],
                "size": entry["size"],
                "oid": entry["blobId"],
            }
            if "lfs" in entry:
                lfs = entry["lfs"]
                item["lfs"] = {
                    "oid": lfs["sha256"],
                    "size": lfs["size"],
                    "pointerSize": lfs["pointerSize"],
                }
            entries.append(item)
        return entries


def _handler(repo: _Repo) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            self._answer(body=True)

        def do_HEAD(self) -> None:
            self._answer(body=False)

        def _answer(self, body: bool) -> None:
            parts = urlsplit(self.path)
            segments = [unquote(s) for s in parts.path.split("/") if s]
            if segments[:2] == ["api", "models"] and "tree" in segments:
                self._json(repo.tree(), body)
            elif segments[:2] == ["api", "models"]:
                blobs = "blobs=true" in parts.query.lower()
                doc = {
                    "id": repo.repo,
                    "modelId": repo.repo,
                    "sha": COMMIT,
                    "private": False,
                    "gated": False,
                    "disabled": False,
                    "tags": [],
                    "siblings": repo.siblings(blobs),
                }
                self._json(doc, body)
            elif segments[:2] == ["api", "agent-harnesses"]:
                self._json({"standardEnvVars": [], "harnesses": {}}, body)
            elif len(segments) >= 5 and segments[2] == "resolve":
                self._resolve("/".join(segments[4:]), body)
            else:
                self._send(404, [("X-Error-Code", "EntryNotFound")], b"not found", body)

        def _resolve(self, name: str, body: bool) -> None:
            common = [("X-Repo-Commit", COMMIT), ("Accept-Ranges", "bytes")]
            if name in repo.lfs:
                size, sha, blob = repo.lfs[name]
                location = f"{repo.cdn}/{name}?X-Amz-Expires=3600&X-Amz-Signature={sha[:16]}"
                headers = [
                    *common,
                    ("Location", location),
                    ("ETag", f'"{blob}"'),
                    ("X-Linked-Etag", f'"{sha}"'),
                    ("X-Linked-Size", str(size)),
                ]
                self._send(302, headers, b"", body)
            elif name in repo.small:
                data = repo.small[name]
                headers = [*common, ("ETag", f'"{_git_blob_id(data)}"')]
                self._send(200, headers, data, body)
            else:
                self._send(404, [("X-Error-Code", "EntryNotFound")], b"not found", body)

        def _json(self, doc: object, body: bool) -> None:
            data = json.dumps(doc).encode()
            self._send(200, [("Content-Type", "application/json")], data, body)

        def _send(
            self, status: int, headers: list[tuple[str, str]], data: bytes, body: bool
        ) -> None:
            self.send_response(status)
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if body and data:
                self.wfile.write(data)

    return Handler


class Hub:
    """A started hub; `url` is its HF_ENDPOINT; `close` stops it."""

    def __init__(self, repo: _Repo) -> None:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(repo))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def start_hub(repo: str, lfs: dict[str, tuple[str, str]], small: dict[str, bytes], cdn: str) -> Hub:
    """`lfs`: name -> (path on disk, sha256), served by `cdn` + "/" + name;
    `small`: name -> bytes, served by the hub."""
    return Hub(_Repo(repo, lfs, small, cdn))
