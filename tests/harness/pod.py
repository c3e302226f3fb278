"""One way to run the stager in tests: a pod-like sandbox and one result type.

`Pod` holds what an init container gets: a cache volume under one tmp
directory, a termination-log path and the environment the operator sets. It
runs the CLI as a subprocess, `python -m llmkube_stager <args>` (`run`, or
`popen` + `finish` to signal it midway), or the stage pipeline in-process
(`stage`) when a test needs to record the retry waits, swap the filesystem
probe, act at a chosen log line or read the `Outcome`. Both give a `Run`.

A subprocess run has a deadline (a run past it is a hang and fails the
test), no standard input unless given, and may run under a wrapper command
(`as_user(uid)`: setpriv to another uid; `unshare ...`), another interpreter
(`python=`: a scratch venv), in another working directory (`cwd=`), or under
an audit hook that records every write-like file operation the CLI attempts
(`audit=True`, tests/harness/audit.py; the attempts are `Run.writes`).

The child gets a minimal environment (PATH, HOME, LANG and what the test
sets), never the developer's os.environ, so no stray credential, CA directory
or host-model mount can make a test pass or leak.
"""

from __future__ import annotations

import io
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from llmkube_stager.cache.fs import probe_fs
from llmkube_stager.config import load_config
from llmkube_stager.errors import StagerError
from llmkube_stager.logs import Log, Redactor, display_url
from llmkube_stager.model import Decision, FsInfo, Outcome
from llmkube_stager.staging import Effects, run_stage
from llmkube_stager.termination import (
    encode,
    failure_doc,
    failure_message,
    log_staged,
    success_doc,
)
from tests.harness.audit import AUDITED_CLI, parse_network, parse_writes
from tests.harness.contract import exit_code_of
from tests.harness.schema import checked_termination, validate_termination

# The checkout the tests belong to: the child runs with it as its working
# directory, so `python -m llmkube_stager` imports this tree's package.
ROOT = Path(__file__).resolve().parents[2]

MAX_TERMINATION_BYTES = 4096
# Fail fast, never hang a test; a test or a directory (fixture `pod_budget`)
# sets others.
SHORT_BUDGET = {
    "LLMKUBE_CONNECT_TIMEOUT": "1",
    "LLMKUBE_STALL_TIMEOUT": "1",
    "LLMKUBE_RETRIES": "1",
    "LLMKUBE_MAX_RETRY_WAIT": "1",
}
# The source tests' budget: two retries, waits capped at 5 s (the hub's and
# S3's retry paths need both).
SOURCE_BUDGET = {
    "LLMKUBE_CONNECT_TIMEOUT": "2",
    "LLMKUBE_STALL_TIMEOUT": "2",
    "LLMKUBE_RETRIES": "2",
    "LLMKUBE_MAX_RETRY_WAIT": "5",
}
ON_CHANGE = {"LLMKUBE_REFRESH_POLICY": "OnChange"}
DEFAULT_KEY = "0123456789abcdef"
NOBODY = 65534
# The commands that report through the termination message (cli.py).
TERMINATING = ("stage", "verify")
# How much of a run's output its failure report shows (the end matters).
_SHOWN_CHARS = 8000
_TERM_IDS = itertools.count(2)


def as_fuse(path: str) -> FsInfo:
    """The real filesystem probe, reporting FUSE (bindfs): a node of a shared
    FUSE volume, for `Pod.stage(fs=as_fuse)`."""
    return replace(probe_fs(path), is_fuse=True, fstype="fuse.bindfs", driver="bindfs")


def as_user(uid: int) -> list[str]:
    """A wrapper that runs the command as `uid` (group too, no extra groups):
    for root, a mode-000 file is readable and every directory writable."""
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]


def single_env(source: str, cache_dir: Path, name: str = "model.gguf") -> dict[str, str]:
    """The variables of a single-file model cached at `cache_dir/name`."""
    return {
        "MODEL_SOURCE": source,
        "CACHE_DIR": str(cache_dir),
        "MODEL_PATH": str(cache_dir / name),
    }


