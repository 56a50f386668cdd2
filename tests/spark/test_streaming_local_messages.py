"""Partition-local reassembly (issue 14, item 5) gives exactly the batch messages table."""

from __future__ import annotations

import pytest
from nbmq.examples import CAPTURE_DIR as CAPTURES

pytestmark = pytest.mark.spark


def test_local_reassembly_equals_the_shuffled_one(spark, tmp_path):
    from test_streaming import _generated_capture, _same

    from nbmq.spark.messages import build_messages
    from nbmq.spark.messages_local import build_messages_local, straddling_keys

    _generated_capture(tmp_path / "gen.pcap", messages=400)
    paths = [str(CAPTURES / n) for n in ("dealer.pcap", "dealer.pcapng", "radio_dish.pcap", "safe_dealer.pcap")]
    paths.append(str(tmp_path / "gen.pcap"))
    # small splits: pcap files are cut into byte ranges, so messages straddle range boundaries
    frames = spark.read.format("nbmq").option("split_bytes", str(256 * 1024)).load(paths)
    assert len(straddling_keys(frames)) > 0
    assert _same(build_messages_local(frames), build_messages(frames))
