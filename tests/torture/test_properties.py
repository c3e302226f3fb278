"""Property tests (#11, hypothesis): configuration parsing, path validation,
the termination encoder and the planner, over inputs nobody would write by
hand. In-process and pure: this is also where the 1 MB environment values
go (exec caps one environment string at 128 KiB).
"""

from __future__ import annotations

import contextlib
import json
import posixpath
import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmkube_stager.config import VARS, load_config, secret_values
from llmkube_stager.errors import (
    CacheError,
    ConfigError,
    InvalidFileSet,
    Reason,
    SourceError,
    StagerError,
    TransferError,
)
from llmkube_stager.layout import (
    NAME_MAX_BYTES,
    PATH_MAX_BYTES,
    parse_file_list,
    suffix_room_bytes,
)
from llmkube_stager.logs import Redactor
from llmkube_stager.model import Decision, FsInfo, LocalFile, LocalState, PinState
from llmkube_stager.termination import MAX_BYTES, encode, failure_doc
from tests.harness.plan_inputs import plan_of

pytestmark = pytest.mark.torture

CANARY = "cAnArY" + "7Qx9" * 8
SECRET_VARS = ("HF_TOKEN", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
NAMES = [v.env for v in VARS]
_USUAL = st.sampled_from(
    [
        "",
        " ",
        "0",
        "-1",
        "1e999",
        "nan",
        "true",
        "OnChange",
        "json",
        "/models/k",
        "a.gguf",
        "..",
        "http://127.0.0.1:9/m",
        "http://u:p@h:1",
        "ftp://x",
        "\x00",
        "\n",
        "10.0.0.0/99",
        "*",
    ]
)
_VALUE = st.one_of(_USUAL, st.text(max_size=300), st.text(string.printable, max_size=40))
PROFILE = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _base_env() -> dict[str, str]:
    return {
        "MODEL_SOURCE": "http://127.0.0.1:9/m",
        "CACHE_DIR": "/models/k",
        "MODEL_FILES": "a.gguf",
    }


# -- configuration -----------------------------------------------------------------------------


@PROFILE
@given(st.dictionaries(st.sampled_from(NAMES), _VALUE, max_size=8))
def test_config_parsing_ends_in_a_config_or_a_usage_error(overrides: dict[str, str]) -> None:
    env = {**_base_env(), **overrides}
    try:
        config = load_config(env, {})
    except (ConfigError, InvalidFileSet) as err:
        assert err.exit_code == 2 and not err.retryable
        assert len(err.detail) < 2048, "a value was echoed whole"
        return
    assert config.cache_dir.startswith("/") or not config.cache_dir
    for rel in config.model_files:
        assert ".." not in rel.split("/")


@PROFILE
@given(st.sampled_from(SECRET_VARS), _VALUE, st.sampled_from(NAMES), _VALUE)
def test_a_configuration_error_never_shows_a_secret(
    secret_var: str, _noise: str, broken_var: str, broken: str
) -> None:
    env = {**_base_env(), secret_var: CANARY, broken_var: broken + CANARY}
    if broken_var in SECRET_VARS:
        env[broken_var] = CANARY
    try:
        load_config(env, {})
    except StagerError as err:
        redact = Redactor(secret_values(env, {}))
        doc = encode(failure_doc(err, "", redact))
        assert CANARY not in doc.decode()


@pytest.mark.parametrize("var", NAMES)
def test_a_1_mb_value_is_parsed_or_refused_without_echoing_it(var: str) -> None:
    env = {**_base_env(), var: "a" * (1 << 20)}
    if var == "MODEL_FILES":
        env[var] = "\n".join(f"f{i}.bin" for i in range(1 << 17))  # ~1 MB, 131072 names
    try:
        load_config(env, {})
    except StagerError as err:
        assert err.exit_code == 2
        assert len(err.detail) < 2048, err.detail[:300]


def test_a_1_mb_file_list_is_validated_quickly() -> None:
    names = "\n".join(f"dir{i % 100}/f{i}.bin" for i in range(1 << 16))
    assert len(parse_file_list(names)) == 1 << 16


# -- path validation ---------------------------------------------------------------------------

_PART = st.one_of(
    st.sampled_from(["..", ".", "", "a", "x.sha256", ".llmkube.lock", "a.llmkube-size", "é" * 120]),
    st.text(min_size=1, max_size=30),
    st.text(string.ascii_letters + "._-", min_size=1, max_size=260),
)
_REL = st.lists(_PART, min_size=1, max_size=5).map("/".join)


@PROFILE
@given(st.lists(_REL, min_size=1, max_size=6))
def test_an_accepted_file_list_stays_inside_and_leaves_room(rels: list[str]) -> None:
    try:
        files = parse_file_list("\n".join(rels))
    except InvalidFileSet:
        return
    root = "/models/k"
    assert len(set(files)) == len(files)
    for rel in files:
        dest = posixpath.normpath(posixpath.join(root, rel))
        assert dest.startswith(root + "/") and dest == posixpath.join(root, rel)
        assert not any(ord(c) < 0x20 or ord(c) == 0x7F for c in rel)
        name = posixpath.basename(rel)
        assert len(name.encode()) + suffix_room_bytes(False) <= NAME_MAX_BYTES
        assert all(len(p.encode()) <= NAME_MAX_BYTES for p in rel.split("/"))
        assert not name.endswith(".sha256") and name not in (".llmkube.lock", ".llmkube-validators")


@PROFILE
@given(st.text(max_size=2000))
def test_any_text_is_a_file_list_or_invalid_file_set(text: str) -> None:
    with contextlib.suppress(InvalidFileSet):
        parse_file_list(text)


def test_the_path_limit_counts_the_suffix() -> None:
    """A path that fits PATH_MAX by itself but not with `.<key>.<writer>.llmkube-journal`."""
    deep = "/".join(["d" * 200] * 20) + "/" + "d" * 30
    rel = deep + "/a.bin"
    assert len(("/models/k/" + rel).encode()) < PATH_MAX_BYTES - 10
    with pytest.raises(InvalidFileSet, match="PATH_MAX"):
        load_config({**_base_env(), "MODEL_FILES": rel}, {})


# -- the termination encoder ---------------------------------------------------------------------

_ERRORS = st.sampled_from([ConfigError, InvalidFileSet, SourceError, TransferError, CacheError])
_TEXT = st.one_of(st.text(max_size=6000), st.text(string.printable, max_size=9000))


@PROFILE
@given(_ERRORS, st.sampled_from(list(Reason)), _TEXT, _TEXT, st.one_of(st.none(), _TEXT))
def test_the_termination_message_is_bounded_json_without_a_secret(
    kind: type[StagerError], reason: Reason, detail: str, source: str, file: str | None
) -> None:
    err = kind(f"{detail} {CANARY} {detail}", file=file, reason=reason)
    redact = Redactor([CANARY])
    raw = encode(failure_doc(err, source + f"?X-Amz-Signature={CANARY}", redact))
    assert len(raw) <= MAX_BYTES
    doc = json.loads(raw)
    assert {"v", "outcome", "reason", "retryable"} <= set(doc)
    assert doc["reason"] == reason.value
    assert CANARY not in raw.decode()


# -- the planner ---------------------------------------------------------------------------------

_FS = st.builds(
    FsInfo,
    path=st.just("/models/k"),
    fstype=st.sampled_from(["ext4", "fuse.blobfuse2", "unknown"]),
    driver=st.just("x"),
    is_fuse=st.sampled_from([True, False, None]),
    read_only=st.booleans(),
    free_bytes=st.sampled_from([None, 0, 10**12]),
)
_SIZE = st.integers(min_value=0, max_value=1 << 44)


@st.composite
def _local(draw: st.DrawFn, rel: str) -> LocalFile:
    state = draw(st.sampled_from(list(LocalState)))
    size = draw(_SIZE) if state not in (LocalState.MISSING, LocalState.NOT_A_FILE) else None
    record: int | None = None
    if state is LocalState.COMPLETE:
        record = size
    elif state is LocalState.MISMATCH:
        record = draw(_SIZE.filter(lambda r: r != size))
    pin = draw(st.sampled_from(list(PinState)))
    return LocalFile(rel, state, size, record, pin=pin, marker=draw(st.booleans()))


@PROFILE
@given(st.data(), _FS, st.sampled_from(["serving", "stager"]), st.integers(1, 6))
def test_if_not_present_never_overwrites_a_file_that_passes_its_own_checks(
    data: st.DataObject, fs: FsInfo, role: str, count: int
) -> None:
    rels = [f"f{i}.bin" for i in range(count)]
    locals_ = {r: data.draw(_local(r)) for r in rels}
    plan = plan_of(*locals_.values(), fs=fs, role=role, multi=True, kind="http")  # type: ignore[arg-type]
    for action in plan.actions:
        local = locals_[action.rel]
        if local.usable:
            assert not action.transfers, (local, action)
            assert action.decision in (Decision.REUSE, Decision.KEEP, Decision.FAIL), action
        if local.state in (LocalState.UNREADABLE, LocalState.NOT_A_FILE):
            assert action.decision is Decision.FAIL and not action.backfill_record, action
        if action.backfill_record:
            assert plan.may_write and local.present
