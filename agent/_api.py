"""Public entry points: attach(), step(), detach().

attach() resolves options (argument > environment > default; a bad value raises
:class:`~stepwatch.core.settings.SettingsError` right there, before training starts),
spawns the sidecar process and installs the optimizer step post-hook and the DataLoader
timer. After that nothing the agent does raises into, blocks or synchronizes the training
loop: hook bodies are guarded, errors are counted and reported, and a hook that keeps
failing disables itself.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any, Iterator, Optional

from stepwatch.core import contract
from ._dataloader import DataLoaderTimer
from ._identity import Identity, distributed_rank, identity_from_env
from ._ipc import PipeWriter
from ._options import AgentSettings
from ._phase_times import PhaseTimer
from ._steps import StepTracker
from ._windows import WindowScheduler
from stepwatch.core.settings import SettingsError, load, to_mapping

__all__ = ["attach", "step", "detach", "Agent"]

_log = logging.getLogger("stepwatch.agent")
_MAX_RESTARTS = 5  # sidecar restarts per attach
_MAX_CONSECUTIVE_ERRORS = 5
_DRAIN_TIMEOUT_S = 2.0  # bounded wait at exit for a full pipe; never more
_agent: Optional["Agent"] = None
_deferred = None  # the settings of an attach() in a multiprocessing child, until its first step


def _version() -> str:
    try:
        from importlib.metadata import version
        return version("stepwatch")
    except Exception:
        return "unknown"


class Agent:
    """One attached agent. Created by :func:`attach`; all methods run on the training thread."""

    def __init__(self, settings: AgentSettings, identity: Identity):
        import torch

        _cupti_teardown(torch)
        # Kineto logs two "USDT ... profiler_start/stop" lines on the trainer's stderr for every
        # window (~2,900 a day per rank at defaults); 6 is above its highest level. A user's own
        # KINETO_LOG_LEVEL wins. (Kineto also stops printing its errors; the agent notices a
        # window without GPU events itself.)
        os.environ.setdefault("KINETO_LOG_LEVEL", "6")
        dist = distributed_rank(torch)
        if dist is not None:  # torch.distributed is initialised: its rank wins
            identity = identity._replace(rank=dist[0], world_size=dist[1])
        # until torch.distributed is initialised, each step boundary checks whether it is now
        self._dist_pending = dist is None and _dist_available(torch)
        self.settings, self.identity = settings, identity
        self.session_id = uuid.uuid4().hex
        self.hook_errors = 0
        self._consecutive_errors = 0
        self._active = True
        self._torch = torch
        self._workdir = tempfile.mkdtemp(prefix=f"stepwatch-{self.session_id[:12]}-")
        self.sidecar = self._spawn_sidecar()
        fd, self._reply_fd = self._own_pipes()
        self._replies = contract.LineSplitter()
        self._writer = PipeWriter(fd, settings.buffer_records, settings.ipc_flush_interval_s)
        self._writer.put(self._config_record())
        self._writer.flush()
        self._gpu_record: Optional[dict] = None  # resent to a restarted sidecar
        self._restarts = 0
        self._dead_since: Optional[float] = None
        self.dataloader = DataLoaderTimer(on_silent=self._on_silent)
        self.dataloader.install()
        self.windows = WindowScheduler(self._put, torch, settings, self._workdir)
        self.phases = PhaseTimer(self.dataloader, settings.phase_budget)
        self.tracker = StepTracker(self._put, self.dataloader,
                                   torch.cuda if torch.cuda.is_available() else None,
                                   settings.samples_per_step, settings.tokens_per_step,
                                   settings.memory_stats_interval_s, self.windows.on_boundary,
                                   profiling=self.windows.profiling,
                                   phases=self.phases if self.phases.enabled else None)
        self._last_stats: tuple = ()
        from torch.optim.optimizer import register_optimizer_step_post_hook
        self._hook = register_optimizer_step_post_hook(self._on_optimizer_step)
        if identity.rank == 0:  # one line per job, so a user knows where to look
            _log.warning("stepwatch: reporting job %r (rank 0 of %d) to collector %s "
                         "(STEPWATCH_LOG_LEVEL=ERROR hides this line)", identity.job,
                         identity.world_size, settings.collector)

    # -- set-up -----------------------------------------------------------------------------
    def _spawn_sidecar(self) -> subprocess.Popen:
        env = dict(os.environ, OMP_NUM_THREADS="1")
        # Own session: a Ctrl-C to the trainer's process group must not kill the sidecar
        # before it has flushed; it exits on pipe EOF once the trainer is gone.
        # stdout is the sidecar's back channel (window results, capture commands).
        return subprocess.Popen([sys.executable, "-m", "stepwatch.agent._sidecar"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                                start_new_session=True, close_fds=True)

    def _own_pipes(self) -> tuple[int, int]:
        """Take the pipe ends from the Popen file objects as plain non-blocking fds we own.

        The file objects are closed at once: left alive, a later garbage collection of the
        Popen object would close the fd numbers again, after they may have been reused by
        someone else (a later agent's pipe, a user's file).
        """
        fds = []
        for stream in (self.sidecar.stdin, self.sidecar.stdout):
            fd = os.dup(stream.fileno())
            stream.close()
            os.set_blocking(fd, False)
            fds.append(fd)
        return fds[0], fds[1]

    def _put(self, record: dict) -> None:
        """Every record goes through here, so that a restarted sidecar gets a new writer."""
        if record.get("t") == contract.GPU:
            self._gpu_record = record
        self._writer.put(record)

    def _check_sidecar(self) -> None:
        """The sidecar died (killed, OOM-killed, crashed): start another, at most
        _MAX_RESTARTS times, waiting 1, 2, 4... s after each death. It takes over the same
        session and spool, so batches the dead one spooled are still delivered; what the
        trainer produced in between is counted as dropped, and the restart is reported as a
        ``sidecar_restarted`` event. Training thread, after a flush."""
        if not self._writer.closed and self.sidecar.poll() is None:
            self._dead_since = None
            return
        now = time.monotonic()
        if self._restarts >= _MAX_RESTARTS:
            return
        if self._dead_since is None:
            self._dead_since = now
        if now - self._dead_since < min(2.0 ** self._restarts, 30.0):
            return
        self._dead_since = None
        code = self.sidecar.poll()
        if code is None:  # the pipe broke but the process lives on: replace it
            self.sidecar.kill()
            code = self.sidecar.wait()
        self._restarts += 1
        old = self._writer
        old.abandon()  # what it still held never reached a sidecar: counted as dropped
        try:
            os.close(self._reply_fd)
        except OSError:
            pass
        self.sidecar = self._spawn_sidecar()
        fd, self._reply_fd = self._own_pipes()
        self._replies = contract.LineSplitter()
        self._writer = PipeWriter(fd, self.settings.buffer_records, self.settings.ipc_flush_interval_s)
        self._writer.dropped = old.dropped  # the gap: records produced while no sidecar read them
        self._writer.put(self._config_record())
        if self._gpu_record is not None:
            self._writer.put(self._gpu_record)
        self._event("sidecar_restarted", f"sidecar exited with code {code}; restart {self._restarts} of "
                    f"{_MAX_RESTARTS}; {old.dropped} records dropped so far")
        self._last_stats = ()  # resend the counters
        _log.warning("stepwatch: sidecar exited with code %s; restarted it (%d of %d)", code, self._restarts,
                     _MAX_RESTARTS)
        self._writer.flush()

    def _config_record(self) -> dict:
        s, ident, torch = self.settings, self.identity, self._torch
        hello = {"job": ident.job, "rank": ident.rank, "local_rank": ident.local_rank,
                 "world_size": ident.world_size, "host": ident.host, "pid": os.getpid(),
                 "session_id": self.session_id, "torch_version": str(torch.__version__),
                 "cuda_version": str(torch.version.cuda or ""), "agent_version": _version(),
                 "config": {k: str(v) for k, v in to_mapping(s, public=True).items()},
                 "attach_time_s": time.time()}
        return contract.config(to_mapping(s), hello, os.getpid(), self._workdir)

    # -- guarded hook bodies ----------------------------------------------------------------
    def _guard(self, fn, *args) -> None:
        if not self._active:
            return
        try:
            fn(*args)
            self._consecutive_errors = 0
        except Exception as exc:  # never into the training loop
            self.hook_errors += 1
            self._consecutive_errors += 1
            if self.hook_errors == 1:
                _log.warning("stepwatch: agent hook failed (%r); counting further failures", exc)
            self._event("hook_error", repr(exc)[:500])
            if self._consecutive_errors >= _MAX_CONSECUTIVE_ERRORS:
                self._event("hook_disabled", f"{_MAX_CONSECUTIVE_ERRORS} consecutive failures")
                _log.warning("stepwatch: agent disabled after %d consecutive hook failures",
                             _MAX_CONSECUTIVE_ERRORS)
                self._active = False
                self.dataloader.enabled = False
                self._writer.flush()

    def _on_optimizer_step(self, optimizer, args, kwargs) -> None:
        self._guard(self._optimizer_step, optimizer)

    def _optimizer_step(self, optimizer) -> None:
        self.tracker.on_optimizer_step(optimizer)
        self._after_step()

    def explicit_step(self, samples, tokens) -> None:
        self._guard(self._explicit_step, samples, tokens)

    def _explicit_step(self, samples, tokens) -> None:
        self.tracker.on_explicit_step(samples, tokens)
        self._after_step()

    def mark(self, kind: str) -> None:
        self._guard(self.tracker.mark, contract.phase_name(kind))

    def open_phase(self, kind: str) -> None:
        self._guard(self.tracker.open_phase, contract.phase_name(kind))

    def close_phase(self) -> None:
        self._guard(self.tracker.close_phase)

    def _on_silent(self, batches: int) -> None:
        """DataLoader watchdog (training thread): batches keep coming with no step boundary."""
        if not self._active:
            return
        message = (f"{batches} DataLoader batches without a step boundary: the optimizer step "
                   "hook does not fire (fused or compiled step, or no optimizer); call "
                   "stepwatch.agent.step() once per step")
        _log.warning("stepwatch: %s", message)
        self._event("hook_silent", message)
        self._writer.flush()  # no step boundary will flush it

    def _after_step(self) -> None:
        if self._dist_pending:
            self._check_distributed()
        stats = (self._writer.dropped, self.hook_errors, self.windows.windows,
                 sum(self.windows.skips.values()))
        if stats != self._last_stats:
            self._last_stats = stats
            self._writer.put(self._stats_record())
        if self._writer.maybe_flush():
            self._read_replies()
            self._check_sidecar()

    def _check_distributed(self) -> None:
        """torch.distributed got initialised after attach (mp.spawn scripts, launchers that set
        no RANK): its rank and world size win; the sidecar reconnects under them."""
        dist = distributed_rank(self._torch)
        if dist is None:
            return
        self._dist_pending = False
        if dist != (self.identity.rank, self.identity.world_size):
            self.identity = self.identity._replace(rank=dist[0], world_size=dist[1])
            self._writer.put(contract.identity(*dist))

    def _stats_record(self) -> dict:
        # (the phase times' own cost counts in the overhead the agent reports)
        return contract.stats(self._writer.dropped, self.hook_errors, self.windows.windows,
                              self.windows.skips, self.windows.overhead_ratio + self.phases.cost_ratio(),
                              self.windows.warmup_cost_s, self.windows.aftereffect_ratio)

    def _read_replies(self) -> None:
        """Non-blocking read of the sidecar's back channel; complete lines are handled."""
        try:
            chunk = os.read(self._reply_fd, 1 << 16)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            return
        for line in self._replies.feed(chunk):
            try:
                self.windows.on_message(contract.decode(line))
            except ValueError:
                self.hook_errors += 1

    def _event(self, kind: str, message: str) -> None:
        self._writer.put(contract.event(time.time(), kind, message))

    # -- tear-down --------------------------------------------------------------------------
    def close(self) -> None:
        """Final flush; closing the pipe tells the sidecar to send what is left and exit.

        Does not wait for the sidecar: the trainer's exit is never delayed by the network.
        Idempotent; also runs from atexit.
        """
        if self._writer.closed:
            return
        self._active = False
        try:
            self._hook.remove()
            self.phases.close()
            self.dataloader.uninstall()
            self.windows.close()
            self.tracker.poll()
            self._writer.put(self._stats_record())
            self._writer.put(contract.bye())
            self._writer.drain(_DRAIN_TIMEOUT_S)
            self._writer.close()
            os.close(self._reply_fd)
        except Exception as exc:
            _log.warning("stepwatch: detach failed: %r", exc)

    def after_fork_in_child(self) -> None:
        """A forked child (DataLoader worker) must never report as the trainer."""
        self._active = False
        self.dataloader.enabled = False
        self._writer.abandon()
        try:
            os.close(self._reply_fd)
        except OSError:
            pass


