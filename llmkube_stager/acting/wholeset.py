"""OnChange refreshes the manifest as a whole (spec §8.5, scenario 18):
every file to transfer is first staged into a complete, verified partial;
only when all of them succeeded are they published, one rename each. If
any failed, nothing of this run is published and the previous set keeps
serving (complete partials stay on disk, so the next start publishes them
after a 416 with no body). A missing file that cannot be fetched fails the
run either way.

The renames of a set run with SIGTERM/SIGINT held back (a few
milliseconds) after an intent naming them is recorded, so a SIGKILL in the
middle is rolled forward by the next writer and a reader does not serve
the half-renamed set as whole (#10 defect 13).
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from llmkube_stager import messages
from llmkube_stager.acting.work import Transfers
from llmkube_stager.cache.runrecord import PublishEntry
from llmkube_stager.errors import Reason, SourceError, StagerError, known
from llmkube_stager.model import Action, Decision, FileResult
from llmkube_stager.transfer import Completed, KeepAlive


@dataclass
class _Staged:
    action: Action
    done: Completed | None = None
    error: StagerError | None = None


class WholeSet(Transfers):
    def run(self, actions: list[Action]) -> dict[str, FileResult]:
        staged: list[_Staged] = []
        try:
            with KeepAlive() as keep:

                def stage(action: Action) -> _Staged:
                    one = self._try_stage(action)
                    if one.done is not None:
                        keep.add(one.done.claim.beat)
                    return one

                outcomes = self.in_flight(actions, stage)
                staged = [o.value for o in outcomes if o.value is not None]
                for outcome in outcomes:
                    if outcome.error is not None:
                        raise outcome.error
            return self._settle_staged(staged)
        finally:
            for one in staged:
                if one.done is not None:
                    one.done.claim.close()  # published ones are closed already

    def _try_stage(self, action: Action) -> _Staged:
        try:
            return _Staged(action, done=self.stage_partial(action))
        except StagerError as err:
            return _Staged(action, error=err)

    def _settle_staged(self, staged: list[_Staged]) -> dict[str, FileResult]:
        failures = [s for s in staged if s.error is not None]
        fatal = [s for s in failures if s.action.decision is not Decision.REFRESH]
        if fatal:
            raise self.failed(fatal[0].action, known(fatal[0].error, "a failed file's error"))
        if failures and any(s.action.decision is not Decision.REFRESH for s in staged):
            # A missing or broken file was fetched, but publishing it alone
            # would mix revisions, and there is no old copy of it to keep.
            first = failures[0]
            raise self.failed(first.action, known(first.error, "a failed file's error"))
        if failures:
            return {s.action.rel: self._kept(s, failures) for s in staged}
        return self._publish_set([s for s in staged if s.done is not None])

    def _publish_set(self, staged: list[_Staged]) -> dict[str, FileResult]:
        """Every file of the set renamed into place, with signals held and an
        intent recorded first (#10 defect 13); a partial adopted away
        meanwhile is staged again after the renames, the intent kept until
        it is in."""
        if not staged:
            return {}
        self._recorder.begin_publish(self._entry(s) for s in staged)
        results: dict[str, FileResult] = {}
        lost: list[_Staged] = []
        with signals_held(), KeepAlive() as keep:
            # The partials not renamed yet stay alive while the set is
            # renamed (a slow FUSE rename is a copy): an unsharded writer
            # rolls forward only a dead writer's publish (#21 item 5). By
            # name, not descriptor: a published claim's descriptor is closed.
            for one in staged:
                keep.add(functools.partial(_touch, known(one.done, "a staged file").partial))
            for one in staged:
                result = self.publish_once(one.action, known(one.done, "a staged file"))
                if result is None:
                    lost.append(one)
                else:
                    results[one.action.rel] = result
            if not lost:
                self._recorder.end_publish()
        if lost:
            for one in lost:
                results[one.action.rel] = self.fetch_and_publish(one.action)
            self._recorder.end_publish()
        return results

    def _entry(self, one: _Staged) -> PublishEntry:
        done = known(one.done, "a staged file")
        meta = self._session.metas.get(one.action.rel)
        validator = (meta.etag if meta is not None else None) or ""
        partial = os.path.basename(done.partial)
        return PublishEntry(one.action.rel, partial, done.claim.size(), validator)

    def _kept(self, staged: _Staged, failures: list[_Staged]) -> FileResult:
        rel = staged.action.rel
        err = staged.error
        # "kept" prints the scripts' lines whole (logs.VERBATIM_EVENTS); the
        # agent's own explanations are warnings with their fields.
        event = "kept"
        if err is not None and err.reason is Reason.CHECKSUM_MISMATCH and not err.retryable:
            # A pin not met (an origin-digest mismatch is retryable: #12 item 5).
            text = messages.pinned_kept(self._multi, rel)
        elif isinstance(err, SourceError) and not err.answered:
            text = messages.unreachable_kept(self._multi, rel)
        elif err is not None:
            event = "kept_after_error"
            text = f"Revalidation failed for {rel} ({err.detail}); kept cached copy"
        else:
            others = ", ".join(f.action.rel for f in failures)
            event = "kept_whole_model"
            text = (
                f"Not publishing the new {rel}: {others} could not be refreshed, so the "
                "previous version of the whole model keeps serving; kept cached copy"
            )
        self._log.warning(event, text, file=rel)
        return FileResult(rel, Decision.KEEP)

    # -- OnChange's words ----------------------------------------------------------------

    def done_text(self, action: Action) -> str:
        return messages.refreshed(self._multi, action.rel)

    def report_failure(self, action: Action, err: StagerError) -> None:
        if action.decision is not Decision.FETCH:
            super().report_failure(action, err)
            return
        line = messages.missing_and_failed_line(self._multi, action.rel)
        self._log.error("missing_and_failed", line, file=action.rel)
        err.detail = f"{messages.missing_and_failed(self._multi, action.rel)}: {err.detail}"


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """SIGTERM/SIGINT wait until the block ends (the renames of a set take
    milliseconds; a pod stopped in between would leave it mixed)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    signals = (signal.SIGTERM, signal.SIGINT)
    previous = {sig: signal.signal(sig, lambda n, _f: pending.append(n)) for sig in signals}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for signum in pending:
            signal.raise_signal(signum)


def _touch(path: str) -> None:
    """A heartbeat by name: a name renamed into place (or adopted away) is
    gone, and a private partial's name is never anyone else's."""
    with contextlib.suppress(OSError):
        os.utime(path, follow_symlinks=False)
