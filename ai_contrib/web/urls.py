"""
URLs of the staff pages and their API (``docs/design.md``, "Seeing the NPC's mind"). A game
includes them in its ``web/website/urls.py``::

    from django.urls import include, path
    urlpatterns = [path("ai/", include("ai_contrib.web.urls"))]

Names (namespace ``ai_contrib``): ``index``, ``npc``, ``static``, ``api-npcs``, ``api-npc``,
``api-archive``, ``api-search``.
"""

from django.urls import path, re_path

from . import api, views

app_name = "ai_contrib"

urlpatterns = [
    path("", views.index, name="index"),
    path("<int:npc_id>/", views.npc_page, name="npc"),
    re_path(r"^static/(?P<path>[\w.-]+)$", views.static, name="static"),
    path("api/npcs/", api.NPCListAPI.as_view(), name="api-npcs"),
    path("api/npcs/<int:npc_id>/", api.NPCDetailAPI.as_view(), name="api-npc"),
    path("api/npcs/<int:npc_id>/archive/", api.ArchiveAPI.as_view(), name="api-archive"),
    path("api/npcs/<int:npc_id>/search/", api.SearchAPI.as_view(), name="api-search"),
]
