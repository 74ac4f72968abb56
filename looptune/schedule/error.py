"""The one error a schedule raises for an illegal request."""


class ScheduleError(ValueError):
    """An illegal schedule request. The message names the block, loop or buffer and what to
    do instead; the schedule is left as it was before the request."""
