"""The few phrases SQLite and PostgreSQL spell differently, so each query is written once.

Every statement of the store is written in SQLite's SQL with ``?`` marks and
these phrases where the two differ; the PostgreSQL engine turns the marks into
psycopg's ``%s``. What differs:

* reading a key of a span's JSON attributes (``json_extract`` / ``->>``), and
  a number there (PostgreSQL casts only what is a JSON number);
* a condition used as 0 or 1 (SQLite's booleans are integers already);
* joining strings of a group, and a JSON list of a group's values;
* "the row with the smallest x of each group" (SQLite's bare columns beside
  ``MIN()``; PostgreSQL's ``DISTINCT ON``);
* ``INSERT OR REPLACE`` (``ON CONFLICT ... DO UPDATE``);
* SQLite's ``+column``, which keeps the planner off an index that would be
  slower for that query (PostgreSQL has no such hint and needs none);
* ``LIKE``, which is case-insensitive in SQLite for ASCII (``ILIKE`` there).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["POSTGRES", "SQLITE", "Dialect"]


class Dialect:
    """SQLite's phrases; :class:`_Postgres` overrides those PostgreSQL spells otherwise."""

    name = "sqlite"
    like = "LIKE"
    per_row = ""
    """Ends a correlated ``EXISTS`` that must be probed run by run, newest first, stopping at
    a page of matches (PostgreSQL would otherwise answer it for every run at once)."""

    def text(self, column: str, *keys: str) -> str:
        """The first of ``keys`` present in the JSON ``column`` (new key first)."""
        parts = [f"json_extract({column}, '$.\"{key}\"')" for key in keys]
        return parts[0] if len(parts) == 1 else f"COALESCE({', '.join(parts)})"

    def number(self, column: str, key: str) -> str:
        """A key's number (NULL when absent; SQLite gives back what was stored)."""
        return f"json_extract({column}, '$.\"{key}\"')"

    def triple(self, column: str, *keys: str) -> str:
        """A JSON list of the values of ``keys`` (missing ones null), as text."""
        paths = ", ".join(f"'$.\"{key}\"'" for key in keys)
        return f"json_extract({column}, {paths})"

    def flag(self, condition: str) -> str:
        """``condition`` as 1 or 0, to sum or return."""
        return f"({condition})"

    def group_concat(self, expression: str, *, distinct: bool = False) -> str:
        """A group's values joined by commas (NULLs left out)."""
        return f"GROUP_CONCAT({'DISTINCT ' if distinct else ''}{expression})"

    def json_group_distinct(self, expression: str) -> str:
        """A JSON list (text) of a group's distinct values of a JSON ``expression``."""
        return f"json_group_array(DISTINCT {expression})"

    def noindex(self, column: str) -> str:
        return f"+{column}"

    def least(self, *values: str) -> str:
        return f"MIN({', '.join(values)})"

    def greatest(self, *values: str) -> str:
        return f"MAX({', '.join(values)})"

    def first_per(
        self, group: str, columns: str, source: str, order: str, *, last: bool = False
    ) -> str:
        """``columns`` of the row with the least (``last``: greatest) ``order`` of each
        ``group`` in ``source`` (``FROM ... WHERE ...``), then that ``order`` value."""
        return f"SELECT {columns}, {'MAX' if last else 'MIN'}({order}) {source} GROUP BY {group}"

    def upsert(self, table: str, columns: str, keys: Sequence[str]) -> tuple[str, str]:
        """The head (up to ``VALUES ``) and tail of a statement storing rows over old ones."""
        return f"INSERT OR REPLACE INTO {table} ({columns}) VALUES ", ""

    def parsed(self, where: str) -> str:
        """The spans matching ``where``, as a table to select from, whose ``attributes`` each
        query phrase above reads without parsing them again (PostgreSQL parses the JSON text
        once per row there, not once per key read)."""
        return f"(SELECT * FROM spans WHERE {where}) AS spans"

    def json_list(self) -> str:
        """A subquery of the strings of a JSON list given as one parameter."""
        return "SELECT value FROM json_each(?)"

    def tag_match(self, keys: Sequence[str], alias: str) -> str:
        """A span ``alias`` whose tag list (the first of ``keys``) holds the parameter."""
        lists = ", ".join(f"json_extract({alias}.attributes, '$.\"{k}\"')" for k in keys)
        return (
            f"EXISTS (SELECT 1 FROM json_each(CASE WHEN json_valid(COALESCE({lists})) "
            f"THEN COALESCE({lists}) ELSE '[]' END) t WHERE t.value = ?)"
        )

    def content_match(self, alias: str) -> tuple[str, int]:
        """A span ``alias``'s name or attributes hold the (escaped ``LIKE``) pattern; the
        condition and how many times it takes the pattern."""
        return (
            f"({alias}.name LIKE ? ESCAPE '\\' OR {alias}.attributes LIKE ? ESCAPE '\\')",
            2,
        )

    def attribute_match(self, alias: str, *, exists: bool) -> tuple[str, int]:
        """A span ``alias`` has the key given as a parameter (``exists``), or that key's value
        as text equals the parameter after it. The condition and how many times it takes
        the key (:meth:`attribute_key`); a boolean reads ``true``/``false`` on both engines."""
        if exists:
            return f"json_type({alias}.attributes, ?) IS NOT NULL", 1
        return (
            f"(CASE json_type({alias}.attributes, ?) WHEN 'true' THEN 'true' "
            f"WHEN 'false' THEN 'false' ELSE CAST(json_extract({alias}.attributes, ?) AS TEXT) "
            "END) = ?",
            2,
        )

    def attribute_key(self, key: str) -> str:
        """The parameter :meth:`attribute_match` takes for ``key`` (a JSON path here; the
        caller has refused a key holding a double quote)."""
        return f'$."{key}"'


