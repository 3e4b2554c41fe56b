"""The failure watcher in one process: who is watched (pure functions), and what an interruption
does, with a child process standing in for a peer (a singleton job whose plan is given a second
"active rank": the child, watched through its pidfd)."""
import json
import subprocess
import sys
import textwrap

import pytest

from dpmpi import watcher
from dpmpi.watcher import Ident, Mode


def ident(kernel="k1", ns=(1, 2), pid=100, ok=True):
    return Ident(kernel, ns, pid, 1, ok)


def test_local_peers_are_the_same_kernel_and_pid_namespace():
    procs = {0: ident(pid=10), 1: ident(pid=11), 2: ident("k2", pid=12), 3: ident(ns=(1, 3), pid=13), 4: ident(pid=14)}
    assert watcher.local_peers(procs, 0, [0, 1, 2, 3]) == [1]
    assert watcher.local_peers(procs, 0, [4, 2, 1]) == [4, 1]  # the order given
    assert watcher.local_peers(procs, 2, [0, 1, 2, 3]) == []
    no_pidfd = {**procs, 0: ident(pid=10, ok=False)}
    assert watcher.local_peers(no_pidfd, 0, [1, 4]) == []


def test_spares_watch_actives_of_their_own_namespace_only_when_telling():
    from dpmpi.watchplan import watched_peers

    def p(pid, ns="job@1", kernel="k1"):
        return Ident(kernel, (1, 2), pid, 1, True, 0, ns, pid)

    procs = {0: p(10), 1: p(11), 2: p(12, kernel="k2"), 3: p(13, ns="job@2"), 4: p(14)}
    actives = [0, 1, 2, 3]
    assert watched_peers(procs, 0, actives, True, True) == [1, 3]  # an active rank: every local active
    assert watched_peers(procs, 0, actives, True, False) == [1, 3]
    # a spare (4): local actives of its namespace (a spawned one, 3, may end normally first)
    assert watched_peers(procs, 4, actives, False, True) == [0, 1]
    assert watched_peers(procs, 4, actives, False, False) == []  # not telling: nothing to watch
    assert watched_peers({**procs, 4: p(14, ns="")}, 4, actives, False, True) == []  # no PMIx name known


def test_ulfm_is_watched_when_some_pair_is_not_on_one_node():
    one_node = {0: ident(pid=10), 1: ident(pid=11)}
    assert not watcher.ulfm_needed(one_node, "auto")
    assert watcher.ulfm_needed(one_node, "1")
    assert watcher.ulfm_needed({0: ident(pid=10), 1: ident("k2", pid=11)}, "auto")
    assert watcher.ulfm_needed({0: ident(pid=10), 1: ident(pid=11, ok=False)}, "auto")
    assert not watcher.ulfm_needed({0: ident(pid=10), 1: ident("k2", pid=11)}, "0")


def test_mode_from_the_environment():
    procs = {0: ident(pid=10), 1: ident("k2", pid=11)}
    assert watcher.mode_from_env(procs, {}) == Mode(True, True)
    assert watcher.mode_from_env(procs, {"DPMPI_WATCH": "0"}) == Mode(False, False)
    assert watcher.mode_from_env(procs, {"DPMPI_WATCH_ULFM": "0"}) == Mode(True, False)
    with pytest.raises(ValueError, match="DPMPI_WATCH="):
        watcher.mode_from_env(procs, {"DPMPI_WATCH": "maybe"})
    with pytest.raises(ValueError, match="DPMPI_WATCH_ULFM="):
        watcher.mode_from_env(procs, {"DPMPI_WATCH_ULFM": "sometimes"})


