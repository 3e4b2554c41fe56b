"""Tier 1: what dpmpi-run adds for jobs over several nodes (dpmpi.node_loss; pure, no MPI)."""
from dpmpi import node_loss, run


def _prtemca(cmd):
    return {cmd[i + 1]: cmd[i + 2] for i, a in enumerate(cmd) if a == "--prtemca"}


def test_keepalives_between_daemons_by_default():
    cmd = run.build(run.parse_args(["-n", "2", "--", "p"]), "m", {})
    assert {k: v for k, v in _prtemca(cmd).items() if k.startswith("oob_tcp_keepalive")} == dict(node_loss.KEEPALIVE)


def test_the_users_keepalive_settings_replace_all_of_ours():
    cmd = run.build(run.parse_args(["-n", "2", "--prtemca", "oob_tcp_keepalive_time", "1", "--", "p"]), "m", {})
    assert [a for a in cmd if a.startswith("oob_tcp_keepalive")] == ["oob_tcp_keepalive_time"]
    assert cmd[cmd.index("oob_tcp_keepalive_time") + 1] == "1"


def test_a_lost_daemon_is_recognised_with_its_node():
    text = ("--------------------------------------------------------------------------\n"
            "PRTE has lost communication with a remote daemon.\n"
            "  HNP daemon   : [prterun-n0-1045@0,0] on node n0\n"
            "  Remote daemon: [prterun-n0-1045@0,1] on node n1\n"
            "This is usually due to either a failure of the TCP network\n")
    out = run.Outcome()
    for line in text.splitlines(keepends=True):
        out.note(line)
    assert out.lost.node == "node n1"
    quiet = run.Outcome()
    quiet.note("  Remote daemon: [x@0,1] on node n1\n")  # without the message before it
    assert quiet.lost.node is None


def test_a_lost_daemon_is_recognised_from_prrtes_trace_which_the_user_does_not_see():
    abort = "[n0:4] [prterun-n0-4@0,0] Comm failure: daemon [prterun-n0-4@0,1] - aborting\n"
    normal = "[n0:4] [prterun-n0-4@0,0] Comm failure: daemons terminating - recording daemon [p@0,1] as gone\n"
    state = "[n0:4] [prterun-n0-4@0,0] errmgr:dvm: for proc [prterun-n0-4@1,6] state ABORTED BY SIGNAL\n"
    lost = node_loss.LostDaemon(show_trace=False)
    assert [lost.note(line) for line in (state, normal)] == [False, False]
    assert lost.node is None  # a normal end
    assert lost.note(abort) is False and lost.node == "the node of PRRTE daemon 1"
    assert lost.note("the program's own line\n") is True
    assert node_loss.LostDaemon(show_trace=True).note(state) is True  # the user asked for the trace


def test_errmgr_trace_is_asked_for_unless_the_user_did():
    cmd = run.build(run.parse_args(["-n", "2", "--", "p"]), "m", {})
    assert _prtemca(cmd)["errmgr_base_verbose"] == "5"
    opts = run.parse_args(["-n", "2", "--prtemca", "errmgr_base_verbose", "1", "--", "p"])
    assert node_loss.traces_errmgr(opts.mpirun_args) and run.build(opts, "m", {}).count("errmgr_base_verbose") == 1


