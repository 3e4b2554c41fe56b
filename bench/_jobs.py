"""Shared by the benchmarks: run one job in its own session with a hard timeout."""
import os
import signal
import subprocess


def run_job(cmd: list[str], env: dict[str, str], cwd: str, timeout: float) -> tuple[int, str, str] | None:
    """(exit code, stdout, stderr), or None if the job hung (then its whole session is killed)."""
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return None
    return proc.returncode, out, err
