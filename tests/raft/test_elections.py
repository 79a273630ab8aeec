"""The quorum elects one leader per epoch, commits on a majority, and survives its leader's death: Raft's
classic cases on virtual time (tests/raft/harness.py), each shown to fail with its rule switched off."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from raft.raft_client import CommittedTruncationError, RaftClient, Role
from sim.loop import run
from sim.network import LinkShape
from tests.raft.harness import Quorum


def test_three_voters_elect_one_leader_and_commit_on_every_voter(tmp_path: Path) -> None:
    async def scenario() -> None:
        quorum = Quorum(tmp_path)
        quorum.start_all()
        leader = await quorum.leader()
        await quorum.append([b"a", b"b"])
        await quorum.append([b"c"])
        await quorum.wait_for(lambda: all(r.values() == [b"a", b"b", b"c"] for r in quorum.recorders.values()))
        assert [c.node_id for c in quorum.leaders()] == [leader.node_id]
        assert len({c.epoch for c in quorum.nodes.values()}) == 1
        await quorum.close()

    run(scenario())


def test_a_single_voter_elects_itself_at_once(tmp_path: Path) -> None:
    async def scenario() -> None:
        quorum = Quorum(tmp_path, voters=(7,))
        quorum.start_all()
        leader = await quorum.leader(timeout_s=0.5)
        assert leader.node_id == 7
        await quorum.append([b"x"])
        assert quorum.recorders[7].values() == [b"x"]
        await quorum.close()

    run(scenario())


def test_the_leaders_death_elects_another_that_keeps_every_committed_record(tmp_path: Path) -> None:
    async def scenario() -> None:
        quorum = Quorum(tmp_path)
        quorum.start_all()
        first = await quorum.leader()
        await quorum.append([b"one", b"two"])
        await quorum.kill(first.node_id)
        loop = asyncio.get_running_loop()
        killed_at = loop.time()
        second = await quorum.leader()
        elected_after = loop.time() - killed_at
        assert second.node_id != first.node_id and second.epoch > first.epoch
        # A kill is seen at once (the connection is refused), not after the fetch timeout.
        assert elected_after < quorum.config.election_timeout_ms / 1000.0 + 1.0
        await quorum.append([b"three"])
        quorum.start(first.node_id)  # the old leader comes back as a follower and catches up
        await quorum.wait_for(
            lambda: all(r.values()[-3:] == [b"one", b"two", b"three"] for r in quorum.recorders.values())
        )
        await quorum.close()

    run(scenario())


def test_an_old_leaders_uncommitted_records_are_truncated_when_it_rejoins(tmp_path: Path) -> None:
    async def scenario() -> None:
        quorum = Quorum(tmp_path)
        quorum.start_all()
        old = await quorum.leader()
        await quorum.append([b"committed"])
        others = [n for n in quorum.node_ids if n != old.node_id]
        for other in others:  # the old leader is cut off, both ways
            quorum.network.cut(old.node_id, other)
            quorum.network.cut(other, old.node_id)
        stray = old.append([b"never-committed"])  # appended, but no majority will ever have it
        await quorum.wait_for(lambda: any(quorum.nodes[o].is_leader for o in others))
        await quorum.append([b"after"])
        assert not old.is_leader  # it resigned: no FETCH from a majority (check quorum)
        quorum.network.heal()
        await quorum.wait_for(lambda: quorum.recorders[old.node_id].values() == [b"committed", b"after"])
        assert old.log.log_end_offset == quorum.nodes[others[0]].log.log_end_offset
        assert all(b"never-committed" not in r.values() for r in quorum.recorders.values())
        assert stray >= 0
        await quorum.close()

    run(scenario())


def test_an_old_leader_whose_uncommitted_tail_outruns_the_new_leaders_log_rejoins(tmp_path: Path) -> None:
    """A leader paused, then woken alone, appends more than the new leader's whole log holds (a controller
    fences every broker whose heartbeats stopped while it slept). It fetches from past the new leader's log
    end; the answer must be the diverging epoch, so it truncates and catches up, not an OFFSET_OUT_OF_RANGE
    it would get on every FETCH, never to follow again."""

    async def scenario() -> None:
        quorum = Quorum(tmp_path)
        quorum.start_all()
        old = await quorum.leader()
        await quorum.append([b"committed"])
        others = [n for n in quorum.node_ids if n != old.node_id]
        for other in others:
            quorum.network.cut(old.node_id, other)
            quorum.network.cut(other, old.node_id)
        for i in range(20):  # one batch each: well past what the new leader will hold
            old.append([b"stray-%d" % i])
        await quorum.wait_for(lambda: any(quorum.nodes[o].is_leader for o in others))
        new = next(quorum.nodes[o] for o in others if quorum.nodes[o].is_leader)
        assert old.log.log_end_offset > new.log.log_end_offset
        await quorum.wait_for(lambda: not old.is_leader)  # check quorum
        quorum.network.heal()
        await quorum.append([b"after"])
        await quorum.wait_for(
            lambda: quorum.recorders[old.node_id].values() == [b"committed", b"after"], timeout_s=10, what="rejoined"
        )
        assert old.log.log_end_offset == new.log.log_end_offset
        await quorum.close()

    run(scenario())


def _missing_committed_record_scenario(tmp_path: Path, vote_checks_logs: bool) -> tuple[int, list[bytes], list[bytes]]:
    """Voters 1-3; B is cut off while X commits on the leader and A; the leader dies; B comes back and runs
    for election first. Who wins, and what each of A and B then holds in its log."""

    async def scenario() -> tuple[int, list[bytes], list[bytes]]:
        quorum = Quorum(tmp_path)
        if not vote_checks_logs:
            quorum.patch = lambda c: setattr(c, "_log_up_to_date", lambda epoch, offset: True)
        quorum.start_all()
        leader = await quorum.leader()
        a, b = (n for n in quorum.node_ids if n != leader.node_id)
        await quorum.append([b"before"])
        await quorum.wait_for(lambda: quorum.recorders[b].values() == [b"before"])
        quorum.network.cut(leader.node_id, b)
        quorum.network.cut(b, leader.node_id)
        await quorum.append([b"X"])  # committed by the leader and A
        await quorum.kill(leader.node_id)
        quorum.network.heal()
        quorum.nodes[b]._to_candidate()  # B, which lacks X, asks for votes before A notices anything
        winner = await quorum.leader()
        result = winner.node_id, *(_log_values(quorum.nodes[n]) for n in (a, b))
        await quorum.close()
        return result

    return run(scenario())  # type: ignore[no-any-return]


def _log_values(client: RaftClient) -> list[bytes]:
    batches = client.log.batches(client.log.log_start_offset, client.log.log_end_offset)
    return [v for batch in batches if not batch.is_control for v in batch.values]


def test_a_voter_missing_a_committed_record_cannot_be_elected(tmp_path: Path) -> None:
    winner, a_log, b_log = _missing_committed_record_scenario(tmp_path, vote_checks_logs=True)
    assert b"X" in a_log and b"X" not in b_log[:2]
    assert winner != 0 and b"X" in (a_log if winner else b_log)
    assert b_log[:1] == [b"before"]


def test_without_the_vote_rule_the_voter_missing_it_wins(tmp_path: Path) -> None:
    """The rule switched off: B is elected without X, a record a majority had committed; A, which
    holds X, is then told to cut it (and refuses: CommittedTruncationError)."""
    winner, a_log, b_log = _missing_committed_record_scenario(tmp_path, vote_checks_logs=False)
    assert b"X" in a_log and b"X" not in b_log


def _split_vote_scenario(tmp_path: Path, randomized: bool) -> bool:
    """The leader dies; both followers see it at once and, without randomness, run at the same instant,
    each voting for itself: a split vote. Is a new leader elected within 30 virtual seconds? (Without
    randomness every delay is half its range, not 0: with no delay at all the candidates, each told no at
    once by the dead leader's refused connection, would retry in lockstep every few milliseconds.)"""

    async def scenario() -> bool:
        quorum = Quorum(tmp_path)
        quorum.network.base = LinkShape(0.5, 0.0)  # no jitter: only the timers can break the tie
        quorum.start_all()
        leader = await quorum.leader()
        await quorum.append([b"x"])
        if not randomized:
            for client in quorum.nodes.values():
                client._rng.randrange = lambda n: n // 2  # type: ignore[method-assign]
        await quorum.kill(leader.node_id)
        try:
            await quorum.leader(timeout_s=30.0)
            elected = True
        except AssertionError:
            elected = False
        await quorum.close()
        return elected

    return run(scenario())  # type: ignore[no-any-return]


def _record_runs(quorum: Quorum, nodes: list[RaftClient]) -> list[tuple[float, int, str, int]]:
    """(virtual time, node, "prospective" | "candidate", epoch) each time one of `nodes` starts to run."""
    loop = asyncio.get_running_loop()
    runs: list[tuple[float, int, str, int]] = []
    for client in nodes:
        for what in ("prospective", "candidate"):
            original = getattr(client, f"_to_{what}")

            def wrapped(original: Any = original, client: RaftClient = client, what: str = what) -> None:
                original()
                runs.append((loop.time(), client.node_id, what, client.epoch))

            setattr(client, f"_to_{what}", wrapped)
    return runs


def test_after_a_leaders_death_a_split_vote_ends_at_once_on_the_dead_leaders_refusal(tmp_path: Path) -> None:
    """Both followers find the leader gone at the same instant and run in one epoch, each voting for
    itself. The dead leader's vote never comes (its connection is refused, and a vote is asked once per
    election), so each candidate knows it has lost as soon as the other turns it down: it backs off at
    once, instead of waiting out its election timeout (1 to 2 s) first."""

    async def scenario() -> None:
        quorum = Quorum(tmp_path)
        quorum.network.base = LinkShape(0.5, 0.0)
        quorum.start_all()
        leader = await quorum.leader()
        await quorum.append([b"x"])
        followers = [c for c in quorum.nodes.values() if c is not leader]
        for client in followers:
            client._rng.randrange = lambda n: 0  # type: ignore[method-assign]  # they run together
        runs = _record_runs(quorum, followers)
        await quorum.kill(leader.node_id)
        await quorum.wait_for(lambda: sum(1 for r in runs if r[2] == "candidate") >= 2, what="both running")
        for client in followers:
            del client._rng.randrange  # random again: the next try breaks the tie
        (t1, _, _, epoch1), (t2, _, _, epoch2) = [r for r in runs if r[2] == "candidate"][:2]
        assert epoch1 == epoch2 and t1 == t2  # a split vote
        loop = asyncio.get_running_loop()
        await quorum.wait_for(
            lambda: all(c.role is not Role.CANDIDATE or c.epoch != epoch1 for c in followers), timeout_s=5
        )
        assert loop.time() - t1 < 0.1  # not the election timeout: quorum.config.election_timeout_ms
        winner = await quorum.leader()
        assert winner in followers and winner.epoch > epoch1
        await quorum.close()

    run(scenario())


def test_a_follower_runs_after_the_delay_it_drew_when_its_leader_was_found_gone(tmp_path: Path) -> None:
    """A follower whose FETCHes to a dead leader are refused (one every 100 ms) draws its random delay once,
    at the first refusal: a draw at each refusal would keep the least of them, and the followers' runs would
    bunch up early, where they collide more often. Here the first draw is the longest delay there is and
    every later one would be 0."""

    async def scenario() -> None:
        quorum = Quorum(tmp_path)
        quorum.start_all()
        leader = await quorum.leader()
        await quorum.append([b"x"])
        followers = [c for c in quorum.nodes.values() if c is not leader]
        for client in followers:
            draws = iter([True])
            client._rng.randrange = lambda n, draws=draws: n - 1 if next(draws, False) else 0  # type: ignore[method-assign]
        runs = _record_runs(quorum, followers)
        loop = asyncio.get_running_loop()
        killed_at = loop.time()
        await quorum.kill(leader.node_id)
        await quorum.wait_for(lambda: bool(runs), what="a follower running")
        for client in followers:
            del client._rng.randrange
        longest_delay_s = (quorum.config.election_timeout_ms // 2 - 1) / 1000.0
        assert runs[0][0] - killed_at >= longest_delay_s
        await quorum.leader()
        await quorum.close()

    run(scenario())


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_split_vote_is_resolved_by_the_randomised_timeouts(tmp_path: Path, seed: int) -> None:
    assert _split_vote_scenario(tmp_path / str(seed), randomized=True)


def test_without_randomised_timeouts_the_split_vote_repeats_forever(tmp_path: Path) -> None:
    assert not _split_vote_scenario(tmp_path, randomized=False)


def test_a_vote_is_remembered_across_a_restart(tmp_path: Path) -> None:
    async def scenario() -> None:
        quorum = Quorum(tmp_path)
        voter = quorum.start(1)
        from protocol.messages import VoteRequest

        assert voter.handle_vote(VoteRequest(2, 5, 0, 0)).vote_granted
        await quorum.kill(1)
        again = quorum.start(1)
        assert again.epoch == 5 and again.voted_id == 2
        assert not again.handle_vote(VoteRequest(3, 5, 0, 0)).vote_granted  # one vote per epoch
        assert again.handle_vote(VoteRequest(2, 5, 0, 0)).vote_granted  # the same candidate asking again
        await quorum.close()

    run(scenario())


def test_without_the_durable_vote_a_restarted_voter_votes_twice(tmp_path: Path) -> None:
    async def scenario() -> bool:
        quorum = Quorum(tmp_path)
        quorum.patch = lambda c: setattr(c._store, "write", lambda state: None)
        voter = quorum.start(1)
        from protocol.messages import VoteRequest

        voter.handle_vote(VoteRequest(2, 5, 0, 0))
        await quorum.kill(1)
        again = quorum.start(1)
        granted = again.handle_vote(VoteRequest(3, 5, 0, 0)).vote_granted
        await quorum.close()
        return granted

    assert run(scenario())


def _rejoin_scenario(tmp_path: Path, pre_vote: bool) -> tuple[int, int]:
    """Voter C is cut off for 20 s, then comes back. The leader's epoch before and after."""

    async def scenario() -> tuple[int, int]:
        quorum = Quorum(tmp_path)
        if not pre_vote:
            quorum.patch = lambda c: setattr(c, "_to_prospective", c._to_candidate)
        quorum.start_all()
        leader = await quorum.leader()
        await quorum.append([b"x"])
        before = leader.epoch
        c = next(n for n in quorum.node_ids if n != leader.node_id)
        for other in quorum.node_ids:
            if other != c:
                quorum.network.cut(c, other)
                quorum.network.cut(other, c)
        await asyncio.sleep(20.0)
        quorum.network.heal()
        await asyncio.sleep(5.0)
        await quorum.append([b"y"])
        after = (await quorum.leader()).epoch
        await quorum.close()
        return before, after

    return run(scenario())  # type: ignore[no-any-return]


def test_a_voter_back_from_a_partition_does_not_disturb_the_leader(tmp_path: Path) -> None:
    before, after = _rejoin_scenario(tmp_path, pre_vote=True)
    assert after == before


def test_without_pre_vote_a_returning_voter_forces_an_election(tmp_path: Path) -> None:
    before, after = _rejoin_scenario(tmp_path, pre_vote=False)
    assert after > before


def test_a_voter_far_behind_loads_the_leaders_snapshot(tmp_path: Path) -> None:
    async def scenario() -> None:
        quorum = Quorum(tmp_path)
        quorum.start_all()
        leader = await quorum.leader()
        late = next(n for n in quorum.node_ids if n != leader.node_id)
        await quorum.kill(late)
        for i in range(20):
            await quorum.append([b"v%d" % i])
        leader.write_snapshot(quorum.recorders[leader.node_id].snapshot_values())
        assert leader.log.log_start_offset > 0
        await quorum.append([b"after-snapshot"])
        quorum.start(late)
        expected = [b"v%d" % i for i in range(20)] + [b"after-snapshot"]
        await quorum.wait_for(lambda: quorum.recorders[late].values() == expected, what="the late voter caught up")
        assert quorum.recorders[late].snapshots_loaded == 1
        assert quorum.nodes[late].log.log_start_offset == leader.log.log_start_offset
        await quorum.close()

    run(scenario())


def test_observers_replicate_but_never_count_towards_a_commit(tmp_path: Path) -> None:
    async def scenario() -> None:
        quorum = Quorum(tmp_path, observers=(100,))
        quorum.start_all()
        leader = await quorum.leader()
        await quorum.append([b"seen"])
        await quorum.wait_for(lambda: quorum.recorders[100].values() == [b"seen"])
        assert quorum.nodes[100].role is Role.FOLLOWER and quorum.nodes[100].leader_id == leader.node_id
        for voter in [n for n in (1, 2, 3) if n != leader.node_id]:
            await quorum.kill(voter)
        offset = leader.append([b"stuck"])
        await asyncio.sleep(1.0)
        assert leader.high_watermark <= offset  # the observer has it, but no majority of voters does
        await quorum.close()

    run(scenario())


def test_truncating_a_committed_record_is_refused(tmp_path: Path) -> None:
    async def scenario() -> None:
        quorum = Quorum(tmp_path)
        quorum.start_all()
        await quorum.leader()
        await quorum.append([b"a"])
        follower: RaftClient = next(c for c in quorum.nodes.values() if not c.is_leader)
        await quorum.wait_for(lambda: follower.delivered_offset > 1)
        with pytest.raises(CommittedTruncationError):
            follower._truncate_diverging(0, 0)
        await quorum.close()

    run(scenario())


def _resigned_leader_scenario(tmp_path: Path, seed: int, following_is_hearing: bool = False) -> int:
    """Leader L is cut off from both followers with a record of its own no follower has; it resigns (check
    quorum) while C stays away. L and B hear each other again, and B asks for pre-votes before L does. How
    long, in virtual ms from that heal, the quorum goes without a leader (30,000: not within 30 s)."""

    async def scenario() -> int:
        quorum = Quorum(tmp_path / str(seed), seed=seed)
        if following_is_hearing:  # the rule off: becoming a follower counts as hearing the leader

            def patch(client: RaftClient) -> None:
                honest = client._to_follower

                def to_follower(epoch: int, leader_id: int) -> None:
                    honest(epoch, leader_id)
                    client._last_leader_contact_ms = client._time.milliseconds()

                client._to_follower = to_follower  # type: ignore[method-assign]

            quorum.patch = patch
        quorum.start_all()
        leader = await quorum.leader()
        await quorum.append([b"x"])
        await quorum.wait_for(lambda: all(n.high_watermark == leader.high_watermark for n in quorum.nodes.values()))
        b, c = (n for n in quorum.node_ids if n != leader.node_id)
        for x, y in ((leader.node_id, b), (leader.node_id, c), (b, c)):
            quorum.network.cut(x, y)
            quorum.network.cut(y, x)
        leader.append([b"uncommitted"])  # on L alone: B's log is behind L's from here on
        old_epoch = leader.epoch
        await quorum.wait_for(lambda: leader.role is Role.RESIGNED, what="L resigns (check quorum)")
        quorum.network.uncut(leader.node_id, b)
        quorum.network.uncut(b, leader.node_id)
        loop = asyncio.get_running_loop()
        healed_at = loop.time()
        # B's fetch deadline passes now (it would within 2 s): its pre-vote reaches L before L runs itself.
        # L refuses it (B's log is behind), naming itself the epoch's leader, and B follows L again.
        quorum.nodes[b]._to_prospective()
        try:
            await quorum.wait_for(
                lambda: any(n.role is Role.LEADER and n.epoch > old_epoch for n in quorum.nodes.values()),
                timeout_s=30.0,
                what="a new leader",
            )
        except AssertionError:
            return 30_000
        finally:
            await quorum.close()
        assert all(n.leader_id != n.node_id or n.role is Role.LEADER for n in quorum.nodes.values())
        return int((loop.time() - healed_at) * 1000)

    return run(scenario())  # type: ignore[no-any-return]


@pytest.mark.timeout(60)
def test_a_resigned_leader_and_a_voter_behind_it_elect_a_leader(tmp_path: Path) -> None:
    # B, behind L, cannot win; L can, once B grants its pre-vote. B's pre-vote is refused by L (B's log is
    # behind) with L named as the epoch's leader; B follows L again, but has not heard it, so it grants.
    # Fetch timeout 2 s, election timeout 1-2 s: a few rounds at most.
    assert _resigned_leader_scenario(tmp_path, seed=1) < 10_000


@pytest.mark.timeout(60)
def test_if_following_counted_as_hearing_a_resigned_leaders_quorum_stays_leaderless(tmp_path: Path) -> None:
    # The rule off: B, back to following L on each refusal, refuses L's pre-vote as one that hears its
    # leader, for good (simulator seed 45 of the controller sweep, where L also came to follow itself).
    assert _resigned_leader_scenario(tmp_path, seed=1, following_is_hearing=True) == 30_000


def _earlier_epoch_commit_scenario(tmp_path: Path, epoch_start_rule: bool) -> tuple[list[bytes], list[bytes]]:
    """Raft's figure 8 on three voters. A, cut off, appends r (epoch 1) alone. N wins epoch 2 with O's
    vote and is cut off at once, so O never gets N's LeaderChange (epoch 2) at r's offset. A and O hear each
    other again: A wins epoch 3 and sends O r alone (r is over a FETCH's 1 MiB; its own LeaderChange comes
    in the next answer). O fetches from past r: a majority holds r now, but nothing of epoch 3 yet. That
    answer, and A, are lost to O; N and O hear each other: N, whose log ends in epoch 2, wins epoch 4 and O
    truncates r. What A took as committed, and what the quorum ends with."""

    async def scenario() -> tuple[list[bytes], list[bytes]]:
        quorum = Quorum(tmp_path)
        net = quorum.network

        def isolate(node: int) -> None:
            for other in quorum.node_ids:
                if other != node:
                    net.cut(node, other)
                    net.cut(other, node)

        def join(x: int, y: int) -> None:
            net.uncut(x, y)
            net.uncut(y, x)

        cut_off_epoch_2: list[int] = []

        def patch(client: RaftClient) -> None:
            honest_to_leader = client._to_leader

            def to_leader() -> None:
                honest_to_leader()
                if client.epoch == 2:  # N: cut off as it wins, before anything of epoch 2 leaves it
                    cut_off_epoch_2.append(client.node_id)
                    for other in quorum.node_ids:
                        if other != client.node_id:
                            net.cut(client.node_id, other)
                            net.cut(other, client.node_id)

            client._to_leader = to_leader  # type: ignore[method-assign]
            if not epoch_start_rule:

                def commit_on_majority() -> None:  # the rule off: a majority suffices, whatever the epoch
                    offsets = sorted((client._progress[v].end_offset for v in client.voters), reverse=True)
                    majority = offsets[len(client.voters) // 2]
                    if majority > client.high_watermark:
                        client._set_high_watermark(majority)
                        client._wake_fetches()

                client._maybe_advance_leader_hw = commit_on_majority  # type: ignore[method-assign]

        quorum.patch = patch
        quorum.start_all()
        a = await quorum.leader()
        assert a.epoch == 1
        await quorum.append([b"base"])
        await quorum.wait_for(lambda: all(n.high_watermark == a.high_watermark for n in quorum.nodes.values()))
        isolate(a.node_id)
        r = b"r" * (1_200_000)
        r_offset = a.append([r])
        await quorum.wait_for(lambda: bool(cut_off_epoch_2), what="a leader of epoch 2")
        n = cut_off_epoch_2[0]
        o = next(x for x in quorum.node_ids if x not in (a.node_id, n))
        assert quorum.nodes[o].log.log_end_offset == r_offset  # O never got N's LeaderChange

        honest_record = a._record_fetch

        def record_fetch(replica_id: int, fetch_offset: int) -> Any:
            progress = honest_record(replica_id, fetch_offset)
            if replica_id == o and fetch_offset == r_offset + 1:  # O holds r: its answer and A are lost
                isolate(a.node_id)
            return progress

        a._record_fetch = record_fetch  # type: ignore[method-assign]
        join(a.node_id, o)
        await quorum.wait_for(lambda: quorum.nodes[o].log.log_end_offset == r_offset + 1, what="O fetched r")
        join(n, o)
        await quorum.wait_for(
            lambda: quorum.nodes[n].is_leader and quorum.nodes[o].high_watermark == quorum.nodes[n].high_watermark,
            what="N leads again and O follows it",
        )
        committed_on_a = quorum.recorders[a.node_id].values()
        final = quorum.recorders[o].values()
        await quorum.close()
        return committed_on_a, final

    return run(scenario())  # type: ignore[no-any-return]


@pytest.mark.timeout(60)
def test_a_leader_commits_an_earlier_epochs_record_only_with_one_of_its_own(tmp_path: Path) -> None:
    committed_on_a, final = _earlier_epoch_commit_scenario(tmp_path, epoch_start_rule=True)
    assert committed_on_a == [b"base"]  # r was on a majority, but nothing of A's epoch was
    assert final == [b"base"]


@pytest.mark.timeout(60)
def test_without_the_epoch_start_rule_a_committed_record_is_lost(tmp_path: Path) -> None:
    committed_on_a, final = _earlier_epoch_commit_scenario(tmp_path, epoch_start_rule=False)
    assert len(committed_on_a) == 2 and committed_on_a[1].startswith(b"rrr")  # A took r as committed ...
    assert final == [b"base"]  # ... and the quorum went on without it
