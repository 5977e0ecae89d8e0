"""
A small conversation in LoCoMo's format (``benchmarks/locomo.py``), for the benchmark's unit
tests and its run in ``tests/bench/``: two sessions between Alice (the player) and Bob (the
NPC), the answers verbatim in the lines, and a sentinel in every scoring-only field.
"""

#: what only the scoring-only fields (adversarial answer, summaries, observations) say: a replay
#: that read them would carry it into a request or a file
SENTINEL = "zanzibar-scoring-only"


def _turn(session, n, speaker, text, **extra):
    return {"speaker": speaker, "dia_id": f"D{session}:{n}", "text": text, **extra}


def synthetic_sample():
    """Two sessions between Alice (the player) and Bob (the NPC); the answers are verbatim."""
    filler = [
        "That sounds lovely, tell me more about your week and the people you met.",
        "It was busy, the market was crowded and the weather kept changing all day long.",
    ]
    s1 = [
        _turn(1, 1, "Alice", "Hi Bob! I adopted a cat named Pickle last weekend."),
        _turn(1, 2, "Bob", "Congratulations! I just got back from a trip to Lisbon."),
        _turn(1, 3, "Alice", "Lisbon must have been wonderful. Look at this.",
              blip_caption="a photo of a red bicycle leaning on a wall"),
        _turn(1, 4, "Bob", "Nice bike! I also spent two days in Porto with my cousin."),
    ]
    s1 += [_turn(1, 5 + i, "Alice" if i % 2 == 0 else "Bob", f"{filler[i % 2]} ({i})")
           for i in range(24)]
    s2 = [
        _turn(2, 1, "Alice", "I have decided to study marine biology next year."),
        _turn(2, 2, "Bob", "That suits you, you always loved the sea."),
    ]
    s2 += [_turn(2, 3 + i, "Alice" if i % 2 == 0 else "Bob", f"{filler[i % 2]} [{i}]")
           for i in range(24)]
    return {
        "sample_id": "synthetic-1",
        "conversation": {
            "speaker_a": "Alice",
            "speaker_b": "Bob",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": s1,
            "session_2_date_time": "10:04 am on 20 June, 2023",
            "session_2": s2,
        },
        "qa": [
            {"question": "What is the name of Alice's cat?", "answer": "Pickle",
             "evidence": ["D1:01"], "category": 4},
            {"question": "When did Alice tell Bob about her cat?", "answer": "8 May 2023",
             "evidence": ["D:1:1"], "category": 2},
            {"question": "Which cities did Bob visit?", "answer": "Lisbon, Porto",
             "evidence": ["D1:2; D1:4"], "category": 1},
            {"question": "What might Alice study?", "answer": "marine biology; she loves the sea",
             "evidence": ["D2:1", "D2:2"], "category": 3},
            {"question": "What did Alice show Bob a photo of?", "answer": "a red bicycle",
             "evidence": ["D1:3"], "category": 4},
            {"question": "What is the name of Bob's dog?", "adversarial_answer": SENTINEL,
             "evidence": ["D1:1"], "category": 5},
        ],
        "event_summary": {"events_session_1": {"Alice": [SENTINEL]}},
        "observation": {"session_1_observation": {"Alice": [[SENTINEL, "D1:1"]]}},
        "session_summary": {"session_1_summary": SENTINEL},
    }