SINGLETON = textwrap.dedent("""
    import dataclasses, json, os, subprocess, sys, time
    import dpmpi
    from dpmpi import interrupts, resilient, watcher
    from dpmpi.mpicall import _KEPT
    import numpy as np

    comm = dpmpi.init()
    st = resilient.current()
    w = watcher.current()
    out = {"started": w is not None}

    def peer():
        # a child process as a second active rank, watched through its pidfd
        child = subprocess.Popen(["sleep", "60"])
        w._fds.pop(1, None)  # process id 1 stands for a new process each time (never so in a job)
        me = watcher.identity()
        st.procs[1] = me._replace(pid=child.pid, start=watcher._start_ticks(child.pid), wtid=0)
        st.plan = dataclasses.replace(st.plan, actives=(0, 1))
        w.rearm()
        return child

    def noticed():
        t = time.monotonic()
        while not w.info()["noticed"] and time.monotonic() - t < 10:  # the C thread's notice
            time.sleep(0.001)
        return w.info()["noticed"]

    # 1. armed: a long GIL-released wait ends early with ProcFailedError
    child = peer()
    t0 = time.monotonic()
    try:
        with dpmpi.interrupt_on_failure():
            child.kill()
            time.sleep(20)
        out["sleep"] = "not interrupted"
    except dpmpi.ProcFailedError as exc:
        out["sleep"] = ["ProcFailedError", exc.noticed_by, exc.failed_ranks, round(time.monotonic() - t0, 3)]
    child.wait()

    # 2. not armed: nothing happens; the next armed block raises at its start
    child = peer()
    child.kill()
    out["noticed_unarmed"] = noticed()
    time.sleep(0.05)
    try:
        with dpmpi.interrupt_on_failure():
            out["entered"] = True
    except dpmpi.ProcFailedError:
        out["at_entry"] = True
    child.wait()

    # 3. dpmpi's own code is never interrupted: the failure is raised when it returns
    done = []

    @interrupts.uninterrupted
    def repair_like(child):
        child.kill()
        assert noticed()
        time.sleep(0.3)  # the signal arrived meanwhile; this must run to its end
        comm.Barrier()  # a dpmpi.Comm call nested inside: no interruption either
        done.append("body done")
        return "returned"

    child = peer()
    try:
        with dpmpi.interrupt_on_failure():
            done.append(repair_like(child))
    except dpmpi.ProcFailedError:
        done.append("raised after")
    out["deferred"] = done
    child.wait()

    # 3b. a signal that CPython takes without running its handler (seen when it arrives while the
    # main thread waits for the GIL; ignoring it stands in for that here) is sent again
    import signal
    signo = w.info()["signal"]
    child = peer()
    before = w.info()["signals"]
    t0 = time.monotonic()
    try:
        with dpmpi.interrupt_on_failure():
            old = signal.signal(signo, signal.SIG_IGN)
            child.kill()
            out["lost_noticed"] = noticed()
            signal.signal(signo, old)
            time.sleep(20)
        out["resent"] = "not interrupted"
    except dpmpi.ProcFailedError:
        out["resent"] = [round(time.monotonic() - t0, 3), w.info()["signals"] - before]
    child.wait()

    # 4. a re-arm with the peer gone from the plan (as a repair does) clears the notice
    st.plan = dataclasses.replace(st.plan, actives=(0,))
    w.rearm()
    with dpmpi.interrupt_on_failure():
        comm.Allreduce(np.ones(2), np.zeros(2))
    out["rearmed_clean"] = not w.info()["noticed"]

    # 5. a dpmpi.Request dropped while pending is kept (with its buffer) for the process's life
    n = len(_KEPT)
    buf = np.arange(3.0)
    comm.Isend(buf, dest=0, tag=5)
    out["kept"] = len(_KEPT) - n
    r = np.zeros(3)
    comm.Recv(r, source=0, tag=5)
    out["received"] = r.tolist()
    info = w.info()
    out["info"] = {k: info[k] for k in ("signals", "interrupts", "peers", "ulfm")}
    print(json.dumps(out))
""")


