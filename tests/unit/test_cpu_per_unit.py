"""loadtest.cpu_per_unit's arithmetic: CPU per process between samples, per role, per unit of
work, and the table that compares each worker count with one process."""

from __future__ import annotations

import pytest

from loadtest.cpu_per_unit import Run, by_role, cpu_used, markdown, ratios_to_one_process, shares


def test_cpu_used_counts_a_process_started_between_the_samples_whole() -> None:
    before = {10: 1.0, 11: 0.5}
    after = {10: 3.5, 11: 0.5, 12: 0.25}  # 12: a worker restarted during the run
    assert cpu_used(before, after) == {10: 2.5, 11: 0.0, 12: 0.25}


def test_a_process_that_ended_keeps_what_it_used_until_last_seen() -> None:
    # The sampler keeps the last figure of a process that exited; it still counts.
    assert cpu_used({20: 4.0}, {20: 6.0}) == {20: 2.0}


def test_by_role_adds_up_the_processes_of_one_role() -> None:
    used = {1: 0.25, 2: 3.0, 3: 1.0, 4: 0.5}
    roles = {1: "supervisor", 2: "worker 0", 3: "worker 0", 4: "store"}  # 3: worker 0 again
    assert by_role(used, roles) == {"supervisor": 0.25, "worker 0": 4.0, "store": 0.5}
    assert by_role({5: 1.0}, {}) == {"gone": 1.0}


def test_one_process_is_the_broker_unless_it_has_workers_then_it_supervises_a_pool_of_one() -> None:
    used = {1: 0.25, 2: 3.0, 3: 0.5}
    assert by_role(used, {1: "broker", 3: "store"}) == {"broker": 0.25, "gone": 3.0, "store": 0.5}
    assert by_role(used, {1: "broker", 2: "worker 0", 3: "store"}) == {
        "supervisor": 0.25,
        "worker 0": 3.0,
        "store": 0.5,
    }


def test_cost_per_unit_is_every_process_together() -> None:
    run = Run("fanout", 2, 0, 2_000_000, 5e6, {"supervisor": 0.5, "store": 0.5, "worker 0": 9.0,
                                              "worker 1": 10.0})  # fmt: skip
    assert run.cpu_s == 20.0
    assert run.us_per_unit == pytest.approx(10.0)
    assert Run("storm", 1, 0, 0, 0.0, {"broker": 1.0}).us_per_unit is None


def test_shares_in_per_cent_supervisor_and_store_first_then_workers_by_number() -> None:
    first = {"worker 10": 3.0, "worker 2": 4.0, "store": 2.0, "supervisor": 1.0}
    runs = [
        Run("fanin_qos0", 2, 0, 100, 1.0, first),
        Run("fanin_qos0", 2, 1, 100, 1.0, {"worker 10": 5.0, "worker 2": 5.0}),
    ]
    assert list(shares(runs).items()) == [
        ("supervisor", 5.0),
        ("store", 10.0),
        ("worker 2", 45.0),
        ("worker 10", 40.0),
    ]
    assert shares([]) == {}


def test_ratios_pair_each_repetition_with_one_process_in_the_same_repetition() -> None:
    runs = [
        Run("fanout", 1, 0, 1000, 1.0, {"broker": 0.010}),  # 10 µs per unit
        Run("fanout", 1, 1, 1000, 1.0, {"broker": 0.020}),  # 20 µs per unit
        Run("fanout", 2, 0, 1000, 1.0, {"worker 0": 0.006, "worker 1": 0.006}),  # 12
        Run("fanout", 2, 1, 1000, 1.0, {"worker 0": 0.010, "worker 1": 0.012}),  # 22
        Run("fanout", 2, 2, 1000, 1.0, {"worker 0": 0.010}),  # no one-process run to pair with
        Run("storm", 2, 0, 1000, 1.0, {"worker 0": 0.010}),  # another scenario
    ]
    assert ratios_to_one_process(runs, "fanout", 2) == pytest.approx([1.2, 1.1])
    assert ratios_to_one_process(runs, "storm", 2) == []


def test_markdown_table_rows_per_scenario_and_worker_count() -> None:
    runs = [
        Run("fanin_qos0", 1, 0, 1_000_000, 450e3, {"broker": 19.8, "store": 0.2}),
        Run("fanin_qos0", 2, 0, 1_000_000, 520e3,
            {"supervisor": 0.25, "store": 0.25, "worker 0": 12.0, "worker 1": 12.5}),
        Run("storm", 1, 0, 10_000, 18e3, {"broker": 0.6}),
        Run("storm", 4, 0, 10_000, 15e3,
            {"supervisor": 0.1, "store": 0.1, "worker 0": 0.2, "worker 1": 0.2, "worker 2": 0.2,
             "worker 3": 0.2}),
    ]  # fmt: skip
    table = markdown(runs, {("storm", 4): False}).splitlines()
    assert table[0].startswith("| scenario | workers | CPU µs per unit | / one process |")
    assert table[2:] == [
        "| QoS 0 fan-in, per delivered message | 1 | 20.0 | 1.00 | 450k | - / 1.00 / 99.0 | 1 |",
        "| QoS 0 fan-in, per delivered message | 2 | 25.0 | 1.25 | 520k "
        "| 1.00 / 1.00 / 48.0, 50.0 | 1 |",
        "| connection storm, per connection | 1 | 60.0 | 1.00 | 18.0k | - / 0.00 / 100 | 1 |",
        "| connection storm (not every worker), per connection | 4 | 100 | 1.67 | 15.0k "
        "| 10.0 / 10.0 / 20.0, 20.0, 20.0, 20.0 | 1 |",
    ]


def test_medians_and_ranges_over_repetitions() -> None:
    runs = [
        Run("fanout", 1, rep, 1000, rate, {"broker": seconds})
        for rep, (rate, seconds) in enumerate([(100.0, 0.010), (300.0, 0.030), (200.0, 0.020)])
    ]
    row = markdown(runs).splitlines()[2]
    assert row == (
        "| fan-out 1→100, per delivery | 1 | 20.0 [10.0-30.0] | 1.00 [1.00-1.00] "
        "| 200 [100-300] | - / 0.00 / 100 | 3 |"
    )
