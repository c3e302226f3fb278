"""A fake Hugging Face hub on 127.0.0.1, speaking the wire protocol the real
`huggingface_hub` client and the stager's data path use.

Faking a third party's protocol is fine (ARCHITECTURE "Testing"); this module
answers exactly what `HfApi(endpoint).model_info(repo, revision=...,
files_metadata=True)` asks for and what `/resolve/` downloads expect:

- ``GET /api/models/{org}/{name}[/revision/{rev}]?blobs=True`` -> JSON with
  ``sha`` (the commit the revision points to) and ``siblings`` entries
  ``{rfilename, size, blobId, lfs: {sha256, size, pointerSize}}`` (``lfs``
  only for LFS files; without ``blobs`` only ``rfilename``);
- ``GET|HEAD /{org}/{name}/resolve/{rev}/{path}`` -> for an LFS file a 302
  to the CDN (a separate `Origin`, content-addressed by sha256, with a signed
  looking query string), for a small git file a 200 with the bytes from the
  hub itself (Range supported), both with ``X-Repo-Commit``;
- errors the way huggingface.co sends them, so that `huggingface_hub` raises
  its own classes: ``X-Error-Code: RepoNotFound`` (401 to anonymous callers,
  for a missing repo and for a private one alike: the hub does not reveal
  which; 404 to authenticated ones), ``RevisionNotFound`` (404),
  ``EntryNotFound`` (404), ``GatedRepo`` on the files of a gated repo (401
  to anonymous callers, 403 to authenticated ones without access), and a
  401 with ``X-Error-Message: Invalid credentials in Authorization header``
  for a token the hub does not know. (huggingface_hub's own
  `hf_raise_for_status` documents the 401-for-private-or-missing rule.)

`FakeHub(api=False)` is a mirror that serves only ``/resolve/`` (a static
mirror or a caching proxy): its API route answers a plain 404, without the
``X-Error-Code`` every 404 of the real API carries.

Fault knobs (`HubFault`) make the API or the resolver answer a status (429
with Retry-After, 500, ...) for N requests; `on_api` runs a callback after
the API computed its answer and before it is sent (to move a branch "while"
the client downloads); `requests()` is the log, headers included, so tests
can see where the token went.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import re
import ssl
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import SplitResult, parse_qs, quote, unquote, urlsplit

from tests.harness.loopback import Clients, LoopbackHTTP, Request, TrackedHandler
from tests.harness.origin import Origin, encoded

_RANGE_RE = re.compile(r"\s*bytes\s*=\s*(\d+)\s*-\s*(\d*)\s*", re.ASCII)
# Git files the hub stores without LFS when `lfs=True` (configs, tokenizers' JSON, docs).
_SMALL_SUFFIXES = (".json", ".md", ".txt", ".gitattributes")
INVALID_CREDENTIALS = "Invalid credentials in Authorization header"
_TIMESTAMP = "2026-01-01T00:00:00.000Z"
_HARNESSES = json.dumps({"standardEnvVars": ["AI_AGENT", "AGENT"], "harnesses": {}}).encode()

RequestKind = Literal["api", "resolve", "other"]


def git_blob_id(data: bytes) -> str:
    """The git object id of a blob (what the hub calls ``blobId``)."""
    return hashlib.sha1(b"blob %d\x00" % len(data) + data, usedforsecurity=False).hexdigest()


def lfs_pointer(data: bytes) -> bytes:
    sha = hashlib.sha256(data).hexdigest()
    return (
        f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha}\nsize {len(data)}\n"
    ).encode()


@dataclass(frozen=True)
class HubFile:
    """One file of one commit."""

    path: str
    data: bytes
    lfs: bool

    @property
    def size(self) -> int:
        return len(self.data)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @property
    def blob_id(self) -> str:
        # An LFS file's git blob is its pointer, not its bytes.
        return git_blob_id(lfs_pointer(self.data) if self.lfs else self.data)

    def sibling(self, blobs: bool) -> dict[str, Any]:
        if not blobs:
            return {"rfilename": self.path}
        entry: dict[str, Any] = {"rfilename": self.path, "blobId": self.blob_id, "size": self.size}
        if self.lfs:
            entry["lfs"] = {
                "sha256": self.sha256,
                "size": self.size,
                "pointerSize": len(lfs_pointer(self.data)),
            }
        return entry


@dataclass
class _Repo:
    repo_id: str
    private: bool
    gated: bool
    commits: dict[str, dict[str, HubFile]] = field(default_factory=dict)
    refs: dict[str, str] = field(default_factory=dict)

    def commit_for(self, revision: str) -> str | None:
        if revision in self.refs:
            return self.refs[revision]
        return revision if revision in self.commits else None


@dataclass
class HubFault:
    """Make the API or the resolver answer `status` instead; `times` counts
    matching requests (None: every request)."""

    status: int
    times: int | None = None
    retry_after: str | None = None
    error_code: str | None = None
    error_message: str | None = None
    # Sent instead of the JSON error body (an HTML page, a truncated answer).
    body: bytes | None = None
    # More headers of the answer: the Hub's `RateLimit: "api";r=0;t=55` and
    # `RateLimit-Policy` on a 429 (#22 item 5).
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class HubRequest(Request):
    """One request as the hub saw it (header names lower-cased)."""

    kind: RequestKind

    @property
    def authorization(self) -> str | None:
        return self.headers.get("authorization")


@dataclass
class _Answer:
    status: int
    headers: list[tuple[str, str]]
    body: bytes = b""


def _error(
    status: int, message: str, code: str | None = None, extra: list[tuple[str, str]] | None = None
) -> _Answer:
    headers = [("Content-Type", "application/json; charset=utf-8"), ("X-Error-Message", message)]
    if code is not None:
        headers.append(("X-Error-Code", code))
    headers.extend(extra or [])
    return _Answer(status, headers, json.dumps({"error": message}).encode())


class _State(Clients):
    def __init__(self, cdn: Origin, tokens: frozenset[str] | None, api: bool) -> None:
        super().__init__()
        self.api = api
        self.cdn = cdn
        self.tokens = tokens
        self.repos: dict[str, _Repo] = {}
        self.faults: dict[RequestKind, tuple[HubFault, list[int]]] = {}
        self.log: list[HubRequest] = []
        self.on_api: Callable[[], None] | None = None
        self.encoding: str | None = None

    def take_fault(self, kind: RequestKind) -> HubFault | None:
        with self.lock:
            entry = self.faults.get(kind)
            if entry is None:
                return None
            fault, used = entry
            if fault.times is not None and used[0] >= fault.times:
                return None
            used[0] += 1
            return fault


def _segments(path: str) -> list[str]:
    return [unquote(part) for part in path.split("/") if part]


class _Handler(TrackedHandler):
    _authenticated: bool = False

    def answer(self, method: str) -> None:
        headers = {k.lower(): v for k, v in self.headers.items()}
        kind, answer = self._route(method, headers)
        record = HubRequest(method, self.path, headers, answer.status, kind)
        with self.server.state.lock:
            self.server.state.log.append(record)
        try:
            self._send(method, answer)
        except OSError:
            self.close_connection = True

    def _send(self, method: str, answer: _Answer) -> None:
        self.send_response(answer.status)
        names = {name.lower() for name, _ in answer.headers}
        for name, value in answer.headers:
            self.send_header(name, value)
        if "content-length" not in names:
            self.send_header("Content-Length", str(len(answer.body)))
        self.end_headers()
        if method == "GET" and answer.body:
            self.wfile.write(answer.body)

    # -- routing ----------------------------------------------------------------------

    def _route(self, method: str, headers: dict[str, str]) -> tuple[RequestKind, _Answer]:
        parts = urlsplit(self.path)
        segments = _segments(parts.path)
        if segments == ["api", "agent-harnesses"]:
            # Fetched by huggingface_hub itself (utils/_detect_agent.py) to build its
            # User-Agent; answered like the real hub, logged as "other".
            return "other", _Answer(200, [("Content-Type", "application/json")], _HARNESSES)
        if len(segments) >= 3 and segments[:2] == ["api", "models"]:
            if not self.server.state.api:
                return "api", _Answer(404, [("Content-Type", "text/html")], b"<h1>404</h1>")
            return "api", self._guarded("api", headers, lambda: self._api(segments[2:], parts))
        if len(segments) >= 5 and segments[2] == "resolve":
            return "resolve", self._guarded(
                "resolve", headers, lambda: self._resolve(method, segments, headers)
            )
        return "other", _error(404, "Not Found")

    def _guarded(
        self, kind: RequestKind, headers: dict[str, str], answer: Callable[[], _Answer]
    ) -> _Answer:
        state = self.server.state
        fault = state.take_fault(kind)
        if fault is not None and fault.body is not None:
            return _Answer(fault.status, [("Content-Type", "text/html")], fault.body)
        if fault is not None:
            extra = [] if fault.retry_after is None else [("Retry-After", fault.retry_after)]
            extra.extend(fault.headers)
            return _error(
                fault.status, fault.error_message or "injected fault", fault.error_code, extra
            )
        auth = self._auth(headers.get("authorization"))
        if auth == "invalid":
            return _error(401, INVALID_CREDENTIALS)
        self._authenticated = auth == "valid"
        return answer()

    def _auth(self, value: str | None) -> Literal["anonymous", "valid", "invalid"]:
        if value is None:
            return "anonymous"
        scheme, _, token = value.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return "invalid"
        tokens = self.server.state.tokens
        return "valid" if tokens is None or token.strip() in tokens else "invalid"

    def _lookup(
        self, repo_id: str, revision: str
    ) -> tuple[_Repo, str, dict[str, HubFile]] | _Answer:
        state = self.server.state
        with state.lock:
            repo = state.repos.get(repo_id)
            if repo is None or (repo.private and not self._authenticated):
                # The hub does not reveal whether a private repo exists.
                status = 404 if self._authenticated else 401
                return _error(status, "Repository not found", "RepoNotFound")
            commit = repo.commit_for(revision)
            if commit is None:
                return _error(404, f"Invalid rev id: {revision}", "RevisionNotFound")
            return repo, commit, dict(repo.commits[commit])

    def _api(self, rest: list[str], parts: SplitResult) -> _Answer:
        if len(rest) >= 4 and rest[2] == "tree":
            return self._tree(rest)
        if len(rest) == 2:
            revision = "main"
        elif len(rest) == 4 and rest[2] == "revision":
            revision = rest[3]
        else:
            return _error(404, "Not Found")
        found = self._lookup(f"{rest[0]}/{rest[1]}", revision)
        if isinstance(found, _Answer):
            return found
        repo, commit, files = found
        blobs = parse_qs(parts.query).get("blobs", [""])[0].lower() == "true"
        doc = {
            "_id": hashlib.sha1(repo.repo_id.encode(), usedforsecurity=False).hexdigest()[:24],
            "id": repo.repo_id,
            "modelId": repo.repo_id,
            "author": repo.repo_id.split("/")[0],
            "sha": commit,
            "lastModified": _TIMESTAMP,
            "createdAt": _TIMESTAMP,
            "private": repo.private,
            "gated": "manual" if repo.gated else False,
            "disabled": False,
            "downloads": 0,
            "likes": 0,
            "tags": [],
            "siblings": [files[p].sibling(blobs) for p in sorted(files)],
            "usedStorage": sum(f.size for f in files.values()),
        }
        hook = self.server.state.on_api
        if hook is not None:
            hook()
        body = json.dumps(doc).encode()
        return _Answer(200, [("Content-Type", "application/json; charset=utf-8")], body)

    def _tree(self, rest: list[str]) -> _Answer:
        """`list_repo_tree(recursive=True)`, which KServe's snapshot_download
        lists a revision with (the differential test, #31 item 4): every
        file of the commit, one page."""
        found = self._lookup(f"{rest[0]}/{rest[1]}", rest[3])
        if isinstance(found, _Answer):
            return found
        _, _, files = found
        entries = []
        for path in sorted(files):
            hub_file = files[path]
            item: dict[str, Any] = {
                "type": "file",
                "path": path,
                "size": hub_file.size,
                "oid": hub_file.blob_id,
            }
            if hub_file.lfs:
                item["lfs"] = {
                    "oid": hub_file.sha256,
                    "size": hub_file.size,
                    "pointerSize": len(lfs_pointer(hub_file.data)),
                }
            entries.append(item)
        body = json.dumps(entries).encode()
        return _Answer(200, [("Content-Type", "application/json; charset=utf-8")], body)

    def _resolve(self, method: str, segments: list[str], headers: dict[str, str]) -> _Answer:
        repo_id, revision, path = (
            f"{segments[0]}/{segments[1]}",
            segments[3],
            "/".join(segments[4:]),
        )
        found = self._lookup(repo_id, revision)
        if isinstance(found, _Answer):
            return found
        repo, commit, files = found
        hub_file = files.get(path)
        if hub_file is None:
            return _error(404, "Entry not found", "EntryNotFound")
        if repo.gated:
            status = 403 if self._authenticated else 401
            return _error(status, f"Access to model {repo_id} is restricted.", "GatedRepo")
        common = [("X-Repo-Commit", commit), ("Accept-Ranges", "bytes")]
        if hub_file.lfs:
            location = self.server.state.cdn.url + _signed(cdn_path(hub_file.sha256))
            common += [
                ("Location", location),
                ("ETag", f'"{hub_file.blob_id}"'),
                ("X-Linked-Etag", f'"{hub_file.sha256}"'),
                ("X-Linked-Size", str(hub_file.size)),
                ("Content-Type", "text/plain; charset=utf-8"),
            ]
            return _Answer(302, common, f"Found. Redirecting to {location}".encode())
        common += [("ETag", f'"{hub_file.blob_id}"'), ("Content-Type", "application/octet-stream")]
        coding = self.server.state.encoding
        if coding is not None:
            # A mirror (or a proxy in front of it) that compresses (#22 item 1).
            common.append(("Content-Encoding", coding))
            return _ranged(encoded(hub_file.data, coding), headers.get("range"), common)
        return _ranged(hub_file.data, headers.get("range"), common)


def _ranged(data: bytes, range_header: str | None, headers: list[tuple[str, str]]) -> _Answer:
    match = _RANGE_RE.fullmatch(range_header) if range_header else None
    if match is None:
        return _Answer(200, headers, data)
    first = int(match.group(1))
    last = int(match.group(2)) if match.group(2) else len(data) - 1
    if first >= len(data):
        return _Answer(416, [*headers, ("Content-Range", f"bytes */{len(data)}")])
    last = min(last, len(data) - 1)
    span = [("Content-Range", f"bytes {first}-{last}/{len(data)}")]
    return _Answer(206, headers + span, data[first : last + 1])


def cdn_path(sha256: str) -> str:
    """Where the CDN keeps an LFS object: content-addressed, like the real one."""
    return f"/lfs/{sha256}"


def _signed(path: str) -> str:
    # Presigned-looking query: the stager must neither log it nor need it.
    signature = hashlib.sha256(path.encode()).hexdigest()
    return f"{path}?X-Amz-Expires=3600&X-Amz-Signature={signature}"


class FakeHub(LoopbackHTTP):
    """Threaded fake hub on 127.0.0.1; LFS bytes are served by `cdn`."""

    _name = "fakehub"
    _state: _State

    def __init__(
        self,
        cdn: Origin,
        *,
        tls: ssl.SSLContext | None = None,
        tokens: Collection[str] | None = None,
        api: bool = True,
    ) -> None:
        """`tokens`: the bearer tokens the hub accepts (None: any token);
        `api=False`: a mirror that serves /resolve/ only."""
        state = _State(cdn, frozenset(tokens) if tokens is not None else None, api)
        super().__init__(state, _Handler, tls=tls)
        self._commit_ids = itertools.count(1)

    @property
    def cdn(self) -> Origin:
        return self._state.cdn

    # -- repositories ---------------------------------------------------------------------

    def add_repo(
        self,
        repo: str,
        files: Mapping[str, bytes],
        revision: str = "main",
        commit: str | None = None,
        lfs: bool | Collection[str] = True,
        *,
        private: bool = False,
        gated: bool = False,
    ) -> str:
        """Create `repo` with one commit holding `files`; `revision` points to
        it. `lfs`: True stores every file but small text/JSON ones in LFS, a
        collection names the LFS paths exactly. Returns the commit sha."""
        if repo.count("/") != 1:
            raise ValueError(f"repo must be org/name, got {repo!r}")
        with self._state.lock:
            self._state.repos[repo] = _Repo(repo, private, gated)
        return self.move_branch(repo, revision, files, commit=commit, lfs=lfs)

    def move_branch(
        self,
        repo: str,
        revision: str,
        files: Mapping[str, bytes],
        commit: str | None = None,
        lfs: bool | Collection[str] = True,
    ) -> str:
        """A new commit holding exactly `files`; `revision` now points to it.
        Older commits stay resolvable by their sha (content is immutable)."""
        sha = commit or self._new_commit(repo)
        if not re.fullmatch(r"[0-9a-f]{40}", sha):
            raise ValueError(f"commit must be 40 lowercase hex digits, got {sha!r}")
        snapshot = {
            path: HubFile(path, bytes(data), _is_lfs(path, lfs)) for path, data in files.items()
        }
        for hub_file in snapshot.values():
            if hub_file.lfs:
                self._state.cdn.put(cdn_path(hub_file.sha256), hub_file.data)
        with self._state.lock:
            entry = self._state.repos[repo]
            entry.commits[sha] = snapshot
            entry.refs[revision] = sha
        return sha

    def commit_of(self, repo: str, revision: str = "main") -> str:
        with self._state.lock:
            sha = self._state.repos[repo].commit_for(revision)
        if sha is None:
            raise KeyError(f"{repo}@{revision}")
        return sha

    def file(self, repo: str, path: str, revision: str = "main") -> HubFile:
        sha = self.commit_of(repo, revision)
        with self._state.lock:
            return self._state.repos[repo].commits[sha][path]

    def corrupt(self, repo: str, path: str, revision: str = "main") -> None:
        """Make the CDN serve different bytes of the same size for an LFS file."""
        hub_file = self.file(repo, path, revision)
        if not hub_file.lfs:
            raise ValueError(f"{path} is not an LFS file; the hub itself serves it")
        if not hub_file.data:
            raise ValueError(f"{path} is empty")
        bad = bytearray(hub_file.data)
        bad[len(bad) // 2] ^= 0xFF
        self._state.cdn.put(cdn_path(hub_file.sha256), bytes(bad))

    def cdn_path_of(self, repo: str, path: str, revision: str = "main") -> str:
        return cdn_path(self.file(repo, path, revision).sha256)

    def _new_commit(self, repo: str) -> str:
        seed = f"{repo}:{next(self._commit_ids)}:{id(self)}".encode()
        return hashlib.sha1(seed, usedforsecurity=False).hexdigest()

    # -- faults and hooks -------------------------------------------------------------------

    def set_fault(self, kind: Literal["api", "resolve"], fault: HubFault | None) -> None:
        """Install (or clear) the fault of the API or the resolver; resets its count."""
        with self._state.lock:
            if fault is None:
                self._state.faults.pop(kind, None)
            else:
                self._state.faults[kind] = (fault, [0])

    def set_encoding(self, coding: str | None) -> None:
        """Serve the files the hub answers itself (not the CDN's) with this
        Content-Encoding, encoded; None: identity again."""
        with self._state.lock:
            self._state.encoding = coding

    def on_api(self, hook: Callable[[], None] | None) -> None:
        """Run `hook` after each model-info answer is computed, before it is sent."""
        with self._state.lock:
            self._state.on_api = hook

    # -- the log ------------------------------------------------------------------------------

    def requests(self, kind: RequestKind | None = None) -> list[HubRequest]:
        with self._state.lock:
            log = list(self._state.log)
        return [r for r in log if kind is None or r.kind == kind]

    def clear_log(self) -> None:
        with self._state.lock:
            self._state.log.clear()

    def resolve_url(self, repo: str, revision: str, path: str) -> str:
        return f"{self.url}/{repo}/resolve/{quote(revision, safe='')}/{quote(path)}"


def _is_lfs(path: str, lfs: bool | Collection[str]) -> bool:
    if isinstance(lfs, bool):
        return lfs and not path.lower().endswith(_SMALL_SUFFIXES)
    return path in lfs


@contextlib.contextmanager
def fake_hub(
    *, tls: ssl.SSLContext | None = None, tokens: Collection[str] | None = None
) -> Iterator[FakeHub]:
    """A started hub with its own (plain HTTP) CDN origin; both closed on exit."""
    with Origin() as cdn, FakeHub(cdn, tls=tls, tokens=tokens) as hub:
        yield hub
