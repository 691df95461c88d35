"""The pool's pure settings: the parsing of the worker count and of the CPU affinity, each
worker's CPU, and the workers' delivery seqs."""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.config import ConfigError, load_config
from actors.persistence import Persistence
from pool.cpu_affinity import worker_cpu


def test_workers_default_to_auto_one_per_cpu_core(tmp_path: Path) -> None:
    assert load_config(None).workers is None  # "auto"
    path = tmp_path / "broker.toml"
    path.write_text("[broker]\n", encoding="utf-8")
    assert load_config(path).workers is None


@pytest.mark.parametrize(("text", "workers"), [('"auto"', None), ("1", 1), ("4", 4)])
def test_broker_workers_key(tmp_path: Path, text: str, workers: int | None) -> None:
    path = tmp_path / "broker.toml"
    path.write_text(f"[broker]\nworkers = {text}\n", encoding="utf-8")
    assert load_config(path).workers == workers


@pytest.mark.parametrize("text", ["0", "-1", '"many"', "2.5", "2000"])
def test_bad_worker_counts_stop_the_broker_naming_the_key(tmp_path: Path, text: str) -> None:
    path = tmp_path / "broker.toml"
    path.write_text(f"[broker]\nworkers = {text}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"\[broker\] workers"):
        load_config(path)


def test_the_command_line_overrides_the_file(tmp_path: Path) -> None:
    path = tmp_path / "broker.toml"
    path.write_text("[broker]\nworkers = 4\n", encoding="utf-8")
    assert load_config(path, {"workers": "2"}).workers == 2
    assert load_config(path, {"workers": "auto"}).workers is None
    with pytest.raises(ConfigError, match="--workers"):
        load_config(path, {"workers": "zero"})


def test_workers_draw_disjoint_increasing_seqs() -> None:
    persistences = [Persistence(None) for _ in range(3)]
    for worker, persistence in enumerate(persistences):
        persistence.interleave(worker, 3, after=10)
    drawn = [[p.next_seq() for _ in range(5)] for p in persistences]
    assert all(seq > 10 for seqs in drawn for seq in seqs)
    assert all(seqs == sorted(seqs) for seqs in drawn)
    assert len({seq for seqs in drawn for seq in seqs}) == 15
    assert all(seq % 3 == worker for worker, seqs in enumerate(drawn) for seq in seqs)


def test_a_moved_session_s_seqs_come_before_the_new_ones() -> None:
    persistence = Persistence(None)
    persistence.interleave(1, 2)
    persistence.advance_past(100)
    upcoming = persistence.next_seq()
    assert upcoming > 100
    assert upcoming % 2 == 1


@pytest.mark.parametrize(
    ("setting", "worker", "workers", "cpus", "cpu"),
    [
        ("auto", 0, 2, [0, 1], 0),
        ("auto", 1, 2, [0, 1], 1),
        ("auto", 1, 2, [2, 5, 7], 5),  # the I-th CPU of the process's mask, not CPU I
        ("auto", 2, 3, [4, 6, 9], 9),
        ("auto", 0, 3, [0, 1], None),  # more workers than CPUs: the kernel shares them out
        ("auto", 0, 1, [0, 1], None),  # one process: nothing to keep apart
        ("none", 0, 2, [0, 1], None),
    ],
)
def test_each_worker_gets_a_cpu_of_its_own_when_there_are_enough(
    setting: str, worker: int, workers: int, cpus: list[int], cpu: int | None
) -> None:
    assert worker_cpu(setting, worker, workers, cpus) == cpu


def test_cpu_affinity_defaults_to_auto_and_takes_none(tmp_path: Path) -> None:
    assert load_config(None).cpu_affinity == "auto"
    path = tmp_path / "broker.toml"
    path.write_text('[broker]\ncpu_affinity = "none"\n', encoding="utf-8")
    assert load_config(path).cpu_affinity == "none"


@pytest.mark.parametrize("text", ['"all"', "1", "true", '["auto"]'])
def test_a_bad_cpu_affinity_stops_the_broker_naming_the_key(tmp_path: Path, text: str) -> None:
    path = tmp_path / "broker.toml"
    path.write_text(f"[broker]\ncpu_affinity = {text}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"\[broker\] cpu_affinity"):
        load_config(path)
