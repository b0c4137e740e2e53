"""What arrives on the wire, before it is state: the bounds every string and list is cut to
where it enters (``_bounds``), dropping non-finite values (``_sanitize``), and a batch read as
columns, each field once however many readers ask (``_columns``)."""

from ._bounds import bound_strings, bound_window_names
from ._columns import PHASES, SampleColumns, Samples, StepColumns, step_columns
from ._sanitize import clear_out_of_range, drop_far, drop_nonfinite

__all__ = ["PHASES", "SampleColumns", "Samples", "StepColumns", "bound_strings", "bound_window_names",
           "clear_out_of_range", "drop_far", "drop_nonfinite", "step_columns"]