def test_a_rank_dead_before_its_mpi_init_returned_ends_a_job_stuck_in_mpi_init():
    from dpmpi import init_loss

    w = init_loss.InitWatch(4)
    dead = "[vm:02184] [prterun-vm-2184@0,0] errmgr:dvm: proc [prterun-vm-2184@1,1] aborted by signal\n"
    assert w.note("[dpmpi-init] 0\n") is False and w.note("[dpmpi-init] 3\n") is False  # dpmpi's own lines
    assert w.note(dead) is True and w.died and w.stuck() is None  # within the grace period
    now = w.died[1] + init_loss.GRACE
    assert w.stuck(now) == 1  # rank 2 is still inside MPI_Init: the job can never leave it
    assert "rank 1 died before its MPI_Init returned" in w.account(1)
    late = init_loss.InitWatch(4)  # its own line came after PRRTE's report: it had initialised
    late.note(dead)
    late.note("[dpmpi-init] 1\n")
    assert late.stuck(now + 60) is None
    done = init_loss.InitWatch(3)  # every live rank initialised: nobody waits in MPI_Init
    for line in ("[dpmpi-init] 0\n", "[dpmpi-init] 2\n", dead):
        done.note(line)
    assert done.stuck(now + 60) is None
    # rank 1 SIGKILLed in MPI_Init; rank 0's MPI_Init then failed ("unable to reach each other")
    # and aborted: nobody waits in MPI_Init, and ranks 2-4 form the job without them (a stranger's
    # job, thirty-sixth session: it was ended, exit code 1, while it ran)
    aborted = init_loss.InitWatch(5)
    for line in (dead, dead.replace("@1,1] aborted by signal", "@1,0] called abort with exit code 14"),
                 "[dpmpi-init] 2\n", "[dpmpi-init] 3\n", "[dpmpi-init] 4\n"):
        aborted.note(line)
    assert aborted.ended == {0} and aborted.stuck(now + 60) is None
    still = init_loss.InitWatch(5)  # the same with rank 4 still inside MPI_Init: stuck, rank 1 to blame
    for line in (dead, dead.replace("@1,1] aborted by signal", "@1,0] exited with non-zero status 14"),
                 "[dpmpi-init] 2\n", "[dpmpi-init] 3\n"):
        still.note(line)
    assert still.stuck(now + 60) == 1 and still.before_any_init() is None
    # every rank gone (one killed in MPI_Init, the others aborted in theirs): mpirun ends by itself,
    # but once it did not (prterun on a mutex in PRRTE's event loop; forty-second session), so a
    # while after the death it is ended too
    gone = init_loss.InitWatch(3)
    for line in (dead, dead.replace("@1,1] aborted by signal", "@1,0] called abort with exit code 14"),
                 dead.replace("@1,1] aborted by signal", "@1,2] called abort with exit code 14")):
        gone.note(line)
    t = gone.died[1] + init_loss.GRACE
    assert gone.stuck(t) is None and gone.stuck(t + init_loss.KILL_GRACE) == 1
    spawned = init_loss.InitWatch(4)  # a process of a spawned job (@2) is not a rank of the program's
    spawned.note(dead.replace("@1,1]", "@2,0]"))
    assert spawned.stuck(now + 60) is None
    # launching again (DPMPI_START_RETRIES) only when no rank's MPI_Init had returned
    assert w.before_any_init() is None and late.before_any_init() is None  # ranks 0 and 3 had initialised
    early = init_loss.InitWatch(4)
    early.note(dead)
    assert early.before_any_init() == 1
    assert init_loss.InitWatch(4).before_any_init() is None  # nobody died


