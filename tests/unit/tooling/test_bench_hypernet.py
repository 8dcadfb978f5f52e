"""The HyperNet bulk benchmark compares like with like: balanced order, medians of both sides."""

from __future__ import annotations

import asyncio

from benchmarks.bench_hypernet import BULK_ORDER, BulkSample, bulk_rows, sampled


def test_each_round_runs_each_side_first_as_often_as_second() -> None:
    assert BULK_ORDER.count("raw") == BULK_ORDER.count("ficc") == 2
    assert BULK_ORDER[::-1] == BULK_ORDER


def test_the_bulk_rows_are_the_medians_of_rate_and_cpu_per_mib_of_each_side() -> None:
    ficc = [BulkSample(300.0, 3.0), BulkSample(100.0, 4.0), BulkSample(200.0, 3.5)]
    raw = [BulkSample(250.0, 3.8), BulkSample(150.0, 3.6)]

    throughput, cpu = bulk_rows(ficc, raw)

    assert (throughput["metric"], throughput["unit"]) == ("throughput", "MB/s")
    assert (throughput["value"], throughput["baseline_value"], throughput["ratio"]) == (
        200.0,
        200.0,
        1.0,
    )
    assert (cpu["metric"], cpu["unit"]) == ("CPU per MiB", "ms")
    assert (cpu["value"], cpu["baseline_value"], cpu["ratio"]) == (3.5, 3.7, 0.946)


def test_a_sampled_transfer_keeps_its_rate_and_counts_the_cpu_it_took() -> None:
    async def transfer() -> float:
        return 123.0

    sample = asyncio.run(sampled(transfer()))

    assert sample.mb_per_second == 123.0
    assert sample.cpu_ms_per_mib >= 0.0