def _dist_available(torch) -> bool:
    try:
        return bool(torch.distributed.is_available())
    except Exception:
        return False


def _cupti_teardown(torch) -> None:
    """Have Kineto tear CUPTI down after each profiler window (``TEARDOWN_CUPTI=1``) unless
    the user chose otherwise. Without it CUPTI stays attached after the first window and every
    later step pays for it: measured on an H200 (torch 2.11, CUDA 13), +27.5% step time for the
    rest of a job after its first window, +8..18% in a
    micro-benchmark, against -0.0..+0.2% with teardown. Teardown crashed with CUDA graphs
    before CUDA 12.6, so older CUDA keeps Kineto's default."""
    try:
        major, minor = (int(x) for x in str(torch.version.cuda or "0.0").split(".")[:2])
    except ValueError:
        return
    if (major, minor) >= (12, 6):
        os.environ.setdefault("TEARDOWN_CUPTI", "1")


def attach(collector: Optional[str] = None, job: Optional[str] = None,
           samples_per_step: Optional[int] = None, tokens_per_step: Optional[int] = None,
           **options: Any) -> Optional[Agent]:
    """Start reporting this process's training steps. Call once, on the training thread.

    Returns the :class:`Agent`, or None when disabled (``STEPWATCH_DISABLE=1``), when the
    sidecar cannot be started, or when an environment variable holds a bad value (logged as
    one error line; training goes on). Raises ``SettingsError`` for an unknown option or an
    invalid value passed here as an argument, naming it. In a multiprocessing child (a spawned
    DataLoader worker re-importing the script, an ``mp.spawn`` trainer) it returns None and
    the agent starts at the process's first optimizer step or ``step()``: data workers never
    get one.
    """
    defer = options.pop("_defer", True)  # (the zero-code hook attaches from inside a step)
    args = dict(options, collector=collector, job=job, samples_per_step=samples_per_step,
                tokens_per_step=tokens_per_step)
    try:
        settings = load(AgentSettings, args)
    except SettingsError as exc:
        load(AgentSettings, args, environ={})  # a bad explicit argument raises: the caller's bug
        # A bad value from the environment or a config file (set cluster-wide, a typo) must not
        # kill the job: one error line, and training runs without the agent.
        _log.error("stepwatch: agent not started: %s; training goes on without it", exc)
        return None
    logging.getLogger("stepwatch").setLevel(settings.log_level)
    if settings.disable:
        return None
    if _agent is not None:
        _log.warning("stepwatch: attach() called twice; keeping the first agent")
        return _agent
    if defer and _in_child():
        _defer_until_first_step(settings)
        return None
    return _start(settings)


