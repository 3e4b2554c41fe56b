"""dpmpi-bench's pure logic: argument parsing and defaults, the launcher's command lines, the
progress line, the cost model's fit on synthetic data, the recovery phases of a made-up job, and
the report from a tiny fake results directory. No MPI, no jobs (seconds)."""
import json
import math

import pytest

from dpmpi.bench import cli, common, e2e, model, overhead, plots, report, restore


# ---- arguments -----------------------------------------------------------------------------------
def test_sweeps_parse_and_quick_defaults_fill_the_rest():
    a = cli.parser().parse_args(["repair", "--ranks", "4,8,16", "--spares", "2", "--quick"])
    o = cli.resolve("repair", a)
    assert (o.ranks, o.spares, o.kills, o.respawn_ranks) == ([4, 8, 16], 2, 2, [4])  # given, then quick defaults
    full = cli.resolve("repair", cli.parser().parse_args(["repair"]))
    assert (full.ranks, full.kills) == ([4, 8], 20)
    assert cli.resolve("repair", cli.parser().parse_args(["repair", "--repeats", "7"])).kills == 7
    assert cli.resolve("chaos", cli.parser().parse_args(["chaos", "--repeats", "3", "--runs", "5"])).runs == 5
    s = cli.resolve("scale", cli.parser().parse_args(["scale", "--state-mib", "8,64,256"]))
    assert s.state_mib == [8.0, 64.0, 256.0] and s.ranks == [2, 4, 8, 16, 32]


def test_bad_lists_and_values_are_refused_with_a_message(capsys):
    with pytest.raises(SystemExit):
        cli.parser().parse_args(["repair", "--ranks", "4,x"])
    assert "--ranks: a comma-separated list of numbers, got '4,x'" in capsys.readouterr().err
    with pytest.raises(common.BenchError, match="--repeats must be >= 1"):
        cli.resolve("restore", cli.parser().parse_args(["restore", "--repeats", "0"]))
    with pytest.raises(common.BenchError, match="unknown workload 'lstm'"):
        e2e.workload("lstm", 8)
    assert e2e.workload("mlp-batch256", 64) == ("train_mlp", ["--state-mib", "64", "--batch", "256"])
    assert e2e.workload("accel250", 64) == ("train_mlp", ["--state-mib", "64", "--batch", "16", "--wait-ms", "250"])
    with pytest.raises(common.BenchError, match="unknown workload 'accel0'"):
        e2e.workload("accel0", 8)


def test_restore_splits_the_state_into_arrays_and_compares_with_one_array():
    o = cli.resolve("restore", cli.parser().parse_args(["restore", "--arrays", "1,600"]))
    quick = cli.resolve("restore", cli.parser().parse_args(["restore", "--quick"]))
    assert o.arrays == [1, 600] and quick.arrays == [1]
    assert (restore.key(32, 1), restore.key(32.5, 600)) == ("32", "32.5x600")
    point = lambda arrays, ms: {"state_mib": 32, "arrays": arrays, "ratio_copy": 1.0, "summary": {  # noqa: E731
        v: {"copy_ms_median": 3.0, "restore_ms_median": ms} for v in ("untouched", "touched")}}
    lines = restore.summary({"by_state_mib": {"32": point(1, 6.0), "32x600": {**point(600, 9.0), "vs_one_array": {
        "untouched": 1.5, "touched": 1.5}}}})
    assert lines[0].startswith("32 MiB per rank: restore copy median 3.0 ms")
    assert lines[1].startswith("32 MiB per rank in 600 arrays:") and lines[1].endswith("restore 9.0 ms, 1.50x one "
                                                                                     "array's (touched)")


def test_extra_mpirun_arguments_after_the_double_dash():
    own, extra = cli.split_argv(["all", "--quick", "--hostfile", "h", "--", "--mca", "btl_tcp_if_include", "ib0"])
    assert own == ["all", "--quick", "--hostfile", "h"] and extra == ["--mca", "btl_tcp_if_include", "ib0"]
    assert cli.split_argv(["report"]) == (["report"], [])


