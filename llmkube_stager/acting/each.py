"""IfNotPresent: each file is published as soon as it is complete and
verified (spec §8.4). A missing file that cannot be fetched fails the run."""

from __future__ import annotations

from llmkube_stager.acting.work import Transfers
from llmkube_stager.model import Action, FileResult


class EachFile(Transfers):
    def run(self, actions: list[Action]) -> dict[str, FileResult]:
        """After a failure no further file starts, and every file that
        failed is reported (its `failed to download` line) before the first
        raises."""
        outcomes = self.in_flight(actions, self.fetch_and_publish)
        for outcome in outcomes:
            if outcome.error is not None:
                raise outcome.error
        pairs = zip(actions, outcomes, strict=True)
        return {a.rel: o.value for a, o in pairs if o.value is not None}