def test_a_formation_that_a_death_left_stuck_is_seen_once_every_rank_entered_it_or_died():
    """dpmpi.init's formation of the job, after a death during start-up: the survivors stayed
    inside Open MPI's Shrink or an Allreduce for ever (thirty-sixth session). dpmpi-run ends such
    a launch ``DPMPI_FORM_TIMEOUT`` seconds after the last rank entered the formation or died,
    but never while a rank is still starting (the formation waits for it, however slow) nor
    once any rank came out of it."""
    from dpmpi import init_loss

    dead = "[vm:02184] [prterun-vm-2184@0,0] errmgr:dvm: proc [prterun-vm-2184@1,2] aborted by signal\n"
    w = init_loss.InitWatch(4)
    for r in (0, 1, 3):
        assert w.note(f"[dpmpi-init] {r}\n") is False and w.note(f"[dpmpi-forming] {r}\n") is False
    assert w.stuck_forming(5.0, now=1e12) is None  # rank 2 neither entered nor died: it may be slow
    w.note(dead)
    last = max([*w.forming.values(), *w.died.values()])
    assert w.stuck_forming(5.0, now=last + 4.9) is None and w.stuck_forming(5.0, now=last + 5.0) == 2
    assert w.stuck_forming(0.0, now=last + 1e6) is None  # (0: never)
    unknown = init_loss.InitWatch(2)  # every rank in it, no death reported (PRRTE said nothing)
    unknown.note("[dpmpi-forming] 0\n")
    unknown.note("[dpmpi-forming] 1\n")
    assert unknown.stuck_forming(5.0, now=unknown.forming[1] + 5.0) == -1
    aborted = init_loss.InitWatch(3)  # rank 2's MPI_Init aborted: it will never enter the formation
    for line in ("[dpmpi-forming] 0\n", "[dpmpi-forming] 1\n", dead.replace("@1,2] aborted by signal",
                                                                            "@1,2] called abort with exit code 14")):
        aborted.note(line)
    assert aborted.stuck_forming(5.0, now=aborted.forming[1] + 5.0) == -1
    w.note("[dpmpi-formed] 3\n")  # one rank came out: the job formed (a later death is a repair's)
    assert w.stuck_forming(5.0, now=last + 1e6) is None
    assert init_loss.InitWatch(4).stuck_forming(5.0, now=1e12) is None  # a program without dpmpi.init
    text = init_loss.formation_account(2, 60.0, 1, 2)
    assert text.startswith("rank 2 died during the job's start-up and the job's formation (dpmpi.init) did not "
                           "complete within 60 s") and "DPMPI_FORM_TIMEOUT" in text, text
    assert text.endswith("launching the job again, 1 of 2 (DPMPI_START_RETRIES)"), text
    assert init_loss.formation_account(-1, 60.0).startswith("the job's formation")
    assert init_loss.formation_account(-1, 60.0).endswith("dpmpi-run ended the job")


def test_stderr_is_held_until_a_rank_initialised_and_dropped_when_the_job_is_launched_again():
    from dpmpi import init_loss

    watch, shown = init_loss.InitWatch(2), []
    held = init_loss.HeldStderr(watch, shown.append)
    held.write(b"a\n")
    held.tick()
    assert shown == []  # no rank initialised yet
    watch.note("[dpmpi-init] 0\n")
    held.tick()
    held.write(b"b\n")
    assert shown == [b"a\n", b"b\n"]  # in order, then passing through
    assert held.drop() == 0
    dropped = init_loss.HeldStderr(init_loss.InitWatch(2), shown.append)
    dropped.write(b"Open MPI's account of a failed start-up\n")
    assert dropped.drop() == 1 and len(shown) == 2
    late = init_loss.HeldStderr(init_loss.InitWatch(2), shown.append, hold_s=0.0)  # held for at most hold_s
    late.write(b"c\n")
    ended = init_loss.HeldStderr(init_loss.InitWatch(2), shown.append)
    ended.write(b"d\n")
    ended.release()  # the launch ended and is not launched again
    assert shown[2:] == [b"c\n", b"d\n"]
    dying = init_loss.InitWatch(2)  # a rank died before its MPI_Init returned: held past hold_s, to the verdict
    dying.note("[vm:1] [prterun-vm-1@0,0] errmgr:dvm: proc [prterun-vm-1@1,1] aborted by signal\n")
    slow_end = init_loss.HeldStderr(dying, shown.append, hold_s=0.0)
    slow_end.write(b"unable to reach each other\n")
    slow_end.tick()
    assert slow_end.drop() == 1 and shown[2:] == [b"c\n", b"d\n"]
    busy = init_loss.HeldStderr(init_loss.InitWatch(2), shown.append, hold_s=0.0)
    with busy.out_lock:  # the pump thread inside a write that a slow reader of stderr blocks
        busy.tick()  # the main thread does not wait for it


