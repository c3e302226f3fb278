"""The listing record of a listed model directory, `.llmkube-listing`
(llmkube_stager/listing.py): written atomically, read without following a
symlink or waiting on a FIFO; anything unreadable is no record at all (the
source is then listed again)."""

from __future__ import annotations

import os

from llmkube_stager.cache.records import write_atomic
from llmkube_stager.cache.safeio import read_regular
from llmkube_stager.errors import InvalidFileSet
from llmkube_stager.layout import LISTING_NAME, parse_file_list
from llmkube_stager.listing import Listing, decode_listing, encode_listing

# 100,000 files of long names and ETags.
_MAX_BYTES = 64 << 20


def read_listing(root: str, *, stamps_beside: bool = True) -> Listing | None:
    raw = read_regular(os.path.join(root, LISTING_NAME), _MAX_BYTES)
    listing = None if raw is None else decode_listing(raw)
    if listing is None:
        return None
    # The record's names are checked as the listing's were (#24 review): a
    # corrupted record naming '../x' is no record, never a path to look at.
    rels = [f.rel for f in listing.files]
    try:
        if any("\n" in rel for rel in rels):
            return None
        parse_file_list("\n".join(rels), stamps_beside=stamps_beside)
    except InvalidFileSet:
        return None
    return listing


def write_listing(root: str, listing: Listing) -> None:
    write_atomic(os.path.join(root, LISTING_NAME), encode_listing(listing))