def test_launcher_puts_the_placement_before_the_program():
    plain = common.Launcher()
    cmd = plain.dpmpi_run(5, 1, ["python", "prog.py"])
    assert cmd[cmd.index("-n") + 1] == "5" and cmd[cmd.index("--spares") + 1] == "1"
    assert cmd[cmd.index("--") + 1:] == ["python", "prog.py"]
    assert "--oversubscribe" in plain.mpirun(4, ["p"])  # one machine: room for the ranks
    placed = common.Launcher("hosts", "ppr:4:node", ("--mca", "x", "y"))
    cmd = placed.dpmpi_run(5, 1, ["p"])
    head = cmd[:cmd.index("--")]
    assert head[-7:] == ["--hostfile", "hosts", "--map-by", "ppr:4:node", "--mca", "x", "y"]
    m = placed.mpirun(4, ["p"])
    assert "--oversubscribe" not in m and m[m.index("--hostfile") + 1] == "hosts" and m[-3:] == ["-n", "4", "p"]


def test_source_root_is_found_or_named(tmp_path):
    with pytest.raises(common.BenchError, match="dpmpi checkout"):
        common.source_root(start=str(tmp_path))
    for n in common.NEEDED:
        (tmp_path / n).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / n).write_text("")
    (tmp_path / "sub").mkdir()
    assert common.source_root(start=str(tmp_path / "sub")) == tmp_path.resolve()


def test_progress_line_counts_and_estimates():
    p = common.Progress("scale", 4, stream=None, t0=100.0)
    p.done = 1
    assert p.line("2+1 ranks", now=130.0) == "[scale 1/4, 0:30, ~1:30 left] 2+1 ranks"
    p.done = 4
    assert p.line("done", now=220.0) == "[scale 4/4, 2:00] done"


# ---- model -----------------------------------------------------------------------------------------
def test_log_fit_recovers_a_and_b_and_keeps_oversubscription_apart():
    cores = 2
    pts = [(n, 2.0 + 3.0 * math.log2(n) + 5.0 * model.oversub(n, cores)) for n in (2, 4, 8, 16, 32)]
    f = model.fit_log(pts, cores)
    assert f["a_ms"] == pytest.approx(2.0, abs=1e-6) and f["b_ms_per_log2n"] == pytest.approx(3.0, abs=1e-6)
    assert f["c_ms_per_oversub"] == pytest.approx(5.0, abs=1e-6) and f["rmse_ms"] < 1e-6
    assert model.predict(f, 4096) == pytest.approx(2.0 + 3.0 * 12)  # one rank per core: no oversubscription


def test_fit_never_returns_a_negative_cost():
    f = model.fit_log([(2, 10.0), (4, 8.0), (8, 6.0), (16, 4.0)], cores=10 ** 6)  # falling with n
    assert f["b_ms_per_log2n"] == 0.0 and f["c_ms_per_oversub"] == 0.0 and f["a_ms"] == pytest.approx(7.0)
    with pytest.raises(ValueError):
        model.fit_log([(4, 1.0)], 2)


def test_bandwidth_fit():
    bw = model.fit_bandwidth([(b, 0.5 + b / 2e6) for b in (2**23, 2**26, 2**28)])  # 2 GB/s = 2e6 bytes/ms
    assert bw["gbs"] == pytest.approx(2.0, rel=1e-6) and bw["t0_ms"] == pytest.approx(0.5, abs=1e-6)
    assert model.transfer_ms(bw, 12.5e9, link_gbs=12.5) == pytest.approx(0.5 + 1000.0)


def fake_phases(n: int, mib: float) -> dict:
    rp = {"revoke": 0.1, "shrink": 1.0 + math.log2(n), "reassign": 0.5, "rebuild": 0.4, "agree": 0.5 * math.log2(n)}
    rs = {"quiesce": 0.0, "agree": 2.0, "transfer": 0.3 + mib * 2**20 / 3e6, "verify": 1.0, "copy": 1.0,
          "rereplicate_post": 0.1}
    return {"n": n, "detect_ms": 20.0, "repair_ms": sum(rp.values()), "restore_ms": sum(rs.values()),
            "resume_ms": 60.0, "recompute_ms": 5.0, "repair_phases_ms": rp, "restore_phases_ms": rs,
            "state_bytes": int(mib * 2**20)}


def test_fit_all_predicts_every_phase_at_512_and_4096():
    m = model.fit_all([fake_phases(n, 8) for n in (2, 4, 8, 16)], 10 ** 6, [fake_phases(2, s) for s in (8, 64)])
    p = m["predictions"]["4096"]
    assert p["shrink"] == pytest.approx(13.0, abs=1e-3) and p["agreement"] == pytest.approx(6.0, abs=1e-3)
    assert m["transfer"]["gbs"] == pytest.approx(3.0, rel=1e-3)
    assert set(m["predictions"]) == {"512", "4096"} and p["total"] > p["shrink"] + p["agreement"]


