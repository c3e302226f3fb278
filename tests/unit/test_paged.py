"""#41 item 5: the listing every cloud shares (sources/prefix.py `paged`)
refuses pages that go round, at the page that repeats. Pure: the pages
are a function of the token asked, as a cloud's answers are."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from llmkube_stager.errors import Reason, SourceError
from llmkube_stager.sources.prefix import PrefixObject, paged

Page = tuple[Iterable[PrefixObject], str | None]


def _objects(*names: str) -> list[PrefixObject]:
    return [PrefixObject(name, 1, '"e"') for name in names]


def _listing(pages: dict[str | None, Page]) -> tuple[list[str], list[str | None]]:
    asked: list[str | None] = []

    def ask(token: str | None) -> Page:
        asked.append(token)
        return pages[token]

    return [o.name for o in paged(ask, "'m/'")], asked


def test_a_listing_that_goes_forward_is_followed_to_its_end() -> None:
    pages: dict[str | None, Page] = {
        None: (_objects("m/a", "m/b"), "t1"),
        "t1": (_objects("m/c"), "t2"),
        "t2": ([], None),
    }
    assert _listing(pages) == (["m/a", "m/b", "m/c"], [None, "t1", "t2"])


@pytest.mark.parametrize(
    ("pages", "words", "asked"),
    [
        # The same token again: refused before the page's objects count.
        (
            {None: (_objects("m/a"), "t1"), "t1": (_objects("m/b"), "t1")},
            "the same page token twice",
            2,
        ),
        # The same objects under new tokens.
        (
            {None: (_objects("m/a"), "t1"), "t1": (_objects("m/a"), "t2")},
            "named an object twice ('m/a')",
            2,
        ),
        # An object twice in one page.
        ({None: (_objects("m/a", "m/a"), None)}, "named an object twice ('m/a')", 1),
    ],
)
def test_a_listing_that_goes_round_is_rejected_at_the_page_that_repeats(
    pages: dict[str | None, Page], words: str, asked: int
) -> None:
    seen: list[str | None] = []

    def ask(token: str | None) -> Page:
        seen.append(token)
        return pages[token]

    with pytest.raises(SourceError) as caught:
        list(paged(ask, "'m/'"))
    assert caught.value.reason is Reason.SOURCE_REJECTED
    assert words in str(caught.value)
    assert len(seen) == asked