class _Postgres(Dialect):
    name = "postgresql"
    like = "ILIKE"
    per_row = " OFFSET 0"  # no hashed subplan, no semi-join: a probe per run

    def text(self, column: str, *keys: str) -> str:
        parts = [f"({column}::jsonb ->> '{key}')" for key in keys]
        return parts[0] if len(parts) == 1 else f"COALESCE({', '.join(parts)})"

    def number(self, column: str, key: str) -> str:
        value = f"({column}::jsonb -> '{key}')"
        return f"(CASE WHEN jsonb_typeof({value}) = 'number' THEN {value}::float8 END)"

    def triple(self, column: str, *keys: str) -> str:
        return f"jsonb_build_array({', '.join(f'{column}::jsonb -> {_quote(k)}' for k in keys)})"

    def flag(self, condition: str) -> str:
        return f"(CASE WHEN {condition} THEN 1 ELSE 0 END)"

    def group_concat(self, expression: str, *, distinct: bool = False) -> str:
        return f"string_agg({'DISTINCT ' if distinct else ''}{expression}, ',')"

    def json_group_distinct(self, expression: str) -> str:
        return f"(jsonb_agg(DISTINCT {expression}))::text"

    def noindex(self, column: str) -> str:
        return column

    def least(self, *values: str) -> str:
        return f"LEAST({', '.join(values)})"

    def greatest(self, *values: str) -> str:
        return f"GREATEST({', '.join(values)})"

    def first_per(
        self, group: str, columns: str, source: str, order: str, *, last: bool = False
    ) -> str:
        direction = "DESC" if last else "ASC"
        return (
            f"SELECT DISTINCT ON ({group}) {columns}, {order} {source} "
            f"ORDER BY {group}, {order} {direction}"
        )

    def upsert(self, table: str, columns: str, keys: Sequence[str]) -> tuple[str, str]:
        names = [c.strip() for c in columns.split(",")]
        updates = ", ".join(f"{c} = EXCLUDED.{c}" for c in names if c not in keys)
        return (
            f"INSERT INTO {table} ({columns}) VALUES ",
            f" ON CONFLICT ({', '.join(keys)}) DO UPDATE SET {updates}",
        )

    def parsed(self, where: str) -> str:
        # OFFSET 0 keeps the planner from folding the subquery back (and the casts with it).
        return (
            "(SELECT trace_id, span_id, name, span_type, start_ns, end_ns, status_code, "
            "status_description, input_tokens, output_tokens, attributes::jsonb AS attributes "
            f"FROM spans WHERE {where} OFFSET 0) AS spans"
        )

    def json_list(self) -> str:
        return "SELECT jsonb_array_elements_text(?::jsonb)"

    def tag_match(self, keys: Sequence[str], alias: str) -> str:
        found = f"COALESCE({', '.join(f'{alias}.attributes::jsonb -> {_quote(k)}' for k in keys)})"
        return (
            f"(CASE WHEN jsonb_typeof({found}) = 'array' THEN {found} "
            "ELSE '[]'::jsonb END) @> jsonb_build_array(?::text)"
        )

    def content_match(self, alias: str) -> tuple[str, int]:
        # One expression, the one the trigram index is built on.
        return f"(({alias}.name || ' ' || {alias}.attributes) ILIKE ? ESCAPE '\\')", 1

    def attribute_match(self, alias: str, *, exists: bool) -> tuple[str, int]:
        if exists:
            return f"({alias}.attributes::jsonb -> (?::text)) IS NOT NULL", 1
        return f"({alias}.attributes::jsonb ->> (?::text)) = ?", 1

    def attribute_key(self, key: str) -> str:
        return key


def _quote(key: str) -> str:
    return "'" + key.replace("'", "''") + "'"


SQLITE = Dialect()
POSTGRES = _Postgres()
