"""Publish a finished partial: check, rename, make it durable, record.

Publish is a rename, so a reader sees either the old file or the whole new
one, never a file being written (LLMKube #1428, scenario 95). What is published is
the inode we hold (our claim), judged by its descriptor's fstat before the
rename: a partial of the wrong size is never published (seed-001: an
existence-only reader would accept it, scenario 17), and our name must
still name our inode (a partial adopted away, or a name replaced under us,
is never renamed into place). The size record is written only while the
destination still names what we published.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from dataclasses import dataclass

from llmkube_stager.cache import evidence
from llmkube_stager.cache.disk import disk_error
from llmkube_stager.cache.heldpartial import HeldPartial, same_file
from llmkube_stager.cache.records import fsync_dir, retire_stamp, write_size_record
from llmkube_stager.errors import Reason, TransferError


class PartialLost(Exception):
    """Our private partial was adopted by another writer (it looked idle):
    never publish it; start over (see heldpartial.py)."""


@dataclass(frozen=True)
class Published:
    """What a publish put into place: the inode's fstat (size and mtime a
    stamp may vouch for) and the evidence of its bytes read through our
    descriptor (None: it could not be read; such a file is never stamped).
    Handed to `stamp_published` by the caller (#32 item 5: it went through
    a process-wide dict in cache/evidence.py)."""

    st: os.stat_result
    evidence: str | None


def names_inode(path: str, st: os.stat_result) -> bool:
    """`path` names the file `st` (a descriptor's fstat) describes; where
    inode numbers follow the path (rclone), by size and mtime (#21 item 8)."""
    try:
        named = os.lstat(path)
    except OSError:
        return False
    return same_file(named, st, path)


def publish(claim: HeldPartial, dest: str, expected_bytes: int | None, rel: str) -> Published:
    """Rename our partial onto `dest` and record its size. Returns the
    published inode's fstat and the evidence of its bytes (what a stamp may
    vouch for)."""
    try:
        os.fsync(claim.fd)
        st = os.fstat(claim.fd)
    except OSError as exc:
        # The bytes are not on the disk, and Linux reports a write-back
        # error once per open file: a later fsync would return 0 over them
        # (#21 item 1). The partial goes; nothing is published.
        claim.discard()
        raise disk_error(exc, "publishing", rel, dest) from exc
    if expected_bytes is not None and st.st_size != expected_bytes:
        claim.discard()
        raise TransferError(
            f"the partial of {rel} has {st.st_size} bytes, the origin promised {expected_bytes}",
            reason=Reason.SIZE_MISMATCH,
            file=rel,
        )
    if not claim.owned():
        claim.close()
        raise PartialLost(claim.path)
    try:
        # The stamp and evidence at `dest` vouch for the file we replace,
        # never for ours (#29 item 2: an unpinned writer left them, and a
        # file of one size, one mtime second and the same sampled blocks
        # passed for the pinned one). Before the rename, so that no reader
        # ever sees them beside our file; one written meanwhile by a racing
        # stamper is bound to the old file's inode (records._judge).
        retire_stamp(dest)
        os.replace(claim.path, dest)
        # And after: a writer that stamped its own file while we stalled
        # between the two calls left a stamp beside ours, which on FUSE
        # only the sampled blocks would tell from it (review of #29 item 2).
        # At worst this removes a stamp of our file (a re-hash, no more).
        retire_stamp(dest)
    except FileNotFoundError as exc:
        claim.close()
        raise PartialLost(claim.path) from exc
    except OSError as exc:
        raise disk_error(exc, "publishing", rel, dest) from exc
    try:
        # What we published, as it is now: rclone (--vfs-cache-mode off)
        # moves an open file's mtime at its rename (#21 item 10), and the
        # identity below compares size and mtime where inode numbers
        # follow the path.
        st = os.fstat(claim.fd)
    except OSError as exc:
        claim.close()
        raise disk_error(exc, "publishing", rel, dest) from exc
    seen = None
    with contextlib.suppress(OSError):
        # The bytes a stamp of this file may vouch for, read through our
        # own descriptor, never the name (#21 item 2, cache/evidence.py).
        seen = evidence.of_descriptor(claim.fd, st.st_size)
    try:
        # Another writer may already have renamed its own file over ours:
        # its record is its own to write.
        if names_inode(dest, st):
            # The record's rename is in the same directory, and its directory
            # fsync makes both renames durable: one directory fsync per file
            # instead of two (#16). A crash between them leaves the file
            # without its record (complete: its bytes were fsynced before
            # the rename; kept as legacy, as before), or on a filesystem that
            # reorders renames a record without the new file (absent or the
            # old one: a size mismatch or a stamp miss, fetched again).
            write_size_record(dest, st.st_size)
        else:
            fsync_dir(os.path.dirname(dest))
    except OSError as exc:
        raise disk_error(exc, "recording the size of", rel, dest) from exc
    finally:
        claim.close()
    return Published(st, seen)


def stamp_published(dest: str, digest: str, published: Published) -> None:
    """Stamp `digest` for the inode described by `published.st` (the
    descriptor that was hashed or written), with the evidence of its bytes
    taken through that descriptor (`published.evidence`), and only while
    `dest` still names it: a stamp never
    vouches for bytes it did not see (#10 defect 3). Written, then checked
    again against the bytes an open of `dest` reads now: on FUSE a name's
    cached identity may be another writer's file (#21 item 2), so the check
    by name alone passes; a stamp whose evidence the bytes do not bear out
    is taken back (no stamp means a re-hash, never a wrong file). Readers
    check the evidence too (records.stamp_matches): a writer frozen between
    its stamp and this check, or killed there, fools nobody."""
    from llmkube_stager.cache.records import read_stamp, write_stamp
    from llmkube_stager.layout import stamp_path

    st, seen = published.st, published.evidence
    if seen is None or not names_inode(dest, st):
        return
    write_stamp(dest, digest, st, seen)
    if names_inode(dest, st) and evidence.of_name(dest, st.st_size) == seen:
        return
    if read_stamp(dest) == (digest, st.st_size, int(st.st_mtime)):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(stamp_path(dest))


def roll_forward(dest: str, partial_name: str, size: int) -> bool | None:
    """Finish one entry of an interrupted publish (the run record's intent,
    cache/runrecord.py): the listed partial, still whole, is renamed into
    place (True). A partial no longer there may have been renamed into
    place by its writer, or taken by another writer (adopted) while the
    destination is still the old file: a destination of its size is kept
    and recorded by size, but it is not vouched for as the entry's version
    (None; #21 review: the old file of one size got the new version's
    validator, and OnChange kept it). False when the entry cannot be
    vouched for at all. The partial's data is fsynced before its rename
    (#21 item 1: its writer died before its own publish fsync, so its
    pages may still be dirty); a failing fsync raises the storage reason
    and renames nothing."""
    partial = os.path.join(os.path.dirname(dest), partial_name)
    renamed = False
    try:
        if _synced_whole(partial, size):
            retire_stamp(dest)  # #29 item 2, as in publish
            os.replace(partial, dest)
            fsync_dir(os.path.dirname(dest))
            renamed = True
    except OSError as exc:
        raise disk_error(exc, "finishing the publish of", os.path.basename(dest), dest) from exc
    try:
        st = os.lstat(dest)
    except FileNotFoundError:
        return False
    if not stat.S_ISREG(st.st_mode) or st.st_size != size:
        return False
    if names_inode(dest, st):
        write_size_record(dest, size)
    return True if renamed else None


def _synced_whole(partial: str, size: int) -> bool:
    """The partial is a regular file of `size` bytes, now on the disk;
    False when it is missing or not that (raises the fsync's error)."""
    try:
        fd = os.open(partial, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except (FileNotFoundError, IsADirectoryError):
        return False
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EACCES, errno.EPERM):
            return False  # a symlink, or bytes this uid cannot vouch for
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size != size:
            return False
        os.fsync(fd)
        return names_inode(partial, st)
    finally:
        os.close(fd)
