"""Who may keep a live socket open, and the messages that close the others at once.

A dashboard socket checks its user when it connects (consumers.py); this module keeps
that answer true for as long as the socket lives:

- every socket also joins :func:`user_group` of its user and :func:`session_group` of
  the session it was opened with;
- signing out sends ``{"type": "session.ended"}`` to the session's group: its sockets
  close (code 4401) before any later event;
- a change to a user (saved, deleted, groups or permissions changed, or a group's
  permissions changed) sends ``{"type": "user.changed", "user_id"}`` to the user's group:
  its sockets check again (:func:`session_user`) and close when the session no longer
  holds (deactivated, deleted, password changed: 4401) or the user may no longer act
  the same way (demoted or promoted: 4403, the page must be reloaded);
- sockets also check before every push and when the session's expiry date passes, so a
  lost message, a session deleted by hand or one that simply expired closes them too.

The messages leave after the commit of the change, through the same ordered publisher
as the engine's events (:func:`criogen.events.send`), over whatever channel layer the
site uses (in-memory, or Redis between processes).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from datetime import datetime
from importlib import import_module
from typing import Any

from django.conf import settings
from django.contrib.auth import (
    BACKEND_SESSION_KEY,
    HASH_SESSION_KEY,
    SESSION_KEY,
    get_user_model,
    load_backend,
)
from django.contrib.auth.models import Group
from django.contrib.auth.signals import user_logged_out
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models.signals import m2m_changed, post_delete, post_save, pre_delete
from django.utils import timezone
from django.utils.crypto import constant_time_compare

from criogen import events

__all__ = [
    "SESSION_ENDED",
    "USER_CHANGED",
    "connect_receivers",
    "session_group",
    "session_user",
    "user_group",
]

SESSION_ENDED = "session.ended"
"""The event that closes a session's sockets (the handler is ``session_ended``)."""

USER_CHANGED = "user.changed"
"""The event that makes a user's sockets check again (the handler is ``user_changed``)."""


def user_group(user_id: Any) -> str:
    """The Channels group of every live socket of one user."""
    return f"user-{user_id}"


def session_group(session_key: str) -> str:
    """The Channels group of the live sockets opened with one session (the key itself,
    a credential, never goes to the channel layer)."""
    return "session-" + hashlib.sha256(session_key.encode()).hexdigest()[:40]


def session_user(session_key: str) -> tuple[Any | None, datetime | None]:
    """The user the session ``session_key`` signs in now, and when the session expires.

    Returns ``(None, None)`` when the session is gone or expired, names an inactive or
    deleted user, or was made before the user's password changed: the checks of
    :func:`django.contrib.auth.get_user`, without its writes (it would flush or re-key
    the browser's session from here).
    """
    data, expires = _session_data(session_key)
    try:
        user_id = get_user_model()._meta.pk.to_python(data[SESSION_KEY])
        backend_path = data[BACKEND_SESSION_KEY]
    except (KeyError, TypeError, ValueError, ValidationError):
        return None, None
    if backend_path not in settings.AUTHENTICATION_BACKENDS:
        return None, None
    user = load_backend(backend_path).get_user(user_id)  # None when inactive
    if user is None:
        return None, None
    session_hash = data.get(HASH_SESSION_KEY) or ""
    hashes = [user.get_session_auth_hash(), *user.get_session_auth_fallback_hash()]
    if not session_hash or not any(constant_time_compare(session_hash, h) for h in hashes):
        return None, None
    return user, expires


def _session_data(session_key: str) -> tuple[dict[str, Any], datetime | None]:
    """The session's data and expiry; ``({}, None)`` when it is gone or expired.

    Database-backed sessions (the default) are read in one query, data and expiry date
    together; other backends through their ``load()``.
    """
    store = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    model = getattr(store, "get_model_class", None)
    if model is None:
        data = store.load()
        if not data:
            return {}, None
        expires: datetime | None = store.get_expiry_date(expiry=data.get("_session_expiry"))
        return data, expires
    row = (
        model()
        .objects.filter(session_key=session_key, expire_date__gt=timezone.now())
        .values_list("session_data", "expire_date")
        .first()
    )
    if row is None:
        return {}, None
    return store.decode(row[0]), row[1]


