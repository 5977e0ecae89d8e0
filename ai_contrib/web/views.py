"""
The staff pages (``docs/design.md``, "Seeing the NPC's mind"): ``/ai/`` (every AI NPC) and
``/ai/<id>/`` (one NPC's mind). Both are rendered on the server from the same
:mod:`ai_contrib.web.snapshot` data the JSON API returns; the NPC page's memory search and
archive paging call the API from the browser.

Anonymous visitors are sent to the site's login page; logged-in accounts without Builder
permission or ``is_staff`` get 403.

The templates and the stylesheet and script ship inside the package and are served by these
views themselves (a private template engine, :func:`django.views.static.serve`), so a game needs
no ``INSTALLED_APPS`` entry, no ``collectstatic`` and no network access for them.
"""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING

from django.contrib.auth.views import redirect_to_login
from django.http import HttpResponse, HttpResponseForbidden, HttpResponseNotFound
from django.template import Context, Engine
from django.urls import reverse
from django.utils.safestring import mark_safe
from django.views.static import serve

from . import snapshot
from .access import is_ai_staff
from .bridge import in_reactor
from .chart import usage_chart_svg

if TYPE_CHECKING:
    from collections.abc import Callable
    from django.http.response import HttpResponseBase

HERE = os.path.dirname(os.path.abspath(__file__))
STATIC_DIR = os.path.join(HERE, "static", "ai_contrib")
_engine = Engine(dirs=[os.path.join(HERE, "templates")], autoescape=True)


def staff_only(view) -> Callable:
    """Decorator: the login redirect for anonymous visitors, 403 for accounts not staff."""

    @functools.wraps(view)
    def wrapper(request, *args, **kwargs):
        if not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        if not is_ai_staff(request.user):
            return HttpResponseForbidden(
                render("ai_contrib/forbidden.html", {"user": request.user}))
        return view(request, *args, **kwargs)

    return wrapper


def render(name, context) -> str:
    """Render one of the package's templates (str)."""
    return _engine.get_template(name).render(Context(context))


def _common(request):
    return {"user": request.user, "index_url": reverse("ai_contrib:index"),
            "css_url": reverse("ai_contrib:static", args=["ai.css"]),
            "js_url": reverse("ai_contrib:static", args=["ai.js"])}


@staff_only
def index(request) -> HttpResponse:
    npcs = in_reactor(snapshot.all_npcs)
    for npc in npcs:
        npc["url"] = reverse("ai_contrib:npc", args=[npc["id"]])
        if npc.get("has_script"):
            npc["percent"] = round(npc["usage"] * 100, 1)
            npc["bar"] = min(100.0, npc["percent"])
            npc["sleep_pct"] = round(npc["sleep_threshold"] * 100, 1)
            npc["emergency_pct"] = round(npc["emergency_threshold"] * 100, 1)
    return HttpResponse(render("ai_contrib/index.html", {
        **_common(request), "npcs": npcs,
        "api_url": reverse("ai_contrib:api-npcs"),
    }))


CONTEXT_PAGE_SIZE = 30  # messages of the runtime context on one page, newest page first
EVENTS_OPEN = 10  # the events table starts unfolded up to this many compactions


def _page(request, name):
    """The page number query parameter ``name`` asks for (from 1; 1 when absent or bad)."""
    try:
        return max(1, int(request.GET.get(name, 1)))
    except (TypeError, ValueError):
        return 1


def _context_page(messages, page):
    """One page of the runtime context, oldest first within it: page 1 holds the newest
    :data:`CONTEXT_PAGE_SIZE` messages. ``{"messages", "page", "pages", "first", "last"}``
    (``first``/``last``: 1-based positions in the whole context)."""
    pages = max(1, -(-len(messages) // CONTEXT_PAGE_SIZE))
    page = min(page, pages)
    end = len(messages) - (page - 1) * CONTEXT_PAGE_SIZE
    start = max(0, end - CONTEXT_PAGE_SIZE)
    return {"messages": messages[start:end], "page": page, "pages": pages,
            "first": start + 1, "last": end}


@staff_only
def npc_page(request, npc_id) -> HttpResponse:
    """One NPC's page: the figures and chart unfolded, the long lists folded (``<details>``)
    and paged by query parameters ``receipts``, ``journal`` and ``context`` (1 = newest)."""
    npc, script = in_reactor(snapshot.find_npc_by_id, npc_id)
    if npc is None or script is None:
        return HttpResponseNotFound(render("ai_contrib/not_found.html", {
            **_common(request), "npc_id": npc_id}))
    detail = in_reactor(snapshot.npc_detail, npc, script, _page(request, "receipts"),
                        _page(request, "journal"))
    archive = in_reactor(snapshot.archive_page, script, None)
    detail["percent"] = round(detail["usage"] * 100, 1)
    detail["bar"] = min(100.0, detail["percent"])
    detail["sleep_pct"] = round(detail["sleep_threshold"] * 100, 1)
    detail["emergency_pct"] = round(detail["emergency_threshold"] * 100, 1)
    chart = usage_chart_svg(detail["usage_series"], detail["events"], detail["budget"],
                            detail["sleep_threshold"], detail["emergency_threshold"])
    return HttpResponse(render("ai_contrib/npc.html", {
        **_common(request), "npc": detail, "archive": archive,
        "chart": mark_safe(chart),  # built by chart.usage_chart_svg, every text in it escaped
        "context": _context_page(detail["context"], _page(request, "context")),
        # a section the admin pages through stays unfolded
        "unfold": {name for name in ("receipts", "journal", "context") if name in request.GET},
        "events_open": len(detail["events"]) <= EVENTS_OPEN,
        "api": {
            "detail": reverse("ai_contrib:api-npc", args=[npc.id]),
            "archive": reverse("ai_contrib:api-archive", args=[npc.id]),
            "search": reverse("ai_contrib:api-search", args=[npc.id]),
        },
        "page_size": snapshot.ARCHIVE_PAGE_SIZE,
    }))


def static(request, path) -> HttpResponseBase:
    """The pages' stylesheet and script, from the package (no login needed: nothing private)."""
    return serve(request, path, document_root=STATIC_DIR)
