"""
The JSON API of the staff pages (Django REST framework; ``docs/design.md``, "Seeing the NPC's
mind"). Read-only, staff only (:class:`ai_contrib.web.access.IsAIStaff`); session login, as on
the rest of the game's website.

- ``GET api/npcs/``: ``{"npcs": [npc summary, ...]}`` (:func:`snapshot.npc_summary`);
- ``GET api/npcs/<id>/?receipts=<page>&journal=<page>``: :func:`snapshot.npc_detail` (pages
  from 1, the newest);
- ``GET api/npcs/<id>/archive/?start=<seq>&count=<n>``: :func:`snapshot.archive_page`;
- ``GET api/npcs/<id>/search/?q=<text>&audience=<dbref>&audience=...``:
  :func:`snapshot.search_memories` (no ``audience``: everything the NPC knows).

A missing NPC answers 404; a bad number 400.
"""

from __future__ import annotations

from rest_framework.authentication import SessionAuthentication
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from . import snapshot
from .access import IsAIStaff
from .bridge import in_reactor


class StaffAPIView(APIView):
    """Base of the API views: session authentication, staff only, JSON."""

    authentication_classes = [SessionAuthentication]
    permission_classes = [IsAIStaff]
    renderer_classes = [JSONRenderer]

    @staticmethod
    def npc_and_script(npc_id) -> tuple:
        npc, script = in_reactor(snapshot.find_npc_by_id, npc_id)
        if npc is None:
            raise NotFound(f"no AI NPC with id {npc_id}")
        if script is None:
            raise NotFound(f"{npc.key} has no AssistantScript")
        return npc, script

    @staticmethod
    def int_param(request, name, default=None) -> int | None:
        raw = request.query_params.get(name)
        if raw in (None, ""):
            return default
        try:
            return int(raw)
        except ValueError:
            raise ValidationError({name: "a whole number is expected"}) from None


class NPCListAPI(StaffAPIView):
    def get(self, request) -> Response:
        return Response({"npcs": in_reactor(snapshot.all_npcs)})


class NPCDetailAPI(StaffAPIView):
    def get(self, request, npc_id) -> Response:
        npc, script = self.npc_and_script(npc_id)
        return Response(in_reactor(snapshot.npc_detail, npc, script,
                                   max(1, self.int_param(request, "receipts", 1)),
                                   max(1, self.int_param(request, "journal", 1))))


class ArchiveAPI(StaffAPIView):
    def get(self, request, npc_id) -> Response:
        npc, script = self.npc_and_script(npc_id)
        start = self.int_param(request, "start")
        count = self.int_param(request, "count", snapshot.ARCHIVE_PAGE_SIZE)
        return Response(in_reactor(snapshot.archive_page, script, start, count))


class SearchAPI(StaffAPIView):
    def get(self, request, npc_id) -> Response:
        npc, script = self.npc_and_script(npc_id)
        query = (request.query_params.get("q") or "").strip()
        if not query:
            raise ValidationError({"q": "a query is needed"})
        audience = [a for a in request.query_params.getlist("audience") if a] or None
        return Response(in_reactor(snapshot.search_memories, npc, script, query, audience))
