"""What arrives on the wire, before it is state: the bounds every string and list is cut to
where it enters (``_bounds``), dropping non-finite values (``_sanitize``), and a batch read as
columns, each field once however many readers ask (``_columns``)."""
