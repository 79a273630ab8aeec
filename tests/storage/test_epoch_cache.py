"""The leader-epoch cache, scenario by scenario after Kafka's LeaderEpochFileCacheTest."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage.checkpoint import LeaderEpochCheckpoint
from storage.epoch_cache import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, EpochEntry, LeaderEpochFileCache

UNDEFINED = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


@pytest.fixture
def checkpoint(tmp_path: Path) -> LeaderEpochCheckpoint:
    return LeaderEpochCheckpoint(tmp_path / "leader-epoch-checkpoint")


@pytest.fixture
def cache(checkpoint: LeaderEpochCheckpoint) -> LeaderEpochFileCache:
    return LeaderEpochFileCache(checkpoint)


def entries(*pairs: tuple[int, int]) -> list[EpochEntry]:
    return [EpochEntry(e, o) for e, o in pairs]


def given_epochs(cache: LeaderEpochFileCache, *pairs: tuple[int, int]) -> None:
    for epoch, start in pairs:
        cache.assign(epoch, start)


# -- assign ----------------------------------------------------------------------------------------


def test_an_assigned_epoch_ends_at_the_log_end_while_it_is_the_latest(cache: LeaderEpochFileCache) -> None:
    cache.assign(2, 10)
    assert cache.epoch_entries() == entries((2, 10))
    assert cache.end_offset_for(2, log_end_offset=11) == (2, 11)


def test_the_latest_epoch_is_answered_with_the_log_end_offset(cache: LeaderEpochFileCache) -> None:
    given_epochs(cache, (2, 5), (3, 6), (4, 7))
    assert cache.end_offset_for(4, log_end_offset=9) == (4, 9)


def test_an_undefined_epoch_request_is_answered_undefined(cache: LeaderEpochFileCache) -> None:
    given_epochs(cache, (2, 5), (3, 6))
    assert cache.end_offset_for(UNDEFINED_EPOCH, log_end_offset=9) == UNDEFINED


def test_an_empty_cache_answers_undefined_for_any_epoch(cache: LeaderEpochFileCache) -> None:
    assert cache.latest_epoch is None
    assert cache.end_offset_for(7, log_end_offset=73) == UNDEFINED
    assert cache.end_offset_for(UNDEFINED_EPOCH, log_end_offset=73) == UNDEFINED


def test_the_same_epoch_at_a_later_offset_does_not_move_its_start(cache: LeaderEpochFileCache) -> None:
    assert cache.assign(2, 6)
    assert not cache.assign(2, 7)
    assert not cache.assign(2, 6)
    assert cache.epoch_entries() == entries((2, 6))


def test_an_epoch_starting_below_the_latest_start_replaces_the_conflicting_entries(
    cache: LeaderEpochFileCache,
) -> None:
    cache.assign(2, 9)
    cache.assign(3, 8)
    assert cache.epoch_entries() == entries((3, 8))


def test_the_latest_epoch_reassigned_earlier_truncates_to_the_new_start(cache: LeaderEpochFileCache) -> None:
    given_epochs(cache, (5, 11), (6, 12), (7, 13))
    cache.assign(7, 12)
    assert cache.epoch_entries() == entries((5, 11), (7, 12))


def test_an_older_epoch_at_a_later_offset_drops_every_newer_epoch(cache: LeaderEpochFileCache) -> None:
    given_epochs(cache, (1, 5), (2, 6))
    cache.assign(1, 7)
    assert cache.epoch_entries() == entries((1, 7))
    assert cache.latest_epoch == 1
    assert cache.end_offset_for(2, log_end_offset=8) == UNDEFINED


def test_negative_epochs_and_offsets_are_rejected(cache: LeaderEpochFileCache) -> None:
    with pytest.raises(ValueError):
        cache.assign(-1, 5)
    with pytest.raises(ValueError):
        cache.assign(3, -1)
    assert cache.epoch_entries() == []


# -- end_offset_for --------------------------------------------------------------------------------


def test_an_epoch_below_the_first_is_answered_with_the_first_start_offset(
    cache: LeaderEpochFileCache,
) -> None:
    given_epochs(cache, (5, 11), (6, 12), (7, 13))
    assert cache.end_offset_for(4, log_end_offset=14) == (4, 11)


def test_a_previous_epoch_ends_where_the_next_one_starts(cache: LeaderEpochFileCache) -> None:
    given_epochs(cache, (1, 5), (1, 6), (2, 7), (2, 8))
    assert cache.end_offset_for(1, log_end_offset=9) == (1, 7)


def test_a_missing_epoch_is_answered_with_the_largest_epoch_below_it(cache: LeaderEpochFileCache) -> None:
    given_epochs(cache, (0, 10), (2, 13), (4, 17))
    assert cache.end_offset_for(0, log_end_offset=20) == (0, 13)
    assert cache.end_offset_for(1, log_end_offset=20) == (0, 13)
    assert cache.end_offset_for(2, log_end_offset=20) == (2, 17)
    assert cache.end_offset_for(3, log_end_offset=20) == (2, 17)
    assert cache.end_offset_for(4, log_end_offset=20) == (4, 20)


def test_an_epoch_above_every_known_epoch_is_answered_undefined(cache: LeaderEpochFileCache) -> None:
    cache.assign(2, 100)
    assert cache.end_offset_for(3, log_end_offset=101) == UNDEFINED


def test_epochs_need_not_start_at_zero(cache: LeaderEpochFileCache) -> None:
    cache.assign(2, 6)
    assert cache.end_offset_for(2, log_end_offset=7) == (2, 7)
    assert cache.earliest_entry == EpochEntry(2, 6)


# -- truncation ------------------------------------------------------------------------------------


def test_truncating_from_the_end_drops_entries_starting_at_or_after_the_offset(
    cache: LeaderEpochFileCache,
) -> None:
    given_epochs(cache, (2, 6), (3, 8), (4, 11))
    cache.truncate_from_end(11)
    assert cache.epoch_entries() == entries((2, 6), (3, 8))
    cache.truncate_from_end(9)
    assert cache.epoch_entries() == entries((2, 6), (3, 8))
    cache.truncate_from_end(8)
    assert cache.epoch_entries() == entries((2, 6))


def test_truncating_from_the_end_past_the_latest_start_or_undefined_changes_nothing(
    cache: LeaderEpochFileCache,
) -> None:
    given_epochs(cache, (2, 6), (3, 8), (4, 11))
    cache.truncate_from_end(12)
    cache.truncate_from_end(UNDEFINED_EPOCH_OFFSET)
    assert cache.epoch_entries() == entries((2, 6), (3, 8), (4, 11))


def test_truncating_from_the_start_on_an_epoch_boundary_drops_older_entries(
    cache: LeaderEpochFileCache,
) -> None:
    given_epochs(cache, (2, 6), (3, 8), (4, 11))
    cache.truncate_from_start(8)
    assert cache.epoch_entries() == entries((3, 8), (4, 11))


def test_truncating_from_the_start_inside_an_epoch_moves_its_start_up(cache: LeaderEpochFileCache) -> None:
    given_epochs(cache, (0, 0), (1, 7), (2, 10))
    cache.truncate_from_start(8)
    assert cache.epoch_entries() == entries((1, 8), (2, 10))


def test_truncating_from_the_start_before_the_first_entry_changes_nothing(
    cache: LeaderEpochFileCache,
) -> None:
    given_epochs(cache, (2, 6), (3, 8), (4, 11))
    cache.truncate_from_start(1)
    cache.truncate_from_start(6)
    cache.truncate_from_start(UNDEFINED_EPOCH_OFFSET)
    assert cache.epoch_entries() == entries((2, 6), (3, 8), (4, 11))


def test_truncating_from_the_start_past_every_start_keeps_the_latest_epoch(
    cache: LeaderEpochFileCache,
) -> None:
    given_epochs(cache, (2, 6), (3, 8), (4, 11))
    cache.truncate_from_start(11)
    assert cache.epoch_entries() == entries((4, 11))
    cache.truncate_from_start(12)
    assert cache.epoch_entries() == entries((4, 12))


def test_clearing_removes_every_entry_and_truncating_an_empty_cache_is_harmless(
    cache: LeaderEpochFileCache,
) -> None:
    given_epochs(cache, (2, 6), (3, 8))
    cache.clear()
    assert cache.epoch_entries() == []
    cache.truncate_from_end(5)
    cache.truncate_from_start(5)
    assert cache.latest_entry is None and cache.earliest_entry is None


# -- persistence -----------------------------------------------------------------------------------


def test_epochs_persist_between_instances(checkpoint: LeaderEpochCheckpoint, cache: LeaderEpochFileCache) -> None:
    given_epochs(cache, (2, 6), (5, 9))
    assert LeaderEpochFileCache(checkpoint).epoch_entries() == entries((2, 6), (5, 9))


def test_every_kind_of_mutation_reaches_the_checkpoint(
    checkpoint: LeaderEpochCheckpoint, cache: LeaderEpochFileCache
) -> None:
    given_epochs(cache, (0, 0), (1, 7), (2, 10))
    cache.truncate_from_end(10)
    assert checkpoint.read() == entries((0, 0), (1, 7))
    cache.truncate_from_start(8)
    assert checkpoint.read() == entries((1, 8))
    cache.clear()
    assert checkpoint.read() == []


def test_a_cache_without_checkpoint_keeps_entries_in_memory_only(tmp_path: Path) -> None:
    cache = LeaderEpochFileCache(None)
    cache.assign(1, 0)
    assert cache.epoch_entries() == entries((1, 0))
    assert list(tmp_path.iterdir()) == []
