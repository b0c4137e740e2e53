"""The why: what changed on a rank between before and after an alert's onset. The evidence
store (:class:`Evidence`, a pipeline listener, ``_evidence``), the explaining rules
(:func:`diagnose`, :func:`against_others`, ``_explain``; the signals beside the phases,
``_signals``; profiler windows compared, :func:`compare_windows`, ``_windows``) and the wording
(:func:`fmt`, ``_words``). Alerting asks it when an episode is raised or moves; the analysis of
a trace (``stepwatch analyze``) compares windows with it."""

from ._evidence import Evidence
from ._explain import Diagnosis, against_others, diagnose
from ._windows import compare_windows
from ._words import fmt

__all__ = ["Evidence", "Diagnosis", "diagnose", "against_others", "compare_windows", "fmt"]