def test_stderr_that_ends_without_an_end_of_line_is_ended_before_dpmpi_runs_own_line():
    """PRRTE wrote "LAUNCHER JOB OBJECT NOT FOUND" without a newline as mpirun's last bytes after
    a spawn (bench/strangers/respawn_runtime.py, two kills): dpmpi-run's account was glued to it,
    and a reader looking for lines that start with "dpmpi-run:" missed it."""
    import io

    from dpmpi import init_loss, ompi_notices

    shown = []
    watch = init_loss.InitWatch(1)
    watch.note("[dpmpi-init] 0\n")
    held = init_loss.HeldStderr(watch, shown.append)
    run.pump_stderr(io.BytesIO(b"a line\nLAUNCHER JOB OBJECT NOT FOUND"), run.Outcome(init=watch), held,
                    ompi_notices.Notices(held.write))
    held.release()
    assert shown == [b"a line\n", b"LAUNCHER JOB OBJECT NOT FOUND\n"], shown


_DEAD_SEGMENT = [
    b"--------------------------------------------------------------------------\n",
    b"A system call failed during shared memory initialization that should\n",
    b"not have.  It is likely that your MPI job will now either abort or\n",
    b"experience performance degradation.\n",
    b"\n",
    b"  Local host:  vm\n",
    b"  System call: open(2) \n",
    b"  Error:       No such file or directory (errno 2)\n",
    b"--------------------------------------------------------------------------\n",
]


def test_open_mpis_notice_of_a_dead_ranks_missing_segment_is_told_in_one_line_after_a_death_in_start_up():
    """Open MPI's "A system call failed during shared memory initialization ... open(2) ... No
    such file or directory" (no file name), which each survivor prints when its first message
    goes to a rank killed inside MPI_Init before it published its segment (thirty-sixth session:
    about 1 in 30-60 start-up kills, every job recovered right): held until the launch ends, then
    one line of dpmpi-run's after such a death; as it came otherwise. Other lines and help
    blocks go through."""
    from dpmpi import ompi_notices

    other = [_DEAD_SEGMENT[0], b"At least one pair of MPI processes are unable to reach each other for\n",
             _DEAD_SEGMENT[0]]
    lines = [b"before\n", *_DEAD_SEGMENT, b"3 more processes have sent help message help-opal-shmem-mmap.txt / sys call "
             b"fail\n", *other, b"after\n"]
    for death in (True, False):
        shown: list = []
        notices = ompi_notices.Notices(shown.append)
        for line in lines:
            notices.write(line)
        assert shown == [b"before\n", *other, b"after\n"]  # the notices held, the rest as it came
        notices.finish(death)
        if death:
            assert len(shown) == 6 and shown[-1].startswith(b"dpmpi-run: 4 process(es) printed Open MPI's"), shown
            assert b"died inside MPI_Init" in shown[-1]
        else:  # no death during start-up: a real problem, shown whole
            assert shown[5:] == [*_DEAD_SEGMENT, lines[10]], shown
    named = ompi_notices.Notices(shown.append)  # a segment with a name: another problem, shown
    shown.clear()
    for line in _DEAD_SEGMENT:
        named.write(line.replace(b"open(2) ", b"open(2) /dev/shm/sm_segment.vm.0.1.2"))
    assert len(shown) == len(_DEAD_SEGMENT)
    loose = ompi_notices.Notices(shown.append)  # a line of dashes that opens no block: held for a while only
    shown.clear()
    for k in range(ompi_notices.MAX_BLOCK - 1):
        loose.write(_DEAD_SEGMENT[0] if k == 0 else b"x\n")
    assert shown == []
    loose.write(b"x\n")
    assert len(shown) == ompi_notices.MAX_BLOCK
    loose.write(b"-" * 10 + b"\n")
    loose.write(_DEAD_SEGMENT[0])  # (an unended block at the end of the launch: shown then)
    loose.write(b"y\n")
    assert len(shown) == ompi_notices.MAX_BLOCK + 1
    loose.finish(True)
    assert shown[-2:] == [_DEAD_SEGMENT[0], b"y\n"], shown