# Timeouts of seconds and one connection: a test's origin answers at once or
# is meant to fail, and a failure should not wait for production timeouts.
IMPATIENT = {
    "LLMKUBE_CONNECT_TIMEOUT": "2",
    "LLMKUBE_STALL_TIMEOUT": "2",
    "LLMKUBE_CONNECTIONS": "1",
}


def multi_env(source: str, cache_dir: Path, files: Iterable[str]) -> dict[str, str]:
    """The variables of a multi-file model (MODEL_FILES) cached in `cache_dir`."""
    return {"MODEL_SOURCE": source, "CACHE_DIR": str(cache_dir), "MODEL_FILES": "\n".join(files)}


def import_lines(stderr: str) -> set[str]:
    """Module names from `python -X importtime` output (`python_flags=("-X",
    "importtime")`): what a run imported."""
    mods = set()
    for line in stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            if name != "imported package":
                mods.add(name)
    return mods


def wait_for(
    predicate: Callable[[], bool], timeout: float, what: str, proc: subprocess.Popen[str]
) -> None:
    """Wait until `predicate()` holds while the `popen`ed `proc` runs; an
    early exit or the timeout (which kills it) fails the test."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc.poll() is not None:
            raise AssertionError(f"the stager exited early ({proc.returncode}) waiting for {what}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


@dataclass
class Run:
    """One finished run. In-process runs carry the CLI's log as `stderr`, a
    termination message built as the CLI builds it, and `outcome`/`error`/
    `sleeps` besides."""

    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    term_raw: bytes | None
    seconds: float = 0.0
    sleeps: list[float] = field(default_factory=list)
    outcome: Outcome | None = None
    error: StagerError | None = None
    # (event, path) of each write-like attempt, with `audit=True`.
    writes: list[tuple[str, str]] = field(default_factory=list)
    # (event, "host:port") of each name lookup and connect, with `audit=True`.
    network: list[tuple[str, str]] = field(default_factory=list)

    # -- the termination message -------------------------------------------------------

    @property
    def term(self) -> dict[str, Any]:
        assert self.term_raw, f"no termination message was written\n{self}"
        doc = validate_termination(self.term_raw)
        assert isinstance(doc, dict), doc
        return doc

    @property
    def reason(self) -> str | None:
        if self.error is not None:
            return self.error.reason.value
        return None if not self.term_raw else self.term["reason"]

    @property
    def detail(self) -> str:
        if self.error is not None:
            return self.error.detail
        return str(self.term.get("detail", "")) if self.term_raw else ""

    @property
    def stats(self) -> tuple[int, int, int, int]:
        """(files, fetched, reused, kept) of a successful run."""
        assert self.term_raw and self.term["outcome"] == "succeeded", str(self)
        s = self.term["stats"]
        return s["files"], s["fetched"], s["reused"], s["kept"]

    def count(self, *decisions: Decision) -> int:
        """How many files got one of `decisions` (in-process runs)."""
        assert self.outcome is not None, f"no outcome (a failed or subprocess run)\n{self}"
        return self.outcome.count(*decisions)

    # -- the log ---------------------------------------------------------------------

    @property
    def lines(self) -> list[str]:
        return self.stderr.splitlines()

    @property
    def warnings(self) -> list[str]:
        return [line for line in self.lines if line.startswith("WARNING: ")]

    def has_line(self, text: str) -> bool:
        return any(text in line for line in self.lines)

    def line_with(self, text: str) -> str:
        found = [line for line in self.lines if text in line]
        assert found, f"no log line contains {text!r}\n{self}"
        return found[0]

    @property
    def outputs(self) -> str:
        """Everything the run showed: stdout, stderr and the termination message."""
        term = (self.term_raw or b"").decode("utf-8", "replace")
        return "\n".join((self.stdout, self.stderr, term))

    # -- verdicts ----------------------------------------------------------------------

    def compact_term(self) -> dict[str, Any]:
        """CONTRACT §5: one compact JSON object of at most 4096 bytes with the
        four mandatory keys."""
        raw = self.term_raw
        assert raw is not None, f"no termination message\n{self}"
        assert len(raw) <= MAX_TERMINATION_BYTES, len(raw)
        doc = self.term
        compact = json.dumps(doc, separators=(",", ":")).encode()
        assert raw.rstrip(b"\n") == compact, f"termination message is not compact JSON: {raw!r}"
        for key in ("v", "outcome", "reason", "retryable"):
            assert key in doc, f"termination message lacks {key!r}: {doc}"
        assert doc["v"] == 1
        assert isinstance(doc["retryable"], bool)
        return doc

    @property
    def terminating(self) -> bool:
        """A command that writes a termination message (stage, verify)."""
        return (self.args or ("stage",))[0] in TERMINATING

    def ended_with_a_reason(self) -> Run:
        """No hang (the runner enforces the deadline), no traceback, no
        exit 3, and for stage/verify a termination message naming a reason."""
        assert self.returncode in (0, 1, 2, 4), str(self)
        assert "Traceback" not in self.stderr, str(self)
        if self.terminating:
            assert self.term["reason"], str(self)
        return self

    def ok(
        self,
        *,
        files: int | None = None,
        fetched: int | None = None,
        reused: int = 0,
        kept: int = 0,
        nbytes: int | None = None,
    ) -> Run:
        """Exit 0, no traceback, and for stage/verify a success message; with
        `files`, the stats too."""
        assert self.returncode == 0, str(self)
        assert "Traceback" not in self.stderr, str(self)
        if not self.terminating:
            return self
        doc = self.compact_term()
        assert doc["outcome"] == "succeeded", doc
        assert doc["reason"] == "ModelTransferSucceeded", doc
        assert doc["retryable"] is False, doc
        assert "Traceback" not in self.stderr, str(self)
        if files is not None:
            stats = doc["stats"]
            for key in ("files", "fetched", "reused", "kept", "bytes", "seconds"):
                assert key in stats, f"stats lacks {key!r}: {stats}"
            assert self.stats == (files, fetched, reused, kept), stats
            if nbytes is not None:
                assert stats["bytes"] == nbytes, stats
            assert isinstance(stats["seconds"], int | float) and stats["seconds"] >= 0, stats
        return self

    def failed(
        self,
        reason: str | None = None,
        *,
        exit_code: int | None = None,
        retryable: bool | None = None,
        log_line: bool = True,
    ) -> Run:
        """The failure message's shape (CONTRACT §5): `message` starts
        `ERROR: <Reason>:` and ends with `remedy`; with `log_line`, the log
        carries the same line. The exit code is the contract's for the reason
        (tests/harness/contract.py) unless `exit_code` is given."""
        doc = self.compact_term()
        expected = exit_code_of(reason or doc["reason"]) if exit_code is None else exit_code
        if exit_code is None and expected in (1, 4):
            # The exit code follows the message's own retryable verdict
            # (an origin-digest mismatch is retryable, #12 item 5).
            expected = 1 if doc["retryable"] else 4
        assert self.returncode == expected, str(self)
        assert doc["outcome"] == "failed", doc
        if reason is not None:
            assert doc["reason"] == reason, doc
        if retryable is not None:
            assert doc["retryable"] is retryable, doc
        message, remedy = doc["message"], doc["remedy"]
        assert message.startswith(f"ERROR: {doc['reason']}:"), message
        assert remedy, doc
        assert message.endswith(remedy), (message, remedy)
        if log_line:
            assert message in self.stderr, f"the log does not carry the failure line\n{self}"
        assert "Traceback" not in self.stderr, str(self)
        return self

    def __str__(self) -> str:
        error = "" if self.error is None else f"\n--- error ---\n{self.reason}: {self.detail}"
        writes = "" if not self.writes else f"\n--- write attempts ---\n{self.writes}"
        return (
            f"args={self.args} rc={self.returncode} seconds={self.seconds:.2f}"
            f"\n--- stdout ---\n{_tail(self.stdout)}\n--- stderr ---\n{_tail(self.stderr)}"
            f"\n--- termination ---\n{self.term_raw!r}{error}{writes}"
        )


def _tail(text: str) -> str:
    if len(text) <= _SHOWN_CHARS:
        return text
    return f"[{len(text) - _SHOWN_CHARS} characters before]...{text[-_SHOWN_CHARS:]}"


class _HookedStream(io.StringIO):
    """The log stream of an in-process run, calling `hook` on every write."""

    def __init__(self, hook: Callable[[str], None]) -> None:
        super().__init__()
        self._hook = hook

    def write(self, text: str) -> int:
        n = super().write(text)
        self._hook(text)
        return n


@dataclass
class _Started:
    """A `popen`ed run: what `finish` needs to make its `Run`."""

    args: tuple[str, ...]
    when: float
    audit: Any = None  # the audit hook's file (a TemporaryFile), with audit=True


class Pod:
    """A pod-like sandbox under one tmp directory.

    `env` is what every run gets; a run's `env` mapping and keyword
    overrides go on top (None removes a variable). `single`/`multi` point
    the pod at a model; `single_env`/`multi_env` return such an environment
    without changing the pod's. Several pods may share one tmp directory
    (two containers, two nodes): each has its own termination log.

    `wrapper`, `python` and `cwd` apply to every subprocess run (a run's
    own arguments take precedence); `term_path` places the termination log
    elsewhere (a directory another uid may write).
    """

    _claimed: ClassVar[set[Path]] = set()  # termination-log paths handed out

    def __init__(
        self,
        tmp: Path,
        env: Mapping[str, str] | None = None,
        *,
        stager: bool = False,
        budget: Mapping[str, str] = SHORT_BUDGET,
        wrapper: Sequence[str] = (),
        python: str = sys.executable,
        cwd: Path = ROOT,
        term_path: Path | None = None,
    ) -> None:
        self.tmp = tmp
        self.budget = dict(budget)
        self.wrapper = list(wrapper)
        self.python = python
        self.cwd = cwd
        self.models = tmp / "models"  # the cache volume; not created until staging
        self.cache_dir = self.models / DEFAULT_KEY
        self.term_path = self._claim(term_path or tmp / "termination-log")
        (tmp / "home").mkdir(parents=True, exist_ok=True)
        # An empty CA directory: one set but missing is warned about (#46 item 4).
        (tmp / "no-custom-certs").mkdir(exist_ok=True)
        self.env: dict[str, str] = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(tmp / "home"),
            "LANG": "C.UTF-8",
            "LLMKUBE_TERMINATION_LOG": str(self.term_path),
            # The defaults (/custom-certs, /host-model/model.gguf) point at
            # nothing (an empty directory, no file), whatever this machine has there.
            "LLMKUBE_CA_DIR": str(tmp / "no-custom-certs"),
            "LLMKUBE_HOST_MODEL": str(tmp / "no-host-model" / "model.gguf"),
            **budget,
            **(env or {}),
        }
        if cwd != ROOT:
            # The package of this checkout, whatever the working directory;
            # the interpreter's own bytecode cache is not the agent's doing.
            self.env.update(PYTHONPATH=str(ROOT), PYTHONDONTWRITEBYTECODE="1")
        if stager:
            self.env["LLMKUBE_PREFETCH_STAGER"] = "true"
        self._started: dict[int, _Started] = {}

    @classmethod
    def _claim(cls, path: Path) -> Path:
        if path in cls._claimed:
            path = path.with_name(f"{path.name}-{next(_TERM_IDS)}")
        cls._claimed.add(path)
        return path

    # -- environments ------------------------------------------------------------------

    def single(self, source: str, name: str = "model.gguf", key: str = "k1") -> Path:
        """Point the pod at a single-file model; returns MODEL_PATH."""
        self.env.pop("MODEL_FILES", None)
        self.env.update(single_env(source, self.models / key, name))
        return self.models / key / name

    def multi(self, source: str, files: Iterable[str], key: str = "k2") -> Path:
        """Point the pod at a multi-file model; returns CACHE_DIR."""
        self.env.pop("MODEL_PATH", None)
        self.env.update(multi_env(source, self.models / key, files))
        return self.models / key

    def single_env(self, source: str, name: str = "model.gguf", **extra: str) -> dict[str, str]:
        """The pod's environment with a single-file model in `cache_dir`."""
        return {**self.env, **single_env(source, self.cache_dir, name), **extra}

    def multi_env(self, source: str, files: Iterable[str], **extra: str) -> dict[str, str]:
        """The pod's environment with a multi-file model in `cache_dir`."""
        return {**self.env, **multi_env(source, self.cache_dir, files), **extra}

    def dest(self, rel: str = "model.gguf") -> Path:
        return self.cache_dir / rel

    def environ(
        self,
        env: Mapping[str, str | None] | None = None,
        overrides: Mapping[str, str | None] | None = None,
    ) -> dict[str, str]:
        """The pod's environment with `env` and `overrides` on top; None
        removes a variable."""
        merged: dict[str, str | None] = {**self.env, **(env or {}), **(overrides or {})}
        return {k: v for k, v in merged.items() if v is not None}

    # -- the CLI as a subprocess -------------------------------------------------------

    def run(
        self,
        *args: str,
        env: Mapping[str, str | None] | None = None,
        python_flags: Iterable[str] = (),
        fresh_term: bool = True,
        stdin: str | None = None,
        timeout: float = 60,
        wrapper: Sequence[str] | None = None,
        python: str | None = None,
        audit: bool = False,
        **overrides: str | None,
    ) -> Run:
        """Run the CLI (default: `stage`) to completion, `stdin` its input;
        `wrapper` runs it (e.g. `unshare ...`), `python` is its interpreter.
        With `fresh_term` the termination file is removed first, so a run
        that writes nothing cannot pass on a previous run's message. A run
        still going after `timeout` seconds is a hang: it is killed and the
        test fails."""
        proc = self.popen(
            *args,
            env=env,
            python_flags=python_flags,
            fresh_term=fresh_term,
            stdin=stdin,
            wrapper=wrapper,
            python=python,
            audit=audit,
            **overrides,
        )
        return self.finish(proc, timeout, stdin=stdin)

    def popen(
        self,
        *args: str,
        env: Mapping[str, str | None] | None = None,
        python_flags: Iterable[str] = (),
        fresh_term: bool = True,
        stdin: str | None = None,
        wrapper: Sequence[str] | None = None,
        python: str | None = None,
        audit: bool = False,
        **overrides: str | None,
    ) -> subprocess.Popen[str]:
        """Start the CLI (default: `stage`); `finish` waits for it."""
        if fresh_term:
            self.term_path.unlink(missing_ok=True)
        environ = self.environ(env, overrides)
        command = [python or self.python, *python_flags]
        record = None
        if audit:
            # Anonymous, closed by `finish`; a file, not a pipe, so the hook never blocks.
            record = tempfile.TemporaryFile()  # noqa: SIM115
            environ["AUDIT_FD"] = str(record.fileno())
            command += ["-c", AUDITED_CLI]
        else:
            command += ["-m", "llmkube_stager"]
        proc = subprocess.Popen(
            [*(self.wrapper if wrapper is None else wrapper), *command, *(args or ("stage",))],
            env=environ,
            cwd=self.cwd,
            stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            pass_fds=() if record is None else (record.fileno(),),
        )
        self._started[proc.pid] = _Started(tuple(args), time.monotonic(), record)
        return proc

    def finish(
        self, proc: subprocess.Popen[str], timeout: float = 60, *, stdin: str | None = None
    ) -> Run:
        """Wait for a `popen`ed run (also one that was signalled)."""
        started = self._started.pop(proc.pid)
        try:
            out, err = proc.communicate(stdin, timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            raise AssertionError(
                f"{started.args or ('stage',)} did not end within {timeout:g}s (a hang)\n"
                + _tail(err)
            ) from None
        raw = b""
        if started.audit is not None:
            with started.audit as record:
                record.seek(0)
                raw = record.read()
        run = self._finished(started, proc.returncode, out, err, parse_writes(raw))
        run.network = parse_network(raw)
        return run

    def read_term(self) -> bytes | None:
        try:
            return checked_termination(self.term_path.read_bytes())
        except FileNotFoundError:
            return None

    def _finished(
        self, started: _Started, rc: int, out: str, err: str, writes: list[tuple[str, str]]
    ) -> Run:
        if rc < 0 and self.term_path.exists() and self.term_path.stat().st_size == 0:
            # Killed between the termination log's truncate and its write.
            self.term_path.unlink()
        run = Run(
            started.args, rc, out, err, self.read_term(), time.monotonic() - started.when,
            writes=writes,
        )  # fmt: skip
        if started.args in ((), ("stage",)):
            assert out == "", f"stage wrote to stdout\n{run}"
        return run

    # -- the stage pipeline in-process ---------------------------------------------------

    def stage(
        self,
        env: Mapping[str, str | None] | None = None,
        *,
        fs: Callable[[str], FsInfo] | None = None,
        redactor: Redactor | None = None,
        on_sleep: Callable[[int], None] | None = None,
        on_line: Callable[[str], None] | None = None,
        max_sleeps: int = 50,
        **overrides: str | None,
    ) -> Run:
        """`run_stage` as `stage` runs it, with a recording sleep that returns
        at once. `fs` replaces the filesystem probe; `redactor` the one built
        from the config's secrets. `on_sleep(n)` runs at the n-th retry wait,
        between two attempts (e.g. to change the upstream); more than
        `max_sleeps` waits is an unbounded retry loop and fails the test.
        `on_line(text)` runs on every write to the log, so a test can act at
        a chosen moment of the run (what it raises ends the run there)."""
        environ = self.environ(env, overrides)
        stream = io.StringIO() if on_line is None else _HookedStream(on_line)
        sleeps: list[float] = []

        def sleep(seconds: float) -> None:
            sleeps.append(seconds)
            assert len(sleeps) <= max_sleeps, (
                f"more than {max_sleeps} retry waits: the retries are unbounded\n"
                + stream.getvalue()[-2000:]
            )
            if on_sleep is not None:
                on_sleep(len(sleeps))

        started = time.monotonic()
        redact = redactor or Redactor()
        log = Log(stream, "text", redact)
        try:
            config = load_config(environ, {})
            redact = redactor or Redactor(config.secrets.values())
            log = Log(stream, "text", redact)
            effects = Effects(log=log, probe_fs=fs or probe_fs, sleep=sleep)
            prepared, outcome = run_stage(config, effects)
        except StagerError as err:
            log.error("failed", failure_message(err, redact), reason=err.reason.value)
            source = display_url(environ.get("MODEL_SOURCE", ""))
            term = checked_termination(encode(failure_doc(err, source, redact)))
            return Run(
                ("stage",), err.exit_code, "", stream.getvalue(), term,
                time.monotonic() - started, sleeps, error=err,
            )  # fmt: skip
        doc = success_doc(outcome, prepared.manifest.display_source)
        log_staged(log, doc, outcome)
        return Run(
            ("stage",), 0, "", stream.getvalue(), checked_termination(encode(doc)),
            time.monotonic() - started, sleeps, outcome=outcome,
        )  # fmt: skip