def check_options(**options: Any) -> str:
    """The error the agent would report for these ``attach()`` arguments, or "" when they are
    good (``stepwatch run`` checks its flags with it, to name the flag, not the variable)."""
    try:
        load(AgentSettings, options, environ={})
    except SettingsError as exc:
        return str(exc)
    return ""


def _in_child() -> bool:
    """A process started by multiprocessing (spawned DataLoader workers re-import the script,
    and with it an ``attach()`` at its top; ``mp.spawn`` trainers are children too)."""
    import multiprocessing
    # (while a spawned child re-imports the main module, parent_process() is still None; its
    # name is already the child's)
    return multiprocessing.parent_process() is not None or \
        multiprocessing.current_process().name != "MainProcess"


def _defer_until_first_step(settings: AgentSettings) -> None:
    """In a multiprocessing child, the agent starts at the process's first optimizer step (or
    ``step()``): a spawned DataLoader worker never steps, so it never gets an agent, a sidecar
    or a session, while an ``mp.spawn`` trainer is reported from its first step on."""
    global _deferred
    if _deferred is not None:
        return
    _deferred = settings
    try:
        import torch.optim.optimizer as optimizer_module
    except Exception:  # no torch: nothing will step
        return
    done = []

    def first_step(optimizer, args, kwargs):
        # (stays registered: removing it would change the dict torch iterates; one test after)
        if not done:
            done.append(True)
            _start_deferred()

    optimizer_module.register_optimizer_step_pre_hook(first_step)


