"""Host contention is a cause, not a blame: replicas slowed by their machine are not blamed."""

from __future__ import annotations

import pandas as pd

from fleetwatch.fleet.outliers import (
    Cause,
    DetectorConfig,
    FleetTable,
    Side,
    detect,
    table_from_records,
)
from fleetwatch.scenarios.synthetic_fleet import synthetic_fleet

HOSTS = ["h0", "h0", "h1", "h1", "h2", "h2", "h3", "h3", "h4", "h4"]


def _table(tpot: list[float], **kw) -> FleetTable:
    idx = pd.Index([f"r{i}" for i in range(len(tpot))])
    return FleetTable(
        values=pd.DataFrame({"tpot": tpot}, index=idx),
        volume=pd.Series(1000.0, index=idx),
        **kw,
    )


def _hosts(names: list[str], n: int) -> pd.Series:
    return pd.Series(names, index=[f"r{i}" for i in range(n)])


BASE = [0.0200, 0.0202, 0.0199, 0.0201, 0.0200, 0.0198, 0.0201, 0.0200, 0.0199, 0.0202]


def test_every_replica_on_a_host_slowed_together_is_host_contention_and_nobody_is_blamed():
    tpot = BASE.copy()
    tpot[2], tpot[3] = 0.036, 0.038  # both replicas of h1
    report = detect(_table(tpot, host=_hosts(HOSTS, 10)))
    assert {f.replica for f in report.findings} == {"r2", "r3"}, report.render()
    for f in report.findings:
        assert (f.side, f.cause) == (Side.HOST, Cause.HOST_CONTENTION)
        assert any(
            e.startswith("host h1: 2 of its 2 replicas are off the fleet") for e in f.evidence
        )
        assert "host-side: no replica to blame" in f.evidence
    assert not [f for f in report.findings if f.side is Side.REPLICA]
    assert "host-side: host_contention" in report.render()


def test_a_slow_replica_whose_host_mate_is_fine_is_blamed():
    tpot = BASE.copy()
    tpot[2] = 0.036  # r2 slow, r3 on the same host is not
    [f] = detect(_table(tpot, host=_hosts(HOSTS, 10))).findings
    assert (f.replica, f.side, f.cause) == ("r2", Side.REPLICA, Cause.HARDWARE_OR_HOST)


def test_a_starved_process_is_host_contention():
    tpot = BASE.copy()
    tpot[4] = 0.036
    wait = pd.Series(0.01, index=[f"r{i}" for i in range(10)])
    wait["r4"] = 0.35
    [f] = detect(_table(tpot, cpu_wait=wait)).findings
    assert (f.replica, f.side, f.cause) == ("r4", Side.HOST, Cause.HOST_CONTENTION)
    assert any("waited for a CPU 35% of the time" in e for e in f.evidence)


def test_config_drift_stays_with_the_replica_even_on_a_contended_host():
    tpot = BASE.copy()
    tpot[2], tpot[3] = 0.036, 0.038
    idx = [f"r{i}" for i in range(10)]
    fp = pd.DataFrame({"engine_version": ["0.9"] * 3 + ["0.8"] + ["0.9"] * 6}, index=idx)
    report = detect(_table(tpot, host=_hosts(HOSTS, 10), fingerprint=fp))
    by = {(f.replica, f.signal): f for f in report.findings}
    assert by[("r3", "tpot")].side is Side.REPLICA
    assert by[("r3", "tpot")].cause is Cause.CONFIG_DRIFT
    assert by[("r2", "tpot")].side is Side.HOST


def test_host_mates_set_aside_by_a_re_judgement_are_still_counted():
    # A host-side finding is not blamed, so it is never set aside for an unmasked pass.
    tpot = BASE.copy()
    tpot[0], tpot[1] = 0.05, 0.05
    report = detect(_table(tpot, host=_hosts(HOSTS, 10)))
    assert {f.found_in for f in report.findings} == {"fleet"}
    assert not any("re-judged" in n for n in report.notes)


def test_records_carry_the_host_through_to_the_finding():
    df = synthetic_fleet(10, 300, seed=4, slowdown={0: 1.8, 1: 1.8})
    host = {f"replica-{i}": f"node-{i // 2}" for i in range(10)}
    report = detect(table_from_records(df, host=host), DetectorConfig())
    slow = {f.replica for f in report.findings}
    assert slow == {"replica-0", "replica-1"}, report.render()
    assert all(f.side is Side.HOST for f in report.findings)
    assert any(n.startswith("host node-0:") for n in report.notes), report.notes
