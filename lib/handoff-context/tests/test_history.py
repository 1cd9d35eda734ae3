"""Key history (issue 21 item 3) as a state machine: whatever sequence of key sets a source
answers with, the windows say exactly when each key was shown, and two writers that apply
the same fetches (one of them repeating some) agree."""

from __future__ import annotations

from handoff_context.sources import InMemoryHistory, PublishedKey
from hypothesis import given
from hypothesis import strategies as st

KEYS = [PublishedKey(f"k{i}", f"t{i}", f'{{"kid":"k{i}"}}') for i in range(4)]
fetches = st.lists(st.frozensets(st.sampled_from(range(4))), min_size=1, max_size=12)


def replay(history: InMemoryHistory, sets: list[frozenset[int]]) -> None:
    for step, shown in enumerate(sets):
        history.merge(source="s", fetched_at=100 + 10 * step, keys=[KEYS[i] for i in shown])


@given(fetches)
def test_windows_follow_the_answers(sets: list[frozenset[int]]) -> None:
    history = InMemoryHistory()
    replay(history, sets)
    windows = history.windows()
    for i, key in enumerate(KEYS):
        mine = sorted((w for w in windows if w.kid == key.kid), key=lambda w: w.generation)
        shown_at = [100 + 10 * n for n, s in enumerate(sets) if i in s]
        if not shown_at:
            assert mine == []
            continue
        # Open now exactly when the last answer shows it; never more than one open window.
        assert [w.stopped_at is None for w in mine].count(True) == (i in sets[-1])
        assert mine[0].first_seen == shown_at[0]
        assert [w.generation for w in mine] == list(range(len(mine)))
        for w in mine:
            # A window covers answers that showed the key, and ends at the first that did not.
            assert w.first_seen in shown_at
            if w.stopped_at is not None:
                assert w.stopped_at not in shown_at and w.stopped_at > w.first_seen
                inside = [t for t in shown_at if w.first_seen <= t < w.stopped_at]
                assert inside and max(inside) == w.stopped_at - 10


@given(fetches, st.data())
def test_a_writer_that_repeats_fetches_agrees(
    sets: list[frozenset[int]], data: st.DataObject
) -> None:
    one, two = InMemoryHistory(), InMemoryHistory()
    replay(one, sets)
    for step, shown in enumerate(sets):
        keys = [KEYS[i] for i in shown]
        for _ in range(data.draw(st.integers(1, 3))):  # another instance merging the same fetch
            two.merge(source="s", fetched_at=100 + 10 * step, keys=keys)
    assert sorted(one.windows(), key=repr) == sorted(two.windows(), key=repr)
