"""The store's reads and the operators' flag actions (what the HTTP API builds on)."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine

from app.store import dashboard
from app.store.db import transaction
from app.store.queries import (
    FlagAction,
    FlagActionError,
    act_on_flag,
    dialog_tree,
    flag_actions,
    get_element,
    get_hop,
    list_agents,
    list_dialogs,
    list_flags,
    list_hops,
)
from tests.conftest import World
from tests.store.builders import T0, bundle, digest, hops, offer, rec, run, st, status, twin

DUE = T0 + 6 + 3600  # the lost-outcome deadline of the accepted offer below


def _lost_outcome(engine: Engine, world: World) -> bytes:
    o = offer(world.planner, world.coder)
    accepted = status(world.coder, o, "accepted", iat=T0 + 5)
    run(engine, world.trust, [rec(bundle(o), T0 + 1, world.coder.iss), rec(st(accepted), T0 + 6)])
    hops(engine, now=DUE)
    return o


def _only_flag_id(engine: Engine) -> int:
    with transaction(engine) as session:
        [flag] = list_flags(session, now=DUE)
        assert flag.flag.id is not None
        return flag.flag.id


def test_an_acknowledged_flag_is_resolved_automatically_when_its_condition_clears(
    engine: Engine, world: World
) -> None:
    o = _lost_outcome(engine, world)
    flag_id = _only_flag_id(engine)
    with transaction(engine) as session:
        done = act_on_flag(
            session,
            flag_id=flag_id,
            actor="alice",
            action=FlagAction.ACKNOWLEDGE,
            now=DUE + 1,
            note="asking the coder",
        )
        assert (done.status, done.flag.note) == ("acknowledged", "asking the coder")
    completed = status(world.coder, o, "completed", iat=DUE + 10)
    run(engine, world.trust, [rec(st(completed), DUE + 11)], now=DUE + 20)
    with transaction(engine) as session:
        [flag] = list_flags(session, now=DUE + 20)
        assert flag.status == "resolved"  # kept: someone acted on it
        log = [(a.actor, a.action) for a in flag_actions(session, flag_id=flag_id)]
    assert log == [("alice", "acknowledge"), ("system", "resolve")]


def test_snooze_runs_out(engine: Engine, world: World) -> None:
    _lost_outcome(engine, world)
    flag_id = _only_flag_id(engine)
    with transaction(engine) as session:
        with pytest.raises(FlagActionError):
            act_on_flag(session, flag_id=flag_id, actor="bob", action=FlagAction.SNOOZE, now=DUE)
        act_on_flag(
            session,
            flag_id=flag_id,
            actor="bob",
            action=FlagAction.SNOOZE,
            now=DUE,
            snoozed_until=DUE + 600,
        )
    with transaction(engine) as session:
        assert [f.status for f in list_flags(session, now=DUE + 599)] == ["snoozed"]
        assert len(list_flags(session, now=DUE + 599, status="snoozed")) == 1
        assert list_flags(session, now=DUE + 599, status="open") == []
        assert [f.status for f in list_flags(session, now=DUE + 600)] == ["open"]
        assert len(list_flags(session, now=DUE + 600, status="open")) == 1
        act_on_flag(
            session, flag_id=flag_id, actor="bob", action=FlagAction.ASSIGN, now=DUE, assignee="eve"
        )
        with pytest.raises(FlagActionError):
            act_on_flag(session, flag_id=999_999, actor="bob", action=FlagAction.RESOLVE, now=DUE)


def test_a_resolved_equivocation_reopens_on_new_evidence(engine: Engine, world: World) -> None:
    x = offer(world.planner, world.coder)
    y = twin(world.planner, x, aud=world.tester.iss)
    run(engine, world.trust, [rec(bundle(x), T0 + 1), rec(bundle(y), T0 + 2)])
    with transaction(engine) as session:
        [flag] = list_flags(session, now=T0 + 30)
        assert flag.flag.id is not None
        act_on_flag(
            session, flag_id=flag.flag.id, actor="alice", action=FlagAction.RESOLVE, now=T0 + 40
        )
    # The same evidence again changes nothing.
    run(engine, world.trust, [rec(bundle(y), T0 + 2)], now=T0 + 50)
    with transaction(engine) as session:
        assert [f.status for f in list_flags(session, now=T0 + 50)] == ["resolved"]
    z = twin(world.planner, x, task="other")
    run(engine, world.trust, [rec(bundle(z), T0 + 3)], now=T0 + 60)
    with transaction(engine) as session:
        [flag] = list_flags(session, now=T0 + 60)
        assert (flag.status, len(flag.flag.evidence)) == ("open", 3)
        assert flag.flag.id is not None
        log = [(a.actor, a.action) for a in flag_actions(session, flag_id=flag.flag.id)]
    assert log == [("alice", "resolve"), ("system", "reopen")]


def test_hop_listing_filters_and_pages(engine: Engine, world: World) -> None:
    offers = [offer(world.planner, world.coder, iat=T0 + i) for i in range(3)]
    offers.append(offer(world.coder, world.tester, iat=T0 + 3, dialog="other"))
    run(engine, world.trust, [rec(bundle(o), T0 + 5) for o in offers])
    with transaction(engine) as session:
        every = list_hops(session)
        assert [h.hop.offer for h in every] == [digest(o) for o in offers]  # by iat
        first = list_hops(session, limit=2)
        h = first[-1].hop
        rest = list_hops(session, after=(h.iat, h.iss, h.hop))
        assert [x.hop.offer for x in first + rest] == [x.hop.offer for x in every]
        assert len(list_hops(session, dialog="other")) == 1
        assert len(list_hops(session, agent=world.tester.iss)) == 1
        assert len(list_hops(session, agent=world.coder.iss)) == 4
        assert len(list_hops(session, since=T0 + 1, until=T0 + 2)) == 2
        found = get_hop(session, offer=digest(offers[0]))
        assert found is not None and found.to_json()["state"] == "offered"
        assert get_hop(session, offer=b"\0" * 32) is None
        element = get_element(session, digest=digest(offers[0]))
        assert element is not None and (element.octets, element.form) == (offers[0], "jws")


def test_dialogs_trees_and_agents(engine: Engine, world: World) -> None:
    a = offer(world.assistant, world.planner, iat=T0)
    b = offer(world.planner, world.coder, iat=T0 + 5, prev=digest(a))
    c = offer(world.planner, world.tester, iat=T0 + 6, prev=digest(a))
    other = offer(world.coder, world.tester, iat=T0 + 7, dialog="other")
    run(engine, world.trust, [rec(bundle(x), T0 + 8) for x in (a, b, c, other)])
    with transaction(engine) as session:
        dialogs = list_dialogs(session)
        assert [(d.dialog, d.hops) for d in dialogs] == [("ctx-7c1e", 3), ("other", 1)]
        assert [d.dialog for d in list_dialogs(session, after="ctx-7c1e")] == ["other"]
        tree = dialog_tree(session, dialog="ctx-7c1e")
        # One planner delegating to a coder and a tester is one tree.
        assert [(n.hop.hop.offer, n.parent) for n in tree] == [
            (digest(a), None),
            (digest(b), digest(a)),
            (digest(c), digest(a)),
        ]
        agents = {x.agent: (x.issued, x.received) for x in list_agents(session)}
    assert agents == {
        world.assistant.iss: (1, 0),
        world.planner.iss: (2, 1),
        world.coder.iss: (1, 1),
        world.tester.iss: (0, 2),
    }


def test_the_reads_rewritten_for_a_large_store_answer_as_before(
    engine: Engine, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    # bench/query_scale.py: the flagged-hop filter is a join, the dialog tree reads its flags
    # and links by dialog, the hop page's total is capped, agents are found by index walk.
    x = offer(world.planner, world.coder, iat=T0)
    y = twin(world.planner, x, aud=world.tester.iss)  # an equivocation on x's hop
    others = [offer(world.coder, world.tester, iat=T0 + i, prev=digest(x)) for i in (1, 2, 3)]
    received = [rec(bundle(x), T0 + 4), *(rec(bundle(o), T0 + 5) for o in (y, *others))]
    run(engine, world.trust, received)  # x first: the hop's offer (the canonical rule)
    monkeypatch.setattr(dashboard, "COUNT_CAP", 2)
    with transaction(engine) as session:
        flagged = list_hops(session, flag="equivocation")
        assert [(h.hop.offer, h.flags) for h in flagged] == [(digest(x), ("equivocation",))]
        assert list_hops(session, flag="lost-outcome") == []
        tree = dialog_tree(session, dialog="ctx-7c1e")
        assert [(n.hop.hop.offer, n.hop.flags, n.parent) for n in tree] == [
            (digest(x), ("equivocation",), None),
            *((digest(o), (), digest(x)) for o in others),
        ]
        shown, total = dashboard.find_hops(session, limit=1)
        assert (len(shown), total) == (1, 3)  # 4 hops, counted up to the cap + 1
        assert dashboard.find_hops(session, agent=world.planner.iss)[1] == 1
        found = dashboard.search(session, text=world.tester.iss.split("/")[-1])
        assert found.agents == [world.tester.iss]
        assert dashboard.search(session, text="no-such-agent").agents == []
