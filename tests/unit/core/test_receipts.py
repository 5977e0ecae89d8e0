"""A reply's receipt in words (``ai_contrib.core.receipts``; ``docs/design.md``, "Reply
receipts", "Recall notes")."""

from ai_contrib.core.receipts import describe_recall


def test_the_recall_line_names_the_notes_given_up_for_room():
    recall = {"asks": "past", "allowance": 216, "left_out": 3, "room_limited": True,
              "follows": False, "dropped": 2}
    assert describe_recall(recall) == ("asks about the past: new memories up to 216 tokens; "
                                       "3 left out for time; 2 earlier note(s) given up")
    # none given up (or a receipt written before the field): nothing said of it
    assert describe_recall(dict(recall, dropped=0)).endswith("3 left out for time")
    assert "given up" not in describe_recall({k: v for k, v in recall.items()
                                              if k != "dropped"})
    assert describe_recall(None) == ""