def _start_deferred() -> None:
    global _deferred
    settings, _deferred = _deferred, None
    if settings is not None and _agent is None:
        _start(settings)


def _start(settings: AgentSettings) -> Optional[Agent]:
    global _agent
    try:
        _agent = Agent(settings, identity_from_env(settings.job))
    except Exception as exc:
        _log.warning("stepwatch: agent not started: %r", exc)
        return None
    atexit.register(detach)
    return _agent


def step(samples: Optional[int] = None, tokens: Optional[int] = None) -> None:
    """Mark a step boundary explicitly (fallback when optimizer hooks do not fire).

    From the first call on, optimizer hooks stop counting steps so nothing is counted twice.
    """
    if _agent is None and _deferred is not None:
        _start_deferred()
    if _agent is not None:
        _agent.explicit_step(samples, tokens)


def mark(kind: str) -> None:
    """Mark the step now running as containing a phase ``kind`` ("checkpoint", "log", ...):
    the collector counts it as a pause of that kind (``stepwatch_pauses_total{kind}``) and
    leaves the step out of drift and straggler detection. Cheap; never raises; a no-op when
    the agent is not attached. ``kind`` is made lower case ``[a-z0-9_]``, at most 32 chars."""
    if _agent is not None:
        _agent.mark(kind)


