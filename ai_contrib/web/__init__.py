"""
The staff web pages of AI NPCs on the game's own website (``docs/design.md``, "Seeing the NPC's
mind"): ``/ai/`` lists every AI NPC, ``/ai/<id>/`` shows one NPC's mind, and ``/ai/api/...``
is the JSON API both read (Django REST framework). A game includes :mod:`ai_contrib.web.urls`
in its ``web/website/urls.py``; only staff (Builder permission or Django ``is_staff``) may see
any of it.

Modules: :mod:`.access` (who may look), :mod:`.bridge` (reading NPCs in the reactor thread),
:mod:`.snapshot` (what is shown, as dicts), :mod:`.chart` (the usage chart as SVG),
:mod:`.api` (the JSON API), :mod:`.views` (the HTML pages), :mod:`.urls`.
"""
