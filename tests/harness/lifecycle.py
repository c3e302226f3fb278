"""The start/close/with-statement lifecycle the loopback test servers share."""

from __future__ import annotations

from types import TracebackType
from typing import Self


class Lifecycle:
    """`with Server() as s:` starts it unless already started; always closes."""

    def start(self) -> Self:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    @property
    def running(self) -> bool:
        return getattr(self, "_server", None) is not None

    def __enter__(self) -> Self:
        return self if self.running else self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
