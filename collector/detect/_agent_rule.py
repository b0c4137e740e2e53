"""AgentRule: what the agents say about themselves: a rank's sidecar at its restart cap (one more
death and the rank reports nothing more), and two live agent sessions claiming one rank (a
misconfigured job whose steps would add up under one rank)."""

from __future__ import annotations

import re

from ._names import AGENT_RESTART_CAP, DUPLICATE_RANK
from ._rule import Rule
from ._types import WARNING, Condition

__all__ = ["AgentRule"]

_RESTART = re.compile(r"restart (\d+) of (\d+)")  # the agent's sidecar_restarted event message


class AgentRule(Rule):
    def events(self, job: str, rank: int, events) -> None:
        """A ``sidecar_restarted`` event at the agent's restart cap ("restart 5 of 5") raises
        StepwatchAgentRestartCap for the rank, which the collector could otherwise only see as
        a rank gone quiet. It lasts while the rank is known (until it expires, agent_grace_s
        after its last stream)."""
        for t, kind, message in events:
            m = _RESTART.search(message) if kind == "sidecar_restarted" else None
            if m is None or int(m.group(1)) < int(m.group(2)):
                continue
            summary = (f"the stepwatch sidecar of this rank died and was restarted {m.group(1)} of "
                       f"{m.group(2)} times (the agent's cap): when it dies again this rank stops "
                       f"reporting until the job restarts; the trainer's log says why it died")
            self.ctx.emit(("cap", job, rank), [Condition(AGENT_RESTART_CAP, job, rank, WARNING, summary, t)])

    def sessions(self, job: str, rank: int, live: dict, now: float) -> None:
        """The agent sessions connected as ``rank`` of ``job`` (``{session_id: "host pid N"}``):
        more than one is a misconfigured job (launcher without RANK, re-imported scripts)."""
        conds = []
        if len(live) > 1:
            who = ", ".join(sorted(live.values()))[:300]
            conds.append(Condition(
                DUPLICATE_RANK, job, rank, WARNING,
                f"{len(live)} agent sessions report as rank {rank} of job {job} ({who}); their steps add "
                f"up under one rank: give each process its own RANK (or attach(job=...))", now,
                for_s=self.cfg.liveness.duplicate_for_s))
        self.ctx.emit(("dup", job, rank), conds)

    def forget(self, job: str, rank: int, expired: bool) -> None:
        self.ctx.emit(("dup", job, rank), [])
        self.ctx.emit(("cap", job, rank), [])