def test_interruption_only_where_armed_and_never_inside_dpmpi_code(tmp_path):
    p = subprocess.run([sys.executable, "-c", SINGLETON], capture_output=True, text=True, timeout=90, cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["started"] is True
    kind, by, ranks, seconds = out["sleep"]
    assert (kind, by, ranks) == ("ProcFailedError", "pidfd", [1])
    assert seconds < 5, out  # not the 20 s of the sleep (measured here: a few ms)
    assert out["noticed_unarmed"] is True and out.get("at_entry") is True and "entered" not in out
    assert out["deferred"] == ["body done", "raised after"], out  # ran to its end, then raised
    assert out["lost_noticed"] is True and out["resent"] != "not interrupted", out
    seconds, sent = out["resent"]
    assert seconds < 5 and sent >= 2, out  # sent again (2, 4, 8, ... ms apart) until a handler ran
    assert out["rearmed_clean"] is True
    assert out["kept"] == 1 and out["received"] == [0.0, 1.0, 2.0]
    assert out["info"]["peers"] == 0 and out["info"]["ulfm"] is False


AFTER_PYTHON = textwrap.dedent("""
    import ctypes, dataclasses, subprocess
    import dpmpi
    from dpmpi import interrupts, resilient, watcher
    comm = dpmpi.init()
    st = resilient.current()
    child = subprocess.Popen(["sleep", "0.3"])  # a "peer" that ends while this process ends
    st.procs[1] = watcher.identity()._replace(pid=child.pid, start=watcher._start_ticks(child.pid), wtid=0)
    st.plan = dataclasses.replace(st.plan, actives=(0, 1))
    watcher.current().rearm()
    libc = ctypes.CDLL(None)
    libc.__cxa_atexit(libc.sleep, 1, None)  # a C exit handler that runs 1 s after Python has ended
    print("ending", flush=True)
""")


def test_a_peer_that_ends_after_python_ended_does_not_kill_this_process(tmp_path):
    # Python resets its signal handlers to SIG_DFL when it ends (before the exit agreement and
    # MPI_Finalize); the watcher's real-time signal would then end the process (seen before the
    # fix: "Real-time signal 6", exit status 128 + 40)
    p = subprocess.run([sys.executable, "-c", AFTER_PYTHON], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert (p.returncode, p.stdout.strip()) == (0, "ending"), p.stderr


def test_a_signal_inside_the_regions_bookkeeping_never_leaves_the_thread_armed(monkeypatch):
    """The watcher's signal handled while ``armed().__exit__`` starts (its frame is skipped): the
    region must still end with the count back to 0, and nothing raised. CPython runs a handler
    again at once when it sends itself a signal; before, the handler re-sent it, the nested call
    raised inside __exit__ and the thread stayed armed, so a later notice was raised inside the
    runtime's recovery."""
    import signal
    from types import SimpleNamespace

    from dpmpi import interrupts

    class Failure(Exception):
        pass

    def immediate(tid, signum):  # what signal.pthread_kill does to the calling thread
        interrupts.on_signal(signum, SimpleNamespace(f_code=interrupts.on_signal.__code__))

    monkeypatch.setattr(signal, "pthread_kill", immediate)
    monkeypatch.setattr(interrupts, "_noticed", [1])  # a death was noticed
    monkeypatch.setattr(interrupts, "_failure", lambda: Failure("peer died"))
    region = interrupts.armed()
    with pytest.raises(Failure):  # noticed before the region: raised at its start, not armed after
        region.__enter__()
    assert interrupts._arm == 0
    monkeypatch.setattr(interrupts, "_noticed", [0])
    region = interrupts.armed()
    region.__enter__()
    assert interrupts._arm == 1
    monkeypatch.setattr(interrupts, "_noticed", [1])  # noticed while the step ran; handled as __exit__ starts
    interrupts.on_signal(signal.SIGUSR1, SimpleNamespace(f_code=type(region).__exit__.__code__))
    region.__exit__(None, None, None)
    assert interrupts._arm == 0
    interrupts.on_signal(signal.SIGUSR1, SimpleNamespace(f_code=test_a_signal_inside_the_regions_bookkeeping_never_leaves_the_thread_armed.__code__))  # not armed: no raise


def test_a_signal_handled_inside_the_handler_itself_does_not_raise_there(monkeypatch):
    """The watcher re-sends its signal until a handler acknowledges it, and CPython runs a
    handler at a call inside another: the nested call's frame was the handler's own (inside
    ``_not_here``, which makes calls), not skipped, so it raised while the outer call ran as
    ``armed().__exit__`` began, and the thread stayed armed (the next dpmpi call of the runtime's
    recovery then raised the failure inside it: one make test run, twenty-fifth session)."""
    import signal
    import sys
    from types import SimpleNamespace

    from dpmpi import interrupts

    class Failure(Exception):
        pass

    real = interrupts._not_here
    nested = []

    def not_here_with_a_signal(frame):  # the re-sent signal, handled at a call in here
        nested.append(interrupts.on_signal(signal.SIGUSR1, sys._getframe()))
        return real(frame)

    monkeypatch.setattr(interrupts, "_not_here", not_here_with_a_signal)
    monkeypatch.setattr(interrupts, "_noticed", [0])
    monkeypatch.setattr(interrupts, "_failure", lambda: Failure("peer died"))
    region = interrupts.armed()
    region.__enter__()
    monkeypatch.setattr(interrupts, "_noticed", [1])  # noticed while the step ran; handled as __exit__ starts
    interrupts.on_signal(signal.SIGUSR1, SimpleNamespace(f_code=type(region).__exit__.__code__))  # no raise
    assert nested == [None]
    region.__exit__(None, None, None)
    assert interrupts._arm == 0
    def step():
        pass

    monkeypatch.setattr(interrupts, "_not_here", real)
    monkeypatch.setattr(interrupts, "_noticed", [0])
    region = interrupts.armed()
    region.__enter__()
    monkeypatch.setattr(interrupts, "_noticed", [1])
    with pytest.raises(Failure):  # the program's frame in an armed region: raised (the guard was released)
        interrupts.on_signal(signal.SIGUSR1, SimpleNamespace(f_code=step.__code__))
    region.__exit__(Failure, None, None)
    assert interrupts._arm == 0 and interrupts._handling is False


def test_a_notice_handled_at_any_call_inside_dpmpis_marks_is_raised_when_dpmpi_code_returns(monkeypatch):
    """CPython runs the watcher's signal handler where it checks for pending work: at a function's
    entry and right after a call. Inside dpmpi's own marks (the region's start, defer_enter,
    defer_leave) the handler
    does nothing and leaves the notice to them. Each such point there is tried in turn (a tracer
    sees every instruction): the notice arriving at that point, with its signal handled there,
    must be raised when the dpmpi call returns. Before, defer_leave read the notice and then called
    bool(): a notice that came between the two was lost until the next dpmpi call (this test
    failed at that point)."""
    import dis

    from dpmpi import interrupts

    class Failure(Exception):
        pass

    noticed = [0]
    monkeypatch.setattr(interrupts, "_noticed", noticed)
    monkeypatch.setattr(interrupts, "_failure", lambda: Failure("peer died"))
    # (not the region's __exit__: a notice that arrives there is raised by the next region or call)
    region = type(interrupts.armed())
    marks = {interrupts.defer_enter.__code__, interrupts.defer_leave.__code__, region.__init__.__code__,
             region.__enter__.__code__}
    calls = {"CALL", "CALL_FUNCTION_EX", "CALL_FUNCTION", "CALL_METHOD", "CALL_FUNCTION_KW"}

    @interrupts.uninterrupted
    def dpmpi_call():
        return "done"

    k = 0
    while True:
        k += 1
        noticed[0] = 0
        seen, fired = [0], []

        def point(frame):
            seen[0] += 1
            if seen[0] == k:  # the notice arrives and its signal is handled right here
                noticed[0] = 1
                fired.append(frame.f_code.co_name)
                interrupts.on_signal(0, frame)

        def tracer(frame, event, arg):
            if frame.f_code not in marks:
                return None
            frame.f_trace_opcodes = True
            point(frame)  # the function's entry
            prev = [None]

            def local(frame, event, arg):
                if event == "opcode":
                    if prev[0] in calls:  # right after a call
                        point(frame)
                    prev[0] = dis.opname[frame.f_code.co_code[frame.f_lasti]]
                return local
            return local

        sys.settrace(tracer)
        try:
            with interrupts.armed():
                dpmpi_call()
            raised = False
        except Failure:
            raised = True
        finally:
            sys.settrace(None)
        if not fired:
            break  # every point tried
        assert raised, f"a notice handled at point {k} ({fired[0]}) was lost"
    assert k > 3 and interrupts._arm == 0 and interrupts._defer == 0


def test_a_notice_handled_inside_a_finalizer_waits_for_the_next_signal(monkeypatch):
    """The collector ran a request's __del__ inside a stranger's step just as the watcher's
    signal was handled: the ProcFailedError raised there was printed ("Exception ignored in")
    and lost. Now the handler leaves it unacknowledged (the watcher sends the signal again) and
    raises at the next signal handled outside the finalizer."""
    import signal
    import sys

    from dpmpi import interrupts

    Failure, acked = _notice_in_a_step(monkeypatch)
    seen = []

    class Dropped:
        def __del__(self):
            seen.append(interrupts.on_signal(signal.SIGUSR1, sys._getframe()))  # returns: no raise

    Dropped()
    assert seen == [None] and acked == [0]
    with pytest.raises(Failure):
        interrupts.on_signal(signal.SIGUSR1, sys._getframe())
    assert acked == [1]


def _notice_in_a_step(monkeypatch):
    """A watcher's notice pending while the main thread is in an armed region (a step): the
    exception class the handler raises, and the word it sets when it acknowledges."""
    from dpmpi import interrupts

    class Failure(Exception):
        pass

    acked = [0]
    monkeypatch.setattr(interrupts, "_noticed", [1])
    monkeypatch.setattr(interrupts, "_failure", lambda: Failure("peer died"))
    monkeypatch.setattr(interrupts, "_acked", acked)
    monkeypatch.setattr(interrupts, "_arm", 1)
    return Failure, acked


def test_a_notice_handled_inside_thread_start_waits_for_the_next_signal(monkeypatch):
    """The watcher's signal was handled while a stranger's step was inside threading's
    Thread.start (its wait for the new thread): the ProcFailedError raised there left the new
    thread to fail on "del _limbo[self]" (a KeyError traceback on stderr, its target never
    run). Now the handler leaves it unacknowledged there, and the next signal raises."""
    import signal
    import sys
    import threading

    from dpmpi import interrupts

    Failure, acked = _notice_in_a_step(monkeypatch)
    seen, ran = [], threading.Event()

    def tracer(frame, event, arg):  # (the handler, run at each line of Thread.start)
        if frame.f_code is threading.Thread.start.__code__ and event == "line":
            seen.append(interrupts.on_signal(signal.SIGUSR1, frame))
        return tracer if frame.f_code is threading.Thread.start.__code__ else None

    t = threading.Thread(target=ran.set)
    sys.settrace(tracer)
    try:
        t.start()
    finally:
        sys.settrace(None)
    t.join()
    assert seen and set(seen) == {None} and acked == [0] and ran.is_set()
    with pytest.raises(Failure):
        interrupts.on_signal(signal.SIGUSR1, sys._getframe())
    assert acked == [1]


def test_a_notice_handled_inside_asyncio_waits_for_the_next_signal(monkeypatch):
    """A stranger's step fetched its inputs with asyncio.run: cut while the event loop was being
    built, the loop failed in its __del__ ("Exception ignored", "coroutine ... was never
    awaited" on stderr). Inside asyncio's frames the handler now leaves the notice for the next
    signal, as inside a __del__."""
    import signal
    import sys
    from types import SimpleNamespace

    from dpmpi import interrupts

    Failure, acked = _notice_in_a_step(monkeypatch)
    step = sys._getframe()
    inner = SimpleNamespace(f_code=step.f_code, f_globals={"__name__": "asyncio.base_events"}, f_back=step)
    assert interrupts.on_signal(signal.SIGUSR1, inner) is None and acked == [0]
    with pytest.raises(Failure):
        interrupts.on_signal(signal.SIGUSR1, step)
    assert acked == [1]


def test_a_handle_whose_use_the_interruption_cut_short_is_let_go_of_by_the_repair(monkeypatch):
    """A failure raised where the watcher's signal lands inside dpmpi's code for ``sub.<method>``
    (each such point in turn: a function's entry and each line) must not keep ``sub`` alive once
    ``Respawn`` has let go of what the failed step unwound (``holding.let_go_of_unwound``): a
    handle alive at the repair counts as still in use, and the repair rebuilds it. Before, the
    signal handled inside the method's look-up left ``sub`` in the closure of a frame that the
    traceback kept; the repair rebuilt that step's ``Split`` and handed it to the replacement for
    its next ``Split``, which the others made anew: the job hung (about 1 in 300 runs of
    ``tests/programs/derived_per_step.py``, thirty-fifth session)."""
    import weakref

    from mpi4py import MPI

    import dpmpi
    from dpmpi.resilient import holding

    def step(sub):
        return sub.Get_size()  # (the first look-up of a method on a new handle: Comm.__getattr__)

    def after(box, failure):
        alive = weakref.ref(box.pop())  # (the only reference left: the failed step's frame)
        holding.let_go_of_unwound()
        assert alive() is None, f"a failure raised at {failure} kept the handle alive"

    points = _a_failure_at_each_point(monkeypatch, lambda: dpmpi.Comm(MPI.COMM_SELF), step, after)
    assert len(points) > 3, points


def test_a_first_look_up_cut_short_by_the_interruption_leaves_no_wrong_method_cached(monkeypatch):
    """The first look-up of ``Send_init`` caches dpmpi's wrapper and then the one that records each
    persistent request for the repair (``dpmpi.persistent``); a failure raised between the two
    left the first cached, and the requests made with it were not made again after a repair (their
    next start fails). A look-up is dpmpi's own code now: not interrupted, the failure raised
    as it returns. A failure at each point of the first look-up in turn: the next request made
    is recorded."""
    import numpy as np
    from mpi4py import MPI

    import dpmpi
    from dpmpi import persistent

    buf = np.zeros(4)

    def after(box, failure):
        comm = box[0]
        req = comm.Send_init(buf, dest=0, tag=7)
        try:
            assert persistent.tracked(comm) == 1, f"after a failure at {failure} the request was not recorded"
        finally:
            req.Free()

    points = _a_failure_at_each_point(monkeypatch, lambda: dpmpi.Comm(MPI.COMM_SELF), lambda c: c.Send_init, after)
    assert len(points) > 3, points


def _a_failure_at_each_point(monkeypatch, make, use, after):
    """For each point of dpmpi's code that ``use(make())`` runs through (a function's entry and
    each line, in turn): a watcher's notice arrives there and its signal is handled there; when
    the failure is raised, ``after([obj], point)`` checks what it left (called while the failure
    is handled, the notice cleared). Returns the points where a failure was raised."""
    import signal

    from dpmpi import interrupts

    Failure, _acked = _notice_in_a_step(monkeypatch)
    noticed = [0]
    monkeypatch.setattr(interrupts, "_noticed", noticed)  # (set only where the handler is to raise)
    # The tracer stands for CPython calling the watcher's handler in the frame it interrupts, with
    # no program frame between the two: it is made in a namespace named as dpmpi's modules are.
    space = {"__name__": "dpmpi.signal_stand_in", "interrupts": interrupts, "signal": signal, "noticed": noticed}
    exec(textwrap.dedent("""
        def tracer(frame, event, arg):
            if not frame.f_globals.get("__name__", "").startswith("dpmpi.") or frame.f_globals is globals():
                return None
            seen[0] += 1
            if seen[0] == k:
                fired.append(frame.f_code.co_name)
                noticed[0] = 1
                interrupts.on_signal(signal.SIGUSR1, frame)
            return tracer
    """), space)
    raised = []
    for k in range(1, 1000):
        space.update(k=k, seen=[0], fired=[])
        box = [make()]
        sys.settrace(space["tracer"])
        try:
            use(box[0])
        except Failure:
            sys.settrace(None)
            noticed[0] = 0
            raised.append(f"point {k} ({space['fired']})")
            after(box, raised[-1])
        finally:
            sys.settrace(None)
            noticed[0] = 0
        if not space["fired"]:
            return raised
    raise AssertionError("more than 1000 points")
