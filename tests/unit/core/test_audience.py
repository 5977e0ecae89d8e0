"""
The views of a span a fact extraction reads (``ai_contrib/core/audience.py``,
:func:`listener_views`; ``docs/design.md``, "Privacy by audience").
"""

from ai_contrib.core.audience import common_audience, listener_views

WREN, TAMSIN, TOBIN = "#10", "#11", "#12"


def said(text, *audience):
    return {"id": text, "role": "user", "content": text,
            "metadata": {"audience": sorted(audience)} if audience else {}}


def test_each_view_is_what_one_listener_group_heard_widest_first():
    public = said("The inn opens at dawn.")  # no audience: in every view
    ledger = said("The guild ledger is bound in red leather.", WREN, TAMSIN, TOBIN)
    fair = said("The fair is on Sunday.", WREN, TAMSIN, TOBIN)
    cellar = said("It hides in the cellar.", WREN)
    views = listener_views([public, ledger, fair, cellar])
    assert [[m["id"] for m in view] for view in views] == [
        [public["id"], ledger["id"], fair["id"]],
        [public["id"], ledger["id"], fair["id"], cellar["id"]],
    ]
    # what a view's facts may be heard by: the whole group for the first, Wren for the second
    assert common_audience(views[0]) == sorted([WREN, TAMSIN, TOBIN])
    assert common_audience(views[1]) == [WREN]
    # control: one listener group, or none, is one view of the whole span
    assert listener_views([public, ledger, fair]) == [[public, ledger, fair]]
    assert listener_views([public]) == [[public]]


def test_a_view_showing_the_same_lines_as_another_is_read_once():
    together = said("The mill burned down.", WREN, TAMSIN)
    alone_a = said("My vault code is 7341.", WREN)
    alone_b = said("I owe Bram a silver.", TAMSIN)
    views = listener_views([together, alone_a, alone_b])
    # three groups, three different views; each line is in the view of its own audience
    assert len(views) == 3
    for line in (together, alone_a, alone_b):
        assert any(line in view for view in views)
    assert alone_b not in views[0] and alone_a not in views[0]
    assert len(listener_views([together, said("Again.", WREN, TAMSIN)])) == 1


def test_a_wider_group_is_read_before_a_longer_private_talk():
    # the gossip game's shape: one line two players heard, then a long talk with one of them
    mill = said("The old mill burned down.", WREN, TAMSIN)
    talk = [said(f"Between us, {i}.", WREN) for i in range(6)]
    views = listener_views([mill] + talk)
    # the view of both comes first, though Wren's alone covers more
    assert views == [[mill], [mill] + talk]
    assert common_audience(views[0]) == sorted([WREN, TAMSIN])
    # control: with room for one view, the one covering the most is the one read
    assert listener_views([mill] + talk, limit=1) == [[mill] + talk]
    assert listener_views([mill, said("Again.", WREN, TAMSIN), talk[0]], limit=1) == [
        [mill, said("Again.", WREN, TAMSIN)]]


def test_every_group_is_read_before_the_groups_it_contains():
    lines = [said("a", WREN, TAMSIN, TOBIN), said("b", WREN, TAMSIN), said("c", WREN),
             said("d", TOBIN), said("e", WREN), said("f", WREN), said("g", TOBIN, WREN)]
    order = [common_audience(view) for view in listener_views(lines)]
    assert len(order) == 5
    for i, wide in enumerate(order):
        for narrow in order[:i]:
            assert not set(narrow) < set(wide), order
