"""A Ray head this process starts and stops, and the GPU check of the cluster backbones.

`RayHead` runs `ray start --head --block` in its own process group, bound to
127.0.0.1, with a private temp dir and token auth off (a local, throw-away
cluster); `RAY_ADDRESS` points at it while it runs. It is stopped by the
process ids it started, never with `ray stop`, which kills every Ray on the
machine.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

from astuner.companions import free_port, stop_with_parent
from astuner.errors import AstunerError


def visible_gpus() -> int:
    """NVIDIA GPUs this machine shows (`nvidia-smi -L`); 0 when there is no driver."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))


def require_gpus(engine: str, gpus: int | None = None) -> int:
    """Fail with a clear message where `engine` cannot train: a machine without GPUs."""
    found = visible_gpus() if gpus is None else gpus
    if found == 0:
        raise AstunerError(
            f"The {engine} backbone trains on GPUs, and this machine has none (nvidia-smi lists no GPU). "
            f"Run it on a GPU node of your cluster; here, `astuner config show --backbone {engine}` "
            "prints the translated engine config and `--backbone torch` trains on CPU."
        )
    return found


def _descendants(pid: int) -> list[int]:
    """Every process below `pid` (psutil leaves out processes younger than their parent: reused ids)."""
    import psutil  # here: about 0.1 s to import, and only stopping a head needs it

    try:
        return [child.pid for child in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


class RayHead:
    """`with RayHead(ray_executable) as head:` a local Ray cluster at `head.address`."""

    def __init__(
        self,
        ray_executable: str = "ray",
        *,
        num_cpus: int | None = None,
        num_gpus: int | None = None,
        startup_timeout: float = 120.0,
    ) -> None:
        self.ray_executable = ray_executable
        self.num_cpus = num_cpus
        self.num_gpus = num_gpus
        self.startup_timeout = startup_timeout
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        # Ray puts unix sockets under the temp dir, whose path must stay short.
        self.temp_dir = Path(tempfile.mkdtemp(prefix="astray-", dir="/tmp"))
        self._process: subprocess.Popen[bytes] | None = None
        self._previous_address: str | None = None

    def command(self) -> list[str]:
        cmd = [
            self.ray_executable,
            "start",
            "--head",
            "--block",
            f"--port={self.port}",
            "--node-ip-address=127.0.0.1",
            f"--temp-dir={self.temp_dir}",
            "--include-dashboard=false",
            "--disable-usage-stats",
        ]
        if self.num_cpus is not None:
            cmd.append(f"--num-cpus={self.num_cpus}")
        if self.num_gpus is not None:
            cmd.append(f"--num-gpus={self.num_gpus}")
        return cmd

    def __enter__(self) -> RayHead:
        env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
        env.pop("RAY_ADDRESS", None)
        log = (self.temp_dir / "ray_start.log").open("wb")
        try:
            self._process = subprocess.Popen(
                self.command(),
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=stop_with_parent(),  # `ray start --block` stops its head when it gets SIGTERM
            )
        except FileNotFoundError as exc:
            raise AstunerError(
                f"Cannot start a Ray head: '{self.ray_executable}' was not found. Install the backbone's "
                "engine (it brings Ray), or start Ray yourself with `ray start --head`."
            ) from exc
        finally:
            log.close()
        self._wait_ready()
        self._previous_address = os.environ.get("RAY_ADDRESS")
        os.environ["RAY_ADDRESS"] = self.address
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        return self

    def _wait_ready(self) -> None:
        assert self._process is not None
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                self.stop()
                tail = (self.temp_dir / "ray_start.log").read_text(errors="replace")[-2000:]
                raise AstunerError(f"`ray start --head` exited with code {self._process.returncode}:\n{tail}")
            if (self.temp_dir / "ray_current_cluster").exists() and self._accepts():
                return
            time.sleep(0.2)
        self.stop()
        raise AstunerError(f"The Ray head did not come up within {self.startup_timeout:g} s.")

    def _accepts(self) -> bool:
        with socket.socket() as sock:
            sock.settimeout(0.5)
            return sock.connect_ex(("127.0.0.1", self.port)) == 0

    def stop(self) -> None:
        """Stop the head and everything it started, by process id: TERM, then KILL after 5 s."""
        if self._process is None:
            return
        pids = [self._process.pid, *_descendants(self._process.pid)]
        for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 0.0)):
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and any(_alive(p) for p in pids):
                self._process.poll()
                time.sleep(0.1)
        self._process.wait(timeout=10)
        self._process = None
        shutil.rmtree(self.temp_dir, ignore_errors=True)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
        if self._previous_address is None:
            os.environ.pop("RAY_ADDRESS", None)
        else:
            os.environ["RAY_ADDRESS"] = self._previous_address


def _alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def ray_head_for_run(with_ray: bool) -> contextlib.AbstractContextManager[object]:
    """A private Ray head for `astuner run --with-ray`, or nothing when not asked for."""
    if not with_ray:
        return contextlib.nullcontext()
    return RayHead(str(Path(sys.executable).with_name("ray")))
