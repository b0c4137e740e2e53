"""A run's record: what its agents' Hellos said (:class:`RunIdentity`), its ranks' settled
levels (:class:`Run`, as stored and served), its comparison with the run before it
(:class:`RunComparison`), and what differs between two runs (:func:`changes`). Pure values, no
I/O: detect/_lineage.py keeps the runs, detect/_run_store.py their records on disk."""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from typing import Optional

__all__ = ["brief", "RunIdentity", "RunComparison", "RankRun", "Run", "changes", "first_step"]

# agent settings that name paths, addresses or credentials: never "what changed"
_SETTINGS_IGNORED = frozenset({"job", "collector", "spool_dir", "trace_dir", "tls", "tls_ca", "tls_cert", "tls_key",
                               "auth_token", "token", "log_level"})


@dataclasses.dataclass(frozen=True)
class RunIdentity:
    """What a rank's Hello says about its run (the collector's wire types stay out of detect/)."""

    session: str
    world: int
    host: str = ""
    gpu: str = ""
    driver: str = ""
    torch: str = ""
    cuda: str = ""
    agent: str = ""
    attach_time_s: float = 0.0
    settings: tuple = ()  # sorted (name, value) pairs of the agent's effective settings

    def __post_init__(self) -> None:
        # The ranks of a run mostly say the same: one object for each distinct text and settings
        # tuple (each Hello's are new objects; 40 settings a rank made a 1,000-rank run's record
        # 5.7 MB, bench/results/run_record_start_2core.md)
        for name in ("host", "gpu", "driver", "torch", "cuda", "agent"):
            object.__setattr__(self, name, sys.intern(getattr(self, name)))
        object.__setattr__(self, "settings", _one(self.settings))

    @property
    def tokens(self) -> Optional[int]:
        return _count(dict(self.settings).get("tokens_per_step"))

    @property
    def samples(self) -> Optional[int]:
        return _count(dict(self.settings).get("samples_per_step"))


_SETTINGS: dict = {}  # settings tuple -> the one kept (cleared past _SETTINGS_MAX distinct ones)
_SETTINGS_MAX = 4096


def _one(settings: tuple) -> tuple:
    got = _SETTINGS.get(settings)
    if got is None:
        if len(_SETTINGS) >= _SETTINGS_MAX:
            _SETTINGS.clear()
        got = _SETTINGS[settings] = settings
    return got


def _count(text: Optional[str]) -> Optional[int]:
    try:
        n = int(str(text))
    except (TypeError, ValueError):
        return None
    return n if n > 0 else None


@dataclasses.dataclass(frozen=True)
class RunComparison:
    """A run's settled level against the newest settled run of its lineage (typed evidence of
    :data:`RUN_REGRESSION`): ``against`` that run's id and start (Unix), ``before_s`` /
    ``after_s`` seconds per step, ``ratio`` after/before, ``noise`` the two runs' spreads added
    (log), ``changed`` what differs ("torch 2.10.0 -> 2.11.0"), ``rank``/``rank_ratio`` a rank
    much slower than the others (None when none)."""

    against: str
    against_started: float
    before_s: float
    after_s: float
    ratio: float
    noise: float
    changed: tuple = ()
    rank: Optional[int] = None
    rank_ratio: Optional[float] = None
    rank_host: str = ""

    def text(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(self.against_started))
        word = "slower" if self.ratio >= 1 else "faster"
        out = (f"this run settled {abs(self.ratio - 1):.1%} {word} than the run of {when} "
               f"({1e3 * self.before_s:.1f} -> {1e3 * self.after_s:.1f} ms/step at the same tokens per step)")
        if self.rank is not None:
            out += (f"; rank {self.rank}{f' ({self.rank_host})' if self.rank_host else ''} "
                    f"settled {self.rank_ratio - 1:+.1%}, the job {self.ratio - 1:+.1%}")
        out += "; changed: " + (", ".join(self.changed) if self.changed else "nothing stepwatch sees (hosts, GPU, "
                                "driver, torch, CUDA, agent and its settings are the same)")
        return out


@dataclasses.dataclass
class RankRun:
    ident: RunIdentity
    first_step: Optional[int] = None
    settled_s: Optional[float] = None
    noise: Optional[float] = None  # log spread of 90 s medians at settling
    gone: bool = False