# -- the messages ------------------------------------------------------------------------


def send_session_ended(session_key: str) -> None:
    """Close the sockets of ``session_key`` once the current transaction commits."""
    group = session_group(session_key)
    transaction.on_commit(lambda: events.send(group, {"type": SESSION_ENDED}))


def send_user_changed(user_ids: Iterable[Any]) -> None:
    """Have the sockets of these users check again once the current transaction commits."""
    ids = sorted({str(pk) for pk in user_ids if pk is not None})

    def send() -> None:
        for pk in ids:
            events.send(user_group(pk), {"type": USER_CHANGED, "user_id": pk})

    if ids:
        transaction.on_commit(send)


# -- the receivers -----------------------------------------------------------------------


def _signed_out(sender: Any, request: Any, user: Any, **kwargs: Any) -> None:
    session = getattr(request, "session", None)
    key = getattr(session, "session_key", None)
    if key:
        send_session_ended(key)


def _user_saved(sender: Any, instance: Any, created: bool, **kwargs: Any) -> None:
    update_fields = kwargs.get("update_fields")
    # A sign-in saves last_login; nothing a socket depends on changes.
    if created or (update_fields is not None and set(update_fields) <= {"last_login"}):
        return
    send_user_changed([instance.pk])


def _user_deleted(sender: Any, instance: Any, **kwargs: Any) -> None:
    send_user_changed([instance.pk])


def _user_links_changed(
    sender: Any, instance: Any, action: str, reverse: bool, pk_set: Any, **kwargs: Any
) -> None:
    """``user.groups`` or ``user.user_permissions`` changed, from either side."""
    if not reverse:
        if action in ("post_add", "post_remove", "post_clear"):
            send_user_changed([instance.pk])
        return
    # From the group's or permission's side: pk_set holds user ids, except for a clear,
    # whose users are only known before it.
    if action in ("post_add", "post_remove"):
        send_user_changed(pk_set or ())
    elif action == "pre_clear":
        send_user_changed(_users_linked_to(sender, instance))


def _users_linked_to(through: Any, instance: Any) -> list[Any]:
    """The ids of the users ``through`` (a user m2m table) links to ``instance``."""
    fields = [f for f in through._meta.get_fields() if getattr(f, "related_model", None)]
    user_field = next(f for f in fields if f.related_model is get_user_model())
    other = next(f for f in fields if f.related_model is type(instance))
    rows = through.objects.filter(**{other.name: instance})
    return list(rows.values_list(user_field.attname, flat=True))


def _group_permissions_changed(
    sender: Any, instance: Any, action: str, reverse: bool, pk_set: Any, **kwargs: Any
) -> None:
    """A group's permissions changed: every member may have gained or lost one."""
    if action not in ("post_add", "post_remove", "pre_clear"):
        return
    groups = [instance.pk] if not reverse else list(pk_set or ())
    if reverse and action == "pre_clear":
        groups = list(Group.objects.filter(permissions=instance).values_list("pk", flat=True))
    send_user_changed(_members(groups))


def _group_deleted(sender: Any, instance: Any, **kwargs: Any) -> None:
    send_user_changed(_members([instance.pk]))


def _members(group_ids: Iterable[Any]) -> list[Any]:
    return list(
        get_user_model().objects.filter(groups__in=list(group_ids)).values_list("pk", flat=True)
    )


def connect_receivers() -> None:
    """Connect the receivers above (the dashboard app's ``ready()``)."""
    user_model: Any = get_user_model()
    uid = "criogen.dashboard.access."
    user_logged_out.connect(_signed_out, dispatch_uid=uid + "signed_out")
    post_save.connect(_user_saved, sender=user_model, dispatch_uid=uid + "user_saved")
    post_delete.connect(_user_deleted, sender=user_model, dispatch_uid=uid + "user_deleted")
    for through in (user_model.groups.through, user_model.user_permissions.through):
        m2m_changed.connect(
            _user_links_changed, sender=through, dispatch_uid=uid + through.__name__
        )
    m2m_changed.connect(
        _group_permissions_changed,
        sender=Group.permissions.through,
        dispatch_uid=uid + "group_permissions",
    )
    pre_delete.connect(_group_deleted, sender=Group, dispatch_uid=uid + "group_deleted")
