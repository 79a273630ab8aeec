"""The key partitioner hashes like Kafka's, so a key lands where a Kafka producer would put it."""

from __future__ import annotations

import pytest

from client.partitioner import murmur2, partition_for_key


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        # The vectors of Kafka's UtilsTest.testMurmur2.
        (b"21", -973932308),
        (b"foobar", -790332482),
        (b"a-little-bit-long-string", -985981536),
        (b"a-little-bit-longer-string", -1486304829),
        (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
        (b"abc", 479470107),
    ],
)
def test_murmur2_matches_kafka(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


def test_a_key_always_maps_to_the_same_partition_in_range() -> None:
    parts = {partition_for_key(f"user-{i}".encode(), 6) for i in range(200)}
    assert parts == set(range(6))
    assert partition_for_key(b"user-7", 6) == partition_for_key(b"user-7", 6)