def current() -> Optional["Agent"]:
    """The agent attached in this process, or None (not attached, disabled, or deferred to the
    first step of a multiprocessing child)."""
    return _agent


def use_explicit_steps() -> None:
    """Step boundaries come from :func:`step` calls only from now on (framework callbacks call
    it before the first step): optimizer hooks stop counting, so no step is counted twice. A
    no-op when the agent is not attached."""
    if _agent is not None:
        _agent.tracker.explicit = True


def begin_pause(kind: str = "eval") -> None:
    """Begin a marked pause without a ``with`` block, for frameworks with begin and end hooks;
    :func:`end_pause` closes the innermost one. Cheap; never raises."""
    if _agent is not None:
        _agent.open_phase(kind)


def end_pause() -> None:
    """Close the innermost pause :func:`begin_pause` opened. Cheap; never raises."""
    if _agent is not None:
        _agent.close_phase()


@contextlib.contextmanager
def pause(kind: str = "eval") -> Iterator[None]:
    """``with agent.pause("eval"): evaluate()``: every step that overlaps the block (usually the
    one step the evaluation delays) is marked as :func:`mark` does. Nests and never raises;
    exceptions of the block pass through unchanged."""
    agent = _agent
    if agent is not None:
        agent.open_phase(kind)
    try:
        yield
    finally:
        if agent is not None:
            agent.close_phase()


def detach() -> None:
    """Stop reporting; flushes and lets the sidecar finish in the background. Idempotent."""
    global _agent
    agent, _agent = _agent, None
    if agent is not None:
        agent.close()


def _after_fork_in_child() -> None:
    global _agent
    agent, _agent = _agent, None
    if agent is not None:
        agent.after_fork_in_child()


os.register_at_fork(after_in_child=_after_fork_in_child)
