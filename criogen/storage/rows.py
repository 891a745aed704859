"""Model instances from hand-written statements.

On a few hot paths (the API's token lookup, the runner's claim) compiling an ORM query
costs more than the database takes to run it. There the statement is written once per
database from the model's own tables and columns, and its rows become model instances
here, each value passed through the converters the ORM would apply (a backend's own,
then the field's: UUIDs and datetimes on SQLite, sealed JSON, …), so the instances are
those the ORM would have built.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from django.db import connections
from django.db.models import Field, Model

__all__ = ["Columns", "columns", "fetch_rows", "row_by_pk"]

M = TypeVar("M", bound=Model)


@dataclass(frozen=True)
class Columns:
    """Some concrete fields of one model, in the model's order, for one database."""

    model: type[Model]
    alias: str
    fields: tuple[Field[Any, Any], ...]
    converters: tuple[tuple[Callable[..., Any], ...], ...]

    def select(self, table: str | None = None) -> str:
        """``table.col, …``: the select list (``table`` is the statement's name for the
        model's table; None for bare column names, as ``RETURNING`` takes them)."""
        qn = connections[self.alias].ops.quote_name
        prefix = "" if table is None else f"{table}."
        return ", ".join(f"{prefix}{qn(f.column)}" for f in self.fields)

    def instance(self, values: Sequence[Any]) -> Any:
        """The model instance for one row's values of these columns."""
        connection = connections[self.alias]
        converted = list(values)
        for i, (field, converters) in enumerate(zip(self.fields, self.converters, strict=True)):
            if converters:
                expression = field.get_col(field.model._meta.db_table)
                for convert in converters:
                    converted[i] = convert(converted[i], expression, connection)
        return self.model.from_db(self.alias, [f.attname for f in self.fields], converted)

    def param(self, name: str, value: Any) -> Any:
        """``value`` as the database takes it for the field ``name`` (a UUID is hex
        text on SQLite, an aware datetime naive UTC text, …)."""
        field = self.model._meta.get_field(name)
        if not isinstance(field, Field):
            raise LookupError(f"{self.model._meta.label}.{name} is a relation, not a column")
        return field.get_db_prep_value(value, connections[self.alias])


def columns(model: type[M], alias: str, names: Sequence[str] | None = None) -> Columns:
    """The columns of ``model``'s concrete fields named ``names`` (all when None), in
    the model's field order (the order ``Model.from_db`` takes values in)."""
    connection = connections[alias]
    wanted = None if names is None else set(names)
    fields = tuple(f for f in model._meta.concrete_fields if wanted is None or f.name in wanted)
    if wanted is not None and len(fields) != len(wanted):
        missing = wanted - {f.name for f in fields}
        raise LookupError(f"{model._meta.label} has no concrete fields {sorted(missing)}")
    converters = tuple(
        tuple(
            connection.ops.get_db_converters(field.get_col(model._meta.db_table))
            # Field.get_db_converters exists on every field; django-stubs omits it.
            + field.get_db_converters(connection)  # type: ignore[attr-defined]
        )
        for field in fields
    )
    return Columns(model, alias, fields, converters)


def row_by_pk(model: type[M], alias: str, pk: Any) -> M | None:
    """``model.objects.using(alias).filter(pk=pk).first()`` as one hand-written
    statement (prepared on PostgreSQL): the instance, or None."""
    sql, cols = _by_pk(model, alias)
    rows = fetch_rows(alias, sql, [cols.param(model._meta.pk.name, pk)])
    return cols.instance(rows[0]) if rows else None


def fetch_rows(alias: str, sql: str, params: Sequence[Any]) -> list[Any]:
    """The rows of one read, prepared on PostgreSQL (``criogen.storage.orm.base.pg_run``),
    through Django's cursor elsewhere."""
    from criogen.storage.orm.base import pg_run

    if connections[alias].vendor == "postgresql":
        return list(pg_run(alias, sql, params, fetch=True))
    with connections[alias].cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall())


@functools.cache
def _by_pk(model: type[Model], alias: str) -> tuple[str, Columns]:
    cols = columns(model, alias)
    qn = connections[alias].ops.quote_name
    meta = model._meta
    sql = (
        f"SELECT {cols.select()} FROM {qn(meta.db_table)}"  # noqa: S608 - identifiers from the model
        f" WHERE {qn(meta.pk.column)} = %s"
    )
    return sql, cols
