"""#44 item 2: the whole set against the volume's free space
(staging/room.py): what the files to transfer still need, less what their
partials hold; a file of unknown size counts nothing."""

from __future__ import annotations

import pytest

from llmkube_stager.errors import Reason, TransferError
from llmkube_stager.staging.room import check_room, missing_bytes


def test_a_partial_counts_what_it_holds() -> None:
    assert missing_bytes([(100, 0), (100, 40), (None, 0), (10, 50)]) == 160


def test_a_set_that_fits_passes_and_unknown_room_passes() -> None:
    check_room(100, 100, 2, "the volume")
    check_room(10**12, None, 2, "the volume")


def test_a_set_that_does_not_fit_states_need_and_room() -> None:
    with pytest.raises(TransferError) as caught:
        check_room(101, 100, 2, "the volume")
    err = caught.value
    assert err.reason is Reason.OUT_OF_SPACE
    assert "need 101 bytes" in err.detail and "100 bytes free" in err.detail
