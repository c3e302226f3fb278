"""A run's Session holds what the origin answered, a signed CDN URL after
redirects among it (RemoteMeta.url): its repr (a debugger, a traceback
formatter showing locals, an f-string in a future log line) must not show
it. Made a dataclass in #23, it had grown a repr of every field."""

from __future__ import annotations

import io

from llmkube_stager.acting.session import Clock, Session
from llmkube_stager.config import load_config
from llmkube_stager.logs import Log
from llmkube_stager.model import FsInfo
from llmkube_stager.plan import strategy_for
from llmkube_stager.sources.base import RemoteMeta
from tests.harness.canary import canary


def test_a_session_s_repr_shows_no_signed_url() -> None:
    secret = canary("SIG")
    env = {"MODEL_SOURCE": "https://o.example/m.gguf", "MODEL_PATH": "/c/m.gguf"}
    config = load_config(env, {})
    fs = FsInfo("/c", "ext4", "", False, False, None)
    clock = Clock(lambda _s: None, lambda: 0.0, lambda: 0.0)
    session = Session(config, Log(io.StringIO()), clock, fs, strategy_for(fs, "serving"))
    signed = f"https://cdn.example/blob?X-Amz-Signature={secret}"
    session.metas["m.gguf"] = RemoteMeta(signed, 1, '"e"', True)
    assert secret[:12] not in repr(session)
    assert secret[:12] not in str(session)