# ---- recovery phases and the report -------------------------------------------------------------
def test_phases_of_a_recovery_job():
    def rec(error, caught, repaired, restored, resumed, shrink):
        return {"error": error, "caught_at": caught, "repaired_at": repaired, "restored_at": restored,
                "resumed_at": resumed, "caught_up_at": resumed + 0.004,
                "repair": {"phases_ms": {"shrink": shrink, "agree": 1.0}}, "restore": {"ms": {"transfer": 2.0}}}
    job = {"kill": 100.0, "finals": [
        {"state_bytes": 8, "recoveries": [rec("ProcFailedError", 100.020, 100.030, 100.050, 100.055, 7.0)]},
        {"state_bytes": 8, "recoveries": [rec("", 100.031, 100.031, 100.052, 100.056, 0.0)]}]}  # the replacement
    ph = restore.phases(job)
    assert ph["detect_ms"] == pytest.approx(20.0) and ph["repair_ms"] == pytest.approx(11.0)
    assert ph["restore_ms"] == pytest.approx(21.0) and ph["resume_ms"] == pytest.approx(56.0)
    assert ph["repair_phases_ms"]["shrink"] == 7.0  # the survivors' (the replacement shrank nothing)
    assert overhead.expected_lost_ms(10, 50.0) == 250.0


def test_report_from_a_tiny_results_dir(tmp_path):
    rows = [fake_phases(n, 8) for n in (2, 4)]
    by_ranks = {str(r["n"]): dict(r, processes_per_core=1.0, oversubscribed=False, runs=[]) for r in rows}
    scale = {"bench": "scale", "note": "a note", "cores": 2, "machine": {"cpus": 2, "launcher": []},
             "by_ranks": by_ranks, "by_state_mib": {},
             "model": model.fit_all(rows, 2, [fake_phases(2, s) for s in (8, 64)])}
    ov = {"ranks": 4, "state_mib": 8, "workloads": {"accel": {"state_mib": 8, "copy_ms": 1.0, "sync_snapshot_ms": 3.0,
          "by_snapshot_every": {"0": {"step_ms": 50.0, "overhead_pct": 0.0, "extra_ms_per_snapshot": 0.0,
                                      "hidden_fraction": None, "expected_lost_ms": 0.0},
                                "2": {"step_ms": 51.0, "overhead_pct": 2.0, "extra_ms_per_snapshot": 2.0,
                                      "hidden_fraction": 0.3, "expected_lost_ms": 51.0}}}}}
    (tmp_path / "scale.json").write_text(json.dumps(scale))
    (tmp_path / "overhead.json").write_text(json.dumps(ov))
    (tmp_path / "chaos.json").write_text("{}")  # unreadable: said so in the page, the rest still written
    line = report.write(tmp_path)
    page = (tmp_path / "report.md").read_text()
    assert "3 results" in line
    assert "## Scale: repair and restore phases vs ranks" in page and "| shrink |" in page and "O(log n)" in page
    assert "| 2 | 51.0 | 2.0 |" in page  # the overhead table's K=2 row
    assert "(this result could not be read" in page
    if plots.available() is None:
        assert (tmp_path / "repair_vs_ranks.png").stat().st_size > 10_000
        assert (tmp_path / "overhead_tradeoff.png").is_file() and "![" in page
    else:
        assert "Plots skipped" in page


def test_all_runs_everything_but_what_is_skipped():
    assert cli.all_names(False, []) == list(cli.IN_ALL)
    assert "watcher" not in cli.all_names(True, []) and "scale" in cli.all_names(True, [])
    assert cli.all_names(False, ["repair", "scale"])[0] == "restore"
    with pytest.raises(common.BenchError, match="unknown subcommand"):
        cli.all_names(False, ["repare"])


def test_report_without_matplotlib_says_the_plots_were_skipped(tmp_path, monkeypatch):
    monkeypatch.setattr(plots, "available", lambda: "matplotlib is not available (ImportError: test)")
    (tmp_path / "restore.json").write_text(json.dumps({"active": 2, "by_state_mib": {"8": {
        "summary": {"untouched": {"copy_ms_median": 1.0}, "touched": {"copy_ms_median": 2.0,
                                                                     "restore_total_ms_median": 9.0}},
        "ratio_copy": 0.5}}}))
    line = report.write(tmp_path)
    page = (tmp_path / "report.md").read_text()
    assert "plots skipped: matplotlib is not available" in line and "Plots skipped: matplotlib" in page
    assert "| 8 | 1 | 1.0 | 2.0 | 0.5 | 9.0 |  |" in page and not list(tmp_path.glob("*.png"))