@dataclasses.dataclass
class Run:
    job: str
    run_id: str
    world: int
    tokens: Optional[int]
    samples: Optional[int]
    started_at: float
    ranks: dict = dataclasses.field(default_factory=dict)  # rank -> RankRun
    last_time: float = 0.0
    settled_s: Optional[float] = None
    noise: Optional[float] = None
    first_settled: Optional[float] = None  # data time the first rank settled
    compared: Optional[RunComparison] = None
    regression: bool = False
    ended: bool = False
    saved_at: float = -math.inf
    # the sessions of ``ranks`` (a Hello's membership test, once per rank: a set built from the
    # ranks at each Hello made a 3,000-rank job's start quadratic)
    sessions: set = dataclasses.field(default_factory=set, repr=False, compare=False)
    # ranks that joined after the run was resumed from its stored record (a collector restart)
    # under a session that record lacked: they may be the first ranks back of a job that
    # restarted meanwhile (Lineage moves them to the new run once that shows); None: not resumed
    joined_since_resume: Optional[set] = dataclasses.field(default=None, repr=False, compare=False)

    def record(self) -> dict:
        """The run as stored and served (``/api/jobs/<job>/runs``)."""
        ranks = {}
        settings: dict = {}  # one dict for each distinct settings of the ranks (read only, as the record)
        for rank, r in sorted(self.ranks.items()):
            i = r.ident
            kept = settings.get(i.settings)
            if kept is None:
                kept = settings[i.settings] = dict(i.settings)
            ranks[str(rank)] = {"session": i.session, "host": i.host, "gpu": i.gpu, "driver": i.driver,
                                "torch": i.torch, "cuda": i.cuda, "agent": i.agent, "settings": kept,
                                "first_step": r.first_step, "settled_s": r.settled_s, "noise": r.noise}
        per = self.tokens and self.settled_s and self.tokens / self.settled_s
        per_s = self.samples and self.settled_s and self.samples / self.settled_s
        return {"v": 1, "job": self.job, "run": self.run_id, "world_size": self.world,
                "tokens_per_step": self.tokens, "samples_per_step": self.samples,
                "started_at": self.started_at, "ended_at": self.last_time if self.ended else None,
                "last_data_at": self.last_time, "first_step": first_step(r.first_step for r in self.ranks.values()),
                "settled_step_s": self.settled_s, "noise": self.noise,
                "tokens_per_s": per or None, "samples_per_s": per_s or None,
                "compared": dict(dataclasses.asdict(self.compared), changed=list(self.compared.changed))
                if self.compared else None,
                "regression": self.regression, "ranks": ranks}

    @classmethod
    def from_record(cls, rec: dict) -> "Run":
        run = cls(job=str(rec["job"]), run_id=str(rec["run"]), world=int(rec["world_size"]),
                  tokens=rec.get("tokens_per_step"), samples=rec.get("samples_per_step"),
                  started_at=float(rec["started_at"]), last_time=float(rec.get("last_data_at") or 0.0),
                  settled_s=rec.get("settled_step_s"), noise=rec.get("noise"),
                  regression=bool(rec.get("regression")), ended=rec.get("ended_at") is not None)
        for rank, r in (rec.get("ranks") or {}).items():
            ident = RunIdentity(session=str(r.get("session", "")), world=run.world, host=str(r.get("host", "")),
                                gpu=str(r.get("gpu", "")), driver=str(r.get("driver", "")),
                                torch=str(r.get("torch", "")), cuda=str(r.get("cuda", "")),
                                agent=str(r.get("agent", "")),
                                settings=tuple(sorted((str(k), str(v)) for k, v in (r.get("settings") or {}).items())))
            run.ranks[int(rank)] = RankRun(ident, r.get("first_step"), r.get("settled_s"), r.get("noise"))
            run.sessions.add(ident.session)
        comp = rec.get("compared")
        if isinstance(comp, dict):
            run.compared = RunComparison(**{**comp, "changed": tuple(comp.get("changed") or ())})
        return run


def brief(record: dict) -> dict:
    """``record`` without its per-rank entries, with what a list of runs shows of them:
    ``rank_count`` and the sorted distinct ``hosts`` and ``torch`` (a record as it is when it
    has no "ranks": already brief)."""
    ranks = record.get("ranks")
    if ranks is None:
        return record
    out = {k: v for k, v in record.items() if k != "ranks"}
    out["rank_count"] = len(ranks)
    for key, field in (("hosts", "host"), ("torch", "torch")):
        out[key] = sorted({str(r.get(field, "")) for r in ranks.values() if isinstance(r, dict)})
    return out


def first_step(values) -> Optional[int]:
    vals = [v for v in values if v is not None]
    return min(vals) if vals else None


def changes(before: Run, after: Run) -> list:
    """What differs between two runs: per-rank hosts (the rank named where the job has several),
    then the GPU model, driver, torch, CUDA and agent version, and each agent setting."""
    out = []
    many = len(after.ranks) > 1
    for rank in sorted(after.ranks):
        a, b = after.ranks[rank].ident, before.ranks.get(rank)
        if b is not None and b.ident.host != a.host:
            out.append(f"host{f' of rank {rank}' if many else ''} {b.ident.host} -> {a.host}")
    first_a = after.ranks[min(after.ranks)].ident
    first_b = before.ranks[min(before.ranks)].ident if before.ranks else None
    if first_b is not None:
        for name, field in (("GPU", "gpu"), ("driver", "driver"), ("torch", "torch"), ("CUDA", "cuda"),
                            ("agent", "agent")):
            x, y = getattr(first_b, field), getattr(first_a, field)
            if x != y:
                out.append(f"{name} {x or '?'} -> {y or '?'}")
        sa, sb = dict(first_a.settings), dict(first_b.settings)
        for k in sorted(set(sa) | set(sb)):
            if k not in _SETTINGS_IGNORED and sa.get(k) != sb.get(k):
                out.append(f"{k} {sb.get(k, '(unset)')} -> {sa.get(k, '(unset)')}")
    return out
