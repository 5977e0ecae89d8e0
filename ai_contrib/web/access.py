"""
Who may see the staff pages and their API (``docs/design.md``, "Seeing the NPC's mind"): an
account with Evennia's ``Builder`` permission or above (the permission of the ``aihistory``
command), or Django's ``is_staff``.
"""

from __future__ import annotations

from rest_framework.permissions import BasePermission

STAFF_PERMISSION = "Builder"


def is_ai_staff(user) -> bool:
    """
    True if ``user`` (a request's user: an Evennia account or Django's anonymous user) may see
    AI NPCs' minds. Superusers pass; a quelled superuser too (quelling is for in-game tests).
    """
    if user is None or not getattr(user, "is_authenticated", False):
        return False
    if getattr(user, "is_staff", False) or getattr(user, "is_superuser", False):
        return True
    check = getattr(user, "check_permstring", None)
    return bool(check and check(STAFF_PERMISSION))


class IsAIStaff(BasePermission):
    """DRF permission: :func:`is_ai_staff` of the request's user."""

    message = "Builder permission or staff status is needed to see AI NPCs."

    def has_permission(self, request, view) -> bool:
        return is_ai_staff(request.user)
