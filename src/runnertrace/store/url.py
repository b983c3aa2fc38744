"""Where a store is: one string, a file path or a URL, read the same by the writer and every viewer.

* a path (``~/traces.db``, ``./t.db``) or ``sqlite:///abs/path.db``: the embedded
  SQLite file;
* ``postgresql://user@host:port/db`` (or ``postgres://``): a PostgreSQL database,
  with libpq's own parameters after ``?`` (``sslmode=require``...). A password may
  be in the URL, but ``PGPASSWORD`` or ``~/.pgpass`` keep it out of configuration
  files and process lists; it is never shown (:attr:`StoreUrl.shown`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from runnertrace.store.errors import StoreError

__all__ = ["StoreUrl", "is_url"]

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")
_POSTGRES = ("postgresql", "postgres")


def is_url(location: str | os.PathLike[str]) -> bool:
    """Is ``location`` a URL (``scheme://``) rather than a file path?"""
    return isinstance(location, str) and _SCHEME.match(location) is not None


@dataclass(frozen=True)
class StoreUrl:
    """A parsed store location: its engine, and the file or the connection string."""

    engine: str
    """``sqlite`` or ``postgresql``."""
    path: Path | None
    """The SQLite file (absolute), for ``sqlite``."""
    conninfo: str
    """The PostgreSQL URL as given (password included), for ``postgresql``."""
    shown: str
    """What messages print: the path, or the URL without its password."""

    @classmethod
    def parse(cls, location: str | os.PathLike[str] | StoreUrl) -> StoreUrl:
        """``location`` parsed; a scheme we do not serve is a :class:`StoreError` naming both."""
        if isinstance(location, StoreUrl):
            return location
        if not is_url(location):
            return cls.sqlite(Path(os.fspath(location)))
        text = os.fspath(location).strip()
        scheme = text.split("://", 1)[0].lower()
        if scheme == "sqlite":
            rest = text[len("sqlite://") :]
            if not rest or rest == "/":
                raise StoreError(f"{text!r} names no file: write sqlite:///path/to/traces.db")
            return cls.sqlite(Path(rest))
        if scheme in _POSTGRES:
            parts = urlsplit(text)
            if not parts.path.strip("/"):
                raise StoreError(
                    f"store URL {_hide_password(text)} names no database: write "
                    "postgresql://user@host:5432/DBNAME"
                )
            return cls("postgresql", None, text, _hide_password(text))
        raise StoreError(
            f"store URL scheme {scheme!r} is not one runnertrace serves: use a file path, "
            "sqlite:///path/to/traces.db or postgresql://user@host:5432/dbname"
        )

    @classmethod
    def sqlite(cls, path: Path) -> StoreUrl:
        # Relative paths are resolved once, against the working directory now.
        resolved = Path(os.path.abspath(os.path.expanduser(os.fspath(path))))
        return cls("sqlite", resolved, "", str(resolved))

    @property
    def database(self) -> str:
        """The PostgreSQL database's name (empty for SQLite)."""
        return urlsplit(self.conninfo).path.strip("/") if self.conninfo else ""


def _hide_password(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, f"{user}:***@{host}", parts.path, parts.query, ""))
